"""``metrics``: how tasks went — states, loops, failures before a human, time
to a human, hand-offs, blocked attempts, the strategies that failed most.

Each event touches a bounded number of rows of three tables
(``metrics_tasks``, ``metrics_waits``, ``metrics_strategy_failures``), so a
fold costs the same whatever the log holds, and every figure is an SQL
aggregate over them read in one snapshot. A per-task figure is one more column
of ``metrics_tasks`` (its DDL, its change in :meth:`MetricsTables.fold`, a
bump of ``schema_version``) and one :meth:`MetricsTables._spread` over it.
The tables: docs/read-models.md; the figures: docs/audit.md.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, get_args

from eventsourcing.persistence import Tracking, TrackingRecorder

from devs.domain.chart import TaskState
from devs.domain.names import HumanAction, Resolution, ResolutionValue
from devs.domain.ports import (
    Distribution,
    HandoffEnd,
    Metrics,
    ModelSpend,
    StrategyFailures,
    WaitTimes,
)
from devs.domain.stuck import STUCK_AT
from devs.domain.task import Task, TaskEvent, task_id_of
from devs.projections.base import ReadModelProjection, SQLiteView, SQLTables, folds

TOP_STRATEGIES = 10
HAND_OFF = "hand_off"
"""``metrics_waits.reason`` of a hand-off (the others are session reasons)."""
EXPIRED = "expired"
"""``metrics_waits.answer`` of a wait nobody answered by its deadline."""
OPEN: HandoffEnd = "open"
HANDOFF_ENDS: tuple[HandoffEnd, ...] = (*get_args(ResolutionValue), OPEN)

Step = Callable[[str], TaskState]
Select = Callable[[str, Any], list[Any]]


def nearest_rank(percent: int, count: int) -> int:
    """The 1-based rank of the ``percent``-th percentile of ``count`` sorted
    values by the nearest-rank rule: ceil(percent / 100 * count), at least 1.

    Integer arithmetic, so no rounding error moves a rank (90 % of 10 is 9).
    """
    if not 0 < percent <= 100 or count < 1:
        msg = (
            "nearest_rank needs a percent in (0, 100] and a count of at least 1, "
            f"got {percent} and {count}"
        )
        raise ValueError(msg)
    return -(-percent * count // 100)


def moment(at: datetime) -> str:
    """``at`` as the tables store times: ISO 8601 in UTC with microseconds, one
    fixed width, so text order is time order (and ``since`` compares as text).
    """
    return at.astimezone(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True, slots=True)
class Change:
    """What one task event means to the metrics (beyond the state it leads to)."""

    at: str
    position: int
    failed: bool = False
    blocked: bool = False
    strategy: str | None = None
    stops: str | None = None
    """It stops the task for a human: the wait's reason."""
    answers: HumanAction | None = None
    """It answers the wait that is open, if one is."""
    ends_handoff: Resolution | None = None
    """It ends the hand-off that is open, if one is, this way."""
    expires: bool = False
    """It ends the wait that is open, if one is, unanswered (its deadline
    passed)."""
    stuck: float | None = None
    """The failure's stuck score, if one was derived."""
    stuck_kinds: tuple[str, ...] = ()
    """The kinds of the signals behind it."""


class MetricsView(TrackingRecorder, ABC):
    @abstractmethod
    def start_task(self, row: dict[str, Any], tracking: Tracking) -> None:
        """A started task's row."""

    @abstractmethod
    def fold(
        self, task_id: str, step: Step, change: Change, tracking: Tracking
    ) -> None:
        """Move the task to ``step(state)`` and record ``change``."""

    @abstractmethod
    def use(self, task_id: str, row: dict[str, Any], tracking: Tracking) -> None:
        """A usage's tokens and cost added to the task's row for its model."""

    @abstractmethod
    def metrics(self, *, run_id: str | None, since: datetime | None) -> Metrics:
        """The figures over the tasks of ``run_id`` started at or after ``since``."""

    @abstractmethod
    def spend_by_model(
        self, *, task_id: str | None = None, run_id: str | None = None
    ) -> tuple[ModelSpend, ...]:
        """Each agent and model's spend over one task, one run or all."""


class MetricsProjection(ReadModelProjection[MetricsView]):
    process_event = folds()

    @process_event.register
    def _(self, e: Task.Started, tracking: Tracking) -> None:
        self.view.start_task(
            {
                "task_id": e.task_id,
                "run_id": e.run_id,
                "agent": e.agent,
                "started_at": moment(e.timestamp),
                "state": TaskState.RUNNING,
                "position": tracking.notification_id,
            },
            tracking,
        )

    @process_event.register
    def _(self, e: TaskEvent, tracking: Tracking) -> None:
        self._fold(e, tracking)

    @process_event.register(Task.GateFailed)
    @process_event.register(Task.BlacklistedStrategyAttempted)
    def _(
        self, e: Task.GateFailed | Task.BlacklistedStrategyAttempted, tracking: Tracking
    ) -> None:
        blocked = isinstance(e, Task.BlacklistedStrategyAttempted)
        stuck = e.stuck
        self._fold(
            e,
            tracking,
            failed=True,
            blocked=blocked,
            strategy=e.failure.strategy,
            stuck=stuck.score if stuck is not None else None,
            stuck_kinds=tuple(dict.fromkeys(s.kind for s in stuck.signals))
            if stuck is not None
            else (),
        )

    @process_event.register
    def _(self, e: Task.UsageRecorded, tracking: Tracking) -> None:
        tokens = (
            e.input_tokens
            + e.output_tokens
            + e.cache_read_tokens
            + e.cache_creation_tokens
        )
        self.view.use(
            task_id_of(e.originator_id),
            {
                "model": e.model,
                "input_tokens": e.input_tokens,
                "output_tokens": e.output_tokens,
                "cache_read_tokens": e.cache_read_tokens,
                "cache_creation_tokens": e.cache_creation_tokens,
                "cost_usd": e.cost_usd or 0.0,
                "unknown_cost_tokens": tokens if e.cost_usd is None else 0,
            },
            tracking,
        )

    @process_event.register(Task.Escalated)
    @process_event.register(Task.Paused)
    def _(self, e: Task.Escalated | Task.Paused, tracking: Tracking) -> None:
        self._fold(e, tracking, stops=e.session.reason)

    @process_event.register
    def _(self, e: Task.HandedOff, tracking: Tracking) -> None:
        self._fold(e, tracking, stops=HAND_OFF)

    @process_event.register
    def _(self, e: Task.DeadlineExpired, tracking: Tracking) -> None:
        self._fold(e, tracking, expires=True, stops=HAND_OFF)

    @process_event.register
    def _(self, e: Task.Resumed, tracking: Tracking) -> None:
        self._fold(e, tracking, answers=HumanAction.RESUME)

    @process_event.register
    def _(self, e: Task.Rewound, tracking: Tracking) -> None:
        self._fold(
            e, tracking, answers=HumanAction.REWIND, ends_handoff=Resolution.RETURN
        )

    @process_event.register
    def _(self, e: Task.Skipped, tracking: Tracking) -> None:
        self._fold(e, tracking, answers=HumanAction.SKIP, ends_handoff=Resolution.SKIP)

    @process_event.register
    def _(self, e: Task.HandoffClaimed, tracking: Tracking) -> None:
        self._fold(e, tracking, answers=HumanAction.CLAIM)

    @process_event.register
    def _(self, e: Task.HandoffResolved, tracking: Tracking) -> None:
        self._fold(e, tracking, ends_handoff=e.resolution)

    def _fold(self, e: TaskEvent, tracking: Tracking, **change: Any) -> None:
        self.view.fold(
            task_id_of(e.originator_id),
            e.state_after,
            Change(at=moment(e.timestamp), position=tracking.notification_id, **change),
            tracking,
        )


class MetricsTables(MetricsView, SQLTables):
    """The ``metrics`` tables and their SQL (SQLite and PostgreSQL alike)."""

    name: ClassVar[str] = "metrics"
    schema_version: ClassVar[int] = 3  # v2: stuck scores; v3: spend
    tables: ClassVar[tuple[str, ...]] = (
        "metrics_tasks",
        "metrics_waits",
        "metrics_strategy_failures",
        "metrics_stuck_signals",
        "metrics_spend",
    )
    ddl: ClassVar[tuple[str, ...]] = (
        "CREATE TABLE IF NOT EXISTS metrics_tasks ("
        "task_id TEXT PRIMARY KEY, "
        "run_id TEXT, "
        "agent TEXT, "
        "started_at TEXT NOT NULL, "
        "state TEXT NOT NULL, "
        "failures INTEGER NOT NULL DEFAULT 0, "
        "blocked INTEGER NOT NULL DEFAULT 0, "
        "looped INTEGER NOT NULL DEFAULT 0, "
        "first_human_at TEXT, "
        "failures_before_human INTEGER, "
        "open_wait INTEGER, "
        "open_handoff INTEGER, "
        "max_stuck REAL, "
        "position INTEGER NOT NULL)",
        "CREATE INDEX IF NOT EXISTS metrics_tasks_run "
        "ON metrics_tasks (run_id, started_at)",
        "CREATE INDEX IF NOT EXISTS metrics_tasks_started "
        "ON metrics_tasks (started_at)",
        "CREATE TABLE IF NOT EXISTS metrics_waits ("
        "position INTEGER PRIMARY KEY, "
        "task_id TEXT NOT NULL, "
        "reason TEXT NOT NULL, "
        "opened_at TEXT NOT NULL, "
        "answered_at TEXT, "
        "answer TEXT, "
        "seconds REAL, "
        "ended_as TEXT)",
        "CREATE INDEX IF NOT EXISTS metrics_waits_task ON metrics_waits (task_id)",
        "CREATE INDEX IF NOT EXISTS metrics_waits_seconds ON metrics_waits (seconds)",
        "CREATE TABLE IF NOT EXISTS metrics_strategy_failures ("
        "task_id TEXT NOT NULL, "
        "strategy_hash TEXT NOT NULL, "
        "strategy TEXT NOT NULL, "
        "failures INTEGER NOT NULL, "
        "PRIMARY KEY (task_id, strategy_hash))",
        "CREATE TABLE IF NOT EXISTS metrics_stuck_signals ("
        "task_id TEXT NOT NULL, "
        "kind TEXT NOT NULL, "
        "PRIMARY KEY (task_id, kind))",
        "CREATE TABLE IF NOT EXISTS metrics_spend ("
        "task_id TEXT NOT NULL, "
        "model TEXT NOT NULL, "
        "usages INTEGER NOT NULL, "
        "input_tokens INTEGER NOT NULL, "
        "output_tokens INTEGER NOT NULL, "
        "cache_read_tokens INTEGER NOT NULL, "
        "cache_creation_tokens INTEGER NOT NULL, "
        "cost_usd REAL NOT NULL, "
        "unknown_cost_tokens INTEGER NOT NULL, "
        "PRIMARY KEY (task_id, model))",
    )
    pg_migrations: ClassVar[tuple[str, ...]] = (
        "ALTER TABLE metrics_tasks ADD COLUMN IF NOT EXISTS max_stuck REAL",
        "ALTER TABLE metrics_tasks ADD COLUMN IF NOT EXISTS agent TEXT",
    )

    text_order: ClassVar[str] = ""
    """What makes ``ORDER BY`` of text compare code points (PostgreSQL's
    default collation may not)."""

    # --------------------------------------------------------------- folding

    def start_task(self, row: dict[str, Any], tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            self._insert(
                cursor, "metrics_tasks", row, "ON CONFLICT (task_id) DO NOTHING"
            )

    def fold(
        self, task_id: str, step: Step, change: Change, tracking: Tracking
    ) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "SELECT state, failures, blocked, first_human_at, open_wait, "
                "open_handoff, max_stuck FROM metrics_tasks WHERE task_id = ?",
                (task_id,),
            )
            row = cursor.fetchone()
            if row is None:
                return
            changes: dict[str, Any] = {"state": step(row["state"])}
            if change.failed:
                changes["failures"] = row["failures"] + 1
                if change.blocked:
                    changes["blocked"] = row["blocked"] + 1
                if change.strategy:
                    self._count_strategy(cursor, task_id, change.strategy)
                if change.stuck is not None and (
                    row["max_stuck"] is None or change.stuck > row["max_stuck"]
                ):
                    changes["max_stuck"] = change.stuck
                    self._stuck_signals(cursor, task_id, change.stuck_kinds)
            if change.answers is not None and row["open_wait"] is not None:
                self._answer(cursor, row["open_wait"], change)
                changes["open_wait"] = None
            if change.expires and row["open_wait"] is not None:
                cursor.execute(
                    "UPDATE metrics_waits SET answer = ? WHERE position = ?",
                    (EXPIRED, row["open_wait"]),
                )
                changes["open_wait"] = None
            if change.ends_handoff is not None and row["open_handoff"] is not None:
                cursor.execute(
                    "UPDATE metrics_waits SET ended_as = ? WHERE position = ?",
                    (str(change.ends_handoff), row["open_handoff"]),
                )
                changes["open_handoff"] = None
            if change.stops is not None:
                self._insert(
                    cursor,
                    "metrics_waits",
                    {
                        "position": change.position,
                        "task_id": task_id,
                        "reason": change.stops,
                        "opened_at": change.at,
                        "ended_as": OPEN if change.stops == HAND_OFF else None,
                    },
                    "ON CONFLICT (position) DO NOTHING",
                )
                changes["open_wait"] = change.position
                if change.stops == HAND_OFF:
                    changes["open_handoff"] = change.position
                else:
                    changes["looped"] = 1
                if row["first_human_at"] is None:
                    changes["first_human_at"] = change.at
                    changes["failures_before_human"] = row["failures"]
            self._update(cursor, "metrics_tasks", ("task_id", task_id), changes)

    def use(self, task_id: str, row: dict[str, Any], tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "INSERT INTO metrics_spend (task_id, model, usages, input_tokens, "
                "output_tokens, cache_read_tokens, cache_creation_tokens, cost_usd, "
                "unknown_cost_tokens) VALUES (:task_id, :model, 1, :input_tokens, "
                ":output_tokens, :cache_read_tokens, :cache_creation_tokens, "
                ":cost_usd, :unknown_cost_tokens) "
                "ON CONFLICT (task_id, model) DO UPDATE SET "
                "usages = metrics_spend.usages + 1, "
                "input_tokens = metrics_spend.input_tokens + excluded.input_tokens, "
                "output_tokens = metrics_spend.output_tokens + excluded.output_tokens, "
                "cache_read_tokens = metrics_spend.cache_read_tokens "
                "+ excluded.cache_read_tokens, "
                "cache_creation_tokens = metrics_spend.cache_creation_tokens "
                "+ excluded.cache_creation_tokens, "
                "cost_usd = metrics_spend.cost_usd + excluded.cost_usd, "
                "unknown_cost_tokens = metrics_spend.unknown_cost_tokens "
                "+ excluded.unknown_cost_tokens",
                {"task_id": task_id, **row},
            )

    @staticmethod
    def _stuck_signals(cursor: Any, task_id: str, kinds: tuple[str, ...]) -> None:
        """The signal kinds behind the task's highest stuck score (a handful)."""
        cursor.execute(
            "DELETE FROM metrics_stuck_signals WHERE task_id = ?", (task_id,)
        )
        for kind in kinds:
            cursor.execute(
                "INSERT INTO metrics_stuck_signals (task_id, kind) VALUES (?, ?)",
                (task_id, kind),
            )

    def _count_strategy(self, cursor: Any, task_id: str, strategy: str) -> None:
        digest = hashlib.sha256(strategy.encode("utf-8", "surrogatepass")).hexdigest()
        cursor.execute(
            "INSERT INTO metrics_strategy_failures "
            "(task_id, strategy_hash, strategy, failures) VALUES (?, ?, ?, 1) "
            "ON CONFLICT (task_id, strategy_hash) DO UPDATE SET "
            "failures = metrics_strategy_failures.failures + 1",
            (task_id, digest, strategy),
        )

    @staticmethod
    def _answer(cursor: Any, wait: int, change: Change) -> None:
        cursor.execute(
            "SELECT opened_at FROM metrics_waits WHERE position = ?", (wait,)
        )
        found = cursor.fetchone()
        if found is None:
            return
        opened = datetime.fromisoformat(found["opened_at"])
        answered = datetime.fromisoformat(change.at)
        # Two writers' clocks may disagree by a little: never a negative wait.
        seconds = max(0.0, (answered - opened).total_seconds())
        cursor.execute(
            "UPDATE metrics_waits SET answered_at = ?, answer = ?, seconds = ? "
            "WHERE position = ?",
            (change.at, str(change.answers), seconds, wait),
        )

    # --------------------------------------------------------------- reading

    @abstractmethod
    def _snapshot(self) -> AbstractContextManager[Select]:
        """A ``select(statement, params)`` whose statements all read one
        snapshot of the tables."""

    def metrics(self, *, run_id: str | None, since: datetime | None) -> Metrics:
        where, params = ["1 = 1"], []
        if run_id is not None:
            where.append("t.run_id = ?")
            params.append(run_id)
        if since is not None:
            where.append("t.started_at >= ?")
            params.append(moment(since))
        tasks = " AND ".join(where)
        with self._snapshot() as select:
            states = {
                row["state"]: int(row["n"])
                for row in select(
                    f"SELECT t.state, COUNT(*) AS n FROM metrics_tasks t "
                    f"WHERE {tasks} GROUP BY t.state",
                    params,
                )
            }
            [totals] = select(
                "SELECT COUNT(*) AS n, COALESCE(SUM(t.looped), 0) AS looped, "
                "COALESCE(SUM(t.blocked), 0) AS blocked "
                f"FROM metrics_tasks t WHERE {tasks}",
                params,
            )
            before_human = self._spread(
                select,
                "t.failures_before_human",
                f"FROM metrics_tasks t WHERE {tasks} "
                "AND t.failures_before_human IS NOT NULL",
                params,
            )
            waits = (
                "FROM metrics_waits w JOIN metrics_tasks t ON t.task_id = w.task_id "
                f"WHERE {tasks}"
            )
            answered = self._spread(
                select, "w.seconds", f"{waits} AND w.answered_at IS NOT NULL", params
            )
            [unanswered] = select(
                f"SELECT COUNT(*) AS n {waits} AND w.answered_at IS NULL "
                "AND w.answer IS NULL",
                params,
            )
            handoffs = {
                row["ended_as"]: int(row["n"])
                for row in select(
                    f"SELECT w.ended_as, COUNT(*) AS n {waits} "
                    "AND w.reason = ? GROUP BY w.ended_as",
                    [*params, HAND_OFF],
                )
            }
            [stuck] = select(
                "SELECT COUNT(*) AS n FROM metrics_tasks t "
                f"WHERE {tasks} AND t.max_stuck >= ?",
                [*params, STUCK_AT],
            )
            stuck_score = self._spread(
                select,
                "t.max_stuck",
                f"FROM metrics_tasks t WHERE {tasks} AND t.max_stuck IS NOT NULL",
                params,
            )
            signals = {
                row["kind"]: int(row["n"])
                for row in select(
                    "SELECT g.kind, COUNT(*) AS n FROM metrics_stuck_signals g "
                    f"JOIN metrics_tasks t ON t.task_id = g.task_id WHERE {tasks} "
                    "GROUP BY g.kind",
                    params,
                )
            }
            spend = self._spend(select, tasks, params)
            strategies = select(
                "SELECT s.strategy, SUM(s.failures) AS total "
                "FROM metrics_strategy_failures s "
                f"JOIN metrics_tasks t ON t.task_id = s.task_id WHERE {tasks} "
                "GROUP BY s.strategy "
                f"ORDER BY total DESC, s.strategy{self.text_order} "
                f"LIMIT {TOP_STRATEGIES}",
                params,
            )
        count = int(totals["n"])
        return Metrics(
            run_id=run_id,
            since=since,
            tasks=count,
            tasks_by_state={state: states.get(state, 0) for state in TaskState},
            loop_rate=int(totals["looped"]) / count if count else 0.0,
            failures_before_first_human=before_human,
            time_to_human=WaitTimes(**answered.model_dump(), open=int(unanswered["n"])),
            handoffs_by_resolution={end: handoffs.get(end, 0) for end in HANDOFF_ENDS},
            blocked_attempts=int(totals["blocked"]),
            top_failed_strategies=tuple(
                StrategyFailures(strategy=row["strategy"], failures=int(row["total"]))
                for row in strategies
            ),
            stuck_tasks=int(stuck["n"]),
            stuck_score=stuck_score,
            stuck_signals=dict(sorted(signals.items())),
            spend=spend,
        )

    def spend_by_model(
        self, *, task_id: str | None = None, run_id: str | None = None
    ) -> tuple[ModelSpend, ...]:
        where, params = ["1 = 1"], []
        if task_id is not None:
            where.append("t.task_id = ?")
            params.append(task_id)
        if run_id is not None:
            where.append("t.run_id = ?")
            params.append(run_id)
        with self._snapshot() as select:
            return self._spend(select, " AND ".join(where), params)

    def _spend(
        self, select: Select, tasks: str, params: list[Any]
    ) -> tuple[ModelSpend, ...]:
        """Each agent and model's spend over ``tasks`` (a condition on
        ``metrics_tasks t``), most spent first, then by agent and model."""
        rows = select(
            "SELECT t.agent AS agent, s.model AS model, SUM(s.usages) AS usages, "
            "SUM(s.input_tokens) AS input_tokens, "
            "SUM(s.output_tokens) AS output_tokens, "
            "SUM(s.cache_read_tokens) AS cache_read_tokens, "
            "SUM(s.cache_creation_tokens) AS cache_creation_tokens, "
            "SUM(s.cost_usd) AS cost_usd, "
            "SUM(s.unknown_cost_tokens) AS unknown_cost_tokens "
            "FROM metrics_spend s JOIN metrics_tasks t ON t.task_id = s.task_id "
            f"WHERE {tasks} GROUP BY t.agent, s.model",
            params,
        )
        found = [
            ModelSpend(
                agent=row["agent"],
                model=row["model"],
                usages=int(row["usages"]),
                # Rounded as the task's own sums are: a float sum depends on
                # the order the database adds the rows in.
                spent_usd=round(float(row["cost_usd"]), 9),
                tokens=int(row["input_tokens"])
                + int(row["output_tokens"])
                + int(row["cache_read_tokens"])
                + int(row["cache_creation_tokens"]),
                input_tokens=int(row["input_tokens"]),
                output_tokens=int(row["output_tokens"]),
                cache_read_tokens=int(row["cache_read_tokens"]),
                cache_creation_tokens=int(row["cache_creation_tokens"]),
                unknown_cost_tokens=int(row["unknown_cost_tokens"]),
            )
            for row in rows
        ]
        found.sort(key=lambda m: (-m.spent_usd, -m.tokens, m.agent or "", m.model))
        return tuple(found)

    @staticmethod
    def _spread(
        select: Select, column: str, rows: str, params: list[Any]
    ) -> Distribution:
        """Count, sum, mean and nearest-rank p50 and p90 of ``column`` over
        ``rows`` (a ``FROM … WHERE …`` clause), each percentile one row read in
        the database."""
        [found] = select(
            f"SELECT COUNT({column}) AS n, SUM({column}) AS total {rows}", params
        )
        count = int(found["n"])
        if count == 0:
            return Distribution(count=0, total=0.0, mean=None, p50=None, p90=None)
        # Rounded to the microsecond the times carry: a float sum depends on
        # the order the database adds the rows in, which a rebuild changes.
        total = round(float(found["total"]), 6)

        def percentile(percent: int) -> float:
            offset = nearest_rank(percent, count) - 1
            [value] = select(
                f"SELECT {column} AS v {rows} AND {column} IS NOT NULL "
                f"ORDER BY {column} LIMIT 1 OFFSET {offset}",
                params,
            )
            return float(value["v"])

        return Distribution(
            count=count,
            total=total,
            mean=total / count,
            p50=percentile(50),
            p90=percentile(90),
        )


class SQLiteMetricsView(MetricsTables, SQLiteView):
    """The ``metrics`` read model in the application's SQLite file."""

    @contextmanager
    def _snapshot(self) -> Iterator[Select]:
        # eventsourcing's read transaction is a BEGIN (deferred): from the
        # first SELECT on, every statement reads the same snapshot.
        with self.datastore.transaction(commit=False) as cursor:

            def select(statement: str, params: Any = ()) -> list[Any]:
                cursor.execute(statement, params)
                return list(cursor.fetchall())

            yield select
