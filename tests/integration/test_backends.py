"""One suite, both backends: every command and query on SQLite and on
PostgreSQL (the embedded server of tests/postgres.py), with the same answers.

``make_service`` (tests/conftest.py) opens services on the test's backend;
two of them are two processes' views of one store.
"""

from __future__ import annotations

import multiprocessing
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devs.adapters.config import Settings, open_service
from devs.domain import (
    AlreadyExists,
    IllegalTransition,
    InvalidInput,
    RecoveryService,
    UnknownRun,
    UnknownTask,
)
from tests.conftest import MakeService


def position(service: RecoveryService) -> int:
    return service.recorder.max_notification_id() or 0


def test_the_whole_ladder(make_service: MakeService) -> None:
    service = make_service()
    run = service.start_run("r", {"t": [], "u": ["t"]})
    assert run.ready == ("t",)
    started = service.start_task("t", run_id="r", agent="coder", last_commit="c0")
    assert started.state == "RUNNING"
    assert service.begin_attempt("t", "use a regex").proceed
    service.log_lesson("t", "use a regex", "it cannot parse nesting")
    blocked = service.begin_attempt("t", "use a regex")
    assert (blocked.proceed, blocked.blacklisted) == (False, True)
    assert service.is_strategy_blacklisted("t", "Use a regex!")
    assert "use a regex" in service.blacklist_directive("t")
    assert [lesson.failed_strategy for lesson in service.lessons("t")] == [
        "use a regex"
    ]
    assert service.task("t").state == "PAUSED"  # a blacklisted strategy stops it
    service.resume("t", actor="ana", reason="pick another idea")
    decision = service.record_gate("t", 1, gate="pytest", error="E")
    while decision.outcome != "escalate":
        decision = service.record_gate("t", 1, gate="pytest", error="E")
    status = service.gate_status("t")
    assert (status.triggered, status.consecutive_failures) == (True, 3)
    assert [s.task_id for s in service.pending_sessions()] == ["t"]
    assert service.failure_report("t").failure_count == 3
    assert service.run_state("r").status == "PAUSED"
    assert [e.task_id for e in service.waiting_tasks()] == ["t"]
    assert [e.task_id for e in service.tasks(state="ESCALATION", run_id="r")] == ["t"]
    resumed = service.resume("t", actor="ana", reason="try the parser")
    assert resumed.run_status == "RUNNING"
    assert service.pending_sessions() == []
    while service.task("t").state != "HAND_OFF":
        if service.task("t").pending_session is not None:
            service.resume("t", actor="ana", reason="once more")
        service.record_gate("t", 1)
    assert [h.payload.task_id for h in service.handoff_queue()] == ["t"]
    service.claim_handoff("t", actor="bo")
    done = service.resolve_handoff(
        "t", actor="bo", resolution="complete", reason="fixed by hand"
    )
    assert done.state == "COMPLETED"
    assert service.handoff_queue() == []
    assert service.run_state("r").ready == ("u",)
    kinds = [n.kind for n in service.notifications()]
    assert kinds[0] == "BLACKLISTED_STRATEGY_ATTEMPTED"
    assert kinds[-1] == "HAND_OFF_REQUIRED"
    assert "USER_ESCALATION" in kinds
    history = service.history("t")
    assert history[-1].state == "COMPLETED"
    assert service.state_at("t", 1).state == "RUNNING"
    assert len(service.history("t", after=2, limit=3)) == 3
    assert service.verify().ok


def test_other_tasks_and_humans(make_service: MakeService) -> None:
    service = make_service()
    service.start_task("p")
    assert service.report_entropy("p", 0.2).triggered is False
    paused = service.report_entropy("p", 0.9)
    assert paused.triggered
    assert paused.state == "PAUSED"
    assert service.gate_status("p").entropy_score == 0.9
    service.rewind("p", actor="ana", reason="start over", to_commit="c1")
    assert service.task("p").last_commit == "c1"
    service.start_task("s")
    for _ in range(3):
        service.record_gate("s", 1)
    service.skip("s", actor="ana", reason="not needed")
    assert service.task("s").state == "SKIPPED"
    assert {e.task_id for e in service.tasks()} == {"p", "s"}


def test_refusals_write_nothing(make_service: MakeService) -> None:
    service = make_service()
    service.start_task("t")
    service.start_run("r", {"a": []})
    written = position(service)
    refusals: list[tuple[type[Exception], Any]] = [
        (InvalidInput, lambda: service.record_gate("t", 2**40)),
        (InvalidInput, lambda: service.report_entropy("t", float("nan"))),
        (InvalidInput, lambda: service.begin_attempt("t", "")),
        (InvalidInput, lambda: service.start_task("bad\ud800id")),
        (UnknownTask, lambda: service.record_gate("nope", 1)),
        (UnknownRun, lambda: service.run_state("nope")),
        (AlreadyExists, lambda: service.start_task("t")),
        (AlreadyExists, lambda: service.start_run("r", {"a": []})),
        (IllegalTransition, lambda: service.resume("t", actor="a", reason="r")),
        (InvalidInput, lambda: service.start_run("c", {"a": ["b"], "b": ["a"]})),
    ]
    for error, call in refusals:
        with pytest.raises(error):
            call()
    assert position(service) == written


def test_two_processes_see_each_others_writes(make_service: MakeService) -> None:
    first, second = make_service(), make_service()
    first.start_task("t")
    first.record_gate("t", 1)
    assert second.gate_status("t").consecutive_failures == 1
    second.record_gate("t", 1)  # its cache was never stale: it loads the task
    first.record_gate("t", 1)  # first's cached task is stale: decided again
    assert second.task("t").consecutive_failures == 3
    assert first.gate_status("t").triggered


def test_exactly_once_across_processes(make_service: MakeService) -> None:
    first, second = make_service(), make_service()
    first.start_task("t")
    with first.exactly_once("k", "gate"):
        answer = first.record_gate("t", 1)
    with second.exactly_once("k", "gate"):
        assert second.record_gate("t", 1) == answer
    with pytest.raises(InvalidInput), second.exactly_once("k", "other"):
        second.record_gate("t", 1)
    assert second.task("t").consecutive_failures == 1


def test_rebuild_and_verify(make_service: MakeService) -> None:
    service = make_service()
    service.start_run("r", {"a": [], "b": ["a"]})
    service.start_task("a", run_id="r")
    service.log_lesson("a", "x", "y")
    for _ in range(3):
        service.record_gate("a", 1)
    before = (service.gate_status("a"), service.lessons("a"), service.run_state("r"))
    assert service.rebuild_projections() == position(service)
    assert service.rebuild_projections("lessons_learned") == position(service)
    after = (service.gate_status("a"), service.lessons("a"), service.run_state("r"))
    assert after == before
    assert service.verify().ok
    with pytest.raises(InvalidInput):
        service.rebuild_projections("no such view")


DEADLINE = 1.5
"""Seconds a human has in the deadline story: long enough to refuse an early
expiry on a slow machine, short enough to wait for."""


def test_a_deadline_nobody_met_hands_the_task_off(make_service: MakeService) -> None:
    """Two tasks escalate under a deadline: one is reminded, nobody answers
    it and it is handed off; the other's answer came first and cancelled its
    deadline. Every read model shows it; the log replays and verifies."""
    service = make_service(DEVS_HUMAN_DEADLINE=str(DEADLINE))
    service.start_run("r", {"t": [], "u": []})
    for task_id in ("t", "u"):
        service.start_task(task_id, run_id="r")
    for task_id in ("t", "u"):
        for _ in range(3):
            service.record_gate(task_id, 1, error="E boom")
    sessions = {s.task_id: s for s in service.pending_sessions()}
    assert sessions.keys() == {"t", "u"}
    for session in sessions.values():
        assert session.deadline_at == session.opened_at + timedelta(seconds=DEADLINE)
        assert not session.reminded
    written = position(service)
    with pytest.raises(IllegalTransition, match="still ahead"):
        service.expire_deadline("t")
    with pytest.raises(IllegalTransition, match="is due at"):
        service.remind_deadline("t", before=0)
    with pytest.raises(InvalidInput) as lead:
        service.remind_deadline("t", before=-1)
    assert lead.value.field == "before"
    assert position(service) == written

    reminded = service.remind_deadline("t", before=600)
    assert (reminded.expired, reminded.state, reminded.session_id) == (
        False,
        "ESCALATION",
        sessions["t"].session_id,
    )
    with pytest.raises(IllegalTransition, match="reminded already"):
        service.remind_deadline("t", before=600)
    assert {s.task_id: s.reminded for s in service.pending_sessions()} == {
        "t": True,
        "u": False,
    }
    service.resume("u", actor="ann", reason="in time")
    due = max(s.opened_at for s in sessions.values()) + timedelta(seconds=DEADLINE)
    time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + 0.05)
    written = position(service)
    with pytest.raises(IllegalTransition, match="waits on no human session"):
        service.expire_deadline("u")  # answered first: no deadline runs
    assert position(service) == written

    expired = service.expire_deadline("t")
    assert (expired.expired, expired.state, expired.actor) == (
        True,
        "HAND_OFF",
        "devs:deadline",
    )
    assert expired.deadline_at == sessions["t"].deadline_at
    assert expired.run_status == "PAUSED"
    with pytest.raises(IllegalTransition, match="in state HAND_OFF"):
        service.expire_deadline("t")
    assert service.pending_sessions() == []
    [queued] = service.handoff_queue()
    assert (queued.payload.task_id, queued.payload.reason) == ("t", "human_deadline")
    gate = service.gate_status("t")
    assert (gate.state, gate.triggered, gate.session_id) == ("HAND_OFF", False, None)
    assert [e.task_id for e in service.tasks(state="HAND_OFF")] == ["t"]
    assert service.run_state("r").paused_by == ("t",)
    metrics = service.metrics()
    assert metrics.handoffs_by_resolution["open"] == 1
    # u's answer is the one time to a human; t's expired wait is in neither
    # count, its hand-off waits for a claim.
    assert (metrics.time_to_human.count, metrics.time_to_human.open) == (1, 1)
    told = service.notifications()[-1]
    assert (told.kind, told.reason, told.task_id) == (
        "HAND_OFF_REQUIRED",
        "human_deadline",
        "t",
    )
    messages = [m for m in service.outbox_messages() if m.task_id == "t"]
    assert [m.type for m in messages[-2:]] == ["deadline.reminder", "deadline.expired"]
    assert messages[-1].data["reason"] == "human_deadline"
    assert messages[-2].data["state"] == "ESCALATION"

    service.claim_handoff("t", actor="bob")
    done = service.resolve_handoff(
        "t", actor="bob", resolution="complete", reason="fixed by hand"
    )
    assert done.run_status == "RUNNING"
    assert service.metrics().time_to_human.count == 2  # the claim answered it
    assert service.replay_check().ok
    assert service.verify().ok
    before = (service.metrics(), service.handoff_queue(), service.gate_status("t"))
    assert service.rebuild_projections() == position(service)
    assert (service.metrics(), service.handoff_queue(), service.gate_status("t")) == (
        before
    )
    assert service.verify().ok


def _gates(env: dict[str, str], count: int, start: Any) -> None:
    with open_service(env=env) as service:
        start.wait()
        for _ in range(count):
            service.begin_attempt("t", "the same idea")


def test_concurrent_processes_count_exactly(
    make_service: MakeService, backend: dict[str, str]
) -> None:
    """4 processes x 10 commands on one task: every one retried past the
    optimistic-concurrency conflicts, none lost, none doubled."""
    service = make_service()
    service.start_task("t")
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    processes = [
        context.Process(target=_gates, args=(backend, 10, start)) for _ in range(4)
    ]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(timeout=120)
        assert process.exitcode == 0
    events = [entry.event for entry in service.history("t")]
    assert events.count("AttemptBegan") == 40
    assert service.verify().ok


def test_a_poison_event_on_postgresql_is_skipped_logged_and_verified(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An event the runner cannot decode (written by hand, a removed class)
    moves the position, is folded into nothing, is logged, and `verify`
    names it; the runner goes on with the next events."""
    import psycopg

    with open_service(Settings(database_url=pg_url)) as service:
        service.start_task("t1")
        with psycopg.connect(pg_url, autocommit=True) as connection:
            connection.execute(
                "SELECT devs_insert_recoveryservice_events("
                "ARRAY['task:t1'], ARRAY[2::bigint], ARRAY['nowhere:Nothing'], "
                "ARRAY['{}'::bytea])"
            )
        poisoned = position(service)
        with caplog.at_level("ERROR", logger="devs.read_models"):
            service.start_task("t2")
            assert {entry.task_id for entry in service.tasks()} == {"t1", "t2"}
        assert any(
            "nowhere:Nothing" in record.getMessage() for record in caplog.records
        )
        verified = service.verify()
        assert not verified.ok
        assert verified.problems == [
            f"event at log position {poisoned} ('task:t1', version 2) cannot be "
            "read: stored event 2 of 'task:t1' (topic 'nowhere:Nothing') cannot "
            "be decoded: TopicError: Failed to resolve topic 'nowhere:Nothing': "
            "No module named 'nowhere'",
            # written by hand, it has no link to the event before it
            "task 't1': version 1 does not match the hash recorded at version 2 "
            "(version 1 or 2 was edited, deleted or reordered)",
        ]
