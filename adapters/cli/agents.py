"""``devs hook AGENT`` (the circuit breaker a coding agent runs at each step),
``devs hooks install|uninstall|status`` (its entries in the agent's settings)
and ``devs mcp`` (the referee as an MCP server over stdio). docs/agents.md."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import click

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
from devs.adapters.hooks.breaker import default_state_dir
from devs.adapters.hooks.client import EVENT_MAX
from devs.adapters.hooks.dialect import Agent
from devs.adapters.hooks.install import (
    describe,
    hook_command,
    install,
    settings_path,
    status,
    uninstall,
)
from devs.adapters.hooks.registry import AGENTS, every, load
from devs.adapters.hooks.runner import handle
from devs.domain import DevsError, InvalidInput
from devs.domain.redaction import redact


@cli.command("hook")
@click.argument("agent", type=click.Choice(sorted(AGENTS)))
@pass_context
def hook(ctx: Context, agent: str) -> None:
    """Answer one hook event of AGENT, read as JSON on stdin (docs/agents.md).

    The agent runs this at each step; `devs hooks install AGENT` sets it up.
    The task is DEVS_TASK_ID, else the repository and branch of the event's
    working directory. With DEVS_URL (and DEVS_API_TOKEN) it asks a running
    `devs serve`, else it opens the store (DEVS_DB / DEVS_DATABASE_URL).
    Installed as `devs --db FILE hook AGENT`, it is answered by the hook
    server of that store (started at the first call, gone when idle).
    """
    raw = sys.stdin.buffer.read(EVENT_MAX + 1)
    text, errors, code = handle(agent, ctx.db_option, raw, os.environ)
    if errors:
        sys.stderr.write(errors)
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


agent_choice = click.argument("agent", type=click.Choice(sorted(AGENTS)))
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
@click.option(
    "--url",
    default=None,
    metavar="URL",
    help="POST the events to the devs serve at URL (http hooks; Claude Code) "
    "instead of running devs: no process per call.",
)
@pass_context
@handles_errors
def hooks_install(
    ctx: Context, agent: str, project: str, user: bool, url: str | None
) -> None:
    """Write the breaker's hooks into AGENT's settings (merged; idempotent).

    The hooks run this devs with the store given now (--db or DEVS_DB, else
    devs_state.sqlite in the hooks' state folder), so that a human's
    `devs resume` finds the same store. DEVS_URL and DEVS_API_TOKEN, to ask
    a team's `devs serve`, are read from the agent's environment. With
    --url, the agent POSTs each event to that devs serve itself (its token
    from the agent's DEVS_API_TOKEN).
    """
    found = load(agent)
    layout = found.layout
    if url is not None:
        if not found.http:
            posting = ", ".join(name for name in AGENTS if load(name).http)
            msg = f"{agent} has no http hooks: --url is for {posting}"
            raise InvalidInput(msg, field="url")
        if "@" in url.split("//", 1)[-1].split("/", 1)[0]:
            msg = (
                "--url must not carry credentials (user:password@): the hooks "
                "send the agent's DEVS_API_TOKEN; nothing was written"
            )
            raise InvalidInput(msg, field="url")
        if not re.fullmatch(r"https?://[^\s/?#@]{1,255}(/[^\s?#]{0,1000})?", url):
            msg = (
                "--url must be the http:// or https:// URL of a devs serve, "
                f"got {url[:80]!r}"
            )
            raise InvalidInput(msg, field="url")
    path = settings_path(layout, project=Path(project), user=user, home=Path.home())
    command = hook_command(this_devs(), hooks_db(ctx), agent)
    changed = install(layout, path, command, url=url)
    verb = "installed in" if changed else "already installed in"
    plain(f"{agent}: devs-recovery's hooks {verb} {path}")
    if url is None:
        plain(f"  command: {command}")
    else:
        plain(redact(f"  posting to: {url.rstrip('/')}/hooks/{agent}"))
        plain("  (the agent's environment holds DEVS_API_TOKEN, if the server has one)")
    if (untrusted := trusted(found, path, None if user else Path(project))) is not None:
        plain(f"  {untrusted}")


def trusted(agent: Agent, path: Path, project: Path | None) -> str | None:
    """What ``agent`` has not trusted yet of its hooks in ``path`` (an
    agent that skips hooks until the user trusts them), else ``None``."""
    return agent.trust(path, project, os.environ) if agent.trust else None


@hooks.command("uninstall")
@agent_choice
@dir_option
@user_option
@handles_errors
def hooks_uninstall(agent: str, project: str, user: bool) -> None:
    """Remove exactly the breaker's own hooks from AGENT's settings."""
    layout = load(agent).layout
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
    agents = {agent.name: agent for agent in every()}
    found = [
        status(
            agent.layout,
            settings_path(
                agent.layout, project=Path(project), user=user, home=Path.home()
            ),
        )
        for agent in agents.values()
        for user in (False, True)
    ]
    projects = [Path(project), None] * len(agents)
    untrusted = [
        trusted(agents[item.agent], item.path, where) if item.events else None
        for item, where in zip(found, projects, strict=True)
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
                    "untrusted": why,
                }
                for item, why in zip(found, untrusted, strict=True)
            ]
        )
        return
    for line in describe(found):
        plain(line)
    for item, why in zip(found, untrusted, strict=True):
        if why is not None:
            plain(f"{item.agent}: {item.path}: {why}")
