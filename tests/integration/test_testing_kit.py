"""``devs.testing`` catches bugs: ``RecoveryMachine`` against three services
broken on purpose finds each bug and shrinks it to a short counterexample; the
kit's strategies give valid inputs; the pytest plugin's fixtures work."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from devs.domain import DevsError, Policy, RecoveryService
from devs.domain.values import Actor, Strategy, TaskId, validated
from devs.testing import (
    LadderModel,
    RecoveryMachine,
    command_sequences,
    policies,
    sqlite_service,
    strategy_texts,
    task_ids,
)
from devs.testing.model import Command

STEPS = 20
RULES = frozenset(
    {
        "begin_attempt",
        "record_gate",
        "report_entropy",
        "log_lesson",
        "resume",
        "rewind",
        "skip",
        "claim",
        "resolve",
    }
)


class Wrapper:
    """A service that passes everything on to a real one."""

    def __init__(self, inner: RecoveryService) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class CountsTwice(Wrapper):
    """Every third failed gate of a task is recorded twice."""

    def __init__(self, inner: RecoveryService) -> None:
        super().__init__(inner)
        self.failures: dict[str, int] = {}

    def record_gate(self, task_id: str, exit_code: int | None, **kwargs: Any) -> Any:
        decision = self.inner.record_gate(task_id, exit_code, **kwargs)
        if exit_code != 0:
            self.failures[task_id] = self.failures.get(task_id, 0) + 1
            if self.failures[task_id] % 3 == 0 and decision.state == "GATE_FAILED":
                decision = self.inner.record_gate(task_id, exit_code, **kwargs)
        return decision


class ForgetsTheActor(Wrapper):
    """A resume that records no one as having acted."""

    def resume(self, task_id: str, *, actor: str, reason: str) -> Any:
        return self.inner.resume(task_id, actor="unknown", reason=reason)


class HandsOffLate(Wrapper):
    """Decides by a hand-off threshold one higher than the policy it reports."""

    def __init__(self, policy: Policy) -> None:
        # One higher, within the policy's range (a threshold above it would
        # make the stored Started event undecodable: another failure than the
        # one planted). At the top of the range the service is not broken.
        highest = Policy.model_fields["handoff_threshold"].metadata
        top = min(m.le for m in highest if getattr(m, "le", None) is not None)
        late = policy.model_copy(
            update={"handoff_threshold": min(policy.handoff_threshold + 1, top)}
        )
        super().__init__(sqlite_service(late))
        self.reported = policy

    def _as_reported(self, summary: Any) -> Any:
        return summary.model_copy(update={"policy": self.reported})

    def start_task(self, task_id: str, **kwargs: Any) -> Any:
        return self._as_reported(self.inner.start_task(task_id, **kwargs))

    def task(self, task_id: str) -> Any:
        return self._as_reported(self.inner.task(task_id))

    def state_at(self, task_id: str, version: int) -> Any:
        return self._as_reported(self.inner.state_at(task_id, version))


def counterexample(machine: type[RecoveryMachine]) -> tuple[str, int]:
    """Run ``machine`` until hypothesis finds a failure; the failure and the
    number of commands in the shrunk counterexample it reports."""
    lines: list[str] = []
    with (
        with_reporter(lambda text: lines.append(str(text))),
        pytest.raises((AssertionError, DevsError)) as raised,
    ):
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=200,
                stateful_step_count=STEPS,
                deadline=None,
                database=None,
                derandomize=True,  # the same search on every run
                report_multiple_bugs=False,  # the one it shrank
                suppress_health_check=list(HealthCheck),
            ),
        )
    report = "\n".join([*lines, *getattr(raised.value, "__notes__", [])])
    steps = [
        line
        for line in report.splitlines()
        if line.startswith("state.") and line[6:].split("(")[0] in RULES
    ]
    return str(raised.value), len(steps)


@pytest.mark.parametrize(
    ("broken", "symptom"),
    [
        # The second count shows as a count or, at a threshold, as a state.
        (
            lambda policy: CountsTwice(sqlite_service(policy)),
            r"(failures|state [A-Z_]+|is [A-Z_]+), the ladder",
        ),
        (lambda policy: ForgetsTheActor(sqlite_service(policy)), r"humans recorded"),
        (HandsOffLate, r"the ladder says HAND_OFF|refuses it"),
    ],
    ids=[
        "a failure counted twice",
        "a resume that forgets its actor",
        "a late hand-off",
    ],
)
@pytest.mark.slow  # minutes of search and shrinking; CI runs it (-m slow)
def test_the_machine_finds_a_broken_service(
    broken: Any, symptom: str, capsys: pytest.CaptureFixture[str]
) -> None:
    class Broken(RecoveryMachine):
        make_service = staticmethod(broken)
        deep_checks = False  # the per-step invariants catch these; faster

    failure, steps = counterexample(Broken)
    assert re.search(symptom, failure), failure
    with capsys.disabled():
        print(f"\ncounterexample: {steps} command(s) for {symptom!r}")
    assert 1 <= steps <= STEPS


def test_the_real_service_passes_where_the_broken_ones_fail() -> None:
    run_state_machine_as_test(
        RecoveryMachine,
        settings=settings(
            max_examples=20,
            stateful_step_count=30,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


@settings(max_examples=300, deadline=None)
@given(policies())
def test_policies_are_valid_and_cover_the_ranges(policy: Policy) -> None:
    assert Policy.model_validate(policy.model_dump()) == policy


@settings(max_examples=300, deadline=None)
@given(task_ids(), strategy_texts())
def test_texts_are_what_the_service_accepts(task_id: str, strategy: str) -> None:
    @validated
    def accept(task_id: TaskId, strategy: Strategy, actor: Actor) -> None:
        """Refuses what the service would refuse."""

    accept(task_id, strategy, task_id)


@settings(max_examples=100, deadline=None)
@given(
    policies().flatmap(lambda p: command_sequences(p, tasks=2).map(lambda c: (p, c)))
)
def test_the_model_is_total(drawn: tuple[Policy, list[Command]]) -> None:
    """Any sequence of commands has an answer in the model (or a refusal)."""
    policy, sequence = drawn
    model = LadderModel(policy)
    model.start("a")
    model.start("b")
    for command in sequence:
        expected = model.apply(command)
        if expected is not None:
            assert expected.count >= 0
            assert expected.state in {
                "RUNNING",
                "GATE_FAILED",
                "ESCALATION",
                "PAUSED",
                "HAND_OFF",
                "COMPLETED",
                "SKIPPED",
            }


def test_the_plugin_fixtures(
    devs_service: RecoveryService, devs_policy: Policy
) -> None:
    assert devs_policy == Policy()
    started = devs_service.start_task("t")
    assert started.policy == devs_policy


class TestAPolicyOfItsOwn:
    @pytest.fixture
    def devs_policy(self) -> Policy:  # overrides the plugin's, as a user would
        return Policy(escalation_threshold=2)

    def test_a_test_can_vary_the_policy(self, devs_service: RecoveryService) -> None:
        devs_service.start_task("t")
        devs_service.record_gate("t", 1)
        assert devs_service.record_gate("t", 1).outcome == "escalate"
