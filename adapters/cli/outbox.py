"""``devs webhooks list|redeliver`` and ``devs deadlines run``: the outbox's
endpoints and dead letters, and the sweeper for those who run no server
(docs/notifications.md)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING

import click

from devs.adapters.cli.base import (
    TIME,
    Context,
    cli,
    emit_json,
    handles_errors,
    json_option,
    pass_context,
    plain,
    show_rows,
)
from devs.domain import DevsError
from devs.domain.names import DeliveryState

if TYPE_CHECKING:
    from devs.adapters.notify.sweeper import Sweeper

STATES = tuple(state.value for state in DeliveryState)


@cli.group()
def webhooks() -> None:
    """The outbox's endpoints (webhooks, Slack, e-mail) and deliveries."""


@webhooks.command("list")
@click.option(
    "--state",
    type=click.Choice(STATES),
    default=None,
    help="Only the deliveries in this state (dead: the dead letters).",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 10_000),
    default=50,
    show_default=True,
    help="At most this many deliveries, newest first.",
)
@json_option
@pass_context
@handles_errors
def webhooks_list(ctx: Context, state: str | None, limit: int, as_json: bool) -> None:
    """Each endpoint (enabled or disabled, its pending, delivered and dead
    counts, its last error), then the latest deliveries."""
    report = ctx.app.webhooks(state=state, limit=limit)  # type: ignore[arg-type]
    if as_json:
        emit_json(report)
        return
    show_rows(
        report.channels,
        False,
        empty="no endpoint yet: set DEVS_WEBHOOK_URLS (or DEVS_SLACK_WEBHOOK_URL, "
        "DEVS_SMTP_URL) and run devs serve",
        title="Endpoints",
        columns=("endpoint", "state", "pending", "delivered", "dead", "last error"),
        whole=("endpoint", "state"),
        row=lambda c: (
            c.shown,
            "enabled" if c.enabled else "disabled",
            str(c.pending),
            str(c.delivered),
            str(c.dead),
            c.disabled_reason or c.last_error or "-",
        ),
    )
    kinds = {c.channel: c.shown for c in report.channels}
    show_rows(
        report.deliveries,
        False,
        empty="no deliveries" + (f" in state {state}" if state else ""),
        title="Deliveries",
        columns=("message", "type", "task", "endpoint", "state", "tries", "next"),
        whole=("message",),
        row=lambda d: (
            d.message_id,
            d.type,
            d.task_id,
            kinds.get(d.channel, d.channel),
            d.state.value,
            str(d.tries),
            d.next_at.strftime(TIME) if d.next_at else "-",
        ),
    )


@webhooks.command("redeliver")
@click.argument("message_id", required=False)
@click.option("--failed", is_flag=True, help="Every dead letter.")
@json_option
@pass_context
@handles_errors
def webhooks_redeliver(
    ctx: Context, message_id: str | None, failed: bool, as_json: bool
) -> None:
    """Try MESSAGE_ID again at once on every endpoint it went to, or with
    --failed every dead letter; an endpoint disabled by a 410 is enabled
    again. A running devs serve sends them."""
    if (message_id is None) == (not failed):
        raise click.UsageError("give a MESSAGE_ID or --failed (one of them)")
    if message_id is not None:
        done = ctx.app.redeliver(message_id)
    else:
        done = ctx.app.redeliver_failed()
    if as_json:
        emit_json(done)
    else:
        plain(f"{done.count} deliveries due again")


@cli.group()
def deadlines() -> None:
    """The deadlines of human waits (policy field human_deadline)."""


@deadlines.command("run")
@click.option("--once", is_flag=True, help="Look once, then exit.")
@pass_context
@handles_errors
def deadlines_run(ctx: Context, once: bool) -> None:
    """Hand off every wait whose deadline passed (actor devs:deadline) and
    send the reminders due (DEVS_HUMAN_REMINDER), each second until SIGTERM
    or Ctrl-C; with --once, one look. devs serve does this itself: this is
    for those who run no server. Several may run: one looks at a time."""
    from devs.adapters.notify.settings import reminder_setting
    from devs.adapters.notify.sweeper import SWEEP_EVERY, Sweeper

    reminder = reminder_setting()  # the endpoints' settings are not its business
    ctx.app.catch_up()  # every wait recorded so far, whoever folds the views
    sweeper = Sweeper(ctx.app, reminder)
    if once:
        expired, reminded = _sweep(sweeper)
        if not sweeper.held:
            plain(
                "another process sweeps this database's deadlines (a devs serve, "
                "or devs deadlines run): nothing done here"
            )
            return
        plain(f"{len(expired)} handed off, {len(reminded)} reminded")
        sweeper.release()
        return
    stop = threading.Event()

    def stopping(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    failing = False
    try:
        while not stop.is_set():
            started = time.monotonic()
            try:
                _sweep(sweeper)
            except DevsError as error:  # the store is away: say so, go on
                if not failing:
                    click.echo(f"devs: cannot sweep now: {error}", err=True)
                failing = True
            else:
                failing = False
            stop.wait(max(SWEEP_EVERY - (time.monotonic() - started), 0.0))
    finally:
        with contextlib.suppress(DevsError):
            sweeper.release()


def _sweep(sweeper: Sweeper) -> tuple[list[str], list[str]]:
    expired, reminded = sweeper.sweep()
    for task_id in expired:
        plain(f"{task_id}: no answer before its deadline; handed off")
    for task_id in reminded:
        plain(f"{task_id}: reminded of its deadline")
    return expired, reminded
