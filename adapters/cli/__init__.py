"""The ``devs`` command line over :class:`~devs.domain.RecoveryService`.

Human-readable by default, ``--json`` for tooling. Exit codes let a shell loop
branch on the decision (see :class:`ExitCode` and docs/cli.md). The database is
``--db``, else ``$DEVS_DB``, else ``./devs_state.sqlite``. One module per group
of commands; they register on the root group :data:`cli` when imported here.
"""

from __future__ import annotations

from devs.adapters.cli import (
    admin,
    agents,
    audit,
    humans,
    metrics,
    operators,
    outbox,
    project,
    runs,
    serve,
    tasks,
)
from devs.adapters.cli.base import ExitCode, cli

__all__ = [
    "ExitCode",
    "admin",
    "agents",
    "audit",
    "cli",
    "humans",
    "main",
    "metrics",
    "operators",
    "outbox",
    "project",
    "runs",
    "serve",
    "tasks",
]


def main() -> None:
    cli(prog_name="devs")
