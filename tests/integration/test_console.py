"""The web console in process (FastAPI's TestClient): sign-in, sessions, the
inbox and its forms, the task, run and metrics pages, hostile text, the
origin check. The browser tests (tests/e2e/test_console_browser.py) drive the
same pages in Chromium."""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from itsdangerous import TimestampSigner

from devs.adapters.config import Settings, open_service
from devs.adapters.console import (
    COOKIE,
    SESSION_SECONDS,
    answers,
    inbox,
    live,
    outbox,
    runs,
    sessions,
    tasks,
)
from devs.adapters.http import create_app
from devs.domain import Outcome, RecoveryService
from tests.helpers import event_count

TOKEN = "test-token-0123456789"
SECRET = "console-secret-0123456789abcdefghijklmnop"
HOST = "http://testserver"
SAME = {"Origin": HOST}
HOSTILE = [
    "<img src=x onerror=alert(1)>",
    "</script><script>alert(2)</script>",
    '"><svg onload=alert(3)>',
]


@pytest.fixture
def console(db_path: Path) -> Iterator[tuple[TestClient, RecoveryService]]:
    service = open_service(Settings(db=str(db_path)))
    app = create_app(service, token=TOKEN, read_wait=0.3, console_secret=SECRET)
    with TestClient(app, follow_redirects=False) as client:
        yield client, service
    service.close()


def sign_in(client: TestClient, service: RecoveryService, name: str = "alice") -> str:
    token = service.add_operator(name, actor="root").token
    answer = client.post("/console/login", data={"token": token}, headers=SAME)
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/console/"
    return token


def escalate(service: RecoveryService, task_id: str, strategy: str = "s") -> None:
    service.start_task(task_id, agent="coder")
    for i in range(3):
        service.record_gate(
            task_id,
            1,
            strategy=f"{strategy} {i}",
            error=f"E   AssertionError: boom {i}\nmore",
        )


def hand_off(service: RecoveryService, task_id: str) -> None:
    service.start_task(task_id, agent="coder")
    for i in range(5):
        decision = service.record_gate(task_id, 1, strategy=f"h{i}", error=f"e{i}")
        if decision.outcome is Outcome.ESCALATE:
            service.resume(task_id, actor="cli", reason="go on")
    assert decision.outcome is Outcome.HAND_OFF


def answer(
    client: TestClient,
    service: RecoveryService,
    action: str,
    task_id: str,
    **fields: str,
) -> Any:
    """An answer as the console's form sends it: the task's version, and
    ``confirmed`` for the answers that ask to confirm."""
    data = {
        "task_id": task_id,
        "version": str(service.task(task_id).version),
        "confirmed": "1",
        **fields,
    }
    return client.post(f"/console/actions/{action}", data=data, headers=SAME)


class Forms(HTMLParser):
    """The forms of a page: action, input names, button texts, and each
    button's ``formaction`` (``formactions``)."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, list[str] | str]] = []
        self._button = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "form":
            self.forms.append(
                {"action": attributes.get("action") or "", "inputs": [], "buttons": []}
            )
        elif tag in ("input", "select", "textarea") and self.forms:
            inputs = self.forms[-1]["inputs"]
            assert isinstance(inputs, list)
            inputs.append(attributes.get("name") or "")
        elif tag == "button":
            self._button = True
            if self.forms:
                buttons = self.forms[-1]["buttons"]
                assert isinstance(buttons, list)
                buttons.append("")
                actions = self.forms[-1].setdefault("formactions", [])
                assert isinstance(actions, list)
                actions.append(attributes.get("formaction") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "button":
            self._button = False

    def handle_data(self, data: str) -> None:
        if self._button and self.forms:
            buttons = self.forms[-1]["buttons"]
            assert isinstance(buttons, list)
            buttons[-1] += data.strip()


def test_every_page_but_sign_in_needs_a_session(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, _ = console
    for path in ("/console/", "/console/tasks/t1", "/console/runs", "/console/metrics"):
        answer = client.get(path)
        assert answer.status_code == 303, path
        assert answer.headers["location"] == "/console/login"
    assert client.get("/console/live").status_code == 401
    assert client.get("/console/inbox").status_code == 401
    page = client.get("/console/login")
    assert page.status_code == 200
    assert '<input id="token" name="token"' in page.text


def test_sign_in_sets_a_strict_http_only_cookie_and_a_wrong_token_is_401(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    service.add_operator("alice", actor="root")
    wrong = client.post("/console/login", data={"token": "devs_op_nope"}, headers=SAME)
    assert wrong.status_code == 401
    assert "not an operator" in wrong.text
    agents = client.post("/console/login", data={"token": TOKEN}, headers=SAME)
    assert agents.status_code == 401  # the service token signs no one in
    token = service.rotate_operator("alice", actor="root").token
    answer = client.post("/console/login", data={"token": token}, headers=SAME)
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    assert "Path=/console" in cookie
    assert f"Max-Age={SESSION_SECONDS}" in cookie
    assert "Secure" not in cookie  # plain http here; https sets it
    assert token not in cookie
    inbox = client.get("/console/")
    assert inbox.status_code == 200
    assert "Signed in as <strong>alice</strong>" in inbox.text
    # Signing out ends it.
    out = client.post("/console/logout", headers=SAME)
    assert out.status_code == 303
    assert client.get("/console/").status_code == 303


def test_a_rotation_or_a_removal_ends_the_operator_s_sessions(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    sign_in(client, service)
    assert client.get("/console/").status_code == 200
    service.rotate_operator("alice", actor="root")
    assert client.get("/console/").status_code == 303
    token = service.rotate_operator("alice", actor="root").token
    client.post("/console/login", data={"token": token}, headers=SAME)
    assert client.get("/console/").status_code == 200
    service.remove_operator("alice", actor="root")
    assert client.get("/console/").status_code == 303


def test_a_forged_or_tampered_cookie_signs_no_one_in(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    sign_in(client, service)
    good = client.cookies[COOKIE]
    service.add_operator("bob", actor="root")
    rest = good.split(".", 1)[1]
    for forged in (
        "Ym9i." + rest,  # bob's name on alice's signature
        good[:-2] + ("AA" if not good.endswith("AA") else "BB"),
        "x" * 5000,
        "",
        "....",
    ):
        client.cookies.clear()
        answer = client.get("/console/", headers={"Cookie": f"{COOKIE}={forged}"})
        assert answer.status_code == 303, forged[:40]
    answer = client.get("/console/", headers={"Cookie": f"{COOKIE}={good}"})
    assert answer.status_code == 200


def test_the_inbox_shows_why_each_task_stopped_oldest_first(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    escalate(service, "first")
    hand_off(service, "second")
    service.start_task("third")
    service.log_lesson("third", "use a regex", "regexes cannot parse HTML")
    service.begin_attempt("third", "use a regex")  # blocked: a blacklist pause
    sign_in(client, service)
    page = client.get("/console/").text
    ids = re.findall(r'<li class="item [a-z]+" data-task-id="([^"]+)"', page)
    assert ids == ["first", "second", "third"]
    first = page[
        page.index('data-task-id="first"') : page.index('data-task-id="second"')
    ]
    assert "Escalation" in first
    assert "3 (escalates at 3, hands off at 5)" in first
    assert "E AssertionError: boom 2" in first  # the one "last error" line
    second = page[
        page.index('data-task-id="second"') : page.index('data-task-id="third"')
    ]
    assert "Hand-off" in second
    assert "nobody yet" in second
    third = page[page.index('data-task-id="third"') :]
    assert "Blacklist pause" in third
    assert "regexes cannot parse HTML" in third


def test_each_stop_has_one_answer_form_with_one_reason_and_its_version(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    escalate(service, "stopped")
    hand_off(service, "queued")
    sign_in(client, service)
    parser = Forms()
    parser.feed(client.get("/console/").text)
    answers = [form for form in parser.forms if "/actions/" in str(form["action"])]
    assert len(answers) == 2  # one per stop
    stopped, queued = answers
    for form, words in (
        (stopped, ["Resume", "Skip", "Rewind", "Claim"]),
        (queued, ["Resolve", "Claim"]),
    ):
        inputs = form["inputs"]
        assert isinstance(inputs, list)
        assert inputs.count("reason") == 1, form  # one reason per stop
        assert "version" in inputs
        assert "task_id" in inputs
        buttons = form["buttons"]
        assert isinstance(buttons, list)
        # The first button is the disabled, hidden default: Enter sends nothing.
        assert buttons[0] == "Nothing"
        assert buttons[1:] == words
        formactions = form["formactions"]
        assert isinstance(formactions, list)
        assert [a.rsplit("/", 1)[-1] for a in formactions[1:]] == [
            word.lower() for word in words
        ]
    assert "to_commit" in stopped["inputs"]
    assert "resolution" in queued["inputs"]
    page = client.get("/console/").text
    assert '<button type="submit" class="guard" disabled hidden' in page
    for task_id in ("stopped", "queued"):
        version = service.task(task_id).version
        block = page[page.index(f'data-task-id="{task_id}"') :]
        assert f'name="version" value="{version}"' in block.split("</form>")[0]
    # No resolution is chosen before the person chooses one.
    assert "checked" not in page.split('data-task-id="queued"')[1]
    assert "<textarea" in page  # Enter in the reason writes a new line


def test_an_answer_is_recorded_with_the_operator_and_leaves_the_inbox(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    escalate(service, "t1")
    sign_in(client, service)
    answered = answer(
        client, service, "resume", "t1", reason="the flaky test is fixed", actor="m"
    )
    assert answered.status_code == 303, answered.text
    assert answered.headers["location"] == "/console/?done=resume&task=t1"
    last = service.history("t1")[-1]
    assert last.changes["actor"] == "alice"
    assert last.changes["reason"] == "the flaky test is fixed"
    page = client.get(answered.headers["location"]).text
    assert 'data-task-id="t1"' not in page
    # Words a person writes, focused by the script after the answer.
    assert "You resumed t1: its agent goes on." in page
    assert 'role="status" tabindex="-1" data-focus' in page


def test_claim_and_resolve_a_hand_off_from_the_console(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    hand_off(service, "h1")
    sign_in(client, service, "bob")
    claimed = answer(client, service, "claim", "h1")
    assert claimed.status_code == 303
    assert service.handoff_queue()[0].claimed_by == "bob"
    page = client.get("/console/").text
    assert "You claimed it" in page
    assert 'formaction="/console/actions/release"' in page
    resolved = answer(
        client, service, "resolve", "h1", resolution="complete", reason="by hand"
    )
    assert resolved.status_code == 303
    assert "resolution=complete" in resolved.headers["location"]
    assert service.task("h1").state == "COMPLETED"
    said = client.get(resolved.headers["location"]).text
    assert "You resolved h1: completed by hand." in said


def test_a_refused_answer_says_why_and_writes_nothing(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    service.start_task("running")
    sign_in(client, service)
    before = event_count(service)
    refused = answer(client, service, "resume", "running", reason="go")
    assert refused.status_code == 409
    assert "Not done" in refused.text
    missing = client.post(
        "/console/actions/resume",
        data={"task_id": "nothing", "version": "1"},
        headers=SAME,
    )
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("text/html")
    unknown = client.post(
        "/console/actions/delete", data={"task_id": "x"}, headers=SAME
    )
    assert unknown.status_code == 404
    assert event_count(service) == before


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Referer": "https://evil.example/page"},
        {},
    ],
)
def test_a_post_from_another_origin_is_403_and_writes_nothing(
    console: tuple[TestClient, RecoveryService], headers: dict[str, str]
) -> None:
    client, service = console
    escalate(service, "t1")
    sign_in(client, service)
    before = event_count(service)
    answer = client.post(
        "/console/actions/skip", data={"task_id": "t1", "reason": "x"}, headers=headers
    )
    assert answer.status_code == 403
    assert "another site" in answer.text
    assert event_count(service) == before
    login = client.post("/console/login", data={"token": "x"}, headers=headers)
    assert login.status_code == 403


def test_a_same_origin_referer_is_enough_without_an_origin(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    escalate(service, "t1")
    sign_in(client, service)
    answered = client.post(
        "/console/actions/resume",
        data={"task_id": "t1", "version": str(service.task("t1").version)},
        headers={"Referer": f"{HOST}/console/"},
    )
    assert answered.status_code == 303
    assert service.task("t1").state == "RUNNING"


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_text_is_shown_as_text_on_every_page(
    console: tuple[TestClient, RecoveryService], hostile: str
) -> None:
    client, service = console
    task_id = f"t{HOSTILE.index(hostile)}{hostile}"
    service.start_run("r" + hostile, {task_id: []})
    service.start_task(task_id, run_id="r" + hostile, agent=hostile)
    service.log_lesson(task_id, hostile, hostile)
    for i in range(3):
        service.record_gate(
            task_id, 1, strategy=f"{hostile} {i}", error=hostile, output=hostile
        )
    sign_in(client, service)
    from urllib.parse import quote

    pages = [
        client.get("/console/"),
        client.get(f"/console/tasks/{quote(task_id, safe='')}"),
        client.get(f"/console/runs/{quote('r' + hostile, safe='')}"),
        client.get("/console/runs"),
        client.get("/console/metrics"),
    ]
    for page in pages:
        assert page.status_code == 200, page.url
        assert page.headers["content-security-policy"].startswith("default-src 'none'")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert hostile not in page.text, page.url
        assert "<script>alert" not in page.text
        assert "onerror=alert" not in page.text.replace("onerror=alert(1)&gt;", "")
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages[1].text or (
        hostile != HOSTILE[0]
    )


def test_the_task_page_has_the_report_history_outputs_lessons_and_chart(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    escalate(service, "t1")
    service.log_lesson("t1", "s 0", "never retry the same patch")
    service.resume("t1", actor="cli-user", reason="one more go")
    service.record_gate("t1", 1, strategy="s 9", error="E   still red")
    sign_in(client, service)
    page = client.get("/console/tasks/t1").text
    for text in (
        "Failure report",
        "E   still red",
        "never retry the same patch",
        'by <span class="actor">cli-user</span>',
        "one more go",
        'data-state="RUNNING"',
        "History",
    ):
        assert text in page, text
    current = re.findall(r'<g[^>]*aria-current="true"[^>]*>', page)
    assert len(current) == 1
    assert f'data-state="{service.task("t1").state}"' in current[0]
    assert client.get("/console/tasks/nope").status_code == 404


def test_runs_and_metrics_pages(console: tuple[TestClient, RecoveryService]) -> None:
    client, service = console
    service.start_run("r1", {"a": [], "b": ["a"]})
    service.start_task("a", run_id="r1")
    service.record_gate("a", 0)
    escalate(service, "solo")
    sign_in(client, service)
    runs = client.get("/console/runs").text
    assert 'href="/console/runs/r1"' in runs
    run = client.get("/console/runs/r1").text
    assert 'data-node="a"' in run
    assert 'data-node="b"' in run
    assert client.get("/console/runs/nope").status_code == 404
    metrics = client.get("/console/metrics").text
    assert metrics.count("<svg") >= 4
    assert "Loop rate" in metrics
    assert "Hand-offs by resolution" in metrics


def test_the_live_stream_says_when_the_log_grows(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    sign_in(client, service)
    fragment = client.get("/console/inbox")
    assert fragment.status_code == 200
    assert "Nothing waits for a person" in fragment.text
    escalate(service, "late")
    after = service.recorder.max_notification_id()
    fragment = client.get(f"/console/inbox?after={after}")
    assert 'data-task-id="late"' in fragment.text


def test_static_assets_come_from_the_package_and_nothing_from_elsewhere(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    script = client.get("/console/static/console.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert "EventSource" in script.text
    assert client.get("/console/static/console.css").status_code == 200
    for name in ("nope.js", "__init__.py", "inbox.html"):
        assert client.get(f"/console/static/{name}").status_code == 404, name
    sign_in(client, service)
    page = client.get("/console/")
    assert re.search(r"(src|href)=\"https?://", page.text) is None
    assert "<script>" not in page.text  # no inline script anywhere
    assert " style=" not in page.text


def test_an_expired_session_or_one_signed_with_another_secret_is_refused(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    sign_in(client, service)
    key = service.roster().key_of("alice", SECRET.encode())
    assert key is not None
    encoded = base64.urlsafe_b64encode(b"alice").rstrip(b"=")

    class Then(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(time.time()) - SESSION_SECONDS - 5

    def signed(signer: TimestampSigner) -> str:
        return signer.sign(encoded).decode()

    salt = "devs-console-session"
    fresh = signed(TimestampSigner(key, salt=salt, digest_method=hashlib.sha256))
    old = signed(Then(key, salt=salt, digest_method=hashlib.sha256))
    # What a copy of the store gives: the token hash, without the secret.
    stolen = service.roster().key_of("alice", b"guessed without the secret")
    assert stolen is not None
    forged = signed(TimestampSigner(stolen, salt=salt, digest_method=hashlib.sha256))
    client.cookies.clear()
    for cookie, status in ((fresh, 200), (old, 303), (forged, 303)):
        answer = client.get("/console/", headers={"Cookie": f"{COOKIE}={cookie}"})
        assert answer.status_code == status


def test_a_post_from_this_host_on_another_port_is_refused(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    escalate(service, "t1")
    sign_in(client, service)
    before = event_count(service)
    for origin in (
        "http://testserver:8081",
        "https://testserver",
        "http://testserver.",
    ):
        answer = client.post(
            "/console/actions/skip", data={"task_id": "t1"}, headers={"Origin": origin}
        )
        assert answer.status_code == 403, origin
    assert event_count(service) == before


def test_a_huge_form_is_refused_unread_and_writes_nothing(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    escalate(service, "t1")
    sign_in(client, service)
    before = event_count(service)
    huge = client.post(
        "/console/actions/resume",
        data={"task_id": "t1", "reason": "x" * 100_000},
        headers=SAME,
    )
    assert huge.status_code == 413
    assert "larger than 16,384 bytes" in huge.text
    assert huge.headers["content-security-policy"].startswith("default-src")
    many = client.post(
        "/console/actions/resume",
        content="&".join(f"f{i}=1" for i in range(50)),
        headers={**SAME, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert many.status_code == 422
    login = client.post("/console/login", data={"token": "x" * 20_000}, headers=SAME)
    assert login.status_code == 413
    assert event_count(service) == before


def test_service_errors_on_console_pages_are_pages(
    console: tuple[TestClient, RecoveryService],
) -> None:
    client, service = console
    sign_in(client, service)
    for path, status in (
        ("/console/tasks/%20bad", 422),
        ("/console/tasks/" + "x" * 300, 422),
        ("/console/runs/%20bad", 422),
    ):
        answer = client.get(path)
        assert answer.status_code == status, (path, answer.text[:200])
        assert answer.headers["content-type"].startswith("text/html"), path
        assert "content-security-policy" in answer.headers


def test_apps_in_one_process_each_keep_their_own_console(tmp_path: Path) -> None:
    """What a console holds (its service, its signing key, its inbox) is its
    app's: the routes are shared module-level functions, none closes over
    an app."""
    services = [open_service(Settings(db=str(tmp_path / f"{n}.sqlite"))) for n in "ab"]
    other = SECRET[::-1]
    apps = [
        create_app(service, token=TOKEN, read_wait=0.3, console_secret=secret)
        for service, secret in [
            (services[0], SECRET),
            (services[1], other),
            (services[0], other),  # a's store, another key
            (services[0], SECRET),  # a's store, a's key
        ]
    ]
    escalate(services[0], "only-in-a")
    escalate(services[1], "only-in-b")
    try:
        clients = [TestClient(app, follow_redirects=False) for app in apps]
        a, b, c, d = clients
        sign_in(a, services[0])
        sign_in(b, services[1])
        page_a, page_b = a.get("/console/").text, b.get("/console/").text
        assert "only-in-a" in page_a
        assert "only-in-b" not in page_a
        assert "only-in-b" in page_b
        assert "only-in-a" not in page_b
        # A's session on the same store: good where the key is A's only.
        cookie = {"Cookie": f"{COOKIE}={a.cookies[COOKIE]}"}
        assert c.get("/console/", headers=cookie).headers["location"] == (
            "/console/login"
        )
        assert d.get("/console/", headers=cookie).status_code == 200
        parts = (answers, inbox, live, outbox, runs, sessions, tasks)
        routes = [r for p in parts for r in p.router.routes]
        routes += sessions.fallback.routes
        endpoints = [r.endpoint for r in routes if isinstance(r, APIRoute)]
        assert len(endpoints) == len(routes) == 16
        assert all("<locals>" not in e.__qualname__ for e in endpoints)
        for client in clients:
            client.close()
    finally:
        for service in services:
            service.close()


def test_a_plain_install_ships_every_template_and_static_file() -> None:
    """pyproject's package data covers every file of the console's
    templates and static folders (a wheel without them serves no page)."""
    import tomllib
    from fnmatch import fnmatch

    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config["tool"]["setuptools"]
    assert "devs.adapters.console" in setuptools["packages"]
    globs = setuptools["package-data"]["devs.adapters.console"]
    folder = root / "adapters" / "console"
    shipped = [
        path.relative_to(folder).as_posix()
        for name in ("templates", "static")
        for path in (folder / name).rglob("*")
        if path.is_file()
    ]
    assert len(shipped) >= 17
    for path in shipped:
        assert any(fnmatch(path, glob) for glob in globs), path
