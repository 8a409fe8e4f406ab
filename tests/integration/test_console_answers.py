"""The console's answers (docs/console.md#answers): each form says which
version of the task it answers, a claim locks every stop, an answer that
ends a task or moves its run asks to confirm and needs a reason, and a
refused answer is the form again with what was typed kept."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from devs.domain import RecoveryService
from tests.helpers import event_count
from tests.integration.test_console import (
    SAME,
    answer,
    console,  # noqa: F401 - the fixture
    escalate,
    hand_off,
    sign_in,
)

Console = tuple[TestClient, RecoveryService]


def pause(service: RecoveryService, task_id: str) -> None:
    service.start_task(task_id, agent="coder")
    service.log_lesson(task_id, "use a regex", "regexes cannot parse HTML")
    service.begin_attempt(task_id, "use a regex")  # blocked: a blacklist pause


STOPS: dict[str, Callable[[RecoveryService, str], None]] = {
    "escalation": escalate,
    "pause": pause,
    "handoff": hand_off,
}


def post(
    client: TestClient, action: str, task_id: str, version: int, **fields: str
) -> object:
    return client.post(
        f"/console/actions/{action}",
        data={"task_id": task_id, "version": str(version), **fields},
        headers=SAME,
    )


def test_a_stale_answer_is_refused_naming_who_answered_first(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    escalate(service, "fix-login-500")
    sign_in(client, service)
    drawn = client.get("/console/").text
    version = service.task("fix-login-500").version
    assert f'name="version" value="{version}"' in drawn
    service.resume("fix-login-500", actor="bob", reason="the fixture is fixed")
    before = event_count(service)
    refused = client.post(
        "/console/actions/skip",
        data={
            "task_id": "fix-login-500",
            "version": str(version),
            "reason": "not worth it",
            "confirmed": "1",
        },
        headers=SAME,
    )
    assert refused.status_code == 412
    assert "bob answered first: the task is now RUNNING" in refused.text
    assert event_count(service) == before
    assert service.task("fix-login-500").state == "RUNNING"
    # What was typed is kept, and focused.
    assert re.search(r"<textarea[^>]*readonly>not worth it</textarea>", refused.text)
    assert 'role="alert" tabindex="-1" data-focus' in refused.text


def test_a_stale_answer_to_a_stop_still_waiting_shows_the_form_again(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    escalate(service, "t1")
    sign_in(client, service, "alice")
    version = service.task("t1").version
    service.claim("t1", actor="carol")
    service.release("t1", actor="carol")  # the task moved on twice
    before = event_count(service)
    refused = post(client, "resume", "t1", version, reason="looks fine")
    assert refused.status_code == 412  # type: ignore[attr-defined]
    text = refused.text  # type: ignore[attr-defined]
    assert "carol answered first: the task is now ESCALATION" in text
    now = service.task("t1").version
    assert now > version
    assert f'name="version" value="{now}"' in text  # the form as it is now
    assert ">looks fine</textarea>" in text
    assert event_count(service) == before
    again = post(client, "resume", "t1", now, reason="looks fine")
    assert again.status_code == 303  # type: ignore[attr-defined]
    assert service.task("t1").state == "RUNNING"


def test_a_form_without_its_version_is_refused_and_writes_nothing(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    escalate(service, "t1")
    sign_in(client, service)
    before = event_count(service)
    for version in ("", "abc", "1" * 30):
        refused = client.post(
            "/console/actions/resume",
            data={"task_id": "t1", "version": version, "reason": "kept"},
            headers=SAME,
        )
        assert refused.status_code == 422
        assert "did not say which version" in refused.text
        assert ">kept</textarea>" in refused.text
    assert event_count(service) == before


@pytest.mark.parametrize("stop", list(STOPS))
def test_claim_release_and_take_over_on_every_stop(
    console: Console,  # noqa: F811
    stop: str,
) -> None:
    client, service = console
    STOPS[stop](service, "t1")
    sign_in(client, service, "alice")
    page = client.get("/console/").text
    assert 'formaction="/console/actions/claim"' in page
    claimed = answer(client, service, "claim", "t1")
    assert claimed.status_code == 303
    assert service.task("t1").claimed_by == "alice"
    page = client.get("/console/").text
    assert "You claimed it" in page
    assert 'formaction="/console/actions/release"' in page
    released = answer(client, service, "release", "t1")
    assert released.status_code == 303
    assert service.task("t1").claimed_by is None
    # Bob claims it: Alice's page offers to take it over, never to claim.
    service.claim("t1", actor="bob")
    page = client.get("/console/").text
    assert "<strong>bob</strong> is on it (claimed)" in page
    assert 'aria-label="Take over t1 from bob"' in page
    assert 'formaction="/console/actions/claim"' not in page
    no_reason = answer(client, service, "take_over", "t1", reason=" ")
    assert no_reason.status_code == 422
    assert service.task("t1").claimed_by == "bob"
    took = answer(client, service, "take_over", "t1", reason="bob is away")
    assert took.status_code == 303
    assert service.task("t1").claimed_by == "alice"
    last = service.history("t1")[-1]
    assert last.event == "ClaimTakenOver"
    assert last.changes["actor"] == "alice"
    assert last.changes["previous"] == "bob"
    assert last.changes["reason"] == "bob is away"
    task_page = client.get("/console/tasks/t1").text
    assert '(taken over from <span class="previous">bob</span>)' in task_page


def test_an_answer_to_a_stop_someone_else_claimed_is_refused_until_taken_over(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    escalate(service, "t1")
    sign_in(client, service, "bob")
    service.claim("t1", actor="alice")
    before = event_count(service)
    refused = answer(client, service, "resume", "t1", reason="I know the fix")
    assert refused.status_code == 409
    assert "alice is on it (claimed): take it over" in refused.text
    assert ">I know the fix</textarea>" in refused.text  # kept
    assert 'formaction="/console/actions/take_over"' in refused.text
    assert event_count(service) == before
    assert service.task("t1").state == "ESCALATION"
    took = answer(client, service, "take_over", "t1", reason="I know the fix")
    assert took.status_code == 303
    resumed = answer(client, service, "resume", "t1", reason="I know the fix")
    assert resumed.status_code == 303
    assert service.task("t1").state == "RUNNING"
    assert service.history("t1")[-1].changes["actor"] == "bob"


@pytest.mark.parametrize(
    ("stop", "action", "extra"),
    [
        ("escalation", "skip", {}),
        ("escalation", "rewind", {}),
        ("handoff", "resolve", {"resolution": "complete"}),
    ],
)
def test_what_ends_a_task_or_moves_its_run_needs_a_reason_and_a_confirmation(
    console: Console,  # noqa: F811
    stop: str,
    action: str,
    extra: dict[str, str],
) -> None:
    client, service = console
    STOPS[stop](service, "t1")
    sign_in(client, service)
    version = service.task("t1").version
    before = event_count(service)
    empty = post(client, action, "t1", version, reason="  ", **extra)
    assert empty.status_code == 422  # type: ignore[attr-defined]
    assert "Write why you" in empty.text  # type: ignore[attr-defined]
    asked = post(client, action, "t1", version, reason="not worth it", **extra)
    assert asked.status_code == 200  # type: ignore[attr-defined]
    text = asked.text  # type: ignore[attr-defined]
    assert "?</h1>" in text
    assert 'name="confirmed" value="1"' in text
    assert 'name="reason" value="not worth it"' in text
    assert f'name="version" value="{version}"' in text
    assert "No, go back" in text
    assert event_count(service) == before  # nothing until "yes"
    done = post(
        client, action, "t1", version, reason="not worth it", confirmed="1", **extra
    )
    assert done.status_code == 303  # type: ignore[attr-defined]
    assert event_count(service) > before
    assert service.history("t1")[-1].changes["reason"] == "not worth it"


def test_the_confirmation_says_what_each_answer_does(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    escalate(service, "e1")
    hand_off(service, "h1")
    sign_in(client, service)
    ev, hv = service.task("e1").version, service.task("h1").version
    skip = post(client, "skip", "e1", ev, reason="r").text  # type: ignore[attr-defined]
    assert "its run moves on" in skip
    back = post(client, "resolve", "h1", hv, reason="r", resolution="return")
    assert "goes back to coder, which failed it 5 times" in back.text  # type: ignore[attr-defined]


def test_resolve_has_no_default_resolution(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    hand_off(service, "h1")
    sign_in(client, service)
    page = client.get("/console/").text
    radios = re.findall(r'<input type="radio" name="resolution"[^>]*>', page)
    assert len(radios) == 3
    assert not any("checked" in radio for radio in radios)
    assert "<select" not in page.split('data-task-id="h1"')[1].split("</form>")[0]
    before = event_count(service)
    refused = answer(client, service, "resolve", "h1", reason="done by hand")
    assert refused.status_code == 422
    assert "Choose how to resolve it" in refused.text
    assert ">done by hand</textarea>" in refused.text
    assert event_count(service) == before
    # Resolving an unclaimed hand-off needs no claim first.
    resolved = answer(
        client, service, "resolve", "h1", reason="by hand", resolution="complete"
    )
    assert resolved.status_code == 303
    assert service.task("h1").state == "COMPLETED"


def test_the_done_message_is_written_by_the_console_never_taken_from_the_address(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    sign_in(client, service)
    page = client.get("/console/?done=<b>hacked</b>&task=x").text
    assert "hacked" not in page
    page = client.get("/console/?done=skip&task=%3Cb%3Ex%3C%2Fb%3E").text
    assert "You skipped &lt;b&gt;x&lt;/b&gt;: its run moves on without it." in page


def test_an_answer_goes_back_only_to_a_console_page(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    for task_id in ("t1", "t2", "t3"):
        escalate(service, task_id)
    sign_in(client, service)
    for task_id, back, target in (
        ("t1", "/console/tasks/t1", "/console/tasks/t1?done=resume&task=t1"),
        ("t2", "//evil.example/console/", "/console/?done=resume&task=t2"),
        ("t3", "/console/?view=list", "/console/?view=list&done=resume&task=t3"),
    ):
        answered = answer(client, service, "resume", task_id, back=back)
        assert answered.headers["location"] == target


def test_bidirectional_controls_in_agents_text_are_shown_not_obeyed(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    spoof = "fix \u202egnp.exe"
    service.start_task("t1", agent="coder\u202e")
    for i in range(3):
        service.record_gate("t1", 1, strategy=f"{spoof} {i}", error=f"E   {spoof}")
    service.log_lesson("t1", spoof, spoof)
    sign_in(client, service)
    for path in ("/console/", "/console/?view=list", "/console/tasks/t1"):
        page = client.get(path).text
        # Shown text never holds one (attributes keep the raw value a form
        # sends back, such as the agent filter's).
        assert "\u202e" not in re.sub(r'="[^"]*"', "", page), path
        assert "&lt;U+202E&gt;" in page, path


def test_a_card_has_the_run_gate_exit_code_strategies_and_commit(
    console: Console,  # noqa: F811
) -> None:
    client, service = console
    service.start_run("r1", {"t1": []})
    service.start_task("t1", run_id="r1", agent="claude-code", last_commit="abc1234")
    for strategy in ("patch the view", "patch the view", "mock the db"):
        service.record_gate("t1", 2, gate="pytest", strategy=strategy, error="E   boom")
    sign_in(client, service)
    page = client.get("/console/").text
    card = page[page.index('data-task-id="t1"') :]
    assert '<a href="/console/runs/r1">r1</a>' in card
    assert "pytest, exit code 2" in card
    assert "Strategies tried (2)" in card  # each once, from the failures
    assert card.index("patch the view") < card.index("mock the db")
    assert "<code>abc1234</code>" in card
    assert "claude-code" in card


def test_a_claimers_name_with_a_bidi_override_is_shown_neutralised(
    console: Console,  # noqa: F811 - the fixture
) -> None:
    """A claim made under a name holding a right-to-left override (before
    operators existed, or from the CLI) cannot make the console display
    another name."""
    client, service = console
    escalate(service, "t1")
    service.claim("t1", actor="\u202eecila")
    sign_in(client, service)
    for page in ("/console/", "/console/?view=list", "/console/tasks/t1"):
        body = client.get(page, headers=SAME).text
        assert "\u202e" not in body, page
        assert "&lt;U+202E&gt;ecila" in body or "<U+202E>ecila" in body, page
