"""GitHub Copilot CLI (``copilot -p``) against the fake Responses API of
:mod:`tests.agents.responses`, for tests that run the real binary
(``.agents/node_modules/.bin/copilot``, 1.0.102).

What Copilot needs, as found on 1.0.102 (its configuration is the
environment alone, :func:`environment`):

- ``COPILOT_PROVIDER_BASE_URL`` on the fake, with ``/v1`` (Copilot posts to
  ``BASE/responses``), ``COPILOT_PROVIDER_TYPE=openai``,
  ``COPILOT_PROVIDER_WIRE_API=responses``, any ``COPILOT_PROVIDER_API_KEY``
  and a model (``COPILOT_MODEL``); ``COPILOT_OFFLINE=true`` turns off every
  other network use (sign-in, telemetry, auto-update, the GitHub MCP server).
  Copilot makes no other request of the fake: only ``POST /v1/responses``,
  no model list, no token count, no title request;
- the model decides the tools: ``gpt-4.1`` (:data:`MODEL`) is offered
  ``bash``, ``create`` (a new file) and ``edit`` (``old_str`` →
  ``new_str``); the ``gpt-5`` family gets the freeform ``apply_patch``
  instead of ``create``/``edit`` (:class:`CopilotHandler` speaks both);
- a project's hooks (``.github/hooks/*.json``, :func:`write_hooks`) load
  only in a trusted folder, and an untrusted folder's hooks are skipped
  without a word: ``COPILOT_ALLOW_ALL=true`` (exactly ``true``) trusts the
  working directory for the run, as does ``--trust-folder``, and
  ``trustedFolders`` in ``~/.copilot/config.json`` for good. The user's
  hooks (``~/.copilot/hooks/*.json``, or ``"hooks"`` in
  ``~/.copilot/settings.json``) need no trust;
- ``--allow-all-tools`` lets tools run unasked, but a command naming a path
  outside the project (the venv's python) is still refused for want of a
  user to ask: :func:`run_copilot` passes ``--allow-all`` (tools, paths and
  URLs);
- each new home unpacks Copilot's bundled package (about 200 MB, 5 to 20 s)
  into its cache; ``COPILOT_PKG_CACHE_HOME`` points every run at one shared
  copy (:data:`PACKAGE_CACHE`).

``python -m pytest`` in the agent's shell is this repository's venv (its
``bin`` first on ``PATH``), with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` (the
venv's plugins take about 3 s to load, every run) and
``PYTHONDONTWRITEBYTECODE=1``: two fixes of the same length written within
one second would otherwise be tested against the first one's stale
``__pycache__``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.agents.responses import ResponsesHandler, custom_call, function_call
from tests.agents.script import Shell, Write

COPILOT = Path(__file__).resolve().parents[2] / ".agents/node_modules/.bin/copilot"
MODEL = "gpt-4.1"
EVENTS = (
    "sessionStart",
    "userPromptSubmitted",
    "preToolUse",
    "permissionRequest",
    "postToolUse",
    "postToolUseFailure",
    "agentStop",
    "sessionEnd",
    "errorOccurred",
)
"""Copilot's hook events by their camelCase names, which select its own
payload format (``toolName``, ``toolArgs``, ``toolResult``). The PascalCase
names (``PreToolUse``, ``Stop`` …) select the VS Code compatible one
(``tool_name``, ``tool_input``, ``tool_result``, and the tool names
``Bash``, ``Edit``, ``Write``)."""

PACKAGE_CACHE = Path(tempfile.gettempdir()) / "devs-tests-copilot-package"
"""Where every run's Copilot finds its unpacked package (``pkg/`` inside)."""

WORKDIR = re.compile(r"^\* Current working directory: (.+)$", re.MULTILINE)
"""The line of Copilot's instructions that names the session's folder."""


class CopilotHandler(ResponsesHandler):
    """Copilot's tools: a shell step is ``bash``; a write is ``create`` for a
    new file and ``edit`` of the whole text for one that exists (the model
    ``gpt-4.1``), else ``apply_patch`` (the ``gpt-5`` family), whose
    ``Delete File`` then ``Add File`` replaces a file that exists (Copilot's
    ``Add File`` alone refuses one)."""

    def call_for(self, step: Shell | Write, tools: Sequence[str]) -> dict[str, Any]:
        if isinstance(step, Shell):
            arguments = {"command": step.command, "description": "Run a command"}
            return function_call("bash", arguments)
        path = self.absolute(step.path)
        if "create" in tools and "edit" in tools:
            if path.is_file():
                old = path.read_text()
                arguments = {"path": str(path), "old_str": old, "new_str": step.content}
                return function_call("edit", arguments)
            return function_call(
                "create", {"path": str(path), "file_text": step.content}
            )
        lines = "".join(f"+{line}\n" for line in step.content.splitlines())
        delete = f"*** Delete File: {path}\n" if path.is_file() else ""
        patch = f"*** Begin Patch\n{delete}*** Add File: {path}\n{lines}*** End Patch\n"
        return custom_call("apply_patch", patch)

    def absolute(self, path: str) -> Path:
        """``path`` in the session's working directory, which Copilot names
        in its instructions (Copilot's file tools want absolute paths)."""
        given = Path(path)
        if given.is_absolute():
            return given
        instructions = self.current.get("instructions")
        found = WORKDIR.search(instructions) if isinstance(instructions, str) else None
        return Path(found.group(1).strip()) / given if found else given


def hooks_config(
    command: str, *, events: Sequence[str] = EVENTS, timeout: int = 30
) -> dict[str, Any]:
    """A hooks file's content (``.github/hooks/*.json`` of a project, or
    ``~/.copilot/hooks/*.json``): ``command`` run on each of ``events``, for
    every tool, with ``{event}`` in it replaced by the event's name. A
    camelCase event's payload does not name its event (only
    ``permissionRequest`` has ``hookName``), and no variable of the hook's
    environment does either: ``{event}`` tells the command which it is."""
    return {
        "version": 1,
        "hooks": {
            event: [
                {
                    "type": "command",
                    "bash": command.replace("{event}", event),
                    "timeoutSec": timeout,
                }
            ]
            for event in events
        },
    }


def write_hooks(
    project: Path,
    command: str,
    *,
    events: Sequence[str] = EVENTS,
    timeout: int = 30,
    name: str = "devs-recovery.json",
) -> Path:
    """Write ``project/.github/hooks/NAME`` running ``command`` on each of
    ``events`` (a folder Copilot must trust: :func:`environment` does)."""
    folder = project / ".github" / "hooks"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    config = hooks_config(command, events=events, timeout=timeout)
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def write_config(home: Path, *, trusted: Sequence[Path] = ()) -> Path:
    """Write ``home/.copilot/config.json`` with each of ``trusted`` a trusted
    folder (``trustedFolders``, which Copilot keeps across runs); the
    fake's address is in the environment, not here."""
    folder = home / ".copilot"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps({"trustedFolders": [str(p) for p in trusted]}) + "\n")
    return path


def environment(
    home: Path,
    url: str,
    *,
    model: str = MODEL,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The process environment of a run against the fake at ``url``: a clean
    one (no token or ``COPILOT_*`` setting of the caller leaks in), every
    config and state folder inside ``home``, the working directory trusted
    and every tool allowed (``COPILOT_ALLOW_ALL=true``); ``env`` last."""
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join([venv_bin, os.environ.get("PATH", os.defpath)])
    return {
        "PATH": path,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "TERM": "dumb",
        "NO_COLOR": "1",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "COPILOT_PKG_CACHE_HOME": str(PACKAGE_CACHE),
        "COPILOT_AUTO_UPDATE": "false",
        "COPILOT_OFFLINE": "true",
        "COPILOT_ALLOW_ALL": "true",
        "COPILOT_PROVIDER_BASE_URL": url + "/v1",
        "COPILOT_PROVIDER_TYPE": "openai",
        "COPILOT_PROVIDER_WIRE_API": "responses",
        "COPILOT_PROVIDER_API_KEY": "fake",
        "COPILOT_MODEL": model,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        **(env or {}),
    }


def run_copilot(
    project: Path,
    prompt: str,
    home: Path,
    url: str,
    *,
    model: str = MODEL,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    resume: str | None = None,
    timeout: int = 180,
) -> subprocess.CompletedProcess[str]:
    """``copilot -p PROMPT --allow-all`` once in ``project``, ``args`` added
    (``--output-format json``, ``-s`` …); with ``resume``, the session of
    that id (``"last"``: the newest, ``--continue``) goes on, its history
    carried over and ``prompt`` its next message.

    stdout is the transcript (each tool, its output, the stop reasons a hook
    gave, the final message; JSONL events with ``--output-format json``);
    stderr ends with the run's summary and ``copilot --resume=ID``. A prompt
    a hook refused is ``! REASON`` on stderr and exit code 1."""
    session: list[str] = []
    if resume == "last":
        session = ["--continue"]
    elif resume:
        session = [f"--resume={resume}"]
    command = [
        str(COPILOT),
        *session,
        "-p",
        prompt,
        "--allow-all",
        "--no-auto-update",
        *args,
    ]
    # Copilot's npm loader runs the native binary as its child: on a timeout
    # the whole process group goes, not the loader alone.
    with subprocess.Popen(
        command,
        cwd=project,
        env=environment(home, url, model=model, env=env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            stderr += f"\n(killed after {timeout} s)"
        return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def session_id(completed: subprocess.CompletedProcess[str]) -> str | None:
    """The id of the run's session, from the ``copilot --resume=ID`` line
    Copilot prints at its end (``None`` in silent or JSON mode)."""
    found = re.search(r"copilot --resume=([0-9a-f-]{36})", completed.stderr)
    return found.group(1) if found else None
