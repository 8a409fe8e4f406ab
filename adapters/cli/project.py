"""``devs project``: a worker that keeps the PostgreSQL read models (docs/deploy.md)."""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

import click

from devs.adapters.cli.base import (
    Context,
    ExitCode,
    cli,
    err,
    fail,
    handles_errors,
    pass_context,
)
from devs.adapters.config import DATABASE_URL_ENV


@cli.command()
@click.option(
    "--check-every",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0.05, 60),
    help="Seconds between checks that the runner is alive.",
)
@pass_context
@handles_errors
def project(ctx: Context, check_every: float) -> None:
    """Keep the PostgreSQL read models, until SIGTERM or Ctrl-C.

    Runs eventsourcing's projection runner over the log of DEVS_DATABASE_URL:
    every event is folded into every read model as it is recorded. Start it
    beside servers and scripts run with DEVS_PROJECTIONS=external. Any number
    may run: each event is folded once. On SQLite there is nothing to run
    (each query folds what it lacks).
    """
    from devs.projections.postgres import PostgresReadModels

    app = ctx.app
    models = app.read_models
    if not isinstance(models, PostgresReadModels):
        fail(
            f"devs project keeps PostgreSQL read models; set {DATABASE_URL_ENV} "
            "(on SQLite each query brings the read models up to date itself)",
            ExitCode.REFUSED,
        )
        return
    stop = threading.Event()

    def stopping(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    err.print(
        f"devs project: folding the log into the read models from position "
        f"{models.position()} (pid {os.getpid()}); SIGTERM or Ctrl-C stops",
        markup=False,
        soft_wrap=True,
    )
    models.follow(stop, check_every=check_every)
    err.print(
        f"devs project: stopped at position {models.position()}",
        markup=False,
        soft_wrap=True,
    )
