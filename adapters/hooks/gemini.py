"""Gemini CLI's hooks: JSON on stdin, JSON on stdout (which Gemini CLI reads
before the exit code).

Hooks reference: https://geminicli.com/docs/hooks/reference (the package ships
it under ``bundle/docs/hooks/``). The events, tools and answers here follow what
the real binary (0.61.0) does, measured by tests/agents; docs/agents.md
records it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from devs.adapters.hooks.breaker import Answer, EventKind, Seen, answer_json
from devs.adapters.hooks.dialect import Agent, event_name, mapping_in, text_of
from devs.adapters.hooks.install import Layout
from devs.adapters.hooks.usage import GeminiChat

GEMINI_EVENTS: dict[str, EventKind] = {
    "SessionStart": "session_start",
    "BeforeAgent": "prompt",
    "BeforeTool": "pre_tool",
    "AfterTool": "post_tool",
    "AfterAgent": "stop",
}
SHELL = "run_shell_command"
EXIT_CODE = re.compile(r"^Exit Code: (-?\d{1,10})$", re.MULTILINE)
"""The line of ``llmContent`` that says a command failed, and its code."""


class Gemini:
    """Gemini CLI's protocol."""

    agent = "gemini"

    def read(self, event: Mapping[str, Any]) -> Seen:
        name = event_name(event)
        kind = GEMINI_EVENTS.get(name, "other")
        cwd = event.get("cwd")
        transcript = event.get("transcript_path")
        tool = event.get("tool_name")
        tool_input = mapping_in(event, "tool_input")
        command = None
        if tool == SHELL:
            given = tool_input.get("command")
            command = given if isinstance(given, str) and given else None
        edits: tuple[tuple[str, str], ...] = ()
        if kind in ("pre_tool", "post_tool") and tool in ("write_file", "replace"):
            text = tool_input.get("content", tool_input.get("new_string"))
            edits = ((text_of(tool_input.get("file_path")), text_of(text)),)
        output, exit_code, failed, unjudged = "", None, False, False
        if kind == "post_tool" and command is not None:
            response = mapping_in(event, "tool_response")
            content = text_of(response.get("llmContent"))
            shown = response.get("returnDisplay")
            output = shown if isinstance(shown, str) and shown else content
            # The last such line: the command's own output may print one.
            codes = EXIT_CODE.findall(content[-20_000:])
            if response.get("error"):
                # The tool itself failed (cancelled, timed out): not a result.
                unjudged = True
            elif codes:
                exit_code = int(codes[-1])
                failed = exit_code != 0
            else:
                exit_code = 0
        if (
            kind == "post_tool"
            and edits
            and mapping_in(event, "tool_response").get("error")
        ):
            edits = ()  # the edit did not apply
        return Seen(
            kind=kind,
            name=name,
            cwd=cwd if isinstance(cwd, str) else None,
            command=command,
            edits=edits,
            exit_code=exit_code,
            failed=failed,
            output=output,
            stop_hook_active=event.get("stop_hook_active") is True,
            unjudged=unjudged,
            transcript=transcript if isinstance(transcript, str) else None,
        )

    def write(self, seen: Seen, answer: Answer) -> tuple[str | None, int]:
        if answer.empty:
            return None, 0
        body: dict[str, Any] = {}
        if answer.halt and seen.kind != "stop":
            # On BeforeTool the stop's reason is the one Gemini CLI uses: a
            # refusal's own (the same patch again) holds the stop's too.
            said = (
                answer.deny if seen.kind == "pre_tool" and answer.deny else answer.halt
            )
            body["continue"] = False
            body["stopReason"] = said
            body["systemMessage"] = said
        if answer.deny and seen.kind == "pre_tool":
            body["decision"] = "deny"
            body["reason"] = answer.deny
        if answer.block and seen.kind == "stop":
            body["decision"] = "block"
            body["reason"] = answer.block
        if answer.context and seen.kind in ("session_start", "prompt", "post_tool"):
            body["hookSpecificOutput"] = {
                "hookEventName": seen.name,
                "additionalContext": answer.context,
            }
        return (answer_json(body) if body else None), 0


GEMINI = Layout(
    agent="gemini",
    project_file=".gemini/settings.json",
    user_file=".gemini/settings.json",
    events=(
        ("SessionStart", None),
        ("BeforeAgent", None),
        ("BeforeTool", "*"),
        ("AfterTool", "*"),
        ("AfterAgent", None),
    ),
    timeout=30_000,  # milliseconds
)


def trust(
    settings: Path, project: Path | None, environ: Mapping[str, str]
) -> str | None:
    """Whether Gemini CLI will load a project's hooks: only in a trusted
    folder (``~/.gemini/trustedFolders.json``: the folder or one above it
    ``TRUST_FOLDER``, or its parent's child ``TRUST_PARENT``), or with
    ``GEMINI_CLI_TRUST_WORKSPACE=true``, or folder trust turned off in the
    user's settings (``security.folderTrust.enabled: false``)."""
    if project is None or environ.get("GEMINI_CLI_TRUST_WORKSPACE") == "true":
        return None
    home = Path(environ.get("GEMINI_CLI_HOME") or environ.get("HOME", "~"))
    folder = home.expanduser() / ".gemini"
    here = project.resolve()
    try:
        user = orjson.loads((folder / "settings.json").read_bytes())
        folder_trust = user.get("security", {}).get("folderTrust", {})
        if folder_trust.get("enabled") is False:
            return None
    except (OSError, orjson.JSONDecodeError, AttributeError):
        pass
    try:
        trusted = orjson.loads((folder / "trustedFolders.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        trusted = {}
    for path, level in (trusted if isinstance(trusted, dict) else {}).items():
        root = Path(path)
        if level == "TRUST_PARENT":
            root = root.parent
        elif level != "TRUST_FOLDER":
            continue
        if here == root or root in here.parents:
            return None
    return (
        f"{here} is not a trusted folder for Gemini CLI, which then loads no "
        "project hook (and exits with code 55 headless): trust the folder when "
        "`gemini` asks, or set GEMINI_CLI_TRUST_WORKSPACE=true"
    )


AGENT = Agent(
    name="gemini",
    title="Gemini CLI",
    dialect=Gemini(),
    layout=GEMINI,
    docs="https://geminicli.com/docs/hooks/reference",
    trust=trust,
    usage=GeminiChat(),
)
