"""The Task aggregate: the failure ladder, the gates, lessons and human actions.

Pure domain: no database. Events are collected from the aggregate and replayed.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from devs.domain.chart import TaskState
from devs.domain.errors import Claimed, IllegalTransition, InvalidInput
from devs.domain.gate import evaluate
from devs.domain.names import Resolution, SessionReason
from devs.domain.policy import Policy
from devs.domain.task import (
    BLACKLISTED_STRATEGY,
    MAX_LESSONS_PER_TASK,
    FailureRecord,
    Task,
    TaskEvent,
)


def state_of(task: Task) -> TaskState:
    """Read the state afresh (a command may have changed it since the last
    assert; mypy would otherwise keep the narrowed literal)."""
    return TaskState(task.state)


def dump(domain_event: object) -> str:
    assert isinstance(domain_event, BaseModel)
    return domain_event.model_dump_json()


def new_task(**policy: Any) -> Task:
    return Task(
        task_id="t1",
        run_id=None,
        agent="coder",
        last_commit="c0ffee",
        policy=Policy(**policy),
    )


def fail(task: Task, strategy: str | None = None, output: str = "trace") -> None:
    task.record_gate(
        evaluate(1),
        gate="tests",
        strategy=strategy,
        error="assert 1 == 2",
        output=output,
    )


def replay(task: Task) -> Task:
    """Rebuild the task from the events it has produced so far."""
    events = list(task.pending_events)
    rebuilt: Any = None
    for domain_event in events:
        rebuilt = domain_event.mutate(rebuilt)
    assert isinstance(rebuilt, Task)
    return rebuilt


def event_names(task: Task) -> list[str]:
    return [type(e).__name__ for e in task.pending_events]


def test_starts_running_with_the_policy_recorded() -> None:
    task = new_task(escalation_threshold=2)
    assert task.state is TaskState.RUNNING
    assert task.consecutive_failures == 0
    started = task.pending_events[0]
    assert isinstance(started, Task.Started)
    assert started.policy.escalation_threshold == 2


def test_failures_below_threshold_stay_in_gate_failed() -> None:
    task = new_task()
    fail(task)
    fail(task)
    assert task.state is TaskState.GATE_FAILED
    assert task.consecutive_failures == 2
    assert event_names(task) == ["Started", "GateFailed", "GateFailed"]


def test_third_failure_escalates_with_a_report() -> None:
    task = new_task()
    for strategy in ("regex", "parser combinator", "regex"):
        task.begin_attempt(strategy)
        fail(task)
    assert task.state is TaskState.ESCALATION
    assert task.consecutive_failures == 3
    assert event_names(task)[-2:] == ["GateFailed", "Escalated"]
    escalated = task.pending_events[-1]
    assert isinstance(escalated, Task.Escalated)
    assert escalated.session.reason is SessionReason.MAX_RETRIES
    report = escalated.report
    assert report.task_id == "t1"
    assert report.failure_count == 3
    assert report.failed_strategies == ("regex", "parser combinator")
    assert report.last_error == "assert 1 == 2"


def test_human_asked_again_at_four_and_handed_off_at_five() -> None:
    task = new_task()
    for _ in range(3):
        fail(task)
    task.resume(actor="alice", reason="one more try")
    assert task.consecutive_failures == 3  # resume never resets the count
    fail(task)
    assert task.state is TaskState.ESCALATION
    task.resume(actor="alice", reason="last try")
    fail(task, output="final trace")
    assert state_of(task) is TaskState.HAND_OFF
    handed = task.pending_events[-1]
    assert isinstance(handed, Task.HandedOff)
    payload = handed.payload
    assert payload.task_id == "t1"
    assert payload.failure_count == 5
    assert len(payload.failure_history) == 5
    assert payload.last_error_hash == hashlib.sha256(b"final trace").hexdigest()
    assert payload.last_error_excerpt == "final trace"
    assert payload.originating_agent == "coder"
    assert payload.last_commit == "c0ffee"


def test_a_pass_resets_the_count_and_completes() -> None:
    task = new_task()
    fail(task)
    fail(task)
    task.record_gate(evaluate(0), gate="tests", strategy=None, error=None, output=None)
    assert task.state is TaskState.COMPLETED
    assert task.consecutive_failures == 0
    assert task.failures == []


@pytest.mark.parametrize("action", ["resume", "rewind"])
def test_resume_and_rewind_keep_the_count(action: str) -> None:
    task = new_task()
    for _ in range(3):
        fail(task)
    getattr(task, action)(
        actor="bob", reason="r", **({"to_commit": None} if action == "rewind" else {})
    )
    assert task.state is TaskState.RUNNING
    assert task.consecutive_failures == 3
    fail(task)
    assert state_of(task) is TaskState.ESCALATION  # 4 >= 3: a human is asked again


def test_skip_keeps_the_count() -> None:
    task = new_task()
    fail(task)
    task.skip(actor="bob", reason="not needed")
    assert task.state is TaskState.SKIPPED
    assert task.consecutive_failures == 1


def test_rewind_defaults_to_the_starting_commit() -> None:
    task = new_task()
    fail(task)
    task.rewind(actor="a", reason="r", to_commit=None)
    rewound = task.pending_events[-1]
    assert isinstance(rewound, Task.Rewound)
    assert rewound.to_commit == "c0ffee"
    task.rewind(actor="a", reason="r", to_commit="beef")
    assert task.last_commit == "beef"


def test_gate_results_rejected_while_waiting_for_a_human() -> None:
    task = new_task()
    for _ in range(3):
        fail(task)
    before = len(task.pending_events)
    with pytest.raises(IllegalTransition, match="ESCALATION"):
        fail(task)
    with pytest.raises(IllegalTransition):
        task.record_gate(evaluate(0), gate=None, strategy=None, error=None, output=None)
    assert len(task.pending_events) == before


def test_killed_process_is_a_failure() -> None:
    task = new_task()
    task.record_gate(
        evaluate(None), gate="tests", strategy=None, error=None, output=None
    )
    failure = task.failures[-1]
    assert failure.reason == "PROCESS_KILLED"
    assert failure.exit_code is None
    assert failure.error_message == "process was killed or timed out"


def test_blacklisted_attempt_counts_pauses_and_records_the_event() -> None:
    task = new_task()
    task.log_lesson("use a regex", "regex cannot parse nested brackets")
    matched = task.begin_attempt("use a regex!")
    assert matched == "use a regex"
    assert task.state is TaskState.PAUSED
    assert task.consecutive_failures == 1
    assert event_names(task)[-2:] == ["BlacklistedStrategyAttempted", "Paused"]
    paused = task.pending_events[-1]
    assert isinstance(paused, Task.Paused)
    assert paused.session.reason is SessionReason.BLACKLISTED_STRATEGY
    assert task.failures[-1].reason == BLACKLISTED_STRATEGY


def test_blacklisted_attempt_at_the_threshold_escalates() -> None:
    task = new_task()
    task.log_lesson("use a regex", "no")
    fail(task)
    fail(task)
    task.begin_attempt("use a regex")
    assert task.state is TaskState.ESCALATION
    assert task.consecutive_failures == 3


def test_allowed_attempt_records_the_strategy() -> None:
    task = new_task()
    assert task.begin_attempt("write a parser") is None
    assert task.current_strategy == "write a parser"
    fail(task)
    assert task.failures[-1].strategy == "write a parser"


def test_attempt_after_failed_gate_returns_to_running() -> None:
    task = new_task()
    fail(task)
    task.begin_attempt("another idea")
    assert task.state is TaskState.RUNNING


def test_entropy_below_threshold_records_a_measurement() -> None:
    task = new_task()
    assert task.report_entropy(0.4) is None
    assert event_names(task)[-1] == "EntropyMeasured"
    assert task.state is TaskState.RUNNING


def test_entropy_at_threshold_pauses_once() -> None:
    task = new_task()
    session = task.report_entropy(0.75)
    assert session is not None
    assert session.reason is SessionReason.ENTROPY_LIMIT
    assert session.entropy_score == 0.75
    assert task.state is TaskState.PAUSED
    count = len(task.pending_events)
    again = task.report_entropy(0.9)
    assert again == session
    assert len(task.pending_events) == count  # nothing new recorded
    assert task.report_entropy(0.1) is None
    assert len(task.pending_events) == count


def test_entropy_after_resume_opens_a_new_session() -> None:
    task = new_task()
    first = task.report_entropy(0.8)
    task.resume(actor="a", reason="r")
    second = task.report_entropy(0.8)
    assert first is not None
    assert second is not None
    assert first.session_id != second.session_id


def test_lessons_are_deduplicated() -> None:
    task = new_task()
    task.log_lesson("use a regex", "first summary")
    task.log_lesson("use a regex", "newer summary")
    assert task.lessons == ["use a regex"]
    assert event_names(task).count("LessonLogged") == 2


def test_lessons_have_a_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("devs.domain.task.MAX_LESSONS_PER_TASK", 2)
    task = new_task()
    task.log_lesson("a", "x")
    task.log_lesson("b", "x")
    task.log_lesson("a", "again: an existing strategy is fine")
    with pytest.raises(InvalidInput, match="already has 2 lessons"):
        task.log_lesson("c", "x")
    assert MAX_LESSONS_PER_TASK == 1_000


def test_failure_history_is_capped() -> None:
    task = new_task(
        failure_history_cap=2, escalation_threshold=50, handoff_threshold=60
    )
    for i in range(5):
        fail(task, output=f"out {i}")
    assert [f.output_excerpt for f in task.failures] == ["out 3", "out 4"]
    assert task.consecutive_failures == 5


def test_secrets_are_redacted_before_they_reach_an_event() -> None:
    task = new_task(handoff_threshold=1)
    task.begin_attempt("call the API with token=abc123secret")
    task.record_gate(
        evaluate(1),
        gate="tests",
        strategy=None,
        error="401 for password=hunter2",
        output="Authorization: Bearer sekrit-value-12345",
    )
    dumped = "".join(dump(e) for e in task.pending_events)
    for secret in ("abc123secret", "hunter2", "sekrit-value-12345"):
        assert secret not in dumped


def test_handoff_claim_and_resolve() -> None:
    task = new_task(handoff_threshold=1)
    fail(task)
    assert task.state is TaskState.HAND_OFF
    task.claim_handoff(actor="carol")
    with pytest.raises(Claimed, match="claimed by 'carol'"):
        task.claim_handoff(actor="dave")
    with pytest.raises(Claimed, match="claimed by 'carol'"):
        task.resolve_handoff(actor="dave", resolution=Resolution.SKIP, reason="r")
    task.resolve_handoff(
        actor="carol", resolution=Resolution.RETURN, reason="fixed env"
    )
    assert state_of(task) is TaskState.RUNNING
    assert task.handoff is None
    assert task.claimed_by is None


@pytest.mark.parametrize(
    ("resolution", "state"),
    [(Resolution.COMPLETE, TaskState.COMPLETED), (Resolution.SKIP, TaskState.SKIPPED)],
)
def test_handoff_resolutions(resolution: Resolution, state: TaskState) -> None:
    task = new_task(handoff_threshold=1)
    fail(task)
    task.claim_handoff(actor="carol")
    task.resolve_handoff(actor="carol", resolution=resolution, reason="done by hand")
    assert task.state is state


def test_replay_reaches_the_same_state() -> None:
    task = new_task()
    task.log_lesson("regex", "no")
    task.begin_attempt("parser")
    fail(task)
    task.begin_attempt("regex")
    task.resume(actor="a", reason="r")
    task.report_entropy(0.2)
    fail(task)
    rebuilt = replay(task)
    assert rebuilt.state == task.state
    assert rebuilt.consecutive_failures == task.consecutive_failures
    assert rebuilt.failures == task.failures
    assert rebuilt.lessons == task.lessons


def test_gate_events_are_those_of_their_event_methods() -> None:
    """record_gate triggers its events directly: the same classes, fields and
    state as the @event methods (_fail_gate, _pass_gate) give."""
    direct, through_methods = new_task(), new_task()
    fail(direct)
    failure = direct.failures[-1]
    through_methods._fail_gate(
        failure=failure, consecutive_failures=1, stuck=direct.stuck
    )
    direct.record_gate(
        evaluate(0), gate="tests", strategy=None, error=None, output=None
    )
    through_methods._pass_gate(gate="tests", strategy=None)
    for ours, theirs in zip(
        direct.pending_events, through_methods.pending_events, strict=True
    ):
        assert type(ours) is type(theirs)
        assert isinstance(ours, BaseModel)
        assert isinstance(theirs, BaseModel)
        # The chain links differ: they hash the earlier events' timestamps.
        assert ours.model_dump(exclude={"timestamp", "chain_prev"}) == (
            theirs.model_dump(exclude={"timestamp", "chain_prev"})
        )
    assert event_names(direct)[1:] == ["GateFailed", "GatePassed"]
    assert replay(direct).state == direct.state == through_methods.state


def test_values_built_from_a_dict_are_those_the_constructor_builds() -> None:
    fields: dict[str, Any] = {
        "kind": "gate",
        "gate": "tests",
        "reason": "NON_ZERO_EXIT",
        "exit_code": 1,
        "error_hash": "0" * 64,
        "at": "2024-01-01T00:00:00+00:00",
    }
    built = FailureRecord.of(fields)
    assert type(built) is FailureRecord
    assert built == FailureRecord(**fields)
    assert built.model_fields_set == set(fields)
    for bad in ({**fields, "exit_code": "x"}, {**fields, "extra": 1}, {"kind": "x"}):
        with pytest.raises(ValidationError) as via_of:
            FailureRecord.of(bad)
        with pytest.raises(ValidationError) as via_init:
            FailureRecord(**bad)
        assert via_of.value.errors() == via_init.value.errors()


def test_events_fold_to_the_aggregate_state_through_their_trigger() -> None:
    """Read models fold ``state_after`` of each event: it must agree with replay."""
    task = new_task(handoff_threshold=4)
    task.log_lesson("regex", "no")
    for _ in range(2):
        fail(task)
    task.begin_attempt("regex")
    task.resume(actor="a", reason="r")
    fail(task)
    task.claim_handoff(actor="c")
    task.resolve_handoff(actor="c", resolution=Resolution.SKIP, reason="r")
    state = ""
    for domain_event in task.pending_events:
        assert isinstance(domain_event, TaskEvent | Task.Started)
        state = domain_event.state_after(state)
    assert state == task.state == TaskState.SKIPPED


def test_snapshot_round_trip() -> None:
    task = new_task()
    task.log_lesson("regex", "no")
    fail(task)
    task.report_entropy(0.9)
    task.collect_events()
    snapshot = Task.Snapshot.take(task)
    restored = Task.Snapshot.model_validate_json(snapshot.model_dump_json()).mutate(
        None
    )
    assert restored == task
