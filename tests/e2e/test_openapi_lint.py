"""``redocly lint`` (npm ``@redocly/cli``, pinned in tests/agents/install.py
and run on the pinned Node 22 there) on ``/openapi.json`` fetched from a real
``devs serve``, with Redocly's recommended rules but the one
tests/redocly.yaml turns off and says why: no error, and no warning but the
ones listed here. Skipped, saying so, where the linter is not installed
(``python -m tests.agents.install``); failed instead with ``CI`` set.

In the main suite: one server start and one lint, about 5 s. Here too, how
``tests.agents.install`` finds the tools run on Node 22, and that a test
needing one is skipped without it, but fails with ``CI`` set."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.agents import install
from tests.e2e import test_mcp_inspector as inspector
from tests.e2e.test_mcp_inspector import node_tool_or_skip
from tests.e2e.test_serve import Server

CONFIG = Path(__file__).resolve().parents[1] / "redocly.yaml"

WARNINGS: set[tuple[str, str]] = set()
"""The warnings accepted, each a (rule, place): none (the license is in
``info``; ``/healthz`` documents the front door's 421). A new one fails the
test."""


def lint(document: Path, home: Path) -> dict[str, Any]:
    """redocly lint's JSON report on ``document``."""
    home.mkdir(exist_ok=True)
    done = subprocess.run(
        [
            *node_tool_or_skip("redocly"),
            "lint",
            str(document),
            "--config",
            str(CONFIG),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "HOME": str(home),
            "REDOCLY_TELEMETRY": "off",
            "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true",
        },
        timeout=120,
        check=False,
    )
    assert done.stdout.startswith("{"), done.stderr
    return dict(json.loads(done.stdout))


def test_the_served_openapi_passes_redoclys_lint(tmp_path: Path) -> None:
    running = Server(tmp_path / "state.sqlite")
    try:
        answer = running.client.get("/openapi.json")
    finally:
        running.stop()
    assert answer.status_code == 200
    document = tmp_path / "openapi.json"
    document.write_text(answer.text)

    report = lint(document, tmp_path / "home")
    found = {
        (problem["ruleId"], problem["severity"], problem["location"][0]["pointer"])
        for problem in report["problems"]
    }
    errors = {place for place in found if place[1] == "error"}
    assert errors == set()
    warned = {(rule, pointer) for rule, _, pointer in found}
    assert warned <= WARNINGS


def test_the_lint_finds_what_it_is_asked_to(tmp_path: Path) -> None:
    """The same lint fails a document with an error: a path's operation
    answering nothing, and a second operation with the same operationId."""
    document = tmp_path / "openapi.json"
    document.write_text(
        json.dumps(
            {
                "openapi": "3.1.0",
                "info": {"title": "t", "version": "1"},
                "paths": {
                    "/a": {"get": {"operationId": "same", "responses": {}}},
                    "/b": {"get": {"operationId": "same", "responses": {}}},
                },
            }
        )
    )
    report = lint(document, tmp_path / "home")
    rules = {problem["ruleId"] for problem in report["problems"]}
    assert {"operation-operationId-unique"} <= rules
    assert report["totals"]["errors"] > 0


def test_the_node_tools_are_found_only_at_their_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``node_tool`` answers the command only when Node and the tool are
    installed at their pinned versions; ``missing`` names what is not."""
    folder = tmp_path / "node22"
    monkeypatch.setattr(install, "FOLDER", tmp_path)
    monkeypatch.setattr(install, "NODE_FOLDER", folder)
    pinned = [install.NODE, install.NODE_TOOLS["redocly"]]
    assert {f"{pin.package}@{pin.version}" for pin in pinned} <= set(install.missing())
    assert install.node_tool("redocly") is None

    def put(pin: install.Pin, version: str) -> None:
        package = folder / "node_modules" / pin.package
        package.mkdir(parents=True, exist_ok=True)
        (package / "package.json").write_text(json.dumps({"version": version}))
        command = folder / "node_modules" / ".bin" / pin.command
        command.parent.mkdir(exist_ok=True)
        command.touch()

    put(install.NODE, install.NODE.version)
    put(install.NODE_TOOLS["redocly"], "0.0.1")
    assert install.node_tool("redocly") is None
    assert "@redocly/cli@2.77.0" in install.missing()
    put(install.NODE_TOOLS["redocly"], install.NODE_TOOLS["redocly"].version)
    bin_folder = folder / "node_modules" / ".bin"
    assert install.node_tool("redocly") == [
        str(bin_folder / "node"),
        str(bin_folder / "redocly"),
    ]
    left = install.missing()
    assert not {f"{pin.package}@{pin.version}" for pin in pinned} & set(left)
    assert "@modelcontextprotocol/inspector@2.12.0" in left


@pytest.mark.parametrize(("ci", "outcome"), [("", "skip"), ("true", "fail")])
def test_a_missing_tool_is_skipped_but_fails_in_ci(
    ci: str, outcome: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspector, "node_tool", lambda tool: None)
    monkeypatch.setenv("CI", ci)
    expected = pytest.skip.Exception if outcome == "skip" else pytest.fail.Exception
    with pytest.raises(expected, match=r"python -m tests\.agents\.install"):
        node_tool_or_skip("redocly")
