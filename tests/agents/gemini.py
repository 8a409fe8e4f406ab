"""A fake Gemini API for the real Gemini CLI, and how to run the CLI on it.

Gemini CLI (``gemini``, pinned 0.61.0 under ``.agents/``) with API-key auth
(``security.auth.selectedType: "gemini-api-key"`` and ``GEMINI_API_KEY``)
calls ``GOOGLE_GEMINI_BASE_URL`` (plain http is allowed for 127.0.0.1). With
the model named on the command line (no model router) and the settings of
:func:`configure`, the only requests it makes, seen under ``strace`` in a
network namespace that had nothing but loopback, are:

- ``POST /v1beta/models/MODEL:streamGenerateContent?alt=sse``: each turn of
  the agent's loop (``tools`` offered); answered with one SSE ``data:`` chunk:
  a ``functionCall`` part for :class:`~tests.agents.script.Shell`
  (``run_shell_command``) and :class:`~tests.agents.script.Write`
  (``write_file``), text for :class:`~tests.agents.script.Say`,
  ``finishReason: STOP`` and usage numbers.

For the side requests other settings could bring (history compression, the
loop detector, the model router) the fake also answers
``:generateContent`` (text, or ``{}`` where JSON is asked for),
``:countTokens`` (``{"totalTokens": 100}``) and any other path (``{}``).

A request's step is the number of distinct ``functionResponse`` ids in its
``contents`` (the tool results so far, :class:`~tests.agents.script.Script`):
a session continued with ``--resume`` replays some results twice.

The project's hooks (``.gemini/settings.json``) load only in a trusted
folder; headless, an untrusted folder ends the run (exit code 55) before any
request. :func:`configure` trusts it with ``GEMINI_CLI_TRUST_WORKSPACE=true``;
``--skip-trust`` runs the CLI but does NOT load the project's hooks.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.agents.script import Handler, Say, Shell, Step, Write

REPO = Path(__file__).resolve().parents[2]
GEMINI = REPO / ".agents" / "node_modules" / ".bin" / "gemini"
MODEL = "gemini-2.5-flash"
"""The model named on the command line (so no router asks on the side)."""

EVENTS = (
    "SessionStart",
    "BeforeAgent",
    "BeforeTool",
    "AfterTool",
    "AfterAgent",
    "SessionEnd",
)
"""The hook events :func:`hook_settings` installs a command for."""


def tool_results(body: Mapping[str, Any]) -> int:
    """How many tool results (``functionResponse`` parts) a request carries,
    each counted once: a session resumed with ``--resume`` replays some
    results twice (the same ``id``), and those are one result."""
    seen: set[str] = set()
    anonymous = 0
    contents = body.get("contents")
    for content in contents if isinstance(contents, list) else []:
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else []:
            result = part.get("functionResponse") if isinstance(part, dict) else None
            if not isinstance(result, dict):
                continue
            ident = result.get("id")
            if isinstance(ident, str) and ident:
                seen.add(ident)
            else:
                anonymous += 1
    return len(seen) + anonymous


def offers_tools(body: Mapping[str, Any]) -> bool:
    """Whether a request offers the model function declarations."""
    tools = body.get("tools")
    return isinstance(tools, list) and any(
        isinstance(tool, dict) and tool.get("functionDeclarations") for tool in tools
    )


def wants_json(body: Mapping[str, Any]) -> bool:
    """Whether a side request asks for a JSON answer."""
    config = body.get("generationConfig")
    return (
        isinstance(config, dict)
        and config.get("responseMimeType") == "application/json"
    )


def part_for(step: Step, index: int) -> dict[str, Any]:
    """The response part that makes the CLI take ``step`` (``index``, the
    step's number, makes the call's id)."""
    if isinstance(step, Shell):
        call = {"name": "run_shell_command", "args": {"command": step.command}}
        return {"functionCall": {"id": f"call-{index}", **call}}
    if isinstance(step, Write):
        args = {"file_path": step.path, "content": step.content}
        call = {"name": "write_file", "args": args}
        return {"functionCall": {"id": f"call-{index}", **call}}
    return {"text": step.text}


def response(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One finished ``GenerateContentResponse`` holding ``parts``."""
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": list(parts)},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 10,
            "candidatesTokenCount": 5,
            "totalTokenCount": 15,
        },
        "modelVersion": MODEL,
    }


class GeminiHandler(Handler):
    """The Gemini API (``v1beta``) as Gemini CLI calls it."""

    def do_POST(self) -> None:  # noqa: N802 (the http.server name)
        body = self.body()
        path = self.path
        if ":countTokens" in path:
            self.send_json({"totalTokens": 100})
            return
        if ":streamGenerateContent" not in path and ":generateContent" not in path:
            self.send_json({})
            return
        results = tool_results(body)
        tools = offers_tools(body)
        step = self.server.script.answer(path, body, results, tools)
        if not tools and wants_json(body):
            step = Say("{}")
        answer = response([part_for(step, results)])
        if ":streamGenerateContent" in path:
            self.send_events([(None, answer)])
        else:
            self.send_json(answer)

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        self.send_json({})


USER_SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {
        "enableAutoUpdate": False,
        "enableAutoUpdateNotification": False,
    },
    "ide": {"enabled": False, "hasSeenNudge": True},
}
"""User settings that keep the CLI on the fake: API-key auth, and no usage
statistics (Clearcut), telemetry, update check or IDE integration."""


def hook_settings(
    command: str, events: Sequence[str] = EVENTS, timeout_ms: int = 30_000
) -> dict[str, Any]:
    """The ``hooks`` object of a settings file that runs ``command`` on each
    of ``events`` (every tool for the tool events). Gemini CLI reads a hook's
    ``timeout`` in milliseconds: Claude Code's ``30`` would be 30 ms, and
    every hook would time out (and be ignored)."""
    hooks: dict[str, Any] = {}
    for event in events:
        entry: dict[str, Any] = {
            "hooks": [
                {
                    "name": f"hook-{event}",
                    "type": "command",
                    "command": command,
                    "timeout": timeout_ms,
                }
            ]
        }
        if event in ("BeforeTool", "AfterTool"):
            entry["matcher"] = "*"
        hooks[event] = [entry]
    return hooks


def configure(
    home: Path,
    project: Path,
    url: str,
    hooks: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Write the CLI's user settings in ``home/.gemini`` and, given ``hooks``
    (a settings file's ``hooks`` object, :func:`hook_settings`), the
    project's ``project/.gemini/settings.json``; return the environment that
    points the CLI at the fake at ``url`` and trusts the project folder."""
    user = home / ".gemini"
    user.mkdir(parents=True, exist_ok=True)
    (user / "settings.json").write_text(json.dumps(USER_SETTINGS, indent=2))
    if hooks is not None:
        folder = project / ".gemini"
        folder.mkdir(parents=True, exist_ok=True)
        settings = json.dumps({"hooks": dict(hooks)}, indent=2)
        (folder / "settings.json").write_text(settings)
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "GEMINI_CLI_HOME": str(home),
        "GEMINI_API_KEY": "dummy",
        "GOOGLE_GEMINI_BASE_URL": url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "NO_COLOR": "1",
    }


def descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (children, theirs, ...), read from
    ``/proc``: the shell tool runs each command in a process group of its
    own, which killing the CLI's group does not reach."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1].isdigit():
            parents[int(entry.name)] = int(fields[1])
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        children = [child for child, of in parents.items() if of == parent]
        found.extend(children)
        todo.extend(children)
    return found


def kill_tree(pid: int) -> None:
    """Kill ``pid``, its process group and every process under it."""
    for victim in descendants(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def run(
    cwd: Path,
    prompt: str,
    env: Mapping[str, str],
    *,
    output_format: str = "text",
    args: Sequence[str] = (),
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """Run the CLI once, headless (``--prompt``), in ``cwd`` with every tool
    allowed (``--yolo``); ``args`` go before the prompt (``--resume latest``
    continues the folder's last session). The environment is this process's
    without its ``GEMINI_*``/``GOOGLE_*`` variables, then ``env``. On timeout
    the CLI and everything under it are killed (it runs itself again as a
    child process, and each shell command in a process group of its own)
    and :class:`subprocess.TimeoutExpired` is raised."""
    command = [
        str(GEMINI),
        "--model",
        MODEL,
        "--yolo",
        "--output-format",
        output_format,
        *args,
        "--prompt",
        prompt,
    ]
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GEMINI_", "GOOGLE_"))
    }
    with subprocess.Popen(
        command,
        cwd=cwd,
        env={**inherited, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(process.pid)
            process.communicate()
            raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
