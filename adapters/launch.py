"""The ``devs`` command's entry point.

``devs [--db DB] hook AGENT``, the command a coding agent runs at each step,
goes to :mod:`devs.adapters.hook_client` before anything else is imported
(the standard library only; its hook server holds the service). Every other
command line is the click application, :func:`devs.adapters.cli.main`.
"""

from __future__ import annotations

import os
import sys

AGENTS = ("claude-code", "codex", "openhands")


def hook_call(argv: list[str]) -> tuple[str, str | None] | None:
    """The agent and ``--db`` of a hook call as ``devs hooks install`` writes
    it (``[--db DB] hook AGENT``); ``None`` for any other command line."""
    db = None
    if len(argv) == 4 and argv[0] == "--db":
        db, argv = argv[1], argv[2:]
    elif len(argv) == 3 and argv[0].startswith("--db="):
        db, argv = argv[0].removeprefix("--db="), argv[1:]
    if len(argv) == 2 and argv[0] == "hook" and argv[1] in AGENTS and db != "":
        return argv[1], db
    return None


def main() -> None:
    call = hook_call(sys.argv[1:])
    if call is not None:
        from devs.adapters import hook_client

        if hook_client.server_wanted(os.environ):
            agent, db = call
            sys.exit(hook_client.run(agent, db))
    from devs.adapters.cli import main as cli_main

    cli_main()
