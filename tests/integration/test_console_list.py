"""The inbox's dense list view, its filters, search and order (query
parameters: they work without a script), and the pages' other parts: local
times, the runs list, nodes not started, an unknown address, the task
page's scrollable outputs."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from devs.adapters.config import Settings, open_service
from devs.adapters.http import create_app
from devs.domain import IllegalTransition, RecoveryService
from devs.domain.policy import Policy
from tests.integration.test_console import (
    SECRET,
    TOKEN,
    console,  # noqa: F401 - the fixture
    escalate,
    hand_off,
    sign_in,
)

Console = tuple[TestClient, RecoveryService]
ROW = re.compile(r'<tr class="row [a-z]+" data-task-id="([^"]+)"')


def rows(client: TestClient, query: str = "") -> list[str]:
    page = client.get(f"/console/?view=list{'&' + query if query else ''}")
    assert page.status_code == 200
    return ROW.findall(page.text)


@pytest.fixture
def stops(console: Console) -> Console:  # noqa: F811
    client, service = console
    service.start_run("r1", {"api-a": [], "api-b": []})
    service.start_task("api-a", run_id="r1", agent="claude-code")
    for i in range(3):
        service.record_gate("api-a", 1, strategy=f"s{i}", error="E   a")
    escalate(service, "db-b")  # agent coder, no run
    hand_off(service, "api-c")  # agent coder
    service.start_task("ui-d", agent="codex")
    service.log_lesson("ui-d", "use a regex", "regexes cannot parse HTML")
    service.begin_attempt("ui-d", "use a regex")  # a blacklist pause
    service.claim("db-b", actor="alice")
    service.claim("api-c", actor="bob")
    sign_in(client, service, "alice")
    return console


def test_the_list_view_is_one_row_per_stop_with_one_link(stops: Console) -> None:
    client, _ = stops
    page = client.get("/console/?view=list").text
    assert ROW.findall(page) == ["api-a", "db-b", "api-c", "ui-d"]
    header = re.findall(r'<th scope="col">([^<]+)</th>', page)
    assert header[:7] == [
        "Task",
        "Why",
        "Waiting",
        "Deadline",
        "Agent",
        "Run",
        "Claimed by",
    ]
    body = page[page.index('<tbody id="inbox"') : page.index("</tbody>")]
    # One tab stop per row: its task's link; no field, no button.
    assert body.count("<a ") == 4
    assert "<button" not in body
    assert "<input" not in body
    row = body[body.index('data-task-id="db-b"') :].split("</tr>")[0]
    assert '<td class="claimed">you</td>' in row
    assert "Escalation" in row
    assert "<title>(4) Inbox · devs console</title>" in page
    assert 'aria-current="page">List</a>' in page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("why=escalation", ["api-a", "db-b"]),
        ("why=handoff", ["api-c"]),
        ("why=blacklist", ["ui-d"]),
        ("agent=coder", ["db-b", "api-c"]),
        ("run=r1", ["api-a"]),
        ("claimed=claimed", ["db-b", "api-c"]),
        ("claimed=unclaimed", ["api-a", "ui-d"]),
        ("claimed=mine", ["db-b"]),
        ("q=API", ["api-a", "api-c"]),
        ("q=api&claimed=unclaimed", ["api-a"]),
        ("why=nonsense", ["api-a", "db-b", "api-c", "ui-d"]),
    ],
)
def test_the_filters_and_the_search_work_from_the_address(
    stops: Console, query: str, expected: list[str]
) -> None:
    client, _ = stops
    assert rows(client, query) == expected
    cards = client.get(f"/console/?{query}").text
    found = re.findall(r'<li class="item [a-z]+" data-task-id="([^"]+)"', cards)
    assert found == expected
    assert f"<title>({len(expected)}) Inbox" in cards


def test_the_filter_form_is_a_get_form_that_keeps_its_choices(
    stops: Console,
) -> None:
    client, _ = stops
    page = client.get("/console/?view=list&claimed=mine&q=db&sort=deadline").text
    start = page.index('<form method="get"')
    form = page[start : page.index("</form>", start)]
    assert 'role="search"' in form
    assert '<input type="hidden" name="view" value="list">' in form
    assert 'name="q" value="db"' in form
    assert '<option value="mine" selected>' in form
    assert '<option value="deadline" selected>' in form
    assert '<option value="claude-code">' in form  # the agents that wait
    assert '<option value="r1">' in form  # their runs
    assert "Clear the filters" in form


def test_the_live_fragment_follows_the_view_and_the_filters(stops: Console) -> None:
    client, _ = stops
    fragment = client.get("/console/inbox?view=list&claimed=mine")
    assert fragment.headers["x-inbox-total"] == "1"
    assert ROW.findall(fragment.text) == ["db-b"]
    cards = client.get("/console/inbox?why=handoff")
    assert 'data-task-id="api-c"' in cards.text
    assert "<tr" not in cards.text


@pytest.fixture
def deadlines(db_path: Path) -> Iterator[Console]:
    service = open_service(Settings(db=str(db_path)), policy=Policy(human_deadline=1))
    app = create_app(service, token=TOKEN, read_wait=0.3, console_secret=SECRET)
    with TestClient(app, follow_redirects=False) as client:
        yield client, service
    service.close()


def test_sort_by_deadline_and_waiting_goes_on_after_a_deadline_hand_off(
    deadlines: Console,
) -> None:
    client, service = deadlines
    hand_off(service, "queued")  # no deadline on a hand-off
    escalate(service, "late")
    session = next(s for s in service.pending_sessions() if s.task_id == "late")
    sign_in(client, service)
    assert rows(client) == ["queued", "late"]
    assert rows(client, "sort=deadline") == ["late", "queued"]
    time.sleep(1.1)
    with contextlib.suppress(IllegalTransition):  # the server's sweeper came first
        service.expire_deadline("late")
    service.catch_up()
    page = client.get("/console/?view=list").text
    row = page[page.index('data-task-id="late"') :].split("</tr>")[0]
    assert "Hand-off: nobody answered before the deadline" in row
    assert f'data-since="{session.opened_at.isoformat()}"' in row


def test_times_are_time_elements_the_script_makes_local(console: Console) -> None:  # noqa: F811
    client, service = console
    escalate(service, "t1")
    sign_in(client, service)
    page = client.get("/console/tasks/t1").text
    stamps = re.findall(
        r'<time class="at" datetime="([^"]+)" title="([^"]+)">([^<]+)</time>', page
    )
    assert stamps
    for iso, title, text in stamps:
        assert iso.endswith("+00:00")
        assert title.endswith(" UTC")
        assert title == text
        assert iso[:10] == title[:10]
    script = client.get("/console/static/console.js").text
    assert 'querySelectorAll("time[datetime]")' in script


def test_the_task_page_s_outputs_scroll_by_keyboard_with_a_label(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    escalate(service, "t1")
    sign_in(client, service)
    page = client.get("/console/tasks/t1").text
    outputs = re.findall(r"<pre [^>]*>", page)
    assert outputs
    for tag in outputs:
        assert 'tabindex="0"' in tag
        assert 'role="region"' in tag
        assert re.search(r'aria-label="[^"]+ of failure \d+"', tag)


def test_an_unknown_console_address_is_an_html_404_page(console: Console) -> None:  # noqa: F811
    client, service = console
    sign_in(client, service)
    for path in ("/console/nope", "/console/tasks", "/console/a/b/c"):
        answer = client.get(path)
        assert answer.status_code == 404, path
        assert answer.headers["content-type"].startswith("text/html"), path
        assert "There is no such page in the console." in answer.text
        assert "content-security-policy" in answer.headers


def test_the_runs_list_shows_status_and_counts_and_unstarted_nodes_are_not_linked(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    service.start_run("r1", {"a": [], "b": ["a"], "c": ["b"]})
    service.start_task("a", run_id="r1")
    service.record_gate("a", 0)
    sign_in(client, service)
    runs = client.get("/console/runs").text
    row = runs[runs.index('data-run-id="r1"') :].split("</tr>")[0]
    assert '<td class="status">RUNNING</td>' in row
    assert '<td class="nodes">3</td>' in row
    assert '<td class="completed">1</td>' in row
    assert "<time" in row
    run = client.get("/console/runs/r1").text
    assert 'href="/console/tasks/a"' in run
    for node in ("b", "c"):
        assert f'href="/console/tasks/{node}"' not in run
        cell = run[run.index(f'data-node-row="{node}"') :].split("</tr>")[0]
        assert "not started" in cell
