"""States, resolutions and human actions are declared once, as StrEnums in the
domain; the ``Literal`` types that let a type checker accept their plain
values are checked against them here, and nothing else restates them."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any, get_args

import pytest

from devs.domain.chart import StateValue, TaskState
from devs.domain.names import (
    HumanAction,
    HumanActionValue,
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
