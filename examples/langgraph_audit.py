"""Audit a refereed agent's log afterwards: every decision, who approved what, when.

    python examples/langgraph_audit.py --db PATH [--json]

Reads the log examples/langgraph_agent.py left in PATH (or any devs-recovery
SQLite log), replays each task's history from its events, and prints, in
order: the attempts and the gates that judged them (exit code, the hash of
its error, and the error's hash), the lessons, every suspension (why, its
session) and the human who answered it (action, reason, time, how long the
agent waited). It also checks the read models against a fold of the log
(``RecoveryService.verify()``).

Exit status: 0 when the log verifies and every suspension was answered by a
named human or is still pending; 1 otherwise; 2 when PATH holds no log.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from devs.adapters.config import Settings, open_service
from devs.domain import RecoveryService

HUMAN = {"Resumed", "Rewound", "Skipped", "HandoffClaimed", "HandoffResolved"}
SUSPENDING = {"Paused", "Escalated", "HandedOff"}


def audit(service: RecoveryService) -> tuple[list[dict[str, Any]], list[str]]:
    """One record per decision, and the problems found."""
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    for entry in service.tasks():
        opened: dict[str, datetime] = {}  # session id -> when it was opened
        for event in service.history(entry.task_id):
            changes = event.changes
            record: dict[str, Any] = {
                "task": entry.task_id,
                "version": event.version,
                "at": event.timestamp.isoformat(),
                "event": event.event,
                "state": str(event.state),
            }
            if event.event == "AttemptBegan":
                record["strategy"] = changes["strategy"]
            elif event.event in ("GateFailed", "GatePassed"):
                failure = changes.get("failure") or {}
                record["gate"] = changes.get("gate") or failure.get("gate")
                record["exit_code"] = failure.get("exit_code", 0)
                record["error"] = failure.get("error_message")
                record["error_hash"] = failure.get("error_hash")
                record["failures"] = changes.get("consecutive_failures", 0)
            elif event.event == "BlacklistedStrategyAttempted":
                record["strategy"] = changes["failure"]["strategy"]
                record["matched"] = changes["matched_strategy"]
            elif event.event == "LessonLogged":
                record["strategy"] = changes["strategy"]
                record["rca"] = changes["rca_summary"]
            elif event.event in SUSPENDING:
                session = changes.get("session") or {}
                record["session"] = session.get("session_id")
                record["reason"] = session.get("reason", "hand_off_required")
                if record["session"]:
                    opened[record["session"]] = event.timestamp
            elif event.event in HUMAN:
                record["actor"] = changes.get("actor")
                record["reason"] = changes.get("reason")
                record["session"] = changes.get("session_id")
                for key in ("to_commit", "resolution"):
                    if changes.get(key):
                        record[key] = changes[key]
                if not record["actor"]:
                    problems.append(
                        f"{entry.task_id} v{event.version}: {event.event} has no actor"
                    )
                started = opened.pop(record["session"] or "", None)
                if started is not None:
                    waited = (event.timestamp - started).total_seconds()
                    record["waited_seconds"] = round(waited, 3)
            else:
                continue
            records.append(record)
    verification = service.verify()
    problems.extend(verification.problems)
    return records, problems


def line(record: dict[str, Any]) -> str:
    head = f"{record['at'][11:23]} {record['task']} v{record['version']:<3}"
    event = record["event"]
    if event == "AttemptBegan":
        return f"{head} attempt      {record['strategy']!r}"
    if event in ("GateFailed", "GatePassed"):
        verdict = "passed" if event == "GatePassed" else "FAILED"
        said = (
            f", {record['error']!r} sha256 {record['error_hash'][:12]}"
            if record.get("error")
            else ""
        )
        return (
            f"{head} gate {record['gate']} {verdict} (exit {record['exit_code']}"
            f"{said}), failures {record['failures']}"
        )
    if event == "BlacklistedStrategyAttempted":
        matched = record["matched"]
        return f"{head} BLOCKED      {record['strategy']!r} (a lesson: {matched!r})"
    if event == "LessonLogged":
        return f"{head} lesson       {record['strategy']!r}: {record['rca']}"
    if event in SUSPENDING:
        return f"{head} SUSPENDED    {record['reason']} (session {record['session']})"
    extra = "".join(
        f", {key} {record[key]}" for key in ("to_commit", "resolution") if key in record
    )
    waited = record.get("waited_seconds")
    after = f" after {waited:g} s" if waited is not None else ""
    return (
        f"{head} {event:<12} by {record['actor']}{after}: {record['reason']!r}{extra}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--json", action="store_true", help="one JSON document")
    args = parser.parse_args()
    if not args.db.is_file():
        print(f"no log at {args.db}", file=sys.stderr)
        return 2
    try:
        with sqlite3.connect(f"file:{args.db}?mode=ro", uri=True) as probe:
            probe.execute("SELECT 1 FROM stored_events LIMIT 1")
    except sqlite3.Error:
        print(f"{args.db} holds no devs-recovery log", file=sys.stderr)
        return 2
    with open_service(Settings(db=str(args.db))) as service:
        records, problems = audit(service)
    if args.json:
        sys.stdout.buffer.write(
            orjson.dumps({"decisions": records, "problems": problems}) + b"\n"
        )
    else:
        for record in records:
            print(line(record))
        humans = sorted({r["actor"] for r in records if r.get("actor")})
        suspended = sum(r["event"] in SUSPENDING for r in records)
        answered = sum(r["event"] in HUMAN for r in records)
        print(
            f"{len(records)} decisions; {suspended} suspensions; "
            f"{answered} human answers by {', '.join(humans) or 'nobody'}"
        )
        for problem in problems:
            print(f"PROBLEM: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
