"""The aggregate cache is optimistic: it never makes a command decide wrongly.

Commands decide on cached aggregates without asking the store for newer events;
these tests show that a command that fails after mutating leaves no trace in the
cache, and that a cache made stale by another writer is caught whether the
command would write (version conflict), refuse (illegal transition) or answer
without writing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import OperationalError

from devs.adapters.config import Settings, open_service, sqlite_path
from devs.domain import IllegalTransition, Policy, RecoveryService, StoreError
from devs.domain.chart import TaskState
from devs.domain.run import Run
from devs.domain.task import Task
from tests.helpers import event_count


@pytest.fixture
def other(db_path: Path) -> Any:
    """A second service on the same file: another process, as far as the
    first one's cache can tell."""
    with open_service(Settings(db=str(db_path))) as app:
        yield app


def test_a_command_that_fails_after_deciding_leaves_the_cache_clean(
    service: RecoveryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.start_task("t1")
    service.record_gate("t1", 1)
    stored = event_count(service)

    def broken_disk(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("disk I/O error")

    with monkeypatch.context() as patch:
        patch.setattr(service.recorder, "insert_events", broken_disk)
        with pytest.raises(StoreError, match="disk I/O error"):
            service.record_gate("t1", 1)  # decided (count 2), then could not save
    assert event_count(service) == stored
    decision = service.record_gate("t1", 1)
    assert decision.consecutive_failures == 2  # not 3: the failed decision is gone
    assert service.task("t1").version == 3


def test_a_stale_cache_loses_the_version_race_and_decides_again(
    service: RecoveryService, other: RecoveryService
) -> None:
    service.start_task("t1")
    service.record_gate("t1", 1)  # cached at version 2
    other.record_gate("t1", 1)  # the store is now at version 3
    decision = service.record_gate("t1", 1)
    assert decision.consecutive_failures == 3
    assert decision.state is TaskState.ESCALATION


def test_a_stale_cache_does_not_refuse_what_the_store_allows(
    service: RecoveryService, other: RecoveryService
) -> None:
    patient = Policy(escalation_threshold=1, handoff_threshold=10)
    with open_service(Settings(db=sqlite_path(service)), policy=patient) as app:
        app.start_task("t1")
        app.record_gate("t1", 1)  # escalated; cached here as ESCALATION
        other.resume("t1", actor="human", reason="go on")
        decision = app.record_gate("t1", 0)  # stale: ESCALATION refuses gates
    assert decision.passed
    assert decision.state is TaskState.COMPLETED


def test_a_command_the_store_refuses_is_refused_after_reloading(
    service: RecoveryService, other: RecoveryService
) -> None:
    service.start_task("t1")
    service.record_gate("t1", 1)  # cached as GATE_FAILED, which takes gates
    other.record_gate("t1", 0)  # the store: COMPLETED, which does not
    with pytest.raises(IllegalTransition, match="COMPLETED"):
        service.record_gate("t1", 1)
    assert service.task("t1").consecutive_failures == 0


def test_a_stale_cache_does_not_answer_without_writing(
    service: RecoveryService, other: RecoveryService
) -> None:
    service.start_task("t1")
    first = service.report_entropy("t1", 0.9)  # cached with a pending session
    other.resume("t1", actor="human", reason="reset")
    second = service.report_entropy("t1", 0.9)  # stale: would return `first`
    assert second.triggered
    assert second.session_id != first.session_id
    assert [s.session_id for s in service.pending_sessions()] == [second.session_id]


def test_commands_from_threads_share_one_cache_safely(db_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    patient = Policy(escalation_threshold=1000, handoff_threshold=1000)
    with open_service(Settings(db=str(db_path)), policy=patient) as app:
        app.start_task("shared")
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda _: app.record_gate("shared", 1), range(40)))
        assert app.task("shared").consecutive_failures == 40
        counts = [entry.consecutive_failures for entry in app.history("shared")]
        assert counts == list(range(41))


def test_threads_driving_tasks_of_one_run(db_path: Path) -> None:
    """Tasks of one run in many threads share the cached run: every node
    settles once and the run completes."""
    from concurrent.futures import ThreadPoolExecutor

    nodes = [f"n{i}" for i in range(24)]
    with open_service(Settings(db=str(db_path))) as app:
        app.start_run("r1", {node: [] for node in nodes})

        def work(node: str) -> str | None:
            app.start_task(node, run_id="r1")
            app.record_gate(node, 1)
            return app.record_gate(node, 0).next_node

        with ThreadPoolExecutor(max_workers=6) as pool:
            list(pool.map(work, nodes))
        state = app.run_state("r1")
        assert state.status == "COMPLETED"
        assert sorted(state.completed) == sorted(nodes)
        assert state.ready == ()


def test_a_stale_cached_run_still_reacts(db_path: Path) -> None:
    """The task is fresh but the cached run is not: resuming the task must
    resume the run the store holds paused (no run event was written on the
    stale copy, so no version conflict could catch it)."""
    policy = Policy(escalation_threshold=1, handoff_threshold=10)
    env = {"SQLITE_DBNAME": str(db_path)}
    with (
        open_service(env=env, policy=policy) as first,
        open_service(env=env, policy=policy) as second,
    ):
        first.start_run("r", {"a": [], "b": []})
        first.start_task("b", run_id="r")  # first caches the run
        second.start_task("a", run_id="r")
        second.record_gate("a", 1)  # a escalates: the stored run is paused by a
        result = first.resume("a", actor="human", reason="go on")
        assert result.run_status == "RUNNING"
        state = second.run_state("r")
        assert (state.status, state.paused_by) == ("RUNNING", ())
        second.record_gate("b", 1)  # b escalates: the stored run is paused by b
        first.record_gate("a", 1)  # first's run is stale again; a escalates too
        assert sorted(second.run_state("r").paused_by) == ["a", "b"]


def test_a_command_lets_go_of_its_locks_however_it_ends(
    service: RecoveryService, other: RecoveryService
) -> None:
    """Locks held while the answer is built are released after it, and after
    a refusal, a stale cache retried, or an answer that fails (which writes
    nothing: the answer is built before the save)."""
    service.start_run("r", {"t1": []})
    service.start_task("t1", run_id="r")
    locks = (service._locks.task("t1"), service._locks.run_lock("r"))

    def answer(_: object, task: Task, run: Run | None) -> str:
        assert all(lock.locked() for lock in locks)
        assert run is not None
        return task.current_strategy or ""

    assert service._command("t1", lambda task: task.begin_attempt("a"), answer) == "a"
    assert not any(lock.locked() for lock in locks)

    other.record_gate("t1", 1)  # the cached task is now stale: decided again
    assert service.record_gate("t1", 1).consecutive_failures == 2
    assert not any(lock.locked() for lock in locks)

    def failing(*_: object) -> str:
        raise RuntimeError("the answer could not be built")

    before = len(service.history("t1"))
    with pytest.raises(RuntimeError, match="the answer"):
        service._command("t1", lambda task: task.begin_attempt("b"), failing)
    assert not any(lock.locked() for lock in locks)
    assert len(service.history("t1")) == before

    other.record_gate("t1", 0)  # COMPLETED: no gate is taken any more
    with pytest.raises(IllegalTransition):
        service.record_gate("t1", 1)
    assert not any(lock.locked() for lock in locks)
