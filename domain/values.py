"""Input validation for everything a caller hands the service.

Each check names the argument and says what was wrong, and raises
:class:`~devs.domain.errors.InvalidInput` before any aggregate is touched.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from devs.domain.errors import InvalidInput

ID_MAX = 200
NAME_MAX = 200
STRATEGY_MAX = 4_000
SUMMARY_MAX = 16_000
REASON_MAX = 4_000
ERROR_MAX = 100_000
OUTPUT_MAX = 10_000_000
DAG_MAX_NODES = 10_000
EXIT_CODE_MIN = -(2**31)
EXIT_CODE_MAX = 2**32 - 1

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def text(
    name: str,
    value: object,
    *,
    max_len: int,
    allow_empty: bool = False,
    allow_newlines: bool = True,
) -> str:
    """A string argument: the right type, not blank, not too long, no NULs."""
    if not isinstance(value, str):
        msg = f"{name} must be a string, got {type(value).__name__} {_describe(value)}"
        raise InvalidInput(msg)
    if not allow_empty and not value.strip():
        msg = f"{name} must not be empty"
        raise InvalidInput(msg)
    if len(value) > max_len:
        msg = f"{name} is {len(value):,} characters long; the limit is {max_len:,}"
        raise InvalidInput(msg)
    forbidden = "\x00" in value if allow_newlines else _CONTROL_CHARS.search(value)
    if forbidden:
        msg = f"{name} must not contain control characters"
        raise InvalidInput(msg)
    return value


def identifier(name: str, value: object) -> str:
    """A task, run, session or commit id: one line of at most 200 characters."""
    checked = text(name, value, max_len=ID_MAX, allow_newlines=False)
    if checked != checked.strip():
        msg = f"{name} must not start or end with whitespace: {_describe(checked)}"
        raise InvalidInput(msg)
    return checked


def optional_identifier(name: str, value: object) -> str | None:
    return None if value is None else identifier(name, value)


def exit_code(value: object) -> int | None:
    """An integer exit code, or ``None`` for a killed or timed-out process."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        msg = (
            f"exit_code must be an integer or None, got "
            f"{type(value).__name__} {_describe(value)}"
        )
        raise InvalidInput(msg)
    if not EXIT_CODE_MIN <= value <= EXIT_CODE_MAX:
        msg = f"exit_code {value} is out of range [{EXIT_CODE_MIN}, {EXIT_CODE_MAX}]"
        raise InvalidInput(msg)
    return value


def entropy_score(value: object) -> float:
    """A finite number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"score must be a number, got {type(value).__name__} {_describe(value)}"
        raise InvalidInput(msg)
    score = float(value)
    if not math.isfinite(score):
        msg = f"score must be a finite number in [0, 1], got {score}"
        raise InvalidInput(msg)
    if not 0.0 <= score <= 1.0:
        msg = f"score {score} is out of range [0, 1]"
        raise InvalidInput(msg)
    return score


def dag(value: object) -> dict[str, tuple[str, ...]]:
    """A mapping of node id to its prerequisites' ids (shape only; see run.py)."""
    if not isinstance(value, Mapping):
        msg = (
            "dag must be a mapping of node to prerequisites, "
            f"got {type(value).__name__}"
        )
        raise InvalidInput(msg)
    if not value:
        msg = "dag must have at least one node"
        raise InvalidInput(msg)
    if len(value) > DAG_MAX_NODES:
        msg = f"dag has {len(value):,} nodes; the limit is {DAG_MAX_NODES:,}"
        raise InvalidInput(msg)
    checked: dict[str, tuple[str, ...]] = {}
    for node, prerequisites in value.items():
        node_id = identifier("dag node", node)
        if isinstance(prerequisites, str) or not isinstance(prerequisites, Sequence):
            msg = (
                f"prerequisites of dag node {node_id!r} must be a list of node ids, "
                f"got {type(prerequisites).__name__}"
            )
            raise InvalidInput(msg)
        prereqs: list[str] = []
        for prerequisite in prerequisites:
            prereq_id = identifier(f"prerequisite of {node_id!r}", prerequisite)
            if prereq_id not in prereqs:
                prereqs.append(prereq_id)
        checked[node_id] = tuple(prereqs)
    return checked


def choice(name: str, value: object, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        msg = f"{name} must be one of {', '.join(allowed)}; got {_describe(value)}"
        raise InvalidInput(msg)
    return value
