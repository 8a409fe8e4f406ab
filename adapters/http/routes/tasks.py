"""Tasks: start, attempts, gates, entropy, lessons, and the queries over one
task or all."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from devs.adapters.http.commands import command_route
from devs.adapters.http.contract import (
    AfterVersionQuery,
    AttemptBody,
    BlacklistAnswer,
    EntropyBody,
    GateBody,
    LessonBody,
    PageLimitQuery,
    RunQuery,
    StartTaskBody,
    TaskPath,
    UsageBody,
    VersionPath,
    etag,
    id_query,
    limit_query,
)
from devs.adapters.http.dispatch import Devs, HttpRoute, ReadAfter
from devs.domain import (
    AttemptDecision,
    EntropyDecision,
    FailureReport,
    GateDecision,
    GateStatus,
    HistoryEntry,
    Lesson,
    SpendReport,
    TaskIndexEntry,
    TaskSummary,
    UsageDecision,
)
from devs.domain.audit import TaskAudit
from devs.domain.values import (
    STATES,
    STRATEGY_MAX,
    TEXT_PATTERN,
    Limit,
    Position,
    TaskId,
    validated,
)

router = APIRouter(tags=["tasks"], route_class=HttpRoute)


# -------------------------------------------------------------------- tasks


command_route(router, "/tasks", "start_task", StartTaskBody, TaskSummary, status=201)
command_route(
    router, "/tasks/{task_id}/attempts", "begin_attempt", AttemptBody, AttemptDecision
)
command_route(router, "/tasks/{task_id}/gates", "record_gate", GateBody, GateDecision)
command_route(
    router, "/tasks/{task_id}/entropy", "report_entropy", EntropyBody, EntropyDecision
)
command_route(
    router, "/tasks/{task_id}/lessons", "log_lesson", LessonBody, Lesson, status=201
)
command_route(
    router, "/tasks/{task_id}/usage", "record_usage", UsageBody, UsageDecision
)


@router.get(
    "/tasks",
    responses={
        200: {
            "headers": {
                "Link": {
                    "description": (
                        'the next page, `<…>; rel="next"`: only when there is one'
                    ),
                    "schema": {"type": "string"},
                }
            }
        }
    },
)
def list_tasks(
    served: Devs,
    request: Request,
    response: Response,
    position: ReadAfter,
    state: Annotated[
        str | None,
        Query(
            json_schema_extra={"enum": list(STATES)},
            description="only tasks in this state",
        ),
    ] = None,
    run_id: RunQuery = None,
    after_task_id: Annotated[
        str | None,
        id_query(
            "only the tasks whose id sorts after this one (the last of the "
            "page before; it need not name a task)"
        ),
    ] = None,
    limit: Annotated[int | None, limit_query("at most this many tasks")] = None,
) -> list[TaskIndexEntry]:
    """Tasks, of one state and/or one run, ordered by task id, a page at a
    time: a page with a next one carries ``Link: <…>; rel="next"``."""
    _task_page(after_task_id, limit)
    chosen: Any = state  # the service says which states there are
    service = served.service
    with service.reading_after(position):
        found = service.tasks(
            state=chosen, run_id=run_id, after=after_task_id, limit=limit
        )
        if limit is None or len(found) < limit or not found:
            return found
        last = found[-1].task_id
        if service.tasks(state=chosen, run_id=run_id, after=last, limit=1):
            following = request.url.include_query_params(after_task_id=last)
            response.headers["Link"] = (
                f'<{following.path}?{following.query}>; rel="next"'
            )
    return found


@validated
def _task_page(after_task_id: TaskId | None, limit: Limit | None) -> None:
    """A page of the task list, checked as the query names it (the
    service's own refusal would name ``after``, the read-your-writes
    position over HTTP)."""


@validated
def _version_page(after_version: Position, limit: Limit | None) -> None:
    """A page of a task's events, checked as the query names it (the
    service's own refusal names ``after``)."""


@router.get("/tasks/{task_id}")
def task(served: Devs, task_id: TaskPath, response: Response) -> TaskSummary:
    """The task as its events say now (read from the log: always current).
    Its ``ETag`` is its version: send it back as ``If-Match`` with a human
    answer, so that an answer to a task that has moved on is refused."""
    summary = served.service.task(task_id)
    response.headers["ETag"] = etag(summary.version)
    return summary


@router.get("/tasks/{task_id}/gate-status")
def gate_status(served: Devs, task_id: TaskPath, position: ReadAfter) -> GateStatus:
    with served.service.reading_after(position):
        return served.service.gate_status(task_id)


@router.get("/tasks/{task_id}/spend")
def task_spend(served: Devs, task_id: TaskPath, position: ReadAfter) -> SpendReport:
    """What the task spent on model calls, its budgets and each model's
    share (docs/failure-ladder.md#spend)."""
    with served.service.reading_after(position):
        return served.service.task_spend(task_id)


@router.get("/tasks/{task_id}/lessons")
def lessons(served: Devs, task_id: TaskPath, position: ReadAfter) -> list[Lesson]:
    with served.service.reading_after(position):
        return served.service.lessons(task_id)


@router.get("/tasks/{task_id}/failure-report")
def failure_report(
    served: Devs, task_id: TaskPath, position: ReadAfter
) -> FailureReport:
    with served.service.reading_after(position):
        return served.service.failure_report(task_id)


@router.get("/tasks/{task_id}/history")
def history(
    served: Devs,
    task_id: TaskPath,
    after_version: AfterVersionQuery = 0,
    limit: PageLimitQuery = None,
) -> list[HistoryEntry]:
    """The audited history, a page at a time (read from the log)."""
    _version_page(after_version, limit)
    return served.service.history(task_id, after=after_version, limit=limit)


@router.get("/tasks/{task_id}/history/{version}")
def state_at(served: Devs, task_id: TaskPath, version: VersionPath) -> TaskSummary:
    """The task as it was right after event number ``version``."""
    return served.service.state_at(task_id, version)


@router.get("/tasks/{task_id}/audit")
def audit(
    served: Devs,
    task_id: TaskPath,
    after_version: AfterVersionQuery = 0,
    limit: PageLimitQuery = None,
) -> TaskAudit:
    """The replayed history, a page at a time, each event with its actor
    and its link in the task's hash chain, and the state of the whole
    chain (intact, unchained, broken)."""
    _version_page(after_version, limit)
    return served.service.audit(task_id, after=after_version, limit=limit)


@router.get("/tasks/{task_id}/blacklist")
def blacklist(
    served: Devs,
    task_id: TaskPath,
    position: ReadAfter,
    candidate: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=STRATEGY_MAX,
            pattern=TEXT_PATTERN.regex,
            description="a strategy: is it blacklisted for this task?",
        ),
    ] = None,
) -> BlacklistAnswer:
    service = served.service
    with service.reading_after(position):
        return BlacklistAnswer(
            task_id=task_id,
            candidate=candidate,
            blacklisted=None
            if candidate is None
            else service.is_strategy_blacklisted(task_id, candidate),
            directive=service.blacklist_directive(task_id),
        )
