"""The ``Run`` aggregate: an orchestration run's DAG of tasks and its status.

The DAG is fixed when the run starts: nodes are task ids, each with its
prerequisites; cycles and unknown prerequisites are rejected. A node is ready when
all its prerequisites are completed or skipped and it has not been started.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from graphlib import CycleError, TopologicalSorter
from types import MappingProxyType
from typing import ClassVar

from eventsourcing.domain import event
from eventsourcing.utils import register_topic

from devs.domain.errors import IllegalTransition, InvalidInput
from devs.domain.model import (
    Aggregate,
    AggregateCreated,
    AggregateSnapshot,
    SnapshotState,
)


class NodeOutcome(StrEnum):
    """How a node settled (stored as its value)."""

    COMPLETED = "completed"
    SKIPPED = "skipped"


class RunStatus(StrEnum):
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"


def topological_order(dag: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """Nodes ordered so that prerequisites come first; rejects bad graphs."""
    for node, prerequisites in dag.items():
        for prerequisite in prerequisites:
            if prerequisite not in dag:
                msg = f"dag node {node!r} has unknown prerequisite {prerequisite!r}"
                raise InvalidInput(msg)
    try:
        return tuple(TopologicalSorter(dag).static_order())
    except CycleError as error:
        cycle = " -> ".join(error.args[1])
        msg = f"dag has a cycle: {cycle}"
        raise InvalidInput(msg) from None


class RunSnapshotState(SnapshotState):
    run_id: str
    graph: dict[str, tuple[str, ...]]
    order: tuple[str, ...]
    status: RunStatus
    started: list[str]
    settled: dict[str, NodeOutcome]
    paused_by: list[str]


class Run(Aggregate):
    """An orchestration run over a DAG of tasks.

    Readiness is kept incrementally (``waiting`` counts each node's unsettled
    prerequisites, ``ready`` holds the nodes it released), so starting or
    settling a node costs time in its own edges, not in the size of the run.
    """

    TOPIC: ClassVar[str] = "devs:Run"
    DERIVED = ("position", "dependents", "waiting", "ready", "started_set")

    class Snapshot(AggregateSnapshot):
        TOPIC: ClassVar[str] = "devs:Run.Snapshot"
        state: RunSnapshotState

    class Started(AggregateCreated):
        TOPIC: ClassVar[str] = "devs:Run.Started"
        run_id: str
        dag: dict[str, tuple[str, ...]]
        order: tuple[str, ...]

    class NodeStarted(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Run.NodeStarted"
        node: str

    class NodeSettled(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Run.NodeSettled"
        node: str
        outcome: NodeOutcome

    class Paused(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Run.Paused"
        task_id: str
        reason: str

    class Resumed(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Run.Resumed"
        task_id: str

    class Completed(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Run.Completed"

    @staticmethod
    def create_id(run_id: str) -> str:
        return f"run:{run_id}"

    @classmethod
    def start(cls, run_id: str, dag: Mapping[str, Sequence[str]]) -> Run:
        graph = {node: tuple(prerequisites) for node, prerequisites in dag.items()}
        return cls(run_id=run_id, dag=graph, order=topological_order(graph))

    @event(Started)
    def __init__(
        self, run_id: str, dag: dict[str, tuple[str, ...]], order: tuple[str, ...]
    ) -> None:
        self.run_id = run_id
        self.graph = {node: tuple(prereqs) for node, prereqs in dag.items()}
        self.order = tuple(order)
        self.status = RunStatus.RUNNING
        self.started: list[str] = []
        self.settled: dict[str, NodeOutcome] = {}
        self.paused_by: list[str] = []
        self.derive()

    def derive(self) -> None:
        self.position = {node: index for index, node in enumerate(self.order)}
        dependents: dict[str, list[str]] = {node: [] for node in self.graph}
        for node, prerequisites in self.graph.items():
            for prerequisite in prerequisites:
                dependents[prerequisite].append(node)
        self.dependents = dependents
        self.started_set = set(self.started)
        self.waiting = {
            node: sum(p not in self.settled for p in prerequisites)
            for node, prerequisites in self.graph.items()
        }
        self.ready: dict[str, None] = {
            node: None for node in self.order if self._releasable(node)
        }

    # ----------------------------------------------------------------- queries

    @property
    def dag(self) -> Mapping[str, tuple[str, ...]]:
        """Read-only adjacency: node -> prerequisites."""
        return MappingProxyType(self.graph)

    def ready_nodes(self) -> tuple[str, ...]:
        """Nodes whose prerequisites are settled and that were not started."""
        return tuple(sorted(self.ready, key=self.position.__getitem__))

    def next_node(self) -> str | None:
        if not self.ready:
            return None
        return min(self.ready, key=self.position.__getitem__)

    def _releasable(self, node: str) -> bool:
        return (
            self.waiting[node] == 0
            and node not in self.started_set
            and node not in self.settled
        )

    # ---------------------------------------------------------------- commands

    def start_node(self, node: str) -> None:
        if node not in self.graph:
            msg = f"task {node!r} is not a node of run {self.run_id!r}"
            raise InvalidInput(msg)
        if self.status is not RunStatus.RUNNING:
            msg = f"run {self.run_id!r} is {self.status}; no task can start in it"
            raise IllegalTransition(msg, state=self.status)
        if self.waiting[node]:
            waiting = [p for p in self.graph[node] if p not in self.settled]
            msg = (
                f"task {node!r} is not ready in run {self.run_id!r}: waiting for "
                f"{', '.join(repr(w) for w in waiting)}"
            )
            raise IllegalTransition(msg, state=self.status)
        self._start_node(node=node)

    def settle(self, node: str, outcome: NodeOutcome) -> None:
        """A node completed or was skipped: release it, maybe complete the run."""
        if node in self.paused_by:
            self._resume(task_id=node)
        self._settle(node=node, outcome=outcome)
        if len(self.settled) == len(self.graph):
            self._complete()

    def pause(self, task_id: str, reason: str) -> None:
        if task_id not in self.paused_by:
            self._pause(task_id=task_id, reason=reason)

    def resume(self, task_id: str) -> None:
        if task_id in self.paused_by:
            self._resume(task_id=task_id)

    # ------------------------------------------------------- event appliers

    @event(NodeStarted)
    def _start_node(self, node: str) -> None:
        self.started.append(node)
        self.started_set.add(node)
        self.ready.pop(node, None)

    @event(NodeSettled)
    def _settle(self, node: str, outcome: NodeOutcome) -> None:
        self.settled[node] = outcome
        self.ready.pop(node, None)
        for dependent in self.dependents[node]:
            self.waiting[dependent] -= 1
            if self._releasable(dependent):
                self.ready[dependent] = None

    @event(Paused)
    def _pause(self, task_id: str, reason: str) -> None:
        self.paused_by.append(task_id)
        self.status = RunStatus.PAUSED

    @event(Resumed)
    def _resume(self, task_id: str) -> None:
        self.paused_by.remove(task_id)
        if not self.paused_by:
            self.status = RunStatus.RUNNING

    @event(Completed)
    def _complete(self) -> None:
        self.status = RunStatus.COMPLETED


register_topic(Run.Snapshot.TOPIC, Run.Snapshot)
