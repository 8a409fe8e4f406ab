"""GitHub Copilot CLI's hooks, in their VS Code compatible format.

Hooks reference:
https://docs.github.com/en/copilot/reference/copilot-cli-reference/cli-hooks-reference
(docs/agents.md has what the real binary, 1.0.102, honours, measured by
tests/agents).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from devs.adapters.hooks.breaker import Answer, EventKind, Seen, answer_json
from devs.adapters.hooks.codex import patch_edits
from devs.adapters.hooks.dialect import Agent, judged_by_output, mapping_in, text_of
from devs.adapters.hooks.install import Layout
from devs.adapters.hooks.usage import CopilotEvents

COPILOT_EVENTS: dict[str, EventKind] = {
    "SessionStart": "session_start",
    "UserPromptSubmit": "prompt",
    "PreToolUse": "pre_tool",
    "PermissionRequest": "pre_tool",
    "PostToolUse": "post_tool",
    "Stop": "stop",
}
"""The events the breaker acts on, by their PascalCase names (which select
the VS Code compatible payload: ``hook_event_name``, ``tool_name``,
``tool_input``, ``tool_result``); any other event is answered with nothing."""

PERMISSION = "PermissionRequest"
PERMISSION_HOOK = "permissionRequest"
"""``hookName`` of the permission event, whose payload is Copilot's own
(camelCase: ``toolName``, ``toolInput``) however the hooks file names it."""

SHELL_TOOLS = frozenset({"Bash", "bash"})
EDIT_TOOLS = frozenset({"Edit", "Write", "edit", "create", "apply_patch"})
"""The tools that ask for permission (with shell ones): while the task is
stopped, their PreToolUse is left to PermissionRequest, which can end the
turn."""

SHELL_END = re.compile(
    r"\n?<shellId: \d{1,10} completed with exit code (-?\d{1,10})>\s*$"
)
"""The last line of a shell command's output, the only place Copilot gives
its exit code (a failed command is still ``result_type: success``)."""


def shell_result(output: str) -> tuple[str, int | None]:
    """A shell tool's output without its last line, and the exit code there."""
    found = SHELL_END.search(output[-200:])
    if found is None:
        return output, None
    return output[: len(output) - len(found.group(0))], int(found.group(1))


class Copilot:
    """GitHub Copilot CLI's hooks (:data:`COPILOT_EVENTS`): JSON on stdin,
    JSON on stdout with exit code 0.

    - A hook that exits non-zero makes Copilot refuse the tool call: every
      answer here exits 0, an unknown or unreadable event is answered with
      nothing.
    - Nothing halts it but a denial on ``PermissionRequest`` with
      ``interrupt: true``, which ends the turn (no further model request);
      that event does not fire after a PreToolUse denial, nor for the tools
      that only read. So while the task is stopped, PreToolUse lets a shell
      or editing tool through to PermissionRequest, which refuses it and
      ends the turn, and refuses any other tool itself.
    - A shell command's exit code is only the last line of its output
      (:func:`shell_result`).
    """

    agent = "copilot"

    def read(self, event: Mapping[str, Any]) -> Seen:
        seen = self._read(event)
        session = event.get("sessionId", event.get("session_id"))
        if isinstance(session, str) and session:
            return dataclasses.replace(seen, session=session[:200])
        return seen

    def _read(self, event: Mapping[str, Any]) -> Seen:
        if event.get("hookName") == PERMISSION_HOOK:
            return self._permission(event)
        name = event.get("hook_event_name")
        if not isinstance(name, str) or not name:
            # Copilot denies a tool whose hook failed: an event not read
            # is answered with nothing.
            return Seen(kind="other", name="(unknown)")
        kind = COPILOT_EVENTS.get(name, "other")
        if name == PERMISSION:
            return self._permission(event)
        cwd = event.get("cwd") if isinstance(event.get("cwd"), str) else None
        tool = event.get("tool_name")
        raw_input = event.get("tool_input")
        tool_input = raw_input if isinstance(raw_input, Mapping) else {}
        command = self.command(tool, tool_input)
        edits: tuple[tuple[str, str], ...] = ()
        if kind in ("pre_tool", "post_tool") and tool in EDIT_TOOLS:
            if isinstance(raw_input, str):  # apply_patch: the patch itself
                edits = patch_edits(raw_input)
            else:
                path = text_of(tool_input.get("path"))
                text = tool_input.get("new_str", tool_input.get("file_text"))
                edits = ((path, text_of(text)),)
        if kind == "post_tool" and command is not None:
            text = text_of(mapping_in(event, "tool_result").get("text_result_for_llm"))
            output, code = shell_result(text)
            failed = code not in (None, 0)
            unjudged = False
            if code is None:
                judged = judged_by_output(output)
                unjudged = judged is None
                if judged is not None:
                    failed, code = judged
                    if failed and code in (None, 0):
                        code = 1
            return Seen(
                kind=kind,
                name=name,
                cwd=cwd,
                command=command,
                exit_code=code,
                failed=failed,
                output=output,
                unjudged=unjudged,
            )
        return Seen(
            kind=kind,
            name=name,
            cwd=cwd,
            command=command,
            edits=edits,
            stop_hook_active=event.get("stop_hook_active") is True,
        )

    def _permission(self, event: Mapping[str, Any]) -> Seen:
        cwd = event.get("cwd") if isinstance(event.get("cwd"), str) else None
        tool = event.get("toolName")
        tool_input = mapping_in(event, "toolInput")
        command = self.command(tool, tool_input)
        edits: tuple[tuple[str, str], ...] = ()
        if command is None and "file_path" in tool_input:
            diff = text_of(tool_input.get("diff"))
            added = "\n".join(
                line[1:]
                for line in diff.splitlines()
                if line.startswith("+") and not line.startswith("+++")
            )
            edits = ((text_of(tool_input.get("file_path")), added),)
        return Seen(
            kind="pre_tool", name=PERMISSION, cwd=cwd, command=command, edits=edits
        )

    def command(self, tool: Any, tool_input: Mapping[str, Any]) -> str | None:
        if tool in SHELL_TOOLS:
            command = tool_input.get("command")
            return command if isinstance(command, str) and command else None
        return None

    def write(self, seen: Seen, answer: Answer) -> tuple[str | None, int]:
        if answer.empty:
            return None, 0
        if seen.name == PERMISSION:
            if not answer.deny:
                return None, 0
            body: dict[str, Any] = {"behavior": "deny", "message": answer.deny}
            if answer.halt:
                body["interrupt"] = True  # the turn ends: no model request
            return answer_json(body), 0
        if seen.kind == "pre_tool":
            if not answer.deny:
                return None, 0
            stop_only = answer.halt is not None and answer.deny == answer.halt
            if stop_only and (seen.command is not None or seen.edits):
                # The task is stopped: PermissionRequest refuses this call
                # and ends the turn (it would not fire after a denial here).
                return None, 0
            return answer_json(
                {"permissionDecision": "deny", "permissionDecisionReason": answer.deny}
            ), 0
        if seen.kind == "prompt" and answer.halt:
            # The model is not asked; "! REASON" on stderr, exit code 1.
            return answer_json({"decision": "block", "reason": answer.halt}), 0
        if seen.kind == "stop" and answer.block:
            return answer_json({"decision": "block", "reason": answer.block}), 0
        context = answer.context or (answer.halt if seen.kind == "post_tool" else None)
        if context and seen.kind in ("session_start", "post_tool"):
            # PostToolUse: appended to the tool's output for the model. A
            # halt there is said so; the turn ends at the next tool call.
            return answer_json({"additionalContext": context}), 0
        return None, 0


COPILOT = Layout(
    agent="copilot",
    project_file=".github/hooks/devs-recovery.json",
    user_file=".copilot/hooks/devs-recovery.json",
    events=(
        ("SessionStart", None),
        ("UserPromptSubmit", None),
        ("PreToolUse", None),
        ("PermissionRequest", None),
        ("PostToolUse", None),
        ("Stop", None),
    ),
    flat=True,
    command_key="bash",
    timeout_key="timeoutSec",
    header=(("version", 1),),
    own_file=True,
)


def trust(
    settings: Path, project: Path | None, environ: Mapping[str, str]
) -> str | None:
    """Whether Copilot CLI will load a project's hooks: only in a trusted
    folder (``trustedFolders`` of ``~/.copilot/config.json``, the folder or
    one above it), or with ``COPILOT_ALLOW_ALL=true`` (exactly ``true``) or
    ``--trust-folder`` for one run; the user's hooks need no trust."""
    if project is None or environ.get("COPILOT_ALLOW_ALL") == "true":
        return None
    home = Path(environ.get("HOME", "~")).expanduser()
    here = project.resolve()
    try:
        config = orjson.loads((home / ".copilot" / "config.json").read_bytes())
        folders = config.get("trustedFolders") if isinstance(config, dict) else None
    except (OSError, orjson.JSONDecodeError):
        folders = None
    for folder in folders if isinstance(folders, list) else []:
        root = Path(str(folder))
        if here == root or root in here.parents:
            return None
    return (
        f"{here} is not a trusted folder for Copilot CLI, which then skips the "
        "project's hooks without a word: trust the folder when `copilot` asks "
        "(or run it with --trust-folder, or COPILOT_ALLOW_ALL=true)"
    )


AGENT = Agent(
    name="copilot",
    title="GitHub Copilot CLI",
    dialect=Copilot(),
    layout=COPILOT,
    docs="https://docs.github.com/en/copilot/reference/copilot-cli-reference/cli-hooks-reference",
    trust=trust,
    usage=CopilotEvents(),
)
