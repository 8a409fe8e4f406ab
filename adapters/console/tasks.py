"""A task's page: its state chart, failure report, history, lessons, its
spend when it has usage or a budget and, when it waits for a person, its
answer form (``GET /console/tasks/ID``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from markupsafe import Markup

from devs.adapters.console.inbox import item_of
from devs.adapters.console.pages import (
    AppConsole,
    ConsoleRoute,
    done_message,
    in_thread,
    page,
    to_login,
)
from devs.adapters.console.sessions import operator_of
from devs.adapters.console.svg import state_chart_svg

HISTORY_SHOWN = 200
"""Events of a task's history its page shows: the latest ones (``devs
history`` and ``GET /tasks/{id}/history`` page through all)."""

router = APIRouter(route_class=ConsoleRoute)


@router.get("/tasks/{task_id:path}")
async def task_page(request: Request, task_id: str, console: AppConsole) -> Response:
    operator = await operator_of(request, console)
    if operator is None:
        return to_login(request)
    service = console.service_of()

    def read() -> dict[str, Any]:
        task = service.task(task_id)
        return {
            "task": task,
            "report": service.failure_report(task_id),
            "history": service.history(
                task_id, after=max(0, task.version - HISTORY_SHOWN)
            ),
            "lessons": service.lessons(task_id),
            "chart": Markup(state_chart_svg(task.state)),
            "item": item_of(service, task),
            # Only a task with usage or a budget shows its spend.
            "spend": service.task_spend(task_id) if task.spend else None,
        }

    context = await in_thread(read)  # an unknown task: ConsoleRoute's 404
    return page(
        request,
        "task.html",
        title=task_id,
        operator=operator,
        done=done_message(request.query_params),
        **context,
    )
