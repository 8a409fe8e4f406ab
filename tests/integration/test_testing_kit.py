"""``devs.testing`` catches bugs: ``RecoveryMachine`` against three services
broken on purpose finds each bug and shrinks it to a short counterexample; the
kit's strategies give valid inputs; the pytest plugin's fixtures work."""

from __future__ import annotations

import importlib
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from devs.domain import DevsError, IllegalTransition, Policy, RecoveryService
from devs.domain.values import Actor, Strategy, TaskId, validated
from devs.testing import (
    SEARCH_STEPS,
    LadderModel,
    RecoveryMachine,
    command_sequences,
    memory_service,
    policies,
    search_settings,
    sqlite_service,
    strategy_texts,
    task_ids,
)
from devs.testing.machine import _CALLS
from devs.testing.model import Command
from devs.testing.script import call_code

STEPS = 20
RULES = frozenset(
    {
        "begin_attempt",
        "record_gate",
        "report_entropy",
        "log_lesson",
        "answer",  # resume, rewind, skip, claim or resolve
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


# ------------------------------------------------- the search a user starts


def test_a_subclass_searches_with_the_kit_s_settings() -> None:
    class Mine(RecoveryMachine):
        pass

    chosen = Mine.TestCase.settings
    assert chosen.report_multiple_bugs is False
    assert chosen.stateful_step_count == SEARCH_STEPS
    assert chosen.max_examples == settings().max_examples  # the profile's
    assert chosen.deadline is None
    assert Phase.explain not in chosen.phases
    assert RecoveryMachine.TestCase.settings.report_multiple_bugs is False
    assert search_settings(max_examples=7).max_examples == 7


def test_a_refusal_names_the_state_the_task_was_in() -> None:
    class AcceptsAResume(Wrapper):
        """A resume of a running task is taken as done (the real one refuses)."""

        def resume(self, task_id: str, **kwargs: Any) -> Any:
            try:
                return self.inner.resume(task_id, **kwargs)
            except IllegalTransition:
                return None

    class Broken(RecoveryMachine):
        make_service = staticmethod(
            lambda policy: AcceptsAResume(memory_service(policy))
        )

    machine = Broken()
    machine.begin(Policy(), ["t"])
    try:
        with pytest.raises(AssertionError) as refused:
            machine.run(Command("resume", 0, actor="ann"))
        assert str(refused.value) == (
            "Command('resume', task=0, actor='ann') was accepted by task 't' in "
            "state RUNNING; the ladder refuses it there"
        )
        script = machine.script.text()
        assert (
            "# the ladder refuses this in state RUNNING; the referee accepted it"
            in (script)
        )
        assert (
            "    with pytest.raises(IllegalTransition):\n"
            "        service.resume('t', actor='ann', reason='go on')"
        ) in script
    finally:
        machine.teardown()


def test_the_decision_log_is_quiet_while_an_example_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    decisions = logging.getLogger("devs.decisions")
    caplog.set_level(logging.INFO, logger="devs.decisions")
    machine = RecoveryMachine()
    try:
        machine.begin(Policy(escalation_threshold=1), ["t"])
        machine.run(Command("record_gate", 0, text="boom", code=1))  # escalates
        assert machine.service.task("t").state == "ESCALATION"
        assert decisions.level == logging.INFO  # between commands, as it was
    finally:
        machine.teardown()
    assert [r for r in caplog.records if r.name == "devs.decisions"] == []
    assert decisions.level == logging.INFO  # given back

    class Loud(RecoveryMachine):
        quiet = False

    loud = Loud()
    try:
        loud.begin(Policy(escalation_threshold=1), ["t"])
        loud.run(Command("record_gate", 0, text="boom", code=1))
    finally:
        loud.teardown()
    assert any(r.name == "devs.decisions" for r in caplog.records)


class _Recorder:
    """Takes any call and keeps it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, args, kwargs))

        return call


@settings(max_examples=200, deadline=None)
@given(policies().flatmap(lambda p: command_sequences(p, tasks=1)))
def test_the_script_writes_the_calls_the_machine_sends(
    sequence: list[Command],
) -> None:
    for command in sequence:
        sent, written = _Recorder(), _Recorder()
        _CALLS[command.name](sent, "t-1", command)
        eval(call_code(command, "t-1"), {"service": written})
        assert written.calls == sent.calls


PLANTED_MODULE = '''
from typing import Any

from devs.testing import RecoveryMachine, memory_service


class ForgetsTheActor:
    """A resume that records someone else as having acted (where nobody
    claimed the stop: a claim would refuse that someone else)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def resume(self, task_id: str, *, actor: str, reason: str) -> Any:
        if self.inner.task(task_id).claimed_by is None:
            actor = "unknown"
        return self.inner.resume(task_id, actor=actor, reason=reason)


class Broken(RecoveryMachine):
    make_service = staticmethod(lambda policy: ForgetsTheActor(memory_service(policy)))
    deep_checks = False


class Fixed(RecoveryMachine):
    pass
'''


@pytest.mark.slow  # a search, then two pytest runs; CI runs it (-m slow)
def test_the_counterexample_is_a_test_that_fails_where_the_search_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script the kit notes is pasted into a file as it is: under pytest
    it fails on the planted bug, and passes on the real service."""
    (tmp_path / "planted_kit.py").write_text(PLANTED_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    planted = importlib.import_module("planted_kit")
    lines: list[str] = []
    with (
        with_reporter(lambda text: lines.append(str(text))),
        pytest.raises(AssertionError, match="humans recorded") as raised,
    ):
        run_state_machine_as_test(
            planted.Broken,
            settings=search_settings(max_examples=200, database=None, derandomize=True),
        )
    reported = [*lines, *getattr(raised.value, "__notes__", [])]
    noted = [text for text in reported if "def test_counterexample" in text]
    assert len(noted) == 1, lines
    script = noted[0].partition("(plain calls on a service):\n\n")[2]
    assert script.startswith("from devs.domain import Policy\n")
    assert "from planted_kit import Broken\n" in script
    assert "state." not in script
    assert "data(" not in script
    assert "service.resume(" in script

    def pytest_on(code: str) -> subprocess.CompletedProcess[str]:
        (tmp_path / "test_pasted.py").write_text(code)
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "test_pasted.py",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    failed = pytest_on(script)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "1 failed" in failed.stdout
    assert "'unknown'" in failed.stdout  # the actor the broken service recorded
    fixed = pytest_on(script.replace("Broken", "Fixed"))
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


def test_the_deep_checks_skipped_while_shrinking_come_back_with_the_next_search() -> (
    None
):
    """A failure found by a per-command check turns the deep checks off for
    the rest of that search only: ``TestCase.runTest`` turns them back on."""
    from devs.testing.machine import _SHRINKING

    verified: list[int] = []

    class Counting(Wrapper):
        def verify(self) -> Any:
            verified.append(1)
            return self.inner.verify()

    class Mine(RecoveryMachine):
        make_service = staticmethod(lambda policy: Counting(memory_service(policy)))

    machine = Mine()
    machine.begin(Policy(), ["t"])
    with pytest.raises(AssertionError):
        machine._expect("service.x", 1, 2, "planted")  # a per-command check fails
    assert Mine in _SHRINKING
    machine.teardown()
    again = Mine()
    again.begin(Policy(), ["t"])
    again.teardown()
    assert verified == []  # skipped: the search is shrinking
    Mine.TestCase.settings = search_settings(max_examples=1, stateful_step_count=1)
    Mine.TestCase("runTest").runTest()
    assert Mine not in _SHRINKING
    assert verified  # the search ran them again
