"""The coding agents ``devs hook`` answers, and the module of each.

One line per agent: its name (the argument of ``devs hook AGENT`` and
``devs hooks install AGENT``) and its module in this package, which defines
``AGENT`` (:class:`~devs.adapters.hooks.dialect.Agent`: the protocol, the
settings file, the documentation). The launcher's fast path, the CLI, the
installer and docs/agents.md's table all read this; adding an agent is its
module and its line here.

The standard library only: the fast path (:mod:`devs.adapters.launch`) reads
the names before anything else is imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from devs.adapters.hooks.dialect import Agent

AGENTS: dict[str, str] = {
    "claude-code": "claude_code",
    "codex": "codex",
    "openhands": "openhands",
    "gemini": "gemini",
    "copilot": "copilot",
    "cursor": "cursor",
}


def load(name: str) -> Agent:
    """The agent called ``name`` (``KeyError`` for one not listed)."""
    module = importlib.import_module(f"devs.adapters.hooks.{AGENTS[name]}")
    agent: Agent = module.AGENT
    return agent


def every() -> list[Agent]:
    """Every agent, in the registry's order."""
    return [load(name) for name in AGENTS]
