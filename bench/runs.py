"""Run benchmarks: starting large DAGs, the size of run events, a large run's state.

    python bench/runs.py [--run-tasks N] [--dir DIR]

Only the public API of ``RecoveryService`` is timed. :func:`figures` returns one
:class:`Figure` per measure (label, value, target, whether it was met); the value
is in seconds, except for the rows whose label says ``bytes``:

1. ``start_run`` of a 5,000-node chain (node *i* waits for node *i* - 1).
2. ``start_run`` of a 5,000-node fan-in (one node waits for the other 4,999).
3. ``start_run`` of the largest DAG the limits allow (``MAX_RUN_NODES`` nodes,
   ``MAX_RUN_EDGES`` edges, ids of ``ID_MAX`` characters: ``MAX_RUN_ID_BYTES``).
4. The largest run event stored (bytes): the ``Started`` event of row 3.
5. The largest run snapshot stored (bytes), in the run of row 6.
6. ``run_state()`` of a run of 10,000 tasks (``--run-tasks``), all passed, after
   the read models caught up (median of 5).

Each ``start_run`` row is the median of 3 runs, each started in the same file
under a new id.

``bench/bench.py`` prints these rows too: rows 1-4 from :func:`start_figures`,
rows 5-6 from :func:`large_run_figures` on the run of 10,000 tasks it builds
anyway (the same DAG as :func:`large_run`'s, every node passed).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from devs.adapters.config import Settings, open_service
from devs.domain import Policy, RecoveryService
from devs.domain.run import MAX_RUN_EDGES, MAX_RUN_ID_BYTES, MAX_RUN_NODES
from devs.domain.values import ID_MAX

Dag = Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class Target:
    text: str
    limit: float
    inclusive: bool = False  # "<=" rather than "<"

    def met(self, value: float) -> bool:
        return value <= self.limit if self.inclusive else value < self.limit


class Figure(NamedTuple):
    label: str
    value: float  # seconds, or bytes when the label says so
    target: Target

    @property
    def met(self) -> bool:
        return self.target.met(self.value)

    @property
    def shown(self) -> str:
        return show(self.value, self.label)


WIDE_DAG = 5_000
CHAINS = 100  # the large run: node i waits for node i - CHAINS
STARTS = 3
QUERIES = 5
START_TARGET = Target("< 1 s", 1.0)
STORED_TARGET = Target("<= 3,000,000 bytes", 3_000_000, inclusive=True)
QUERY_TARGET = Target("<= 0.025 s", 0.025, inclusive=True)


def service(path: Path) -> RecoveryService:
    patient = Policy(escalation_threshold=1000, handoff_threshold=1000)
    return open_service(Settings(db=str(path)), policy=patient)


def chain(size: int) -> dict[str, list[str]]:
    return {f"c{i:05d}": [f"c{i - 1:05d}"] if i else [] for i in range(size)}


def fan_in(size: int) -> dict[str, list[str]]:
    dag: dict[str, list[str]] = {f"f{i:05d}": [] for i in range(size - 1)}
    dag["sink"] = list(dag)
    return dag


def largest() -> dict[str, list[str]]:
    """``MAX_RUN_NODES`` ids of ``ID_MAX`` characters and ``MAX_RUN_EDGES`` edges.

    Node *i* waits for up to ten nodes before it; the edges left over go to the
    last node, which then waits for the nodes before those.
    """
    nodes = [f"{i:05d}".rjust(ID_MAX, "n") for i in range(MAX_RUN_NODES)]
    assert sum(len(n.encode()) for n in nodes) <= MAX_RUN_ID_BYTES
    dag = {node: nodes[max(0, i - 10) : i] for i, node in enumerate(nodes)}
    spare = MAX_RUN_EDGES - sum(len(p) for p in dag.values())
    last = len(nodes) - 1
    dag[nodes[last]] = nodes[last - 10 - spare : last]
    assert sum(len(p) for p in dag.values()) == MAX_RUN_EDGES
    return dag


def start_seconds(app: RecoveryService, name: str, dag: Dag) -> float:
    """Median wall time of ``STARTS`` ``start_run`` calls, each a new run."""
    samples = []
    for attempt in range(STARTS):
        start = time.perf_counter()
        app.start_run(f"{name}-{attempt}", dag)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def largest_stored(path: Path, table: str) -> int:
    """Bytes of the largest run event (or snapshot) in the file's ``table``."""
    connection = sqlite3.connect(path)
    try:
        found = connection.execute(
            f"SELECT max(length(state)) FROM {table} "  # our own table names
            "WHERE originator_id LIKE 'run:%'"
        ).fetchone()[0]
    finally:
        connection.close()
    return int(found or 0)


def large_run(path: Path, tasks: int) -> RecoveryService:
    """A run of ``tasks`` nodes, every one started and passed."""
    dag = {
        f"n{i:05d}": [f"n{i - CHAINS:05d}"] if i >= CHAINS else [] for i in range(tasks)
    }
    app = service(path)
    app.start_run("big", dag)
    for node in dag:
        app.start_task(node, run_id="big")
        app.record_gate(node, 0, gate="tests")
    return app


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def start_figures(directory: Path | None = None) -> list[Figure]:
    """Rows 1-4: ``start_run`` of each DAG, and the largest run event stored."""
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        starts = Path(scratch) / "starts.sqlite"
        with service(starts) as app:
            rows = [
                Figure(
                    f"start_run, a {WIDE_DAG:,}-node chain",
                    start_seconds(app, "chain", chain(WIDE_DAG)),
                    START_TARGET,
                ),
                Figure(
                    f"start_run, a {WIDE_DAG:,}-node fan-in",
                    start_seconds(app, "fan-in", fan_in(WIDE_DAG)),
                    START_TARGET,
                ),
                Figure(
                    f"start_run, the largest DAG allowed ({MAX_RUN_NODES:,} nodes, "
                    f"{MAX_RUN_EDGES:,} edges, {ID_MAX}-character ids)",
                    start_seconds(app, "largest", largest()),
                    START_TARGET,
                ),
            ]
        rows.append(
            Figure(
                "largest run event stored (bytes)",
                largest_stored(starts, "stored_events"),
                STORED_TARGET,
            )
        )
    return rows


def large_run_figures(path: Path, run_id: str, tasks: int) -> list[Figure]:
    """Rows 5-6, on the file ``path`` that holds the run ``run_id`` of ``tasks``
    nodes, all passed: its largest snapshot, and ``run_state()`` on a service
    whose read models caught up."""
    with service(path) as app:
        app.catch_up()
        query = median_seconds(lambda: app.run_state(run_id), QUERIES)
    return [
        Figure(
            f"largest run snapshot stored (bytes), run of {tasks:,} tasks",
            largest_stored(path, "stored_snapshots"),
            STORED_TARGET,
        ),
        Figure(f"run_state(), run of {tasks:,} tasks", query, QUERY_TARGET),
    ]


def figures(run_tasks: int = 10_000, directory: Path | None = None) -> list[Figure]:
    """Every run figure, rows 1-6."""
    rows = start_figures(directory)
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        big = Path(scratch) / "big.sqlite"
        large_run(big, run_tasks).close()
        rows += large_run_figures(big, "big", run_tasks)
    return rows


def show(value: float, label: str) -> str:
    return f"{value:,.0f}" if "bytes" in label else f"{value:.3f} s"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-tasks", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = figures(args.run_tasks, args.dir)
    print("| measure | value | target |")
    print("|---|---|---|")
    for row in rows:
        print(f"| {row.label} | {row.shown} | {row.target.text} |")
    print()
    for row in rows:
        said = "met" if row.met else "MISSED"
        print(f"target {said}: {row.label}: {row.shown}, target {row.target.text}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
