"""Cursor's agent hooks: JSON on stdin; JSON on stdout with exit code 0.

Hooks reference: https://cursor.com/docs/agent/hooks (no Cursor binary runs
in this repository's tests: the events are the page's own examples,
tests/fixtures/hooks/cursor).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from devs.adapters.hooks.breaker import Answer, EventKind, Seen, answer_json
from devs.adapters.hooks.dialect import Agent, mapping_in, text_of
from devs.adapters.hooks.install import Layout

CURSOR_EVENTS: dict[str, EventKind] = {
    "sessionStart": "session_start",
    "beforeSubmitPrompt": "prompt",
    "preToolUse": "pre_tool",
    "postToolUse": "post_tool",
    "afterFileEdit": "post_tool",
    "stop": "stop",
}
"""The events the breaker acts on, by Cursor's names; any other event is
answered with nothing."""

SHELL_TOOLS = frozenset({"Shell"})


def shell_output(value: Any) -> tuple[str, int | None]:
    """A shell tool's output and exit code from ``tool_output`` (a JSON
    string: ``{"exitCode": 0, "stdout": ...}``)."""
    parsed: Any = value
    if isinstance(value, str):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value, None
    if not isinstance(parsed, Mapping):
        return text_of(parsed), None
    parts = [text_of(parsed.get(k)) for k in ("stdout", "stderr", "output")]
    code = parsed.get("exitCode", parsed.get("exit_code"))
    return "\n".join(p for p in parts if p), code if type(code) is int else None


class Cursor:
    """Cursor's hooks (:data:`CURSOR_EVENTS`).

    Nothing halts Cursor's agent: while the task is stopped, every tool call
    is refused (``permission: "deny"``, the reason said to the agent and to
    the user) and a prompt is not sent (``continue: false``). A shell
    command's result is its ``postToolUse`` (``tool_output`` holds the exit
    code; ``afterShellExecution`` does not); edits are ``afterFileEdit``'s.
    A red gate keeps the agent going with ``stop``'s ``followup_message``
    (the next user message)."""

    agent = "cursor"

    def read(self, event: Mapping[str, Any]) -> Seen:
        name = event.get("hook_event_name")
        if not isinstance(name, str) or not name:
            return Seen(kind="other", name="(unknown)")
        kind = CURSOR_EVENTS.get(name, "other")
        tool = event.get("tool_name")
        tool_input = mapping_in(event, "tool_input")
        cwd = self.cwd(event, tool_input)
        if name == "afterFileEdit":
            given = event.get("edits")
            items = given if isinstance(given, list) else []
            text = "\n".join(
                text_of(item.get("new_string"))
                for item in items
                if isinstance(item, Mapping)
            )
            path = text_of(event.get("file_path"))
            return Seen(kind="post_tool", name=name, cwd=cwd, edits=((path, text),))
        command = None
        if tool in SHELL_TOOLS:
            given = tool_input.get("command")
            command = given if isinstance(given, str) and given else None
        if kind == "post_tool":
            if command is None:
                return Seen(kind="other", name=name, cwd=cwd)  # edits: afterFileEdit
            output, code = shell_output(event.get("tool_output"))
            return Seen(
                kind="post_tool",
                name=name,
                cwd=cwd,
                command=command,
                exit_code=code,
                failed=code not in (None, 0),
                output=output,
                unjudged=code is None,
            )
        edits: tuple[tuple[str, str], ...] = ()
        if kind == "pre_tool" and command is None:
            path = tool_input.get("file_path", tool_input.get("path"))
            if isinstance(path, str) and path:
                text = tool_input.get("content", tool_input.get("new_string"))
                edits = ((path, text_of(text)),)
        loops = event.get("loop_count")
        return Seen(
            kind=kind,
            name=name,
            cwd=cwd,
            command=command,
            edits=edits,
            stop_hook_active=type(loops) is int and loops > 0,
        )

    def cwd(
        self, event: Mapping[str, Any], tool_input: Mapping[str, Any]
    ) -> str | None:
        """``cwd``, else the shell's ``working_directory``, else the first of
        the ``workspace_roots``."""
        for value in (event.get("cwd"), tool_input.get("working_directory")):
            if isinstance(value, str) and value:
                return value
        roots = event.get("workspace_roots")
        if isinstance(roots, list) and roots and isinstance(roots[0], str):
            return roots[0]
        return None

    def write(self, seen: Seen, answer: Answer) -> tuple[str | None, int]:
        if answer.empty:
            return None, 0
        if seen.kind == "pre_tool":
            if not answer.deny:
                return None, 0
            return answer_json(
                {
                    "permission": "deny",
                    "user_message": answer.deny,
                    "agent_message": answer.deny,
                }
            ), 0
        if seen.kind == "prompt" and answer.halt:
            return answer_json({"continue": False, "user_message": answer.halt}), 0
        if seen.kind == "stop" and answer.block:
            return answer_json({"followup_message": answer.block}), 0
        context = answer.context or (answer.halt if seen.kind == "post_tool" else None)
        if context and seen.kind in ("session_start", "post_tool"):
            return answer_json({"additional_context": context}), 0
        return None, 0


CURSOR = Layout(
    agent="cursor",
    project_file=".cursor/hooks.json",
    user_file=".cursor/hooks.json",
    events=(
        ("sessionStart", None),
        ("beforeSubmitPrompt", None),
        ("preToolUse", None),
        ("postToolUse", None),
        ("afterFileEdit", None),
        ("stop", None),
    ),
    flat=True,
    entry=(),
    header=(("version", 1),),
)

AGENT = Agent(
    name="cursor",
    title="Cursor",
    dialect=Cursor(),
    layout=CURSOR,
    docs="https://cursor.com/docs/agent/hooks",
)
