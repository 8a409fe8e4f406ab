"""``devs status``, ``task``, ``history``, ``attempt``, ``lesson``, ``entropy`` and
``gate``: what an agent loop reports, and what it is told."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence

import click

from devs.adapters import presenters
from devs.adapters.cli.base import (
    OUTCOME_CODES,
    TIME,
    Context,
    ExitCode,
    cli,
    complete_task_id,
    emit_json,
    err,
    fail,
    field_option,
    handles_errors,
    json_option,
    pass_context,
    plain,
    show_attempt,
    show_gate,
    show_rows,
    task_argument,
)
from devs.adapters.gate_run import GateCall
from devs.adapters.sandbox import (
    DEFAULT_OUTPUT_CAP,
    IsolationUnavailable,
    store_file,
)
from devs.domain import (
    EntropyDecision,
    InvalidInput,
    Spend,
    SpendReport,
    TaskSummary,
    UsageDecision,
)
from devs.domain.output import readable

# ------------------------------------------------------------------- commands


@cli.command()
@click.option("--run", "run_id", default=None, help="Only the tasks of this run.")
@click.option(
    "--limit",
    type=int,
    default=None,
    help="Show at most this many tasks, by task id (1-10000; default: all).",
)
@click.option(
    "--after",
    metavar="TASK",
    default=None,
    shell_complete=complete_task_id,
    help="Start after this task id (the last one of the page before).",
)
@json_option
@pass_context
@handles_errors
def status(
    ctx: Context,
    run_id: str | None,
    limit: int | None,
    after: str | None,
    as_json: bool,
) -> None:
    """Tasks by state.

    Many tasks can be read a page at a time, in task id order: --limit N
    shows the first N, and a last line (on stderr with --json) gives the
    command for the next page, --after the last id shown; none after the
    last page.
    """
    app = ctx.app
    tasks = app.tasks(run_id=run_id, after=after, limit=limit)
    if run_id is not None:
        app.run_state(run_id)  # an unknown run is an error, not an empty list
    following = None
    if limit is not None and tasks and len(tasks) == limit:
        last = tasks[-1].task_id
        if app.tasks(run_id=run_id, after=last, limit=1):
            following = last
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
        columns=("state", "task", "run", "failures", "stuck", "updated"),
        whole=("task",),
        row=lambda t: (
            t.state,
            t.task_id,
            t.run_id or "-",
            str(t.consecutive_failures),
            "-" if t.stuck_score is None else f"{t.stuck_score:.2f}",
            t.updated_at.strftime(TIME),
        ),
    )
    if following is not None:
        words = ["devs", "status"]
        if run_id is not None:
            words += ["--run", run_id]
        words += ["--limit", str(limit), "--after", following]
        if as_json:
            words.append("--json")
        hint = f"next page: {shlex.join(words)}"
        if as_json:
            err.print(hint, markup=False, soft_wrap=True)
        else:
            plain(hint)


@cli.group()
def task() -> None:
    """Start and show tasks."""


@task.command("start")
@task_argument()
@field_option("--run", "run_id", command="start_task", field="run_id")
@field_option("--agent", command="start_task", field="agent")
@field_option("--commit", "last_commit", command="start_task", field="last_commit")
@click.option(
    "--link",
    "links",
    multiple=True,
    metavar="NAME=WHERE",
    help="What the agent's side knows of it, for the people who answer it: "
    "transcript=PATH, branch=NAME, pr=URL (repeatable, at most 8).",
)
@json_option
@pass_context
@handles_errors
def task_start(
    ctx: Context,
    task_id: str,
    run_id: str | None,
    agent: str | None,
    last_commit: str | None,
    links: tuple[str, ...],
    as_json: bool,
) -> None:
    """Start refereeing TASK_ID."""
    named: dict[str, str] = {}
    for link in links:
        name, equals, where = link.partition("=")
        if not equals:
            msg = f"--link must be NAME=WHERE (pr=https://…), got {link[:80]!r}"
            raise InvalidInput(msg, field="link")
        named[name] = where
    summary = ctx.app.start_task(
        task_id,
        run_id=run_id,
        agent=agent,
        last_commit=last_commit,
        links=named or None,
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
        f"  lessons: {len(summary.lessons)}   version: {summary.version} "
        f"(answer it with --if-version {summary.version})",
    ]
    if summary.stuck is not None:
        lines.append(f"  stuck: {presenters.stuck_text(summary.stuck)}")
    if summary.pending_session is not None:
        session = summary.pending_session
        source = (
            f", {session.entropy_source} score {session.entropy_score:g}"
            if session.entropy_source and session.entropy_score is not None
            else ""
        )
        lines.append(
            f"  waiting for a human: {session.reason}{source} "
            f"(session {session.session_id})"
        )
    for name, where in (summary.links or {}).items():
        lines.append(f"  {name}: {presenters.one_line(where, 200)}")
    if summary.handoff is not None:
        lines.append("  handed off")
    if summary.pending_session is not None or summary.handoff is not None:
        lines.append(f"  claimed by: {summary.claimed_by or 'nobody yet'}")
    for failure in summary.failure_history[-5:]:
        lines.append(
            f"  - {failure.at:%H:%M:%S} {failure.reason} {failure.gate or ''} "
            f"{presenters.one_line(readable(failure.last_error), 100)}".rstrip()
        )
    return "\n".join(lines)


@task.command("show")
@task_argument()
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
@task_argument()
@click.option(
    "--at", "at_version", type=int, default=None, help="Stop at this version."
)
@click.option(
    "--after",
    type=int,
    default=0,
    show_default=True,
    help="Start after this version (page through a long history).",
)
@click.option(
    "--limit",
    type=int,
    default=None,
    help="Show at most this many events (default: all).",
)
@json_option
@pass_context
@handles_errors
def history(
    ctx: Context,
    task_id: str,
    at_version: int | None,
    after: int,
    limit: int | None,
    as_json: bool,
) -> None:
    """The audited history of TASK_ID, replayed event by event.

    A long history can be read a page at a time: --after N --limit M shows
    events N+1 to N+M, reading only those.
    """
    entries = ctx.app.history(task_id, after=after, limit=limit)
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
@task_argument()
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
@task_argument()
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
@task_argument()
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


def spend_line(task_id: str, spend: Spend | SpendReport) -> str:
    """``t: USD 0.75 of 1 spent, 110,000 tokens``: what a task (or a run,
    ``task_id`` its name) spent."""
    money = f"USD {spend.spent_usd:.4f}"
    if spend.budget_usd is not None:
        money += f" of {spend.budget_usd:g}"
    tokens = f"{spend.tokens:,} tokens"
    if spend.budget_tokens is not None:
        tokens += f" of {spend.budget_tokens:,}"
    unknown = spend.unknown_cost_tokens
    priced = f" ({unknown:,} of unknown cost)" if unknown else ""
    return f"{task_id}: {money} spent, {tokens}{priced}"


@cli.command()
@task_argument()
@field_option("--model", command="record_usage", field="model", required=True)
@field_option(
    "--input",
    "input_tokens",
    command="record_usage",
    field="input_tokens",
    required=True,
)
@field_option(
    "--output",
    "output_tokens",
    command="record_usage",
    field="output_tokens",
    required=True,
)
@field_option(
    "--cache-read",
    "cache_read_tokens",
    command="record_usage",
    field="cache_read_tokens",
)
@field_option(
    "--cache-creation",
    "cache_creation_tokens",
    command="record_usage",
    field="cache_creation_tokens",
)
@field_option("--cost", "cost_usd", command="record_usage", field="cost_usd")
@field_option("--usage-id", command="record_usage", field="usage_id")
@json_option
@pass_context
@handles_errors
def usage(
    ctx: Context,
    task_id: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int,
    cache_creation_tokens: int,
    cost_usd: float | None,
    usage_id: str | None,
    as_json: bool,
) -> None:
    """Count a model call's tokens (and cost) for TASK_ID against its budgets.

    Exit 0; 4 when the task pauses for a human (its budget is spent).
    """
    decision: UsageDecision = ctx.app.record_usage(
        task_id,
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read_tokens,
        cache_creation_tokens=cache_creation_tokens,
        cost_usd=cost_usd,
        usage_id=usage_id,
    )
    if as_json:
        emit_json(decision)
    else:
        said = spend_line(decision.task_id, decision.spend)
        if not decision.recorded:
            said += f" (usage {usage_id!r} was counted before: nothing recorded)"
        elif decision.triggered:
            said += f"; budget spent: paused for a human ({decision.state})"
        elif decision.warned:
            said += "; most of a budget spent: warned"
        plain(said)
    sys.exit(int(ExitCode.PAUSED if decision.triggered else ExitCode.OK))


@cli.group()
def gate() -> None:
    """Run gates and show gate status."""


@gate.command("run", context_settings={"ignore_unknown_options": True})
@task_argument()
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@field_option(
    "--gate",
    "gate_name",
    command="record_gate",
    field="gate",
    default="tests",
    show_default=True,
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
@click.option(
    "--network",
    is_flag=True,
    help="Let the command use the network (in the sandbox it has none).",
)
@click.option(
    "--allow-path",
    "allow_paths",
    multiple=True,
    type=click.Path(),
    help="Show this path read-only in the sandbox, which hides the home "
    "directory, /tmp and /run (repeatable).",
)
@click.option(
    "--require-isolation",
    is_flag=True,
    help="Refuse to run when the bwrap sandbox is unavailable.",
)
@click.option(
    "--in-store-folder",
    is_flag=True,
    help="Run even though the working directory holds the store (a gate "
    "never runs there unless asked); the folder is read-only to the command.",
)
@field_option("--strategy", command="record_gate", field="strategy")
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
    network: bool,
    allow_paths: Sequence[str],
    require_isolation: bool,
    in_store_folder: bool,
    strategy: str | None,
    as_json: bool,
) -> None:
    """Run COMMAND sandboxed and judge TASK_ID's gate by its exit code.

    Write the command after `--`: devs gate run TASK -- pytest -q

    Under bubblewrap (bwrap) when it works here: no network, a read-only file
    system but for the working directory and a private /tmp, an empty home
    directory, the store out of sight. Without it, one warning line and
    weaker isolation. The working directory must not be the store's folder
    unless --in-store-folder (then it is read-only).
    """
    call = GateCall(
        task_id,
        tuple(command),
        gate=gate_name,
        strategy=strategy,
        cwd=cwd,
        timeout=timeout,
        cpu_seconds=cpu_seconds,
        memory_mb=memory_mb,
        pass_env=tuple(pass_env),
        output_cap=output_cap,
        isolation="require" if require_isolation else "auto",
        network=network,
        allow_paths=tuple(allow_paths),
        in_store_folder=in_store_folder,
    )
    # Refuses an unknown task, one that takes no gate now, or a gate name or
    # strategy the record would refuse, before running anything; the
    # referee's own store is out of the command's reach.
    call.check(ctx.app)
    try:
        result = call.run(store_file(ctx.app))
    except IsolationUnavailable as error:
        fail(" ".join(str(error).split()), ExitCode.REFUSED, kind=error.kind)
        raise  # not reached: fail() exits
    if result.fallback is not None:
        click.echo(f"devs: warning: {result.fallback}", err=True)
    decision = call.record(ctx.app, result)
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
                    "isolation": result.isolation,
                    "command": call.shown,
                },
                "decision": decision,
            }
        )
        sys.exit(int(OUTCOME_CODES[decision.outcome]))
    plain(f"$ {call.shown}  ->  {result.error} in {result.duration_seconds:.2f}s")
    show_gate(ctx.app, decision, as_json=False)


@gate.command("status")
@task_argument()
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
