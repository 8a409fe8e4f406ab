"""A small TDD agent graph for the LangGraph adapter's tests: a real compiled
``StateGraph`` with a real SqliteSaver, a scripted stand-in for the model and
a real test command run by the sandboxed gate runner.

The "repository" is a directory holding ``calc.py`` with a bug (``add``
subtracts); the test command imports it and exits 0 only when ``add(2, 3) ==
5``. Each strategy the planner picks is scripted: whether the model's turn
fixes the bug, and the entropy of its output.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from devs.adapters.langgraph import DevsState, Referee

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TEST_COMMAND = (
    sys.executable,
    "-c",
    "import sys, calc; ok = calc.add(2, 3) == 5; "
    "print('1 passed' if ok else 'FAILED test_add: assert -1 == 5'); "
    "sys.exit(0 if ok else 1)",
)


IDEAS = (
    "rename the variables",
    "swap the operands",
    "add a docstring",
    "cache the result",
    "use operator.add",
    "rewrite it with sum()",
    "inline the function",
    "convert to a lambda",
    "guard against None",
)
"""Strategies far enough apart that the blacklist (a 20 % edit distance)
tells them apart."""


class AgentState(DevsState, total=False):
    turn: int
    entropy: float
    model_calls: int
    prompt: str


@dataclass(frozen=True)
class Turn:
    fixes: bool = False
    entropy: float = 0.1


@dataclass
class ScriptedModel:
    """The model: what each strategy does, and every prompt it was given."""

    repo: Path
    script: Mapping[str, Turn]
    calls: list[str] = field(default_factory=list)

    def __call__(self, state: AgentState) -> dict[str, Any]:
        strategy = str(state["strategy"])
        self.calls.append(strategy)
        turn = self.script.get(strategy, Turn())
        (self.repo / "calc.py").write_text(FIXED if turn.fixes else BUGGY)
        return {
            "entropy": turn.entropy,
            "model_calls": state.get("model_calls", 0) + 1,
            "prompt": f"{state.get('directive', '')}\nUse strategy: {strategy}",
        }


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "calc.py").write_text(BUGGY)
    return path


def entropy_of(state: Mapping[str, Any]) -> float | None:
    value = state.get("entropy")
    return float(value) if isinstance(value, int | float) else None


def lesson_of(state: Mapping[str, Any], _: object) -> tuple[str, str]:
    return str(state["strategy"]), f"{state['strategy']} left add() subtracting"


def referee_for(service: Any, repo: Path, **options: Any) -> Referee:
    chosen: dict[str, Any] = {
        "entropy_of": entropy_of,
        "test_command": TEST_COMMAND,
        "workdir": repo,
        "lesson_of": lesson_of,
    }
    return Referee(service, **{**chosen, **options})


def build(
    referee: Referee,
    model: ScriptedModel,
    strategies: Sequence[str],
    checkpointer: SqliteSaver,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """plan -> guard -> model -> entropy -> gate, the referee routing back to
    plan (retry) or out (advance, end)."""

    def plan(state: AgentState) -> dict[str, Any]:
        turn = int(state.get("turn", 0))
        return {
            "strategy": strategies[min(turn, len(strategies) - 1)],
            "turn": turn + 1,
        }

    graph = StateGraph(AgentState)
    graph.add_node("plan", plan)
    graph.add_node("guard", referee.before_turn)
    graph.add_node("model", model)
    graph.add_node("entropy", referee.after_turn)
    graph.add_node("gate", referee.gate)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "guard")
    graph.add_conditional_edges(
        "guard", referee.route, {"proceed": "model", "retry": "plan", "end": END}
    )
    graph.add_edge("model", "entropy")
    graph.add_conditional_edges(
        "entropy", referee.route, {"proceed": "gate", "retry": "plan", "end": END}
    )
    graph.add_conditional_edges(
        "gate", referee.route, {"retry": "plan", "advance": END, "end": END}
    )
    return graph.compile(checkpointer=checkpointer)


@contextmanager
def saver(path: Path) -> Iterator[SqliteSaver]:
    connection = sqlite3.connect(path, check_same_thread=False)
    try:
        yield SqliteSaver(connection)
    finally:
        connection.close()


def config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 200}
