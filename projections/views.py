"""The seven read models and their projections.

Each projection folds the event log into one view. Handlers only transform the
event and the current document; the view writes the result and the tracking
position together.
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from eventsourcing.persistence import Tracking

from devs.domain.chart import TaskState
from devs.domain.decisions import (
    FailureReport,
    GateStatus,
    HandoffEntry,
    Lesson,
    PendingSession,
    RunState,
    TaskIndexEntry,
)
from devs.domain.gate import GateFailureReason
from devs.domain.run import Run, RunStatus
from devs.domain.task import Task, state_after, task_id_of
from devs.projections.base import DocumentProjection, DocumentView, tracking_dispatcher
from devs.projections.sqlite import SQLiteDocumentView

FAILED_STRATEGIES_CAP = 100

_SESSION_CLOSERS = (Task.Resumed, Task.Rewound, Task.Skipped)


def _run_id_of(originator_id: str) -> str:
    return originator_id.removeprefix("run:")


# --------------------------------------------------------------------- task index


class TaskIndexView(DocumentView[TaskIndexEntry]):
    name: ClassVar[str] = "task_index"
    model = TaskIndexEntry


class TaskIndexProjection(DocumentProjection[TaskIndexView]):
    """Every task with its state, for listing by state or run."""

    name = "task_index"

    process_event = tracking_dispatcher()

    @process_event.register
    def _(self, domain_event: Task.Event, tracking: Tracking) -> None:
        task_id = task_id_of(domain_event.originator_id)
        with self.view.changes(tracking) as tx:
            doc = tx.get(task_id)
            if isinstance(domain_event, Task.Started):
                doc = TaskIndexEntry(
                    task_id=task_id,
                    run_id=domain_event.run_id,
                    state=TaskState.RUNNING,
                    consecutive_failures=0,
                    updated_at=domain_event.timestamp,
                )
            elif doc is not None:
                doc = doc.model_copy(
                    update={
                        "state": state_after(domain_event, doc.state),
                        "consecutive_failures": _count_after(
                            domain_event, doc.consecutive_failures
                        ),
                        "updated_at": domain_event.timestamp,
                    }
                )
            if doc is not None:
                tx.put(
                    task_id,
                    doc,
                    task_id=task_id,
                    run_id=doc.run_id,
                    state=doc.state,
                    seq=tracking.notification_id,
                )


def _count_after(domain_event: Any, count: int) -> int:
    if isinstance(domain_event, Task.GateFailed | Task.BlacklistedStrategyAttempted):
        return int(domain_event.consecutive_failures)
    if isinstance(domain_event, Task.GatePassed):
        return 0
    return count


# -------------------------------------------------------------------- gate status


class GateStatusView(DocumentView[GateStatus]):
    name: ClassVar[str] = "gate_status"
    model = GateStatus


class GateStatusProjection(DocumentProjection[GateStatusView]):
    """Per task: the human-in-the-loop gate and the last binary gate result."""

    name = "gate_status"

    process_event = tracking_dispatcher()

    @process_event.register
    def _(self, domain_event: Task.Event, tracking: Tracking) -> None:
        task_id = task_id_of(domain_event.originator_id)
        with self.view.changes(tracking) as tx:
            if isinstance(domain_event, Task.Started):
                doc: GateStatus | None = GateStatus(
                    task_id=task_id,
                    state=TaskState.RUNNING,
                    consecutive_failures=0,
                    triggered=False,
                    session_id=None,
                    reason=None,
                    entropy_score=None,
                    triggered_at=None,
                    last_gate=None,
                    last_passed=None,
                    last_reason=None,
                    last_exit_code=None,
                    last_error_hash=None,
                    updated_at=domain_event.timestamp,
                )
            else:
                doc = tx.get(task_id)
                if doc is None:
                    return
                update: dict[str, Any] = {
                    "state": state_after(domain_event, doc.state),
                    "consecutive_failures": _count_after(
                        domain_event, doc.consecutive_failures
                    ),
                    "updated_at": domain_event.timestamp,
                }
                if isinstance(domain_event, Task.Escalated | Task.Paused):
                    session = domain_event.session
                    update |= {
                        "triggered": True,
                        "session_id": session.session_id,
                        "reason": session.reason,
                        "entropy_score": session.entropy_score,
                        "triggered_at": session.opened_at,
                    }
                elif isinstance(domain_event, _SESSION_CLOSERS):
                    update |= {
                        "triggered": False,
                        "session_id": None,
                        "reason": None,
                        "entropy_score": None,
                        "triggered_at": None,
                    }
                elif isinstance(domain_event, Task.GatePassed):
                    update |= {
                        "last_gate": domain_event.gate,
                        "last_passed": True,
                        "last_reason": None,
                        "last_exit_code": 0,
                        "last_error_hash": None,
                    }
                elif isinstance(domain_event, Task.GateFailed):
                    failure = domain_event.failure
                    update |= {
                        "last_gate": failure.gate,
                        "last_passed": False,
                        "last_reason": GateFailureReason(failure.reason),
                        "last_exit_code": failure.exit_code,
                        "last_error_hash": failure.error_hash,
                    }
                doc = doc.model_copy(update=update)
            tx.put(task_id, doc, task_id=task_id, state=doc.state)


# ------------------------------------------------------------------------ lessons


class LessonsView(DocumentView[Lesson]):
    name: ClassVar[str] = "lessons"
    model = Lesson


def lesson_key(task_id: str, strategy: str) -> str:
    digest = hashlib.sha256(strategy.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{task_id}\x1f{digest}"


class LessonsProjection(DocumentProjection[LessonsView]):
    """Lessons per task; the same strategy twice keeps one, the newer summary."""

    name = "lessons"

    process_event = tracking_dispatcher()

    @process_event.register
    def _(self, domain_event: Task.LessonLogged, tracking: Tracking) -> None:
        task_id = task_id_of(domain_event.originator_id)
        lesson = Lesson(
            task_id=task_id,
            failed_strategy=domain_event.strategy,
            rca_summary=domain_event.rca_summary,
            logged_at=domain_event.timestamp,
        )
        with self.view.changes(tracking) as tx:
            tx.put(
                lesson_key(task_id, domain_event.strategy),
                lesson,
                task_id=task_id,
                seq=tracking.notification_id,
            )


# --------------------------------------------------------------- pending sessions


class PendingSessionsView(DocumentView[PendingSession]):
    name: ClassVar[str] = "pending_sessions"
    model = PendingSession


class PendingSessionsProjection(DocumentProjection[PendingSessionsView]):
    """Human sessions that wait for an answer."""

    name = "pending_sessions"

    process_event = tracking_dispatcher()

    @process_event.register
    def _(self, domain_event: Task.Event, tracking: Tracking) -> None:
        task_id = task_id_of(domain_event.originator_id)
        with self.view.changes(tracking) as tx:
            if isinstance(domain_event, Task.Escalated | Task.Paused):
                session = domain_event.session
                failure_count = (
                    domain_event.report.failure_count
                    if isinstance(domain_event, Task.Escalated)
                    else 0
                )
                tx.put(
                    session.session_id,
                    PendingSession(
                        session_id=session.session_id,
                        task_id=task_id,
                        reason=session.reason,
                        opened_at=session.opened_at,
                        entropy_score=session.entropy_score,
                        failure_count=failure_count,
                    ),
                    task_id=task_id,
                    state=session.reason,
                    seq=tracking.notification_id,
                )
            elif (
                isinstance(domain_event, _SESSION_CLOSERS)
                and domain_event.session_id is not None
            ):
                tx.delete(domain_event.session_id)


# -------------------------------------------------------------------- hand-off queue


class HandoffQueueView(DocumentView[HandoffEntry]):
    name: ClassVar[str] = "handoff_queue"
    model = HandoffEntry


class HandoffQueueProjection(DocumentProjection[HandoffQueueView]):
    """Tasks taken off their agent, in the order they were handed off."""

    name = "handoff_queue"

    process_event = tracking_dispatcher()

    @process_event.register
    def _(self, domain_event: Task.Event, tracking: Tracking) -> None:
        task_id = task_id_of(domain_event.originator_id)
        with self.view.changes(tracking) as tx:
            if isinstance(domain_event, Task.HandedOff):
                entry = HandoffEntry(
                    payload=domain_event.payload,
                    position=tracking.notification_id,
                    claimed_by=None,
                    claimed_at=None,
                )
                tx.put(
                    task_id,
                    entry,
                    task_id=task_id,
                    state="unclaimed",
                    seq=tracking.notification_id,
                )
            elif isinstance(domain_event, Task.HandoffClaimed):
                found = tx.get(task_id)
                if found is not None:
                    tx.put(
                        task_id,
                        found.model_copy(
                            update={
                                "claimed_by": domain_event.actor,
                                "claimed_at": domain_event.timestamp,
                            }
                        ),
                        task_id=task_id,
                        state="claimed",
                        seq=found.position,
                    )
            elif isinstance(
                domain_event, Task.HandoffResolved | Task.Rewound | Task.Skipped
            ):
                tx.delete(task_id)


# ----------------------------------------------------------------- failure reports


class FailureReportsView(DocumentView[FailureReport]):
    name: ClassVar[str] = "failure_reports"
    model = FailureReport


class FailureReportsProjection(DocumentProjection[FailureReportsView]):
    """Failures since the last pass per task, and the last escalation report."""

    name = "failure_reports"

    process_event = tracking_dispatcher()

    @process_event.register
    def _(self, domain_event: Task.Event, tracking: Tracking) -> None:
        task_id = task_id_of(domain_event.originator_id)
        with self.view.changes(tracking) as tx:
            if isinstance(domain_event, Task.Started):
                doc: FailureReport | None = FailureReport(
                    task_id=task_id,
                    failure_count=0,
                    failed_strategies=(),
                    last_error=None,
                    last_error_hash=None,
                    escalations=0,
                    last_escalation=None,
                    updated_at=domain_event.timestamp,
                )
            else:
                doc = tx.get(task_id)
                if doc is None:
                    return
                if isinstance(
                    domain_event, Task.GateFailed | Task.BlacklistedStrategyAttempted
                ):
                    failure = domain_event.failure
                    strategies = doc.failed_strategies
                    if failure.strategy and failure.strategy not in strategies:
                        strategies = (*strategies, failure.strategy)[
                            -FAILED_STRATEGIES_CAP:
                        ]
                    doc = doc.model_copy(
                        update={
                            "failure_count": domain_event.consecutive_failures,
                            "failed_strategies": strategies,
                            "last_error": failure.error_message
                            or failure.output_excerpt,
                            "last_error_hash": failure.error_hash,
                            "updated_at": domain_event.timestamp,
                        }
                    )
                elif isinstance(domain_event, Task.GatePassed):
                    doc = doc.model_copy(
                        update={
                            "failure_count": 0,
                            "failed_strategies": (),
                            "last_error": None,
                            "last_error_hash": None,
                            "updated_at": domain_event.timestamp,
                        }
                    )
                elif isinstance(domain_event, Task.Escalated):
                    doc = doc.model_copy(
                        update={
                            "escalations": doc.escalations + 1,
                            "last_escalation": domain_event.report,
                            "updated_at": domain_event.timestamp,
                        }
                    )
                else:
                    return
            tx.put(task_id, doc, task_id=task_id)


# ------------------------------------------------------------------------ run state


class RunStateView(DocumentView[RunState]):
    name: ClassVar[str] = "run_state"
    model = RunState


class RunStateProjection(DocumentProjection[RunStateView]):
    """Each run's status and its nodes by progress."""

    name = "run_state"

    process_event = tracking_dispatcher()

    @process_event.register
    def _(self, domain_event: Run.Event, tracking: Tracking) -> None:
        run_id = _run_id_of(domain_event.originator_id)
        with self.view.changes(tracking) as tx:
            if isinstance(domain_event, Run.Started):
                doc: RunState | None = RunState(
                    run_id=run_id,
                    status=RunStatus.RUNNING,
                    dag=domain_event.dag,
                    order=domain_event.order,
                    started=(),
                    completed=(),
                    skipped=(),
                    ready=(),
                    paused_by=(),
                    updated_at=domain_event.timestamp,
                )
            else:
                doc = tx.get(run_id)
                if doc is None:
                    return
            assert doc is not None
            update: dict[str, Any] = {"updated_at": domain_event.timestamp}
            if isinstance(domain_event, Run.NodeStarted):
                update["started"] = (*doc.started, domain_event.node)
            elif isinstance(domain_event, Run.NodeSettled):
                key = "completed" if domain_event.outcome == "completed" else "skipped"
                update[key] = (*getattr(doc, key), domain_event.node)
            elif isinstance(domain_event, Run.Paused):
                update["paused_by"] = (*doc.paused_by, domain_event.task_id)
                update["status"] = RunStatus.PAUSED
            elif isinstance(domain_event, Run.Resumed):
                paused_by = tuple(t for t in doc.paused_by if t != domain_event.task_id)
                update["paused_by"] = paused_by
                if not paused_by:
                    update["status"] = RunStatus.RUNNING
            elif isinstance(domain_event, Run.Completed):
                update["status"] = RunStatus.COMPLETED
            doc = doc.model_copy(update=update)
            doc = doc.model_copy(update={"ready": ready_nodes(doc)})
            tx.put(run_id, doc, run_id=run_id, state=doc.status)


def ready_nodes(doc: RunState) -> tuple[str, ...]:
    settled = {*doc.completed, *doc.skipped}
    started = set(doc.started)
    return tuple(
        node
        for node in doc.order
        if node not in settled
        and node not in started
        and all(p in settled for p in doc.dag[node])
    )


# ------------------------------------------------------------------ SQLite views


class SQLiteTaskIndexView(SQLiteDocumentView[TaskIndexEntry], TaskIndexView):
    pass


class SQLiteGateStatusView(SQLiteDocumentView[GateStatus], GateStatusView):
    pass


class SQLiteLessonsView(SQLiteDocumentView[Lesson], LessonsView):
    pass


class SQLitePendingSessionsView(
    SQLiteDocumentView[PendingSession], PendingSessionsView
):
    pass


class SQLiteHandoffQueueView(SQLiteDocumentView[HandoffEntry], HandoffQueueView):
    pass


class SQLiteFailureReportsView(SQLiteDocumentView[FailureReport], FailureReportsView):
    pass


class SQLiteRunStateView(SQLiteDocumentView[RunState], RunStateView):
    pass


PROJECTIONS: tuple[type[DocumentProjection[Any]], ...] = (
    TaskIndexProjection,
    GateStatusProjection,
    LessonsProjection,
    PendingSessionsProjection,
    HandoffQueueProjection,
    FailureReportsProjection,
    RunStateProjection,
)

SQLITE_VIEWS: dict[str, type[SQLiteDocumentView[Any]]] = {
    "task_index": SQLiteTaskIndexView,
    "gate_status": SQLiteGateStatusView,
    "lessons": SQLiteLessonsView,
    "pending_sessions": SQLitePendingSessionsView,
    "handoff_queue": SQLiteHandoffQueueView,
    "failure_reports": SQLiteFailureReportsView,
    "run_state": SQLiteRunStateView,
}
