"""The agents lane: the real Claude Code, Codex, Gemini CLI and Copilot CLI,
driven by a scripted fake model on loopback (``pytest -m agents``; CI runs
it after ``python -m tests.agents.install``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.agents.install import PINS, binary


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.agents)


def agent_binary(agent: str) -> Path:
    """The agent's installed command. Absent, the test is skipped, saying how
    to install it, except with CI set, where it fails: CI installs them."""
    found = binary(agent)
    if found is not None:
        return found
    pin = PINS[agent]
    why = (
        f"{pin.package}@{pin.version} is not installed in .agents/: "
        "run `python -m tests.agents.install` (npm)"
    )
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(why)
    pytest.skip(why)
