"""On SQLite, whoever records events folds the read models, in the transaction
that records them: a query only reads, and never waits for another process's
write lock (docs/architecture.md, "Reads never wait for writers").

Before, a query folded the log first: while another process held the write
lock with events not yet folded, ``GET /tasks`` answered 504."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from devs.adapters.config import Settings, open_service
from devs.adapters.http import create_app
from devs.domain import RecoveryService
from tests.helpers import event_count

TOKEN = "reads-never-wait-0123456789"
HOLD = 10.0
"""Seconds the other process holds the write lock."""
PROMPT = 1.0
"""Seconds within which every query must answer meanwhile (a generous bound:
a query that waited for the lock would wait ``HOLD``, or its read wait)."""

LOCKER = """
import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
connection.execute("COMMIT")
"""

WRITER = """
import sys
from devs.adapters.config import Settings, open_service
with open_service(Settings(db=sys.argv[1])) as service:
    service.start_run("r", {"a": [], "b": ["a"]})
    service.start_task("a", run_id="r")
    for _ in range(3):
        service.begin_attempt("a", "use a regex")
        service.record_gate("a", 1, gate="tests", output="E: boom")
    service.log_lesson("a", "use a regex", "regexes cannot parse it")
    service.start_task("solo")
    service.report_entropy("solo", 0.9)
    service.start_task("gone")
    for failures in range(5):
        if failures >= 3:
            service.resume("gone", actor="ann", reason="one more go")
        service.record_gate("gone", 2, output="still failing")
print("written", flush=True)
"""


@contextmanager
def write_locked(db: Path, hold: float) -> Iterator[float]:
    """Another process holds the file's write lock for ``hold`` seconds;
    yields when it took it (``time.monotonic()``)."""
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(db), str(hold)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert locker.stdout is not None
    assert locker.stdout.readline().strip() == "locked"
    try:
        yield time.monotonic()
    finally:
        assert locker.wait(timeout=hold + 30) == 0


def timed(question: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    answer = question()
    return answer, time.monotonic() - started


def every_query(service: RecoveryService) -> dict[str, Callable[[], Any]]:
    return {
        "tasks": service.tasks,
        "waiting_tasks": service.waiting_tasks,
        "gate_status": lambda: service.gate_status("a"),
        "failure_report": lambda: service.failure_report("a"),
        "lessons": lambda: service.lessons("a"),
        "is_strategy_blacklisted": lambda: service.is_strategy_blacklisted(
            "a", "use a regex"
        ),
        "blacklist_directive": lambda: service.blacklist_directive("a"),
        "pending_sessions": service.pending_sessions,
        "handoff_queue": service.handoff_queue,
        "run_state": lambda: service.run_state("r"),
        "metrics": service.metrics,
        "outbox_messages": lambda: service.outbox_messages(),
    }


@pytest.mark.waits  # the other process holds the lock its 10 s
def test_queries_answer_while_another_process_holds_the_write_lock(
    tmp_path: Path,
) -> None:
    db = tmp_path / "locked.sqlite"
    reader = open_service(Settings(db=str(db)))  # opened before: a running server
    app = create_app(reader, token=TOKEN, read_wait=5.0)
    try:
        with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            # Commands of another process, which returned before the lock.
            wrote = subprocess.run(
                [sys.executable, "-c", WRITER, str(db)],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert wrote.stdout.strip() == "written", wrote.stderr
            expected = {name: ask() for name, ask in every_query(reader).items()}

            # The same, read by a process that never folded anything itself.
            with write_locked(db, HOLD) as locked_at:
                slowest = 0.0
                rounds = 0
                while time.monotonic() - locked_at < HOLD - 3 * PROMPT:
                    listed, took = timed(lambda: http.get("/tasks"))
                    slowest = max(slowest, took)
                    assert listed.status_code == 200, listed.text
                    assert [task["task_id"] for task in listed.json()] == [
                        "a",
                        "gone",
                        "solo",
                    ]
                    for name, ask in every_query(reader).items():
                        answer, took = timed(ask)
                        slowest = max(slowest, took)
                        assert answer == expected[name], name
                    rounds += 1
                assert time.monotonic() - locked_at < HOLD  # still held
            assert rounds >= 3
            assert slowest < PROMPT, f"a query took {slowest:.3f} s under the lock"

            states = {
                task["task_id"]: task["state"] for task in http.get("/tasks").json()
            }
            assert states == {"a": "ESCALATION", "gone": "HAND_OFF", "solo": "PAUSED"}
            assert reader.lessons("a")[0].failed_strategy == "use a regex"
            assert [entry.payload.task_id for entry in reader.handoff_queue()] == [
                "gone"
            ]
    finally:
        reader.close()


def test_a_command_that_returned_is_seen_at_once_by_another_process(
    tmp_path: Path,
) -> None:
    """Read-your-writes across processes without a fold on read: the
    reader's views are current the moment the writer's command returns."""
    db = tmp_path / "two.sqlite"
    with (
        open_service(Settings(db=str(db))) as writer,
        open_service(Settings(db=str(db))) as reader,
    ):
        for number in range(8):
            writer.start_task(f"t{number:02}")
            writer.record_gate(f"t{number:02}", 1)
            with write_locked(db, 0.2):
                entries, took = timed(reader.tasks)
            assert took < PROMPT
            assert [entry.task_id for entry in entries][-1] == f"t{number:02}"
            assert entries[-1].state == "GATE_FAILED"


def test_the_views_commit_with_the_events_or_not_at_all(tmp_path: Path) -> None:
    """A writer killed in the middle of its transaction (after its events,
    inside the fold) leaves neither: the log and the views stay as they were."""
    db = tmp_path / "killed.sqlite"
    with open_service(Settings(db=str(db))) as service:
        service.start_task("t")
    before = event_count(db)
    dies = textwrap.dedent(
        """
        import os, sys
        from devs.adapters.config import Settings, open_service
        service = open_service(Settings(db=sys.argv[1]))
        def die(cursor, written):
            os._exit(3)  # a crash with the events inserted, not committed
        service.recorder.folds.insert(0, die)
        service.record_gate("t", 1)
        """
    )
    died = subprocess.run(
        [sys.executable, "-c", dies, str(db)], capture_output=True, timeout=60
    )
    assert died.returncode == 3, died.stderr
    assert event_count(db) == before
    with open_service(Settings(db=str(db))) as service:
        assert service.verify().ok
        assert service.gate_status("t").consecutive_failures == 0
        service.record_gate("t", 1)
        assert service.gate_status("t").consecutive_failures == 1


def test_events_recorded_without_a_fold_are_folded_by_the_next_writer(
    tmp_path: Path,
) -> None:
    """Events in the log past the views (recorded by a process that folded
    nothing: a writer that stopped folding, an older release) are folded by
    the next writer, in its own transaction, before its own events; a query
    meanwhile, the lock held by another process, answers at once from what
    was folded."""
    db = tmp_path / "gap.sqlite"
    with (
        open_service(Settings(db=str(db))) as stale,
        open_service(Settings(db=str(db))) as reader,
        open_service(Settings(db=str(db))) as next_writer,
    ):
        stale.start_task("t")
        stale.read_models.close()  # this one records, folds no more
        stale.record_gate("t", 1)
        stale.record_gate("t", 1)
        with write_locked(db, 3.0):
            status, took = timed(lambda: reader.gate_status("t"))
        assert took < PROMPT
        assert status.consecutive_failures == 0  # as folded
        assert min(reader.read_models.positions().values()) < event_count(db)

        next_writer.start_task("u")
        positions = set(reader.read_models.positions().values())
        assert positions == {event_count(db)}  # folded by the writer
        assert reader.gate_status("t").consecutive_failures == 2
        assert [entry.task_id for entry in reader.tasks()] == ["t", "u"]
        assert reader.verify().ok


def test_a_gap_is_folded_on_open_by_a_query_when_the_lock_is_free_or_a_rebuild(
    tmp_path: Path,
) -> None:
    db = tmp_path / "reopen.sqlite"
    with open_service(Settings(db=str(db))) as stale:
        stale.start_task("t")
        stale.read_models.close()
        stale.record_gate("t", 1)
        with open_service(Settings(db=str(db))) as reader:  # opened: folded
            assert set(reader.read_models.positions().values()) == {event_count(db)}
            assert reader.gate_status("t").consecutive_failures == 1
            stale.record_gate("t", 1)  # after the open
            assert reader.gate_status("t").consecutive_failures == 2  # lock free
            stale.record_gate("t", 1)
            reader.rebuild_projections()
            assert set(reader.read_models.positions().values()) == {event_count(db)}
            assert reader.gate_status("t").consecutive_failures == 3
            assert reader.verify().ok


def test_in_memory_queries_answer_while_threads_write_back_to_back() -> None:
    """In memory the next query folds what commands recorded; it waits for
    the pool's turn (short: no other process exists) rather than trying
    without waiting, which loses to commands that hold it back to back and
    gave up after DEVS_READ_WAIT (and then leaked eventsourcing's own
    timeout, not NotCaughtUp)."""
    import threading

    from devs.adapters.config import memory_env

    env = {**memory_env(), "DEVS_READ_WAIT": "1"}
    with open_service(env=env) as service:
        for i in range(2):
            service.start_task(f"t{i}")
        stop = time.monotonic() + 2
        failures: list[BaseException] = []
        answered: list[int] = []

        def write(task_id: str) -> None:
            step = 0
            while time.monotonic() < stop:
                service.begin_attempt(task_id, f"strategy {step}")
                step += 1

        def read() -> None:
            while time.monotonic() < stop:
                try:
                    answered.append(len(service.tasks()))
                except BaseException as error:  # what leaked, whatever it is
                    failures.append(error)
                    return

        def wait() -> None:  # X-Devs-After's wait, for a position just written
            while time.monotonic() < stop:
                try:
                    with service.written() as written:
                        service.begin_attempt("t0", "one more")
                    assert written.position is not None
                    waited.append(service.wait_for(written.position))
                except BaseException as error:
                    failures.append(error)
                    return

        waited: list[int] = []
        threads = [threading.Thread(target=write, args=(f"t{i}",)) for i in range(2)]
        threads += [threading.Thread(target=read), threading.Thread(target=wait)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert len(answered) >= 5
        assert set(answered) == {2}
        assert len(waited) >= 5
