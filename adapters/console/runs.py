"""The runs: every run and how far its nodes are (``GET /console/runs``),
one run's DAG and spend (``GET /console/runs/ID``), and the metrics page's
charts (``GET /console/metrics``)."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import Response
from markupsafe import Markup

from devs.adapters.console.pages import (
    AppConsole,
    ConsoleRoute,
    in_thread,
    page,
    to_login,
)
from devs.adapters.console.sessions import operator_of
from devs.adapters.console.svg import bar_chart_svg, dag_svg
from devs.domain import NotFound, RecoveryService, RunState

RUNS_SCANNED = 10_000
"""Tasks the runs page reads to find the runs (in task-id order)."""
RUNS_SHOWN = 500
"""Runs the runs page describes (by id)."""

router = APIRouter(route_class=ConsoleRoute)


def run_ids(service: RecoveryService) -> tuple[list[str], bool]:
    """The runs of the first :data:`RUNS_SCANNED` tasks, and whether there
    are tasks past them (whose runs may be missing from the list)."""
    seen: dict[str, None] = {}
    entries = service.tasks(limit=RUNS_SCANNED)
    for entry in entries:
        if entry.run_id is not None:
            seen[entry.run_id] = None
    more = len(entries) == RUNS_SCANNED and bool(
        service.tasks(after=entries[-1].task_id, limit=1)
    )
    return sorted(seen), more


@dataclass
class RunLine:
    """One run on the runs page: its state and how far its nodes are."""

    run: RunState
    nodes: int
    completed: int
    skipped: int
    started: int
    waiting: int
    """Nodes stopped for a person (paused)."""


def run_lines(service: RecoveryService, ids: list[str]) -> list[RunLine]:
    lines = []
    for run_id in ids[:RUNS_SHOWN]:
        try:
            run = service.run_state(run_id)
        except NotFound:
            continue
        lines.append(
            RunLine(
                run=run,
                nodes=len(run.order),
                completed=len(run.completed),
                skipped=len(run.skipped),
                started=len(run.started),
                waiting=len(run.paused_by),
            )
        )
    return lines


@router.get("/runs")
async def runs_page(request: Request, console: AppConsole) -> Response:
    operator = await operator_of(request, console)
    if operator is None:
        return to_login(request)
    service = console.service_of()
    ids, more = await in_thread(lambda: run_ids(service))
    runs = await in_thread(lambda: run_lines(service, ids))
    return page(
        request,
        "runs.html",
        title="Runs",
        operator=operator,
        runs=runs,
        more=more,
        scanned=RUNS_SCANNED,
    )


@router.get("/runs/{run_id:path}")
async def run_page(request: Request, run_id: str, console: AppConsole) -> Response:
    operator = await operator_of(request, console)
    if operator is None:
        return to_login(request)
    service = console.service_of()
    run = await in_thread(lambda: service.run_state(run_id))
    spend = await in_thread(lambda: service.run_spend(run_id))
    return page(
        request,
        "run.html",
        title=run_id,
        operator=operator,
        run=run,
        dag=Markup(dag_svg(run)),
        spend=spend,
    )


@router.get("/metrics")
async def metrics_page(request: Request, console: AppConsole) -> Response:
    operator = await operator_of(request, console)
    if operator is None:
        return to_login(request)
    service = console.service_of()
    figures = await in_thread(service.metrics)
    waits = figures.time_to_human
    charts = [
        bar_chart_svg(
            "Tasks by state",
            [(str(state), count) for state, count in figures.tasks_by_state.items()],
        ),
        bar_chart_svg(
            "Loop rate (tasks that ever stopped for a human)",
            [("loop rate", figures.loop_rate * 100)],
            unit="%",
        ),
        bar_chart_svg(
            "Time to a human (seconds)",
            [
                ("median", waits.p50 or 0.0),
                ("90th percentile", waits.p90 or 0.0),
                ("mean", waits.mean or 0.0),
            ],
            unit=" s",
        ),
        bar_chart_svg(
            "Hand-offs by resolution",
            [
                (str(end), count)
                for end, count in figures.handoffs_by_resolution.items()
            ],
        ),
        bar_chart_svg(
            "Stuck tasks by signal",
            [("stuck tasks", figures.stuck_tasks)]
            + [(kind, count) for kind, count in figures.stuck_signals.items()],
        ),
    ]
    return page(
        request,
        "metrics.html",
        title="Metrics",
        operator=operator,
        metrics=figures,
        charts=[Markup(chart) for chart in charts],
    )
