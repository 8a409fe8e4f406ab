"""Real processes: gate results from real exit codes, and concurrent writers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devs.adapters.config import Settings, open_service
from devs.domain import Outcome, Policy, RecoveryService
from devs.domain.chart import TaskState
from tests.helpers import decision_lines


def exit_code_of(command: list[str], timeout: float = 10) -> int | None:
    """Run a real process; ``None`` when it had to be killed."""
    try:
        return subprocess.run(command, timeout=timeout, check=False).returncode
    except subprocess.TimeoutExpired:
        return None


def test_a_real_process_exiting_0_advances_the_dag(service: RecoveryService) -> None:
    service.start_run("r1", {"build": [], "test": ["build"]})
    service.start_task("build", run_id="r1")
    decision = service.record_gate("build", exit_code_of(["true"]), gate="build")
    assert decision.outcome is Outcome.ADVANCE
    assert decision.next_node == "test"


def test_a_real_process_exiting_1_stays_and_logs_gate_failed(
    service: RecoveryService, decisions: pytest.LogCaptureFixture
) -> None:
    service.start_run("r1", {"build": [], "test": ["build"]})
    service.start_task("build", run_id="r1")
    decision = service.record_gate("build", exit_code_of(["false"]), gate="build")
    assert decision.outcome is Outcome.STAY
    assert service.run_state("r1").ready == ()
    assert [d["event"] for d in decision_lines(decisions)][-1] == "GATE_FAILED"


def test_three_real_failures_escalate_and_notify(service: RecoveryService) -> None:
    service.start_task("t1")
    for _ in range(3):
        decision = service.record_gate("t1", exit_code_of(["false"]))
    assert decision.state is TaskState.ESCALATION
    assert [n.kind for n in service.notifications()] == ["USER_ESCALATION"]


def test_a_process_past_its_timeout_is_killed(service: RecoveryService) -> None:
    service.start_task("t1")
    code = exit_code_of(["sleep", "5"], timeout=0.2)
    decision = service.record_gate("t1", code)
    assert decision.reason == "PROCESS_KILLED"


def test_concurrent_writers_lose_no_failure(db_path: Path) -> None:
    """Two processes report failures on one task at once: every one is counted."""
    patient = Policy(escalation_threshold=1000, handoff_threshold=1000)
    with open_service(Settings(db=str(db_path)), policy=patient) as app:
        app.start_task("shared")
    writer = textwrap.dedent(
        f"""
        from devs.domain import RecoveryService
        app = RecoveryService(env={{"SQLITE_DBNAME": {str(db_path)!r}}})
        for _ in range(60):
            app.record_gate("shared", 1, error="race")
        app.close()
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", writer]) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with open_service(Settings(db=str(db_path))) as app:
        assert app.task("shared").consecutive_failures == 120
        assert app.failure_report("shared").failure_count == 120
        counts = [h.consecutive_failures for h in app.history("shared")]
        assert counts == list(range(121))
