"""The binary gate: a process exit code decides pass or fail, nothing else."""

from __future__ import annotations

from enum import StrEnum

from devs.domain.model import Immutable


class GateFailureReason(StrEnum):
    NON_ZERO_EXIT = "NON_ZERO_EXIT"
    PROCESS_KILLED = "PROCESS_KILLED"


class GateResult(Immutable):
    """``passed`` with no reason, or a failure with its reason and exit code."""

    passed: bool
    reason: GateFailureReason | None = None
    exit_code: int | None = None


def evaluate(exit_code: int | None) -> GateResult:
    """Judge a gate by its exit code. Pure: no I/O, no logging, never raises.

    ``0`` passes; any other code fails with ``NON_ZERO_EXIT``; ``None`` (the
    process was killed or timed out) fails with ``PROCESS_KILLED``.
    """
    # REQ: 3_MCP-TAS-041
    if exit_code is None:
        return GateResult(passed=False, reason=GateFailureReason.PROCESS_KILLED)
    if exit_code == 0:
        return GateResult(passed=True, exit_code=0)
    return GateResult(
        passed=False, reason=GateFailureReason.NON_ZERO_EXIT, exit_code=exit_code
    )
