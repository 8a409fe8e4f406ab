"""``devs projections rebuild``, ``devs diagram`` and ``devs demo``."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import click
from rich.progress import Progress

from devs.adapters.cli.base import (
    Context,
    ExitCode,
    cli,
    err,
    fail,
    handles_errors,
    pass_context,
    plain,
)
from devs.adapters.demo import run_demo
from devs.domain.chart import mermaid


@cli.group()
def projections() -> None:
    """Maintain the read models."""


@projections.command("rebuild")
@click.argument("names", nargs=-1)
@pass_context
@handles_errors
def projections_rebuild(ctx: Context, names: Sequence[str]) -> None:
    """Drop the named projections (default: all) and replay them from position 0."""
    with Progress(console=err, transient=True) as progress:
        bar = progress.add_task("rebuilding", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(bar, completed=done, total=total)

        position = ctx.app.rebuild_projections(list(names) or None, progress=advance)
    which = ", ".join(names) if names else "all projections"
    plain(f"rebuilt {which} up to position {position}")


@cli.command()
def diagram() -> None:
    """The task state chart as mermaid."""
    plain(mermaid())


@cli.command()
@click.option(
    "--db",
    "demo_db",
    type=click.Path(dir_okay=False),
    default=None,
    help="SQLite file for the demo (default: a fresh temporary file).",
)
def demo(demo_db: str | None) -> None:
    """Walk a scripted agent loop through the whole ladder, showing each decision."""
    if demo_db is None:
        path = Path(tempfile.mkdtemp(prefix="devs-demo-")) / "devs_state.sqlite"
    else:
        path = Path(demo_db)
    if path.exists():
        fail(f"{path} exists; the demo wants a fresh file", ExitCode.BAD_INPUT)
    run_demo(path, cli, ExitCode)
