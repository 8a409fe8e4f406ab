"""What a devs-guarded LangGraph step adds over the same bare step.

    .venv/bin/pip install -q '.[bench]'
    .venv/bin/python bench/langgraph_bench.py [--steps 40] [--rounds 3] [--dir DIR]

One agent step is: plan a strategy, the model's turn (a stand-in that edits
a file), and the gate: the project's test command (``python -c`` importing
the edited module and exiting 1) run by the sandboxed gate runner
(``devs.adapters.sandbox.run_gate``, under bubblewrap where it works).

- **bare**: ``plan -> model -> tests``, the tests node calling ``run_gate``
  itself and looping back to ``plan``;
- **guarded**: ``plan -> guard -> model -> entropy -> gate``, the referee's
  nodes (``before_turn``: ``begin_attempt``; ``after_turn``:
  ``report_entropy``; ``gate``: the same ``run_gate`` in a LangGraph task,
  then ``record_gate``), every command under its idempotency key, on an
  in-process ``RecoveryService`` (SQLite, WAL, ``synchronous=FULL``).

Both run ``--steps`` failing steps per graph on one thread, with the same
SqliteSaver (a file in ``--dir``, ``durability="sync"``: a checkpoint per
node, written before the next node runs), in alternating rounds (bare,
guarded, bare, …), so both see the same disk and the same machine load.
The policy is patient (escalation and hand-off at 1,000 failures), so no
step suspends. Prints per-step median and p90 for each, the time added per
step, and the ratio; target (issue "LangGraph"): <= 15 % added per step.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from devs.adapters.config import Settings, open_service
from devs.adapters.langgraph import DevsState, Referee
from devs.adapters.sandbox import run_gate
from devs.domain import Policy

TARGET = 0.15
COMMAND = [
    sys.executable,
    "-c",
    "import sys, calc; sys.exit(0 if calc.add(2, 3) == 5 else 1)",
]


class State(DevsState, total=False):
    turn: int
    steps: int
    entropy: float


def plan(state: State) -> dict[str, Any]:
    turn = state.get("turn", 0)
    return {"strategy": f"strategy number {turn}", "turn": turn + 1}


class Model:
    """The model's turn: an edit of the repo that leaves the bug in."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo

    def __call__(self, state: State) -> dict[str, Any]:
        source = f"def add(a, b):\n    return a - b  # {state['turn']}\n"
        (self.repo / "calc.py").write_text(source)
        return {"entropy": 0.1}


def loop(state: State) -> str:
    return "plan" if state.get("turn", 0) < state.get("steps", 0) else END


def bare_graph(repo: Path, saver: SqliteSaver) -> Any:
    def tests(state: State) -> dict[str, Any]:
        result = run_gate(COMMAND, cwd=repo)
        return {"devs": {"exit_code": result.exit_code}}

    graph = StateGraph(State)
    graph.add_node("plan", plan)
    graph.add_node("model", Model(repo))
    graph.add_node("tests", tests)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "model")
    graph.add_edge("model", "tests")
    graph.add_conditional_edges("tests", loop, ["plan", END])
    return graph.compile(checkpointer=saver)


def guarded_graph(referee: Referee, repo: Path, saver: SqliteSaver) -> Any:
    def after_gate(state: State) -> str:
        if referee.route(state) != "retry":
            return END
        return loop(state)

    graph = StateGraph(State)
    graph.add_node("plan", plan)
    graph.add_node("guard", referee.before_turn)
    graph.add_node("model", Model(repo))
    graph.add_node("entropy", referee.after_turn)
    graph.add_node("gate", referee.gate)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "guard")
    graph.add_conditional_edges("guard", referee.route, {"proceed": "model"})
    graph.add_edge("model", "entropy")
    graph.add_conditional_edges("entropy", referee.route, {"proceed": "gate"})
    graph.add_conditional_edges("gate", after_gate, ["plan", END])
    return graph.compile(checkpointer=saver)


def timed(graph: Any, thread: str, start: dict[str, Any], steps: int) -> float:
    config: RunnableConfig = {
        "configurable": {"thread_id": thread},
        "recursion_limit": 10 * steps + 10,
    }
    began = time.perf_counter()
    result = graph.invoke({**start, "steps": steps}, config, durability="sync")
    took = time.perf_counter() - began
    if result.get("turn") != steps:
        msg = f"{thread}: {result.get('turn')} steps, not {steps}: {result}"
        raise RuntimeError(msg)
    return took / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="steps per graph run")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each graph")
    parser.add_argument("--dir", type=Path, help="where the files go (default: tmp)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="devs-lg-bench-", dir=args.dir) as tmp:
        base = Path(tmp)
        repo = base / "repo"
        repo.mkdir()
        connection = sqlite3.connect(
            base / "checkpoints.sqlite", check_same_thread=False
        )
        patient = Policy(escalation_threshold=1000, handoff_threshold=1000)
        service = open_service(Settings(db=str(base / "devs.sqlite")), policy=patient)
        try:
            saver = SqliteSaver(connection)
            referee = Referee(
                service,
                entropy_of=lambda state: state.get("entropy"),
                test_command=COMMAND,
                workdir=repo,
            )
            bare, guarded = bare_graph(repo, saver), guarded_graph(referee, repo, saver)
            isolation = run_gate(COMMAND, cwd=repo).isolation
            timed(bare, "warm-bare", {}, 2)  # imports, tables, first sandbox
            service.start_task("warm")
            timed(guarded, "warm-guarded", {"task_id": "warm"}, 2)
            per_step: dict[str, list[float]] = {"bare": [], "guarded": []}
            for n in range(args.rounds):
                per_step["bare"].append(timed(bare, f"bare-{n}", {}, args.steps))
                task = f"task-{n}"
                service.start_task(task)
                per_step["guarded"].append(
                    timed(guarded, f"guarded-{n}", {"task_id": task}, args.steps)
                )
        finally:
            service.close()
            connection.close()
    bare_ms = statistics.median(per_step["bare"]) * 1000
    guarded_ms = statistics.median(per_step["guarded"]) * 1000
    added = guarded_ms - bare_ms
    ratio = added / bare_ms
    print(
        f"langgraph {_version('langgraph')}, SqliteSaver, durability=sync; "
        f"gate command under {isolation}; {args.rounds} rounds x {args.steps} steps"
    )
    print("| graph | per step, median of rounds (ms) | rounds (ms) |")
    print("|---|---|---|")
    for name, values in per_step.items():
        rounds = ", ".join(f"{v * 1000:.2f}" for v in values)
        print(f"| {name} | {statistics.median(values) * 1000:.2f} | {rounds} |")
    print(f"| added by devs-recovery | {added:.2f} ({ratio:+.1%}) | |")
    met = ratio <= TARGET
    print(
        f"target {'met' if met else 'MISSED'}: a guarded step adds {ratio:.1%} "
        f"({added:.2f} ms) over the bare step, target <= {TARGET:.0%}"
    )
    return 0


def _version(name: str) -> str:
    from importlib import metadata

    return metadata.version(name)


if __name__ == "__main__":
    sys.exit(main())
