"""OpenHands' hooks.

Hooks reference:
https://docs.openhands.dev/openhands/usage/customization/hooks (and the SDK's
``openhands/sdk/hooks/types.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from devs.adapters.hooks.breaker import Answer, EventKind, Seen, answer_json
from devs.adapters.hooks.dialect import Agent, mapping_in, text_of
from devs.adapters.hooks.install import Layout
from devs.domain.errors import InvalidInput

OPENHANDS_EVENTS: dict[str, EventKind] = {
    "SessionStart": "session_start",
    "PreToolUse": "pre_tool",
    "PostToolUse": "post_tool",
    "Stop": "stop",
}
OPENHANDS_SHELL = frozenset({"terminal", "execute_bash", "bash"})
OPENHANDS_EDITORS = frozenset(
    {"file_editor", "str_replace_editor", "planning_file_editor"}
)
OPENHANDS_EDITS = frozenset({"create", "str_replace", "insert"})


class OpenHands:
    """OpenHands' hooks: Claude Code's event names, but ``event_type`` and
    ``working_dir`` for ``hook_event_name`` and ``cwd``, the shell tool
    ``terminal`` whose result carries ``exit_code``, the ``file_editor``
    tool, and answers read from the top level of the JSON (``decision``:
    ``deny`` blocks, with ``reason``) or exit code 2. PostToolUse cannot stop
    the agent: a stop takes effect at its next tool call, which is refused."""

    agent = "openhands"

    def read(self, event: Mapping[str, Any]) -> Seen:
        name = event.get("event_type")
        if not isinstance(name, str) or not name:
            msg = "the hook event has no event_type"
            raise InvalidInput(msg, field="event_type")
        kind = OPENHANDS_EVENTS.get(name, "other")
        cwd = event.get("working_dir")
        tool = event.get("tool_name")
        tool_input = mapping_in(event, "tool_input")
        command = None
        if tool in OPENHANDS_SHELL:
            given = tool_input.get("command")
            command = given if isinstance(given, str) and given else None
        edits: tuple[tuple[str, str], ...] = ()
        editing = tool in OPENHANDS_EDITORS
        if (
            kind in ("pre_tool", "post_tool")
            and editing
            and tool_input.get("command") in (OPENHANDS_EDITS)
        ):
            text = tool_input.get("new_str", tool_input.get("file_text"))
            edits = ((text_of(tool_input.get("path")), text_of(text)),)
        output, exit_code = "", None
        if kind == "post_tool" and command is not None:
            response = mapping_in(event, "tool_response")
            parts = response.get("content")
            output = "\n".join(
                text_of(part.get("text"))
                for part in (parts if isinstance(parts, list) else [])
                if isinstance(part, Mapping)
            )
            code = response.get("exit_code")
            exit_code = code if type(code) is int and code >= 0 else None
        return Seen(
            kind=kind,
            name=name,
            cwd=cwd if isinstance(cwd, str) else None,
            command=command,
            edits=edits,
            exit_code=exit_code,
            failed=exit_code not in (None, 0),
            output=output,
            # still running (-1) or not said: not judged
            unjudged=kind == "post_tool" and command is not None and exit_code is None,
        )

    def write(self, seen: Seen, answer: Answer) -> tuple[str | None, int]:
        refusal = answer.deny if seen.kind == "pre_tool" else None
        if seen.kind == "stop" and answer.block:
            refusal = answer.block
        if refusal:
            # Exit code 2 blocks; "deny" says so in the JSON too (docs).
            return answer_json({"decision": "deny", "reason": refusal}), 2
        context = answer.context or answer.halt
        if context and seen.kind in ("session_start", "post_tool"):
            return answer_json({"additionalContext": context}), 0
        return None, 0


OPENHANDS = Layout(
    agent="openhands",
    project_file=".openhands/hooks.json",
    user_file=".openhands/hooks.json",
    events=(
        ("session_start", None),
        ("pre_tool_use", "*"),
        (
            "post_tool_use",
            "terminal|execute_bash|bash|file_editor|str_replace_editor"
            "|planning_file_editor",
        ),
        ("stop", None),
    ),
    wrapped=False,
    aliases=(
        ("session_start", "SessionStart"),
        ("pre_tool_use", "PreToolUse"),
        ("post_tool_use", "PostToolUse"),
        ("stop", "Stop"),
    ),
)

AGENT = Agent(
    name="openhands",
    title="OpenHands",
    dialect=OpenHands(),
    layout=OPENHANDS,
    docs="https://docs.openhands.dev/openhands/usage/customization/hooks",
)
