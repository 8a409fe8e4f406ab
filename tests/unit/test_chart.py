"""The state chart: one class-level machine, a generated diagram that cannot drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from devs.domain import chart
from devs.domain.chart import MACHINE, TaskState, Trigger, destination
from devs.domain.errors import IllegalTransition

DOC = Path(__file__).resolve().parents[2] / "docs" / "state-chart.md"


def test_machine_is_shared_and_has_no_models() -> None:
    assert MACHINE.models == []
    assert not MACHINE.auto_transitions
    assert set(MACHINE.states) == {s.value for s in TaskState}
    assert MACHINE.initial == "RUNNING"


def test_every_trigger_is_defined() -> None:
    assert set(MACHINE.events) == {t.value for t in Trigger}


@pytest.mark.parametrize(
    ("trigger", "state", "expected"),
    [
        (Trigger.FAIL_GATE, "RUNNING", TaskState.GATE_FAILED),
        (Trigger.ATTEMPT, "GATE_FAILED", TaskState.RUNNING),
        (Trigger.PASS_GATE, "GATE_FAILED", TaskState.COMPLETED),
        (Trigger.ESCALATE, "GATE_FAILED", TaskState.ESCALATION),
        (Trigger.RESUME, "ESCALATION", TaskState.RUNNING),
        (Trigger.RESUME, "PAUSED", TaskState.RUNNING),
        (Trigger.REWIND, "HAND_OFF", TaskState.RUNNING),
        (Trigger.SKIP, "PAUSED", TaskState.SKIPPED),
        (Trigger.BLOCK_ATTEMPT, "RUNNING", TaskState.RUNNING),
        (Trigger.CLAIM, "HAND_OFF", TaskState.HAND_OFF),
        (Trigger.COMPLETE_BY_HUMAN, "HAND_OFF", TaskState.COMPLETED),
        (Trigger.EXPIRE_DEADLINE, "ESCALATION", TaskState.HAND_OFF),
        (Trigger.EXPIRE_DEADLINE, "PAUSED", TaskState.HAND_OFF),
        (Trigger.REMIND, "ESCALATION", TaskState.ESCALATION),
        (Trigger.REMIND, "PAUSED", TaskState.PAUSED),
    ],
)
def test_destinations(trigger: Trigger, state: str, expected: TaskState) -> None:
    assert destination(trigger, state) is expected


@pytest.mark.parametrize(
    ("trigger", "state"),
    [
        (Trigger.PASS_GATE, "ESCALATION"),
        (Trigger.FAIL_GATE, "PAUSED"),
        (Trigger.FAIL_GATE, "HAND_OFF"),
        (Trigger.FAIL_GATE, "COMPLETED"),
        (Trigger.RESUME, "RUNNING"),
        (Trigger.RESUME, "HAND_OFF"),
        (Trigger.REWIND, "COMPLETED"),
        (Trigger.SKIP, "SKIPPED"),
        (Trigger.CLAIM, "RUNNING"),
        (Trigger.ATTEMPT, "ESCALATION"),
        (Trigger.EXPIRE_DEADLINE, "RUNNING"),
        (Trigger.EXPIRE_DEADLINE, "HAND_OFF"),
        (Trigger.REMIND, "GATE_FAILED"),
        (Trigger.REMIND, "HAND_OFF"),
    ],
)
def test_illegal_transitions_raise_clearly(trigger: Trigger, state: str) -> None:
    with pytest.raises(IllegalTransition, match=f"in state {state}; allowed from"):
        destination(trigger, state)


@pytest.mark.parametrize("state", chart.FINISHED)
@pytest.mark.parametrize(
    "trigger", [trigger for trigger in Trigger if trigger is not Trigger.RECORD_USAGE]
)
def test_finished_states_accept_nothing_but_usage(
    state: TaskState, trigger: Trigger
) -> None:
    with pytest.raises(IllegalTransition):
        destination(trigger, state)


@pytest.mark.parametrize("state", list(TaskState))
def test_usage_is_recorded_in_every_state_and_moves_none(state: TaskState) -> None:
    """A model call's tokens count whenever they are read (a transcript read
    after the task finished still holds its last calls)."""
    assert destination(Trigger.RECORD_USAGE, state) is state


def test_mermaid_is_drawn_from_the_machine() -> None:
    diagram = chart.mermaid()
    assert "stateDiagram-v2" in diagram
    assert "RUNNING --> GATE_FAILED: fail_gate" in diagram
    assert "HAND_OFF --> COMPLETED: complete_by_human" in diagram
    assert "[*] --> RUNNING" in diagram


def test_docs_state_chart_matches_the_machine() -> None:
    assert DOC.read_text(encoding="utf-8") == chart.chart_document(), (
        "docs/state-chart.md is stale: run python scripts/generate_state_chart.py"
    )
