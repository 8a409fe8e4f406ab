"""The Python API in one agent turn, and what to do when the referee says stop.

    python examples/quickstart.py [--db PATH]

Without --db it uses a fresh SQLite file in a temporary directory. An agent
task fails its test gate until the ladder escalates; the orchestrator turns
the decision into ``GraphSuspended``, a human resumes, and the next turn passes.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from devs.adapters.config import Settings, open_service
from devs.domain import GraphSuspended, RecoveryService, suspend_if_stopped


def agent_turn(app: RecoveryService, task: str, strategy: str, exit_code: int) -> None:
    decision = app.begin_attempt(task, strategy)
    suspend_if_stopped(decision)  # a strategy that already failed never runs
    prompt = f"{decision.directive}\nImplement: {strategy}".strip()
    print(f"  calling the model with a {len(prompt)}-character prompt")
    gate = app.record_gate(task, exit_code, gate="tests", output=f"exit {exit_code}")
    print(f"  {strategy!r}: tests exit {exit_code} -> {gate.outcome}")
    suspend_if_stopped(gate)


def main(db: Path) -> None:
    with open_service(Settings(db=str(db))) as app:
        app.start_task("parse-config", agent="coder", last_commit="4f2a9c1")
        turns = [("regex tokenizer", 1), ("bigger regex", 1), ("more regex", 1)]
        for strategy, exit_code in turns:
            try:
                agent_turn(app, "parse-config", strategy, exit_code)
            except GraphSuspended as stop:
                print(f"suspended: {stop.reason} (session {stop.session_id})")
                report = app.failure_report("parse-config").last_escalation
                assert report is not None
                print(
                    f"  a human reads: {report.failure_count} failures, "
                    f"last error {report.last_error!r}"
                )
                app.resume("parse-config", actor="operator", reason="try a parser")
        app.log_lesson("parse-config", "regex tokenizer", "regexes cannot nest")
        agent_turn(app, "parse-config", "recursive descent parser", 0)
        print(f"state: {app.task('parse-config').status}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="SQLite file (default: a temp file)")
    args = parser.parse_args()
    main(args.db or Path(tempfile.mkdtemp(prefix="devs-quickstart-")) / "devs.sqlite")
