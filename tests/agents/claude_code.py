"""A fake Anthropic Messages API for the real Claude Code binary, the files
and environment a headless run needs, and one headless run.

Claude Code (``claude -p``, 2.1.332) sends every model request to
``ANTHROPIC_BASE_URL``, and :class:`ClaudeHandler` answers it on loopback:

- ``POST /v1/messages?beta=true``: a turn of the agent's loop (``tools``
  offered) is answered with the script's step, streamed as server-sent
  events (the loop always asks ``stream: true``; a non-streaming request
  gets the same message as one JSON body). A request without tools is
  answered with text (none was seen with :func:`agent_env`'s environment:
  no title, topic or summary request on the small model).
- ``POST /v1/messages/count_tokens``: ``{"input_tokens": 100}`` (not seen).
- any other ``GET``/``POST``/``HEAD``: ``{}`` with 200 (none was seen; kept
  so that a stray probe can neither hang nor fail a run).

With ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` and telemetry, error
reporting and the updater off, a run of nine model turns made exactly nine
``POST /v1/messages?beta=true`` and nothing else.

A step's tool call is Claude Code's own tool: ``Bash`` (``command``,
``description``) for :class:`Shell`, ``Write`` (``file_path``, absolute,
``content``) for :class:`Write`; the path is made absolute with the working
directory Claude Code's prompt names. ``Write`` over a file that exists but
was never read in the session is accepted by 2.1.332 (no "read it first"
refusal), so no ``Read`` is needed before it.

As root, ``--dangerously-skip-permissions`` is refused ("cannot be used with
root/sudo privileges") unless ``IS_SANDBOX=1``; ``ANTHROPIC_API_KEY`` set to
any value means no login is attempted; a project's ``.claude/settings.json``
hooks load in ``-p`` mode without a trust prompt.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.agents.script import Handler, Say, Shell, Step, Write

CLAUDE = Path(__file__).resolve().parents[2] / ".agents/node_modules/.bin/claude"
"""The pinned binary (``.agents``: the ``@anthropic-ai/claude-code`` package)."""

WORKDIR = re.compile(r"Primary working directory: ([^\n]+)")
"""Where Claude Code's prompt names the session's working directory."""

TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"})
"""The events whose hooks take a tool ``matcher``."""

EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "Stop",
    "SessionEnd",
)
"""The events a capture hook is installed on (:func:`hooks_for`)."""


def _blocks(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, Mapping)]


def _messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    return [m for m in messages if isinstance(m, Mapping)]


def tool_results(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The conversation's tool results, in order (a denied call has one too)."""
    return [
        block
        for message in _messages(body)
        if message.get("role") == "user"
        for block in _blocks(message)
        if block.get("type") == "tool_result"
    ]


def text_of(value: Any) -> str:
    """All the text of a system prompt or of a message's content."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(text_of(item) for item in value)
    if isinstance(value, Mapping):
        return text_of(value.get("text", value.get("content", "")))
    return ""


def workdir(body: Mapping[str, Any]) -> str | None:
    """The working directory Claude Code's prompt names (in ``system`` or,
    in 2.1.332, in a ``system`` message of ``messages``)."""
    texts = [text_of(body.get("system"))]
    texts += [text_of(m.get("content")) for m in _messages(body)]
    for text in texts:
        found = WORKDIR.search(text)
        if found is not None:
            return found.group(1).strip()
    return None


def tool_calls(step: Step, body: Mapping[str, Any], turn: int) -> list[dict[str, Any]]:
    """The ``tool_use`` blocks of a step (none for :class:`Say`); ``turn``
    makes the ids unique within a conversation and stable across retries."""
    if isinstance(step, Shell):
        return [
            {
                "type": "tool_use",
                "id": f"toolu_{turn:02d}_bash",
                "name": "Bash",
                "input": {"command": step.command, "description": "Run a command"},
            }
        ]
    if isinstance(step, Write):
        base = workdir(body) or os.getcwd()
        return [
            {
                "type": "tool_use",
                "id": f"toolu_{turn:02d}_write",
                "name": "Write",
                "input": {
                    "file_path": os.path.join(base, step.path),
                    "content": step.content,
                },
            }
        ]
    return []


MESSAGES = itertools.count(1)


def message(step: Step, body: Mapping[str, Any], turn: int) -> dict[str, Any]:
    """The whole assistant message for a step."""
    calls = tool_calls(step, body, turn)
    content: list[dict[str, Any]] = list(calls)
    if not calls:
        text = step.text if isinstance(step, Say) else ""
        content = [{"type": "text", "text": text}]
    return {
        # Unique, as the API's are: a message's usage counts once by its id.
        "id": f"msg_fake_{turn:02d}_{next(MESSAGES):04d}",
        "type": "message",
        "role": "assistant",
        "model": str(body.get("model") or "claude-fake"),
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 10},
    }


def stream_events(whole: Mapping[str, Any]) -> list[tuple[str | None, Any]]:
    """A message as the Messages API streams it: ``message_start``, each
    block's start, one delta and stop, ``message_delta``, ``message_stop``."""
    start = {**whole, "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": 10, "output_tokens": 1}
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(whole["content"]):
        if block["type"] == "text":
            head: dict[str, Any] = {"type": "text", "text": ""}
            delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
        else:
            head = {**block, "input": {}}
            delta = {
                "type": "input_json_delta",
                "partial_json": json.dumps(block["input"]),
            }
        events += [
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": head},
            ),
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 10},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


class ClaudeHandler(Handler):
    """The Anthropic Messages API, as far as Claude Code uses it."""

    def do_POST(self) -> None:  # noqa: N802 (the http.server name)
        body = self.body()
        path = self.path.split("?", 1)[0]
        if path.endswith("/count_tokens"):
            self.send_json({"input_tokens": 100})
            return
        if not path.endswith("/v1/messages"):
            self.send_json({})
            return
        results = len(tool_results(body))
        step = self.server.script.answer(
            self.path, body, results, bool(body.get("tools"))
        )
        whole = message(step, body, results)
        if body.get("stream"):
            self.send_events(stream_events(whole))
        else:
            self.send_json(whole)

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        self.send_json({})

    def do_HEAD(self) -> None:  # noqa: N802 (the http.server name)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def agent_env(
    home: Path, url: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a headless run against the fake at ``url``: a
    dummy key (no login), a private HOME and config folder, no telemetry,
    error reports, updater or other traffic, and ``IS_SANDBOX=1`` so that
    root may skip permissions; ``extra`` last (a hook's own settings)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "sk-ant-fake-key-for-tests",
        "IS_SANDBOX": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    env.update(extra or {})
    return env


def hooks_for(
    command: str, events: Iterable[str] = EVENTS, timeout: int = 30
) -> dict[str, Any]:
    """A settings file's ``hooks`` that run ``command`` on each of ``events``
    (every tool, for the tool events)."""
    hooks: dict[str, Any] = {}
    for event in events:
        entry: dict[str, Any] = {
            "hooks": [{"type": "command", "command": command, "timeout": timeout}]
        }
        if event in TOOL_EVENTS:
            entry = {"matcher": "*", **entry}
        hooks[event] = [entry]
    return hooks


def write_config(
    home: Path,
    project: Path,
    url: str,
    hooks: Mapping[str, Any] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Write what a run needs and return its environment
    (:func:`agent_env`): the user's config with onboarding done (in
    ``CLAUDE_CONFIG_DIR``), and the project's ``.claude/settings.json`` with
    ``hooks`` (a settings file's ``hooks`` object, e.g. :func:`hooks_for`).
    An existing settings file (``devs hooks install``'s) is kept when
    ``hooks`` is ``None``."""
    config = home / ".claude"
    config.mkdir(parents=True, exist_ok=True)
    (config / ".claude.json").write_text(
        json.dumps({"hasCompletedOnboarding": True, "numStartups": 1})
    )
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    if hooks is not None or not settings.exists():
        settings.write_text(json.dumps({"hooks": dict(hooks or {})}, indent=2))
    return agent_env(home, url, extra_env)


def run_claude(
    project: Path,
    prompt: str,
    env: Mapping[str, str],
    args: Sequence[str] = ("--output-format", "text"),
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """One headless run (``claude -p PROMPT --dangerously-skip-permissions
    ARGS``) in ``project`` with ``env``, killed after ``timeout`` seconds
    (``--continue`` in ``args`` goes on with the folder's last session)."""
    command = [
        "timeout",
        str(int(timeout)),
        str(CLAUDE),
        "-p",
        prompt,
        "--dangerously-skip-permissions",
        *args,
    ]
    return subprocess.run(
        command,
        cwd=project,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout + 10,
        check=False,
    )
