"""The ``Run`` aggregate: an orchestration run's DAG of tasks and its status.

The DAG is fixed when the run starts (cycles, unknown prerequisites and a DAG
over the limits are refused); a node is ready when its prerequisites are
completed or skipped. The run records its DAG and its progress as positions in
a topological order, so a snapshot names every node once and costs a few bytes
per edge; runs recorded in release 0.1.0's shape are upcast when read
(``mode="before"`` validators).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from enum import StrEnum
from functools import cached_property
from graphlib import CycleError, TopologicalSorter
from typing import Any, ClassVar

from eventsourcing.domain import event
from eventsourcing.utils import register_topic
from pydantic import model_validator

from devs.domain.errors import IllegalTransition, InvalidInput, NotFound
from devs.domain.model import (
    Aggregate,
    AggregateCreated,
    AggregateSnapshot,
    SnapshotState,
)
from devs.domain.names import StopScope
from devs.domain.spend import Spend, Usage
from devs.domain.values import DAG_MAX_NODES

MAX_RUN_NODES = DAG_MAX_NODES
"""Nodes in one run (10,000; ``start_run``'s argument type checks it first)."""
MAX_RUN_EDGES = 100_000
"""Prerequisite links in one run, each counted once per node (10 per node on
average at the node limit; a fan-in of 9,999 fits)."""
MAX_RUN_ID_BYTES = 2_000_000
"""The node ids of one run, in UTF-8, together: 10,000 ids of 200 ASCII
characters fit; ids of wider characters fit fewer."""

SHOWN = 5
"""Nodes named in an error message before it says how many more there are."""


class NodeOutcome(StrEnum):
    """How a node settled (stored as its value)."""

    COMPLETED = "completed"
    SKIPPED = "skipped"


class RunStatus(StrEnum):
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"


# ----------------------------------------------------------------- the DAG


def _listed(names: Sequence[str], joint: str = ", ", quote: bool = True) -> str:
    """The first :data:`SHOWN` names, then how many more."""
    shown = [repr(n) if quote else n for n in names[:SHOWN]]
    more = len(names) - len(shown)
    return joint.join(shown) + (f" and {more:,} more" if more else "")


def check_limits(graph: Mapping[str, Sequence[str]]) -> None:
    """Refuse a DAG over :data:`MAX_RUN_NODES`, :data:`MAX_RUN_EDGES` or
    :data:`MAX_RUN_ID_BYTES` (prerequisites already distinct); linear."""
    if not graph:
        msg = "dag must have at least one node"
        raise InvalidInput(msg, field="dag")
    if len(graph) > MAX_RUN_NODES:
        msg = f"dag has {len(graph):,} nodes; the limit is {MAX_RUN_NODES:,}"
        raise InvalidInput(msg, field="dag")
    edges = sum(map(len, graph.values()))
    if edges > MAX_RUN_EDGES:
        msg = f"dag has {edges:,} edges (prerequisites); the limit is {MAX_RUN_EDGES:,}"
        raise InvalidInput(msg, field="dag")
    try:
        size = sum(len(node.encode()) for node in graph)
    except UnicodeEncodeError:
        msg = "dag node must be valid Unicode text (no lone surrogates)"
        raise InvalidInput(msg, field="dag") from None
    if size > MAX_RUN_ID_BYTES:
        msg = (
            f"dag node ids take {size:,} bytes (UTF-8); "
            f"the limit is {MAX_RUN_ID_BYTES:,}"
        )
        raise InvalidInput(msg, field="dag")


def topological_order(dag: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """Nodes ordered so that prerequisites come first; rejects bad graphs.

    ``graphlib`` sorts in time linear in nodes and edges and finds a cycle when
    there is one; the refusal names at most :data:`SHOWN` of its nodes.
    """
    for node, prerequisites in dag.items():
        for prerequisite in prerequisites:
            if prerequisite not in dag:
                msg = f"dag node {node!r} has unknown prerequisite {prerequisite!r}"
                raise InvalidInput(msg, field="dag")
    try:
        return tuple(TopologicalSorter(dag).static_order())
    except CycleError as error:
        cycle: list[str] = error.args[1]  # its first node again at the end
        if len(cycle) <= SHOWN + 1:
            shown = " -> ".join(cycle)
        else:
            shown = f"{_listed(cycle[:-1], ' -> ', quote=False)} -> {cycle[0]}"
        msg = f"dag has a cycle: {shown}"
        raise InvalidInput(msg, field="dag") from None


def _by_position(
    dag: Mapping[str, Sequence[str]], order: Sequence[str]
) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...], dict[str, int]]:
    """``order`` as a tuple, each node's distinct prerequisites as positions in
    it, and each node's position."""
    position = {node: index for index, node in enumerate(order)}
    prerequisites = tuple(
        tuple(position[p] for p in dict.fromkeys(dag[node])) for node in order
    )
    return tuple(order), prerequisites, position


def plan(
    dag: Mapping[str, Sequence[str]],
) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """The DAG as a run records it: nodes in topological order, and each node's
    distinct prerequisites as positions in that order. Checks everything."""
    graph = {node: tuple(dict.fromkeys(prereqs)) for node, prereqs in dag.items()}
    check_limits(graph)
    nodes, prerequisites, _ = _by_position(graph, topological_order(graph))
    return nodes, prerequisites


class DagView(Mapping[str, tuple[str, ...]]):
    """Read-only ``node -> prerequisites`` over the recorded positions.

    Iterates in topological order; a lookup costs the node's own edges.
    """

    def __init__(
        self,
        nodes: tuple[str, ...],
        prerequisites: tuple[tuple[int, ...], ...],
        position: Mapping[str, int] | None = None,
    ) -> None:
        self.nodes = nodes
        self.prerequisites = prerequisites
        if position is not None:
            self.__dict__["position"] = position

    @cached_property
    def position(self) -> Mapping[str, int]:
        return {node: index for index, node in enumerate(self.nodes)}

    def __getitem__(self, node: str) -> tuple[str, ...]:
        return tuple(self.nodes[p] for p in self.prerequisites[self.position[node]])

    def __iter__(self) -> Iterator[str]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __contains__(self, node: object) -> bool:
        return node in self.position


# ------------------------------------------------------ upcasting 0.1.0 data


def _upcast_started(data: Any) -> Any:
    """A 0.1.0 ``Started`` event (``dag`` of ids, ``order``) in today's shape."""
    if not isinstance(data, dict) or "dag" not in data:
        return data
    upcast = {k: v for k, v in data.items() if k not in ("dag", "order")}
    upcast["nodes"], upcast["prerequisites"], _ = _by_position(
        data["dag"], data["order"]
    )
    return upcast


def _upcast_snapshot_state(data: Any) -> Any:
    """A 0.1.0 run snapshot (``graph``, ``order``, progress by id) in today's shape."""
    if not isinstance(data, dict) or "graph" not in data:
        return data
    old = ("graph", "order", "started", "settled", "paused_by")
    upcast = {k: v for k, v in data.items() if k not in old}
    nodes, prerequisites, position = _by_position(data["graph"], data["order"])
    settled: dict[str, str] = data["settled"]
    upcast |= {
        "nodes": nodes,
        "prerequisites": prerequisites,
        "start_order": [position[n] for n in data["started"]],
        "settle_order": [position[n] for n in settled],
        "skipped": [position[n] for n, o in settled.items() if o == "skipped"],
        "pausing": [position[n] for n in data["paused_by"]],
    }
    return upcast


class RunSnapshotState(SnapshotState):
    run_id: str
    nodes: tuple[str, ...]
    prerequisites: tuple[tuple[int, ...], ...]
    status: RunStatus
    start_order: list[int]
    settle_order: list[int]
    skipped: list[int]
    pausing: list[int]
    stop_scope: StopScope = StopScope.RUN
    budget_usd: float | None = None
    usage: Usage | None = None
    over_budget: bool = False

    @model_validator(mode="before")
    @classmethod
    def upcast_0_1_0(cls, data: Any) -> Any:
        return _upcast_snapshot_state(data)


# ----------------------------------------------------------------- the run


class Run(Aggregate):
    """An orchestration run over a DAG of tasks.

    Readiness is kept incrementally (``waiting`` counts each node's unsettled
    prerequisites; ``ready`` holds the nodes it released, ``ready_heap`` the
    same by position, stale entries dropped when met), so starting or settling
    a node costs time in its own edges, not in the size of the run.
    """

    TOPIC: ClassVar[str] = "devs:Run"
    DERIVED = (
        "position",
        "dependents",
        "waiting",
        "ready",
        "ready_heap",
        "started_set",
        "settled_set",
        "paused_set",
    )

    class Snapshot(AggregateSnapshot):
        TOPIC: ClassVar[str] = "devs:Run.Snapshot"
        state: RunSnapshotState

    class Started(AggregateCreated):
        """The run and its DAG: node ids in topological order, and each node's
        prerequisites as positions in ``nodes``."""

        TOPIC: ClassVar[str] = "devs:Run.Started"
        run_id: str
        nodes: tuple[str, ...]
        prerequisites: tuple[tuple[int, ...], ...]
        stop_scope: StopScope = StopScope.RUN
        """What a task's stop holds up (recorded: a replay decides the same)."""
        budget_usd: float | None = None
        """The run's budget in USD, every task's usage together (the policy's
        ``run_budget_usd`` when the run started; ``None``: unlimited)."""

        @model_validator(mode="before")
        @classmethod
        def upcast_0_1_0(cls, data: Any) -> Any:
            return _upcast_started(data)

        @property
        def dag(self) -> Mapping[str, tuple[str, ...]]:
            """The DAG by id (node -> prerequisites), read-only."""
            return DagView(self.nodes, self.prerequisites)

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

    class Spent(Aggregate.Event):
        """A usage of one of the run's tasks, counted against the run's
        budget (recorded only for a run with a budget)."""

        TOPIC: ClassVar[str] = "devs:Run.Spent"
        task_id: str
        usage: Usage
        """The usage's tokens and cost (``spent_usd``: its cost, if known)."""

    class BudgetExhausted(Aggregate.Event):
        """The run's tasks together spent its budget: the run pauses, and
        every working task of it stops for a human."""

        TOPIC: ClassVar[str] = "devs:Run.BudgetExhausted"
        spend: Spend

    class BudgetRaised(Aggregate.Event):
        """A person set the run's budget above what its tasks spent."""

        TOPIC: ClassVar[str] = "devs:Run.BudgetRaised"
        budget_usd: float
        actor: str
        reason: str

    @staticmethod
    def create_id(run_id: str) -> str:
        return f"run:{run_id}"

    @classmethod
    def start(
        cls,
        run_id: str,
        dag: Mapping[str, Sequence[str]],
        stop_scope: StopScope = StopScope.RUN,
        budget_usd: float | None = None,
    ) -> Run:
        """A new run; refuses a bad DAG (:func:`plan`) before any event.
        ``budget_usd``: what its tasks may spend together (``None``:
        unlimited)."""
        nodes, prerequisites = plan(dag)
        # The event as before the scope and the budget existed, when unused.
        given: dict[str, Any] = {}
        if stop_scope is not StopScope.RUN:
            given["stop_scope"] = stop_scope
        if budget_usd is not None:
            given["budget_usd"] = budget_usd
        return cls(run_id=run_id, nodes=nodes, prerequisites=prerequisites, **given)

    @event(Started)
    def __init__(
        self,
        run_id: str,
        nodes: tuple[str, ...],
        prerequisites: tuple[tuple[int, ...], ...],
        stop_scope: StopScope = StopScope.RUN,
        budget_usd: float | None = None,
    ) -> None:
        self.run_id = run_id
        self.nodes = nodes
        self.prerequisites = prerequisites
        self.stop_scope = StopScope(stop_scope)
        self.budget_usd = budget_usd
        self.usage: Usage | None = None
        self.over_budget = False
        self.status = RunStatus.RUNNING
        self.start_order: list[int] = []
        self.settle_order: list[int] = []
        self.skipped: list[int] = []
        self.pausing: list[int] = []
        self.derive()

    def derive(self) -> None:
        self.position = {node: index for index, node in enumerate(self.nodes)}
        dependents: list[list[int]] = [[] for _ in self.nodes]
        for index, prerequisites in enumerate(self.prerequisites):
            for prerequisite in prerequisites:
                dependents[prerequisite].append(index)
        self.dependents = dependents
        self.started_set = set(self.start_order)
        self.settled_set = set(self.settle_order)
        self.paused_set = set(self.pausing)
        self.waiting = [
            sum(p not in self.settled_set for p in prerequisites)
            for prerequisites in self.prerequisites
        ]
        self.ready_heap = [i for i in range(len(self.nodes)) if self._releasable(i)]
        self.ready = set(self.ready_heap)  # the heap is sorted, so a heap

    def __eq__(self, other: object) -> bool:
        """Runs are equal when their recorded state is (derived state is a cache:
        the ready heap, say, may hold stale entries in one and not the other)."""
        return (
            isinstance(other, Run)
            and type(self) is type(other)
            and (self._recorded() == other._recorded())
        )

    __hash__ = Aggregate.__hash__

    def _recorded(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k not in self.DERIVED}

    # ----------------------------------------------------------------- queries

    @property
    def dag(self) -> Mapping[str, tuple[str, ...]]:
        """Read-only adjacency: node -> prerequisites, in topological order."""
        return DagView(self.nodes, self.prerequisites, self.position)

    @property
    def order(self) -> tuple[str, ...]:
        """The nodes, prerequisites first."""
        return self.nodes

    @property
    def started(self) -> tuple[str, ...]:
        """Started nodes, in the order they started."""
        return tuple(self.nodes[i] for i in self.start_order)

    @property
    def settled(self) -> dict[str, NodeOutcome]:
        """Settled nodes and how, in the order they settled."""
        skipped = set(self.skipped)
        outcome = {True: NodeOutcome.SKIPPED, False: NodeOutcome.COMPLETED}
        return {self.nodes[i]: outcome[i in skipped] for i in self.settle_order}

    @property
    def paused_by(self) -> tuple[str, ...]:
        """The tasks that hold the run paused, in the order they paused it."""
        return tuple(self.nodes[i] for i in self.pausing)

    def spend(self) -> Spend:
        """What the run's tasks spent since it started, against its budget
        (counted only for a run with a budget)."""
        return Spend.counted(self.usage or Usage(), self.budget_usd, None, "run")

    def working_nodes(self) -> tuple[str, ...]:
        """The tasks started and not settled, in the order they started."""
        return tuple(
            self.nodes[i] for i in self.start_order if i not in self.settled_set
        )

    def ready_nodes(self) -> tuple[str, ...]:
        """Nodes whose prerequisites are settled and that were not started."""
        return tuple(self.nodes[i] for i in sorted(self.ready))

    def next_node(self) -> str | None:
        """The first ready node in topological order."""
        heap = self.ready_heap
        while heap and heap[0] not in self.ready:
            heapq.heappop(heap)  # started or settled since it was released
        return self.nodes[heap[0]] if heap else None

    def _releasable(self, index: int) -> bool:
        return (
            self.waiting[index] == 0
            and index not in self.started_set
            and index not in self.settled_set
        )

    def _index(self, node: str) -> int:
        index = self.position.get(node)
        if index is None:
            # 404: the run exists; no node of it has this id.
            msg = f"task {node!r} is not a node of run {self.run_id!r}"
            raise NotFound(msg)
        return index

    # ---------------------------------------------------------------- commands

    def start_node(self, node: str) -> None:
        index = self._index(node)
        if self.over_budget:
            spend = self.spend()
            msg = (
                f"run {self.run_id!r} is {self.status}: its tasks spent its budget "
                f"(USD {spend.spent_usd:.6g} of {spend.budget_usd:g}), so no task "
                f"can start in it; raise it first (`devs budget --run {self.run_id} "
                "--usd N`)"
            )
            raise IllegalTransition(msg, state=self.status)
        if self.status is not RunStatus.RUNNING:
            msg = f"run {self.run_id!r} is {self.status}; no task can start in it"
            raise IllegalTransition(msg, state=self.status)
        if self.waiting[index]:
            waiting = [
                self.nodes[p]
                for p in self.prerequisites[index]
                if p not in self.settled_set
            ]
            msg = (
                f"task {node!r} is not ready in run {self.run_id!r}: waiting for "
                f"{_listed(waiting)}"
            )
            raise IllegalTransition(msg, state=self.status)
        self._start_node(node=node)

    def settle(self, node: str, outcome: NodeOutcome) -> None:
        """A node completed or was skipped: release it, maybe complete the run."""
        index = self._index(node)
        if index in self.paused_set:
            self._resume(task_id=node)
        self._settle(node=node, outcome=outcome)
        if len(self.settle_order) == len(self.nodes):
            self._complete()

    def pause(self, task_id: str, reason: str) -> None:
        if self._index(task_id) not in self.paused_set:
            self._pause(task_id=task_id, reason=reason)

    def resume(self, task_id: str) -> None:
        if self._index(task_id) in self.paused_set:
            self._resume(task_id=task_id)

    def count_usage(self, task_id: str, usage: Usage) -> None:
        """One of its tasks' usage: counted against the run's budget (a run
        without one keeps no count); at the budget, the run stops for it."""
        if self.budget_usd is None:
            return
        self._spent(task_id=task_id, usage=usage)
        spend = self.spend()
        if spend.over_usd and not self.over_budget:
            self._exhaust(spend=spend)

    def raise_budget(self, usd: float, *, actor: str, reason: str) -> None:
        """A person sets the run's budget to ``usd``, above what its tasks
        spent (else ``InvalidInput``, nothing written); a run started
        without a budget has none to raise."""
        if self.budget_usd is None:
            msg = (
                f"run {self.run_id!r} has no budget: it started without one "
                "(DEVS_RUN_BUDGET_USD), so its tasks' spend was not counted "
                "against one; each task's own budget can be raised"
            )
            raise InvalidInput(msg, field="usd")
        spent = self.spend().spent_usd
        if usd <= spent:
            msg = (
                f"usd {usd:g} is not above what run {self.run_id!r} has spent "
                f"(USD {spent:.6g}): set a budget above it"
            )
            raise InvalidInput(msg, field="usd")
        self._raise_budget(budget_usd=usd, actor=actor, reason=reason)

    # ------------------------------------------------------- event appliers

    @event(NodeStarted)
    def _start_node(self, node: str) -> None:
        index = self.position[node]
        self.start_order.append(index)
        self.started_set.add(index)
        self.ready.discard(index)

    @event(NodeSettled)
    def _settle(self, node: str, outcome: NodeOutcome) -> None:
        index = self.position[node]
        self.settle_order.append(index)
        if outcome == NodeOutcome.SKIPPED:
            self.skipped.append(index)
        self.settled_set.add(index)
        self.ready.discard(index)
        for dependent in self.dependents[index]:
            self.waiting[dependent] -= 1
            if self._releasable(dependent):
                self.ready.add(dependent)
                heapq.heappush(self.ready_heap, dependent)

    @event(Paused)
    def _pause(self, task_id: str, reason: str) -> None:
        index = self.position[task_id]
        self.pausing.append(index)
        self.paused_set.add(index)
        if self.stop_scope is StopScope.RUN:
            self.status = RunStatus.PAUSED

    @event(Resumed)
    def _resume(self, task_id: str) -> None:
        index = self.position[task_id]
        self.pausing.remove(index)
        self.paused_set.discard(index)
        if not self.pausing and not self.over_budget:
            self.status = RunStatus.RUNNING  # (descendants: it was already)

    @event(Completed)
    def _complete(self) -> None:
        self.status = RunStatus.COMPLETED

    @event(Spent)
    def _spent(self, task_id: str, usage: Usage) -> None:
        self.usage = (self.usage or Usage()).plus(usage)

    @event(BudgetExhausted)
    def _exhaust(self, spend: Spend) -> None:
        self.over_budget = True
        if self.status is RunStatus.RUNNING:
            self.status = RunStatus.PAUSED

    @event(BudgetRaised)
    def _raise_budget(self, budget_usd: float, actor: str, reason: str) -> None:
        self.budget_usd = budget_usd
        self.over_budget = False
        held = self.pausing and self.stop_scope is StopScope.RUN
        if self.status is RunStatus.PAUSED and not held:
            self.status = RunStatus.RUNNING


register_topic(Run.Snapshot.TOPIC, Run.Snapshot)
