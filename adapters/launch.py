"""The ``devs`` command's entry point.

``devs [--db DB] hook AGENT``, the command a coding agent runs at each step,
goes to :mod:`devs.adapters.hooks.client` before anything else is imported
(the standard library only; its hook server holds the service). Every other
command line is the click application, :func:`devs.adapters.cli.main`.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from devs.adapters.hooks.registry import AGENTS


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


@contextmanager
def loading() -> Iterator[None]:
    """Imports without the cyclic garbage collector, then the objects they
    made moved out of its sight (``gc.freeze``): the CLI and the service make
    some 50,000 objects that live as long as the process, and the collector
    went through them over a hundred times while they loaded, and once more
    at exit, freeing nothing (about 0.15 s of a command here)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def main() -> None:
    call = hook_call(sys.argv[1:])
    if call is not None:
        from devs.adapters.hooks import client as hook_client

        if hook_client.taken_here(os.environ):
            agent, db = call
            sys.exit(hook_client.run(agent, db, loading=loading))
    with loading():
        from devs.adapters.cli import main as cli_main

    cli_main()
