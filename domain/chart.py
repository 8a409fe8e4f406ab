"""The task state chart: ONE class-level ``transitions`` machine.

The machine is never attached to a task (``model=None``): a task keeps its state as a
plain string. Commands ask :func:`destination` whether a trigger is allowed from the
current state and where it leads; event ``apply`` methods assign the result, so a
replay runs no callbacks.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from transitions import Machine

from devs.domain.errors import IllegalTransition
from devs.domain.names import HAND_OFF_REQUIRED


class TaskState(StrEnum):
    RUNNING = "RUNNING"
    GATE_FAILED = "GATE_FAILED"
    ESCALATION = "ESCALATION"
    PAUSED = "PAUSED"
    HAND_OFF = "HAND_OFF"
    COMPLETED = "COMPLETED"
    SKIPPED = "SKIPPED"


StateValue = Literal[
    "RUNNING",
    "GATE_FAILED",
    "ESCALATION",
    "PAUSED",
    "HAND_OFF",
    "COMPLETED",
    "SKIPPED",
]
""":class:`TaskState`'s values as a type checker sees them, for signatures
that take a plain string (``state="PAUSED"``); checked against the enum by
tests/unit/test_names.py, and validated against the enum at run time."""

STATUS = {
    TaskState.RUNNING: "running",
    TaskState.GATE_FAILED: "gate_failed",
    TaskState.ESCALATION: "escalated",
    TaskState.PAUSED: "paused_for_intervention",
    TaskState.HAND_OFF: HAND_OFF_REQUIRED,
    TaskState.COMPLETED: "completed",
    TaskState.SKIPPED: "skipped",
}
"""The task status as tooling names it (e.g. ``hand_off_required``)."""

WORKING = (TaskState.RUNNING, TaskState.GATE_FAILED)
WAITING = (TaskState.ESCALATION, TaskState.PAUSED, TaskState.HAND_OFF)
UNFINISHED = (*WORKING, *WAITING)
FINISHED = (TaskState.COMPLETED, TaskState.SKIPPED)


class Trigger(StrEnum):
    ATTEMPT = "attempt"
    BLOCK_ATTEMPT = "block_attempt"
    PASS_GATE = "pass_gate"
    FAIL_GATE = "fail_gate"
    ESCALATE = "escalate"
    HAND_OFF = "hand_off"
    PAUSE = "pause"
    MEASURE_ENTROPY = "measure_entropy"
    LOG_LESSON = "log_lesson"
    RESUME = "resume"
    REWIND = "rewind"
    SKIP = "skip"
    CLAIM = "claim"
    RELEASE = "release"
    TAKE_OVER = "take_over"
    RETURN_TO_AGENT = "return_to_agent"
    COMPLETE_BY_HUMAN = "complete_by_human"
    SKIP_BY_HUMAN = "skip_by_human"
    EXPIRE_DEADLINE = "expire_deadline"
    REMIND = "remind"
    RECORD_USAGE = "record_usage"
    WARN_BUDGET = "warn_budget"
    RAISE_BUDGET = "raise_budget"


def _states(states: tuple[TaskState, ...]) -> list[str]:
    return [s.value for s in states]


TRANSITIONS: list[dict[str, Any]] = [
    # The agent works: attempts, gates, entropy.
    {"trigger": Trigger.ATTEMPT, "source": _states(WORKING), "dest": "RUNNING"},
    {"trigger": Trigger.BLOCK_ATTEMPT, "source": _states(WORKING), "dest": None},
    {"trigger": Trigger.PASS_GATE, "source": _states(WORKING), "dest": "COMPLETED"},
    {"trigger": Trigger.FAIL_GATE, "source": _states(WORKING), "dest": "GATE_FAILED"},
    {"trigger": Trigger.MEASURE_ENTROPY, "source": _states(WORKING), "dest": None},
    # The ladder stops the agent.
    {"trigger": Trigger.ESCALATE, "source": _states(WORKING), "dest": "ESCALATION"},
    {"trigger": Trigger.HAND_OFF, "source": _states(WORKING), "dest": "HAND_OFF"},
    {"trigger": Trigger.PAUSE, "source": _states(WORKING), "dest": "PAUSED"},
    # Lessons can be learned while the task is unfinished.
    {"trigger": Trigger.LOG_LESSON, "source": _states(UNFINISHED), "dest": None},
    # Humans act.
    {
        "trigger": Trigger.RESUME,
        "source": ["ESCALATION", "PAUSED"],
        "dest": "RUNNING",
    },
    {"trigger": Trigger.REWIND, "source": _states(UNFINISHED), "dest": "RUNNING"},
    {"trigger": Trigger.SKIP, "source": _states(UNFINISHED), "dest": "SKIPPED"},
    # A claim ("I'm on it") holds any stop for its claimer until released or
    # taken over.
    {"trigger": Trigger.CLAIM, "source": _states(WAITING), "dest": None},
    {"trigger": Trigger.RELEASE, "source": _states(WAITING), "dest": None},
    {"trigger": Trigger.TAKE_OVER, "source": _states(WAITING), "dest": None},
    {"trigger": Trigger.RETURN_TO_AGENT, "source": "HAND_OFF", "dest": "RUNNING"},
    {"trigger": Trigger.COMPLETE_BY_HUMAN, "source": "HAND_OFF", "dest": "COMPLETED"},
    {"trigger": Trigger.SKIP_BY_HUMAN, "source": "HAND_OFF", "dest": "SKIPPED"},
    # Nobody answered in time: the human deadline fails closed (a hand-off);
    # a reminder before it changes nothing.
    {
        "trigger": Trigger.EXPIRE_DEADLINE,
        "source": ["ESCALATION", "PAUSED"],
        "dest": "HAND_OFF",
    },
    {"trigger": Trigger.REMIND, "source": ["ESCALATION", "PAUSED"], "dest": None},
    # Spend: a model call's usage is a fact in any state (a transcript read
    # after the task ended still counts); a warning, or a person raising the
    # budget, while the task is unfinished. Going over the budget pauses a
    # working task (PAUSE).
    {
        "trigger": Trigger.RECORD_USAGE,
        "source": _states(tuple(TaskState)),
        "dest": None,
    },
    {"trigger": Trigger.WARN_BUDGET, "source": _states(UNFINISHED), "dest": None},
    {"trigger": Trigger.RAISE_BUDGET, "source": _states(UNFINISHED), "dest": None},
]

MACHINE_SPEC: dict[str, Any] = {
    "states": [s.value for s in TaskState],
    "transitions": [{**t, "trigger": t["trigger"].value} for t in TRANSITIONS],
    "initial": TaskState.RUNNING.value,
    "auto_transitions": False,
}

MACHINE = Machine(model=None, **MACHINE_SPEC)


def _destinations() -> dict[tuple[str, str], TaskState]:
    """Every allowed (trigger, source) pair and where it leads, read off MACHINE."""
    table: dict[tuple[str, str], TaskState] = {}
    for name, machine_event in MACHINE.events.items():
        for transitions in machine_event.transitions.values():
            for transition in transitions:
                dest = transition.dest or transition.source
                table[(name, transition.source)] = TaskState(dest)
    return table


_DESTINATIONS = _destinations()


def destination(trigger: Trigger, state: str) -> TaskState:
    """The state ``trigger`` leads to from ``state``; raises if it is not allowed."""
    found = _DESTINATIONS.get((trigger.value, state))
    if found is not None:
        return found
    sources = sorted({source for name, source in _DESTINATIONS if name == trigger})
    msg = (
        f"cannot {trigger.value.replace('_', ' ')} a task in state {state}; "
        f"allowed from {', '.join(sources)}"
    )
    raise IllegalTransition(msg, state=state)


def mermaid() -> str:
    """The chart as a mermaid ``stateDiagram-v2``, drawn from :data:`MACHINE`."""
    from transitions.extensions import GraphMachine

    class _Model:
        pass

    spec: dict[str, Any] = {
        "states": list(MACHINE.states),
        "transitions": [
            {"trigger": name, "source": t.source, "dest": t.dest or t.source}
            for name, event in MACHINE.events.items()
            for ts in event.transitions.values()
            for t in ts
        ],
        "initial": MACHINE.initial,
        "auto_transitions": False,
        "title": "Task state chart",
        "show_state_attributes": False,
    }
    model = _Model()
    GraphMachine(model=model, graph_engine="mermaid", **spec)
    graph = model.get_graph()  # type: ignore[attr-defined]
    return str(graph.draw(None))


def _edges(trigger: str) -> tuple[list[str], list[str]]:
    found = [t for ts in MACHINE.events[trigger].transitions.values() for t in ts]
    sources = sorted({t.source for t in found})
    dests = sorted({t.dest or "(unchanged)" for t in found})
    return sources, dests


def chart_document() -> str:
    """The contents of ``docs/state-chart.md``.

    Regenerate the file with ``python scripts/generate_state_chart.py``.
    """
    rows = []
    for name in MACHINE.events:
        sources, dests = _edges(name)
        rows.append(f"| `{name}` | {', '.join(sources)} | {', '.join(dests)} |")
    table = "\n".join(rows)
    return (
        "# The task state chart\n\n"
        "Generated from the one `transitions` machine in `domain/chart.py`; a test\n"
        "fails when this file and the machine drift apart. Regenerate it with\n"
        "`python scripts/generate_state_chart.py`.\n\n"
        "```mermaid\n"
        f"{mermaid().rstrip()}\n"
        "```\n\n"
        "| trigger | from | to |\n"
        "|---|---|---|\n"
        f"{table}\n"
    )
