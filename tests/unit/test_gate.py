"""Seed 002: the binary gate is a pure function of the exit code."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from devs.domain.gate import GateFailureReason, evaluate


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
def test_evaluate_is_pure(code: int | None) -> None:
    assert evaluate(code) == evaluate(code)


def test_requirement_annotation_is_present() -> None:
    import inspect

    assert "REQ: 3_MCP-TAS-041" in inspect.getsource(evaluate)
