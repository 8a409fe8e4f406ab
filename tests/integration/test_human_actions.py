"""Human actions are recorded with actor, reason and time; the audit replays them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devs.adapters.config import Settings, open_service
from devs.domain import (
    AlreadyExists,
    IllegalTransition,
    InvalidInput,
    NotFound,
    Policy,
    RecoveryService,
    UnknownRun,
    UnknownTask,
)
from devs.domain.chart import TaskState
from devs.domain.task import Task
from tests.helpers import event_count


def escalate(service: RecoveryService, task_id: str = "t1") -> None:
    for strategy in ("a", "b", "c"):
        service.begin_attempt(task_id, strategy)
        service.record_gate(task_id, 1, error="boom")


def test_resume_is_recorded_with_actor_reason_and_time(
    service: RecoveryService,
) -> None:
    service.start_task("t1")
    escalate(service)
    session_id = service.task("t1").pending_session.session_id  # type: ignore[union-attr]
    result = service.resume("t1", actor="alice", reason="flaky CI, try again")
    assert result.resolved_session_id == session_id
    assert service.pending_sessions() == []
    entry = service.history("t1")[-1]
    assert entry.event == "Resumed"
    assert entry.changes["actor"] == "alice"
    assert entry.changes["reason"] == "flaky CI, try again"
    assert entry.changes["session_id"] == session_id
    assert entry.timestamp is not None
    assert entry.state is TaskState.RUNNING


def test_rewind_records_the_commit_and_keeps_the_count(
    service: RecoveryService,
) -> None:
    service.start_task("t1", last_commit="abc123")
    escalate(service)
    result = service.rewind("t1", actor="alice", reason="bad direction")
    assert result.to_commit == "abc123"
    assert result.state is TaskState.RUNNING
    assert service.task("t1").consecutive_failures == 3
    result = service.rewind("t1", actor="alice", reason="further", to_commit="0ff1ce")
    assert result.to_commit == "0ff1ce"


def test_skip_advances_the_run(service: RecoveryService) -> None:
    service.start_run("r1", {"t1": [], "t2": ["t1"]})
    service.start_task("t1", run_id="r1")
    escalate(service)
    result = service.skip("t1", actor="bob", reason="not needed")
    assert result.state is TaskState.SKIPPED
    assert result.next_node == "t2"
    state = service.run_state("r1")
    assert state.skipped == ("t1",)
    assert state.status == "RUNNING"
    assert state.ready == ("t2",)


@pytest.mark.parametrize(
    "action",
    [
        lambda s: s.resume("t1", actor="a", reason="r"),
        lambda s: s.claim_handoff("t1", actor="a"),
        lambda s: s.resolve_handoff("t1", actor="a", resolution="skip", reason="r"),
    ],
)
def test_actions_illegal_from_running_write_nothing(
    service: RecoveryService, action: object
) -> None:
    service.start_task("t1")
    events = event_count(service)
    with pytest.raises(IllegalTransition, match="RUNNING"):
        action(service)  # type: ignore[operator]
    assert event_count(service) == events


def test_nothing_is_allowed_after_completion(service: RecoveryService) -> None:
    service.start_task("t1")
    service.record_gate("t1", 0)
    for act in (
        lambda: service.rewind("t1", actor="a", reason="r"),
        lambda: service.skip("t1", actor="a", reason="r"),
        lambda: service.log_lesson("t1", "s", "r"),
        lambda: service.report_entropy("t1", 0.9),
        lambda: service.begin_attempt("t1", "s"),
    ):
        with pytest.raises(IllegalTransition, match="COMPLETED"):
            act()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"actor": "", "reason": "r"}, "actor must not be empty"),
        ({"actor": "a\nb", "reason": "r"}, "actor must not contain control"),
        ({"actor": "a", "reason": ""}, "reason must not be empty"),
        ({"actor": "a", "reason": "r" * 4_001}, "reason is 4,001 characters long"),
    ],
)
def test_bad_actor_or_reason(
    service: RecoveryService, kwargs: dict[str, Any], message: str
) -> None:
    service.start_task("t1")
    escalate(service)
    events = event_count(service)
    with pytest.raises(InvalidInput, match=message):
        service.resume("t1", **kwargs)
    assert event_count(service) == events


def test_history_replays_every_event_with_the_state_after_it(
    service: RecoveryService,
) -> None:
    service.start_task("t1")
    escalate(service)
    history = service.history("t1")
    assert [h.version for h in history] == list(range(1, len(history) + 1))
    assert [(h.event, h.state, h.consecutive_failures) for h in history] == [
        ("Started", TaskState.RUNNING, 0),
        ("AttemptBegan", TaskState.RUNNING, 0),
        ("GateFailed", TaskState.GATE_FAILED, 1),
        ("AttemptBegan", TaskState.RUNNING, 1),
        ("GateFailed", TaskState.GATE_FAILED, 2),
        ("AttemptBegan", TaskState.RUNNING, 2),
        ("GateFailed", TaskState.GATE_FAILED, 3),
        ("Escalated", TaskState.ESCALATION, 3),
    ]
    assert history[2].changes["failure"]["error_message"] == "boom"


def test_history_pages_read_only_their_page(db_path: Path) -> None:
    patient = Policy(escalation_threshold=1_000, handoff_threshold=1_000)
    with open_service(Settings(db=str(db_path)), policy=patient) as app:
        app.start_task("long")
        for i in range(449):
            app.record_gate("long", 1, error=f"e{i}")
        whole = app.history("long")
        assert len(whole) == 450
        recorder = app.events.recorder
        real = recorder.select_events
        read: list[int] = []

        def counting(*args: Any, **kwargs: Any) -> Any:
            found = real(*args, **kwargs)
            read.append(len(found))
            return found

        recorder.select_events = counting  # type: ignore[method-assign]
        pages = [
            app.history("long", after=after, limit=100) for after in range(0, 500, 100)
        ]
        assert [len(page) for page in pages] == [100, 100, 100, 100, 50]
        assert [entry for page in pages for entry in page] == whole
        # each page: at most a snapshot's worth of events to rebuild the task
        # at version `after` (snapshots every 200), then the page itself
        assert max(read) <= 200
        read.clear()
        assert app.history("long", after=440, limit=5) == whole[440:445]
        assert sum(read) <= 1 + 40 + 5  # snapshot at 400, events 401-440, page
        assert app.history("long", after=450) == []
        assert app.history("long", after=10_000) == []
        with pytest.raises(UnknownTask):
            app.history("nope", after=3)
        with pytest.raises(InvalidInput, match="after must be a non-negative"):
            app.history("long", after=-1)
        with pytest.raises(InvalidInput, match=r"limit must be an integer in \[1,"):
            app.history("long", limit=0)


def test_state_at_any_version(service: RecoveryService) -> None:
    service.start_task("t1")
    escalate(service)
    assert service.state_at("t1", 1).state is TaskState.RUNNING
    assert service.state_at("t1", 5).consecutive_failures == 2
    assert service.state_at("t1", 8).state is TaskState.ESCALATION
    with pytest.raises(
        NotFound, match="task 't1' has no version 9: its versions are 1 to 8"
    ):
        service.state_at("t1", 9)
    with pytest.raises(InvalidInput, match=r"version 0 is out of range \[1, 8\]"):
        service.state_at("t1", 0)
    with pytest.raises(InvalidInput, match="version must be an integer"):
        service.state_at("t1", "2")  # type: ignore[arg-type]


def test_unknown_ids(service: RecoveryService) -> None:
    service.start_task("t0")
    events = event_count(service)
    for call in (
        lambda: service.task("nope"),
        lambda: service.history("nope"),
        lambda: service.begin_attempt("nope", "s"),
        lambda: service.record_gate("nope", 0),
        lambda: service.report_entropy("nope", 0.1),
        lambda: service.resume("nope", actor="a", reason="r"),
        lambda: service.failure_report("nope"),
    ):
        with pytest.raises(UnknownTask, match="unknown task 'nope'"):
            call()
    with pytest.raises(UnknownRun, match="unknown run 'r9'"):
        service.run_state("r9")
    with pytest.raises(UnknownRun):
        service.start_task("t1", run_id="r9")
    assert event_count(service) == events


def test_starting_twice_is_refused(service: RecoveryService) -> None:
    service.start_run("r1", {"t1": []})
    service.start_task("t1", run_id="r1")
    events = event_count(service)
    with pytest.raises(AlreadyExists, match="task 't1' was already started"):
        service.start_task("t1")
    with pytest.raises(AlreadyExists, match="run 'r1' was already started"):
        service.start_run("r1", {"x": []})
    assert event_count(service) == events


def test_run_rules_write_nothing(service: RecoveryService) -> None:
    events = event_count(service)
    with pytest.raises(InvalidInput, match="cycle"):
        service.start_run("r1", {"a": ["b"], "b": ["a"]})
    with pytest.raises(InvalidInput, match="unknown prerequisite"):
        service.start_run("r1", {"a": ["ghost"]})
    service.start_run("r1", {"a": [], "b": ["a"]})
    events = event_count(service)
    with pytest.raises(IllegalTransition, match="not ready"):
        service.start_task("b", run_id="r1")
    with pytest.raises(NotFound, match="not a node of run"):
        service.start_task("zz", run_id="r1")
    assert event_count(service) == events


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.start_task(""), "task_id must not be empty"),
        (lambda s: s.start_task("x" * 500), "task_id is 500 characters long"),
        (lambda s: s.start_task(7), "task_id must be a string"),
        (lambda s: s.begin_attempt("t1", "s" * 4_001), "strategy is 4,001"),
        (lambda s: s.record_gate("t1", "0"), "exit_code must be an integer"),
        (lambda s: s.record_gate("t1", 1.5), "exit_code must be an integer"),
        (
            lambda s: s.record_gate("t1", 1, output="o\x00"),
            "output must not contain control characters",
        ),
        (lambda s: s.record_gate("t1", 1, gate="a\nb"), "gate must not contain"),
        (lambda s: s.tasks(state="DONE"), "state must be one of"),
        (lambda s: s.notifications(after=-1), "after must be a non-negative"),
    ],
)
def test_bad_input_names_what_was_wrong(
    service: RecoveryService, call: object, message: str
) -> None:
    service.start_task("t1")
    events = event_count(service)
    with pytest.raises(InvalidInput, match=message):
        call(service)  # type: ignore[operator]
    assert event_count(service) == events


def test_tasks_index_by_state_and_run(service: RecoveryService) -> None:
    service.start_run("r1", {"t1": [], "t2": []})
    service.start_task("t1", run_id="r1")
    service.start_task("t2", run_id="r1")
    service.start_task("solo")
    escalate(service, "t1")
    assert [t.task_id for t in service.tasks(state="ESCALATION")] == ["t1"]
    assert sorted(t.task_id for t in service.tasks(run_id="r1")) == ["t1", "t2"]
    assert len(service.tasks()) == 3


def test_start_task_retries_when_its_run_was_written_meanwhile(
    service: RecoveryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventsourcing.persistence import IntegrityError

    service.start_run("r1", {"a": [], "b": []})
    real_save = RecoveryService.save
    calls = []

    def save_losing_one_race(self: RecoveryService, *objs: Any) -> Any:
        calls.append(objs)
        if len(calls) == 1:
            raise IntegrityError("another process wrote run:r1 first")
        return real_save(self, *objs)

    monkeypatch.setattr(RecoveryService, "save", save_losing_one_race)
    summary = service.start_task("a", run_id="r1")
    assert summary.task_id == "a"
    assert len(calls) == 2
    with pytest.raises(AlreadyExists):
        service.start_task("a", run_id="r1")


def test_blocked_attempt_logs_the_attempt_and_the_stop(
    service: RecoveryService, decisions: pytest.LogCaptureFixture
) -> None:
    from tests.helpers import decision_lines

    service.start_task("t1")
    service.log_lesson("t1", "use a regex", "no")
    service.begin_attempt("t1", "use a regex")
    events = [d["event"] for d in decision_lines(decisions)]
    assert events[-2:] == ["task:blacklisted_strategy_attempted", "TASK_PAUSED"]


def test_lessons_are_snapshotted_like_any_event(
    service: RecoveryService, db_path: Path
) -> None:
    import sqlite3

    interval = RecoveryService.snapshotting_intervals[Task]
    service.start_task("t1")
    for i in range(interval - 1):
        service.log_lesson("t1", f"strategy {i}", "no")
    with sqlite3.connect(db_path) as connection:
        [(version,)] = connection.execute(
            "SELECT originator_version FROM stored_snapshots"
        ).fetchall()
    assert version == interval
