"""``runs``, ``run_nodes`` and ``run_links``: orchestration runs, a row per node.

Starting a run writes its nodes and edges once; every later run event touches
the run's row and one node (settling a node also counts down its dependents'
``waiting``, through ``run_links``), so an event costs the same in a run of
ten nodes or ten thousand. An edge names its two nodes by their ``position``
(their index in the run's DAG order), not by their ids: the largest DAG
allowed has 100,000 edges between ids of up to 200 characters.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from eventsourcing.persistence import Tracking, TrackingRecorder

from devs.domain.names import StopScope
from devs.domain.ports import RunState
from devs.domain.run import NodeOutcome, Run, RunStatus
from devs.projections.base import ReadModelProjection, SQLiteView, SQLTables, folds

WAITING, READY, STARTED = "waiting", "ready", "started"
COMPLETED, SKIPPED = NodeOutcome.COMPLETED.value, NodeOutcome.SKIPPED.value
"""A node's ``progress``: waiting, ready, started, then how it settled."""
DAGS_KEPT = 8
"""How many runs' DAGs a process keeps (:meth:`RunsTables.run_state`)."""


def run_id_of(originator_id: str) -> str:
    return originator_id.removeprefix("run:")


class RunsView(TrackingRecorder, ABC):
    @abstractmethod
    def insert_run(self, run_id: str, e: Run.Started, tracking: Tracking) -> None:
        """Add the run, its nodes and its edges."""

    @abstractmethod
    def start_node(self, run_id: str, node: str, at: str, tracking: Tracking) -> None:
        """The node's task started."""

    @abstractmethod
    def settle_node(
        self, run_id: str, node: str, outcome: str, at: str, tracking: Tracking
    ) -> None:
        """The node completed or was skipped; release its dependents."""

    @abstractmethod
    def pause(
        self, run_id: str, node: str, paused: bool, at: str, tracking: Tracking
    ) -> None:
        """The node's task stopped the run for a human, or no longer does."""

    @abstractmethod
    def complete(self, run_id: str, at: str, tracking: Tracking) -> None:
        """Every node is settled."""

    @abstractmethod
    def over_budget(self, run_id: str, over: bool, at: str, tracking: Tracking) -> None:
        """The run's tasks spent its budget (``over``), or a person raised it."""

    @abstractmethod
    def run_state(self, run_id: str) -> RunState | None:
        """The run and its nodes."""


class RunsProjection(ReadModelProjection[RunsView]):
    process_event = folds()

    @process_event.register
    def _(self, e: Run.Started, tracking: Tracking) -> None:
        self.view.insert_run(run_id_of(e.originator_id), e, tracking)

    @process_event.register
    def _(self, e: Run.NodeStarted, tracking: Tracking) -> None:
        self.view.start_node(
            run_id_of(e.originator_id), e.node, e.timestamp.isoformat(), tracking
        )

    @process_event.register
    def _(self, e: Run.NodeSettled, tracking: Tracking) -> None:
        self.view.settle_node(
            run_id_of(e.originator_id),
            e.node,
            e.outcome,
            e.timestamp.isoformat(),
            tracking,
        )

    @process_event.register
    def _(self, e: Run.Paused, tracking: Tracking) -> None:
        self.view.pause(
            run_id_of(e.originator_id),
            e.task_id,
            True,
            e.timestamp.isoformat(),
            tracking,
        )

    @process_event.register
    def _(self, e: Run.Resumed, tracking: Tracking) -> None:
        self.view.pause(
            run_id_of(e.originator_id),
            e.task_id,
            False,
            e.timestamp.isoformat(),
            tracking,
        )

    @process_event.register
    def _(self, e: Run.BudgetExhausted, tracking: Tracking) -> None:
        self.view.over_budget(
            run_id_of(e.originator_id), True, e.timestamp.isoformat(), tracking
        )

    @process_event.register
    def _(self, e: Run.BudgetRaised, tracking: Tracking) -> None:
        self.view.over_budget(
            run_id_of(e.originator_id), False, e.timestamp.isoformat(), tracking
        )

    @process_event.register
    def _(self, e: Run.Completed, tracking: Tracking) -> None:
        self.view.complete(
            run_id_of(e.originator_id), e.timestamp.isoformat(), tracking
        )


class RunsTables(RunsView, SQLTables):
    """The ``runs`` tables and their SQL (SQLite and PostgreSQL alike)."""

    name: ClassVar[str] = "runs"
    # v2: stop scopes; v3: no index on progress; v4: over_budget;
    # v5: edges by node position (run_links), not by id (run_edges)
    schema_version: ClassVar[int] = 5
    tables: ClassVar[tuple[str, ...]] = ("runs", "run_nodes", "run_links")
    former_tables: ClassVar[tuple[str, ...]] = ("run_edges",)
    ddl: ClassVar[tuple[str, ...]] = (
        "CREATE TABLE IF NOT EXISTS runs ("
        "id TEXT PRIMARY KEY, "
        "status TEXT NOT NULL, "
        "node_count INTEGER NOT NULL, "
        "settled_count INTEGER NOT NULL DEFAULT 0, "
        "paused_count INTEGER NOT NULL DEFAULT 0, "
        "stop_scope TEXT NOT NULL DEFAULT 'run', "
        "over_budget INTEGER NOT NULL DEFAULT 0, "
        "started_at TEXT NOT NULL, "
        "updated_at TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS run_nodes ("
        "run_id TEXT NOT NULL, "
        "node_id TEXT NOT NULL, "
        "position INTEGER NOT NULL, "
        "waiting INTEGER NOT NULL, "
        "progress TEXT NOT NULL, "
        "started_seq INTEGER, "
        "settled_seq INTEGER, "
        "paused_seq INTEGER, "
        "started_at TEXT, "
        "settled_at TEXT, "
        "PRIMARY KEY (run_id, node_id))",
        "CREATE INDEX IF NOT EXISTS run_nodes_position ON run_nodes (run_id, position)",
        # An edge by its nodes' positions: settling a node reads its
        # dependents by the key's prefix (run_id, prerequisite), and a run's
        # DAG is read whole by run_id; no other index. On SQLite the key is
        # the table (WITHOUT ROWID: one b-tree, not a table and its key's).
        "CREATE TABLE IF NOT EXISTS run_links ("
        "run_id TEXT NOT NULL, "
        "prerequisite INTEGER NOT NULL, "
        "node INTEGER NOT NULL, "
        "ordinal INTEGER NOT NULL, "
        "PRIMARY KEY (run_id, prerequisite, node)) WITHOUT ROWID",
    )
    pg_migrations: ClassVar[tuple[str, ...]] = (
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS "
        "stop_scope TEXT NOT NULL DEFAULT 'run'",
        # v3: no query reads nodes by progress; the index only slowed writes.
        "DROP INDEX IF EXISTS run_nodes_progress",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS "
        "over_budget INTEGER NOT NULL DEFAULT 0",
        # v5: the edges of a database written by v4 (runs in flight among
        # them) move to run_links, their ids turned into their positions.
        "DO $$ BEGIN "
        "IF to_regclass('run_edges') IS NOT NULL THEN "
        "INSERT INTO run_links (run_id, prerequisite, node, ordinal) "
        "SELECT e.run_id, p.position, n.position, e.ordinal FROM run_edges e "
        "JOIN run_nodes p ON p.run_id = e.run_id AND p.node_id = e.prerequisite "
        "JOIN run_nodes n ON n.run_id = e.run_id AND n.node_id = e.node_id "
        "ON CONFLICT DO NOTHING; "
        "DROP TABLE run_edges; "
        "END IF; END $$",
    )

    def insert_run(self, run_id: str, e: Run.Started, tracking: Tracking) -> None:
        at = e.timestamp.isoformat()
        nodes, prerequisites = e.nodes, e.prerequisites
        with self.changes(tracking) as cursor:
            cursor.execute(
                "INSERT INTO runs (id, status, node_count, started_at, "
                "updated_at, stop_scope) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (run_id, RunStatus.RUNNING, len(nodes), at, at, e.stop_scope.value),
            )
            cursor.executemany(
                "INSERT INTO run_nodes (run_id, node_id, position, waiting, "
                "progress) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [
                    (run_id, node, index, len(prereqs), WAITING if prereqs else READY)
                    for index, (node, prereqs) in enumerate(
                        zip(nodes, prerequisites, strict=True)
                    )
                ],
            )
            cursor.executemany(
                "INSERT INTO run_links (run_id, prerequisite, node, ordinal) "
                "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [
                    (run_id, prerequisite, index, ordinal)
                    for index, prereqs in enumerate(prerequisites)
                    for ordinal, prerequisite in enumerate(prereqs)
                ],
            )

    def start_node(self, run_id: str, node: str, at: str, tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "UPDATE run_nodes SET progress = ?, started_seq = ?, started_at = ? "
                "WHERE run_id = ? AND node_id = ?",
                (STARTED, tracking.notification_id, at, run_id, node),
            )
            self._touch(cursor, run_id, at)

    def settle_node(
        self, run_id: str, node: str, outcome: str, at: str, tracking: Tracking
    ) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "UPDATE run_nodes SET progress = ?, settled_seq = ?, settled_at = ? "
                "WHERE run_id = ? AND node_id = ?",
                (outcome, tracking.notification_id, at, run_id, node),
            )
            cursor.execute(
                "UPDATE run_nodes SET waiting = waiting - 1, progress = CASE WHEN "
                "waiting = 1 AND progress = ? THEN ? ELSE progress END "
                "WHERE run_id = ? AND position IN (SELECT node FROM run_links "
                "WHERE run_id = ? AND prerequisite = (SELECT position FROM "
                "run_nodes WHERE run_id = ? AND node_id = ?))",
                (WAITING, READY, run_id, run_id, run_id, node),
            )
            cursor.execute(
                "UPDATE runs SET settled_count = settled_count + 1, updated_at = ? "
                "WHERE id = ?",
                (at, run_id),
            )

    def pause(
        self, run_id: str, node: str, paused: bool, at: str, tracking: Tracking
    ) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "UPDATE run_nodes SET paused_seq = ? WHERE run_id = ? AND node_id = ?",
                (tracking.notification_id if paused else None, run_id, node),
            )
            cursor.execute(
                "UPDATE runs SET paused_count = paused_count + ?, updated_at = ? "
                "WHERE id = ?",
                (1 if paused else -1, at, run_id),
            )
            self._status(cursor, run_id)

    def over_budget(self, run_id: str, over: bool, at: str, tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "UPDATE runs SET over_budget = ?, updated_at = ? WHERE id = ?",
                (int(over), at, run_id),
            )
            self._status(cursor, run_id)

    @staticmethod
    def _status(cursor: Any, run_id: str) -> None:
        """The run's status as its aggregate has it: paused while its tasks'
        stops hold it (scope ``run``) or its budget is spent."""
        cursor.execute(
            "UPDATE runs SET status = CASE WHEN over_budget = 1 OR (paused_count "
            "> 0 AND stop_scope = ?) THEN ? ELSE ? END WHERE id = ? AND status != ?",
            (
                StopScope.RUN.value,
                RunStatus.PAUSED,
                RunStatus.RUNNING,
                run_id,
                RunStatus.COMPLETED,
            ),
        )

    def complete(self, run_id: str, at: str, tracking: Tracking) -> None:
        with self.changes(tracking) as cursor:
            cursor.execute(
                "UPDATE runs SET status = ?, updated_at = ? WHERE id = ?",
                (RunStatus.COMPLETED, at, run_id),
            )

    @staticmethod
    def _touch(cursor: Any, run_id: str, at: str) -> None:
        cursor.execute("UPDATE runs SET updated_at = ? WHERE id = ?", (at, run_id))

    def forget(self) -> None:
        self._dags().clear()

    def _dags(self) -> dict[str, dict[str, tuple[str, ...]]]:
        """The DAGs of the runs last asked about, by run id: a run's DAG
        never changes once it started, so a query of a large run reads only
        what moves, its nodes' progress, after the first."""
        kept: dict[str, dict[str, tuple[str, ...]]]
        kept = self.__dict__.setdefault("_kept_dags", {})
        return kept

    def run_state(self, run_id: str) -> RunState | None:
        kept = self._dags()
        dag = kept.get(run_id)
        queries = [
            (
                "SELECT status, updated_at, stop_scope, started_at, over_budget "
                "FROM runs WHERE id = ?",
                (run_id,),
            ),
            (
                "SELECT node_id, progress, started_seq, settled_seq, paused_seq "
                "FROM run_nodes WHERE run_id = ? ORDER BY position",
                (run_id,),
            ),
        ]
        if dag is None:
            queries.append(
                (
                    "SELECT node, prerequisite FROM run_links WHERE run_id = ? "
                    "ORDER BY node, ordinal",
                    (run_id,),
                )
            )
        found = self._select_together(*queries)  # one snapshot
        runs, nodes = found[0], found[1]
        if not runs:
            return None
        order = tuple(node[0] for node in nodes)  # by position, from 0
        if dag is None:
            prerequisites: list[list[str]] = [[] for _ in order]
            for position, prerequisite in found[2]:
                prerequisites[position].append(order[prerequisite])
            dag = dict(zip(order, map(tuple, prerequisites), strict=True))
            while len(kept) >= DAGS_KEPT:
                try:  # another thread may be changing it: then try again
                    del kept[next(iter(kept))]
                except (RuntimeError, KeyError, StopIteration):
                    continue
            kept[run_id] = dag
        started: list[tuple[int, str]] = []
        settled: list[tuple[int, str, str]] = []
        paused: list[tuple[int, str]] = []
        ready: list[str] = []
        for node_id, progress, started_seq, settled_seq, paused_seq in nodes:
            if started_seq is not None:
                started.append((started_seq, node_id))
            if settled_seq is not None:
                settled.append((settled_seq, node_id, progress))
            if paused_seq is not None:
                paused.append((paused_seq, node_id))
            if progress == READY:
                ready.append(node_id)
        started.sort()
        settled.sort()
        paused.sort()
        status, updated_at, stop_scope, started_at, over_budget = runs[0]
        return RunState(
            run_id=run_id,
            status=status,
            dag=dag,
            order=order,
            started=tuple(node for _, node in started),
            completed=tuple(node for _, node, p in settled if p == COMPLETED),
            skipped=tuple(node for _, node, p in settled if p == SKIPPED),
            ready=tuple(ready),
            paused_by=tuple(node for _, node in paused),
            updated_at=updated_at,
            stop_scope=stop_scope,
            started_at=started_at,
            over_budget=bool(over_budget),
        )


class SQLiteRunsView(RunsTables, SQLiteView):
    """The ``runs`` read model in the application's SQLite file."""
