"""Codex CLI (``codex exec``) against the fake Responses API of
:mod:`tests.agents.responses`, for tests that run the real binary
(``.agents/node_modules/.bin/codex``, 0.171.0).

What Codex needs, as found on 0.171.0:

- a model provider in ``$CODEX_HOME/config.toml`` with ``base_url`` on the
  fake, ``wire_api = "responses"`` and ``env_key`` naming a variable that holds
  any key (:func:`write_config`); Codex makes no other request of it (no model
  list, no telemetry to the provider: only ``POST /v1/responses``);
- the model ``gpt-5.5``, one of the models Codex's bundled catalog knows: it
  is offered ``exec_command`` (the shell) and the freeform ``apply_patch``
  tool (an unknown model gets fallback metadata: no ``apply_patch`` tool, and
  a warning);
- for a project's ``.codex/hooks.json``, two trusts: the project's
  (``[projects."DIR"] trust_level = "trusted"``, which ``codex exec --trust``
  writes; ``write_config(trusted=…)``) and each hook's
  (``[hooks.state."KEY"] trusted_hash = "sha256:…"``, the hash Codex computes
  for the hook's definition: :func:`trust_hooks`), for which
  ``--dangerously-bypass-hook-trust`` on the command line stands in (not for
  the project's). A hook not trusted is skipped without a word; a hook in
  ``$CODEX_HOME/hooks.json`` needs only its own trust;
- no feature flag: ``hooks`` is on by default.

``CODEX_HOME`` under ``/tmp`` makes Codex print a warning (it will not put
its helper links on ``PATH`` there); nothing depends on them.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.agents.responses import ResponsesHandler, custom_call, function_call
from tests.agents.script import Shell, Write

CODEX = Path(__file__).resolve().parents[2] / ".agents/node_modules/.bin/codex"
MODEL = "gpt-5.5"
KEY_ENV = "DEVS_FAKE_OPENAI_KEY"
BLACKHOLE = "http://127.0.0.1:9"
"""A proxy nothing listens on: any request Codex makes past the fake is
refused on this machine rather than sent out."""
EVENTS = ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop")
PROXY_VARIABLES = (
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "https_proxy",
    "http_proxy",
    "all_proxy",
)
TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse", "PermissionRequest"})


def patch_text(path: str, content: str) -> str:
    """An ``apply_patch`` patch that writes ``path`` whole: ``Add File``,
    which Codex also accepts for a file that exists (it replaces it)."""
    lines = "".join(f"+{line}\n" for line in content.splitlines())
    return f"*** Begin Patch\n*** Add File: {path}\n{lines}*** End Patch"


def patch_command(path: str, content: str) -> str:
    """The shell command a model writes to patch a file from ``exec_command``
    (``apply_patch`` with a heredoc; Codex runs it as its own patch)."""
    return f"apply_patch <<'EOF'\n{patch_text(path, content)}\nEOF\n"


class CodexHandler(ResponsesHandler):
    """Codex's tools: a shell step is ``exec_command`` (else
    ``shell_command``, else ``shell``); a write is the ``apply_patch`` tool
    (freeform, the only kind 0.171.0 has: its model catalog refuses
    ``apply_patch_tool_type = "function"``; a function tool would get
    ``{"input": patch}``), else ``apply_patch`` run in the shell."""

    yield_time_ms = 30_000
    """How long ``exec_command`` waits for the command before it answers
    "still running" (Codex's default is 10 s and its ceiling 30 s). A command
    still running then gets no PostToolUse, so a slow machine must not turn
    a test run into one."""

    def call_for(self, step: Shell | Write, tools: Sequence[str]) -> dict[str, Any]:
        if isinstance(step, Write):
            if "apply_patch" in tools:
                text = patch_text(step.path, step.content)
                if self.freeform(self.tools_offered(), "apply_patch"):
                    return custom_call("apply_patch", text)
                return function_call("apply_patch", {"input": text})
            step = Shell(patch_command(step.path, step.content))
        if "exec_command" in tools:
            arguments = {"cmd": step.command, "yield_time_ms": self.yield_time_ms}
            return function_call("exec_command", arguments)
        if "shell_command" in tools:
            return function_call("shell_command", {"command": step.command})
        return function_call("shell", {"command": ["bash", "-lc", step.command]})

    def tools_offered(self) -> list[dict[str, Any]]:
        """The tool definitions of the request being answered."""
        tools = self.current.get("tools")
        return (
            [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
        )

    @staticmethod
    def freeform(tools: Sequence[Mapping[str, Any]], name: str) -> bool:
        """Whether the tool ``name`` is a freeform (``custom``) tool."""
        return any(t.get("name") == name and t.get("type") == "custom" for t in tools)


def write_config(
    home: Path,
    url: str,
    *,
    model: str = MODEL,
    trusted: Sequence[Path] = (),
    extra: str = "",
) -> Path:
    """Write ``home/.codex/config.toml``: the fake at ``url`` as the model
    provider, each of ``trusted`` a trusted project, then ``extra`` (TOML).

    The file is written anew, so hooks trusted before are untrusted again:
    call :func:`trust_hooks` after it. Analytics (``ab.chatgpt.com``) and
    plugins (``github.com``, ``api.github.com``, ``chatgpt.com``) are off:
    they are what Codex reaches out to on its own."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    lines = [
        f"model = {json.dumps(model)}",
        'model_provider = "fake"',
        "check_for_update_on_startup = false",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[features]",
        "plugins = false",
        "",
        "[model_providers.fake]",
        'name = "fake"',
        f"base_url = {json.dumps(url + '/v1')}",
        'wire_api = "responses"',
        f"env_key = {json.dumps(KEY_ENV)}",
    ]
    for project in trusted:
        lines += [
            "",
            f"[projects.{json.dumps(str(project))}]",
            'trust_level = "trusted"',
        ]
    config = codex_home / "config.toml"
    config.write_text("\n".join(lines) + "\n" + extra)
    return config


def write_hooks(
    folder: Path, command: str, *, events: Sequence[str] = EVENTS, timeout: int = 30
) -> Path:
    """Write ``folder/hooks.json`` (a project's ``.codex`` or ``CODEX_HOME``)
    running ``command`` on each of ``events``, every tool matched."""
    folder.mkdir(parents=True, exist_ok=True)
    handler = {"type": "command", "command": command, "timeout": timeout}
    hooks: dict[str, Any] = {}
    for event in events:
        group: dict[str, Any] = {"hooks": [handler]}
        if event in TOOL_EVENTS:
            group = {"matcher": "*", **group}
        hooks[event] = [group]
    path = folder / "hooks.json"
    path.write_text(json.dumps({"hooks": hooks}, indent=2) + "\n")
    return path


def environment(home: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The process environment of a Codex run whose home is ``home``: every
    config and state folder inside it, the fake's key set, and every proxy
    variable on :data:`BLACKHOLE` (loopback excepted), so that nothing but
    the fake is reached even if Codex tries."""
    return {
        **os.environ,
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        KEY_ENV: "fake",
        **{name: BLACKHOLE for name in PROXY_VARIABLES},
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        **(env or {}),
    }


class AppServer:
    """``codex app-server`` on stdio (JSON-RPC, a message a line): the API
    Codex's own ``/hooks`` screen uses to list and trust hooks."""

    def __init__(self, home: Path, cwd: Path, timeout: float = 60) -> None:
        self.timeout = timeout
        self.ids = 0
        self.process = subprocess.Popen(
            ["timeout", str(int(timeout)), str(CODEX), "app-server"],
            cwd=cwd,
            env=environment(home),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.call("initialize", {"clientInfo": {"name": "devs-tests", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "initialized"})

    def send(self, message: Mapping[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """The result of one request (``RuntimeError`` on an error answer)."""
        self.ids += 1
        self.send(
            {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 1)
            if not ready:
                continue
            line = self.process.stdout.readline()
            if not line:
                break
            message = json.loads(line)
            if message.get("id") != self.ids:
                continue  # a notification
            if "error" in message:
                raise RuntimeError(f"{method}: {message['error']}")
            return message.get("result")
        msg = f"codex app-server did not answer {method}"
        raise RuntimeError(msg)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def hook_list(home: Path, project: Path) -> list[dict[str, Any]]:
    """The hooks Codex finds for ``project`` (``hooks/list``): each with its
    ``key``, ``currentHash`` and ``trustStatus`` (``untrusted``,
    ``modified``, ``trusted`` or ``managed``)."""
    server = AppServer(home, project)
    try:
        result = server.call("hooks/list", {"cwds": [str(project)]})
    finally:
        server.close()
    return [hook for entry in result["data"] for hook in entry["hooks"]]


def trust_hooks(home: Path, project: Path) -> list[str]:
    """Trust every hook Codex finds for ``project`` as ``/hooks`` does: its
    current hash written as ``hooks.state."KEY".trusted_hash`` in
    ``$CODEX_HOME/config.toml`` (``config/batchWrite``). The keys trusted."""
    server = AppServer(home, project)
    try:
        result = server.call("hooks/list", {"cwds": [str(project)]})
        hooks = [hook for entry in result["data"] for hook in entry["hooks"]]
        pending = [h for h in hooks if h["trustStatus"] in ("untrusted", "modified")]
        if pending:
            edits = [
                {
                    "keyPath": f"hooks.state.{json.dumps(h['key'])}",
                    "value": {"trusted_hash": h["currentHash"]},
                    "mergeStrategy": "upsert",
                }
                for h in pending
            ]
            server.call("config/batchWrite", {"edits": edits})
    finally:
        server.close()
    return [h["key"] for h in pending]


def run_codex(
    project: Path,
    prompt: str,
    home: Path,
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    resume: bool = False,
    timeout: int = 180,
) -> subprocess.CompletedProcess[str]:
    """``codex exec`` once in ``project`` (``codex exec resume --last`` with
    ``resume``: the newest session goes on, ``prompt`` its next message),
    approvals and sandbox off, ``args`` added (``--json``,
    ``--dangerously-bypass-hook-trust`` …). stdout is the final message (the
    JSONL events with ``--json``); stderr is the run's log: the hooks run and
    how they ended, the commands, the patches."""
    command = [
        "timeout",
        str(timeout),
        str(CODEX),
        "exec",
        *(["resume", "--last"] if resume else []),
        "--dangerously-bypass-approvals-and-sandbox",
        *args,
        prompt,
    ]
    return subprocess.run(
        command,
        cwd=project,
        env=environment(home, env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout + 30,
        check=False,
    )
