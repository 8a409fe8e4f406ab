"""The spend breaker (issue 39): usage recorded as an event, priced when
recorded, warned once, a budget stop a person answers by raising it; on
SQLite, in memory and on PostgreSQL."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from devs.domain import InvalidInput, OverBudget, RecoveryService
from devs.domain.names import SessionReason
from devs.domain.spend import PRICES, Price, price_of, prices_from
from tests.conftest import MakeService

SONNET = "claude-sonnet-4-5-20250929"  # $3 in, $15 out per million tokens


def budgeted(make_service: MakeService, **env: str) -> RecoveryService:
    service = make_service(**env)
    service.start_task("t")
    return service


def test_a_usage_is_priced_when_recorded_and_counted(make_service: MakeService) -> None:
    service = budgeted(make_service)
    decision = service.record_usage(
        "t",
        model=SONNET,
        input_tokens=100_000,
        output_tokens=10_000,
        cache_read_tokens=1_000_000,
        cache_creation_tokens=0,
        usage_id="msg_1",
    )
    # 0.1 M x $3 + 0.01 M x $15 + 1 M x $0.30
    assert decision.recorded
    assert decision.cost_usd == pytest.approx(0.3 + 0.15 + 0.3)
    assert decision.spend.spent_usd == pytest.approx(0.75)
    assert decision.spend.tokens == 1_110_000
    assert (decision.spend.budget_usd, decision.spend.budget_tokens) == (None, None)
    assert not decision.triggered
    assert not decision.warned
    # A cost given is kept as given; an unknown model's tokens count, its
    # cost is unknown.
    given = service.record_usage(
        "t", model=SONNET, input_tokens=1, output_tokens=1, cost_usd=2.5
    )
    assert given.cost_usd == 2.5
    unknown = service.record_usage(
        "t", model="house-model-7", input_tokens=40, output_tokens=2
    )
    assert unknown.cost_usd is None
    assert unknown.spend.unknown_cost_tokens == 42
    assert unknown.spend.spent_usd == pytest.approx(3.25)
    assert unknown.spend.tokens == 1_110_044


def test_a_usage_id_recorded_before_records_nothing(make_service: MakeService) -> None:
    service = budgeted(make_service)
    usage: dict[str, Any] = {"model": SONNET, "input_tokens": 10, "output_tokens": 5}
    first = service.record_usage("t", **usage, usage_id="msg_a")
    version = service.task("t").version
    again = service.record_usage("t", **usage, usage_id="msg_a")
    assert first.recorded
    assert not again.recorded
    assert again.cost_usd is None
    assert again.spend == first.spend
    assert service.task("t").version == version  # nothing written


def test_a_budget_warns_once_then_pauses_for_a_human_who_raises_it(
    make_service: MakeService,
) -> None:
    service = budgeted(make_service, DEVS_TASK_BUDGET_USD="1.0")
    call: dict[str, Any] = {"model": SONNET, "input_tokens": 0, "output_tokens": 0}
    below = service.record_usage("t", **call, cost_usd=0.5)
    assert not below.warned
    assert below.state == "RUNNING"
    warned = service.record_usage("t", **call, cost_usd=0.35)  # 0.85 of 1
    assert warned.warned
    assert not warned.triggered
    assert warned.state == "RUNNING"
    quiet = service.record_usage("t", **call, cost_usd=0.1)  # 0.95: warned once
    assert not quiet.warned
    stopped = service.record_usage("t", **call, cost_usd=0.1)  # 1.05
    assert stopped.triggered
    assert stopped.state == "PAUSED"
    session = service.task("t").pending_session
    assert session is not None
    assert session.reason is SessionReason.BUDGET_EXHAUSTED
    assert session.spend is not None
    assert session.spend.spent_usd == pytest.approx(1.05)
    assert session.spend.budget_usd == 1.0
    # Resuming over budget is refused, naming the command that raises it;
    # nothing is written.
    version = service.task("t").version
    with pytest.raises(OverBudget, match="devs budget t --usd"):
        service.resume("t", actor="ana", reason="go on")
    assert service.task("t").version == version
    # A raise must be above what was spent.
    with pytest.raises(InvalidInput, match="not above what task 't' has spent"):
        service.raise_budget("t", usd=1.0, actor="ana", reason="more")
    with pytest.raises(InvalidInput, match="needs usd, tokens or both"):
        service.raise_budget("t", actor="ana", reason="more")
    raised = service.raise_budget("t", usd=2.0, actor="ana", reason="worth it")
    assert raised.spend.budget_usd == 2.0
    assert raised.state == "PAUSED"  # a raise alone does not resume
    resumed = service.resume("t", actor="ana", reason="go on")
    assert resumed.state == "RUNNING"
    # The new budget warns again at its own fraction.
    again = service.record_usage("t", **call, cost_usd=0.6)  # 1.65 of 2
    assert again.warned
    # A notification for each warning, and for the stop.
    kinds = [(str(n.kind), n.reason) for n in service.notifications()]
    assert kinds.count(("BUDGET_WARNED", "budget_warned")) == 2
    assert ("TASK_PAUSED", "budget_exhausted") in kinds


def test_a_token_budget_stops_the_task_too(make_service: MakeService) -> None:
    service = budgeted(make_service, DEVS_TASK_BUDGET_TOKENS="1000")
    decision = service.record_usage(
        "t", model="house-model-7", input_tokens=900, output_tokens=100
    )
    assert decision.triggered
    assert decision.spend.tokens == 1000
    with pytest.raises(OverBudget, match="1,000 of 1,000 tokens"):
        service.resume("t", actor="ana", reason="go on")
    service.raise_budget("t", tokens=5000, actor="ana", reason="bigger")
    assert service.resume("t", actor="ana", reason="go on").state == "RUNNING"


def test_usage_is_counted_after_the_task_finished(make_service: MakeService) -> None:
    """A transcript read after the last gate still holds its last calls."""
    service = budgeted(make_service, DEVS_TASK_BUDGET_USD="0.01")
    service.record_gate("t", 0)
    late = service.record_usage("t", model=SONNET, input_tokens=10**6, output_tokens=0)
    assert late.recorded
    assert not late.triggered
    assert late.state == "COMPLETED"
    assert late.spend.spent_usd == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"input_tokens": -1}, "input_tokens"),
        ({"output_tokens": 1.5}, "output_tokens"),
        ({"output_tokens": True}, "output_tokens"),
        ({"cache_read_tokens": 10**13}, "cache_read_tokens"),
        ({"cost_usd": math.nan}, "cost_usd"),
        ({"cost_usd": -0.01}, "cost_usd"),
        ({"model": ""}, "model"),
        ({"model": "a\nb"}, "model"),
        ({"model": "x" * 201}, "model"),
        ({"usage_id": " padded"}, "usage_id"),
        ({"usage_id": "\ud800"}, "usage_id"),
    ],
)
def test_bad_usage_is_refused_by_name_and_writes_nothing(
    make_service: MakeService, arguments: dict[str, object], field: str
) -> None:
    service = budgeted(make_service)
    version = service.task("t").version
    call: dict[str, object] = {"model": SONNET, "input_tokens": 1, "output_tokens": 1}
    with pytest.raises(InvalidInput) as refused:
        service.record_usage("t", **{**call, **arguments})  # type: ignore[arg-type]
    assert refused.value.field == field
    assert field in str(refused.value)
    assert service.task("t").version == version


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"usd": 0}, "usd"),
        ({"usd": math.inf}, "usd"),
        ({"tokens": 0}, "tokens"),
        ({"tokens": "9"}, "tokens"),
    ],
)
def test_bad_raises_are_refused_by_name(
    make_service: MakeService, arguments: dict[str, object], field: str
) -> None:
    service = budgeted(make_service)
    with pytest.raises(InvalidInput) as refused:
        service.raise_budget("t", actor="ana", reason="r", **arguments)  # type: ignore[arg-type]
    assert refused.value.field == field


def test_the_history_replays_and_verifies(make_service: MakeService) -> None:
    service = budgeted(make_service, DEVS_TASK_BUDGET_USD="1.0")
    for i in range(3):
        service.record_usage(
            "t", model=SONNET, input_tokens=100_000, output_tokens=10_000,
            usage_id=f"msg_{i}",
        )  # fmt: skip
    assert service.task("t").state == "PAUSED"
    service.raise_budget("t", usd=5.0, actor="ana", reason="ok")
    service.resume("t", actor="ana", reason="ok")
    service.record_usage("t", model="house-model-7", input_tokens=5, output_tokens=5)
    assert service.verify().ok
    report = service.replay_check(task_ids=["t"])
    assert report.ok, report


# ------------------------------------------------------------- the price table


def test_a_model_is_priced_by_its_longest_known_name() -> None:
    assert price_of("claude-sonnet-4-5-20250929") == PRICES["claude-sonnet-4-5"]
    assert price_of("claude-opus-4-5-20251101") == PRICES["claude-opus-4-5"]
    assert price_of("claude-opus-4-20250514") == PRICES["claude-opus-4"]
    assert price_of("anthropic/claude-haiku-4-5") == PRICES["claude-haiku-4-5"]
    assert (
        price_of("us.anthropic.claude-sonnet-4-5-20250929-v1:0")
        == PRICES["claude-sonnet-4-5"]
    )
    assert price_of("claude-sonnet-4-6[1m]") == PRICES["claude-sonnet-4-6"]
    assert price_of("GPT-5.1-Codex-Max") == PRICES["gpt-5.1-codex-max"]
    assert price_of("gpt-5-2025-08-07") == PRICES["gpt-5"]
    assert price_of("models/gemini-2.5-flash-lite") == PRICES["gemini-2.5-flash-lite"]
    assert price_of("gemini-2.5-flash-preview-05-20") == PRICES["gemini-2.5-flash"]
    assert price_of("gemini-3-pro-preview") == PRICES["gemini-3-pro"]
    # A name that goes on past a priced one is another model: no price (its
    # tokens count, its cost is unknown), never a cheaper one's.
    for other in ("o3-pro", "gpt-5-pro", "gpt-5.2-pro", "o3-mini", "gpt-50"):
        assert price_of(other) is None, other
    assert price_of("house-model-7") is None


def test_devs_prices_overrides_and_extends_the_table(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_bytes(
        orjson.dumps(
            {
                "house-model": {"input": 1, "output": 2},
                "claude-sonnet-4": {"input": 2, "output": 9, "cache_read": 0.2},
            }
        )
    )
    table = prices_from({"DEVS_PRICES": str(path)})
    assert price_of("house-model", table) == Price(1.0, 2.0, 1.0, 1.0)
    assert price_of("house-model-20260101", table) == Price(1.0, 2.0, 1.0, 1.0)
    assert price_of("claude-sonnet-4-20250514", table) == Price(2.0, 9.0, 0.2, 2.0)
    assert price_of("gpt-5", table) == PRICES["gpt-5"]
    assert prices_from({}) is PRICES


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"{", "is not JSON"),
        (b"[]", "must hold an object"),
        (b'{"m": {"input": -1, "output": 1}}', "input must be a number"),
        (b'{"m": {"input": 1, "output": NaN}}', "is not JSON"),
        (b'{"m": {"input": 1}}', "output must be a number"),
        (b'{"m": {"input": 1, "output": true}}', "output must be a number"),
        (b'{"m": {"input": 1, "output": 1, "outptu": 1}}', "unknown price 'outptu'"),
        (b'{"m": 3}', "must name a model"),
    ],
)
def test_a_bad_prices_file_is_refused_by_name(
    tmp_path: Path, content: bytes, words: str
) -> None:
    path = tmp_path / "prices.json"
    path.write_bytes(content)
    with pytest.raises(InvalidInput, match=words) as refused:
        prices_from({"DEVS_PRICES": str(path)})
    assert refused.value.field == "DEVS_PRICES"


def test_a_missing_prices_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read"):
        prices_from({"DEVS_PRICES": str(tmp_path / "absent.json")})


# ------------------------------------------------------------------- over HTTP


def test_over_http_usage_stops_the_task_and_only_an_operator_raises_it(
    make_service: MakeService,
) -> None:
    from fastapi.testclient import TestClient

    from devs.adapters.client import HttpRecoveryClient
    from devs.adapters.http import create_app

    service = budgeted(make_service, DEVS_TASK_BUDGET_USD="1")
    alice = service.add_operator("alice", actor="root").token
    agent = {"Authorization": "Bearer agent-token-0123456789"}
    person = {"Authorization": f"Bearer {alice}"}
    app = create_app(service, token="agent-token-0123456789", read_wait=1.0)
    with TestClient(app) as http:
        used = http.post(
            "/tasks/t/usage",
            json={"model": SONNET, "input_tokens": 400_000, "output_tokens": 0},
            headers=agent,
        )
        assert used.status_code == 200, used.text
        assert used.json()["triggered"] is True
        assert used.json()["spend"]["spent_usd"] == pytest.approx(1.2)
        # A count as a string, an unknown field: refused, naming it.
        wrong = http.post(
            "/tasks/t/usage",
            json={"model": SONNET, "input_tokens": "5", "output_tokens": 0},
            headers=agent,
        )
        assert wrong.status_code == 422
        assert wrong.json()["field"] == "input_tokens"
        # The agent's token may not raise its own budget; a person's may.
        raise_it = {"usd": 5, "reason": "worth it"}
        assert (
            http.post("/tasks/t/budget", json=raise_it, headers=agent).status_code
            == 403
        )
        over = http.post("/tasks/t/resume", json={"reason": "go"}, headers=person)
        assert over.status_code == 409
        assert over.json()["error"] == "over_budget"
        seen = http.get("/tasks/t", headers=person).headers["ETag"]
        raised = http.post(
            "/tasks/t/budget", json=raise_it, headers={**person, "If-Match": seen}
        )
        assert raised.status_code == 200, raised.text
        assert raised.json()["actor"] == "alice"
        assert raised.json()["spend"]["budget_usd"] == 5.0
        assert raised.headers["ETag"] == f'"{raised.json()["version"]}"'
        stale = http.post(
            "/tasks/t/budget", json=raise_it, headers={**person, "If-Match": seen}
        )
        assert stale.status_code == 412
        assert (
            http.post("/tasks/t/resume", json={"reason": "go"}, headers=person).json()[
                "state"
            ]
            == "RUNNING"
        )
        # The client sends the same commands.
        client = HttpRecoveryClient(http)
        http.headers.update(agent)
        decision = client.record_usage(
            "t", model=SONNET, input_tokens=1, output_tokens=1, usage_id="m9"
        )
        assert decision.recorded
        assert not client.record_usage(
            "t", model=SONNET, input_tokens=1, output_tokens=1, usage_id="m9"
        ).recorded
        operations = http.get("/openapi.json").json()["paths"]
        assert "post" in operations["/tasks/{task_id}/usage"]
        assert "post" in operations["/tasks/{task_id}/budget"]


# ------------------------------------------- what people read of a budget stop


def test_people_read_what_was_spent_of_which_budget(make_service: MakeService) -> None:
    from devs.adapters.console.inbox import KINDS
    from devs.adapters.hooks.breaker import stop_reason
    from devs.adapters.notify.people import headline

    service = budgeted(make_service, DEVS_TASK_BUDGET_USD="1")
    call: dict[str, Any] = {"model": SONNET, "input_tokens": 0, "output_tokens": 0}
    service.record_usage("t", **call, cost_usd=0.85)
    service.record_usage("t", **call, cost_usd=0.3)
    lines = {str(m.type): headline(m) for m in service.outbox_messages()}
    assert lines["budget.warned"] == "t has spent USD 0.85 of its 1 budget"
    assert lines["session.opened"] == (
        "t needs a human: spent USD 1.15 of its 1 budget"
    )
    said = stop_reason(service.task("t"))
    assert "budget pause: it spent USD 1.1500" in said
    assert "devs budget t --usd N" in said
    assert KINDS["budget"] == "Budget pause"


def test_ten_usages_of_a_tenth_spend_a_budget_of_one(make_service: MakeService) -> None:
    """Floats summed as they come would reach 0.9999999999999999 and miss it."""
    service = budgeted(make_service, DEVS_TASK_BUDGET_USD="1")
    for _ in range(10):
        decision = service.record_usage(
            "t", model=SONNET, input_tokens=0, output_tokens=0, cost_usd=0.1
        )
    assert decision.spend.spent_usd == 1.0
    assert decision.triggered


def test_no_warning_once_a_budget_is_spent(make_service: MakeService) -> None:
    """Over the budget, the stop says so; a usage that comes while the task
    waits (or after it finished) warns of nothing."""
    service = budgeted(make_service, DEVS_TASK_BUDGET_USD="1")
    call: dict[str, Any] = {"model": SONNET, "input_tokens": 0, "output_tokens": 0}
    assert service.record_usage("t", **call, cost_usd=1.5).triggered
    late = service.record_usage("t", **call, cost_usd=0.1)
    assert not late.warned
    assert not late.triggered
    assert late.state == "PAUSED"
    assert [str(n.kind) for n in service.notifications()] == ["TASK_PAUSED"]


def test_what_if_under_the_recorded_policy_changes_nothing(
    make_service: MakeService,
) -> None:
    """Usage that arrives while the task waits, and a raise, answer no stop:
    what-if assumes no resume before them."""
    service = budgeted(make_service, DEVS_TASK_BUDGET_USD="1")
    call: dict[str, Any] = {"model": SONNET, "input_tokens": 0, "output_tokens": 0}
    service.record_usage("t", **call, cost_usd=1.0)
    service.record_usage("t", **call, cost_usd=0.1)
    service.raise_budget("t", usd=3, actor="ana", reason="ok")
    service.resume("t", actor="ana", reason="go on")
    service.record_usage("t", **call, cost_usd=1.5)  # warns at 2.6 of 3
    report = service.what_if(policy={}, task_ids=["t"])
    assert report.tasks == 1
    assert report.changed == []
    assert (report.assumed_resumes, report.dropped_human_actions) == (0, 0)
    assert report.what_if == report.recorded


def test_suspend_if_stopped_raises_on_a_budget_stop(make_service: MakeService) -> None:
    from devs.domain import GraphSuspended, suspend_if_stopped

    service = budgeted(make_service, DEVS_TASK_BUDGET_TOKENS="10")
    below = service.record_usage("t", model="m", input_tokens=5, output_tokens=0)
    suspend_if_stopped(below)  # goes on
    over = service.record_usage("t", model="m", input_tokens=5, output_tokens=0)
    with pytest.raises(GraphSuspended) as suspended:
        suspend_if_stopped(over)
    assert suspended.value.reason == "budget_exhausted"
    assert suspended.value.session_id == over.session_id


# ------------------------------------------------------------ seeing spend


def test_a_tasks_spend_says_its_totals_budgets_and_each_model(
    make_service: MakeService,
) -> None:
    service = make_service(DEVS_TASK_BUDGET_USD="2", DEVS_TASK_BUDGET_TOKENS="90000")
    service.start_task("t", agent="claude-code")
    service.record_usage(
        "t", model=SONNET, input_tokens=1_000, output_tokens=200, cache_read_tokens=50
    )
    service.record_usage("t", model=SONNET, input_tokens=10, output_tokens=0)
    service.record_usage("t", model="house-model", input_tokens=7, output_tokens=3)
    report = service.task_spend("t")
    assert (report.task_id, report.run_id) == ("t", None)
    assert math.isclose(report.spent_usd, 0.006 + 0.000_015 + 0.000_03, rel_tol=1e-9)
    assert (report.budget_usd, report.budget_tokens) == (2.0, 90_000)
    assert report.tokens == 1_270
    assert report.unknown_cost_tokens == 10
    assert [(m.agent, m.model, m.usages, m.tokens) for m in report.by_model] == [
        ("claude-code", SONNET, 2, 1_260),
        ("claude-code", "house-model", 1, 10),
    ]
    assert report.by_model[1].spent_usd == 0.0
    assert report.by_model[0].cache_read_tokens == 50
    # The same names as the session a budget stop opens.
    spend = service.task("t").spend
    assert spend is not None
    assert report.model_dump(exclude={"task_id", "run_id", "by_model"}) == (
        spend.model_dump(exclude={"scope"})
    )


def test_a_task_with_no_usage_spent_nothing(make_service: MakeService) -> None:
    service = budgeted(make_service)
    report = service.task_spend("t")
    assert (report.spent_usd, report.tokens, report.by_model) == (0.0, 0, ())
    with pytest.raises(Exception, match="unknown task 'nope'"):
        service.task_spend("nope")


def test_a_runs_spend_adds_up_its_tasks(make_service: MakeService) -> None:
    service = make_service()
    service.start_run("r", {"a": [], "b": ["a"]})
    service.start_task("a", run_id="r", agent="codex")
    service.start_task("other", agent="codex")
    service.record_usage("a", model="gpt-5", input_tokens=1_000_000, output_tokens=0)
    service.record_usage("other", model="gpt-5", input_tokens=5, output_tokens=5)
    service.record_usage("a", model="gpt-5", input_tokens=0, output_tokens=1_000)
    report = service.run_spend("r")
    assert (report.task_id, report.run_id) == (None, "r")
    assert report.tokens == 1_001_000
    assert [(m.agent, m.model, m.usages) for m in report.by_model] == [
        ("codex", "gpt-5", 2)
    ]
    assert report.spent_usd == report.by_model[0].spent_usd > 1.0
    with pytest.raises(Exception, match="unknown run 'nope'"):
        service.run_spend("nope")


def test_metrics_give_the_spend_by_agent_and_model_and_a_rebuild_keeps_it(
    make_service: MakeService,
) -> None:
    from devs.adapters.prometheus import exposition

    service = make_service()
    for task, agent in (("t", "claude-code"), ("u", "codex"), ("v", None)):
        service.start_task(task, agent=agent)
    service.record_usage("t", model=SONNET, input_tokens=100, output_tokens=10)
    service.record_usage("u", model="gpt-5", input_tokens=100, output_tokens=10)
    service.record_usage("v", model="gpt-5", input_tokens=1, output_tokens=1)
    service.record_usage(
        "t", model=SONNET, input_tokens=1, output_tokens=1, usage_id="once"
    )
    service.record_usage(
        "t", model=SONNET, input_tokens=1, output_tokens=1, usage_id="once"
    )
    before = service.metrics().spend
    assert {(m.agent, m.model, m.usages) for m in before} == {
        ("claude-code", SONNET, 2),
        ("codex", "gpt-5", 1),
        (None, "gpt-5", 1),
    }
    text = exposition(service.metrics()).decode()
    assert (
        f'devs_tokens_total{{agent="claude-code",model="{SONNET}",type="input"}} 101.0'
        in text
    )
    assert 'devs_spend_usd_total{agent="",model="gpt-5"}' in text
    service.rebuild_projections("metrics")
    assert service.metrics().spend == before
    assert service.verify().ok


# ------------------------------------------------------------ what-if


def test_what_if_a_lower_budget_says_what_it_would_have_saved(
    make_service: MakeService,
) -> None:
    service = budgeted(make_service)
    call: dict[str, Any] = {"model": SONNET, "input_tokens": 0, "output_tokens": 0}
    for _ in range(4):
        service.record_usage("t", **call, cost_usd=0.5)  # $2 in all, no budget
    service.record_gate("t", 1, error="boom")
    service.record_usage("t", **call, cost_usd=0.25)
    report = service.what_if(policy={"task_budget_usd": 1.0}, task_ids=["t"])
    [task] = report.changed
    # Stopped at the second usage ($1.0); nobody raised it: the agent would
    # have waited, so the gate that followed would not have run.
    assert task.what_if.pauses == 1
    assert task.cut_at == 6  # the GateFailed
    assert task.saved is not None
    assert task.saved.spent_usd == 1.25  # the third, fourth and last usages
    assert report.saved == task.saved
    assert "would have saved USD 1.2500" in " ".join(task.changes)
    assert "stopped for its budget before version 6" in " ".join(task.changes)


def test_what_if_saves_nothing_a_waiting_task_spent_or_a_raise_allowed(
    make_service: MakeService,
) -> None:
    service = budgeted(make_service, DEVS_TASK_BUDGET_USD="1")
    call: dict[str, Any] = {"model": SONNET, "input_tokens": 0, "output_tokens": 0}
    service.record_usage("t", **call, cost_usd=1.0)  # paused, as recorded
    service.record_usage("t", **call, cost_usd=0.2)  # spent while it waited
    report = service.what_if(policy={"task_budget_usd": 0.5}, task_ids=["t"])
    assert report.saved.tokens == 0
    assert report.saved.spent_usd == 0.0
    service.raise_budget("t", usd=5, actor="ana", reason="ok")
    service.resume("t", actor="ana", reason="go on")
    service.record_usage("t", **call, cost_usd=0.3)
    # A what-if budget the recorded raise answers as it answered the
    # recorded one: the agent went on, nothing saved.
    again = service.what_if(policy={"task_budget_usd": 0.9}, task_ids=["t"])
    assert again.saved.spent_usd == 0.0
    assert all(t.saved is None for t in again.changed)


def test_usage_recorded_while_a_person_reads_leaves_their_answer_standing(
    make_service: MakeService,
) -> None:
    """The agent's last calls counted after the stop (a hook reads them a
    moment late) change nothing a person answers: an answer for the version
    they read still stands; anything else after it makes it stale."""
    from devs.domain import StaleAnswer

    service = budgeted(make_service, DEVS_TASK_BUDGET_USD="1")
    call: dict[str, Any] = {"model": SONNET, "input_tokens": 0, "output_tokens": 0}
    service.record_usage("t", **call, cost_usd=1.0)
    seen = service.task("t").version
    service.record_usage("t", **call, cost_usd=0.1)
    service.record_usage("t", **call, cost_usd=0.1)
    raised = service.raise_budget("t", usd=5, actor="ana", reason="ok", if_version=seen)
    assert raised.version == seen + 3
    service.record_usage("t", **call, cost_usd=0.1)
    service.resume("t", actor="ana", reason="go", if_version=raised.version)
    service.record_gate("t", 1, error="boom")
    read = service.task("t").version
    service.log_lesson("t", "patch", "no")  # not quiet: the task moved on
    with pytest.raises(StaleAnswer):
        service.skip("t", actor="ana", reason="x", if_version=read)


def test_a_model_without_a_price_is_said_once(make_service: MakeService) -> None:
    service = budgeted(make_service)
    said: list[str] = []

    class Heard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "has no price" in record.getMessage():
                said.append(record.getMessage())

    logger = logging.getLogger("devs.service")
    heard, level, disabled = Heard(logging.WARNING), logger.level, logger.disabled
    logger.addHandler(heard)  # whatever logging another test set up
    logger.setLevel(logging.WARNING)
    logger.disabled = False  # (a dictConfig elsewhere disables existing ones)
    try:
        for _ in range(3):
            service.record_usage(
                "t", model="house-model", input_tokens=5, output_tokens=1
            )
        service.record_usage("t", model=SONNET, input_tokens=5, output_tokens=1)
    finally:
        logger.removeHandler(heard)
        logger.setLevel(level)
        logger.disabled = disabled
    assert said == [
        "model 'house-model' has no price (devs.domain.spend.PRICES, or "
        "DEVS_PRICES): its tokens count against token budgets, its cost is unknown"
    ]
