"""Spend on the console (issue 39; docs/console.md#spend): a task's page
and a run's page show what was spent against the budgets, by type of token
and by agent and model; the inbox shows a budget pause's spend; an operator
raises a paused task's budget from its form (the same answer machinery:
the operator as actor, the origin check, the page's version), then
resumes it."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from devs.domain import RecoveryService
from devs.domain.names import SessionReason
from tests.helpers import event_count
from tests.integration.test_console import (
    SAME,
    Forms,
    answer,
    console,  # noqa: F401 - the fixture
    escalate,
    sign_in,
)

Console = tuple[TestClient, RecoveryService]

SONNET = "claude-sonnet-4-5-20250929"
HOUSE = "house-model-7"  # no price: its tokens are of unknown cost


def spend(service: RecoveryService, task_id: str, **changes: Any) -> None:
    """A usage of Sonnet that cost USD 0.5 (unless ``changes`` say)."""
    usage: dict[str, Any] = {
        "model": SONNET,
        "input_tokens": 100_000,
        "output_tokens": 10_000,
        "cache_read_tokens": 1_000,
        "cache_creation_tokens": 500,
        "cost_usd": 0.5,
        **changes,
    }
    service.record_usage(task_id, **usage)


def budget_pause(service: RecoveryService, task_id: str) -> None:
    """``task_id`` spends USD 1.10 of a budget of 1 and pauses for a person:
    111,542 tokens (42 of them of a model with no price)."""
    service.start_task(task_id, agent="coder")
    spend(service, task_id)
    service.raise_budget(task_id, usd=1.0, actor="root", reason="a budget")
    spend(
        service,
        task_id,
        model=HOUSE,
        input_tokens=40,
        output_tokens=2,
        cache_read_tokens=0,
        cache_creation_tokens=0,
        cost_usd=None,
    )
    spend(
        service,
        task_id,
        input_tokens=0,
        output_tokens=0,
        cache_read_tokens=0,
        cache_creation_tokens=0,
        cost_usd=0.6,
    )
    session = service.task(task_id).pending_session
    assert session is not None
    assert session.reason is SessionReason.BUDGET_EXHAUSTED


def raise_forms(page: str) -> list[dict[str, Any]]:
    """The answer forms on ``page`` that raise a budget."""
    parser = Forms()
    parser.feed(page)
    return [
        form
        for form in parser.forms
        if "/console/actions/raise_budget" in form.get("formactions", [])
    ]


def post_raise(
    client: TestClient,
    service: RecoveryService,
    task_id: str,
    fields: dict[str, str],
    headers: dict[str, str] | None = None,
) -> Any:
    """A raise as the task page's form sends it, for the task's version now."""
    data = {
        "task_id": task_id,
        "version": str(service.task(task_id).version),
        "back": f"/console/tasks/{task_id}",
        **fields,
    }
    return client.post(
        "/console/actions/raise_budget",
        data=data,
        headers=SAME if headers is None else headers,
    )


def test_the_task_page_shows_its_spend_against_its_budget_by_type_and_model(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    budget_pause(service, "t1")
    service.start_task("quiet")  # no usage, no budget: no spend shown
    service.start_task("budgeted")
    service.raise_budget("budgeted", tokens=5_000, actor="root", reason="cap")
    sign_in(client, service)
    page = client.get("/console/tasks/t1").text
    assert '<h2 id="spend-h">Spend</h2>' in page
    section = page[page.index('id="spend-h"') : page.index('id="chart-h"')]
    for text in (
        '<dd class="spent-usd">USD 1.1000 of 1 (110%, over budget)</dd>',
        "111,542 ",
        '<span class="hint">(no budget in tokens)</span>',
        "input 100,040, output 10,002, cache read 1,000, cache write 500",
        '<dd class="unknown-cost">42 tokens',
    ):
        assert text in section, text
    rows = re.findall(r'<tr data-model="([^"]+)">(.*?)</tr>', section)
    assert [model for model, _ in rows] == [SONNET, HOUSE]  # most spent first
    sonnet, house = (cells for _, cells in rows)
    assert '<td class="agent">coder</td>' in sonnet
    assert '<td class="n">2</td><td class="n">1.1000</td>' in sonnet
    assert '<td class="n">0.0000</td><td class="n">42</td>' in house
    assert house.endswith('<td class="n">42</td>')  # its unknown-cost tokens
    # Without usage or budget: nothing; a budget alone: the budget, no table.
    assert 'id="spend-h"' not in client.get("/console/tasks/quiet").text
    capped = client.get("/console/tasks/budgeted").text
    assert '<dd class="spent-tokens">0 of 5,000 (0%)</dd>' in capped
    assert "No model usage recorded." in capped


def test_the_run_page_shows_what_its_tasks_spent_together(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    service.start_run("r1", {"a": [], "b": []})
    service.start_run("r2", {"c": []})
    service.start_task("a", run_id="r1", agent="claude-code")
    service.start_task("b", run_id="r1", agent="codex")
    service.start_task("c", run_id="r2", agent="codex")
    service.start_task("alone", agent="codex")
    spend(service, "a")
    spend(service, "b", model=HOUSE, cost_usd=None)
    spend(service, "alone", cost_usd=7.0)  # not the run's
    sign_in(client, service)
    page = client.get("/console/runs/r1").text
    section = page[page.index('id="spend-h"') :]
    assert '<dd class="spent-usd">USD 0.5000</dd>' in section
    assert '<dd class="spent-tokens">223,000</dd>' in section
    assert (
        "input 200,000, output 20,000, cache read 2,000, cache write 1,000" in section
    )
    assert '<dd class="unknown-cost">111,500 tokens' in section
    rows = dict(re.findall(r'<tr data-model="([^"]+)">(.*?)</tr>', section))
    assert set(rows) == {SONNET, HOUSE}
    assert '<td class="agent">claude-code</td>' in rows[SONNET]
    assert '<td class="agent">codex</td>' in rows[HOUSE]
    # A run whose tasks recorded no usage shows no spend.
    assert 'id="spend-h"' not in client.get("/console/runs/r2").text


def test_the_inbox_shows_a_budget_pause_s_spend_against_its_budget(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    budget_pause(service, "t1")
    escalate(service, "other")
    sign_in(client, service)
    page = client.get("/console/").text
    card = page[page.index('data-task-id="t1"') : page.index('data-task-id="other"')]
    assert '<span class="why">Budget pause</span>' in card
    assert (
        '<dd class="spend">USD 1.1000 of 1 (110%, over budget); 111,542 tokens</dd>'
        in card
    )
    assert 'class="spend"' not in page[page.index('data-task-id="other"') :]
    listed = client.get("/console/?view=list&why=budget").text
    assert '<span class="spend">(USD 1.1000 of 1)</span>' in listed
    assert 'data-task-id="other"' not in listed
    # Raised since (not yet resumed): the card and the row say so.
    service.raise_budget("t1", usd=3.0, actor="bob", reason="worth it")
    card = client.get("/console/").text
    assert "budget raised since to USD 3</strong>: resume it" in card
    assert "raised to USD 3)" in client.get("/console/?view=list").text


def test_the_raise_form_raises_the_budget_then_resume_goes_on(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    budget_pause(service, "t1")
    escalate(service, "stopped")
    sign_in(client, service, "alice")
    # Only a budget pause has the raise's fields, in its one answer form.
    assert len(raise_forms(client.get("/console/").text)) == 1
    assert raise_forms(client.get("/console/tasks/stopped").text) == []
    page = client.get("/console/tasks/t1").text
    (form,) = raise_forms(page)
    assert {"usd", "tokens", "reason", "version", "task_id"} <= set(form["inputs"])
    assert "Raise budget" in form["buttons"]
    assert 'aria-label="Raise budget of t1"' in page
    assert re.search(r'<label for="a-[0-9a-f]+-usd">USD</label>', page)
    assert re.search(r'<label for="a-[0-9a-f]+-tokens">Tokens</label>', page)
    # Resuming over budget is refused in the service's words, and the form
    # comes back with the raise in it.
    before = event_count(service)
    refused = answer(client, service, "resume", "t1", reason="go on")
    assert refused.status_code == 409
    assert "has spent its budget" in refused.text
    assert 'formaction="/console/actions/raise_budget"' in refused.text
    assert event_count(service) == before
    version = service.task("t1").version
    assert f'name="version" value="{version}"' in page
    raised = client.post(
        "/console/actions/raise_budget",
        data={
            "task_id": "t1",
            "version": str(version),
            "usd": "$2.50",
            "tokens": "2,000,000",
            "reason": "the migration is worth it",
            "back": "/console/tasks/t1",
        },
        headers=SAME,
    )
    assert raised.status_code == 303, raised.text
    where = raised.headers["location"]
    assert where == "/console/tasks/t1?done=raise_budget&task=t1"
    report = service.task_spend("t1")
    assert (report.budget_usd, report.budget_tokens) == (2.5, 2_000_000)
    last = service.history("t1")[-1]
    assert last.event == "BudgetRaised"
    assert last.changes["actor"] == "alice"
    assert last.changes["reason"] == "the migration is worth it"
    assert service.task("t1").state == "PAUSED"  # a raise alone does not resume
    after = client.get(where).text
    assert "You raised the budget of t1: resume it" in after
    assert "USD 1.1000 of 2.5 (44%)" in after
    now = service.task("t1").version
    assert now > version
    assert f'name="version" value="{now}"' in after  # the form as it is now
    resumed = answer(client, service, "resume", "t1", reason="go on")
    assert resumed.status_code == 303
    assert service.task("t1").state == "RUNNING"
    assert service.history("t1")[-1].changes["actor"] == "alice"


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"usd": "1"}, "Not done: usd 1 is not above what task 't1' has spent"),
        ({"tokens": "111542"}, "Not done: tokens 111,542 is not above what task"),
        ({"usd": "", "tokens": " "}, "Write the new budget: in USD, in tokens or both"),
        ({"usd": "lots"}, "Write the budget in USD as a number"),
        ({"usd": "nan"}, "Write the budget in USD as a number"),
        ({"tokens": "1.5"}, "Write the budget in tokens as a whole number"),
        ({"usd": "0"}, "Not done: usd must be a finite number of USD over 0"),
    ],
)
def test_a_raise_not_above_the_spend_or_not_a_number_is_refused_and_writes_nothing(
    console: Console,  # noqa: F811
    fields: dict[str, str],
    said: str,
) -> None:
    client, service = console
    budget_pause(service, "t1")
    sign_in(client, service)
    before = event_count(service)
    refused = post_raise(client, service, "t1", {"reason": "kept", **fields})
    assert refused.status_code == 422, refused.text
    assert said in html.unescape(refused.text)
    assert 'role="alert" tabindex="-1" data-focus' in refused.text
    assert event_count(service) == before
    report = service.task_spend("t1")
    assert (report.budget_usd, report.budget_tokens) == (1.0, None)
    # What was typed is kept in the form drawn again.
    assert ">kept</textarea>" in refused.text
    for name, value in fields.items():
        assert re.search(
            rf'name="{name}" [^>]*value="{re.escape(value)}"', refused.text
        )


def test_only_a_signed_in_operator_may_raise(console: Console) -> None:  # noqa: F811
    client, service = console
    budget_pause(service, "t1")
    before = event_count(service)
    # Nobody signed in: the sign-in page, nothing written.
    anonymous = post_raise(client, service, "t1", {"usd": "5"})
    assert anonymous.status_code == 303
    assert anonymous.headers["location"] == "/console/login"
    assert event_count(service) == before
    # An operator removed since signing in: the same.
    sign_in(client, service, "mallory")
    service.remove_operator("mallory", actor="root")
    before = event_count(service)
    removed = post_raise(client, service, "t1", {"usd": "5"})
    assert removed.status_code == 303
    assert removed.headers["location"] == "/console/login"
    assert event_count(service) == before
    assert service.task_spend("t1").budget_usd == 1.0
    # The same form from an operator signed in raises it.
    sign_in(client, service, "alice")
    assert post_raise(client, service, "t1", {"usd": "5"}).status_code == 303
    assert service.task_spend("t1").budget_usd == 5.0


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Referer": "https://evil.example/page"},
        {},
    ],
)
def test_a_raise_from_another_origin_is_403_and_writes_nothing(
    console: Console,  # noqa: F811
    headers: dict[str, str],
) -> None:
    client, service = console
    budget_pause(service, "t1")
    sign_in(client, service)
    before = event_count(service)
    refused = post_raise(client, service, "t1", {"usd": "5"}, headers)
    assert refused.status_code == 403
    assert "another site" in refused.text
    assert event_count(service) == before
    assert service.task_spend("t1").budget_usd == 1.0
    # The same form from this console's origin raises it.
    assert post_raise(client, service, "t1", {"usd": "5"}).status_code == 303
    assert service.task_spend("t1").budget_usd == 5.0


def test_a_raise_is_refused_on_a_stale_page_or_a_stop_claimed_by_another(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    budget_pause(service, "t1")
    sign_in(client, service, "alice")
    version = service.task("t1").version
    before = event_count(service)
    service.claim("t1", actor="bob")
    claimed = post_raise(client, service, "t1", {"usd": "5", "reason": "mine"})
    assert claimed.status_code == 409
    assert "bob is on it (claimed)" in claimed.text
    service.release("t1", actor="bob")
    stale = client.post(
        "/console/actions/raise_budget",
        data={"task_id": "t1", "version": str(version), "usd": "5"},
        headers=SAME,
    )
    assert stale.status_code == 412
    assert "bob answered first" in stale.text
    assert event_count(service) == before + 2  # bob's claim and release only
    assert service.task_spend("t1").budget_usd == 1.0
