"""Claude Code's hooks: JSON on stdin; JSON on stdout with exit code 0.

Hooks reference: https://code.claude.com/docs/en/hooks (docs/agents.md has
what the real binary honours, measured by tests/agents).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from devs.adapters.hooks.breaker import (
    Answer,
    EventKind,
    Seen,
    answer_json,
    exit_code_in,
)
from devs.adapters.hooks.dialect import Agent, event_name, mapping_in, text_of
from devs.adapters.hooks.install import Layout
from devs.adapters.hooks.usage import ClaudeTranscript

CLAUDE_EVENTS: dict[str, EventKind] = {
    "SessionStart": "session_start",
    "UserPromptSubmit": "prompt",
    "PreToolUse": "pre_tool",
    "PostToolUse": "post_tool",
    "PostToolUseFailure": "post_tool_failure",
    "PostToolBatch": "batch",
    "Stop": "stop",
}
"""The events the breaker acts on, by Claude Code's names; any other event
is answered with nothing."""

SHELL_TOOLS = frozenset({"Bash"})
EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})


class ClaudeCode:
    """Claude Code's hooks: JSON on stdin; JSON on stdout with exit code 0.

    The same protocol is Codex's where Codex has the event (:class:`Codex`)."""

    agent = "claude-code"
    events = CLAUDE_EVENTS

    def read(self, event: Mapping[str, Any]) -> Seen:
        name = event_name(event)
        kind = self.events.get(name, "other")
        cwd = event.get("cwd") if isinstance(event.get("cwd"), str) else None
        transcript = event.get("transcript_path")
        tool = event.get("tool_name")
        tool_input = mapping_in(event, "tool_input")
        command = self.command(tool, tool_input)
        # Edits about to be made are read too: the breaker refuses one that
        # writes the referee's own files (hooks.reaches_referee).
        edits = (
            self.edits(tool, tool_input) if kind in ("pre_tool", "post_tool") else ()
        )
        output = ""
        exit_code: int | None = None
        failed = kind == "post_tool_failure"
        if kind == "post_tool" and command is not None:
            output, exit_code = self.result(event.get("tool_response"))
        elif failed:
            output = text_of(event.get("error"))
            exit_code = exit_code_in(output)
        # A run in the background answers at once, before its tests ran; an
        # interrupted one (Esc) did not end on its own: neither is judged.
        response = mapping_in(event, "tool_response")
        unjudged = command is not None and (
            tool_input.get("run_in_background") is True
            or response.get("interrupted") is True
            or bool(response.get("backgroundTaskId"))
            or event.get("is_interrupt") is True
        )
        return Seen(
            kind=kind,
            name=name,
            cwd=cwd,
            command=command,
            edits=edits,
            exit_code=exit_code,
            failed=failed,
            output=output,
            stop_hook_active=event.get("stop_hook_active") is True,
            unjudged=unjudged and kind in ("post_tool", "post_tool_failure"),
            transcript=transcript if isinstance(transcript, str) else None,
        )

    def command(self, tool: Any, tool_input: Mapping[str, Any]) -> str | None:
        if tool in SHELL_TOOLS:
            command = tool_input.get("command")
            return command if isinstance(command, str) and command else None
        return None

    def edits(
        self, tool: Any, tool_input: Mapping[str, Any]
    ) -> tuple[tuple[str, str], ...]:
        if tool not in EDIT_TOOLS:
            return ()
        path = text_of(tool_input.get("file_path") or tool_input.get("notebook_path"))
        if tool == "MultiEdit":
            edits = tool_input.get("edits")
            items = edits if isinstance(edits, list) else []
            return tuple(
                (path, text_of(item.get("new_string")))
                for item in items
                if isinstance(item, Mapping)
            )
        text = tool_input.get("new_string", tool_input.get("content"))
        if text is None:
            text = tool_input.get("new_source")
        return ((path, text_of(text)),)

    def result(self, response: Any) -> tuple[str, int | None]:
        """A shell tool's output and exit code (Claude Code's Bash gives
        ``stdout`` and ``stderr``; it calls a failure PostToolUseFailure)."""
        if isinstance(response, Mapping):
            parts = [text_of(response.get(k)) for k in ("stdout", "stderr", "output")]
            code = response.get("exit_code", response.get("exitCode"))
            return "\n".join(p for p in parts if p), code if type(code) is int else None
        return text_of(response), None

    def write(self, seen: Seen, answer: Answer) -> tuple[str | None, int]:
        if answer.empty:
            return None, 0
        body: dict[str, Any] = {}
        if answer.halt:
            # Honoured on PreToolUse (with the denial), PostToolUse,
            # PostToolBatch and UserPromptSubmit; ignored on
            # PostToolUseFailure (tests/agents). systemMessage is what the
            # user is shown (stream-json, the terminal); the prompt's halt
            # is printed even by `claude -p` in text mode.
            body["continue"] = False
            body["stopReason"] = answer.halt
            body["systemMessage"] = answer.halt
        specific: dict[str, Any] = {}
        if answer.deny and seen.kind == "pre_tool":
            specific = {
                "hookEventName": seen.name,
                "permissionDecision": "deny",
                "permissionDecisionReason": answer.deny,
            }
        elif answer.context and seen.kind in (
            "session_start",
            "post_tool",
            "post_tool_failure",
        ):
            specific = {"hookEventName": seen.name, "additionalContext": answer.context}
        if specific:
            body["hookSpecificOutput"] = specific
        if answer.block and seen.kind == "stop":
            body["decision"] = "block"
            body["reason"] = answer.block
        return (answer_json(body) if body else None), 0


CLAUDE_CODE = Layout(
    agent="claude-code",
    project_file=".claude/settings.json",
    user_file=".claude/settings.json",
    events=(
        ("SessionStart", None),
        ("UserPromptSubmit", None),
        ("PreToolUse", "*"),
        ("PostToolUse", "Bash|Edit|Write|MultiEdit|NotebookEdit"),
        ("PostToolUseFailure", "Bash"),
        ("PostToolBatch", None),
        ("Stop", None),
        # Nothing to decide: the session's last usage, on disk by then.
        ("SessionEnd", None),
    ),
    no_http=frozenset({"SessionStart"}),
)

AGENT = Agent(
    name="claude-code",
    title="Claude Code",
    dialect=ClaudeCode(),
    layout=CLAUDE_CODE,
    docs="https://code.claude.com/docs/en/hooks",
    http=True,
    usage=ClaudeTranscript(),
)
