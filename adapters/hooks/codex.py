"""Codex's hooks: Claude Code's protocol with Codex's differences.

Hooks reference: https://developers.openai.com/codex/hooks (docs/agents.md
has what the real binary honours, measured by tests/agents).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from devs.adapters.hooks.breaker import Answer, Seen, answer_json
from devs.adapters.hooks.claude_code import CLAUDE_EVENTS, ClaudeCode
from devs.adapters.hooks.dialect import Agent, judged_by_output, text_of
from devs.adapters.hooks.install import Layout, own_agent
from devs.adapters.hooks.usage import CodexRollout

PATCH_FILE = re.compile(r"\*\*\* (?:(?:Add|Update|Delete) File|Move to): (.{1,4096})")
"""A line of a patch in Codex's format that names a file it adds, changes,
deletes or moves to."""
SHELL_PATCH = re.compile(
    r"\s{0,20}(?:cd [^\n;&|]{1,4096} && )?apply_patch <<(['\"]?)(\w{1,20})\1\n"
)
"""The head of ``apply_patch <<'EOF'`` as a shell command: how Codex edits
with a model that has no ``apply_patch`` tool of its own."""


def patch_edits(patch: str) -> tuple[tuple[str, str], ...]:
    """Each file a patch in Codex's format touches, with the lines it adds
    to it (a deleted file, or the one a file moves to, with none), so that
    every path is seen (the guard checks each)."""
    edits: list[tuple[str, list[str]]] = []
    for line in patch[:1_000_000].splitlines():
        named = PATCH_FILE.fullmatch(line)
        if named is not None:
            edits.append((named.group(1).strip(), []))
        elif line.startswith("+") and not line.startswith("+++") and edits:
            edits[-1][1].append(line[1:])
    if not edits:
        return (("(patch)", ""),)
    return tuple((path, "\n".join(added)) for path, added in edits)


def shell_patch(command: str | None) -> str | None:
    """The patch of a shell command that is exactly ``apply_patch`` fed a
    heredoc (an optional ``cd DIR &&`` before it, nothing after its end
    line); ``None`` for any other command, which is read as a command."""
    if command is None:
        return None
    text = command[:1_000_000]
    head = SHELL_PATCH.match(text)
    if head is None:
        return None
    lines = text[head.end() :].rstrip().split("\n")
    end = head.group(2)
    if lines[-1] != end or end in lines[:-1]:
        return None
    patch = "\n".join(lines[:-1])
    return patch if "*** Begin Patch" in patch else None


class Codex(ClaudeCode):
    """Codex's hooks: Claude Code's protocol (its event, tool and field names,
    ``hooks.json``'s shape), with three differences (docs/agents.md):

    - a shell command's PostToolUse runs whether it failed or not, and its
      ``tool_response`` is the output alone, with no exit code: the result is
      read from the output (:func:`judged_by_output`), and a gate whose output
      says neither is not recorded;
    - edits come from ``apply_patch`` (its patch in ``tool_input.command``),
      or from a shell command that feeds ``apply_patch`` a patch, which fires
      PreToolUse (as ``Bash``) and no PostToolUse: that edit counts when it
      is announced;
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
        return patch_edits(text_of(tool_input.get("command")))

    def read(self, event: Mapping[str, Any]) -> Seen:
        seen = super().read(event)
        if (patch := shell_patch(seen.command)) is not None:
            # Codex sends no PostToolUse for it: the edit counts now. The
            # command stays: the guard reads it as any other.
            if seen.kind != "pre_tool":
                return Seen(kind="other", name=seen.name, cwd=seen.cwd)
            return Seen(
                kind="pre_tool",
                name=seen.name,
                cwd=seen.cwd,
                command=seen.command,
                edits=patch_edits(patch),
                edits_now=True,
            )
        if seen.kind != "post_tool" or seen.command is None:
            return seen
        judged = judged_by_output(seen.output)
        if judged is None:
            # How it ended is unknown: a gate so ended is not recorded, any
            # other command is still a change (``git checkout -- x``).
            return Seen(
                kind="post_tool",
                name=seen.name,
                cwd=seen.cwd,
                command=seen.command,
                output=seen.output,
                unjudged=True,
            )
        failed, code = judged
        if failed and code in (None, 0):
            code = 1  # only the runner's summary says it failed: a non-zero exit
        return Seen(
            kind="post_tool",
            name=seen.name,
            cwd=seen.cwd,
            command=seen.command,
            exit_code=code,
            failed=failed,
            output=seen.output,
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
        if answer.halt and seen.kind in ("post_tool", "prompt"):
            # Nothing halts Codex within a turn (tests/agents): a block gives
            # the model the reason in place of the tool's output and prints
            # it on stderr; on a prompt it keeps the model from being asked.
            return answer_json({"decision": "block", "reason": answer.halt}), 0
        body: dict[str, Any] = {}
        if answer.context and seen.kind in ("session_start", "prompt", "post_tool"):
            # A developer message the model reads before the tool's output.
            body["hookSpecificOutput"] = {
                "hookEventName": seen.name,
                "additionalContext": answer.context,
            }
        if answer.block and seen.kind == "stop":
            body["decision"] = "block"
            body["reason"] = answer.block
        return (answer_json(body) if body else None), 0


CODEX = Layout(
    agent="codex",
    project_file=".codex/hooks.json",
    user_file=".codex/hooks.json",
    events=(
        ("SessionStart", None),
        ("UserPromptSubmit", None),
        ("PreToolUse", "*"),
        ("PostToolUse", "Bash|apply_patch"),
        ("Stop", None),
    ),
)

_WORD = re.compile(r"(?<!^)(?=[A-Z])")


def hook_keys(settings: Path) -> list[str]:
    """The keys Codex trusts the breaker's entries of ``settings`` by:
    ``FILE:event_in_snake_case:GROUP:HANDLER`` (positions in the file)."""
    try:
        data = orjson.loads(settings.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return []
    hooks = data.get("hooks") if isinstance(data, dict) else None
    keys: list[str] = []
    for event, groups in (hooks if isinstance(hooks, dict) else {}).items():
        snake = _WORD.sub("_", str(event)).lower()
        for g, group in enumerate(groups if isinstance(groups, list) else []):
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for h, handler in enumerate(handlers if isinstance(handlers, list) else []):
                if (
                    isinstance(handler, dict)
                    and own_agent(handler.get("command")) == "codex"
                ):
                    keys.append(f"{settings}:{snake}:{g}:{h}")
    return keys


def trust(
    settings: Path, project: Path | None, environ: Mapping[str, str]
) -> str | None:
    """What Codex has not trusted yet of the breaker's hooks in
    ``settings``: a project's hooks run only in a trusted project
    (``[projects."DIR"] trust_level = "trusted"``) and each hook only once
    trusted (``[hooks.state."KEY"] trusted_hash``, which ``/hooks`` records),
    in ``$CODEX_HOME/config.toml``. Codex skips an untrusted hook without a
    word. (That a recorded hash is the current one only Codex can tell: a
    hook changed since it was trusted must be trusted again.)"""
    home = environ.get("CODEX_HOME") or str(Path(environ.get("HOME", "~")) / ".codex")
    config = Path(home).expanduser() / "config.toml"
    try:
        data = tomllib.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        data = {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        return f"cannot read Codex's {config} to see what it trusts: {error}"
    settings = settings.resolve()
    lacking: list[str] = []
    if project is not None:
        projects = data.get("projects")
        entry = (
            projects.get(str(project.resolve())) if isinstance(projects, dict) else None
        )
        if not (isinstance(entry, dict) and entry.get("trust_level") == "trusted"):
            lacking.append("the project")
    hooks = data.get("hooks")
    state = hooks.get("state") if isinstance(hooks, dict) else None
    state = state if isinstance(state, dict) else {}
    untrusted = [
        key
        for key in hook_keys(settings)
        if not (isinstance(state.get(key), dict) and state[key].get("trusted_hash"))
    ]
    if untrusted:
        lacking.append(f"{len(untrusted)} of the hooks")
    if not lacking:
        return None
    where = f"in {project} " if project is not None else ""
    return (
        f"not trusted by Codex yet ({' and '.join(lacking)}), which skips them "
        f"without a word: run `codex` {where}and trust the folder, then "
        "`/hooks` and trust each devs hook (or run `codex exec "
        "--dangerously-bypass-hook-trust`)"
    )


AGENT = Agent(
    name="codex",
    title="Codex",
    dialect=Codex(),
    layout=CODEX,
    docs="https://developers.openai.com/codex/hooks",
    trust=trust,
    usage=CodexRollout(),
)
