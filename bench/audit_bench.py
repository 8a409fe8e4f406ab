"""Audit benchmarks: what-if, replay check, chain verification and export over a
large store, and what stuck detection costs a decision.

    python bench/audit_bench.py [--events N] [--decisions N] [--dir DIR]

1. A store of about ``--events`` task events (default 100,000) is written: tasks
   of 50 events each, decided by the real ``Task`` commands (attempts, failures
   that escalate, human answers, lessons, blocked attempts, passes), each task
   saved in one transaction. Then, on a new service (nothing cached):
   ``what_if`` under a stricter policy (target: the whole store in seconds,
   < 10 s), ``replay_check``, ``verify`` (read models and hash chains) and
   ``export``, each with its events per second.
2. ``stuck.assess`` on a hostile window: ten 4,000-character strategies, each a
   few edits from the last (the fuzzy distance runs to its cutoff), beside the
   ordinary window of short strategies.
3. ``record_gate`` failures per second with ``DEVS_STUCK_DETECTION=off`` and
   ``observe``, measured in alternating rounds on the same disk, and their ratio
   (target: observe costs at most 15 %).

Prints a markdown table and one verdict line per target.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from devs.adapters.config import Settings, open_service
from devs.domain import Policy
from devs.domain.gate import evaluate
from devs.domain.policy import StuckDetection
from devs.domain.stuck import WINDOW, Attempted, assess
from devs.domain.task import Task

T = TypeVar("T")
REPEAT = 200
EVENTS_PER_TASK = 50
STARTED = time.perf_counter()


def say(text: str) -> None:
    print(f"[{time.perf_counter() - STARTED:7.1f} s] {text}", file=sys.stderr)


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def _history(task: Task, seed: int) -> None:
    """About EVENTS_PER_TASK events of a task that loops, is answered and
    finally passes."""
    i = 0
    while task.version < EVENTS_PER_TASK - 2:
        i += 1
        if task.pending_session is not None:
            task.resume(actor="ann", reason="go on")
        elif task.state == "HAND_OFF":
            if task.claimed_by is None:
                task.claim_handoff(actor="bob")
            else:
                task.rewind(actor="bob", reason="again", to_commit=None)
        elif i % 11 == 0:
            task.log_lesson(f"strategy {seed}-{i % 4}", "it failed")
        else:
            task.begin_attempt(f"strategy {seed}-{i % 4}")
            if task.state == "RUNNING":
                task.record_gate(
                    evaluate(1),
                    gate="pytest",
                    strategy=None,
                    error=None,
                    output=f"== {1 + (i % 3)} failed, 9 passed ==\nE {seed % 7}",
                )
    if task.pending_session is not None:
        task.resume(actor="ann", reason="go on")
    if task.state in ("RUNNING", "GATE_FAILED"):
        task.record_gate(
            evaluate(0), gate="pytest", strategy=None, error=None, output=None
        )


def write_store(path: Path, events: int) -> int:
    with open_service(Settings(db=str(path))) as app:
        written = 0
        n = 0
        while written < events:
            task = Task(
                task_id=f"t{n:06d}",
                run_id=None,
                agent="coder",
                last_commit="c0",
                policy=app.policy,
            )
            _history(task, n)
            written += len(task.pending_events)
            app.save(task)
            n += 1
            if n % 500 == 0:
                say(f"  {written:,} events, {n:,} tasks")
        app.catch_up()
        return written


def store_rows(path: Path, events: int) -> list[tuple[str, str, str]]:
    say(f"writing a store of about {events:,} events")
    written = write_store(path, events)
    rows: list[tuple[str, str, str]] = []
    with open_service(Settings(db=str(path))) as app:
        stricter = Policy(escalation_threshold=2, handoff_threshold=4)
        say("what-if")
        seconds, report = timed(lambda: app.what_if(stricter))
        rows.append(
            (
                f"what_if, {report.events:,} events, {report.tasks:,} tasks",
                f"{seconds:.2f} s ({report.events / seconds:,.0f} events/s)",
                "< 10 s",
            )
        )
        say("replay check")
        seconds, check = timed(app.replay_check)
        assert check.ok
        rows.append(
            (
                "replay_check, the same store",
                f"{seconds:.2f} s ({written / seconds:,.0f} events/s)",
                "reported",
            )
        )
        say("verify")
        seconds, verified = timed(app.verify)
        assert verified.ok
        rows.append(
            (
                "verify (read models and hash chains)",
                f"{seconds:.2f} s ({written / seconds:,.0f} events/s)",
                "reported",
            )
        )
        say("export")
        seconds, _ = timed(lambda: sum(1 for _ in app.export()))
        rows.append(
            (
                "export",
                f"{seconds:.2f} s ({written / seconds:,.0f} events/s)",
                "reported",
            )
        )
    return rows


def _windows(hostile: bool) -> list[list[Attempted]]:
    """REPEAT windows of WINDOW failures, each with strings of its own (the
    detector keeps recent distances: a window measured again would hit them)."""
    windows = []
    for r in range(REPEAT):
        if hostile:  # 4,000 characters, each a few edits from the last
            text = f"{r:04d}" + "a" * 3996
            window = []
            for i in range(WINDOW):
                text = text[: 10 + i] + "b" + text[11 + i :]
                window.append(Attempted(strategy=text, error_hash=str(i)))
        else:
            window = [
                Attempted(strategy=f"strategy {r} {i % 3}", error_hash=str(i % 2))
                for i in range(WINDOW)
            ]
        windows.append(window)
    return windows


def assess_rows() -> list[tuple[str, str, str]]:
    rows = []
    for name, hostile in (("ordinary", False), ("hostile", True)):
        windows = _windows(hostile)
        start = time.perf_counter()
        for window in windows:
            assess(window)
        seconds = time.perf_counter() - start
        rows.append(
            (
                f"stuck.assess, {name} window of {WINDOW}",
                f"{seconds / REPEAT * 1e6:,.0f} us",
                "reported",
            )
        )
    return rows


def decision_rows(base: Path, decisions: int) -> list[tuple[str, str, str]]:
    rates: dict[str, list[float]] = {"off": [], "observe": []}
    rounds = 6
    for r in range(rounds):
        order = ("off", "observe") if r % 2 == 0 else ("observe", "off")
        for mode in order:
            policy = Policy(
                escalation_threshold=1000,
                handoff_threshold=1000,
                stuck_detection=StuckDetection(mode),
            )
            path = base / f"decisions-{mode}-{r}.sqlite"
            with open_service(Settings(db=str(path)), policy=policy) as app:
                app.start_task("t")
                per_round = decisions // rounds
                start = time.perf_counter()
                for i in range(per_round):
                    app.record_gate("t", 1, output=f"E {i % 3}", strategy="same")
                rates[mode].append(per_round / (time.perf_counter() - start))
    off = sum(rates["off"]) / rounds
    observe = sum(rates["observe"]) / rounds
    return [
        ("record_gate failures/s, stuck detection off", f"{off:,.0f}/s", "reported"),
        (
            "record_gate failures/s, observe",
            f"{observe:,.0f}/s ({observe / off:.2f}x of off)",
            ">= 0.85x",
        ),
    ]


def verdicts(rows: Sequence[tuple[str, str, str]]) -> list[str]:
    lines = []
    for name, value, target in rows:
        if target == "< 10 s":
            seconds = float(value.split(" s")[0])
            met = seconds < 10
        elif target == ">= 0.85x":
            ratio = float(value.split("(")[1].split("x")[0])
            met = ratio >= 0.85
        else:
            continue
        lines.append(f"{'met' if met else 'MISSED'}: {name} {value} (target {target})")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="devs-recovery audit benchmarks")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--decisions", type=int, default=3_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="devs-audit-") as tmp:
        base = Path(tmp)
        rows = [
            *store_rows(base / "store.sqlite", args.events),
            *assess_rows(),
            *decision_rows(base, args.decisions),
        ]
    print("| figure | value | target |")
    print("|---|---|---|")
    for name, value, target in rows:
        print(f"| {name} | {value} | {target} |")
    print()
    for line in verdicts(rows):
        print(line)


if __name__ == "__main__":
    main()
