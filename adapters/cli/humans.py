"""What humans do: ``resume``, ``rewind``, ``skip``, claims on any stop
(``claim``, ``release``, ``take-over``), the hand-off queue (``handoffs``,
``resolve``), ``sessions`` and ``lessons``.

Every answer takes ``--if-version N``: the task's version it answers (``devs task
show`` says it); if the task has moved on since, the answer is refused
(``stale_answer``) and nothing is written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import click

from devs.adapters.cli.base import (
    TIME,
    Context,
    acted,
    cli,
    default_actor,
    emit_json,
    field_option,
    handles_errors,
    json_option,
    pass_context,
    plain,
    shortened,
    show_rows,
    task_argument,
)
from devs.adapters.cli.tasks import spend_line
from devs.domain import (
    NotFound,
    RecoveryService,
)
from devs.domain.arguments import COMMANDS
from devs.domain.values import ResolutionName

F = TypeVar("F", bound=Callable[..., object])

NO_REASON = "(no reason given)"


def answer_options(command: str) -> Callable[[F], F]:
    """``--reason`` (if ``command`` takes one), ``--actor`` and
    ``--if-version``: the fields of ``command``'s arguments
    (:data:`~devs.domain.arguments.COMMANDS`), in their words and limits."""
    options = []
    if "reason" in COMMANDS[command].model_fields:
        options.append(
            field_option(
                "--reason",
                command=command,
                field="reason",
                default=NO_REASON,
                show_default=True,
            )
        )
    options.append(
        field_option(
            "--actor",
            command=command,
            field="actor",
            default=default_actor,
            show_default="the OS user",
        )
    )
    options.append(
        field_option(
            "--if-version",
            "if_version",
            command=command,
            field="if_version",
            more="`devs task show TASK` says it.",
        )
    )

    def decorate(function: F) -> F:
        decorated: Any = function
        for option in reversed(options):
            decorated = option(decorated)
        return cast("F", decorated)

    return decorate


@cli.command()
@task_argument()
@answer_options("resume")
@json_option
@pass_context
@handles_errors
def resume(
    ctx: Context,
    task_id: str,
    reason: str,
    actor: str,
    if_version: int | None,
    as_json: bool,
) -> None:
    """Let the agent go on with TASK_ID after an escalation or a pause."""
    result = ctx.app.resume(task_id, actor=actor, reason=reason, if_version=if_version)
    acted(result, as_json, f"{task_id}: resumed by {actor} ({result.state})")


@cli.command()
@task_argument(required=False, default=None)
@click.option(
    "--run",
    "run_id",
    default=None,
    help="Set this run's budget (--usd: every task of it together) instead.",
)
@field_option("--usd", command="raise_budget", field="usd", ranges=False)
@field_option("--tokens", command="raise_budget", field="tokens", ranges=False)
@answer_options("raise_budget")
@json_option
@pass_context
@handles_errors
def budget(
    ctx: Context,
    task_id: str | None,
    run_id: str | None,
    usd: float | None,
    tokens: int | None,
    reason: str,
    actor: str,
    if_version: int | None,
    as_json: bool,
) -> None:
    """Set TASK_ID's budget (--usd, --tokens or both) above what it spent,
    or with --run RUN the run's (--usd) above what its tasks spent.

    A task a budget stopped may then be resumed (`devs resume TASK`).
    """
    if (task_id is None) == (run_id is None):
        msg = "give a TASK_ID or --run RUN (one of them)"
        raise click.UsageError(msg)
    if run_id is not None:
        if usd is None or tokens is not None or if_version is not None:
            msg = "a run's budget is --usd alone (no --tokens, no --if-version)"
            raise click.UsageError(msg)
        state = ctx.app.raise_run_budget(run_id, usd=usd, actor=actor, reason=reason)
        if as_json:
            emit_json(state)
            return
        spent = ctx.app.run_spend(run_id)
        plain(
            f"run {run_id}: USD {spent.spent_usd:.4f} of {usd:g} spent: budget set "
            f"by {actor} ({state.status}); resume each task it stopped"
        )
        return
    assert task_id is not None
    result = ctx.app.raise_budget(
        task_id,
        usd=usd,
        tokens=tokens,
        actor=actor,
        reason=reason,
        if_version=if_version,
    )
    acted(
        result,
        as_json,
        f"{spend_line(task_id, result.spend)}: budget set by {actor} ({result.state})",
    )


@cli.command()
@task_argument()
@field_option("--to-commit", command="rewind", field="to_commit")
@answer_options("rewind")
@json_option
@pass_context
@handles_errors
def rewind(
    ctx: Context,
    task_id: str,
    to_commit: str | None,
    reason: str,
    actor: str,
    if_version: int | None,
    as_json: bool,
) -> None:
    """Send TASK_ID back to work from a commit; revert your checkout to it."""
    result = ctx.app.rewind(
        task_id,
        actor=actor,
        reason=reason,
        to_commit=to_commit,
        if_version=if_version,
    )
    target = result.to_commit or "(no commit recorded)"
    acted(
        result,
        as_json,
        f"{task_id}: rewound by {actor}; revert to {target} ({result.state})",
    )


def waiting_task(app: RecoveryService) -> str:
    """The one task waiting for a human, for ``devs skip`` without a task."""
    waiting = [t.task_id for t in app.waiting_tasks()]
    if not waiting:
        raise NotFound("no task is waiting for a human; name the task to skip")
    if len(waiting) > 1:
        raise click.UsageError(
            f"several tasks wait for a human ({', '.join(sorted(waiting))}); name one"
        )
    return waiting[0]


@cli.command()
@task_argument(required=False)
@answer_options("skip")
@json_option
@pass_context
@handles_errors
def skip(
    ctx: Context,
    task_id: str | None,
    reason: str,
    actor: str,
    if_version: int | None,
    as_json: bool,
) -> None:
    """Skip TASK_ID (default: the one task waiting for a human); its run moves on."""
    target = task_id if task_id is not None else waiting_task(ctx.app)
    result = ctx.app.skip(target, actor=actor, reason=reason, if_version=if_version)
    after = f"; next node {result.next_node}" if result.next_node else ""
    acted(result, as_json, f"{target}: skipped by {actor}{after}")


@cli.command()
@json_option
@pass_context
@handles_errors
def handoffs(ctx: Context, as_json: bool) -> None:
    """The hand-off queue, oldest first."""
    show_rows(
        ctx.app.handoff_queue(),
        as_json,
        empty="the hand-off queue is empty",
        title="Hand-off queue",
        columns=(
            "task",
            "failures",
            "last error",
            "agent",
            "last commit",
            "claimed by",
        ),
        whole=("task",),
        row=lambda entry: (
            entry.payload.task_id,
            str(entry.payload.failure_count),
            shortened(entry.payload.last_error, 60),
            entry.payload.originating_agent or "-",
            entry.payload.last_commit or "-",
            entry.claimed_by or "-",
        ),
    )


@cli.command()
@task_argument()
@answer_options("claim")
@json_option
@pass_context
@handles_errors
def claim(
    ctx: Context, task_id: str, actor: str, if_version: int | None, as_json: bool
) -> None:
    """Say "I'm on it" for TASK_ID's stop (an escalation, a pause or a
    hand-off): until you release it, or someone takes it over, only you may
    answer it."""
    result = ctx.app.claim(task_id, actor=actor, if_version=if_version)
    acted(result, as_json, f"{task_id}: claimed by {actor} ({result.state})")


@cli.command()
@task_argument()
@answer_options("release")
@json_option
@pass_context
@handles_errors
def release(
    ctx: Context, task_id: str, actor: str, if_version: int | None, as_json: bool
) -> None:
    """Let go of your claim on TASK_ID: anyone may answer it again."""
    result = ctx.app.release(task_id, actor=actor, if_version=if_version)
    acted(result, as_json, f"{task_id}: released by {actor} ({result.state})")


@cli.command(name="take-over")
@task_argument()
@answer_options("take_over")
@json_option
@pass_context
@handles_errors
def take_over(
    ctx: Context,
    task_id: str,
    reason: str,
    actor: str,
    if_version: int | None,
    as_json: bool,
) -> None:
    """Take TASK_ID's claimed stop over from its claimer (recorded: who took
    it from whom, and why)."""
    result = ctx.app.take_over(
        task_id, actor=actor, reason=reason, if_version=if_version
    )
    acted(
        result,
        as_json,
        f"{task_id}: taken over by {actor} from {result.previous} ({result.state})",
    )


@cli.command()
@task_argument()
@field_option(
    "--resolution",
    "--as",
    "resolution",
    command="resolve_handoff",
    field="resolution",
    required=True,
    more="Python and HTTP name it `resolution=`; --as is its older name.",
)
@answer_options("resolve_handoff")
@json_option
@pass_context
@handles_errors
def resolve(
    ctx: Context,
    task_id: str,
    resolution: ResolutionName,  # the field's click.Choice gives no other
    reason: str,
    actor: str,
    if_version: int | None,
    as_json: bool,
) -> None:
    """End TASK_ID's hand-off (if someone claimed it, only they may)."""
    result = ctx.app.resolve_handoff(
        task_id,
        actor=actor,
        resolution=resolution,
        reason=reason,
        if_version=if_version,
    )
    after = f"; next node {result.next_node}" if result.next_node else ""
    acted(
        result,
        as_json,
        f"{task_id}: resolved as {resolution} by {actor} ({result.state}){after}",
    )


@cli.command()
@json_option
@pass_context
@handles_errors
def sessions(ctx: Context, as_json: bool) -> None:
    """Pending human sessions."""
    show_rows(
        ctx.app.pending_sessions(),
        as_json,
        empty="no pending human sessions",
        title="Pending human sessions",
        columns=(
            "session",
            "task",
            "reason",
            "opened",
            "failures",
            "entropy",
            "claimed by",
        ),
        whole=("session", "task"),
        row=lambda session: (
            session.session_id,
            session.task_id,
            session.reason,
            session.opened_at.strftime(TIME),
            str(session.failure_count),
            f"{session.entropy_score:g}" if session.entropy_score is not None else "-",
            session.claimed_by or "-",
        ),
    )


@cli.command()
@task_argument()
@json_option
@pass_context
@handles_errors
def lessons(ctx: Context, task_id: str, as_json: bool) -> None:
    """TASK_ID's lessons: the strategies that failed and why."""
    show_rows(
        ctx.app.lessons(task_id),
        as_json,
        empty=f"no lessons for {task_id}",
        title=f"Lessons of {task_id}",
        columns=("failed strategy", "root cause", "logged"),
        row=lambda item: (
            shortened(item.failed_strategy, 80),
            shortened(item.rca_summary, 80),
            item.logged_at.strftime(TIME),
        ),
    )
