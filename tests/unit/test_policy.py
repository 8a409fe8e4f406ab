"""Thresholds: defaults 3 / 5 / 0.75 / 20 / observe / no human deadline, env
overrides, bad -> warning + default."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from eventsourcing.utils import Environment
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from pydantic_settings import BaseSettings

from devs.domain.errors import InvalidInput
from devs.domain.policy import (
    ENV_PREFIX,
    Policy,
    PolicySettings,
    Thresholds,
    env_var,
    load_policy,
)
from devs.testing import policies

DEFAULTS = {
    "escalation_threshold": 3,
    "handoff_threshold": 5,
    "hitl_entropy_threshold": 0.75,
    "failure_history_cap": 20,
    "stuck_detection": "observe",
    "human_deadline": None,
    "task_budget_usd": None,
    "task_budget_tokens": None,
    "run_budget_usd": None,
    "budget_warn": None,
}
INT_RANGES = {
    "escalation_threshold": (1, 1000),
    "handoff_threshold": (1, 1000),
    "failure_history_cap": (1, 200),
}


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def policy_warnings() -> Iterator[list[logging.LogRecord]]:
    """The records ``devs.policy`` logs inside the block (hypothesis-safe)."""
    handler = Collect()
    logger = logging.getLogger("devs.policy")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


@pytest.fixture(autouse=True)
def _no_devs_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in DEFAULTS:
        monkeypatch.delenv(env_var(name), raising=False)


def test_defaults() -> None:
    policy = load_policy({})
    assert policy.model_dump() == DEFAULTS
    assert policy == Policy()


@pytest.mark.parametrize("mode", ["observe", "gate", "off", " gate "])
def test_stuck_detection_modes(mode: str) -> None:
    assert load_policy({"DEVS_STUCK_DETECTION": mode}).stuck_detection == mode.strip()


@pytest.mark.parametrize("bad", ["", "on", "GATE", "gate\x00", "1"])
def test_bad_stuck_detection_warns_and_observes(bad: str) -> None:
    with policy_warnings() as records:
        policy = load_policy({"DEVS_STUCK_DETECTION": bad})
    assert policy.stuck_detection == "observe"
    assert len(records) == 1
    assert "DEVS_STUCK_DETECTION" in records[0].getMessage()


def test_environment_overrides() -> None:
    policy = load_policy(
        {
            "DEVS_ESCALATION_THRESHOLD": "4",
            "DEVS_HANDOFF_THRESHOLD": " 7 ",
            "DEVS_HITL_ENTROPY_THRESHOLD": "0.5",
            "DEVS_FAILURE_HISTORY_CAP": "\x1c9\n",
        }
    )
    assert (policy.escalation_threshold, policy.handoff_threshold) == (4, 7)
    assert policy.hitl_entropy_threshold == 0.5
    assert policy.failure_history_cap == 9
    assert type(policy) is Policy


@pytest.mark.parametrize(
    ("name", "raw", "problem"),
    [
        ("DEVS_HITL_ENTROPY_THRESHOLD", "1.5", "less than or equal to 1"),
        ("DEVS_HITL_ENTROPY_THRESHOLD", "-0.1", "greater than or equal to 0"),
        ("DEVS_HITL_ENTROPY_THRESHOLD", "nan", "finite number"),
        ("DEVS_HITL_ENTROPY_THRESHOLD", "inf", "finite number"),
        ("DEVS_HITL_ENTROPY_THRESHOLD", "high", "valid number"),
        ("DEVS_ESCALATION_THRESHOLD", "0", "greater than or equal to 1"),
        ("DEVS_ESCALATION_THRESHOLD", "2.5", "valid integer"),
        ("DEVS_HANDOFF_THRESHOLD", "", "valid integer"),
        ("DEVS_HANDOFF_THRESHOLD", "   ", "valid integer"),
        ("DEVS_HANDOFF_THRESHOLD", "100000", "less than or equal to 1000"),
        ("DEVS_FAILURE_HISTORY_CAP", "-3", "greater than or equal to 1"),
        ("DEVS_FAILURE_HISTORY_CAP", "201", "less than or equal to 200"),
    ],
)
def test_invalid_override_warns_and_falls_back(
    name: str, raw: str, problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="devs.policy")
    policy = load_policy({name: raw, "DEVS_HANDOFF_THRESHOLD_UNRELATED": "x"})
    field = name.removeprefix(ENV_PREFIX).lower()
    assert getattr(policy, field) == DEFAULTS[field]
    [record] = caplog.records
    assert record.name == "devs.policy"
    assert record.levelno == logging.WARNING
    assert record.msg == "ignoring %s=%r (%s); using the default %r"
    assert isinstance(record.args, tuple)
    variable, value, message, default = record.args
    assert (variable, value, default) == (name, raw, DEFAULTS[field])
    assert problem in str(message)
    assert record.getMessage().startswith(f"ignoring {name}={raw!r} (")


def test_one_bad_override_keeps_the_good_ones(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="devs.policy")
    policy = load_policy(
        {
            "DEVS_ESCALATION_THRESHOLD": "2",
            "DEVS_HITL_ENTROPY_THRESHOLD": "2",
            "DEVS_FAILURE_HISTORY_CAP": "zero",
        }
    )
    assert policy.escalation_threshold == 2
    assert policy.hitl_entropy_threshold == 0.75
    assert policy.failure_history_cap == 20
    assert [r.args[0] for r in caplog.records if isinstance(r.args, tuple)] == [
        "DEVS_HITL_ENTROPY_THRESHOLD",
        "DEVS_FAILURE_HISTORY_CAP",
    ]


def test_unrelated_devs_variables_are_ignored(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    policy = load_policy(
        {
            "DEVS_DB": "/tmp/x.sqlite",
            "DEVS_HANDOFF_THRESHOLD_UNRELATED": "x",
            "DEVS_UNKNOWN": "1",
            "devs_handoff_threshold": "9",  # names are case-sensitive
        }
    )
    assert policy == Policy()
    assert not [r for r in caplog.records if r.name == "devs.policy"]


def test_env_var_names() -> None:
    assert env_var("hitl_entropy_threshold") == "DEVS_HITL_ENTROPY_THRESHOLD"
    assert [env_var(name) for name in Policy.model_fields] == [
        "DEVS_ESCALATION_THRESHOLD",
        "DEVS_HANDOFF_THRESHOLD",
        "DEVS_HITL_ENTROPY_THRESHOLD",
        "DEVS_FAILURE_HISTORY_CAP",
        "DEVS_STUCK_DETECTION",
        "DEVS_HUMAN_DEADLINE",
        "DEVS_TASK_BUDGET_USD",
        "DEVS_TASK_BUDGET_TOKENS",
        "DEVS_RUN_BUDGET_USD",
        "DEVS_BUDGET_WARN",
    ]


def test_os_environ_is_the_default_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVS_HANDOFF_THRESHOLD", "8")
    assert load_policy().handoff_threshold == 8
    assert PolicySettings().handoff_threshold == 8
    # A given mapping is the only source: the process environment is not read.
    assert load_policy({}).handoff_threshold == 5
    assert PolicySettings.from_environ({}).handoff_threshold == 5


def test_an_eventsourcing_environment_is_read_with_its_prefix_first() -> None:
    env = Environment(
        "RecoveryService",
        {
            "DEVS_HANDOFF_THRESHOLD": "8",
            "RECOVERYSERVICE_DEVS_HANDOFF_THRESHOLD": "11",
            "DEVS_ESCALATION_THRESHOLD": "2",
        },
    )
    policy = load_policy(env)
    assert (policy.handoff_threshold, policy.escalation_threshold) == (11, 2)


def test_threads_each_read_their_own_mapping() -> None:
    results: dict[int, set[int]] = {}

    def load(cap: int) -> None:
        results[cap] = {
            load_policy({"DEVS_FAILURE_HISTORY_CAP": str(cap)}).failure_history_cap
            for _ in range(50)
        }

    threads = [threading.Thread(target=load, args=(cap,)) for cap in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {cap: {cap} for cap in range(1, 9)}


def test_policy_is_frozen_and_validated() -> None:
    with pytest.raises(ValidationError):
        Policy(escalation_threshold=0)
    with pytest.raises(ValidationError):
        Policy(hitl_entropy_threshold=float("nan"))
    with pytest.raises(ValidationError):
        Policy(hitl_entropy_threshold=float("inf"))
    with pytest.raises(ValidationError):
        Policy.model_validate({"unknown": 1})
    policy = Policy()
    with pytest.raises(ValidationError):
        policy.escalation_threshold = 9  # type: ignore[misc]


def test_the_stored_policy_keeps_its_shape() -> None:
    """Old databases hold this JSON in every Started event."""
    stored = {
        "escalation_threshold": 4,
        "handoff_threshold": 6,
        "hitl_entropy_threshold": 0.5,
        "failure_history_cap": 10,
    }
    # A policy recorded before stuck detection existed observes (the default);
    # one recorded before deadlines or budgets has none.
    assert Policy.model_validate(stored).model_dump(mode="json") == {
        **stored,
        "stuck_detection": "observe",
        "human_deadline": None,
        "task_budget_usd": None,
        "task_budget_tokens": None,
        "run_budget_usd": None,
        "budget_warn": None,
    }
    assert Policy().model_dump_json() == (
        '{"escalation_threshold":3,"handoff_threshold":5,'
        '"hitl_entropy_threshold":0.75,"failure_history_cap":20,'
        '"stuck_detection":"observe","human_deadline":null,'
        '"task_budget_usd":null,"task_budget_tokens":null,'
        '"run_budget_usd":null,"budget_warn":null}'
    )
    # The fields added later are null by default, so a Started event of a
    # task recorded before them hashes as it did (nulls are not hashed).
    assert Policy().model_dump(exclude_none=True) == {
        "escalation_threshold": 3,
        "handoff_threshold": 5,
        "hitl_entropy_threshold": 0.75,
        "failure_history_cap": 20,
        "stuck_detection": "observe",
    }
    assert Policy().warn_at == 0.8
    assert isinstance(Policy(), BaseModel)
    assert not isinstance(Policy(), BaseSettings)


def test_settings_and_policy_share_one_field_definition() -> None:
    assert list(PolicySettings.model_fields) == list(Policy.model_fields)
    for name, field in Policy.model_fields.items():
        twin = PolicySettings.model_fields[name]
        assert (twin.default, twin.description, twin.metadata) == (
            field.default,
            field.description,
            field.metadata,
        )
        assert field.default == DEFAULTS[name]
        assert field.description
    settings = PolicySettings.from_environ({"DEVS_ESCALATION_THRESHOLD": "7"})
    assert settings.policy() == Policy(escalation_threshold=7)


# ============================================================ properties


@given(
    st.sampled_from(sorted(INT_RANGES)),
    st.data(),
    st.sampled_from(["", " ", "\t", "\n", "\u2003", "\x1c"]),  # as str.strip()
)
def test_any_in_range_integer_override_applies(
    field: str, data: st.DataObject, padding: str
) -> None:
    low, high = INT_RANGES[field]
    value = data.draw(st.integers(low, high))
    with policy_warnings() as records:
        policy = load_policy({env_var(field): f"{padding}{value}{padding}"})
    assert getattr(policy, field) == value
    assert records == []


@given(st.floats(0.0, 1.0))
def test_any_in_range_entropy_threshold_applies(value: float) -> None:
    with policy_warnings() as records:
        policy = load_policy({"DEVS_HITL_ENTROPY_THRESHOLD": repr(value)})
    assert policy.hitl_entropy_threshold == value
    assert records == []


@given(st.sampled_from(sorted(INT_RANGES)), st.data())
def test_any_out_of_range_integer_override_warns_and_keeps_the_default(
    field: str, data: st.DataObject
) -> None:
    low, high = INT_RANGES[field]
    value = data.draw(
        st.one_of(st.integers(max_value=low - 1), st.integers(min_value=high + 1))
    )
    with policy_warnings() as records:
        policy = load_policy({env_var(field): str(value)})
    assert getattr(policy, field) == DEFAULTS[field]
    [record] = records
    assert isinstance(record.args, tuple)
    assert record.args[:2] == (env_var(field), str(value))


@given(st.floats().filter(lambda x: not 0.0 <= x <= 1.0))
def test_any_out_of_range_entropy_threshold_warns_and_keeps_the_default(
    value: float,
) -> None:
    with policy_warnings() as records:
        policy = load_policy({"DEVS_HITL_ENTROPY_THRESHOLD": repr(value)})
    assert policy.hitl_entropy_threshold == 0.75
    [record] = records
    assert isinstance(record.args, tuple)
    assert record.args[:2] == ("DEVS_HITL_ENTROPY_THRESHOLD", repr(value))


@given(policies(), policies())
def test_a_policy_changed_to_another_policys_fields_is_that_policy(
    base: Policy, other: Policy
) -> None:
    assert base.changed(other.model_dump(mode="json")) == other
    assert base.changed(other.model_dump()) == other
    assert base.changed({}) == base
    assert base.changed(dict.fromkeys(Thresholds.model_fields)) == base


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"escalation_threshold": 0}, "escalation_threshold", "greater than or equal"),
        ({"handoff_threshold": 1001}, "handoff_threshold", "less than or equal"),
        ({"escalation_threshold": "2"}, "escalation_threshold", "valid integer"),
        ({"escalation_threshold": True}, "escalation_threshold", "valid integer"),
        ({"escalation_threshold": 2.0}, "escalation_threshold", "valid integer"),
        ({"hitl_entropy_threshold": float("nan")}, "hitl_entropy_threshold", "finite"),
        ({"hitl_entropy_threshold": "0.5"}, "hitl_entropy_threshold", "valid number"),
        ({"stuck_detection": "loud"}, "stuck_detection", "one of observe, gate, off"),
        ({"human_deadline": 0}, "human_deadline", "greater than 0"),
        ({"human_deadline": -1.5}, "human_deadline", "greater than 0"),
        ({"human_deadline": 2_592_001}, "human_deadline", "less than or equal"),
        ({"human_deadline": float("nan")}, "human_deadline", "finite"),
        ({"human_deadline": float("inf")}, "human_deadline", "finite"),
        ({"human_deadline": "60"}, "human_deadline", "valid number"),
        ({"human_deadline": True}, "human_deadline", "valid number"),
        ({"stuck_detection": 1}, "stuck_detection", "one of observe, gate, off"),
        ({"nope": 1}, "policy", "'nope' is not a policy field"),
        ({"\ud800" * 100: 1}, "policy", "\\ud800"),
        ({10**5000: 1}, "policy", "<int>"),
        # a credential across the cut at 60 characters: redacted whole first
        ({"x" * 40 + " AKIAIOSFODNN7EXAMPLE": 1}, "policy", "not a policy field"),
    ],
)
def test_a_refused_change_names_its_field(
    changes: dict[object, object], field: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        Policy().changed(changes)  # type: ignore[arg-type]
    assert refused.value.field == field
    assert words in str(refused.value)
    assert len(str(refused.value)) < 300
    assert "AKIAIOSFO" not in str(refused.value)


# ============================================================ deadlines


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("60", 60.0), (" 0.5 ", 0.5), ("2592000", 2_592_000.0), ("1e3", 1000.0)],
)
def test_the_human_deadline_comes_from_the_environment(
    raw: str, seconds: float
) -> None:
    with policy_warnings() as records:
        policy = load_policy({"DEVS_HUMAN_DEADLINE": raw})
    assert policy.human_deadline == seconds
    assert records == []


@pytest.mark.parametrize("blank", ["", " ", "\t\n"])
def test_an_empty_human_deadline_is_unset_without_a_warning(blank: str) -> None:
    with policy_warnings() as records:
        policy = load_policy({"DEVS_HUMAN_DEADLINE": blank})
    assert policy.human_deadline is None
    assert records == []


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("0", "greater than 0"),
        ("-5", "greater than 0"),
        ("2592001", "less than or equal to 2592000"),
        ("nan", "finite number"),
        ("inf", "finite number"),
        ("soon", "valid number"),
    ],
)
def test_an_invalid_human_deadline_warns_once_and_stays_unset(
    raw: str, problem: str
) -> None:
    with policy_warnings() as records:
        policy = load_policy(
            {"DEVS_HUMAN_DEADLINE": raw, "DEVS_HANDOFF_THRESHOLD": "7"}
        )
    assert policy.human_deadline is None
    assert policy.handoff_threshold == 7
    [record] = records
    assert isinstance(record.args, tuple)
    assert record.args[:2] == ("DEVS_HUMAN_DEADLINE", raw)
    assert problem in str(record.args[2])
    assert record.args[3] is None


@pytest.mark.parametrize("seconds", [60, 60.0, 0.25, 2_592_000])
def test_a_change_of_deadline_takes_int_or_float_seconds(seconds: float) -> None:
    changed = Policy().changed({"human_deadline": seconds})
    assert changed.human_deadline == seconds
    assert isinstance(changed.human_deadline, float)
    # None keeps the deadline in force; a whole Policy removes it.
    assert changed.changed({"human_deadline": None}) == changed
    assert changed.changed({"escalation_threshold": 2}).human_deadline == seconds


@given(st.floats(min_value=0, max_value=2_592_000, exclude_min=True))
def test_any_in_range_human_deadline_applies(seconds: float) -> None:
    with policy_warnings() as records:
        policy = load_policy({"DEVS_HUMAN_DEADLINE": repr(seconds)})
    assert policy.human_deadline == seconds
    assert records == []
