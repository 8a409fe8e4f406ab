"""Seeds 001 and 002: the binary gate, the DAG and escalation at three failures."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

from devs.adapters.config import Settings, open_service
from devs.domain import GateDecision, IllegalTransition, Outcome, RecoveryService
from devs.domain.chart import TaskState
from devs.domain.run import RunStatus
from tests.helpers import decision_lines, event_count


def fail(
    service: RecoveryService, task_id: str, strategy: str, error: str = "boom"
) -> GateDecision:
    service.begin_attempt(task_id, strategy)
    return service.record_gate(task_id, 1, gate="tests", error=error, output="trace")


def test_fewer_than_three_failures_do_not_pause(service: RecoveryService) -> None:
    service.start_task("t1")
    first = fail(service, "t1", "a")
    second = fail(service, "t1", "b")
    assert (first.outcome, second.outcome) == (Outcome.STAY, Outcome.STAY)
    assert second.state is TaskState.GATE_FAILED
    assert second.consecutive_failures == 2
    assert second.report is None


def test_exactly_three_failures_escalate_with_a_report(
    service: RecoveryService,
) -> None:
    service.start_task("t1")
    fail(service, "t1", "regex")
    fail(service, "t1", "state machine")
    decision = fail(service, "t1", "regex", error="IndexError: list index")
    assert decision.outcome is Outcome.ESCALATE
    assert decision.state is TaskState.ESCALATION
    assert decision.consecutive_failures == 3
    report = decision.report
    assert report is not None
    assert report.task_id == "t1"
    assert report.failure_count == 3
    assert report.failed_strategies == ("regex", "state machine")
    assert report.last_error == "IndexError: list index"
    assert decision.session_id is not None
    [session] = service.pending_sessions()
    assert session.reason == "max_retries"
    assert session.failure_count == 3


def test_success_resets_the_counter(service: RecoveryService) -> None:
    service.start_task("t1")
    fail(service, "t1", "a")
    fail(service, "t1", "b")
    passed = service.record_gate("t1", 0, gate="tests")
    assert passed.passed is True
    assert passed.consecutive_failures == 0
    assert passed.outcome is Outcome.COMPLETE
    report = service.failure_report("t1")
    assert report.failure_count == 0
    assert report.failed_strategies == ()


def test_counts_survive_a_restart(db_path: Path, service: RecoveryService) -> None:
    service.start_task("t1")
    fail(service, "t1", "a")
    fail(service, "t1", "b")
    service.close()
    with open_service(Settings(db=str(db_path))) as restarted:
        assert restarted.task("t1").consecutive_failures == 2
        assert restarted.failure_report("t1").failure_count == 2
        assert fail(restarted, "t1", "c").outcome is Outcome.ESCALATE


def test_counter_is_per_task(service: RecoveryService) -> None:
    service.start_task("t1")
    service.start_task("t2")
    fail(service, "t1", "a")
    fail(service, "t1", "b")
    assert fail(service, "t2", "a").consecutive_failures == 1
    assert service.task("t1").consecutive_failures == 2


def test_escalation_pauses_the_run(service: RecoveryService) -> None:
    service.start_run("r1", {"t1": [], "t2": ["t1"]})
    service.start_task("t1", run_id="r1")
    for strategy in ("a", "b", "c"):
        fail(service, "t1", strategy)
    state = service.run_state("r1")
    assert state.status is RunStatus.PAUSED
    assert state.paused_by == ("t1",)
    service.resume("t1", actor="alice", reason="try once more")
    assert service.run_state("r1").status is RunStatus.RUNNING


def test_passing_gate_advances_the_dag(service: RecoveryService) -> None:
    service.start_run("r1", {"build": [], "test": ["build"], "ship": ["test"]})
    service.start_task("build", run_id="r1")
    decision = service.record_gate("build", 0, gate="tests")
    assert decision.outcome is Outcome.ADVANCE
    assert decision.next_node == "test"
    assert service.run_state("r1").ready == ("test",)


def test_failing_gate_stays_on_the_node_and_logs_gate_failed(
    service: RecoveryService, decisions: pytest.LogCaptureFixture
) -> None:
    service.start_run("r1", {"build": [], "test": ["build"]})
    service.start_task("build", run_id="r1")
    decision = service.record_gate("build", 2, gate="lint", error="E501")
    assert decision.outcome is Outcome.STAY
    assert decision.next_node is None
    assert service.run_state("r1").completed == ()
    [line] = [d for d in decision_lines(decisions) if d["event"] == "GATE_FAILED"]
    assert line["task_id"] == "build"
    assert line["gate"] == "lint"
    assert line["reason"] == "NON_ZERO_EXIT"
    assert line["exit_code"] == 2
    assert line["consecutive_failures"] == 1
    assert line["error_hash"] == decision.error_hash


def test_last_node_completes_the_run(service: RecoveryService) -> None:
    service.start_run("r1", {"only": []})
    service.start_task("only", run_id="r1")
    decision = service.record_gate("only", 0)
    assert decision.outcome is Outcome.COMPLETE
    assert decision.next_node is None
    assert service.run_state("r1").status is RunStatus.COMPLETED


def test_three_failures_notify_user_escalation_after_logging_it(
    service: RecoveryService, decisions: pytest.LogCaptureFixture
) -> None:
    service.start_task("t1")
    for strategy in ("a", "b", "c"):
        fail(service, "t1", strategy)
    [notification] = service.notifications()
    assert notification.kind == "USER_ESCALATION"
    assert notification.task_id == "t1"
    assert notification.failure_count == 3
    names = [d["event"] for d in decision_lines(decisions)]
    assert names.index("ESCALATION_TRIGGERED") > len(names) - 3
    escalation = next(
        d for d in decision_lines(decisions) if d["event"] == "ESCALATION_TRIGGERED"
    )
    assert escalation["consecutive_failures"] == 3
    assert escalation["error_hash"]


def test_gate_events_before_escalation_are_in_order(service: RecoveryService) -> None:
    service.start_task("t1")
    for strategy in ("a", "b", "c"):
        fail(service, "t1", strategy)
    names = [entry.event for entry in service.history("t1")]
    assert names[-2:] == ["GateFailed", "Escalated"]


def test_killed_process_fails_the_gate(service: RecoveryService) -> None:
    service.start_task("t1")
    decision = service.record_gate("t1", None, gate="tests")
    assert decision.passed is False
    assert decision.reason == "PROCESS_KILLED"


def test_gate_while_escalated_is_illegal_and_writes_nothing(
    service: RecoveryService,
) -> None:
    service.start_task("t1")
    for strategy in ("a", "b", "c"):
        fail(service, "t1", strategy)
    events = event_count(service)
    with pytest.raises(IllegalTransition, match="state ESCALATION"):
        service.record_gate("t1", 0)
    with pytest.raises(IllegalTransition):
        service.begin_attempt("t1", "d")
    assert event_count(service) == events


def test_counters_do_not_carry_between_runs(service: RecoveryService) -> None:
    service.start_run("r1", {"t": []})
    service.start_run("r2", {"t-again": []})
    service.start_task("t", run_id="r1")
    fail(service, "t", "a")
    fail(service, "t", "b")
    service.start_task("t-again", run_id="r2")
    assert fail(service, "t-again", "a").consecutive_failures == 1


def test_stops_are_logged_at_warning_and_the_rest_at_info(
    service: RecoveryService, decisions: pytest.LogCaptureFixture
) -> None:
    service.start_task("t1")
    for _ in range(3):
        service.record_gate("t1", 1, error="boom")
    service.resume("t1", actor="h", reason="again")
    service.report_entropy("t1", 0.9)
    levels = {
        orjson.loads(record.getMessage())["event"]: record.levelname
        for record in decisions.records
        if record.name == "devs.decisions"
    }
    assert levels == {
        "TASK_STARTED": "INFO",
        "GATE_FAILED": "INFO",
        "ESCALATION_TRIGGERED": "WARNING",
        "HUMAN_ACTION": "INFO",
        "ENTROPY_LIMIT": "WARNING",
    }


def test_with_info_off_only_stops_are_logged(
    service: RecoveryService, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="devs.decisions")
    service.start_task("t1")
    for _ in range(3):
        service.record_gate("t1", 1)
    events = [
        orjson.loads(r.getMessage())["event"]
        for r in caplog.records
        if r.name == "devs.decisions"
    ]
    assert events == ["ESCALATION_TRIGGERED"]
