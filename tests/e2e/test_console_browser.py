"""The console in a real browser: headless Chromium from Debian's packages
(``chromium``, ``chromium-driver``; ``.ci/run`` installs them), driven by
Selenium, against a real ``devs serve`` on SQLite and on PostgreSQL.

With ``DEVS_UPDATE_SCREENSHOTS=1`` the run writes docs/images/console-inbox.png
and docs/images/console-task.png (docs/console.md shows them)."""

from __future__ import annotations

import http.server
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from devs.adapters.config import Settings, open_service
from devs.domain import Outcome, RecoveryService
from tests.e2e.test_serve import Server

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
)
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service as DriverService  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
LIVE_WAIT = 10.0
"""How long a test waits for a live change (the console polls the log every
0.5 s: docs/console.md gives the measured delay)."""

if CHROMIUM is None or DRIVER is None:
    if os.environ.get("CI"):
        raise RuntimeError(
            "the browser tests need Debian's chromium and chromium-driver "
            "(apt-get install -y chromium chromium-driver; .ci/run does)"
        )
    pytest.skip(
        "chromium and chromium-driver are not installed", allow_module_level=True
    )

HOSTILE = (
    '<img src=x onerror="window.__xss=1">',
    "</script><script>window.__xss=2</script>",
    '"><svg onload="window.__xss=3">',
)


# ----------------------------------------------------------------- fixtures


class Console:
    """A ``devs serve`` and a service on the same store (to set the scene)."""

    def __init__(self, server: Server, service: RecoveryService) -> None:
        self.server = server
        self.service = service
        self.url = server.url

    def page(self, path: str) -> str:
        return f"{self.url}/console{path}"


@pytest.fixture(params=["sqlite", "postgres"])
def console(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Console]:
    db = tmp_path / "console.sqlite"
    if request.param == "sqlite":
        env: dict[str, str] = {"DEVS_DATABASE_URL": ""}
        service = open_service(Settings(db=str(db)))
    else:
        url = request.getfixturevalue("pg_url")
        env = {"DEVS_DATABASE_URL": url}
        service = open_service(env=env)
    server = Server(db, env=env)
    try:
        yield Console(server, service)
    finally:
        server.stop()
        service.close()


@pytest.fixture
def sqlite_console(tmp_path: Path) -> Iterator[Console]:
    db = tmp_path / "console.sqlite"
    service = open_service(Settings(db=str(db)))
    server = Server(db, env={"DEVS_DATABASE_URL": ""})
    try:
        yield Console(server, service)
    finally:
        server.stop()
        service.close()


def _browser() -> WebDriver:
    assert CHROMIUM is not None
    assert DRIVER is not None
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager downloads nothing
    options = Options()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1100",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(argument)
    driver: WebDriver = webdriver.Chrome(options=options, service=DriverService(DRIVER))
    driver.set_page_load_timeout(30)
    return driver


@pytest.fixture
def browsers() -> Iterator[Callable[[], WebDriver]]:
    opened: list[WebDriver] = []

    def open_one() -> WebDriver:
        driver = _browser()
        opened.append(driver)
        return driver

    yield open_one
    for driver in opened:
        driver.quit()


# ------------------------------------------------------------------ helpers


def escalate(service: RecoveryService, task_id: str, strategy: str = "patch") -> None:
    service.start_task(task_id, agent="claude-code")
    for i in range(3):
        service.record_gate(
            task_id,
            1,
            gate="pytest",
            strategy=f"{strategy} #{i}",
            error=f"E   AssertionError: expected 200, got 500 (try {i})",
            output=f"tests/test_api.py::test_get FAILED\n{i} failed",
        )


def hand_off(service: RecoveryService, task_id: str) -> None:
    service.start_task(task_id, agent="codex")
    for i in range(5):
        decision = service.record_gate(
            task_id, 1, strategy=f"variant {i}", error=f"E   KeyError: 'id' ({i})"
        )
        if decision.outcome is Outcome.ESCALATE:
            service.resume(task_id, actor="cli-user", reason="one more try")
    assert decision.outcome is Outcome.HAND_OFF


def sign_in(driver: WebDriver, console: Console, token: str) -> None:
    driver.get(console.page("/"))
    assert driver.current_url.endswith("/console/login")
    field = driver.find_element(By.NAME, "token")
    field.send_keys(token)
    field.submit()
    WebDriverWait(driver, 10).until(lambda d: d.current_url.endswith("/console/"))


def item(driver: WebDriver, task_id: str) -> WebElement:
    found: WebElement = driver.find_element(
        By.CSS_SELECTOR, f'li.item[data-task-id="{task_id}"]'
    )
    return found


def wait_live(driver: WebDriver) -> None:
    WebDriverWait(driver, 10).until(
        lambda d: (
            d.find_element(By.ID, "inbox").get_attribute("data-live-open") == "true"
        )
    )


def button(scope: WebElement | WebDriver, word: str) -> WebElement:
    for candidate in scope.find_elements(By.CSS_SELECTOR, "button[type=submit]"):
        if candidate.text == word:
            return candidate
    raise AssertionError(f"no button {word!r}")


def until(
    driver: WebDriver, condition: Callable[[WebDriver], Any], seconds: float
) -> float:
    """Wait for ``condition``; how long it took."""
    began = time.monotonic()
    WebDriverWait(
        driver,
        seconds,
        poll_frequency=0.05,
        ignored_exceptions=(StaleElementReferenceException, NoSuchElementException),
    ).until(condition)
    return time.monotonic() - began


def screenshot(driver: WebDriver, name: str) -> None:
    if os.environ.get("DEVS_UPDATE_SCREENSHOTS") != "1":
        return
    target = ROOT / "docs" / "images" / name
    target.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(target))


# -------------------------------------------------------------------- tests


def test_sign_in_see_the_report_resume_with_a_reason_and_the_history_names_you(
    console: Console, browsers: Callable[[], WebDriver]
) -> None:
    service = console.service
    escalate(service, "api-fix", strategy="retry the request")
    service.log_lesson("api-fix", "retry the request #0", "the server 500s on bad ids")
    hand_off(service, "parser")
    token = service.add_operator("alice", actor="root").token
    driver = browsers()
    sign_in(driver, console, token)
    card = item(driver, "api-fix")
    text = card.text
    assert "Escalation" in text
    assert "3 (escalates at 3, hands off at 5)" in text
    assert "E AssertionError: expected 200, got 500 (try 2)" in text
    assert item(driver, "parser").text.count("Hand-off") == 1
    screenshot(driver, "console-inbox.png")

    resume = next(
        form
        for form in card.find_elements(By.TAG_NAME, "form")
        if (form.get_attribute("action") or "").endswith("/actions/resume")
    )
    resume.find_element(By.NAME, "reason").send_keys("the fixture is fixed now")
    button(resume, "Resume").click()
    WebDriverWait(driver, 10).until(
        lambda d: not d.find_elements(By.CSS_SELECTOR, 'li[data-task-id="api-fix"]')
    )
    main = driver.find_element(By.TAG_NAME, "main").text
    assert "You resumed api-fix: its agent goes on." in main

    driver.get(console.page("/tasks/api-fix"))
    history = driver.find_element(By.CSS_SELECTOR, "ol.timeline").text
    assert "by alice" in history
    assert "the fixture is fixed now" in history
    current = driver.find_element(By.CSS_SELECTOR, 'g[aria-current="true"]')
    assert current.get_attribute("data-state") == "RUNNING"
    assert service.history("api-fix")[-1].changes["actor"] == "alice"


def test_a_second_browser_sees_the_first_one_s_claim_and_new_stops_live(
    console: Console, browsers: Callable[[], WebDriver]
) -> None:
    service = console.service
    hand_off(service, "queued")
    alice = service.add_operator("alice", actor="root").token
    bob = service.add_operator("bob", actor="root").token
    first, second = browsers(), browsers()
    sign_in(first, console, alice)
    sign_in(second, console, bob)
    wait_live(second)
    second.execute_script("window.__notReloaded = true;")
    assert "nobody yet" in item(second, "queued").text

    button(item(first, "queued"), "Claim").click()
    took = until(
        second,
        lambda d: (
            "alice" in item(d, "queued").find_element(By.CLASS_NAME, "claimed").text
        ),
        LIVE_WAIT,
    )
    print(f"claim seen live by the second browser in {took:.2f} s")
    assert second.execute_script("return window.__notReloaded === true;")

    escalate(service, "fresh")
    took = until(
        second,
        lambda d: bool(d.find_elements(By.CSS_SELECTOR, 'li[data-task-id="fresh"]')),
        LIVE_WAIT,
    )
    print(f"a new escalation seen live in {took:.2f} s")
    assert second.execute_script("return window.__notReloaded === true;")


def test_hostile_strategies_and_ids_render_as_text_and_run_nothing(
    console: Console, browsers: Callable[[], WebDriver]
) -> None:
    service = console.service
    for number, hostile in enumerate(HOSTILE):
        task_id = f"t{number}{hostile}"
        escalate(service, task_id, strategy=hostile)
        service.log_lesson(task_id, hostile, hostile)
    token = service.add_operator("alice", actor="root").token
    driver = browsers()
    sign_in(driver, console, token)
    wait_live(driver)
    page = driver.find_element(By.ID, "inbox").text
    for hostile in HOSTILE:
        assert f"{hostile} #2" in page or hostile in page
    for number, hostile in enumerate(HOSTILE):
        driver.get(console.page(f"/tasks/{quote(f't{number}{hostile}', safe='')}"))
        assert hostile in driver.find_element(By.CSS_SELECTOR, "h1").text
        assert f"{hostile} #2" in driver.find_element(By.TAG_NAME, "main").text
    assert driver.execute_script("return window.__xss === undefined;")
    assert not driver.find_elements(By.CSS_SELECTOR, "main img, main script")


class _Evil(http.server.BaseHTTPRequestHandler):
    target = ""

    def do_GET(self) -> None:
        page = (
            "<!doctype html><html><body>"
            f'<form id="f" method="post" action="{self.target}">'
            '<input name="task_id" value="victim"><input name="reason" value="x">'
            "</form><script>document.getElementById('f').submit()</script>"
            "</body></html>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_cross_site_post_is_refused_and_writes_nothing(
    console: Console, browsers: Callable[[], WebDriver]
) -> None:
    service = console.service
    escalate(service, "victim")
    token = service.add_operator("alice", actor="root").token
    driver = browsers()
    sign_in(driver, console, token)
    before = service.recorder.max_notification_id()
    _Evil.target = console.page("/actions/skip")
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Evil)
    thread = threading.Thread(target=evil.serve_forever, daemon=True)
    thread.start()
    try:
        # Another origin on the same host (the same site: the SameSite=Strict
        # cookie is sent, and only the origin check refuses), then the same
        # machine by another name (another site: no cookie either).
        for host in ("127.0.0.1", "localhost"):
            driver.get(f"http://{host}:{evil.server_address[1]}/")
            WebDriverWait(driver, 10).until(lambda d: "/console/" in d.current_url)
            body = driver.find_element(By.TAG_NAME, "body").text
            assert "another site" in body, host
    finally:
        evil.shutdown()
        evil.server_close()
    assert service.recorder.max_notification_id() == before
    assert service.task("victim").state == "ESCALATION"


def test_the_inbox_works_by_keyboard_with_visible_focus_and_named_buttons(
    sqlite_console: Console, browsers: Callable[[], WebDriver]
) -> None:
    console = sqlite_console
    service = console.service
    escalate(service, "keys")
    hand_off(service, "queue")
    token = service.add_operator("alice", actor="root").token
    driver = browsers()
    sign_in(driver, console, token)
    for element in driver.find_elements(By.CSS_SELECTOR, "button"):
        if not element.is_displayed():
            continue  # the form's disabled default, or the opt-in notifier
        assert element.accessible_name, element.get_attribute("outerHTML")
        assert element.text in element.accessible_name
    for field in driver.find_elements(
        By.CSS_SELECTOR, "input:not([type=hidden]), select"
    ):
        assert field.accessible_name, field.get_attribute("outerHTML")

    body = driver.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)  # the skip link first
    assert driver.switch_to.active_element.text == "Skip to the content"
    reached: WebElement | None = None
    for _ in range(60):
        driver.switch_to.active_element.send_keys(Keys.TAB)
        active = driver.switch_to.active_element
        if active.get_attribute("name") == "reason":
            reached = active
            break
    assert reached is not None, "no reason field reached by Tab"
    outline = driver.execute_script(
        "return getComputedStyle(document.activeElement).outlineStyle;"
    )
    assert outline not in ("none", ""), outline
    reached.send_keys("answered by keyboard")
    reached.send_keys(Keys.TAB)
    active = driver.switch_to.active_element
    assert active.tag_name == "button"
    assert active.text == "Resume"
    active.send_keys(Keys.ENTER)
    try:
        WebDriverWait(driver, 10).until(
            lambda d: not d.find_elements(By.CSS_SELECTOR, 'li[data-task-id="keys"]')
        )
    except TimeoutException:
        raise AssertionError(driver.page_source[:2000]) from None
    assert service.history("keys")[-1].changes["reason"] == "answered by keyboard"

    driver.get(console.page("/tasks/queue"))
    screenshot(driver, "console-task.png")


def test_a_budget_pause_shows_its_spend_and_is_raised_then_resumed_from_its_page(
    sqlite_console: Console, browsers: Callable[[], WebDriver]
) -> None:
    # test_console_operators imports this module: imported once both are.
    from tests.e2e.test_console_operators import AXE, axe_problems

    console = sqlite_console
    service = console.service
    call: dict[str, Any] = {
        "model": "claude-sonnet-4-5-20250929",
        "input_tokens": 120_000,
        "output_tokens": 8_000,
    }
    service.start_task("migrate-db", agent="claude-code")
    service.record_usage("migrate-db", **call, cost_usd=0.9)
    service.raise_budget("migrate-db", usd=1.0, actor="root", reason="a dollar")
    assert service.record_usage("migrate-db", **call, cost_usd=0.2).triggered
    token = service.add_operator("alice", actor="root").token
    driver = browsers()
    sign_in(driver, console, token)
    card = item(driver, "migrate-db").text
    assert "Budget pause" in card
    assert "USD 1.1000 of 1 (110%, over budget); 256,000 tokens" in card

    driver.get(console.page("/tasks/migrate-db"))
    spend = driver.find_element(By.CSS_SELECTOR, '[aria-labelledby="spend-h"]').text
    assert "USD 1.1000 of 1 (110%, over budget)" in spend
    assert "claude-sonnet-4-5-20250929" in spend
    if AXE is not None or os.environ.get("CI"):  # else the rest still runs
        assert axe_problems(driver) == []
    form = driver.find_element(By.CSS_SELECTOR, "form.answer")
    form.find_element(By.NAME, "usd").send_keys("2.5")
    form.find_element(By.NAME, "reason").send_keys("the migration is worth it")
    button(form, "Raise budget").click()
    # The page is drawn anew: an element read meanwhile may go stale.
    settled = (StaleElementReferenceException, NoSuchElementException)
    WebDriverWait(driver, 10, ignored_exceptions=settled).until(
        lambda d: (
            "You raised the budget of migrate-db"
            in d.find_element(By.TAG_NAME, "main").text
        )
    )
    assert service.task_spend("migrate-db").budget_usd == 2.5
    spend = driver.find_element(By.CSS_SELECTOR, '[aria-labelledby="spend-h"]').text
    assert "USD 1.1000 of 2.5 (44%)" in spend
    button(driver.find_element(By.CSS_SELECTOR, "form.answer"), "Resume").click()
    WebDriverWait(driver, 10, ignored_exceptions=settled).until(
        lambda d: "You resumed migrate-db" in d.find_element(By.TAG_NAME, "main").text
    )
    assert service.task("migrate-db").state == "RUNNING"
    raised, resumed = service.history("migrate-db")[-2:]
    assert (raised.event, raised.changes["actor"]) == ("BudgetRaised", "alice")
    assert (resumed.event, resumed.changes["actor"]) == ("Resumed", "alice")


def test_the_screenshots_in_the_docs_are_pngs() -> None:
    for name in (
        "console-inbox.png",
        "console-task.png",
        "console-inbox-list.png",
        "console-inbox-phone.png",
    ):
        data = (ROOT / "docs" / "images" / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n"), name
        assert len(data) > 10_000, name
