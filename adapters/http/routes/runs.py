"""Runs: start one over a DAG, read its state."""

from __future__ import annotations

from fastapi import APIRouter

from devs.adapters.http.commands import command_route
from devs.adapters.http.contract import RunPath, StartRunBody
from devs.adapters.http.dispatch import Devs, HttpRoute, ReadAfter
from devs.domain import (
    RunState,
    SpendReport,
)

router = APIRouter(tags=["runs"], route_class=HttpRoute)


# --------------------------------------------------------------------- runs


command_route(router, "/runs", "start_run", StartRunBody, RunState, status=201)


@router.get("/runs/{run_id}")
def run_state(served: Devs, run_id: RunPath, position: ReadAfter) -> RunState:
    with served.service.reading_after(position):
        return served.service.run_state(run_id)


@router.get("/runs/{run_id}/spend")
def run_spend(served: Devs, run_id: RunPath, position: ReadAfter) -> SpendReport:
    """What the run's tasks spent on model calls together, and each agent
    and model's share (docs/failure-ladder.md#spend)."""
    with served.service.reading_after(position):
        return served.service.run_spend(run_id)
