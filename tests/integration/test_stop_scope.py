"""A run may keep going around a stop: with ``stop_scope="descendants"``
(recorded with the run's start) a task's stop holds up only its descendants;
the default, ``run``, pauses the whole run (seed 001's rule)."""

from __future__ import annotations

import pytest

from devs.domain import IllegalTransition, InvalidInput, RecoveryService
from devs.domain.names import StopScope
from devs.domain.run import Run, RunStatus

DAG = {"a": [], "b": [], "c": ["a"]}


def escalate(service: RecoveryService, task_id: str) -> None:
    for _ in range(3):
        service.record_gate(task_id, 1, output="E boom")


def test_by_default_a_stop_pauses_the_whole_run(service: RecoveryService) -> None:
    service.start_run("r", DAG)
    service.start_task("a", run_id="r")
    escalate(service, "a")
    state = service.run_state("r")
    assert state.status is RunStatus.PAUSED
    assert state.stop_scope is StopScope.RUN
    with pytest.raises(IllegalTransition, match="run 'r' is PAUSED"):
        service.start_task("b", run_id="r")


def test_with_descendants_a_ready_branch_goes_on(service: RecoveryService) -> None:
    started = service.start_run("r", DAG, stop_scope="descendants")
    assert started.stop_scope is StopScope.DESCENDANTS
    service.start_task("a", run_id="r")
    escalate(service, "a")
    state = service.run_state("r")
    assert state.status is RunStatus.RUNNING
    assert state.paused_by == ("a",)
    assert state.ready == ("b",)
    service.start_task("b", run_id="r")  # beside the stop: goes on
    with pytest.raises(IllegalTransition, match="waiting for 'a'"):
        service.start_task("c", run_id="r")  # below it: waits
    service.resume("a", actor="ann", reason="go on")
    service.record_gate("a", 0)
    service.start_task("c", run_id="r")
    assert service.run_state("r").paused_by == ()


def test_the_scope_is_recorded_so_the_read_model_and_a_rebuild_agree(
    service: RecoveryService,
) -> None:
    service.start_run("r", DAG, stop_scope="descendants")
    service.start_task("a", run_id="r")
    escalate(service, "a")
    run: Run = service.repository.get(Run.create_id("r"))
    assert run.stop_scope is StopScope.DESCENDANTS
    before = service.run_state("r")
    service.rebuild_projections()
    assert service.run_state("r") == before


def test_an_unknown_scope_is_refused_naming_it(service: RecoveryService) -> None:
    with pytest.raises(InvalidInput, match="stop_scope") as refused:
        service.start_run("r", DAG, stop_scope="branch")  # type: ignore[arg-type]
    assert refused.value.field == "stop_scope"
    assert "one of run, descendants; got 'branch'" in str(refused.value)
