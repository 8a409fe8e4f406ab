"""The ``Task`` aggregate: one agent task, its failure ladder and its human sessions.

Each command is two methods (eventsourcing's idiom): a public one that checks the
rules against the state chart and raises before anything changes, and a private
``@event`` method that only assigns state. Replays run the private methods only.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import ClassVar, Literal
from uuid import uuid4

from eventsourcing.domain import datetime_now_with_tzinfo, event
from eventsourcing.utils import register_topic

from devs.domain import blacklist
from devs.domain.chart import FINISHED, TaskState, Trigger, destination
from devs.domain.errors import IllegalTransition, InvalidInput
from devs.domain.gate import GateResult
from devs.domain.model import (
    Aggregate,
    AggregateCreated,
    AggregateSnapshot,
    SnapshotState,
    Value,
)
from devs.domain.policy import Policy
from devs.domain.redaction import error_hash, excerpt, redact

MAX_LESSONS_PER_TASK = 1_000
ERROR_MESSAGE_LIMIT = 2_000
OUTPUT_EXCERPT_LIMIT = 2_000
BLACKLISTED_STRATEGY = "BLACKLISTED_STRATEGY"


class SessionReason(StrEnum):
    """Why a human was asked."""

    MAX_RETRIES = "max_retries"
    BLACKLISTED_STRATEGY = "blacklisted_strategy"
    ENTROPY_LIMIT = "entropy_limit"


class Resolution(StrEnum):
    """How a human resolves a hand-off."""

    RETURN = "return"
    COMPLETE = "complete"
    SKIP = "skip"


class FailureRecord(Value):
    """One failed gate or blocked attempt, redacted."""

    kind: Literal["gate", "blacklisted_strategy"]
    gate: str | None = None
    strategy: str | None = None
    reason: str
    exit_code: int | None = None
    error_message: str = ""
    output_excerpt: str = ""
    error_hash: str
    at: datetime


class HumanSession(Value):
    """A pending request for a human decision."""

    session_id: str
    reason: SessionReason
    opened_at: datetime
    entropy_score: float | None = None


class FailureAnalysisReport(Value):
    """What a human needs to judge an escalation."""

    task_id: str
    failure_count: int
    failed_strategies: tuple[str, ...]
    last_error: str
    last_error_hash: str | None = None


class HandoffPayload(Value):
    """What the human queue receives when the agent is taken off a task."""

    task_id: str
    failure_count: int
    failure_history: tuple[FailureRecord, ...]
    last_error_hash: str | None
    last_error_excerpt: str
    originating_agent: str | None
    last_commit: str | None
    enqueued_at: datetime


class TaskSnapshotState(SnapshotState):
    task_id: str
    run_id: str | None
    agent: str | None
    starting_commit: str | None
    last_commit: str | None
    policy: Policy
    state: TaskState
    consecutive_failures: int
    failures: list[FailureRecord]
    lessons: list[str]
    current_strategy: str | None
    pending_session: HumanSession | None
    handoff: HandoffPayload | None
    claimed_by: str | None


class Task(Aggregate):
    """An agent's task as the referee sees it."""

    TOPIC: ClassVar[str] = "devs:Task"

    class Snapshot(AggregateSnapshot):
        TOPIC: ClassVar[str] = "devs:Task.Snapshot"
        state: TaskSnapshotState

    class Started(AggregateCreated):
        TOPIC: ClassVar[str] = "devs:Task.Started"
        task_id: str
        run_id: str | None
        agent: str | None
        last_commit: str | None
        policy: Policy

    class AttemptBegan(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Task.AttemptBegan"
        strategy: str

    class BlacklistedStrategyAttempted(Aggregate.Event):
        """``task:blacklisted_strategy_attempted``: blocked before any LLM call."""

        TOPIC: ClassVar[str] = "devs:Task.BlacklistedStrategyAttempted"
        failure: FailureRecord
        matched_strategy: str
        consecutive_failures: int

    class GatePassed(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Task.GatePassed"
        gate: str | None
        strategy: str | None

    class GateFailed(Aggregate.Event):
        """``GATE_FAILED``: the gate's name, reason, exit code and the new count."""

        TOPIC: ClassVar[str] = "devs:Task.GateFailed"
        failure: FailureRecord
        consecutive_failures: int

    class Escalated(Aggregate.Event):
        """``ESCALATION_TRIGGERED``: a human is asked (``USER_ESCALATION``)."""

        TOPIC: ClassVar[str] = "devs:Task.Escalated"
        session: HumanSession
        report: FailureAnalysisReport

    class HandedOff(Aggregate.Event):
        """``hand_off_required``: the task goes to the human queue."""

        TOPIC: ClassVar[str] = "devs:Task.HandedOff"
        payload: HandoffPayload

    class Paused(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Task.Paused"
        session: HumanSession

    class EntropyMeasured(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Task.EntropyMeasured"
        score: float
        threshold: float

    class LessonLogged(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Task.LessonLogged"
        strategy: str
        rca_summary: str

    class Resumed(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Task.Resumed"
        actor: str
        reason: str
        session_id: str | None

    class Rewound(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Task.Rewound"
        actor: str
        reason: str
        to_commit: str | None
        session_id: str | None

    class Skipped(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Task.Skipped"
        actor: str
        reason: str
        session_id: str | None

    class HandoffClaimed(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Task.HandoffClaimed"
        actor: str

    class HandoffResolved(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Task.HandoffResolved"
        actor: str
        reason: str
        resolution: Resolution

    @staticmethod
    def create_id(task_id: str) -> str:
        return f"task:{task_id}"

    @event(Started)
    def __init__(
        self,
        task_id: str,
        run_id: str | None,
        agent: str | None,
        last_commit: str | None,
        policy: Policy,
    ) -> None:
        self.task_id = task_id
        self.run_id = run_id
        self.agent = agent
        self.starting_commit = last_commit
        self.last_commit = last_commit
        self.policy = policy
        self.state = TaskState.RUNNING
        self.consecutive_failures = 0
        self.failures: list[FailureRecord] = []
        self.lessons: list[str] = []
        self.current_strategy: str | None = None
        self.pending_session: HumanSession | None = None
        self.handoff: HandoffPayload | None = None
        self.claimed_by: str | None = None

    # ----------------------------------------------------------------- derived

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED

    @property
    def pending_session_id(self) -> str | None:
        return self.pending_session.session_id if self.pending_session else None

    @property
    def failed_strategies(self) -> tuple[str, ...]:
        """Distinct strategies of the failures since the last pass, oldest first."""
        seen: dict[str, None] = {}
        for failure in self.failures:
            if failure.strategy:
                seen.setdefault(failure.strategy, None)
        return tuple(seen)

    def report(self) -> FailureAnalysisReport:
        last = self.failures[-1] if self.failures else None
        return FailureAnalysisReport(
            task_id=self.task_id,
            failure_count=self.consecutive_failures,
            failed_strategies=self.failed_strategies,
            last_error=(last.error_message or last.output_excerpt) if last else "",
            last_error_hash=last.error_hash if last else None,
        )

    def blacklist_match(self, candidate: str) -> str | None:
        return blacklist.find_match(candidate, self.lessons)

    # ---------------------------------------------------------------- commands

    def begin_attempt(self, strategy: str) -> str | None:
        """Record an attempt, or block it when it repeats a failed strategy.

        Returns the lesson's strategy that blocked it, or ``None``.
        """
        destination(Trigger.ATTEMPT, self.state)
        clean = redact(strategy)
        matched = self.blacklist_match(clean)
        if matched is None:
            self._begin_attempt(strategy=clean)
            return None
        message = f"strategy repeats a failed strategy: {excerpt(matched, 200)}"
        failure = FailureRecord(
            kind="blacklisted_strategy",
            strategy=clean,
            reason=BLACKLISTED_STRATEGY,
            error_message=message,
            error_hash=error_hash(f"{BLACKLISTED_STRATEGY}\n{matched}"),
            at=datetime_now_with_tzinfo(),
        )
        self._block_attempt(
            failure=failure,
            matched_strategy=matched,
            consecutive_failures=self.consecutive_failures + 1,
        )
        self._climb_ladder(blocked=True)
        return matched

    def record_gate(
        self,
        result: GateResult,
        *,
        gate: str | None,
        strategy: str | None,
        error: str | None,
        output: str | None,
    ) -> None:
        """Record a gate result; a failure climbs the ladder, a pass completes."""
        if result.passed:
            destination(Trigger.PASS_GATE, self.state)
            clean_strategy = redact(strategy) if strategy else self.current_strategy
            self._pass_gate(gate=gate, strategy=clean_strategy)
            return
        destination(Trigger.FAIL_GATE, self.state)
        clean_output = redact(output or "")
        clean_error = redact(error or "")
        if not clean_error:
            clean_error = _describe_failure(result)
        failure = FailureRecord(
            kind="gate",
            gate=gate,
            strategy=redact(strategy) if strategy else self.current_strategy,
            reason=str(result.reason),
            exit_code=result.exit_code,
            error_message=excerpt(clean_error, ERROR_MESSAGE_LIMIT),
            output_excerpt=excerpt(clean_output, OUTPUT_EXCERPT_LIMIT),
            error_hash=error_hash(clean_output or clean_error),
            at=datetime_now_with_tzinfo(),
        )
        self._fail_gate(
            failure=failure, consecutive_failures=self.consecutive_failures + 1
        )
        self._climb_ladder(blocked=False)

    def _climb_ladder(self, *, blocked: bool) -> None:
        count = self.consecutive_failures
        if count >= self.policy.handoff_threshold:
            self._hand_off(payload=self._handoff_payload())
        elif count >= self.policy.escalation_threshold:
            self._escalate(
                session=self._new_session(SessionReason.MAX_RETRIES),
                report=self.report(),
            )
        elif blocked:
            self._pause(session=self._new_session(SessionReason.BLACKLISTED_STRATEGY))

    def report_entropy(self, score: float) -> HumanSession | None:
        """Pause for a human when ``score`` reaches the threshold.

        While a human session is pending, a high score returns that session and
        records nothing; a low score records nothing either.
        """
        threshold = self.policy.hitl_entropy_threshold
        if self.pending_session is not None:
            return self.pending_session if score >= threshold else None
        destination(Trigger.MEASURE_ENTROPY, self.state)
        if score < threshold:
            self._measure_entropy(score=score, threshold=threshold)
            return None
        session = self._new_session(SessionReason.ENTROPY_LIMIT, entropy_score=score)
        self._pause(session=session)
        return session

    def log_lesson(self, strategy: str, rca_summary: str) -> None:
        destination(Trigger.LOG_LESSON, self.state)
        clean = redact(strategy)
        if clean not in self.lessons and len(self.lessons) >= MAX_LESSONS_PER_TASK:
            msg = (
                f"task {self.task_id!r} already has {MAX_LESSONS_PER_TASK:,} lessons;"
                " no more can be logged"
            )
            raise InvalidInput(msg)
        self._log_lesson(strategy=clean, rca_summary=redact(rca_summary))

    def resume(self, *, actor: str, reason: str) -> None:
        destination(Trigger.RESUME, self.state)
        self._resume(
            actor=actor, reason=redact(reason), session_id=self.pending_session_id
        )

    def rewind(self, *, actor: str, reason: str, to_commit: str | None) -> None:
        destination(Trigger.REWIND, self.state)
        self._rewind(
            actor=actor,
            reason=redact(reason),
            to_commit=to_commit if to_commit is not None else self.starting_commit,
            session_id=self.pending_session_id,
        )

    def skip(self, *, actor: str, reason: str) -> None:
        destination(Trigger.SKIP, self.state)
        self._skip(
            actor=actor, reason=redact(reason), session_id=self.pending_session_id
        )

    def claim_handoff(self, *, actor: str) -> None:
        destination(Trigger.CLAIM, self.state)
        if self.claimed_by is not None:
            msg = (
                f"the hand-off of task {self.task_id!r} is already claimed by "
                f"{self.claimed_by!r}"
            )
            raise IllegalTransition(msg, state=self.state)
        self._claim(actor=actor)

    def resolve_handoff(
        self, *, actor: str, resolution: Resolution, reason: str
    ) -> None:
        destination(_RESOLUTION_TRIGGERS[resolution], self.state)
        if self.claimed_by is None:
            msg = (
                f"the hand-off of task {self.task_id!r} is not claimed; "
                "claim it before resolving it"
            )
            raise IllegalTransition(msg, state=self.state)
        self._resolve(actor=actor, reason=redact(reason), resolution=resolution)

    # -------------------------------------------------------------- internals

    @staticmethod
    def _new_session(
        reason: SessionReason, entropy_score: float | None = None
    ) -> HumanSession:
        return HumanSession(
            session_id=str(uuid4()),
            reason=reason,
            opened_at=datetime_now_with_tzinfo(),
            entropy_score=entropy_score,
        )

    def _handoff_payload(self) -> HandoffPayload:
        last = self.failures[-1] if self.failures else None
        return HandoffPayload(
            task_id=self.task_id,
            failure_count=self.consecutive_failures,
            failure_history=tuple(self.failures),
            last_error_hash=last.error_hash if last else None,
            last_error_excerpt=(
                (last.output_excerpt or last.error_message) if last else ""
            ),
            originating_agent=self.agent,
            last_commit=self.last_commit,
            enqueued_at=datetime_now_with_tzinfo(),
        )

    def _record_failure(
        self, failure: FailureRecord, consecutive_failures: int
    ) -> None:
        self.consecutive_failures = consecutive_failures
        self.failures.append(failure)
        del self.failures[: -self.policy.failure_history_cap]

    # ------------------------------------------------------- event appliers

    @event(AttemptBegan)
    def _begin_attempt(self, strategy: str) -> None:
        self.state = destination(Trigger.ATTEMPT, self.state)
        self.current_strategy = strategy

    @event(BlacklistedStrategyAttempted)
    def _block_attempt(
        self, failure: FailureRecord, matched_strategy: str, consecutive_failures: int
    ) -> None:
        self.state = destination(Trigger.BLOCK_ATTEMPT, self.state)
        self._record_failure(failure, consecutive_failures)

    @event(GatePassed)
    def _pass_gate(self, gate: str | None, strategy: str | None) -> None:
        self.state = destination(Trigger.PASS_GATE, self.state)
        self.consecutive_failures = 0
        self.failures = []
        self.current_strategy = None

    @event(GateFailed)
    def _fail_gate(self, failure: FailureRecord, consecutive_failures: int) -> None:
        self.state = destination(Trigger.FAIL_GATE, self.state)
        self._record_failure(failure, consecutive_failures)

    @event(Escalated)
    def _escalate(self, session: HumanSession, report: FailureAnalysisReport) -> None:
        self.state = destination(Trigger.ESCALATE, self.state)
        self.pending_session = session

    @event(HandedOff)
    def _hand_off(self, payload: HandoffPayload) -> None:
        self.state = destination(Trigger.HAND_OFF, self.state)
        self.handoff = payload
        self.claimed_by = None

    @event(Paused)
    def _pause(self, session: HumanSession) -> None:
        self.state = destination(Trigger.PAUSE, self.state)
        self.pending_session = session

    @event(EntropyMeasured)
    def _measure_entropy(self, score: float, threshold: float) -> None:
        self.state = destination(Trigger.MEASURE_ENTROPY, self.state)

    @event(LessonLogged)
    def _log_lesson(self, strategy: str, rca_summary: str) -> None:
        self.state = destination(Trigger.LOG_LESSON, self.state)
        if strategy not in self.lessons:
            self.lessons.append(strategy)

    @event(Resumed)
    def _resume(self, actor: str, reason: str, session_id: str | None) -> None:
        self.state = destination(Trigger.RESUME, self.state)
        self.pending_session = None

    @event(Rewound)
    def _rewind(
        self, actor: str, reason: str, to_commit: str | None, session_id: str | None
    ) -> None:
        self.state = destination(Trigger.REWIND, self.state)
        self.pending_session = None
        self.handoff = None
        self.claimed_by = None
        self.current_strategy = None
        if to_commit is not None:
            self.last_commit = to_commit

    @event(Skipped)
    def _skip(self, actor: str, reason: str, session_id: str | None) -> None:
        self.state = destination(Trigger.SKIP, self.state)
        self.pending_session = None
        self.handoff = None
        self.claimed_by = None

    @event(HandoffClaimed)
    def _claim(self, actor: str) -> None:
        self.state = destination(Trigger.CLAIM, self.state)
        self.claimed_by = actor

    @event(HandoffResolved)
    def _resolve(self, actor: str, reason: str, resolution: Resolution) -> None:
        self.state = destination(_RESOLUTION_TRIGGERS[resolution], self.state)
        self.handoff = None
        self.claimed_by = None


_RESOLUTION_TRIGGERS = {
    Resolution.RETURN: Trigger.RETURN_TO_AGENT,
    Resolution.COMPLETE: Trigger.COMPLETE_BY_HUMAN,
    Resolution.SKIP: Trigger.SKIP_BY_HUMAN,
}


_EVENT_TRIGGERS: dict[type[Aggregate.Event], Trigger] = {
    Task.AttemptBegan: Trigger.ATTEMPT,
    Task.BlacklistedStrategyAttempted: Trigger.BLOCK_ATTEMPT,
    Task.GatePassed: Trigger.PASS_GATE,
    Task.GateFailed: Trigger.FAIL_GATE,
    Task.Escalated: Trigger.ESCALATE,
    Task.HandedOff: Trigger.HAND_OFF,
    Task.Paused: Trigger.PAUSE,
    Task.EntropyMeasured: Trigger.MEASURE_ENTROPY,
    Task.LessonLogged: Trigger.LOG_LESSON,
    Task.Resumed: Trigger.RESUME,
    Task.Rewound: Trigger.REWIND,
    Task.Skipped: Trigger.SKIP,
    Task.HandoffClaimed: Trigger.CLAIM,
}


def state_after(domain_event: Aggregate.Event, state: str) -> TaskState:
    """The state a task is in after ``domain_event``, from ``state`` before it.

    Read models fold events with this, through the same chart the aggregate uses.
    """
    if isinstance(domain_event, Task.Started):
        return TaskState.RUNNING
    if isinstance(domain_event, Task.HandoffResolved):
        return destination(_RESOLUTION_TRIGGERS[domain_event.resolution], state)
    for event_class, trigger in _EVENT_TRIGGERS.items():
        if isinstance(domain_event, event_class):
            return destination(trigger, state)
    msg = f"not a task event: {type(domain_event).__name__}"
    raise TypeError(msg)


def task_id_of(originator_id: str) -> str:
    """The task id inside a task aggregate's id (``task:<id>``)."""
    return originator_id.removeprefix("task:")


def _describe_failure(result: GateResult) -> str:
    if result.exit_code is None:
        return "process was killed or timed out"
    return f"process exited with code {result.exit_code}"


register_topic(Task.Snapshot.TOPIC, Task.Snapshot)
