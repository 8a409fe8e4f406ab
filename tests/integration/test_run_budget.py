"""A run's budget (issue 39 points 2 and 3): recorded with the run's start,
every task's usage counted against it, all working tasks stopped at once
when it is spent, a person raising it and resuming them; on SQLite, in
memory and on PostgreSQL, and over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from devs.adapters.client import HttpRecoveryClient
from devs.adapters.config import Settings, open_service
from devs.adapters.http import create_app
from devs.domain import IllegalTransition, InvalidInput, OverBudget, RecoveryService
from devs.domain.chart import TaskState
from devs.domain.names import SessionReason
from devs.domain.policy import Policy
from devs.domain.run import Run, RunStatus
from tests.conftest import MakeService

OPUS = "claude-opus-4-5"  # $5 in, $25 out per million tokens
CALL: dict[str, Any] = {"model": OPUS, "input_tokens": 1_000, "output_tokens": 100}
"""$0.0075 a call."""


def budgeted_run(service: RecoveryService) -> None:
    """Run r (budget $0.02 from the policy): a and b working, c ready."""
    service.start_run("r", {"a": [], "b": [], "c": []})
    service.start_task("a", run_id="r", agent="codex")
    service.start_task("b", run_id="r", agent="claude-code")


def test_the_runs_budget_stops_every_working_task_at_once(
    make_service: MakeService,
) -> None:
    service = make_service(DEVS_RUN_BUDGET_USD="0.02")
    budgeted_run(service)
    assert not service.record_usage("a", **CALL).triggered
    assert not service.record_usage("b", **CALL).triggered
    crossing = service.record_usage("a", **CALL)  # $0.0225 of $0.02
    assert crossing.triggered
    assert crossing.state is TaskState.PAUSED
    assert crossing.session_id is not None
    assert crossing.spend.spent_usd == pytest.approx(0.015)  # the task's own
    for task_id in ("a", "b"):
        task = service.task(task_id)
        assert task.state is TaskState.PAUSED
        session = task.pending_session
        assert session is not None
        assert session.reason is SessionReason.BUDGET_EXHAUSTED
        assert session.spend is not None
        assert session.spend.scope == "run"
        assert session.spend.budget_usd == 0.02
        assert session.spend.spent_usd == pytest.approx(0.0225)
        assert session.spend.tokens == 3_300
    assert service.run_state("r").status is RunStatus.PAUSED
    report = service.run_spend("r")
    assert report.budget_usd == 0.02
    assert report.spent_usd == pytest.approx(0.0225)
    # Nothing more starts in it; nothing resumes until the run's budget rises.
    with pytest.raises(IllegalTransition, match="PAUSED"):
        service.start_task("c", run_id="r")
    with pytest.raises(OverBudget, match=r"devs budget --run r --usd N"):
        service.resume("b", actor="ana", reason="go on")
    assert service.task("b").state is TaskState.PAUSED  # nothing written


def test_a_raise_lets_the_stopped_tasks_be_resumed(make_service: MakeService) -> None:
    service = make_service(DEVS_RUN_BUDGET_USD="0.02")
    budgeted_run(service)
    for task_id in ("a", "b", "a"):
        service.record_usage(task_id, **CALL)
    with pytest.raises(InvalidInput, match="not above what run 'r' has spent"):
        service.raise_run_budget("r", usd=0.02, actor="ana", reason="more")
    state = service.raise_run_budget("r", usd=0.1, actor="ana", reason="worth it")
    assert state.status is RunStatus.PAUSED  # its tasks still wait
    service.resume("a", actor="ana", reason="go on")
    assert service.run_state("r").status is RunStatus.PAUSED  # b waits
    service.resume("b", actor="ana", reason="go on")
    assert service.run_state("r").status is RunStatus.RUNNING
    assert service.run_spend("r").budget_usd == 0.1
    service.start_task("c", run_id="r")
    assert not service.record_usage("c", **CALL).triggered
    names = [e.event for e in service.history("a")]
    assert names.count("Paused") == 1


def test_a_task_waiting_for_a_human_is_left_to_its_stop(
    make_service: MakeService,
) -> None:
    service = make_service(DEVS_RUN_BUDGET_USD="0.02")
    budgeted_run(service)
    service.report_entropy("b", 0.99)  # b waits for a human already
    for _ in range(3):
        service.record_usage("a", **CALL)
    b = service.task("b")
    assert b.pending_session is not None
    assert b.pending_session.reason is SessionReason.ENTROPY_LIMIT
    with pytest.raises(OverBudget):
        service.resume("b", actor="ana", reason="go on")


def test_a_run_without_a_budget_counts_nothing_and_has_none_to_raise(
    make_service: MakeService,
) -> None:
    service = make_service()
    budgeted_run(service)
    for _ in range(5):
        assert not service.record_usage("a", **CALL).triggered
    assert service.run_spend("r").budget_usd is None
    with pytest.raises(InvalidInput, match="run 'r' has no budget"):
        service.raise_run_budget("r", usd=1.0, actor="ana", reason="more")


def test_run_stops_replay_and_what_if_as_recorded(make_service: MakeService) -> None:
    service = make_service(DEVS_RUN_BUDGET_USD="0.02")
    budgeted_run(service)
    for task_id in ("a", "b", "a"):
        service.record_usage(task_id, **CALL)
    service.raise_run_budget("r", usd=1.0, actor="ana", reason="more")
    service.resume("b", actor="ana", reason="go on")
    check = service.replay_check()
    assert check.ok, check
    report = service.what_if(policy={}, run_id="r")
    assert report.changed == []


def test_the_run_counts_each_usage_once_in_its_events(tmp_path: Path) -> None:
    service = open_service(
        Settings(db=str(tmp_path / "s.sqlite")), policy=Policy(run_budget_usd=5.0)
    )
    try:
        budgeted_run(service)
        service.record_usage("a", **CALL, usage_id="m1")
        service.record_usage("a", **CALL, usage_id="m1")  # a repeat: nothing
        service.record_usage("b", model="mystery", input_tokens=7, output_tokens=0)
        run: Run = service._store.get(Run.create_id("r"))
        spend = run.spend()
        assert (spend.spent_usd, spend.tokens, spend.unknown_cost_tokens) == (
            0.0075,
            1_107,
            7,
        )
        assert spend.budget_usd == 5.0
    finally:
        service.close()


# ------------------------------------------------------------------ HTTP

TOKEN = "s3cret-token-for-run-budgets"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[HttpRecoveryClient]:
    service = open_service(
        Settings(db=str(tmp_path / "s.sqlite")), policy=Policy(run_budget_usd=0.02)
    )
    try:
        with TestClient(create_app(service, token=TOKEN)) as http:
            yield HttpRecoveryClient(http, token=TOKEN)
    finally:
        service.close()


def test_over_http_a_run_budget_is_raised_and_its_spend_read(
    client: HttpRecoveryClient,
) -> None:
    client.start_run("r", {"a": [], "b": []})
    client.start_task("a", run_id="r")
    for _ in range(3):
        decision = client.record_usage("a", **CALL)
    assert decision.triggered
    assert client.run_spend("r").budget_usd == 0.02
    with pytest.raises(OverBudget, match="devs budget --run r"):
        client.resume("a", actor="ana", reason="go on")
    with pytest.raises(InvalidInput, match="not above"):
        client.raise_run_budget("r", usd=0.01, actor="ana", reason="more")
    state = client.raise_run_budget("r", usd=1.0, actor="ana", reason="more")
    assert state.run_id == "r"
    client.resume("a", actor="ana", reason="go on")
    assert client.run_state("r").status is RunStatus.RUNNING
    assert client.task_spend("a").spent_usd == pytest.approx(0.0225)


def test_a_snapshot_keeps_the_runs_spend_and_budget(make_service: MakeService) -> None:
    """Past 200 events a run is snapshotted: its spend, budget and stop
    come back from the snapshot as they were."""
    service = make_service(DEVS_RUN_BUDGET_USD="1")
    budgeted_run(service)
    small: dict[str, Any] = {"model": OPUS, "input_tokens": 10, "output_tokens": 1}
    for _ in range(205):
        service.record_usage("a", **small)
    fresh = make_service(DEVS_RUN_BUDGET_USD="1")
    run: Run = fresh._store.get(Run.create_id("r"))
    assert run.version > 200
    spend = run.spend()
    assert spend.tokens == 205 * 11
    assert spend.spent_usd == pytest.approx(205 * 0.000075)
    assert (spend.budget_usd, run.over_budget) == (1.0, False)
    stored = fresh.snapshots
    assert stored is not None
    assert list(stored.get(Run.create_id("r"), desc=True, limit=1))


def test_a_usage_sent_once_only_still_stops_every_task(
    make_service: MakeService,
) -> None:
    """A usage under an idempotency key (LangGraph's, an HTTP retry's):
    the stops of the run's other tasks are commands of their own."""
    service = make_service(DEVS_RUN_BUDGET_USD="0.02")
    budgeted_run(service)
    service.record_usage("b", **CALL)
    service.record_usage("b", **CALL)
    with service.exactly_once("usage-1", "record_usage a"):
        crossing = service.record_usage("a", **CALL)
    assert crossing.triggered
    assert crossing.state is TaskState.PAUSED
    for task_id in ("a", "b"):
        assert service.task(task_id).state is TaskState.PAUSED, task_id
    with service.exactly_once("usage-1", "record_usage a"):
        again = service.record_usage("a", **CALL)
    assert again.cost_usd == crossing.cost_usd  # answered from its receipt
    assert service.task_spend("a").spent_usd == pytest.approx(0.0075)


def test_a_usage_that_spends_both_budgets_stops_the_whole_run(
    make_service: MakeService,
) -> None:
    service = make_service(DEVS_RUN_BUDGET_USD="0.02", DEVS_TASK_BUDGET_USD="0.015")
    budgeted_run(service)
    service.record_usage("b", **CALL)
    service.record_usage("a", **CALL)
    crossing = service.record_usage("a", **CALL)  # a's $0.015, the run's $0.0225
    assert crossing.triggered
    a, b = service.task("a"), service.task("b")
    assert a.pending_session is not None
    assert a.pending_session.spend is not None
    assert a.pending_session.spend.scope is None  # its own budget stopped it
    assert b.state is TaskState.PAUSED  # the run's
    assert b.pending_session is not None
    assert b.pending_session.spend is not None
    assert b.pending_session.spend.scope == "run"


def test_the_run_read_model_says_its_budget_stop(make_service: MakeService) -> None:
    """A run whose budget is spent while no task works: paused in its read
    model too, and a task refused with the raise that lets it start."""
    service = make_service(DEVS_RUN_BUDGET_USD="0.02")
    service.start_run("r", {"a": [], "b": ["a"]})
    service.start_task("a", run_id="r")
    service.record_gate("a", 0)  # a completes; b is ready
    for _ in range(3):
        service.record_usage("a", **CALL)  # its last calls, after its pass
    state = service.run_state("r")
    assert (state.status, state.over_budget) == (RunStatus.PAUSED, True)
    with pytest.raises(IllegalTransition, match=r"devs budget --run r --usd N"):
        service.start_task("b", run_id="r")
    raised = service.raise_run_budget("r", usd=1.0, actor="ana", reason="more")
    assert (raised.status, raised.over_budget) == (RunStatus.RUNNING, False)
    assert service.run_state("r").status is RunStatus.RUNNING
    service.start_task("b", run_id="r")


def test_a_raise_frees_a_descendants_scope_run_another_stop_holds(
    make_service: MakeService,
) -> None:
    service = make_service(DEVS_RUN_BUDGET_USD="0.02")
    service.start_run("r", {"a": [], "b": [], "c": []}, stop_scope="descendants")
    service.start_task("a", run_id="r")
    service.start_task("b", run_id="r")
    service.report_entropy("b", 0.99)  # b stops; in this scope the run goes on
    assert service.run_state("r").status is RunStatus.RUNNING
    for _ in range(3):
        service.record_usage("a", **CALL)
    assert service.run_state("r").status is RunStatus.PAUSED
    state = service.raise_run_budget("r", usd=1.0, actor="ana", reason="more")
    assert state.status is RunStatus.RUNNING  # b's stop holds only its own
    assert service.run_state("r").status is RunStatus.RUNNING
    service.start_task("c", run_id="r")


def test_a_run_budget_raised_once_under_one_key(make_service: MakeService) -> None:
    service = make_service(DEVS_RUN_BUDGET_USD="0.02")
    budgeted_run(service)
    for _ in range(3):
        service.record_usage("a", **CALL)
    for _ in range(2):
        with service.exactly_once("raise-1", "raise r"):
            service.raise_run_budget("r", usd=1.0, actor="ana", reason="more")
    run: Run = service._store.get(Run.create_id("r"))
    events = list(service.events.get(run.id))
    assert sum(isinstance(e, Run.BudgetRaised) for e in events) == 1


def test_people_read_that_the_run_spent_its_budget(make_service: MakeService) -> None:
    from devs.adapters.notify.people import headline

    service = make_service(DEVS_RUN_BUDGET_USD="0.02")
    budgeted_run(service)
    for task_id in ("a", "b", "a"):
        service.record_usage(task_id, **CALL)
    opened = [
        headline(m)
        for m in service.outbox_messages()
        if str(m.type) == "session.opened"
    ]
    assert sorted(opened) == [
        "a needs a human: its run spent USD 0.02 of its run's 0.02 budget",
        "b needs a human: its run spent USD 0.02 of its run's 0.02 budget",
    ]
