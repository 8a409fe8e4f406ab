"""The SQLite read models, kept current by catching up in the calling process.

SQLite cannot be subscribed to, so before a query the read models catch up from
the application's notification log: whatever was recorded since each view's
tracking position is read once per page and fed to each projection inside one
transaction per view. A query therefore sees every command that returned
before it, in this process or another. Catch-ups may overlap (threads,
processes): each view's write transaction first reads the view's position and
folds only the events past it, so no event is folded twice.

:class:`SQLiteReadModels` implements the domain's
:class:`~devs.domain.ports.ReadModels` port; ``RecoveryService`` gets it by
topic (``READ_MODELS_TOPIC=devs.projections.sqlite:SQLiteReadModels``, the
default).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import IntegrityError, OperationalError, Tracking
from eventsourcing.sqlite import SQLiteFactory

from devs.domain.errors import DevsError, InvalidInput
from devs.domain.ports import (
    FailureReport,
    GateStatus,
    HandoffEntry,
    Lesson,
    PendingSession,
    RunState,
    TaskIndexEntry,
)
from devs.projections.base import Handler, ReadModelProjection, SQLiteView
from devs.projections.handoff_queue import SQLiteHandoffQueueView
from devs.projections.hitl_failure_gates import SQLiteFailureGatesView
from devs.projections.hitl_sessions import SQLiteHumanSessionsView
from devs.projections.lessons_learned import SQLiteLessonsView
from devs.projections.registry import SQLITE
from devs.projections.runs import SQLiteRunsView
from devs.projections.task_failures import SQLiteTaskFailuresView
from devs.projections.tasks import SQLiteTasksView

PAGE_SIZE = 500
MAX_CONFLICTS = 20
LEGACY_TABLES = (
    "view_task_index",
    "view_gate_status",
    "view_lessons",
    "view_pending_sessions",
    "view_handoff_queue",
    "view_failure_reports",
    "view_run_state",
)
"""Document tables of databases written before the typed read models."""


class SQLiteReadModels:
    """The application's read models in its own SQLite file."""

    def __init__(self, app: Application[Any]) -> None:
        if not isinstance(app.factory, SQLiteFactory):
            msg = (
                "the SQLite read models need eventsourcing.sqlite persistence; "
                f"PERSISTENCE_MODULE is {app.env.get('PERSISTENCE_MODULE')!r}"
            )
            raise DevsError(msg)
        self.app = app
        datastore = app.factory.datastore
        self.projections: dict[str, ReadModelProjection[Any]] = {}
        self.views: dict[str, SQLiteView] = {}
        for projection_class, view_class in SQLITE:
            view = view_class(
                datastore, tracking_name=view_class.tracking_name_for(app.name)
            )
            self.views[view.name] = view
            self.projections[view.name] = projection_class(view=view)
        self.names = tuple(self.views)
        self._drop_legacy_tables(self.views[SQLiteTasksView.name])
        for view in self.views.values():
            view.setup()
        self._positions: dict[str, int] = {}
        self._handlers: dict[tuple[str, type[Any]], Handler | None] = {}

    def _drop_legacy_tables(self, tasks: SQLiteView) -> None:
        """The first open by this version drops the old document views (and
        their positions, so a 0.1.0 process still open would rebuild its own);
        the typed tables rebuild from the log."""
        tasks.create_table()  # eventsourcing's tracking table
        if tasks.max_tracking_id(tasks.tracking_name) is not None:
            return
        with tasks._write() as cursor:
            for table in LEGACY_TABLES:
                cursor.execute(f"DROP TABLE IF EXISTS {table}")
                cursor.execute(
                    "DELETE FROM tracking WHERE application_name = ?",
                    (f"{self.app.name}/{table.removeprefix('view_')}",),
                )

    # ------------------------------------------------------------- catching up

    def positions(self) -> dict[str, int]:
        return {name: view.position() for name, view in self.views.items()}

    def catch_up(
        self,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Fold everything recorded so far into the (named) read models."""
        last = self.app.recorder.max_notification_id() or 0
        return self.catch_up_to(last, names, progress)

    def catch_up_to(
        self,
        last: int,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Fold the log up to position ``last`` into the (named) read models."""
        selected = list(names) if names is not None else list(self.views)
        known = self._positions
        if all(known.get(name, -1) >= last for name in selected):
            return last
        for _ in range(MAX_CONFLICTS):
            try:
                self._catch_up_to(last, selected, progress)
            except (IntegrityError, OperationalError):
                # A lock held too long, or a lost race: re-read and go on.
                self._positions = {}
                continue
            return last
        msg = "read models could not catch up: too many concurrent updates"
        raise OperationalError(msg)

    def _catch_up_to(
        self,
        last: int,
        names: Sequence[str],
        progress: Callable[[int, int], None] | None,
    ) -> None:
        positions = self.positions()  # this catch-up's own, shared when done
        start = min(positions[name] for name in names)
        while start < last:
            notifications = self.app.recorder.select_notifications(
                start=start + 1, limit=PAGE_SIZE, stop=last
            )
            if not notifications:
                break
            page = [(self.app.mapper.to_domain_event(n), n.id) for n in notifications]
            for name in names:
                view, projection = self.views[name], self.projections[name]
                todo = [(e, i) for e, i in page if i > positions[name]]
                if not todo:
                    continue
                end = Tracking(view.tracking_name, todo[-1][1])
                with view.batch(end) as current:
                    for domain_event, notification_id in todo:
                        if notification_id <= current:
                            continue  # another catch-up folded it meanwhile
                        handler = self._handler(name, type(domain_event))
                        if handler is not None:
                            tracking = Tracking(view.tracking_name, notification_id)
                            handler(projection, domain_event, tracking)
                positions[name] = max(end.notification_id, current)
            start = notifications[-1].id
            if progress is not None:
                progress(start, last)
        self._positions = positions

    def _handler(self, name: str, event_class: type[Any]) -> Handler | None:
        key = (name, event_class)
        try:
            return self._handlers[key]
        except KeyError:
            handler = type(self.projections[name]).handler_for(event_class)
            self._handlers[key] = handler
            return handler

    def rebuild(
        self,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        selected = list(names) if names is not None else list(self.views)
        unknown = [name for name in selected if name not in self.views]
        if unknown:
            msg = (
                f"unknown projection {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(self.views)}"
            )
            raise InvalidInput(msg)
        for name in selected:
            self.views[name].clear()
        self._positions = {}
        return self.catch_up(selected, progress)

    def close(self) -> None:
        """The views share the application's datastore: nothing of their own."""

    # ----------------------------------------------------------------- queries

    @property
    def _tasks(self) -> SQLiteTasksView:
        view = self.views[SQLiteTasksView.name]
        assert isinstance(view, SQLiteTasksView)
        return view

    def _view(self, view_class: type[Any]) -> Any:
        return self.views[view_class.name]

    def task_entry(self, task_id: str) -> TaskIndexEntry | None:
        return self._tasks.task_entry(task_id)

    def task_entries(
        self, *, state: str | None = None, run_id: str | None = None
    ) -> list[TaskIndexEntry]:
        return self._tasks.task_entries(state=state, run_id=run_id)

    def gate_status(self, task_id: str) -> GateStatus | None:
        task = self._tasks.task_row(task_id)
        if task is None:
            return None
        gate = self._view(SQLiteFailureGatesView).open_gate_of(task_id)
        passed = task["last_gate_passed"]
        return GateStatus(
            task_id=task_id,
            state=task["state"],
            consecutive_failures=task["failure_count"],
            triggered=gate is not None,
            session_id=gate["session_id"] if gate else None,
            reason=gate["reason"] if gate else None,
            entropy_score=gate["entropy_score"] if gate else None,
            triggered_at=gate["opened_at"] if gate else None,
            last_gate=task["last_gate"],
            last_passed=None if passed is None else bool(passed),
            last_reason=task["last_gate_reason"],
            last_exit_code=task["last_exit_code"],
            last_error_hash=task["last_error_hash"],
            updated_at=task["updated_at"],
        )

    def failure_report(self, task_id: str) -> FailureReport | None:
        found: FailureReport | None = self._view(SQLiteTaskFailuresView).failure_report(
            task_id
        )
        return found

    def lessons(self, task_id: str) -> list[Lesson]:
        found: list[Lesson] = self._view(SQLiteLessonsView).lessons(task_id)
        return found

    def lesson_strategies(self, task_id: str) -> tuple[str, ...]:
        found: tuple[str, ...] = self._view(SQLiteLessonsView).lesson_strategies(
            task_id
        )
        return found

    def pending_sessions(self) -> list[PendingSession]:
        found: list[PendingSession] = self._view(
            SQLiteHumanSessionsView
        ).pending_sessions()
        return found

    def handoff_queue(self) -> list[HandoffEntry]:
        found: list[HandoffEntry] = self._view(SQLiteHandoffQueueView).handoff_queue()
        return found

    def run_state(self, run_id: str) -> RunState | None:
        found: RunState | None = self._view(SQLiteRunsView).run_state(run_id)
        return found
