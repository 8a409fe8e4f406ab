"""Two operators in two headless Chromium sessions against a real ``devs
serve``: a stale answer and a claimed stop are refused with the typed reason
kept; the inbox's list view; axe-core at 1440 and 390 px wide; nothing wider
than a phone. With ``DEVS_UPDATE_SCREENSHOTS=1`` the run writes the list
view's screenshots in docs/images/ (docs/console.md shows them).

axe-core is read from ``DEVS_AXE_JS`` (its ``axe.min.js``), else from an
``axe-core`` npm package under ``.agents/node_modules`` or npm's global
root; the axe checks are skipped, saying so, when none is found (with ``CI``
set they fail instead: ``python -m tests.agents.install`` puts it in
``.agents``)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from devs.adapters.config import Settings, open_service
from devs.domain import RecoveryService
from tests.e2e.test_console_browser import (
    LIVE_WAIT,
    ROOT,
    Console,
    _browser,
    browsers,  # noqa: F401 - a fixture
    button,
    escalate,
    hand_off,
    screenshot,
    sign_in,
    sqlite_console,  # noqa: F401 - a fixture
    until,
)
from tests.e2e.test_serve import Server

WIDE = (1440, 900)
PHONE = (390, 844)


def _axe_path() -> Path | None:
    named = os.environ.get("DEVS_AXE_JS")
    if named:
        return Path(named)
    places = [ROOT / ".agents" / "node_modules"]
    try:
        root = subprocess.run(
            ["npm", "root", "-g"], capture_output=True, text=True, timeout=20
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        root = ""
    if root:
        places.append(Path(root))
    for place in places:
        found = place / "axe-core" / "axe.min.js"
        if found.is_file():
            return found
    return None


AXE = _axe_path()


def viewport(driver: WebDriver, size: tuple[int, int]) -> None:
    width, height = size
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {
            "width": width,
            "height": height,
            "deviceScaleFactor": 1,
            "mobile": width < 600,
        },
    )


def axe_problems(driver: WebDriver) -> list[str]:
    """axe-core's serious and critical violations on the page shown."""
    if AXE is None:
        why = "axe-core not found: set DEVS_AXE_JS to its axe.min.js"
        if os.environ.get("CI"):  # CI installs it (python -m tests.agents.install)
            pytest.fail(f"CI must run the axe checks, but {why}")
        pytest.skip(why)
    driver.execute_script(AXE.read_text(encoding="utf-8"))
    driver.set_script_timeout(60)
    found: dict[str, Any] = driver.execute_async_script(
        "var done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']})"
        ".then(function (r) { done(r); }, function (e) { done({error: String(e)}); });"
    )
    assert "error" not in found, found
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at "
        + json.dumps([n["target"] for n in v["nodes"][:3]])
        for v in found["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def wait(driver: WebDriver, condition: Callable[[WebDriver], Any]) -> None:
    """Wait at most 10 s for ``condition``, through a page's navigation
    (whose elements, read meanwhile, are gone)."""
    WebDriverWait(
        driver, 10, poll_frequency=0.05, ignored_exceptions=(WebDriverException,)
    ).until(condition)


def card(driver: WebDriver, task_id: str) -> WebElement:
    found: WebElement = driver.find_element(
        By.CSS_SELECTOR, f'[data-task-id="{task_id}"]'
    )
    return found


def operators(
    console: Console,
    browsers: Callable[[], WebDriver],  # noqa: F811
) -> tuple[WebDriver, WebDriver]:
    service = console.service
    alice_token = service.add_operator("alice", actor="root").token
    bob_token = service.add_operator("bob", actor="root").token
    alice, bob = browsers(), browsers()
    for driver in (alice, bob):
        viewport(driver, WIDE)
    sign_in(alice, console, alice_token)
    sign_in(bob, console, bob_token)
    return alice, bob


def test_a_stale_skip_is_refused_the_task_stays_running_and_the_reason_is_kept(
    sqlite_console: Console,  # noqa: F811
    browsers: Callable[[], WebDriver],  # noqa: F811
) -> None:
    console = sqlite_console
    service = console.service
    escalate(service, "fix-login-500")
    alice, bob = operators(console, browsers)
    alice.get(console.page("/tasks/fix-login-500"))  # her page, open

    bob.find_element(By.CSS_SELECTOR, "textarea[name=reason]").send_keys(
        "the fixture is fixed"
    )
    button(card(bob, "fix-login-500"), "Resume").click()
    wait(
        bob,
        lambda d: (
            "You resumed fix-login-500" in d.find_element(By.TAG_NAME, "main").text
        ),
    )
    assert service.task("fix-login-500").state == "RUNNING"
    before = service.recorder.max_notification_id()

    area = alice.find_element(By.CSS_SELECTOR, "section.answer-area")
    area.find_element(By.NAME, "reason").send_keys("not worth the time")
    button(area, "Skip").click()
    wait(alice, lambda d: d.find_elements(By.CSS_SELECTOR, "p.refusal"))
    said = alice.find_element(By.CSS_SELECTOR, "p.refusal").text
    assert "bob answered first: the task is now RUNNING" in said
    kept = alice.find_element(By.ID, "kept")
    assert kept.get_attribute("value") == "not worth the time"
    assert alice.switch_to.active_element.get_attribute("class") == "error refusal"
    assert service.task("fix-login-500").state == "RUNNING"
    assert service.recorder.max_notification_id() == before  # nothing written
    viewport(alice, WIDE)
    assert axe_problems(alice) == []
    viewport(alice, PHONE)
    assert axe_problems(alice) == []


def test_a_claim_refuses_another_answer_until_taken_over(
    sqlite_console: Console,  # noqa: F811
    browsers: Callable[[], WebDriver],  # noqa: F811
) -> None:
    console = sqlite_console
    service = console.service
    escalate(service, "refactor-cache")
    alice, bob = operators(console, browsers)
    # Bob starts typing before Alice claims: his card is left as he has it.
    reason = card(bob, "refactor-cache").find_element(By.NAME, "reason")
    reason.send_keys("I know this cache")
    button(card(alice, "refactor-cache"), "Claim").click()
    wait(
        alice,
        lambda d: (
            "You claimed refactor-cache" in d.find_element(By.TAG_NAME, "main").text
        ),
    )
    assert service.task("refactor-cache").claimed_by == "alice"
    before = service.recorder.max_notification_id()

    button(card(bob, "refactor-cache"), "Resume").click()
    wait(bob, lambda d: d.find_elements(By.CSS_SELECTOR, "p.refusal"))
    said = bob.find_element(By.CSS_SELECTOR, "p.refusal").text
    assert "alice is on it (claimed): take it over" in said
    kept = bob.find_element(By.NAME, "reason")
    assert kept.get_attribute("value") == "I know this cache"
    assert service.recorder.max_notification_id() == before
    assert service.task("refactor-cache").state == "ESCALATION"
    assert axe_problems(bob) == []

    button(bob, "Take over").click()
    wait(
        bob,
        lambda d: (
            "You took refactor-cache over" in d.find_element(By.TAG_NAME, "main").text
        ),
    )
    last = service.history("refactor-cache")[-1]
    assert (last.event, last.changes["actor"], last.changes["previous"]) == (
        "ClaimTakenOver",
        "bob",
        "alice",
    )
    assert last.changes["reason"] == "I know this cache"
    # Alice's inbox shows it live: Bob is on it now.
    until(
        alice,
        lambda d: (
            "bob"
            in card(d, "refactor-cache").find_element(By.CLASS_NAME, "claimed").text
        ),
        LIVE_WAIT,
    )
    mine = card(bob, "refactor-cache")
    assert "You claimed it" in mine.text
    mine.find_element(By.NAME, "reason").send_keys("cache keys now hashed")
    button(mine, "Resume").click()
    wait(
        bob,
        lambda d: (
            "You resumed refactor-cache" in d.find_element(By.TAG_NAME, "main").text
        ),
    )
    assert service.task("refactor-cache").state == "RUNNING"
    assert service.history("refactor-cache")[-1].changes["actor"] == "bob"


def test_enter_in_a_field_sends_nothing_and_skip_asks_to_confirm(
    sqlite_console: Console,  # noqa: F811
    browsers: Callable[[], WebDriver],  # noqa: F811
) -> None:
    console = sqlite_console
    service = console.service
    escalate(service, "keys")
    token = service.add_operator("alice", actor="root").token
    driver = browsers()
    sign_in(driver, console, token)
    commit = card(driver, "keys").find_element(By.NAME, "to_commit")
    commit.send_keys("abc123", Keys.ENTER)
    reason = card(driver, "keys").find_element(By.NAME, "reason")
    reason.send_keys("line one", Keys.ENTER, "line two")
    assert reason.get_attribute("value") == "line one\nline two"
    assert driver.current_url == console.page("/")
    assert service.task("keys").state == "ESCALATION"
    button(card(driver, "keys"), "Skip").click()
    wait(driver, lambda d: d.find_element(By.TAG_NAME, "h1").text == "Skip keys?")
    assert "its run moves on" in driver.find_element(By.TAG_NAME, "main").text
    assert service.task("keys").state == "ESCALATION"  # not before "yes"
    assert axe_problems(driver) == []
    button(driver, "Yes, skip it").click()
    wait(
        driver, lambda d: "You skipped keys" in d.find_element(By.TAG_NAME, "main").text
    )
    assert service.task("keys").state == "SKIPPED"
    assert service.history("keys")[-1].changes["reason"] == "line one\nline two"


def twenty_one(service: RecoveryService) -> None:
    service.start_run(
        "release-7", {**{f"node-{i}": [] for i in range(4)}, "deploy": ["node-0"]}
    )
    for i in range(4):  # all started before the first stop pauses the run
        service.start_task(f"node-{i}", run_id="release-7", agent="claude-code")
    for i in range(4):
        for j in range(3):
            service.record_gate(
                f"node-{i}", 1, gate="pytest", strategy=f"patch {j}", error="E   boom"
            )
    for i in range(12):
        escalate(service, f"fix-api-{i:02d}", strategy=f"retry {i}")
    for i in range(5):
        hand_off(service, f"parser-{i}")
    service.claim("fix-api-00", actor="alice")
    service.claim("parser-0", actor="bob")


def test_the_list_view_has_few_tab_stops_fits_a_screen_and_passes_axe(
    sqlite_console: Console,  # noqa: F811
    browsers: Callable[[], WebDriver],  # noqa: F811
) -> None:
    console = sqlite_console
    service = console.service
    twenty_one(service)
    token = service.add_operator("alice", actor="root").token
    driver = browsers()
    viewport(driver, WIDE)
    sign_in(driver, console, token)
    tabbable = (
        "return Array.prototype.filter.call(document.querySelectorAll("
        "'a[href], button, input:not([type=hidden]), select, textarea, "
        "[tabindex]'), function (e) { return e.tabIndex >= 0 && !e.disabled "
        "&& e.getClientRects().length > 0; }).length;"
    )
    cards_stops = driver.execute_script(tabbable)
    driver.get(console.page("/?view=list"))
    assert driver.title.startswith("(21) Inbox")
    rows = driver.find_elements(By.CSS_SELECTOR, "tbody#inbox tr[data-task-id]")
    assert len(rows) == 21
    list_stops = driver.execute_script(tabbable)
    visible = driver.execute_script(
        "return Array.prototype.filter.call(document.querySelectorAll("
        "'tbody#inbox tr[data-task-id]'), function (r) {"
        " return r.getBoundingClientRect().bottom <= window.innerHeight; }).length;"
    )
    print(
        f"21 stops: {cards_stops} tab stops as cards, {list_stops} as a list; "
        f"{visible} rows visible at 1440x900"
    )
    # One per row (its task's link), and the page's fixed ones.
    assert list_stops <= 21 + 20
    assert visible >= 15
    screenshot(driver, "console-inbox-list.png")
    assert axe_problems(driver) == []
    # New stops arrive live, marked, and the count in the title follows.
    escalate(service, "brand-new")
    until(
        driver,
        lambda d: "fresh" in (card(d, "brand-new").get_attribute("class") or ""),
        LIVE_WAIT,
    )
    until(driver, lambda d: d.title.startswith("(22) Inbox"), LIVE_WAIT)

    viewport(driver, PHONE)
    driver.get(console.page("/?view=list"))
    screenshot(driver, "console-inbox-phone.png")
    assert axe_problems(driver) == []


@pytest.fixture(scope="module")
def phone(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Console, WebDriver]]:
    """A console on :func:`twenty_one`'s stops and one Chromium signed in to it
    at a phone's size, for every page :func:`test_nothing_is_wider_than_a_phone`
    measures: the pages are the subject, and a server, a store and a browser
    started for each page measured the same pages on the same data six times
    (some 3 s of CPU each)."""
    db = tmp_path_factory.mktemp("phone") / "console.sqlite"
    service = open_service(Settings(db=str(db)))
    server = Server(db, env={"DEVS_DATABASE_URL": ""})
    driver: WebDriver | None = None
    try:
        console = Console(server, service)
        twenty_one(service)
        token = service.add_operator("alice", actor="root").token
        driver = _browser()
        viewport(driver, PHONE)
        sign_in(driver, console, token)
        yield console, driver
    finally:
        if driver is not None:
            driver.quit()
        server.stop()
        service.close()


@pytest.mark.parametrize(
    "path",
    ["/", "/?view=list", "/tasks/fix-api-01", "/outbox", "/runs", "/runs/release-7"],
)
def test_nothing_is_wider_than_a_phone(
    phone: tuple[Console, WebDriver], path: str
) -> None:
    console, driver = phone
    driver.get(console.page(path))
    width = driver.execute_script("return document.documentElement.scrollWidth;")
    assert width <= PHONE[0], (path, width)
    if path.startswith("/tasks/"):
        outputs = driver.find_elements(By.CSS_SELECTOR, "pre.output")
        sizes = [o.size["width"] for o in outputs if o.is_displayed()]
        assert sizes
        assert min(sizes) >= 300, sizes
    assert axe_problems(driver) == []
