"""The Run aggregate: an immutable DAG of tasks and the run status."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devs.domain.errors import IllegalTransition, InvalidInput
from devs.domain.run import NodeOutcome, Run, RunStatus, topological_order


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
    with pytest.raises(InvalidInput, match="not a node"):
        run.start_node("zz")


def test_pause_and_resume_by_task() -> None:
    run = diamond()
    run.start_node("a")
    run.pause("a", "ESCALATION")
    run.pause("a", "ESCALATION")  # idempotent
    assert run.status is RunStatus.PAUSED
    assert run.paused_by == ["a"]
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
