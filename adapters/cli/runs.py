"""``devs run start`` and ``devs run show``: orchestration runs."""

from __future__ import annotations

from typing import Any

import click
import orjson

from devs.adapters.cli.base import (
    Context,
    cli,
    emit_json,
    field_option,
    handles_errors,
    json_option,
    pass_context,
    plain,
    show_table,
)
from devs.domain import (
    InvalidInput,
)
from devs.domain.values import StopScopeName


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
@field_option(
    "--stop-scope", command="start_run", field="stop_scope", show_default=True
)
@json_option
@pass_context
@handles_errors
def run_start(
    ctx: Context,
    run_id: str,
    dag_file: Any,
    stop_scope: StopScopeName,  # the field's click.Choice gives no other
    as_json: bool,
) -> None:
    """Start RUN_ID over a DAG of task ids."""
    try:
        dag = orjson.loads(dag_file.read())
    except orjson.JSONDecodeError as error:
        raise InvalidInput(
            f"--dag {dag_file.name} is not valid JSON: {error}"
        ) from None
    state = ctx.app.start_run(run_id, dag, stop_scope=stop_scope)
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
    rows = [
        (
            node,
            ", ".join(state.dag[node]) or "-",
            "completed"
            if node in state.completed
            else "skipped"
            if node in state.skipped
            else "started"
            if node in state.started
            else "ready"
            if node in state.ready
            else "waiting",
        )
        for node in state.order
    ]
    show_table(None, ("node", "prerequisites", "progress"), rows, whole=("node",))
