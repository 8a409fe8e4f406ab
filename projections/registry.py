"""The read models: each projection with its SQLite view. Adding a read model
is its own module plus one line here."""

from __future__ import annotations

from typing import Any

from devs.projections.base import ReadModelProjection, SQLiteView
from devs.projections.handoff_queue import (
    HandoffQueueProjection,
    SQLiteHandoffQueueView,
)
from devs.projections.hitl_failure_gates import (
    FailureGatesProjection,
    SQLiteFailureGatesView,
)
from devs.projections.hitl_sessions import (
    HumanSessionsProjection,
    SQLiteHumanSessionsView,
)
from devs.projections.lessons_learned import LessonsProjection, SQLiteLessonsView
from devs.projections.metrics import MetricsProjection, SQLiteMetricsView
from devs.projections.outbox import OutboxProjection, SQLiteOutboxView
from devs.projections.runs import RunsProjection, SQLiteRunsView
from devs.projections.task_failures import (
    SQLiteTaskFailuresView,
    TaskFailuresProjection,
)
from devs.projections.tasks import SQLiteTasksView, TasksProjection

SQLITE: tuple[tuple[type[ReadModelProjection[Any]], type[SQLiteView]], ...] = (
    (TasksProjection, SQLiteTasksView),
    (HumanSessionsProjection, SQLiteHumanSessionsView),
    (FailureGatesProjection, SQLiteFailureGatesView),
    (LessonsProjection, SQLiteLessonsView),
    (TaskFailuresProjection, SQLiteTaskFailuresView),
    (HandoffQueueProjection, SQLiteHandoffQueueView),
    (RunsProjection, SQLiteRunsView),
    (MetricsProjection, SQLiteMetricsView),
    (OutboxProjection, SQLiteOutboxView),
)
"""Every read model, in the order events are fed to them (a gate's row refers
to its session's, which PostgreSQL checks at once). The PostgreSQL views of
the same read models are :data:`devs.projections.postgres.POSTGRES`."""
