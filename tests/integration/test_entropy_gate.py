"""Seed 000: the HITL failure gate triggered by the agent's entropy."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from devs.adapters.config import Settings, open_service
from devs.domain import (
    EntropyDecision,
    GraphSuspended,
    InvalidInput,
    RecoveryService,
    UnknownTask,
    suspend_if_stopped,
)
from devs.domain.chart import TaskState
from tests.helpers import event_count


@pytest.fixture
def task(service: RecoveryService) -> str:
    service.start_task("t1")
    return "t1"


def test_below_threshold_does_not_trigger(service: RecoveryService, task: str) -> None:
    decision = service.report_entropy(task, 0.4)
    assert decision.triggered is False
    assert decision.session_id is None
    assert service.pending_sessions() == []
    assert service.task(task).state is TaskState.RUNNING


def test_at_or_above_threshold_triggers_a_session(
    service: RecoveryService, task: str
) -> None:
    decision = service.report_entropy(task, 0.8)
    assert decision.triggered is True
    assert decision.session_id is not None
    [session] = service.pending_sessions()
    assert session.task_id == task
    assert session.session_id == decision.session_id
    assert session.reason == "entropy_limit"
    assert service.task(task).state is TaskState.PAUSED


def test_exactly_the_threshold_triggers(service: RecoveryService, task: str) -> None:
    assert service.report_entropy(task, 0.75).triggered is True


def test_trigger_is_persisted_as_a_gate_record(
    service: RecoveryService, task: str
) -> None:
    decision = service.report_entropy(task, 0.9)
    status = service.gate_status(task)
    assert status.triggered is True
    assert status.session_id == decision.session_id
    assert status.reason == "entropy_limit"
    assert status.entropy_score == 0.9
    assert status.triggered_at is not None


def test_no_duplicate_gates_for_the_same_task(
    service: RecoveryService, task: str
) -> None:
    first = service.report_entropy(task, 0.9)
    events = event_count(service)
    second = service.report_entropy(task, 0.95)
    assert second.session_id == first.session_id
    assert event_count(service) == events  # nothing new recorded
    assert len(service.pending_sessions()) == 1


def test_gate_status_of_an_untriggered_task(
    service: RecoveryService, task: str
) -> None:
    status = service.gate_status(task)
    assert (status.triggered, status.session_id, status.reason) == (False, None, None)
    with pytest.raises(UnknownTask):
        service.gate_status("nope")


@pytest.mark.parametrize(
    "score", [1.5, -0.2, math.nan, math.inf, -math.inf, "0.9", True]
)
def test_bad_scores_are_rejected_and_nothing_is_written(
    service: RecoveryService, task: str, score: object
) -> None:
    events = event_count(service)
    with pytest.raises(InvalidInput, match="score"):
        service.report_entropy(task, score)  # type: ignore[arg-type]
    assert event_count(service) == events


def test_policy_threshold_from_the_environment(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEVS_HITL_ENTROPY_THRESHOLD", "0.5")
    with open_service(Settings(db=str(db_path))) as app:
        app.start_task("t1")
        assert app.report_entropy("t1", 0.55).triggered is True
        assert app.task("t1").policy.hitl_entropy_threshold == 0.5


def test_recorded_policy_wins_over_a_later_environment(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEVS_HITL_ENTROPY_THRESHOLD", "0.5")
    with open_service(Settings(db=str(db_path))) as app:
        app.start_task("t1")
    monkeypatch.setenv("DEVS_HITL_ENTROPY_THRESHOLD", "0.9")
    with open_service(Settings(db=str(db_path))) as app:
        assert app.report_entropy("t1", 0.6).triggered is True


class StubGraph:
    """A LangGraph-like loop: after each agent node, ask the entropy gate."""

    def __init__(self, service: RecoveryService, task_id: str, scores: list[float]):
        self.service = service
        self.task_id = task_id
        self.scores = scores
        self.steps = 0

    def run(self) -> None:
        for score in self.scores:
            self.steps += 1
            decision: EntropyDecision = self.service.report_entropy(self.task_id, score)
            suspend_if_stopped(decision)


def test_high_entropy_suspends_the_graph(service: RecoveryService, task: str) -> None:
    graph = StubGraph(service, task, [0.2, 0.3, 0.91, 0.1])

    def run_with_a_generic_handler() -> None:
        try:
            graph.run()
        except Exception:  # a generic handler must not swallow the signal
            pytest.fail("GraphSuspended was caught as an Exception")

    with pytest.raises(GraphSuspended) as caught:
        run_with_a_generic_handler()
    assert graph.steps == 3
    assert caught.value.task_id == task
    [session] = service.pending_sessions()
    assert session.session_id == caught.value.session_id
    assert not issubclass(GraphSuspended, Exception)
