"""Reliability with real processes: crashes, races, new databases, damage.

Every test here is bounded (subprocess timeouts); none asserts a speed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError

from devs.adapters.config import Settings, open_service
from devs.domain import (
    Conflict,
    DevsError,
    Policy,
    RecoveryService,
    StoreError,
)
from devs.domain import commands as commands_module

PATIENT = Policy(escalation_threshold=1000, handoff_threshold=1000)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def read_models(app: RecoveryService, tasks: list[str]) -> Any:
    """Everything the read models answer about ``tasks``."""
    app.catch_up()
    return (
        app.tasks(),
        [app.gate_status(t) for t in tasks],
        [app.failure_report(t).model_dump(exclude={"updated_at"}) for t in tasks],
        [app.lessons(t) for t in tasks],
        app.pending_sessions(),
        app.handoff_queue(),
    )


def test_kill_9_under_load_loses_no_acknowledged_decision(tmp_path: Path) -> None:
    """Writers print each decision once the service returned it; kill -9 them
    mid-stream; every acknowledged decision is in the reopened store, and the
    read models equal a rebuild from the log."""
    db = tmp_path / "devs.sqlite"
    writer = f"""
        import sys
        from devs.domain import Policy, RecoveryService
        app = RecoveryService(env={{"SQLITE_DBNAME": {str(db)!r}}},
                              policy=Policy(escalation_threshold=1000,
                                            handoff_threshold=1000))
        me = sys.argv[1]
        app.start_task(me)
        print("started", flush=True)
        for i in range(1, 990):  # below the hand-off at 1,000
            decision = app.record_gate(me, 1, error=f"e{{i % 7}}")
            if i % 10 == 0:
                app.log_lesson(me, f"idea {{i}}", "did not work")
            print(decision.consecutive_failures, flush=True)
        import time
        time.sleep(120)  # killed before this ends
    """
    names = [f"writer-{i}" for i in range(3)]
    procs = [
        subprocess.Popen([*python(writer), name], stdout=subprocess.PIPE, text=True)
        for name in names
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "started"
        time.sleep(1.5)
    finally:
        for proc in procs:
            os.kill(proc.pid, signal.SIGKILL)
    acknowledged = {}
    for name, proc in zip(names, procs, strict=True):
        # Read through the file object, not communicate(): readline() above
        # may have buffered decisions printed right after "started", and
        # communicate(timeout=...) reads the pipe's descriptor past that
        # buffer (a loaded machine lost all of a writer's lines that way).
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.wait(timeout=60)
        lines = [line for line in out.splitlines() if line.strip().isdigit()]
        acknowledged[name] = int(lines[-1]) if lines else 0
    assert sum(acknowledged.values()) > 0
    with open_service(Settings(db=str(db))) as app:
        for name, count in acknowledged.items():
            # Acknowledged ones are all there; one more may have committed
            # between the commit and the print.
            assert app.task(name).consecutive_failures in (count, count + 1)
        print(
            f"kill -9 of 3 writers: {sum(acknowledged.values())} acknowledged "
            "decisions, all found"
        )
        before = read_models(app, names)
        app.catch_up()
        report = app.verify()  # every stored row equals a fold of the log
        assert report.ok, report.problems
        app.rebuild_projections()
        assert read_models(app, names) == before


def test_writers_on_one_task_are_counted_exactly(tmp_path: Path) -> None:
    """N processes report failures on one task: each acknowledged failure is
    counted once, and a caller meets nothing but DevsError subclasses."""
    db = tmp_path / "devs.sqlite"
    with open_service(Settings(db=str(db)), policy=PATIENT) as app:
        app.start_task("shared")
    writer = f"""
        import json
        from devs.domain import DevsError, RecoveryService
        app = RecoveryService(env={{"SQLITE_DBNAME": {str(db)!r}}})
        done, refused = 0, []
        for _ in range(40):
            try:
                app.record_gate("shared", 1, error="race")
                done += 1
            except DevsError as error:
                refused.append(type(error).__name__)
        app.close()
        print(json.dumps({{"done": done, "refused": refused}}))
    """
    procs = [
        subprocess.Popen(python(writer), stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0  # no other exception escaped
        results.append(json.loads(out))
    done = sum(result["done"] for result in results)
    refused = [name for result in results for name in result["refused"]]
    assert set(refused) <= {"Conflict"}
    with open_service(Settings(db=str(db))) as app:
        assert app.task("shared").consecutive_failures == done
        assert app.failure_report("shared").failure_count == done
    print(f"4 writers on one task: {done} counted, {len(refused)} conflicts")


def test_many_processes_open_a_new_database_at_once(tmp_path: Path) -> None:
    opener = """
        import sys, time
        from devs.adapters.config import Settings, open_service
        path, start, me = sys.argv[1], float(sys.argv[2]), sys.argv[3]
        # Asleep until the start (not spinning: six spinning processes took
        # the two cores from the ones still importing), then off together.
        time.sleep(max(0.0, start - time.time()))
        app = open_service(Settings(db=path))
        app.start_task(me)
        app.catch_up()
        app.close()
    """
    for attempt in range(5):
        db = tmp_path / f"new-{attempt}.sqlite"
        start = time.time() + 1.0
        procs = [
            subprocess.Popen(
                [*python(opener), str(db), str(start), f"t{i}"],
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(6)
        ]
        for proc in procs:
            _, errors = proc.communicate(timeout=120)
            assert proc.returncode == 0, errors
        with open_service(Settings(db=str(db))) as app:
            assert len(app.tasks()) == 6
    print("6 processes opening a new database at once, 5 times: 0 failures")


def test_a_command_that_loses_every_race_raises_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = open_service(Settings(db=str(tmp_path / "devs.sqlite")))
    app.start_task("t1")

    def always_behind(*aggregates: object) -> None:
        raise IntegrityError("UNIQUE constraint failed: stored_events")

    monkeypatch.setattr(commands_module, "CONFLICT_BACKOFF_SECONDS", 0.0)
    monkeypatch.setattr(app, "_commit", always_behind)
    with pytest.raises(Conflict, match="changed by other writers") as lost:
        app.record_gate("t1", 1)
    assert isinstance(lost.value, DevsError)
    monkeypatch.undo()
    assert app.task("t1").consecutive_failures == 0
    app.close()


@pytest.mark.parametrize(
    "content", [b"\x00garbage" * 500, b"SQLite format 3\x00truncated"]
)
def test_a_damaged_database_raises_store_error(tmp_path: Path, content: bytes) -> None:
    db = tmp_path / "damaged.sqlite"
    db.write_bytes(content)
    with pytest.raises(StoreError, match="damaged or not a devs-recovery database"):
        open_service(Settings(db=str(db)))
    assert db.read_bytes() == content
