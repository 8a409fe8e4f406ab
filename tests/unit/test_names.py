"""States, resolutions and human actions are declared once, as StrEnums in the
domain; the ``Literal`` types that let a type checker accept their plain
values are checked against them here, and nothing else restates them."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any, get_args

import orjson
import pytest
from pydantic import ValidationError

from devs.domain.chart import StateValue, TaskState
from devs.domain.decisions import Notification
from devs.domain.names import (
    KIND_STYLE,
    OLD_NOTIFICATION_KINDS,
    HumanAction,
    HumanActionValue,
    NotificationKind,
    Resolution,
    ResolutionValue,
)
from devs.domain.values import RESOLUTIONS, STATES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("enum", "literal"),
    [
        (TaskState, StateValue),
        (Resolution, ResolutionValue),
        (HumanAction, HumanActionValue),
    ],
)
def test_each_literal_is_its_enum_s_values(enum: type[StrEnum], literal: Any) -> None:
    assert list(get_args(literal)) == [member.value for member in enum]


def test_the_validated_names_come_from_the_enums() -> None:
    assert tuple(TaskState) == STATES
    assert tuple(Resolution) == RESOLUTIONS


RESTATED = re.compile(
    r"""["']return["'],\s*["']complete["'],\s*["']skip["']"""
    r"""|["']RUNNING["'],\s*["']GATE_FAILED["']"""
    r"""|["']resume["'],\s*["']rewind["'],\s*["']skip["'],\s*["']claim["']"""
)


def test_no_module_restates_them() -> None:
    declared = {ROOT / "domain" / "names.py", ROOT / "domain" / "chart.py"}
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("domain", "projections", "adapters", "testing")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path not in declared
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if RESTATED.search(line)
    ]
    assert not found, f"restated instead of derived from the enums: {found}"


def test_every_notification_kind_is_in_one_style() -> None:
    assert KIND_STYLE == r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*"
    for kind in NotificationKind:
        assert re.fullmatch(KIND_STYLE, kind.value), kind.value
        assert kind.value == kind.name  # the value is what the code calls it
    for old, kind in OLD_NOTIFICATION_KINDS.items():
        assert not re.fullmatch(KIND_STYLE, old)  # only the old style is mapped
        assert NotificationKind(old) is kind
    with pytest.raises(ValueError, match="not a valid NotificationKind"):
        NotificationKind("task:something_else")
    with pytest.raises(ValidationError):
        Notification.model_validate(
            {"position": 1, "kind": "nope", "task_id": "t", "at": "2025-01-01T00:00Z"}
        )


def test_an_old_kind_is_read_as_today_s() -> None:
    """What release 0.1.0 sent is read as today's kind, in Python and in JSON
    (an ``HttpRecoveryClient`` reading an older server's ``/notifications``),
    and written in today's style."""
    old = "task:blacklisted_strategy_attempted"
    assert NotificationKind(old) is NotificationKind.BLACKLISTED_STRATEGY_ATTEMPTED
    line = orjson.dumps(
        {"position": 1, "kind": old, "task_id": "t", "at": "2025-01-01T00:00:00Z"}
    )
    notification = Notification.model_validate_json(line)
    assert notification.kind is NotificationKind.BLACKLISTED_STRATEGY_ATTEMPTED
    assert notification.model_dump(mode="json")["kind"] == (
        "BLACKLISTED_STRATEGY_ATTEMPTED"
    )
