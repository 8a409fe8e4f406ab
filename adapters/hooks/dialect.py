"""What every agent's hook module gives (:class:`Agent`): its protocol
(:class:`Dialect`) and where its hooks are installed
(:class:`~devs.adapters.hooks.install.Layout`), with the readers the
dialects share. docs/agents.md cites each agent's documentation.

A :class:`Dialect` reads the agent's JSON event into a
:class:`~devs.adapters.hooks.breaker.Seen` and writes an
:class:`~devs.adapters.hooks.breaker.Answer` as the agent reads it: the text
for stdout (or ``None``) and the exit code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from devs.adapters.hooks.breaker import Answer, Seen, answer_json
from devs.adapters.hooks.install import Layout
from devs.adapters.hooks.usage import Reader
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


@dataclass(frozen=True)
class Agent:
    """One coding agent's hooks: what the registry
    (:mod:`devs.adapters.hooks.registry`) loads for ``devs hook AGENT`` and
    ``devs hooks install|uninstall|status AGENT``."""

    name: str
    title: str
    """The agent's name for people (docs/agents.md's table)."""
    dialect: Dialect
    layout: Layout
    docs: str
    """The agent's own hook documentation, which the module follows."""
    http: bool = False
    """The agent can POST its events to ``devs serve`` (``http`` hooks:
    ``devs hooks install AGENT --url``) instead of running a command."""
    trust: Trust | None = None
    """For an agent that skips hooks until the user trusts them: what is not
    trusted yet, and how to trust it (:data:`Trust`)."""
    usage: Reader | None = None
    """How the agent's session files give its model calls' usage
    (:mod:`devs.adapters.hooks.usage`); ``None``: it leaves none the hook
    can read (docs/agents.md#spend)."""


Trust = Callable[[Path, "Path | None", Mapping[str, str]], "str | None"]
"""``(settings file, project folder or None for the user's settings,
environment)``: ``None`` when the agent will run the installed hooks, else
one sentence saying what it skips and the command or step that trusts it."""


def text_of(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float, bool)):
        return str(value)
    try:
        return answer_json({"value": value})[9:-1]  # JSON text of a structure
    except (TypeError, orjson.JSONEncodeError):  # nested past orjson's limit
        return "[a value nested too deep to read]"


def mapping_in(event: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = event.get(key)
    return value if isinstance(value, Mapping) else {}


def event_name(event: Mapping[str, Any]) -> str:
    name = event.get("hook_event_name")
    if not isinstance(name, str) or not name:
        msg = "the hook event has no hook_event_name"
        raise InvalidInput(msg, field="hook_event_name")
    return name


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
