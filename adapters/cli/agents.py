"""``devs hook AGENT`` (the circuit breaker a coding agent runs at each step),
``devs hooks install|uninstall|status`` (its entries in the agent's settings)
and ``devs mcp`` (the referee as an MCP server over stdio). docs/agents.md."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import NoReturn

import click
import orjson

from devs.adapters.cli.base import (
    Context,
    ExitCode,
    cli,
    emit_json,
    fail,
    handles_errors,
    json_option,
    pass_context,
    plain,
)
from devs.adapters.config import DB_ENV, DEFAULT_DB, MEMORY
from devs.adapters.hook_dialects import DIALECTS, Dialect
from devs.adapters.hook_install import (
    LAYOUTS,
    describe,
    hook_command,
    install,
    settings_path,
    status,
    uninstall,
)
from devs.adapters.hooks import (
    Answer,
    Breaker,
    HookSettings,
    HookState,
    Seen,
    default_state_dir,
    place_of,
    store_identity,
    task_base,
)
from devs.domain import DevsError, InvalidInput
from devs.domain.redaction import redact
from devs.domain.service import RecoveryApi

EVENT_MAX = 64 * 1024 * 1024
"""The largest hook event read from stdin (a tool's whole output is in it)."""


class HookTimeout(Exception):
    """The hook took longer than ``DEVS_HOOK_TIMEOUT``."""


def _alarm(signum: int, frame: FrameType | None) -> NoReturn:
    raise HookTimeout


def _say(line: str) -> None:
    click.echo(f"devs hook: {' '.join(redact(line).split())[:2_000]}", err=True)


def respond(
    dialect: Dialect,
    raw: bytes,
    environ: Mapping[str, str],
    open_local: Callable[[], RecoveryApi],
    store: str,
    cli: str = "devs",
) -> tuple[str | None, int]:
    """The answer to one hook event (stdout text and exit code). Every
    failure is one line on stderr and exit code 1, which the agents read as
    a hook that failed without blocking; but a tool call is still refused
    when the task was last seen stopped."""
    try:
        event = orjson.loads(raw)
        if not isinstance(event, dict):
            msg = "the hook event must be a JSON object"
            raise ValueError(msg)
        seen = dialect.read(event)
    except (orjson.JSONDecodeError, ValueError, DevsError) as error:
        _say(f"error: malformed hook event: {error}")
        return None, 1
    state: HookState | None = None
    try:
        settings = HookSettings.from_environ(environ)
        cwd = seen.cwd if seen.cwd and os.path.isdir(seen.cwd) else os.getcwd()
        place = place_of(cwd) if settings.task_id is None else None
        base = settings.task_id or task_base(place)  # type: ignore[arg-type]
        state = HookState(
            settings.state_dir,
            store_identity(settings.url, environ) if settings.url else store,
            base,
        )
        opener = open_local
        if settings.url is not None:
            cli = f"devs (on the machine of {settings.url}, or its HTTP API)"
            url, token = settings.url, settings.token

            def opener() -> RecoveryApi:
                from devs.adapters.client import HttpRecoveryClient

                return HttpRecoveryClient(url, token=token, timeout=settings.timeout)

        breaker = Breaker(
            opener,
            agent=dialect.agent,
            base=base,
            explicit=settings.task_id is not None,
            state=state,
            gate_pattern=settings.gate_pattern,
            place=place,
            cli=cli,
        )
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, settings.timeout)
        try:
            answer = breaker.handle(seen)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    except Exception as error:  # every failure: said, never a traceback
        return _failed(dialect, seen, state, error)
    return dialect.write(seen, answer)


def _failed(
    dialect: Dialect, seen: Seen, state: HookState | None, error: BaseException
) -> tuple[str | None, int]:
    if isinstance(error, HookTimeout):
        what = "no answer from the store within DEVS_HOOK_TIMEOUT"
    elif isinstance(error, DevsError):
        what = str(error)
    else:
        what = f"{type(error).__name__}: {error}"
    known = state.peek().stopped if state is not None else None
    if known and seen.kind == "pre_tool":
        _say(f"warning: {what}; the task was last seen stopped, so the tool is refused")
        return dialect.write(seen, Answer(deny=known))
    _say(f"error: {what}")
    return None, 1


@cli.command("hook")
@click.argument("agent", type=click.Choice(sorted(DIALECTS)))
@pass_context
def hook(ctx: Context, agent: str) -> None:
    """Answer one hook event of AGENT, read as JSON on stdin (docs/agents.md).

    The agent runs this at each step; `devs hooks install AGENT` sets it up.
    The task is DEVS_TASK_ID, else the repository and branch of the event's
    working directory. With DEVS_URL (and DEVS_API_TOKEN) it asks a running
    `devs serve`, else it opens the store (DEVS_DB / DEVS_DATABASE_URL).
    """
    raw = sys.stdin.buffer.read(EVENT_MAX + 1)
    if len(raw) > EVENT_MAX:
        _say(f"error: the hook event is larger than {EVENT_MAX} bytes")
        sys.exit(1)

    def open_local() -> RecoveryApi:
        return ctx.app

    try:
        store = f"sqlite:{os.path.abspath(ctx.db)}"
        if ctx.settings.database_url is not None:
            store = f"pg:{ctx.settings.database_url.get_secret_value()}"
    except DevsError as error:
        _say(f"error: {error}")
        sys.exit(1)
    cli_name = "devs"
    if ctx.db != DEFAULT_DB:
        cli_name = f"devs --db {shlex.quote(ctx.db)}"
    text, code = respond(
        DIALECTS[agent], raw, os.environ, open_local, store, cli=cli_name
    )
    if text is not None:
        click.echo(text)
    sys.exit(code)


@cli.command("mcp")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Where run_gate runs its commands (default: the current directory).",
)
@pass_context
def mcp_command(ctx: Context, workdir: str | None) -> None:
    """Serve the referee as an MCP server over stdio (docs/agents.md).

    Tools: start_task, begin_attempt, record_gate, run_gate, report_entropy,
    log_lesson, task_status, lessons. `devs serve` serves the same at /mcp.
    """
    from devs.adapters.mcp import build_server

    try:
        service = ctx.app
    except DevsError as error:
        fail(str(error), ExitCode(error.exit_code))
        raise  # not reached
    server = build_server(
        lambda: service, workdir=Path(workdir).resolve() if workdir else None
    )
    server.run("stdio")


# ------------------------------------------------------------ devs hooks


def this_devs() -> str:
    """The absolute path of the ``devs`` running now (what the agent runs)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "devs" and os.path.exists(argv0):
        return os.path.abspath(argv0)
    found = shutil.which("devs")
    if found is not None:
        return os.path.abspath(found)
    msg = "cannot find the devs command on PATH: install devs-recovery first"
    raise InvalidInput(msg, field="devs")


def hooks_db(ctx: Context) -> str:
    """The store the installed hooks use: --db or DEVS_DB when given (made
    absolute), else ``devs_state.sqlite`` beside the hooks' state files."""
    given = ctx.db_option or os.environ.get(DB_ENV, "").strip()
    if given:
        return given if given == MEMORY else os.path.abspath(given)
    return str(default_state_dir(os.environ).parent / DEFAULT_DB)


agent_choice = click.argument("agent", type=click.Choice(sorted(LAYOUTS)))
dir_option = click.option(
    "--dir",
    "project",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="The project whose settings get the hooks.",
)
user_option = click.option(
    "--user", is_flag=True, help="The user's settings (every project) instead."
)


@cli.group()
def hooks() -> None:
    """The circuit breaker's hooks in a coding agent's settings."""


@hooks.command("install")
@agent_choice
@dir_option
@user_option
@pass_context
@handles_errors
def hooks_install(ctx: Context, agent: str, project: str, user: bool) -> None:
    """Write the breaker's hooks into AGENT's settings (merged; idempotent).

    The hooks run this devs with the store given now (--db or DEVS_DB, else
    devs_state.sqlite in the hooks' state folder), so that a human's
    `devs resume` finds the same store. DEVS_URL and DEVS_API_TOKEN, to ask
    a team's `devs serve`, are read from the agent's environment.
    """
    layout = LAYOUTS[agent]
    path = settings_path(layout, project=Path(project), user=user, home=Path.home())
    command = hook_command(this_devs(), hooks_db(ctx), agent)
    changed = install(layout, path, command)
    verb = "installed in" if changed else "already installed in"
    plain(f"{agent}: devs-recovery's hooks {verb} {path}")
    plain(f"  command: {command}")


@hooks.command("uninstall")
@agent_choice
@dir_option
@user_option
@handles_errors
def hooks_uninstall(agent: str, project: str, user: bool) -> None:
    """Remove exactly the breaker's own hooks from AGENT's settings."""
    layout = LAYOUTS[agent]
    path = settings_path(layout, project=Path(project), user=user, home=Path.home())
    changed = uninstall(layout, path)
    plain(
        f"{agent}: devs-recovery's hooks removed from {path}"
        if changed
        else f"{agent}: no devs-recovery hooks in {path}"
    )


@hooks.command("status")
@dir_option
@json_option
def hooks_status(project: str, as_json: bool) -> None:
    """Which agents' settings (this project's, the user's) run the breaker."""
    found = [
        status(
            layout,
            settings_path(layout, project=Path(project), user=user, home=Path.home()),
        )
        for layout in LAYOUTS.values()
        for user in (False, True)
    ]
    if as_json:
        emit_json(
            [
                {
                    "agent": item.agent,
                    "path": str(item.path),
                    "installed": bool(item.events),
                    "events": list(item.events),
                    "commands": list(item.commands),
                    "missing": list(item.missing),
                    "error": item.error,
                }
                for item in found
            ]
        )
        return
    for line in describe(found):
        plain(line)
