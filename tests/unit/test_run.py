"""The Run aggregate: an immutable DAG of tasks and the run status."""

from __future__ import annotations

import functools
import itertools
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from devs.domain.errors import IllegalTransition, InvalidInput, NotFound
from devs.domain.run import (
    MAX_RUN_EDGES,
    MAX_RUN_ID_BYTES,
    MAX_RUN_NODES,
    NodeOutcome,
    Run,
    RunStatus,
    topological_order,
)
from devs.domain.values import ID_MAX


def status_of(run: Run) -> RunStatus:
    """Read the status afresh (a command may have changed it since the last
    assert; mypy would otherwise keep the narrowed literal)."""
    return run.status


def diamond() -> Run:
    return Run.start("r1", {"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c")})


def test_ready_nodes_follow_prerequisites() -> None:
    run = diamond()
    assert run.ready_nodes() == ("a",)
    run.start_node("a")
    assert run.ready_nodes() == ()
    run.settle("a", NodeOutcome.COMPLETED)
    assert run.ready_nodes() == ("b", "c")
    run.start_node("b")
    run.settle("b", NodeOutcome.SKIPPED)  # skipped counts as settled
    assert run.next_node() == "c"
    run.start_node("c")
    run.settle("c", NodeOutcome.COMPLETED)
    assert run.next_node() == "d"


def test_last_node_completes_the_run() -> None:
    run = Run.start("r1", {"a": ()})
    run.start_node("a")
    run.settle("a", NodeOutcome.COMPLETED)
    assert run.status is RunStatus.COMPLETED
    assert run.next_node() is None


def test_node_not_ready_cannot_start() -> None:
    run = diamond()
    with pytest.raises(IllegalTransition, match="waiting for 'b', 'c'"):
        run.start_node("d")
    with pytest.raises(NotFound, match="not a node"):
        run.start_node("zz")


def test_pause_and_resume_by_task() -> None:
    run = diamond()
    run.start_node("a")
    run.pause("a", "ESCALATION")
    run.pause("a", "ESCALATION")  # idempotent
    assert run.status is RunStatus.PAUSED
    assert run.paused_by == ("a",)
    with pytest.raises(IllegalTransition, match="PAUSED"):
        run.start_node("b")
    run.resume("a")
    assert status_of(run) is RunStatus.RUNNING


def test_settling_a_paused_task_resumes_the_run() -> None:
    run = diamond()
    run.start_node("a")
    run.pause("a", "HAND_OFF")
    run.settle("a", NodeOutcome.SKIPPED)
    assert run.status is RunStatus.RUNNING


def test_dag_is_read_only() -> None:
    run = diamond()
    with pytest.raises(TypeError):
        run.dag["x"] = ()  # type: ignore[index]
    assert run.dag["d"] == ("b", "c")


@pytest.mark.parametrize(
    ("dag", "message"),
    [
        ({"a": ("b",), "b": ("a",)}, "cycle"),
        ({"a": ("a",)}, "cycle: a -> a"),
        ({"a": ("missing",)}, "unknown prerequisite 'missing'"),
    ],
)
def test_bad_graphs_are_rejected(dag: dict[str, tuple[str, ...]], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        Run.start("r", dag)


@given(st.integers(min_value=1, max_value=30), st.randoms(use_true_random=False))
def test_topological_order_puts_prerequisites_first(size: int, rnd: object) -> None:
    import random

    assert isinstance(rnd, random.Random)
    nodes = [f"n{i}" for i in range(size)]
    dag = {
        node: tuple(rnd.sample(nodes[:i], k=rnd.randint(0, min(i, 3))))
        for i, node in enumerate(nodes)
    }
    order = topological_order(dag)
    position = {node: i for i, node in enumerate(order)}
    assert sorted(order) == sorted(nodes)
    for node, prerequisites in dag.items():
        assert all(position[p] < position[node] for p in prerequisites)


def test_snapshot_round_trip() -> None:
    run = diamond()
    run.start_node("a")
    run.settle("a", NodeOutcome.COMPLETED)
    run.collect_events()
    restored = Run.Snapshot.model_validate_json(
        Run.Snapshot.take(run).model_dump_json()
    )
    assert restored.mutate(None) == run


# ------------------------------------------------------------------ limits


def largest_allowed() -> dict[str, tuple[str, ...]]:
    """``MAX_RUN_NODES`` ids of ``ID_MAX`` ASCII characters, ``MAX_RUN_EDGES``
    edges: every limit reached, none passed."""
    nodes = [f"{i:05d}".rjust(ID_MAX, "n") for i in range(MAX_RUN_NODES)]
    dag = {node: tuple(nodes[max(0, i - 10) : i]) for i, node in enumerate(nodes)}
    spare = MAX_RUN_EDGES - sum(map(len, dag.values()))
    dag[nodes[-1]] = tuple(nodes[-11 - spare : -1])
    return dag


def test_the_largest_allowed_dag_starts() -> None:
    dag = largest_allowed()
    assert sum(map(len, dag.values())) == MAX_RUN_EDGES
    assert sum(len(node.encode()) for node in dag) == MAX_RUN_ID_BYTES
    run = Run.start("r", dag)
    assert len(run.dag) == MAX_RUN_NODES
    assert run.ready_nodes() == (next(iter(dag)),)


def test_too_many_nodes_are_refused_naming_the_limit() -> None:
    dag = dict.fromkeys(map(str, range(MAX_RUN_NODES + 1)), ())
    with pytest.raises(
        InvalidInput, match=r"^dag has 10,001 nodes; the limit is 10,000$"
    ):
        Run.start("r", dag)


def test_too_many_edges_are_refused_naming_the_limit() -> None:
    sources = [f"s{i}" for i in range(1_000)]
    dag = {s: () for s in sources} | {f"t{i}": tuple(sources) for i in range(101)}
    expected = r"^dag has 101,000 edges \(prerequisites\); the limit is 100,000$"
    with pytest.raises(InvalidInput, match=expected):
        Run.start("r", dag)


def test_repeated_prerequisites_count_once() -> None:
    run = Run.start("r", {"a": (), "b": ("a",) * (MAX_RUN_EDGES + 1)})
    assert run.dag["b"] == ("a",)


def test_node_ids_over_the_byte_budget_are_refused() -> None:
    wide = "é" * (ID_MAX // 2)  # 200 bytes of UTF-8 in 100 characters
    dag = {f"{i:05d}".rjust(ID_MAX, "n"): () for i in range(MAX_RUN_NODES - 1)}
    dag[wide + "x"] = ()
    expected = r"^dag node ids take 2,000,001 bytes \(UTF-8\); the limit is 2,000,000$"
    with pytest.raises(InvalidInput, match=expected):
        Run.start("r", dag)


@pytest.mark.parametrize(
    ("dag", "message"),
    [
        ({}, "dag must have at least one node"),
        ({"\ud800": ()}, r"dag node must be valid Unicode text \(no lone surrogates\)"),
        ({"a": ("b",)}, "dag node 'a' has unknown prerequisite 'b'"),
        ({"a": (), "b": ("a", "b")}, "dag has a cycle: b -> b"),
    ],
)
def test_other_refusals_say_what_is_wrong(
    dag: dict[str, tuple[str, ...]], message: str
) -> None:
    with pytest.raises(InvalidInput, match=f"^{message}$"):
        Run.start("r", dag)


@given(st.integers(min_value=1, max_value=200), st.integers(min_value=0))
def test_a_cycle_is_named_by_its_first_nodes(size: int, turn: int) -> None:
    """A ring of any size: the refusal quotes at most five of its nodes, in
    order, then says how many more there are and closes the ring."""
    ring = [f"n{(i + turn) % size}" for i in range(size)]
    dag = {node: (ring[i - 1],) for i, node in enumerate(ring)}  # n[i-1] -> n[i]
    with pytest.raises(InvalidInput, match=r"^dag has a cycle: ") as refused:
        Run.start("r", dag)
    shown, _, more = (
        str(refused.value).removeprefix("dag has a cycle: ").partition(" and ")
    )
    named = shown.split(" -> ")
    first = ring.index(named[0])
    cycle = (ring[first:] + ring[:first] + [ring[first]])[: len(named)]
    assert named == cycle
    if size <= 5:
        assert not more
    else:
        assert more == f"{size - 5:,} more -> {named[0]}"


def test_a_node_waiting_for_many_names_a_few() -> None:
    sources = [f"s{i}" for i in range(4_999)]
    run = Run.start("r", {s: () for s in sources} | {"sink": tuple(sources)})
    expected = "waiting for 's0', 's1', 's2', 's3', 's4' and 4,994 more$"
    with pytest.raises(IllegalTransition, match=expected):
        run.start_node("sink")


# ----------------------------------------------------------- what is recorded


def test_the_started_event_records_each_node_once_and_edges_by_position() -> None:
    run = diamond()
    [started] = run.collect_events()
    assert isinstance(started, Run.Started)
    assert started.nodes == ("a", "b", "c", "d")
    assert started.prerequisites == ((), (0,), (0,), (1, 2))
    assert dict(started.dag) == {"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c")}
    assert set(started.model_dump()) == {
        "originator_id",
        "originator_version",
        "timestamp",
        "originator_topic",
        "run_id",
        "nodes",
        "prerequisites",
        "stop_scope",
        "budget_usd",
    }
    assert started.stop_scope == "run"
    assert started.budget_usd is None


def test_node_events_and_completion_name_one_node_at_most() -> None:
    run = Run.start("r1", {"a": ()})
    run.collect_events()
    run.start_node("a")
    run.settle("a", NodeOutcome.COMPLETED)
    shapes = [
        set(cast(BaseModel, e).model_dump())
        - {"originator_id", "originator_version", "timestamp"}
        for e in run.collect_events()
    ]
    assert shapes == [{"node"}, {"node", "outcome"}, set()]


def test_a_0_1_0_started_event_is_read_in_todays_shape() -> None:
    old = {
        "originator_id": "run:r1",
        "originator_version": 1,
        "timestamp": "2026-11-22T23:08:34.492816Z",
        "originator_topic": "devs:Run",
        "run_id": "r1",
        "dag": {"b": ["a"], "a": [], "c": ["b", "a"]},
        "order": ["a", "b", "c"],
    }
    started = Run.Started(**old)
    assert started.nodes == ("a", "b", "c")
    assert started.prerequisites == ((), (0,), (1, 0))
    run = started.mutate(None)
    assert isinstance(run, Run)
    assert run.ready_nodes() == ("a",)


def test_a_0_1_0_snapshot_is_restored_in_todays_shape() -> None:
    run = diamond()
    run.start_node("a")
    run.settle("a", NodeOutcome.COMPLETED)
    run.start_node("b")
    run.settle("b", NodeOutcome.SKIPPED)
    run.start_node("c")
    run.pause("c", "ESCALATION")
    run.collect_events()
    taken = Run.Snapshot.take(run).model_dump(mode="json")
    state = taken["state"]
    old_state = {
        "run_id": "r1",
        "graph": {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]},
        "order": ["a", "b", "c", "d"],
        "status": "PAUSED",
        "started": ["a", "b", "c"],
        "settled": {"a": "completed", "b": "skipped"},
        "paused_by": ["c"],
        "_created_on": state["_created_on"],
        "_modified_on": state["_modified_on"],
    }
    restored = Run.Snapshot(**(taken | {"state": old_state})).mutate(None)
    assert restored == run
    assert restored.settled == {"a": NodeOutcome.COMPLETED, "b": NodeOutcome.SKIPPED}
    assert restored.paused_by == ("c",)


# ---------------------------------------------------------------- properties

ids = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12)


@st.composite
def dags(
    draw: st.DrawFn, names: st.SearchStrategy[str] = ids
) -> dict[str, tuple[str, ...]]:
    """An acyclic DAG, keys in any order, prerequisites possibly repeated."""
    nodes = draw(st.lists(names, min_size=1, max_size=30, unique=True))
    dag = {
        node: tuple(draw(st.lists(st.sampled_from(nodes[:i]), max_size=4)) if i else ())
        for i, node in enumerate(nodes)
    }
    return {node: dag[node] for node in draw(st.permutations(nodes))}


@given(dags())
def test_any_acyclic_dag_within_the_limits_starts(
    dag: dict[str, tuple[str, ...]],
) -> None:
    run = Run.start("r", dag)
    assert dict(run.dag) == {n: tuple(dict.fromkeys(p)) for n, p in dag.items()}
    position = {node: i for i, node in enumerate(run.order)}
    assert all(position[p] < position[n] for n, ps in dag.items() for p in ps)
    assert run.ready_nodes() == tuple(n for n in run.order if not dag[n])
    [started] = run.collect_events()
    assert isinstance(started, Run.Started)
    assert sorted(started.nodes) == sorted(dag)


@given(dags(st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True)), st.data())
def test_any_dag_with_a_cycle_is_refused_naming_one(
    dag: dict[str, tuple[str, ...]], data: st.DataObject
) -> None:
    # Close a cycle: a node becomes a prerequisite of itself or of a node it
    # waits for, directly or not.
    node = data.draw(st.sampled_from(sorted(dag)))
    ancestors, frontier = {node}, [node]
    while frontier:
        for prerequisite in dag[frontier.pop()]:
            if prerequisite not in ancestors:
                ancestors.add(prerequisite)
                frontier.append(prerequisite)
    back = data.draw(st.sampled_from(sorted(ancestors)))
    dag[back] = (*dag[back], node)
    with pytest.raises(InvalidInput, match=r"^dag has a cycle: ") as refused:
        Run.start("r", dag)
    shown = str(refused.value).removeprefix("dag has a cycle: ")
    cycle = shown.replace(" and ", " -> ").split(" -> ")
    if " more -> " in shown:
        cycle = cycle[:-2]  # the count of the nodes left out, then the first again
    else:
        assert cycle[0] == cycle[-1]
    assert node in cycle or back in cycle
    for before, after in itertools.pairwise(cycle):
        assert before in dag[after]  # each is a prerequisite of the next


@given(dags(), st.data())
def test_readiness_kept_incrementally_equals_readiness_recomputed(
    dag: dict[str, tuple[str, ...]], data: st.DataObject
) -> None:
    run = Run.start("r", dag)
    done: set[str] = set()
    while run.status is RunStatus.RUNNING:
        expected = tuple(
            n
            for n in run.order
            if n not in run.started and all(p in done for p in dag[n])
        )
        assert run.ready_nodes() == expected
        assert run.next_node() == (expected[0] if expected else None)
        node = data.draw(st.sampled_from(expected))
        run.start_node(node)
        if data.draw(st.booleans()):
            run.pause(node, "ESCALATION")
        run.settle(node, data.draw(st.sampled_from(NodeOutcome)))
        done.add(node)
    assert done == set(dag)
    events = run.collect_events()
    replayed = functools.reduce(lambda agg, e: e.mutate(agg), events, None)
    assert replayed == run
    restored = Run.Snapshot.model_validate_json(
        Run.Snapshot.take(run).model_dump_json()
    )
    assert restored.mutate(None) == run
