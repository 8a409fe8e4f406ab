"""devs-recovery benchmarks: one run, every figure, ratios measured side by side.

    python bench/bench.py [--decisions N] [--dir DIR]

Prints a markdown table:

1. ``record_gate`` decisions per second on a SQLite file, beside the raw sqlite3
   floor: one small row per committed transaction on a file with the same journal
   mode and ``synchronous`` setting as the service's connection; and their ratio.
2. Time to load a task with 1,000 and 10,000 events from a cold repository (no
   aggregate cache), with snapshots, beside a full replay without snapshots.
3. One blacklist check against 100 and 1,000 lessons of 2,000 characters, beside
   raw ``rapidfuzz.process.extractOne`` over the same strings.

Targets (issue 2): decisions >= 0.33 x the raw floor; a 10,000-event task loads in
<= 10 ms; a blacklist check costs <= 1.25 x raw rapidfuzz and <= 5 ms against 100
long lessons.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import string
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from devs.domain import Policy, RecoveryService
from devs.domain.blacklist import max_distance
from devs.domain.task import Task

LESSON_LENGTH = 2_000


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``repeat`` calls (after one warm-up call)."""
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def service(path: Path, **env: str) -> RecoveryService:
    patient = Policy(escalation_threshold=1000, handoff_threshold=1000)
    return RecoveryService(env={"SQLITE_DBNAME": str(path), **env}, policy=patient)


# ---------------------------------------------------------------- decisions/s


def durability_of(app: RecoveryService) -> tuple[str, int]:
    with app.factory.datastore.transaction(commit=False) as cursor:  # type: ignore[attr-defined]
        cursor.execute("PRAGMA journal_mode")
        journal = str(cursor.fetchone()[0])
        cursor.execute("PRAGMA synchronous")
        synchronous = int(cursor.fetchone()[0])
    return journal, synchronous


def decisions_beside_floor(
    base: Path, decisions: int, rounds: int = 10
) -> tuple[float, float, str, int]:
    """``record_gate`` decisions/s and raw rows/s, measured in alternating rounds.

    Alternating spreads the disk's mood (other tenants, write-back) evenly over
    both, so their ratio means something on a shared, noisy machine.
    """
    app = service(base / "decisions.sqlite")
    tasks = [f"task-{i}" for i in range(20)]
    for task in tasks:
        app.start_task(task)
    journal, synchronous = durability_of(app)
    raw = sqlite3.connect(base / "raw.sqlite", isolation_level=None)
    raw.execute(f"PRAGMA journal_mode={journal}")
    raw.execute(f"PRAGMA synchronous={synchronous}")
    raw.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, task TEXT, code INTEGER)")
    per_round = max(1, decisions // rounds)
    ours = floor = 0.0
    done = 0
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(done, done + per_round):
            app.record_gate(
                tasks[i % len(tasks)], 1, gate="tests", error="assert 1 == 2"
            )
        ours += time.perf_counter() - start
        start = time.perf_counter()
        for i in range(done, done + per_round):
            raw.execute("BEGIN")
            raw.execute(
                "INSERT INTO rows (task, code) VALUES (?, ?)", (f"t{i % 20}", 1)
            )
            raw.execute("COMMIT")
        floor += time.perf_counter() - start
        done += per_round
    raw.close()
    app.close()
    return done / ours, done / floor, journal, synchronous


# ------------------------------------------------------------------ load time


def build_task(path: Path, task_id: str, events: int) -> None:
    app = service(path)
    app.start_task(task_id)
    task: Task = app.repository.get(Task.create_id(task_id))
    for i in range(events - 1):
        task.report_entropy(0.1 + (i % 7) / 100)
    app.save(task)  # one transaction; snapshots every 50 events
    app.close()


def load_ms(path: Path, task_id: str, *, snapshots: bool) -> float:
    env = {"AGGREGATE_CACHE_MAXSIZE": ""}
    if not snapshots:
        env["IS_SNAPSHOTTING_ENABLED"] = "n"
    app = service(path, **env)
    if not snapshots:
        app.snapshots = None
        app.repository.snapshot_store = None
    aggregate_id = Task.create_id(task_id)
    seconds = median_seconds(lambda: app.repository.get(aggregate_id), repeat=15)
    app.close()
    return seconds * 1000


# ------------------------------------------------------------------ blacklist


def lessons(count: int, rnd: random.Random) -> list[str]:
    alphabet = string.ascii_lowercase + " "
    return ["".join(rnd.choices(alphabet, k=LESSON_LENGTH)) for _ in range(count)]


def blacklist_ms(count: int, rnd: random.Random) -> tuple[float, float]:
    strategies = lessons(count, rnd)
    candidate = "".join(rnd.choices(string.ascii_lowercase + " ", k=LESSON_LENGTH))
    task = Task(
        task_id="bench", run_id=None, agent=None, last_commit=None, policy=Policy()
    )
    task.lessons = strategies
    ours = median_seconds(lambda: task.blacklist_match(candidate), repeat=9)
    cutoff = max_distance(candidate)
    raw = median_seconds(
        lambda: process.extractOne(
            candidate, strategies, scorer=Levenshtein.distance, score_cutoff=cutoff
        ),
        repeat=9,
    )
    assert task.blacklist_match(candidate) is None
    return ours * 1000, raw * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description="devs-recovery benchmarks")
    parser.add_argument("--decisions", type=int, default=2_000)
    parser.add_argument("--dir", type=Path, default=None, help="where the files go")
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="devs-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(20261122)

    rate, floor, journal, synchronous = decisions_beside_floor(base, args.decisions)

    sizes = {"t1k": 1_000, "t10k": 10_000, "t10k+49": 10_049}
    for task, events in sizes.items():
        build_task(base / "load.sqlite", task, events)
    load = {
        (task, snap): load_ms(base / "load.sqlite", task, snapshots=snap)
        for task in sizes
        for snap in (True, False)
    }

    check = {count: blacklist_ms(count, rnd) for count in (100, 1_000)}

    print(f"files in {base}; journal_mode={journal}, synchronous={synchronous}\n")
    print("| measure | devs-recovery | baseline | ratio | target |")
    print("|---|---|---|---|---|")
    print(
        f"| record_gate decisions/s ({args.decisions:,}) | {rate:,.0f} | "
        f"raw sqlite3 {floor:,.0f} rows/s | {rate / floor:.2f} x | >= 0.33 x |"
    )
    for task, events in sizes.items():
        with_snap, replay = load[(task, True)], load[(task, False)]
        target = "<= 10 ms" if events >= 10_000 else "-"
        tail = events % 50
        what = f"{events:,} events" + (
            f" ({tail} after the last snapshot)" if tail else ""
        )
        print(
            f"| load a task of {what}, cold | {with_snap:.2f} ms | "
            f"full replay {replay:.2f} ms | {with_snap / replay:.3f} x | {target} |"
        )
    for count, (ours, raw) in check.items():
        target = "<= 1.25 x and <= 5 ms" if count == 100 else "<= 1.25 x"
        print(
            f"| blacklist check, {count:,} lessons of 2,000 chars | {ours:.3f} ms | "
            f"extractOne {raw:.3f} ms | {ours / raw:.2f} x | {target} |"
        )


if __name__ == "__main__":
    main()
