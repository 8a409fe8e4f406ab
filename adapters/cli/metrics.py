"""``devs metrics``: how the tasks went (docs/audit.md#metrics)."""

from __future__ import annotations

from collections.abc import Callable

import click

from devs.adapters.cli.base import (
    Context,
    cli,
    complete_task_id,
    emit_json,
    handles_errors,
    json_option,
    pass_context,
    plain,
    shortened,
    show_table,
)
from devs.adapters.cli.tasks import spend_line
from devs.domain import Metrics, SpendReport
from devs.domain.ports import Distribution
from devs.domain.values import parse_time


@cli.command()
@click.option("--run", "run_id", default=None, help="Only the tasks of this run.")
@click.option(
    "--since",
    default=None,
    metavar="ISO-8601",
    help="Only tasks started at or after this time (with a timezone, e.g. "
    "2024-05-01T09:30:00Z).",
)
@json_option
@pass_context
@handles_errors
def metrics(ctx: Context, run_id: str | None, since: str | None, as_json: bool) -> None:
    """How the tasks went: states, loops, failures and time before a human,
    hand-offs, blocked attempts, the strategies that failed most."""
    moment = None if since is None else parse_time(since, "--since", field="since")
    figures = ctx.app.metrics(run_id=run_id, since=moment)
    if as_json:
        emit_json(figures)
        return
    show(figures)


@cli.command()
@click.argument(
    "task_id", required=False, default=None, shell_complete=complete_task_id
)
@click.option("--run", "run_id", default=None, help="The run's tasks together.")
@json_option
@pass_context
@handles_errors
def spend(ctx: Context, task_id: str | None, run_id: str | None, as_json: bool) -> None:
    """What TASK_ID (or every task of --run RUN) spent on model calls: money
    and tokens against the budgets, then each agent and model's share."""
    if (task_id is None) == (run_id is None):
        msg = "give a TASK_ID or --run RUN (one of them)"
        raise click.UsageError(msg)
    report = (
        ctx.app.task_spend(task_id)
        if task_id is not None
        else ctx.app.run_spend(run_id or "")
    )
    if as_json:
        emit_json(report)
        return
    show_spend(report)


def spend_text(report: SpendReport) -> str:
    """``task t: USD 0.7500 of 1 spent, 110,000 tokens``."""
    whose = f"task {report.task_id}" if report.task_id else f"run {report.run_id}"
    return spend_line(whose, report)


def show_spend(report: SpendReport) -> None:
    plain(spend_text(report))
    if not report.by_model:
        plain("no usage recorded")
        return
    columns = (
        "agent",
        "model",
        "usages",
        "USD",
        "tokens",
        "input",
        "output",
        "cache read",
        "cache write",
    )
    show_table(
        "By agent and model",
        columns,
        [
            [
                m.agent or "-",
                m.model,
                f"{m.usages:,}",
                "?" if m.unknown_cost_tokens == m.tokens > 0 else f"{m.spent_usd:.4f}",
                f"{m.tokens:,}",
                f"{m.input_tokens:,}",
                f"{m.output_tokens:,}",
                f"{m.cache_read_tokens:,}",
                f"{m.cache_creation_tokens:,}",
            ]
            for m in report.by_model
        ],
        whole=("model",),
        right=columns[2:],  # the counts
    )


def show(figures: Metrics) -> None:
    """The figures as two tables: the figures, then the strategies."""
    scope = [f"run {figures.run_id}"] if figures.run_id else []
    if figures.since is not None:
        scope.append(f"started since {figures.since.isoformat()}")
    rows = [["tasks", str(figures.tasks)]]
    rows += [[f"  {state}", str(n)] for state, n in figures.tasks_by_state.items()]
    looped = round(figures.loop_rate * figures.tasks)
    before = figures.failures_before_first_human
    waits = figures.time_to_human
    ends = figures.handoffs_by_resolution
    signals = ", ".join(f"{k} {n}" for k, n in figures.stuck_signals.items())
    rows += [
        ["loop rate", f"{figures.loop_rate:.1%} ({looped} of {figures.tasks})"],
        ["reached a human", plural(before.count, "task")],
        ["  failures before", spread(before, count_text)],
        ["waits for a human", f"{waits.count} answered, {waits.open} open"],
        ["  time to human", spread(waits, duration)],
        ["hand-offs", ", ".join(f"{end} {n}" for end, n in ends.items())],
        ["blocked attempts", str(figures.blocked_attempts)],
        [
            "stuck (score >= 0.75)",
            plural(figures.stuck_tasks, "task") + (f" ({signals})" if signals else ""),
        ],
        ["  highest score", spread(figures.stuck_score, lambda v: f"{v:.2f}")],
    ]
    show_table(
        f"Metrics ({', '.join(scope) or 'all tasks'})", ("figure", "value"), rows
    )
    if not figures.top_failed_strategies:
        plain("no failed strategies")
        return
    show_table(
        "Most repeated failed strategies",
        ("failures", "strategy"),
        [
            [str(item.failures), shortened(item.strategy, 80)]
            for item in figures.top_failed_strategies
        ],
        right=("failures",),
    )


def spread(values: Distribution, text: Callable[[float], str]) -> str:
    """``mean …, p50 …, p90 …`` (``-`` when there are no values)."""
    return ", ".join(
        f"{name} {'-' if value is None else text(value)}"
        for name, value in (
            ("mean", values.mean),
            ("p50", values.p50),
            ("p90", values.p90),
        )
    )


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def count_text(value: float) -> str:
    """A count, or a mean of counts: ``3``, ``2.5``."""
    return f"{value:.1f}".removesuffix(".0")


def duration(seconds: float) -> str:
    """A wait: ``0.004 s``, ``4.2 s``, ``42 s``, ``3 min 05 s``, ``2 h 07 min``,
    ``3 d 04 h``."""
    if seconds < 1:
        return f"{seconds:.3f} s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours:02d} h"
