"""Seed 002: the binary gate is a pure function of the exit code."""

from __future__ import annotations

import logging

from hypothesis import given
from hypothesis import strategies as st

from devs.domain.gate import GateFailureReason, GateResult, evaluate


def test_exit_code_zero_passes() -> None:
    result = evaluate(0)
    assert result.passed is True
    assert result.reason is None


def test_non_zero_exit_fails_with_its_code() -> None:
    result = evaluate(1)
    assert result.passed is False
    assert result.reason is GateFailureReason.NON_ZERO_EXIT
    assert result.exit_code == 1


def test_none_means_the_process_was_killed() -> None:
    result = evaluate(None)
    assert result.passed is False
    assert result.reason is GateFailureReason.PROCESS_KILLED
    assert result.exit_code is None


@given(st.integers().filter(lambda code: code != 0))
def test_every_non_zero_code_fails_non_zero_exit(code: int) -> None:
    result = evaluate(code)
    assert (result.passed, result.reason, result.exit_code) == (
        False,
        GateFailureReason.NON_ZERO_EXIT,
        code,
    )


@given(st.one_of(st.none(), st.integers()))
def test_a_shared_result_equals_the_one_its_code_describes(code: int | None) -> None:
    """Results are built once per code and shared; each is what it always was."""
    if code is None:
        expected = GateResult(passed=False, reason=GateFailureReason.PROCESS_KILLED)
    elif code == 0:
        expected = GateResult(passed=True, exit_code=0)
    else:
        expected = GateResult(
            passed=False, reason=GateFailureReason.NON_ZERO_EXIT, exit_code=code
        )
    assert evaluate(code) == expected
    assert evaluate(code) == expected  # and again, from the cache


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@given(st.one_of(st.none(), st.integers()))
def test_evaluate_never_raises_and_logs_nothing(code: int | None) -> None:
    """Seed 002: side effects live in the service, not in the gate."""
    collect = _Collect()
    root = logging.getLogger()
    level = root.level
    root.addHandler(collect)
    root.setLevel(logging.DEBUG)
    try:
        result = evaluate(code)
    finally:
        root.removeHandler(collect)
        root.setLevel(level)
    assert collect.records == []
    assert result.passed is (code == 0)
