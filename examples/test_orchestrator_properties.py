"""A small orchestrator loop, property-tested with ``devs.testing``.

    pytest examples/test_orchestrator_properties.py

``Orchestrator`` is the kind of code an agent builder writes around the
referee: before each attempt it asks whether the strategy may run, it runs the
tests (scripted here), reports the gate, and hands the task to a human when
the referee stops it. Hypothesis then checks, for any policy and any run of
strategies and test results, that the loop never runs the agent while a human
is asked, never loses a failure, and stops exactly where the ladder says; and
``RecoveryMachine`` checks the wrapper the orchestrator talks through.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devs.domain import Policy, RecoveryService
from devs.testing import RecoveryMachine, memory_service, policies, strategy_texts


class Referee:
    """The orchestrator's wrapper around the service: it keeps a log of every
    call, as a real one might for tracing."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.service, name)
        if not callable(method):
            return method

        def logged(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return method(*args, **kwargs)

        return logged


class Orchestrator:
    """Drives one task; ``humans`` is what it handed to people."""

    def __init__(self, referee: Referee, task_id: str) -> None:
        self.referee = referee
        self.task_id = task_id
        self.humans: list[str] = []
        self.agent_runs = 0
        referee.start_task(task_id)

    def step(self, strategy: str, tests_pass: bool) -> str:
        """One turn: ``proceed``, ``retry``, ``done``, or why it stopped."""
        if self.humans and self.humans[-1] != "answered":
            return "waiting"
        attempt = self.referee.begin_attempt(self.task_id, strategy)
        if not attempt.proceed:
            return self._stop(str(attempt.outcome))
        self.agent_runs += 1  # the agent works on the strategy here
        gate = self.referee.record_gate(
            self.task_id,
            0 if tests_pass else 1,
            strategy=strategy,
            output="ok" if tests_pass else "== 1 failed ==",
        )
        if gate.outcome in ("complete", "advance"):
            return "done"
        if gate.outcome == "stay":
            self.referee.log_lesson(self.task_id, strategy, "the tests still fail")
            return "retry"
        return self._stop(str(gate.outcome))

    def _stop(self, outcome: str) -> str:
        self.humans.append(outcome)
        return outcome

    def answer(self) -> None:
        """A human lets the agent go on (a hand-off is taken, then returned)."""
        if self.humans and self.humans[-1] == "hand_off":
            self.referee.claim_handoff(self.task_id, actor="ann")
            self.referee.resolve_handoff(
                self.task_id, actor="ann", resolution="return", reason="fixed"
            )
        else:
            self.referee.resume(self.task_id, actor="ann", reason="go on")
        self.humans[-1] = "answered"


turns = st.lists(st.tuples(strategy_texts(), st.booleans()), max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies(), script=turns, answer_humans=st.booleans())
def test_the_loop_follows_the_ladder(
    policy: Policy, script: list[tuple[str, bool]], answer_humans: bool
) -> None:
    service = memory_service(policy)
    try:
        loop = Orchestrator(Referee(service), "feature-42")
        for strategy, tests_pass in script:
            outcome = loop.step(strategy, tests_pass)
            task = service.task("feature-42")
            if outcome == "done":
                assert task.state == "COMPLETED"
                assert task.consecutive_failures == 0
                break
            # The agent is let go on only below every threshold: no human is
            # ever skipped.
            if outcome == "retry":
                limit = min(policy.escalation_threshold, policy.handoff_threshold)
                assert task.consecutive_failures < limit
            if outcome in ("escalate", "pause"):
                assert task.pending_session is not None  # a human is asked
            if outcome == "hand_off":
                queue = [e.payload.task_id for e in service.handoff_queue()]
                assert queue == ["feature-42"]
            if outcome == "waiting":
                assert task.state in ("ESCALATION", "PAUSED", "HAND_OFF")
            if loop.humans and loop.humans[-1] != "answered" and answer_humans:
                loop.answer()
        # The agent never ran unless the referee let the attempt through.
        history = service.history("feature-42")
        attempts = [e for e in history if e.event == "AttemptBegan"]
        assert len(attempts) == loop.agent_runs
    finally:
        service.close()


class OrchestratorMachine(RecoveryMachine):
    """The kit's invariants, through the orchestrator's wrapper."""

    make_service = staticmethod(lambda policy: Referee(memory_service(policy)))


OrchestratorMachine.TestCase.settings = settings(
    max_examples=15,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_the_wrapper_keeps_the_ladder = OrchestratorMachine.TestCase


def test_one_escalation_with_the_plugins_fixture(devs_service: RecoveryService) -> None:
    """The plugin's ``devs_service``: a fresh service on a temporary file."""
    loop = Orchestrator(Referee(devs_service), "t")
    ideas = ["use a regex", "write a parser", "mock the clock"]
    outcomes = [loop.step(idea, tests_pass=False) for idea in ideas]
    assert outcomes == ["retry", "retry", "escalate"]
    assert loop.step("vendor the parser", tests_pass=True) == "waiting"
    loop.answer()
    assert loop.step("vendor the parser", tests_pass=True) == "done"
