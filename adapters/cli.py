"""The ``devs`` command line over :class:`~devs.domain.RecoveryService`.

Human-readable by default, ``--json`` for tooling. Exit codes let a shell loop
branch on the decision (see :class:`ExitCode` and docs/cli.md). The database is
``--db``, else ``$DEVS_DB``, else ``./devs_state.sqlite``.
"""

from __future__ import annotations

import functools
import getpass
import logging
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from enum import IntEnum
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import click
import orjson
from eventsourcing.persistence import PersistenceError
from pydantic import BaseModel
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from devs.adapters import presenters
from devs.adapters.demo import run_demo
from devs.adapters.sandbox import DEFAULT_OUTPUT_CAP, run_gate
from devs.domain import (
    AlreadyExists,
    AttemptDecision,
    DevsError,
    EntropyDecision,
    GateDecision,
    IllegalTransition,
    InvalidInput,
    NotFound,
    Outcome,
    RecoveryService,
    TaskSummary,
)
from devs.domain.application import DB_ENV, DEFAULT_DB
from devs.domain.chart import mermaid
from devs.domain.redaction import redact

P = ParamSpec("P")
R = TypeVar("R")


class ExitCode(IntEnum):
    """What a shell loop can branch on."""

    OK = 0  # continue: the command worked, the gate passed, the attempt may proceed
    RETRY = 1  # the gate failed below the thresholds: try again
    USAGE = 2  # the command line was wrong (click's own code)
    ESCALATED = 3  # a human is asked (max retries)
    PAUSED = 4  # a human is asked (blacklisted strategy, entropy limit)
    HANDED_OFF = 5  # the task went to the human queue
    BAD_INPUT = 6  # a value was out of range or malformed; nothing was written
    NOT_FOUND = 7  # an unknown task, run or projection id
    REFUSED = (
        8  # not allowed in the current state (illegal transition); nothing written
    )


_OUTCOME_CODES = {
    Outcome.ADVANCE: ExitCode.OK,
    Outcome.COMPLETE: ExitCode.OK,
    Outcome.STAY: ExitCode.RETRY,
    Outcome.PAUSE: ExitCode.PAUSED,
    Outcome.ESCALATE: ExitCode.ESCALATED,
    Outcome.HAND_OFF: ExitCode.HANDED_OFF,
}

_ERROR_CODES: tuple[tuple[type[DevsError], ExitCode], ...] = (
    (InvalidInput, ExitCode.BAD_INPUT),
    (NotFound, ExitCode.NOT_FOUND),
    (IllegalTransition, ExitCode.REFUSED),
    (AlreadyExists, ExitCode.REFUSED),
)

out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, highlight=False)


# ------------------------------------------------------------------ plumbing


class Context:
    """Per-invocation state: where the database is, and the service once opened."""

    def __init__(self, db: str | None) -> None:
        self.db = db or os.environ.get(DB_ENV) or DEFAULT_DB
        self._app: RecoveryService | None = None

    @property
    def app(self) -> RecoveryService:
        if self._app is None:
            try:
                self._app = RecoveryService(env={"SQLITE_DBNAME": self.db})
            except PersistenceError as error:
                msg = f"cannot open the database {self.db!r}: {error}"
                raise InvalidInput(msg) from None
        return self._app

    def close(self) -> None:
        if self._app is not None:
            self._app.close()


def fail(message: str, code: ExitCode) -> None:
    err.print(f"devs: error: {message}", markup=False, soft_wrap=True)
    sys.exit(int(code))


def handles_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn the service's errors into a one-line message and a documented code."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except DevsError as error:
            for error_class, code in _ERROR_CODES:
                if isinstance(error, error_class):
                    fail(" ".join(str(error).split()), code)
            raise

    return wrapper


def emit_json(value: Any) -> None:
    def default(obj: Any) -> Any:
        if isinstance(obj, BaseModel):
            return obj.model_dump(mode="json")
        raise TypeError

    click.echo(
        orjson.dumps(value, default=default, option=orjson.OPT_INDENT_2).decode()
    )


def plain(text: str) -> None:
    """Print exact text to stdout (no markup, no wrapping)."""
    click.echo(text)


def default_actor() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
reason_option = click.option(
    "--reason",
    default="(no reason given)",
    show_default=True,
    help="Why, for the audit.",
)
actor_option = click.option(
    "--actor", default=default_actor, show_default="the OS user", help="Who acts."
)

pass_context = click.make_pass_decorator(Context)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"SQLite file (default: ${DB_ENV}, else ./{DEFAULT_DB}).",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Also write each decision as a JSON line to stderr.",
)
@click.version_option(package_name="devs-recovery")
@click.pass_context
def cli(ctx: click.Context, db: str | None, verbose: bool) -> None:
    """devs-recovery: keep AI coding agents out of failure loops."""
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        decisions = logging.getLogger("devs.decisions")
        decisions.addHandler(handler)
        decisions.setLevel(logging.INFO)
        ctx.call_on_close(lambda: decisions.removeHandler(handler))
    context = Context(db)
    ctx.obj = context
    ctx.call_on_close(context.close)


TIME = "%Y-%m-%d %H:%M:%S"


def show_rows(
    items: Sequence[Any],
    as_json: bool,
    *,
    empty: str,
    title: str,
    columns: Sequence[str],
    row: Callable[[Any], Sequence[str]],
) -> None:
    """A listing: JSON for tooling, else a table (or a line when it is empty)."""
    if as_json:
        emit_json(items)
        return
    if not items:
        plain(empty)
        return
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for item in items:
        table.add_row(*row(item))
    out.print(table)


# ------------------------------------------------------------ decision output


def stop_block(app: RecoveryService, decision: AttemptDecision | GateDecision) -> str:
    """The escalation or hand-off block for a decision that stopped the agent."""
    if decision.outcome is Outcome.ESCALATE and decision.report is not None:
        return presenters.escalation_block(decision.report)
    if decision.outcome is Outcome.HAND_OFF:
        payload = app.task(decision.task_id).handoff
        if payload is not None:
            return presenters.handoff_block(payload)
    return ""


def show_attempt(
    app: RecoveryService, decision: AttemptDecision, strategy: str, as_json: bool
) -> None:
    if as_json:
        emit_json(decision)
    else:
        plain(presenters.attempt_line(decision))
        if decision.blacklisted:
            plain(presenters.blacklist_block(decision, strategy))
        if block := stop_block(app, decision):
            plain(block)
    if decision.proceed or decision.outcome is None:
        sys.exit(int(ExitCode.OK))
    sys.exit(int(_OUTCOME_CODES[decision.outcome]))


def show_gate(app: RecoveryService, decision: GateDecision, as_json: bool) -> None:
    if as_json:
        emit_json(decision)
    else:
        plain(presenters.gate_line(decision))
        if block := stop_block(app, decision):
            plain(block)
    sys.exit(int(_OUTCOME_CODES[decision.outcome]))


# ------------------------------------------------------------------- commands


@cli.command()
@click.option("--run", "run_id", default=None, help="Only the tasks of this run.")
@json_option
@pass_context
@handles_errors
def status(ctx: Context, run_id: str | None, as_json: bool) -> None:
    """Tasks by state."""
    tasks = ctx.app.tasks(run_id=run_id)
    if run_id is not None:
        ctx.app.run_state(run_id)  # an unknown run is an error, not an empty list
    order = {
        state: i
        for i, state in enumerate(
            (
                "ESCALATION",
                "HAND_OFF",
                "PAUSED",
                "GATE_FAILED",
                "RUNNING",
                "COMPLETED",
                "SKIPPED",
            )
        )
    }
    show_rows(
        tasks if as_json else sorted(tasks, key=lambda t: (order[t.state], t.task_id)),
        as_json,
        empty="no tasks",
        title="Tasks by state",
        columns=("state", "task", "run", "failures", "updated"),
        row=lambda t: (
            t.state,
            t.task_id,
            t.run_id or "-",
            str(t.consecutive_failures),
            t.updated_at.strftime(TIME),
        ),
    )


@cli.group()
def task() -> None:
    """Start and show tasks."""


@task.command("start")
@click.argument("task_id")
@click.option("--run", "run_id", default=None, help="The run whose node this task is.")
@click.option("--agent", default=None, help="The agent working on it.")
@click.option("--commit", "last_commit", default=None, help="The starting commit.")
@json_option
@pass_context
@handles_errors
def task_start(
    ctx: Context,
    task_id: str,
    run_id: str | None,
    agent: str | None,
    last_commit: str | None,
    as_json: bool,
) -> None:
    """Start refereeing TASK_ID."""
    summary = ctx.app.start_task(
        task_id, run_id=run_id, agent=agent, last_commit=last_commit
    )
    if as_json:
        emit_json(summary)
    else:
        plain(f"started task {summary.task_id} ({summary.state})")


def describe_task(summary: TaskSummary) -> str:
    policy = summary.policy
    lines = [
        f"task {summary.task_id}: {summary.state} ({summary.status})",
        f"  run: {summary.run_id or '-'}   agent: {summary.agent or '-'}",
        f"  consecutive failures: {summary.consecutive_failures}"
        f"  (escalate at {policy.escalation_threshold}, hand off at "
        f"{policy.handoff_threshold}, entropy limit {policy.hitl_entropy_threshold:g})",
        f"  commits: started at {summary.starting_commit or '-'}, "
        f"last {summary.last_commit or '-'}",
        f"  lessons: {len(summary.lessons)}   events: {summary.version}",
    ]
    if summary.pending_session is not None:
        session = summary.pending_session
        lines.append(
            f"  waiting for a human: {session.reason} (session {session.session_id})"
        )
    if summary.handoff is not None:
        claimed = summary.claimed_by or "nobody yet"
        lines.append(f"  handed off; claimed by {claimed}")
    for failure in summary.failure_history[-5:]:
        lines.append(
            f"  - {failure.at:%H:%M:%S} {failure.reason} {failure.gate or ''} "
            f"{presenters.one_line(failure.error_message, 100)}".rstrip()
        )
    return "\n".join(lines)


@task.command("show")
@click.argument("task_id")
@json_option
@pass_context
@handles_errors
def task_show(ctx: Context, task_id: str, as_json: bool) -> None:
    """Show TASK_ID as its events say now."""
    summary = ctx.app.task(task_id)
    if as_json:
        emit_json(summary)
    else:
        plain(describe_task(summary))


@cli.command()
@click.argument("task_id")
@click.option(
    "--at", "at_version", type=int, default=None, help="Stop at this version."
)
@json_option
@pass_context
@handles_errors
def history(ctx: Context, task_id: str, at_version: int | None, as_json: bool) -> None:
    """The audited history of TASK_ID, replayed event by event."""
    entries = ctx.app.history(task_id)
    if at_version is not None:
        summary = ctx.app.state_at(task_id, at_version)
        entries = [e for e in entries if e.version <= at_version]
    if as_json:
        emit_json(
            entries if at_version is None else {"history": entries, "state": summary}
        )
        return
    for entry in entries:
        plain(presenters.history_line(entry))
    if at_version is not None:
        plain(describe_task(summary))


@cli.command()
@click.argument("task_id")
@click.argument("strategy")
@json_option
@pass_context
@handles_errors
def attempt(ctx: Context, task_id: str, strategy: str, as_json: bool) -> None:
    """Check STRATEGY against TASK_ID's lessons before calling the LLM.

    Exit 0: proceed (the directive is printed with --json); 4: paused (the
    strategy already failed); 3 or 5 when that failure escalates or hands off.
    """
    decision = ctx.app.begin_attempt(task_id, strategy)
    show_attempt(ctx.app, decision, strategy, as_json)


@cli.command()
@click.argument("task_id")
@click.argument("strategy")
@click.argument("rca")
@json_option
@pass_context
@handles_errors
def lesson(ctx: Context, task_id: str, strategy: str, rca: str, as_json: bool) -> None:
    """Record that STRATEGY failed for TASK_ID, and why (RCA)."""
    logged = ctx.app.log_lesson(task_id, strategy, rca)
    if as_json:
        emit_json(logged)
    else:
        plain(
            f"lesson logged for {logged.task_id}: "
            f"{presenters.one_line(logged.failed_strategy, 120)}"
        )


@cli.command()
@click.argument("task_id")
@click.argument("score")
@json_option
@pass_context
@handles_errors
def entropy(ctx: Context, task_id: str, score: str, as_json: bool) -> None:
    """Report the agent's entropy SCORE (0 to 1) for TASK_ID.

    Exit 0 below the threshold; 4 when the task pauses for a human.
    """
    try:
        value = float(score)
    except ValueError:
        raise InvalidInput(f"score must be a number in [0, 1], got {score!r}") from None
    decision: EntropyDecision = ctx.app.report_entropy(task_id, value)
    if as_json:
        emit_json(decision)
    elif decision.triggered:
        plain(presenters.entropy_block(decision))
    else:
        plain(
            f"{decision.task_id}: entropy {decision.score:g} below "
            f"{decision.threshold:g}; continue ({decision.state})"
        )
    sys.exit(int(ExitCode.PAUSED if decision.triggered else ExitCode.OK))


@cli.group()
def run() -> None:
    """Start and show orchestration runs."""


@run.command("start")
@click.argument("run_id")
@click.option(
    "--dag",
    "dag_file",
    required=True,
    type=click.File("rb"),
    help="JSON file mapping each node (task id) to its prerequisites; - for stdin.",
)
@json_option
@pass_context
@handles_errors
def run_start(ctx: Context, run_id: str, dag_file: Any, as_json: bool) -> None:
    """Start RUN_ID over a DAG of task ids."""
    try:
        dag = orjson.loads(dag_file.read())
    except orjson.JSONDecodeError as error:
        raise InvalidInput(
            f"--dag {dag_file.name} is not valid JSON: {error}"
        ) from None
    state = ctx.app.start_run(run_id, dag)
    if as_json:
        emit_json(state)
    else:
        plain(
            f"started run {state.run_id}: {len(state.dag)} nodes; ready: "
            f"{', '.join(state.ready) or '-'}"
        )


@run.command("show")
@click.argument("run_id")
@json_option
@pass_context
@handles_errors
def run_show(ctx: Context, run_id: str, as_json: bool) -> None:
    """Show RUN_ID's status and its nodes."""
    state = ctx.app.run_state(run_id)
    if as_json:
        emit_json(state)
        return
    plain(f"run {state.run_id}: {state.status}")
    if state.paused_by:
        plain(f"  paused by: {', '.join(state.paused_by)}")
    table = Table()
    for column in ("node", "prerequisites", "progress"):
        table.add_column(column)
    for node in state.order:
        progress = (
            "completed"
            if node in state.completed
            else "skipped"
            if node in state.skipped
            else "started"
            if node in state.started
            else "ready"
            if node in state.ready
            else "waiting"
        )
        table.add_row(node, ", ".join(state.dag[node]) or "-", progress)
    out.print(table)


@cli.group()
def gate() -> None:
    """Run gates and show gate status."""


@gate.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("task_id")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--gate", "gate_name", default="tests", show_default=True, help="Gate name."
)
@click.option(
    "--timeout", type=float, default=600.0, show_default=True, help="Seconds."
)
@click.option("--cpu", "cpu_seconds", type=int, default=None, help="CPU-seconds limit.")
@click.option(
    "--memory", "memory_mb", type=int, default=None, help="Memory limit, MiB."
)
@click.option(
    "--cwd", type=click.Path(file_okay=False), default=None, help="Working directory."
)
@click.option(
    "--pass-env",
    multiple=True,
    help="Keep this environment variable even if it looks secret (repeatable).",
)
@click.option(
    "--output-cap",
    type=int,
    default=DEFAULT_OUTPUT_CAP,
    show_default=True,
    help="Bytes of output kept (the last ones).",
)
@click.option("--strategy", default=None, help="The strategy this attempt used.")
@json_option
@pass_context
@handles_errors
def gate_run(
    ctx: Context,
    task_id: str,
    command: Sequence[str],
    gate_name: str,
    timeout: float,
    cpu_seconds: int | None,
    memory_mb: int | None,
    cwd: str | None,
    pass_env: Sequence[str],
    output_cap: int,
    strategy: str | None,
    as_json: bool,
) -> None:
    """Run COMMAND sandboxed and judge TASK_ID's gate by its exit code.

    Write the command after `--`: devs gate run TASK -- pytest -q
    """
    # Refuse an unknown task, or one that takes no gate now, before running anything.
    ctx.app.require_gate_allowed(task_id)
    result = run_gate(
        command,
        cwd=cwd,
        timeout=timeout,
        cpu_seconds=cpu_seconds,
        memory_mb=memory_mb,
        pass_env=pass_env,
        output_cap=output_cap,
    )
    shown = redact(shlex.join(command))
    last_line = next(
        (line.strip() for line in reversed(result.output.splitlines()) if line.strip()),
        "",
    )
    decision = ctx.app.record_gate(
        task_id,
        result.exit_code,
        gate=gate_name,
        strategy=strategy,
        error=f"{result.error}: {last_line}" if last_line else result.error,
        output=result.output,
    )
    if as_json:
        emit_json(
            {
                "run": {
                    "exit_code": result.exit_code,
                    "timed_out": result.timed_out,
                    "signal": result.signal_name,
                    "duration_seconds": round(result.duration_seconds, 3),
                    "output_hash": result.output_hash,
                    "truncated_bytes": result.truncated_bytes,
                    "scrubbed_env": list(result.scrubbed_env),
                },
                "decision": decision,
            }
        )
        sys.exit(int(_OUTCOME_CODES[decision.outcome]))
    plain(f"$ {shown}  ->  {result.error} in {result.duration_seconds:.2f}s")
    show_gate(ctx.app, decision, as_json=False)


@gate.command("status")
@click.argument("task_id")
@json_option
@pass_context
@handles_errors
def gate_status(ctx: Context, task_id: str, as_json: bool) -> None:
    """TASK_ID's human-in-the-loop gate and its last gate result."""
    status_ = ctx.app.gate_status(task_id)
    if as_json:
        emit_json(status_)
        return
    plain(
        f"task {status_.task_id}: {status_.state}, "
        f"{status_.consecutive_failures} consecutive failures"
    )
    if status_.triggered:
        score = (
            f", entropy {status_.entropy_score:g}"
            if status_.entropy_score is not None
            else ""
        )
        plain(
            f"  human gate: triggered ({status_.reason}{score}), "
            f"session {status_.session_id}"
        )
    else:
        plain("  human gate: not triggered")
    if status_.last_passed is None:
        plain("  last gate: none yet")
    elif status_.last_passed:
        plain(f"  last gate: {status_.last_gate or 'gate'} passed")
    else:
        plain(
            f"  last gate: {status_.last_gate or 'gate'} failed "
            f"({status_.last_reason}, "
            f"exit code {status_.last_exit_code}), error hash {status_.last_error_hash}"
        )


def acted(result: Any, as_json: bool, text: str) -> None:
    if as_json:
        emit_json(result)
    else:
        plain(text)


@cli.command()
@click.argument("task_id")
@reason_option
@actor_option
@json_option
@pass_context
@handles_errors
def resume(ctx: Context, task_id: str, reason: str, actor: str, as_json: bool) -> None:
    """Let the agent go on with TASK_ID after an escalation or a pause."""
    result = ctx.app.resume(task_id, actor=actor, reason=reason)
    acted(result, as_json, f"{task_id}: resumed by {actor} ({result.state})")


@cli.command()
@click.argument("task_id")
@click.option(
    "--to-commit", default=None, help="Commit to revert to (default: the start)."
)
@reason_option
@actor_option
@json_option
@pass_context
@handles_errors
def rewind(
    ctx: Context,
    task_id: str,
    to_commit: str | None,
    reason: str,
    actor: str,
    as_json: bool,
) -> None:
    """Send TASK_ID back to work from a commit; revert your checkout to it."""
    result = ctx.app.rewind(task_id, actor=actor, reason=reason, to_commit=to_commit)
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
@click.argument("task_id", required=False)
@reason_option
@actor_option
@json_option
@pass_context
@handles_errors
def skip(
    ctx: Context, task_id: str | None, reason: str, actor: str, as_json: bool
) -> None:
    """Skip TASK_ID (default: the one task waiting for a human); its run moves on."""
    target = task_id if task_id is not None else waiting_task(ctx.app)
    result = ctx.app.skip(target, actor=actor, reason=reason)
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
        row=lambda entry: (
            entry.payload.task_id,
            str(entry.payload.failure_count),
            presenters.one_line(entry.payload.last_error_excerpt, 60),
            entry.payload.originating_agent or "-",
            entry.payload.last_commit or "-",
            entry.claimed_by or "-",
        ),
    )


@cli.command()
@click.argument("task_id")
@actor_option
@json_option
@pass_context
@handles_errors
def claim(ctx: Context, task_id: str, actor: str, as_json: bool) -> None:
    """Take TASK_ID from the hand-off queue."""
    result = ctx.app.claim_handoff(task_id, actor=actor)
    acted(result, as_json, f"{task_id}: claimed by {actor}")


@cli.command()
@click.argument("task_id")
@click.option(
    "--as",
    "resolution",
    required=True,
    type=click.Choice(["return", "complete", "skip"]),
    help="Give it back to the agent, mark it done, or skip it.",
)
@reason_option
@actor_option
@json_option
@pass_context
@handles_errors
def resolve(
    ctx: Context, task_id: str, resolution: str, reason: str, actor: str, as_json: bool
) -> None:
    """End TASK_ID's hand-off (claim it first)."""
    result = ctx.app.resolve_handoff(
        task_id, actor=actor, resolution=resolution, reason=reason
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
        columns=("session", "task", "reason", "opened", "failures", "entropy"),
        row=lambda session: (
            session.session_id,
            session.task_id,
            session.reason,
            session.opened_at.strftime(TIME),
            str(session.failure_count),
            f"{session.entropy_score:g}" if session.entropy_score is not None else "-",
        ),
    )


@cli.command()
@click.argument("task_id")
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
            presenters.one_line(item.failed_strategy, 80),
            presenters.one_line(item.rca_summary, 80),
            item.logged_at.strftime(TIME),
        ),
    )


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


def main() -> None:
    cli(prog_name="devs")
