"""Installs the real coding agents the agents lane drives, pinned, from npm,
into ``.agents/`` of the checkout (git ignores it): ``python -m
tests.agents.install``. Each package ships its native binary inside it, so
nothing is downloaded at run time. A folder that already holds these exact
versions is left as it is (CI's cache).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / ".agents"
BIN = FOLDER / "node_modules" / ".bin"


class Pin(NamedTuple):
    package: str
    version: str
    command: str


PINS: dict[str, Pin] = {
    "claude-code": Pin("@anthropic-ai/claude-code", "2.1.332", "claude"),
    "codex": Pin("@openai/codex", "0.171.0", "codex"),
    "gemini": Pin("@google/gemini-cli", "0.61.0", "gemini"),
    "copilot": Pin("@github/copilot", "1.0.102", "copilot"),
}
"""Each agent (by the name ``devs hook`` uses): its npm package, the version
the lane was measured with, and the command the package installs."""

TOOLS: dict[str, str] = {"axe-core": "4.10.3"}
"""npm packages the tests read besides the agents, pinned: axe-core, which
the console's browser tests run in Chromium (tests/e2e/test_console_operators.py)."""


def installed(package: str) -> str | None:
    """The version of ``package`` in the folder, if any."""
    manifest = FOLDER / "node_modules" / package / "package.json"
    try:
        version = json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    return str(version)


def missing() -> list[str]:
    """The pinned packages the folder lacks, or holds at another version."""
    wanted = [(pin.package, pin.version) for pin in PINS.values()]
    wanted += list(TOOLS.items())
    return [
        f"{package}@{version}"
        for package, version in wanted
        if installed(package) != version
    ]


def binary(agent: str) -> Path | None:
    """The agent's command in the folder, when its pinned package is there."""
    pin = PINS[agent]
    path = BIN / pin.command
    return path if installed(pin.package) == pin.version and path.exists() else None


def _pinned() -> list[str]:
    pinned = [f"{pin.package}@{pin.version}" for pin in PINS.values()]
    return pinned + [f"{package}@{version}" for package, version in TOOLS.items()]


def main() -> int:
    wanted = missing()
    if not wanted:
        print(f"agents: {', '.join(_pinned())} in {FOLDER}")
        return 0
    npm = shutil.which("npm")
    if npm is None:
        print("agents: npm is not installed (Node.js 20 or newer)", file=sys.stderr)
        return 1
    FOLDER.mkdir(exist_ok=True)
    manifest = FOLDER / "package.json"
    if not manifest.exists():
        manifest.write_text('{"private": true}\n')
    command = [
        npm,
        "install",
        "--no-audit",
        "--no-fund",
        "--no-save",
        "--loglevel=error",
        "--prefix",
        str(FOLDER),
        *_pinned(),
    ]
    done = subprocess.run(command, check=False)
    if done.returncode != 0 or missing():
        print(f"agents: npm could not install {', '.join(missing())}", file=sys.stderr)
        return 1
    print(f"agents: installed {', '.join(_pinned())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
