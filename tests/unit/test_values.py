"""Bad input gets a clear error that names what was wrong."""

from __future__ import annotations

import math

import pytest

from devs.domain import values
from devs.domain.errors import InvalidInput


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "task_id must not be empty"),
        ("   ", "task_id must not be empty"),
        ("x" * 201, "task_id is 201 characters long; the limit is 200"),
        ("a\nb", "task_id must not contain control characters"),
        ("a\x00b", "task_id must not contain control characters"),
        (" padded", "task_id must not start or end with whitespace"),
        (42, "task_id must be a string, got int 42"),
        (None, "task_id must be a string, got NoneType None"),
    ],
)
def test_bad_identifiers(value: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        values.identifier("task_id", value)


def test_identifier_accepts_ordinary_ids() -> None:
    assert values.identifier("task_id", "task-09-1/handoff") == "task-09-1/handoff"


def test_text_limits() -> None:
    assert values.text("strategy", "multi\nline", max_len=20) == "multi\nline"
    with pytest.raises(InvalidInput, match="strategy is 21 characters long"):
        values.text("strategy", "x" * 21, max_len=20)
    assert values.text("output", "", max_len=5, allow_empty=True) == ""


@pytest.mark.parametrize("score", [0, 0.0, 0.5, 1, 1.0])
def test_scores_in_range(score: float) -> None:
    assert values.entropy_score(score) == float(score)


@pytest.mark.parametrize(
    ("score", "message"),
    [
        (1.5, "out of range"),
        (-0.01, "out of range"),
        (math.nan, "finite"),
        (math.inf, "finite"),
        (True, "must be a number"),
        ("0.5", "must be a number"),
        (None, "must be a number"),
    ],
)
def test_bad_scores(score: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        values.entropy_score(score)


@pytest.mark.parametrize("code", [None, 0, 1, 255, -9])
def test_exit_codes(code: int | None) -> None:
    assert values.exit_code(code) == code


@pytest.mark.parametrize(
    ("code", "message"),
    [(True, "integer"), (1.0, "integer"), ("1", "integer"), (2**40, "out of range")],
)
def test_bad_exit_codes(code: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        values.exit_code(code)


def test_dag_shape() -> None:
    assert values.dag({"a": [], "b": ["a", "a"]}) == {"a": (), "b": ("a",)}
    with pytest.raises(InvalidInput, match="at least one node"):
        values.dag({})
    with pytest.raises(InvalidInput, match="must be a mapping"):
        values.dag(["a"])
    with pytest.raises(InvalidInput, match="must be a list of node ids"):
        values.dag({"a": "b"})
    with pytest.raises(InvalidInput, match="prerequisite of 'b' must not be empty"):
        values.dag({"a": [], "b": [""]})


def test_choice() -> None:
    assert values.choice("resolution", "skip", ["return", "skip"]) == "skip"
    with pytest.raises(
        InvalidInput, match="resolution must be one of return, skip; got 'x'"
    ):
        values.choice("resolution", "x", ["return", "skip"])
