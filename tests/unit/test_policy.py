"""Thresholds: defaults 3 / 5 / 0.75, env overrides, invalid -> warning + default."""

from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError

from devs.domain.policy import Policy, env_var, load_policy


def test_defaults() -> None:
    policy = load_policy({})
    assert policy.escalation_threshold == 3
    assert policy.handoff_threshold == 5
    assert policy.hitl_entropy_threshold == 0.75
    assert policy.failure_history_cap == 20


def test_environment_overrides() -> None:
    policy = load_policy(
        {
            "DEVS_ESCALATION_THRESHOLD": "4",
            "DEVS_HANDOFF_THRESHOLD": " 7 ",
            "DEVS_HITL_ENTROPY_THRESHOLD": "0.5",
            "DEVS_FAILURE_HISTORY_CAP": "9",
        }
    )
    assert (policy.escalation_threshold, policy.handoff_threshold) == (4, 7)
    assert policy.hitl_entropy_threshold == 0.5
    assert policy.failure_history_cap == 9


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("DEVS_HITL_ENTROPY_THRESHOLD", "1.5"),
        ("DEVS_HITL_ENTROPY_THRESHOLD", "-0.1"),
        ("DEVS_HITL_ENTROPY_THRESHOLD", "nan"),
        ("DEVS_HITL_ENTROPY_THRESHOLD", "inf"),
        ("DEVS_HITL_ENTROPY_THRESHOLD", "high"),
        ("DEVS_ESCALATION_THRESHOLD", "0"),
        ("DEVS_ESCALATION_THRESHOLD", "2.5"),
        ("DEVS_HANDOFF_THRESHOLD", ""),
        ("DEVS_HANDOFF_THRESHOLD", "100000"),
        ("DEVS_FAILURE_HISTORY_CAP", "-3"),
    ],
)
def test_invalid_override_warns_and_falls_back(
    name: str, raw: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="devs.policy")
    policy = load_policy({name: raw, "DEVS_HANDOFF_THRESHOLD_UNRELATED": "x"})
    field = name.removeprefix("DEVS_").lower()
    assert getattr(policy, field) == Policy.model_fields[field].default
    [record] = caplog.records
    assert name in record.getMessage()
    assert "using the default" in record.getMessage()


def test_one_bad_override_keeps_the_good_ones(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="devs.policy")
    policy = load_policy(
        {"DEVS_ESCALATION_THRESHOLD": "2", "DEVS_HITL_ENTROPY_THRESHOLD": "2"}
    )
    assert policy.escalation_threshold == 2
    assert policy.hitl_entropy_threshold == 0.75
    assert len(caplog.records) == 1


def test_env_var_names() -> None:
    assert env_var("hitl_entropy_threshold") == "DEVS_HITL_ENTROPY_THRESHOLD"


def test_policy_is_frozen_and_validated() -> None:
    with pytest.raises(ValidationError):
        Policy(escalation_threshold=0)
    with pytest.raises(ValidationError):
        Policy(hitl_entropy_threshold=float("nan"))
    policy = Policy()
    with pytest.raises(ValidationError):
        policy.escalation_threshold = 9  # type: ignore[misc]
