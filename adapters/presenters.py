"""Human-readable text for decisions: the blocks a person sees when an agent stops.

Pure functions from decision models to text. The CLI prints them to stdout; they
have no side effects. The escalation block follows seed 001 to the letter.
"""

from __future__ import annotations

from typing import Any

from devs.domain import (
    AttemptDecision,
    EntropyDecision,
    GateDecision,
    HistoryEntry,
    Outcome,
)
from devs.domain.output import readable
from devs.domain.stuck import StuckAssessment
from devs.domain.task import FailureAnalysisReport, HandoffPayload

ESCALATION_HEADER = "⚠ ENTROPY PAUSE — Max retry threshold reached"
ENTROPY_HEADER = "⏸ ENTROPY PAUSE — Agent entropy limit reached"
BLACKLIST_HEADER = "⛔ BLACKLISTED STRATEGY — This strategy already failed"
HANDOFF_HEADER = "✋ HAND-OFF — The task goes to a human"


def one_line(text: str, limit: int = 300) -> str:
    """``text`` as a person reads it (:func:`devs.domain.output.readable`:
    no terminal sequences, bidirectional controls shown), on one line."""
    flat = " ".join(readable(text[: limit * 4]).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def stuck_text(stuck: StuckAssessment) -> str:
    """``1.00 (same strategy 3 times; same error hash 3 times)``."""
    return f"{stuck.score:.2f} ({stuck.summary})"


def stuck_lines(stuck: StuckAssessment | None) -> list[str]:
    """The ``Stuck:`` line of a block, if a stuck score was derived."""
    return [] if stuck is None else [f"Stuck: {stuck_text(stuck)}"]


def escalation_block(report: FailureAnalysisReport) -> str:
    strategies = [f"  - {one_line(s, 200)}" for s in report.failed_strategies]
    return "\n".join(
        [
            ESCALATION_HEADER,
            f"Task: {report.task_id}",
            f"Failures: {report.failure_count}",
            "Failed strategies:",
            *(strategies or ["  (none recorded)"]),
            f"Last error: {one_line(report.last_error) or '(none)'}",
            *stuck_lines(report.stuck),
            f"Run `devs rewind {report.task_id}` to revert or `devs skip` to skip "
            "this task.",
        ]
    )


def entropy_block(decision: EntropyDecision) -> str:
    return "\n".join(
        [
            ENTROPY_HEADER,
            f"Task: {decision.task_id}",
            f"Entropy: {decision.score:g} (threshold {decision.threshold:g})",
            f"Session: {decision.session_id}",
            f"Run `devs resume {decision.task_id}` to continue, "
            f"`devs rewind {decision.task_id}` to revert or `devs skip` to skip "
            "this task.",
        ]
    )


def blacklist_block(decision: AttemptDecision, strategy: str) -> str:
    lines = [
        BLACKLIST_HEADER,
        f"Task: {decision.task_id}",
        f"Strategy: {one_line(strategy, 200)}",
        f"Matches the lesson: {one_line(decision.matched_strategy or '', 200)}",
        f"Failures: {decision.consecutive_failures}",
    ]
    if decision.outcome is Outcome.PAUSE:
        lines.append(
            f"Run `devs resume {decision.task_id}` once the agent has a new "
            f"approach, `devs rewind {decision.task_id}` to revert or `devs skip` "
            "to skip this task."
        )
    return "\n".join(lines)


def handoff_block(payload: HandoffPayload) -> str:
    return "\n".join(
        [
            HANDOFF_HEADER,
            f"Task: {payload.task_id}",
            f"Failures: {payload.failure_count}",
            f"Last error: {one_line(payload.last_error) or '(none)'}",
            f"Last error hash: {payload.last_error_hash}",
            *stuck_lines(payload.stuck),
            f"Agent: {payload.originating_agent or '(unknown)'}; "
            f"last commit: {payload.last_commit or '(unknown)'}",
            f"Run `devs claim {payload.task_id}`, then `devs resolve "
            f"{payload.task_id} --resolution return|complete|skip`.",
        ]
    )


def attempt_line(decision: AttemptDecision) -> str:
    if decision.proceed:
        return (
            f"{decision.task_id}: proceed ({decision.state}, "
            f"{decision.consecutive_failures} consecutive failures)"
        )
    return f"{decision.task_id}: blocked, {decision.outcome} ({decision.state})"


def gate_line(decision: GateDecision) -> str:
    name = decision.gate or "gate"
    if decision.passed:
        after = (
            f"next node {decision.next_node}"
            if decision.outcome is Outcome.ADVANCE
            else "task complete"
        )
        return f"{decision.task_id}: {name} passed; {after}"
    what = (
        f"exit code {decision.exit_code}"
        if decision.exit_code is not None
        else "process killed"
    )
    line = (
        f"{decision.task_id}: {name} failed ({decision.reason}, {what}); "
        f"{decision.consecutive_failures} consecutive failures; {decision.outcome}"
    )
    if decision.stuck is not None and decision.stuck.signals:
        line += f"; stuck {stuck_text(decision.stuck)}"
    return line


_HISTORY_FIELDS = (
    "run_id",
    "agent",
    "last_commit",
    "strategy",
    "matched_strategy",
    "gate",
    "reason",
    "exit_code",
    "error_message",
    "error_hash",
    "last_error_hash",
    "failure_count",
    "score",
    "entropy_score",
    "session_id",
    "rca_summary",
    "actor",
    "to_commit",
    "resolution",
    "escalation_threshold",
    "handoff_threshold",
    "hitl_entropy_threshold",
)


def _flatten(changes: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in changes.items():
        if isinstance(value, dict):
            flat.update({k: v for k, v in value.items() if k not in flat})
        else:
            flat.setdefault(key, value)
    return flat


def history_line(entry: HistoryEntry) -> str:
    """One event of a task's history: when, what, what changed, the state after."""
    changes = dict(entry.changes)
    stuck = changes.pop("stuck", None)
    changes.pop("chain_prev", None)
    flat = _flatten(changes)
    parts = []
    for name in _HISTORY_FIELDS:
        value = flat.get(name)
        if value is None or value == "":
            continue
        text = str(value)
        if name.endswith("hash") and len(text) > 12:
            text = text[:12] + "…"
        parts.append(f"{name}={one_line(text, 60)}")
    if isinstance(stuck, dict):
        parts.append(f"stuck={stuck_text(StuckAssessment.model_validate(stuck))}")
    return (
        f"v{entry.version:<4} {entry.timestamp:%Y-%m-%d %H:%M:%S}  {entry.event:<30} "
        f"-> {entry.state:<11} failures={entry.consecutive_failures}  "
        + " ".join(parts)
    ).rstrip()
