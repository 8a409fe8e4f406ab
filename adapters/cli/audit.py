"""``devs what-if``, ``devs replay-check``, ``devs export`` and
``devs verify-export``: questions an auditor asks of the log."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import orjson

from devs.adapters.cli.base import (
    Context,
    ExitCode,
    cli,
    complete_task_id,
    emit_json,
    fail,
    field_option,
    handles_errors,
    json_option,
    pass_context,
    plain,
)
from devs.domain.audit import Totals, WhatIfReport, verify_export
from devs.domain.errors import InvalidInput
from devs.domain.policy import Policy


def _policy(base: Policy, changes: dict[str, object]) -> Policy:
    try:
        return base.changed(changes)
    except InvalidInput as error:  # named as the option that set it
        flag = "--" + (error.field or "").replace("_", "-").replace("hitl-", "")
        text = str(error).removeprefix(f"{error.field} is invalid: ")
        raise InvalidInput(f"{flag}: {text}", field=error.field) from None


@cli.command("what-if")
# The thresholds' ranges are the policy's to check (Policy.changed): a value
# out of range is bad input (exit 6), named as the option that set it.
@field_option(
    "--escalation-threshold",
    command="what_if",
    field="policy.escalation_threshold",
    ranges=False,
)
@field_option(
    "--handoff-threshold",
    command="what_if",
    field="policy.handoff_threshold",
    ranges=False,
)
@field_option(
    "--entropy-threshold",
    "hitl_entropy_threshold",
    command="what_if",
    field="policy.hitl_entropy_threshold",
    ranges=False,
)
@field_option("--stuck-detection", command="what_if", field="policy.stuck_detection")
@field_option(
    "--task-budget-usd",
    command="what_if",
    field="policy.task_budget_usd",
    ranges=False,
)
@field_option(
    "--task-budget-tokens",
    command="what_if",
    field="policy.task_budget_tokens",
    ranges=False,
)
@click.option(
    "--task",
    "task_ids",
    multiple=True,
    shell_complete=complete_task_id,
    help="Only this task (repeatable).",
)
@field_option("--run", "run_id", command="what_if", field="run_id")
@json_option
@pass_context
@handles_errors
def what_if(
    ctx: Context,
    escalation_threshold: int | None,
    handoff_threshold: int | None,
    hitl_entropy_threshold: float | None,
    stuck_detection: str | None,
    task_budget_usd: float | None,
    task_budget_tokens: int | None,
    task_ids: Sequence[str],
    run_id: str | None,
    as_json: bool,
) -> None:
    """Re-decide every recorded history under another policy; write nothing.

    Thresholds not given keep the policy in force (the environment's). Shows,
    per task, where the ladder would have gone otherwise, and the totals
    beside the recorded ones; with a budget, what it would have saved.
    """
    policy = _policy(
        ctx.app.policy,
        {
            "escalation_threshold": escalation_threshold,
            "handoff_threshold": handoff_threshold,
            "hitl_entropy_threshold": hitl_entropy_threshold,
            "stuck_detection": stuck_detection,
            "task_budget_usd": task_budget_usd,
            "task_budget_tokens": task_budget_tokens,
        },
    )
    report = ctx.app.what_if(policy, task_ids=list(task_ids) or None, run_id=run_id)
    if as_json:
        emit_json(report)
        return
    plain(describe_what_if(report))


def describe_what_if(report: WhatIfReport) -> str:
    policy = report.policy
    budgets = [
        f"USD {policy.task_budget_usd:g}" if policy.task_budget_usd else "",
        f"{policy.task_budget_tokens:,} tokens" if policy.task_budget_tokens else "",
    ]
    budget = " and ".join(b for b in budgets if b)
    lines = [
        f"what if: escalate at {policy.escalation_threshold}, hand off at "
        f"{policy.handoff_threshold}, entropy limit "
        f"{policy.hitl_entropy_threshold:g}, stuck detection "
        f"{policy.stuck_detection}" + (f", a task's budget {budget}" if budget else ""),
        f"{report.tasks} task(s), {report.events} event(s) re-decided; "
        f"{len(report.changed)} would have gone otherwise",
        "",
        f"{'':<30}{'recorded':>10}{'what if':>10}",
    ]

    def row(name: str, field: str) -> str:
        was = getattr(report.recorded, field)
        would = getattr(report.what_if, field)
        return f"{name:<30}{was:>10}{would:>10}"

    for name, field in _TOTALS:
        lines.append(row(name, field))
    lines.append(
        f"(assumed answered at once: {report.assumed_resumes}; recorded human "
        f"actions with nothing to answer: {report.dropped_human_actions})"
    )
    if report.saved.tokens or report.saved.spent_usd:
        lines.append(
            f"would have saved USD {report.saved.spent_usd:.4f} and "
            f"{report.saved.tokens:,} tokens (the usage recorded after budget "
            "stops nobody's raise answered)"
        )
    for task in report.changed:
        lines.append(f"{task.task_id}:")
        lines.extend(f"  - {change}" for change in task.changes)
    lines.extend(f"left out: {problem}" for problem in report.unreadable)
    return "\n".join(lines)


_TOTALS: tuple[tuple[str, str], ...] = tuple(
    (name.replace("_", " "), name) for name in Totals.model_fields
)


@cli.command("replay-check")
@click.option(
    "--task",
    "task_ids",
    multiple=True,
    shell_complete=complete_task_id,
    help="Only this task (repeatable).",
)
@json_option
@pass_context
@handles_errors
def replay_check(ctx: Context, task_ids: Sequence[str], as_json: bool) -> None:
    """Re-decide every recorded history with today's code under its recorded
    policy. Exits 0 when every decision is the recorded one, 1 otherwise."""
    report = ctx.app.replay_check(task_ids=list(task_ids) or None)
    if as_json:
        emit_json(report)
    elif report.ok:
        plain(
            f"ok: {report.tasks} task(s), {report.events} event(s): today's code "
            "takes every recorded decision"
        )
    else:
        plain(
            f"{len(report.differences)} decision(s) differ "
            f"({report.tasks} task(s), {report.events} event(s)):"
        )
        for d in report.differences:
            plain(
                f"- task {d.task_id} version {d.version} ({d.event}): recorded "
                f"{d.recorded}; today {d.recomputed}"
            )
        for problem in report.unreadable:
            plain(f"- unreadable: {problem}")
    if not report.ok:
        sys.exit(int(ExitCode.RETRY))


@cli.command()
@click.argument("task_ids", nargs=-1, shell_complete=complete_task_id)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The JSON Lines file to write (refused if it exists).",
)
@pass_context
@handles_errors
def export(ctx: Context, task_ids: Sequence[str], output: Path) -> None:
    """Write a self-contained audit record of TASK_IDS (default: all) as JSON
    Lines: a header, every event with its hash and actor, then a trailer with
    every task's chain head. `devs verify-export FILE` checks it without a
    database."""
    if output.exists():
        fail(f"{output} exists; choose a new file", ExitCode.BAD_INPUT)
    events = 0
    trailer: dict[str, Any] = {}
    lines = ctx.app.export(list(task_ids) or None)
    partial = output.with_name(output.name + ".partial")
    try:
        with partial.open("wb") as file:
            for line in lines:
                file.write(orjson.dumps(line) + b"\n")
                if "task_id" in line:
                    events += 1
                elif line.get("end"):
                    trailer = line
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
    tasks = trailer["tasks"]
    plain(f"exported {len(tasks)} task(s), {events} event(s) to {output}")
    for task_id, summary in tasks.items():
        head = summary["head"] or "(unchained)"
        plain(f"  {task_id}: {summary['events']} events, head {head}")


@cli.command("verify-export")
@click.argument("file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@json_option
def verify_export_command(file: Path, as_json: bool) -> None:
    """Check an exported audit record offline. Exits 0 when every chain is
    intact (or unchained), 1 with the first broken link named."""
    with file.open("rb") as lines:
        results, problem = verify_export(lines)
    if as_json:
        emit_json({"ok": problem is None, "problem": problem, "tasks": results})
    elif problem is None:
        counts = {state: 0 for state in ("intact", "unchained", "broken")}
        for status in results:
            counts[status.state] += 1
        plain(
            f"ok: {len(results)} task(s): {counts['intact']} intact, "
            f"{counts['unchained']} unchained (written before the chain existed)"
        )
    else:
        plain(f"broken: {problem}")
    if problem is not None:
        sys.exit(int(ExitCode.RETRY))
