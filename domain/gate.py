"""The binary gate: a process exit code decides pass or fail, nothing else."""

from __future__ import annotations

import functools
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
        return _KILLED
    if exit_code == 0:
        return _PASSED
    return _failed(exit_code)


# Results are immutable, so each is built once: a decision need not validate one.
_KILLED = GateResult(passed=False, reason=GateFailureReason.PROCESS_KILLED)
_PASSED = GateResult(passed=True, exit_code=0)


@functools.lru_cache(maxsize=256)
def _failed(exit_code: int) -> GateResult:
    return GateResult(
        passed=False, reason=GateFailureReason.NON_ZERO_EXIT, exit_code=exit_code
    )
