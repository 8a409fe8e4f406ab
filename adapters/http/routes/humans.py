"""What people answer: resume, rewind, skip, claim, release, take over,
resolve, a task's or a run's budget; the pending sessions and hand-offs."""

from __future__ import annotations

from fastapi import APIRouter

from devs.adapters.http.commands import command_route
from devs.adapters.http.contract import (
    ActionBody,
    BudgetBody,
    ClaimBody,
    ResolveBody,
    RewindBody,
    RunBudgetBody,
    TakeOverBody,
)
from devs.adapters.http.dispatch import Devs, HttpRoute, ReadAfter
from devs.domain import (
    ActionResult,
    BudgetAnswer,
    HandoffEntry,
    PendingSession,
    RunState,
)

router = APIRouter(tags=["humans"], route_class=HttpRoute)


# -------------------------------------------------- sessions and hand-offs


for path, command, body, name in (
    ("resume", "resume", ActionBody, "resume"),
    ("rewind", "rewind", RewindBody, "rewind"),
    ("skip", "skip", ActionBody, "skip"),
    ("claim", "claim", ClaimBody, "claim"),
    ("release", "release", ClaimBody, "release"),
    ("take-over", "take_over", TakeOverBody, "take_over"),
    ("resolve", "resolve_handoff", ResolveBody, "resolve"),
):
    command_route(
        router,
        f"/tasks/{{task_id}}/{path}",
        command,
        body,
        ActionResult,
        human=True,
        name=name,
    )


command_route(
    router,
    "/tasks/{task_id}/budget",
    "raise_budget",
    BudgetBody,
    BudgetAnswer,
    human=True,
    name="raise_budget",
)
command_route(
    router,
    "/runs/{run_id}/budget",
    "raise_run_budget",
    RunBudgetBody,
    RunState,
    human=True,
    name="raise_run_budget",
)


@router.get("/sessions")
def sessions(served: Devs, position: ReadAfter) -> list[PendingSession]:
    with served.service.reading_after(position):
        return served.service.pending_sessions()


@router.get("/handoffs")
def handoffs(served: Devs, position: ReadAfter) -> list[HandoffEntry]:
    with served.service.reading_after(position):
        return served.service.handoff_queue()
