"""``devs serve``: the HTTP service (docs/http.md)."""

from __future__ import annotations

import ipaddress
import os
import secrets

import click

from devs.adapters.cli.base import (
    Context,
    ExitCode,
    cli,
    fail,
    handles_errors,
    pass_context,
)
from devs.adapters.config import (
    CONSOLE_SECRET_ENV,
    DB_ENV,
    Backend,
    Projections,
    Settings,
    backend_of,
)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Worker processes (each opens the database).",
)
@pass_context
@handles_errors
def serve(ctx: Context, host: str, port: int, workers: int) -> None:
    """Serve the HTTP API (every command and query as JSON; /openapi.json).

    With DEVS_API_TOKEN set, every request but /healthz needs
    `Authorization: Bearer <token>`; a non-loopback --host needs it. A
    request is answered only when its Host is the address it arrived at, a
    loopback name or one of DEVS_ALLOWED_HOSTS (else 421); headers, bodies and
    connections are bounded before the token is checked (DEVS_MAX_*,
    DEVS_HEADER_TIMEOUT, DEVS_BODY_TIMEOUT; docs/http.md).

    Each worker prints one line to stderr once it listens; with
    DEVS_ACCESS_LOG=1 each request is logged to stdout. Stop it with SIGTERM
    (or Ctrl-C) to this process: its workers finish their requests, and die
    with it even on SIGKILL.
    """
    # the server's libraries load only for this command
    from devs.adapters import serving
    from devs.adapters.notify.registry import channels_of
    from devs.adapters.notify.sender import open_channels
    from devs.adapters.notify.settings import notify_settings

    # Every setting is checked here, not in each worker, and a store that
    # cannot be opened fails now: one line, the documented exit code.
    settings: Settings = ctx.settings
    if not is_loopback(host) and settings.api_token is None:
        fail(
            f"refusing to serve on {host}, which is not a loopback address, "
            "without DEVS_API_TOKEN: set a token, or bind 127.0.0.1",
            ExitCode.REFUSED,
        )
    # A wrong DEVS_WEBHOOK_*, DEVS_SMTP_URL, …: refused now. With endpoints,
    # a process of their own sends to them, beside the workers.
    notify = notify_settings()
    notifier = bool(channels_of(notify))
    os.environ[DB_ENV] = settings.db  # the workers open the same database
    if settings.console_secret is None:
        # One key for the console's sessions, shared by this server's
        # workers (a session signed by one is good on the others); a new one
        # at each start signs everyone out. Several servers share one with
        # DEVS_CONSOLE_SECRET.
        os.environ[CONSOLE_SECRET_ENV] = secrets.token_urlsafe(32)
    app = ctx.app
    projector = (
        backend_of(app) is Backend.POSTGRES
        and settings.projections is not Projections.EXTERNAL
    )
    # The endpoints hear of what is recorded from now on: opened before any
    # worker answers, so no message of this run is taken for history.
    open_channels(app, notify)
    app.close()
    niceness = settings.worker_niceness
    try:
        serving.serve(
            host,
            port,
            workers,
            projector=projector,
            notifier=notifier,
            niceness=niceness,
        )
    except OSError as error:  # the address is taken, or not this machine's
        fail(f"cannot listen on {host}:{port}: {error}", ExitCode.REFUSED)
