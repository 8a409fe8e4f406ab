"""``devs projections rebuild``, ``devs verify``, ``devs diagram`` and ``devs demo``."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import click

from devs.adapters.cli.base import (
    Context,
    ExitCode,
    cli,
    emit_json,
    err,
    fail,
    handles_errors,
    json_option,
    pass_context,
    plain,
)
from devs.adapters.demo import run_demo
from devs.domain.chart import mermaid


@cli.group()
def projections() -> None:
    """Maintain the read models."""


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[int, int], None]]:
    """A transient progress bar on stderr, and the ``progress(done, total)``
    that moves it (rich's progress module is loaded here, for the commands
    that show one: about 40 ms of every other command's start)."""
    from rich.progress import Progress

    with Progress(console=err, transient=True) as progress:
        bar = progress.add_task(label, total=None)

        def advance(done: int, total: int) -> None:
            progress.update(bar, completed=done, total=total)

        yield advance


@projections.command("rebuild")
@click.argument("names", nargs=-1)
@pass_context
@handles_errors
def projections_rebuild(ctx: Context, names: Sequence[str]) -> None:
    """Drop the named projections (default: all) and replay them from position 0."""
    with progress_bar("rebuilding") as advance:
        position = ctx.app.rebuild_projections(list(names) or None, progress=advance)
    which = ", ".join(names) if names else "all projections"
    plain(f"rebuilt {which} up to position {position}")


@cli.command()
@json_option
@pass_context
@handles_errors
def verify(ctx: Context, as_json: bool) -> None:
    """Check the store: every read model against the log, every event
    decodable, every task's hash chain unbroken.

    Writes nothing. Exits 0 when all is well, 1 when it found problems (one
    line each); `devs projections rebuild` repairs the read models.
    """
    with progress_bar("verifying") as advance:
        report = ctx.app.verify(progress=advance)
    if as_json:
        emit_json(report)
    elif report.ok:
        read = min(report.positions.values(), default=report.position)
        if read >= report.position:
            how_far = f"up to position {report.position}"
        else:
            how_far = (
                f"as far as they have read it (position {read} of "
                f"{report.position}; the next query reads the rest)"
            )
        plain(
            f"ok: {len(report.read_models)} read models match the log {how_far}; "
            "every event decodes"
        )
        plain(_chains_line(report.chains))
    else:
        count = len(report.problems)
        plain(f"{count} problem(s), log up to position {report.position}:")
        for problem in report.problems:
            plain(f"- {problem}")
        plain(_chains_line(report.chains))
    if not report.ok:
        sys.exit(int(ExitCode.RETRY))


def _chains_line(chains: dict[str, int]) -> str:
    return (
        f"hash chains: {chains.get('intact', 0)} intact, "
        f"{chains.get('unchained', 0)} unchained (written before the chain "
        f"existed), {chains.get('broken', 0)} broken"
    )


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
