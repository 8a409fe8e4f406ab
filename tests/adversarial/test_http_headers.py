"""What a real ``devs serve`` makes of the headers a client sends, and the
ones it sends back: the token's scheme in any case, frames and sniffing
refused on every answer, the documentation's pages under a
Content-Security-Policy they still work with, and an access log that never
repeats a secret from a query string (docs/http.md)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_serve import TOKEN, Server

SECRET = "ghp_" + "Abc123" * 6
"""A GitHub token's shape (not a real one)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("headers")
    running = Server(folder / "state.sqlite")
    yield running
    running.stop()


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer", "bEaReR"])
def test_the_bearer_scheme_is_case_insensitive(server: Server, scheme: str) -> None:
    """RFC 9110 section 11.1: before, ``bearer <token>`` was a 401 for the
    service's token (an operator's was taken in any case)."""
    with httpx.Client(base_url=server.url, timeout=10) as client:
        answer = client.get("/tasks", headers={"Authorization": f"{scheme} {TOKEN}"})
        assert answer.status_code == 200, answer.text
        wrong = client.get("/tasks", headers={"Authorization": f"{scheme} x{TOKEN}"})
        assert wrong.status_code == 401
        other = client.get("/tasks", headers={"Authorization": f"Basic {TOKEN}"})
        assert other.status_code == 401


@pytest.mark.parametrize(
    "path", ["/healthz", "/tasks", "/tasks/nope", "/openapi.json", "/docs", "/redoc"]
)
def test_every_answer_refuses_frames_and_sniffing(server: Server, path: str) -> None:
    answer = server.client.get(path)
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]


@pytest.mark.parametrize("path", ["/docs", "/docs/oauth2-redirect"])
def test_the_docs_csp_admits_their_inline_script_by_its_hash(
    server: Server, path: str
) -> None:
    answer = server.client.get(path)
    policy = answer.headers["content-security-policy"]
    scripts = re.findall(r"<script>(.*?)</script>", answer.text, re.DOTALL)
    assert scripts
    for script in scripts:
        digest = hashlib.sha256(script.encode()).digest()
        assert f"'sha256-{base64.b64encode(digest).decode()}'" in policy
    assert "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";")[0]
    assert "script-src 'self'" in policy


CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")


@pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None, reason="chromium and chromedriver"
)
@pytest.mark.parametrize(
    ("path", "shown"), [("/docs", ".opblock"), ("/redoc", ".menu-content")]
)
def test_the_docs_still_work_in_a_browser_under_their_csp(
    server: Server, path: str, shown: str
) -> None:
    """Swagger UI lists the operations and ReDoc its menu, served from this
    server, and the browser reports no blocked script or style of this
    server's own (ReDoc's logo from its CDN is blocked: offline by design)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = Options()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu"):
        options.add_argument(argument)
    options.add_argument("--disable-dev-shm-usage")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(options=options, service=Service(DRIVER))
    try:
        browser.get(server.url + path)
        deadline = time.monotonic() + 30
        while not browser.find_elements(By.CSS_SELECTOR, shown):
            assert time.monotonic() < deadline, f"{path} never showed {shown}"
            time.sleep(0.2)
        blocked = [
            entry["message"]
            for entry in browser.get_log("browser")
            if "Content Security Policy" in entry["message"]
            and "https://cdn.redoc.ly/" not in entry["message"]
        ]
        assert blocked == []
    finally:
        browser.quit()


def test_the_access_log_redacts_a_query_string(tmp_path: Path) -> None:
    """Before, ``DEVS_ACCESS_LOG=1`` wrote ``?candidate=export
    GITHUB_TOKEN=ghp_…`` as sent."""
    running = Server(tmp_path / "state.sqlite", env={"DEVS_ACCESS_LOG": "1"})
    try:
        running.client.post("/tasks", json={"task_id": "t1"})
        for candidate in (
            f"export GITHUB_TOKEN={SECRET}",
            f"curl -H 'Authorization: token {SECRET}'",
        ):
            answer = running.client.get(
                "/tasks/t1/blacklist", params={"candidate": candidate}
            )
            assert answer.status_code == 200, answer.text
        answer = running.client.get(f"/tasks/{SECRET}")  # in the path, too
        assert answer.status_code == 422  # an id that looks like a credential
    finally:
        running.client.close()
        running.process.terminate()
        logged, _ = running.process.communicate(timeout=30)
    lines = [line for line in logged.splitlines() if " /tasks" in line]
    assert len(lines) == 4, logged
    assert "ghp_" not in logged
    assert logged.count("[REDACTED]") >= 3, logged
    assert '"GET /tasks/t1/blacklist?candidate=export%20GITHUB_TOKEN=' in logged
    assert '"POST /tasks HTTP/1.1" 201 -' in logged


BROKEN_READINESS = """
import devs.adapters.http.dispatch


async def _broken(self, timeout=0.0):
    raise RuntimeError("a fault injected by the test")


devs.adapters.http.dispatch.Served.readiness = _broken
"""
"""A ``sitecustomize`` for the server's process: ``/readyz`` fails on an
exception nothing expects (as a bug would)."""


def test_an_unexpected_error_is_a_500_with_the_security_headers(
    tmp_path: Path,
) -> None:
    """Starlette answers an unexpected exception from its outermost
    middleware, outside the one that adds the security headers: before, that
    500 was a bare ``text/plain`` "Internal Server Error" without
    ``nosniff``, ``X-Frame-Options`` or a CSP."""
    injected = tmp_path / "inject"
    injected.mkdir()
    (injected / "sitecustomize.py").write_text(BROKEN_READINESS)
    path = os.pathsep.join(filter(None, [str(injected), os.environ.get("PYTHONPATH")]))
    running = Server(tmp_path / "state.sqlite", env={"PYTHONPATH": path})
    try:
        answer = running.client.get("/readyz")
    finally:
        running.client.close()
        running.process.terminate()
        _, logged = running.process.communicate(timeout=30)
    assert answer.status_code == 500, answer.text
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["x-frame-options"] == "DENY"
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    assert answer.json()["error"] == "internal_error"
    assert "a fault injected by the test" not in answer.text  # only in the log
    assert "a fault injected by the test" in logged


@pytest.mark.parametrize(
    ("sent", "status"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", 400),  # uvicorn's own answer
        (b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * (70 * 1024), 431),
    ],
)
def test_the_protocols_own_answers_carry_the_security_headers(
    server: Server, sent: bytes, status: int
) -> None:
    """Answers written before any app, by ``devs serve``'s protocol: before,
    the 400 to what does not parse as HTTP had none of the headers, and a
    431, 408 or 503 only ``nosniff``."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(sent)
        got = b""
        with contextlib.suppress(OSError):
            while chunk := conn.recv(65536):
                got += chunk
    head = got.partition(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 %d " % status), got[:300]
    assert b"\r\nx-content-type-options: nosniff\r\n" in head
    assert b"\r\nx-frame-options: deny\r\n" in head
    assert b"\r\ncontent-security-policy: default-src 'none'; frame-ancestors" in head
