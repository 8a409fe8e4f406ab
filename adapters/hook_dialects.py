"""Each coding agent's hook protocol: how it writes an event, how it reads an
answer (docs/agents.md cites each agent's documentation).

A :class:`Dialect` reads the agent's JSON event into a
:class:`~devs.adapters.hooks.Seen` and writes an
:class:`~devs.adapters.hooks.Answer` as the agent reads it: the text for
stdout (or ``None``) and the exit code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from devs.adapters.hooks import Answer, EventKind, Seen, answer_json, exit_code_in
from devs.domain.errors import InvalidInput


class Dialect(Protocol):
    """One agent's hook protocol."""

    agent: str
    """The agent's name, recorded as the task's agent."""

    def read(self, event: Mapping[str, Any]) -> Seen:
        """The event, in the referee's terms (``InvalidInput`` if it is not
        one of this agent's events)."""
        ...

    def write(self, seen: Seen, answer: Answer) -> tuple[str | None, int]:
        """The answer as the agent reads it: stdout's text, and the exit code."""
        ...


CLAUDE_EVENTS: dict[str, EventKind] = {
    "SessionStart": "session_start",
    "PreToolUse": "pre_tool",
    "PostToolUse": "post_tool",
    "PostToolUseFailure": "post_tool_failure",
    "Stop": "stop",
}
"""The events the breaker acts on, by Claude Code's names; any other event
is answered with nothing."""

SHELL_TOOLS = frozenset({"Bash"})
EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float, bool)):
        return str(value)
    return answer_json({"value": value})[9:-1]  # JSON text of a structure


def _mapping(event: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = event.get(key)
    return value if isinstance(value, Mapping) else {}


def _name(event: Mapping[str, Any]) -> str:
    name = event.get("hook_event_name")
    if not isinstance(name, str) or not name:
        msg = "the hook event has no hook_event_name"
        raise InvalidInput(msg, field="hook_event_name")
    return name


class ClaudeCode:
    """Claude Code's hooks: JSON on stdin; JSON on stdout with exit code 0.

    The same protocol is Codex's where Codex has the event (:class:`Codex`)."""

    agent = "claude-code"
    events = CLAUDE_EVENTS

    def read(self, event: Mapping[str, Any]) -> Seen:
        name = _name(event)
        kind = self.events.get(name, "other")
        cwd = event.get("cwd") if isinstance(event.get("cwd"), str) else None
        tool = event.get("tool_name")
        tool_input = _mapping(event, "tool_input")
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
            output = _text(event.get("error"))
            exit_code = exit_code_in(output)
        # A run in the background answers at once, before its tests ran; an
        # interrupted one (Esc) did not end on its own: neither is judged.
        response = _mapping(event, "tool_response")
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
        path = _text(tool_input.get("file_path") or tool_input.get("notebook_path"))
        if tool == "MultiEdit":
            edits = tool_input.get("edits")
            items = edits if isinstance(edits, list) else []
            return tuple(
                (path, _text(item.get("new_string")))
                for item in items
                if isinstance(item, Mapping)
            )
        text = tool_input.get("new_string", tool_input.get("content"))
        if text is None:
            text = tool_input.get("new_source")
        return ((path, _text(text)),)

    def result(self, response: Any) -> tuple[str, int | None]:
        """A shell tool's output and exit code (Claude Code's Bash gives
        ``stdout`` and ``stderr``; it calls a failure PostToolUseFailure)."""
        if isinstance(response, Mapping):
            parts = [_text(response.get(k)) for k in ("stdout", "stderr", "output")]
            code = response.get("exit_code", response.get("exitCode"))
            return "\n".join(p for p in parts if p), code if type(code) is int else None
        return _text(response), None

    def write(self, seen: Seen, answer: Answer) -> tuple[str | None, int]:
        if answer.empty:
            return None, 0
        body: dict[str, Any] = {}
        if answer.halt:
            body["continue"] = False
            body["stopReason"] = answer.halt
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


PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update) File: (.{1,4096})$", re.MULTILINE)
"""A file an ``apply_patch`` patch adds or changes (Codex's patch format)."""

EXIT_CODE_LINE = re.compile(
    r"^(?:Exit code:?|Process exited with code)\s{0,4}(-?\d{1,10})\s*$", re.MULTILINE
)
"""The exit code some Codex versions write at the head of a command's output."""

FAILED_SUMMARY = re.compile(
    r"\b[1-9]\d* (?:failed|errors?)\b"  # pytest
    r"|^test result: FAILED"  # cargo test
    r"|^(?:FAIL|--- FAIL)\b"  # go test
    r"|^Tests:\s{1,8}\d+ failed"  # jest
    r"|^\s{0,8}Test Files\s{1,8}\d+ failed"  # vitest
    r"|^npm (?:ERR!|error)"  # npm
    r"|^make(?:\[\d+\])?: \*\*\*"  # make
    r"|^ERROR: InvocationError",  # tox
    re.MULTILINE,
)
PASSED_SUMMARY = re.compile(
    r"\b\d+ passed\b"  # pytest
    r"|^test result: ok\."  # cargo test
    r"|^ok\s"  # go test
    r"|^Tests:\s{1,8}\d+ passed"  # jest
    r"|^\s{0,8}Test Files\s{1,8}\d+ passed"  # vitest
    r"|congratulations :\)",  # tox
    re.MULTILINE,
)
SUMMARY_TAIL = 20_000
"""How much of the output's end the test runners' summaries are looked for in."""


def judged_by_output(output: str) -> tuple[bool, int | None] | None:
    """Whether a command failed, read from its output when the agent does not
    say (Codex): the exit code Codex writes in some versions, else the test
    runner's own summary; ``None`` when the output says neither."""
    head = EXIT_CODE_LINE.search(output[:2_000])
    if head is not None:
        code = int(head.group(1))
        return code != 0, code
    tail = output[-SUMMARY_TAIL:]
    if FAILED_SUMMARY.search(tail):
        return True, None
    if PASSED_SUMMARY.search(tail):
        return False, 0
    return None


class Codex(ClaudeCode):
    """Codex's hooks: Claude Code's protocol (its event, tool and field names,
    ``hooks.json``'s shape), with three differences (docs/agents.md):

    - a shell command's PostToolUse runs whether it failed or not, and its
      ``tool_response`` is the output alone, with no exit code: the result is
      read from the output (:func:`judged_by_output`), and a gate whose output
      says neither is not recorded;
    - edits come from ``apply_patch`` (its patch in ``tool_input.command``);
    - an output field Codex does not support for an event (``continue`` and
      ``stopReason`` on PreToolUse, any unknown key) makes it count the hook
      as failed and run the tool anyway: each answer holds only the fields
      Codex reads for that event.
    """

    agent = "codex"
    events = {**CLAUDE_EVENTS}

    def edits(
        self, tool: Any, tool_input: Mapping[str, Any]
    ) -> tuple[tuple[str, str], ...]:
        if tool != "apply_patch":
            return super().edits(tool, tool_input)
        patch = _text(tool_input.get("command"))[:1_000_000]
        paths = ", ".join(m.group(1).strip() for m in PATCH_FILE.finditer(patch))
        added = "\n".join(
            line[1:]
            for line in patch.splitlines()
            if line.startswith("+") and not line.startswith("+++")
        )
        return ((paths or "(patch)", added),)

    def read(self, event: Mapping[str, Any]) -> Seen:
        seen = super().read(event)
        if seen.kind != "post_tool" or seen.command is None:
            return seen
        judged = judged_by_output(seen.output)
        if judged is None:
            return Seen(kind="other", name=seen.name, cwd=seen.cwd, output=seen.output)
        failed, code = judged
        return Seen(
            kind="post_tool",
            name=seen.name,
            cwd=seen.cwd,
            command=seen.command,
            exit_code=code,
            failed=failed,
            output=seen.output,
            unjudged=judged is None,
        )

    def write(self, seen: Seen, answer: Answer) -> tuple[str | None, int]:
        if answer.empty:
            return None, 0
        if seen.kind == "pre_tool":
            if not answer.deny:
                return None, 0
            return answer_json(
                {
                    "hookSpecificOutput": {
                        "hookEventName": seen.name,
                        "permissionDecision": "deny",
                        "permissionDecisionReason": answer.deny,
                    }
                }
            ), 0
        return super().write(seen, answer)


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
        tool_input = _mapping(event, "tool_input")
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
            edits = ((_text(tool_input.get("path")), _text(text)),)
        output, exit_code = "", None
        if kind == "post_tool" and command is not None:
            response = _mapping(event, "tool_response")
            parts = response.get("content")
            output = "\n".join(
                _text(part.get("text"))
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


DIALECTS: dict[str, Dialect] = {
    "claude-code": ClaudeCode(),
    "codex": Codex(),
    "openhands": OpenHands(),
}
