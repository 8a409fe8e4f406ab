"""Runs through the service: the DAG limits, what a run stores, what it reads back.

A DAG over a limit, or with a bad node, is refused with ``InvalidInput`` and
nothing is written; a DAG at every limit starts, is stored in one event of a
few MB that names each node once, and reads back as given.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from devs.domain import RecoveryService
from devs.domain.errors import InvalidInput, UnknownRun
from devs.domain.run import MAX_RUN_EDGES, MAX_RUN_ID_BYTES, MAX_RUN_NODES
from devs.domain.values import ID_MAX
from tests.helpers import event_count

Dag = dict[str, list[str]]

EVENT_BUDGET = 3_000_000
"""Bytes one stored run event may take (docs/configuration.md, "Limits")."""


def over_nodes() -> Dag:
    return {f"n{i}": [] for i in range(MAX_RUN_NODES + 1)}


def over_edges() -> Dag:
    sources = [f"s{i}" for i in range(1_000)]
    return {s: [] for s in sources} | {f"t{i}": sources for i in range(101)}


def over_bytes() -> Dag:
    dag: Dag = {f"{i:05d}".rjust(ID_MAX, "n"): [] for i in range(MAX_RUN_NODES - 1)}
    dag["é" * ID_MAX] = []  # 400 bytes of UTF-8 in 200 characters
    return dag


def largest() -> Dag:
    """Every limit reached, none passed."""
    nodes = [f"{i:05d}".rjust(ID_MAX, "n") for i in range(MAX_RUN_NODES)]
    dag = {node: nodes[max(0, i - 10) : i] for i, node in enumerate(nodes)}
    spare = MAX_RUN_EDGES - sum(map(len, dag.values()))
    dag[nodes[-1]] = nodes[-11 - spare : -1]
    assert sum(len(node.encode()) for node in dag) == MAX_RUN_ID_BYTES
    return dag


def stored_run_events(db_path: Path) -> list[tuple[str, bytes]]:
    with sqlite3.connect(db_path) as connection:
        rows = connection.execute(
            "SELECT topic, state FROM stored_events WHERE originator_id LIKE 'run:%' "
            "ORDER BY originator_version"
        ).fetchall()
    return [(str(topic), bytes(state)) for topic, state in rows]


@pytest.mark.parametrize(
    ("dag", "message"),
    [
        (over_nodes, r"^dag has 10,001 nodes; the limit is 10,000$"),
        (
            over_edges,
            r"^dag has 101,000 edges \(prerequisites\); the limit is 100,000$",
        ),
        (
            over_bytes,
            r"^dag node ids take 2,000,200 bytes \(UTF-8\); the limit is 2,000,000$",
        ),
    ],
    ids=["nodes", "edges", "id bytes"],
)
def test_a_dag_over_a_limit_is_refused_naming_it_and_writes_nothing(
    service: RecoveryService, dag: Callable[[], Dag], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        service.start_run("r1", dag())
    assert event_count(service) == 0
    with pytest.raises(UnknownRun):
        service.run_state("r1")


@pytest.mark.parametrize(
    ("dag", "message"),
    [
        ({"": []}, "dag node must not be empty"),
        ({"x" * 201: []}, "dag node is 201 characters long; the limit is 200"),
        (
            {"a": [], "b": ["x" * 201]},
            "prerequisite of 'b' is 201 characters long; the limit is 200",
        ),
        ({"\ud800": []}, r"dag node must be valid Unicode text \(no lone surrogates\)"),
        (
            {"a": [], "b": ["\ud800"]},
            r"prerequisite of 'b' must be valid Unicode text \(no lone surrogates\)",
        ),
        ({"a": ["a"]}, "dag has a cycle: a -> a"),
        ({"a": [], "b": ["a", "b"]}, "dag has a cycle: b -> b"),
        ({"a": ["ghost"]}, "dag node 'a' has unknown prerequisite 'ghost'"),
        ({"a": ["b"], "b": ["c"], "c": ["a"]}, "dag has a cycle: a -> c -> b -> a"),
    ],
)
def test_bad_nodes_are_refused_saying_what_is_wrong(
    service: RecoveryService, dag: Dag, message: str
) -> None:
    with pytest.raises(InvalidInput, match=f"^{message}$"):
        service.start_run("r1", dag)
    assert event_count(service) == 0


@pytest.mark.parametrize("shape", ["chain", "fan-in"])
def test_five_thousand_nodes_start_and_read_back(
    service: RecoveryService, shape: str
) -> None:
    nodes = [f"n{i:04d}" for i in range(5_000)]
    if shape == "chain":
        dag = {node: nodes[i - 1 : i] for i, node in enumerate(nodes)}
    else:
        dag = {node: [] for node in nodes[:-1]} | {nodes[-1]: nodes[:-1]}
    started = service.start_run("r1", dag)
    state = service.run_state("r1")
    for answer in (started, state):
        assert answer.dag == {node: tuple(p) for node, p in dag.items()}
        assert answer.order == tuple(nodes)
    assert (
        state.ready
        == started.ready
        == ((nodes[0],) if shape == "chain" else tuple(nodes[:-1]))
    )


def test_the_largest_dag_is_stored_once_and_reads_back(
    service: RecoveryService, db_path: Path
) -> None:
    dag = largest()
    service.start_run("big", dag)
    [(topic, state)] = stored_run_events(db_path)
    assert topic == "devs:Run.Started"
    assert len(state) <= EVENT_BUDGET
    recorded = orjson.loads(state)
    assert "dag" not in recorded
    assert "order" not in recorded
    first, last = next(iter(dag)), list(dag)[-1]
    for node in (first, last):
        assert state.count(f'"{node}"'.encode()) == 1  # each id once
    read = service.run_state("big")
    assert read.dag == {node: tuple(p) for node, p in dag.items()}
    assert read.ready == (first,)


def test_node_events_name_one_node_and_completion_nothing_more(
    service: RecoveryService, db_path: Path
) -> None:
    service.start_run("r1", {"a": [], "b": ["a"]})
    for node in ("a", "b"):
        service.start_task(node, run_id="r1")
        service.record_gate(node, 0)
    base = {"originator_id", "originator_version", "timestamp"}
    shapes = [
        (topic, set(orjson.loads(state)) - base)
        for topic, state in stored_run_events(db_path)[1:]
    ]
    assert shapes == [
        ("devs:Run.NodeStarted", {"node"}),
        ("devs:Run.NodeSettled", {"node", "outcome"}),
        ("devs:Run.NodeStarted", {"node"}),
        ("devs:Run.NodeSettled", {"node", "outcome"}),
        ("devs:Run.Completed", set()),
    ]
    assert service.run_state("r1").status == "COMPLETED"
