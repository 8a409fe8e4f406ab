"""The ``Task`` aggregate: one agent task, its failure ladder and its human sessions.

Each command is two methods (eventsourcing's idiom): a public one that checks the
rules against the state chart and raises before anything changes, and a private
``@event`` method that only assigns state. Replays run the private methods only.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, ClassVar, Literal
from uuid import uuid4

from eventsourcing.domain import datetime_now_with_tzinfo, event
from eventsourcing.utils import register_topic

from devs.domain import blacklist, chain
from devs.domain.chart import UNFINISHED, WORKING, TaskState, Trigger, destination
from devs.domain.errors import (
    Claimed,
    IllegalTransition,
    InvalidInput,
    OverBudget,
    StaleAnswer,
)
from devs.domain.gate import GateResult
from devs.domain.model import (
    Aggregate,
    AggregateCreated,
    AggregateSnapshot,
    SnapshotState,
    Value,
)
from devs.domain.names import (
    DEADLINE_ACTOR,
    HUMAN_DEADLINE,
    HumanAction,
    Resolution,
    SessionReason,
)
from devs.domain.output import clean as clean_text
from devs.domain.output import error_line, keep
from devs.domain.policy import MAX_HUMAN_DEADLINE, Policy, StuckDetection
from devs.domain.redaction import error_hash, excerpt, redact
from devs.domain.spend import Spend, Usage
from devs.domain.stuck import WINDOW as STUCK_WINDOW
from devs.domain.stuck import StuckAssessment, assess, failing_tests
from devs.domain.values import ERROR_MAX, OUTPUT_MAX, cut

MAX_LESSONS_PER_TASK = 1_000
ERROR_MESSAGE_LIMIT = 2_000
OUTPUT_EXCERPT_LIMIT = 4_000
"""What a failure keeps of its output: the head and the tail
(:func:`devs.domain.output.keep`)."""
FAILING_TESTS_READ = 2_000
"""How much of the output's end the failing-test count reads."""
BLACKLISTED_STRATEGY = "BLACKLISTED_STRATEGY"


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
    failing_tests: int | None = None
    """How many tests the output says failed (stuck detection reads it)."""
    error_line: str | None = None
    """The line that says what went wrong (:func:`devs.domain.output.error_line`
    of the whole output, then the error), read before the output was cut;
    ``None`` in a failure recorded before this field existed."""

    @property
    def last_error(self) -> str:
        """The one "last error" every surface shows: :attr:`error_line`, or,
        for a failure recorded before it existed, the same rule applied to
        what was kept."""
        if self.error_line is not None:
            return self.error_line
        return error_line(
            self.output_excerpt, self.error_message, exit_code=self.exit_code
        )


EntropySource = Literal["reported", "derived"]
"""Who gave an entropy score: the orchestrator (``report_entropy``), or the
referee's stuck detection in ``gate`` mode."""


class HumanSession(Value):
    """A pending request for a human decision."""

    session_id: str
    reason: SessionReason
    opened_at: datetime
    entropy_score: float | None = None
    entropy_source: EntropySource | None = None
    deadline_at: datetime | None = None
    """When the task is handed off unless a human answers first: ``opened_at``
    plus the policy's ``human_deadline`` (``None``: no deadline)."""
    spend: Spend | None = None
    """A budget stop's spend and budgets (reason ``budget_exhausted``)."""


class FailureAnalysisReport(Value):
    """What a human needs to judge an escalation."""

    task_id: str
    failure_count: int
    failed_strategies: tuple[str, ...]
    last_error: str
    last_error_hash: str | None = None
    stuck: StuckAssessment | None = None


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
    stuck: StuckAssessment | None = None
    reason: str | None = None
    """Why it was handed off: ``None`` when the ladder did (too many
    failures), ``human_deadline`` when nobody answered its human in time."""

    @property
    def last_error(self) -> str:
        """The last failure's :attr:`FailureRecord.last_error`."""
        if self.failure_history:
            return self.failure_history[-1].last_error
        return error_line(self.last_error_excerpt)


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
    stuck: StuckAssessment | None = None
    reminded_session_id: str | None = None
    links: dict[str, str] | None = None
    usage: Usage | None = None
    usage_ids: set[str] | None = None
    budget_usd: float | None = None
    budget_tokens: int | None = None
    warned_at: tuple[float | None, int | None] | None = None
    answered_at: int | None = None


class TaskEvent(Aggregate.Event):
    """A task event: the chart trigger it fires decides the state after it.

    This is the one place where events map to triggers: ``apply`` (replay) and
    the read models (``state_after``) both go through ``trigger``.
    """

    trigger: ClassVar[Trigger]
    quiet: ClassVar[bool] = False
    """It changes nothing a person answers (a usage, a budget's warning): an
    answer given for the version before it still stands."""
    chain_prev: str | None = None
    """The SHA-256 of the task's previous event (:mod:`devs.domain.chain`);
    ``None`` in a task written before the chain existed."""

    def state_after(self, state: str) -> TaskState:
        """The task's state after this event, from ``state`` before it."""
        return destination(self.trigger, state)

    def apply(self, aggregate: Any) -> None:
        aggregate.state = self.state_after(aggregate.state)
        aggregate._chain_event = self
        if not self.quiet:
            aggregate.answered_at = self.originator_version


class Task(Aggregate):
    """An agent's task as the referee sees it."""

    TOPIC: ClassVar[str] = "devs:Task"
    DERIVED: ClassVar[tuple[str, ...]] = ("_chain_event",)
    _chained: bool
    """Whether the task's events carry links (tasks started before the
    chain existed do not)."""
    _chain_head: str | None
    """The hash of the last event, once computed."""
    _chain_event: Any
    """The last event, until its hash is computed."""

    class Snapshot(AggregateSnapshot):
        TOPIC: ClassVar[str] = "devs:Task.Snapshot"
        state: TaskSnapshotState

        @classmethod
        def take(cls, aggregate: Any) -> Task.Snapshot:
            aggregate.chain_head()  # the snapshot keeps the head, not the event
            snapshot: Task.Snapshot = super().take(aggregate)
            return snapshot

    class Started(AggregateCreated):
        TOPIC: ClassVar[str] = "devs:Task.Started"
        task_id: str
        run_id: str | None
        agent: str | None
        last_commit: str | None
        policy: Policy
        chain_prev: str | None = None
        """The task's id (``task:<id>``): the chain's first link."""
        links: dict[str, str] | None = None
        """What the agent's side knows of the task (its session's transcript,
        its branch, a pull request), by name; ``None``: nothing given."""

        def state_after(self, state: str) -> TaskState:
            """Every task starts RUNNING."""
            return TaskState.RUNNING

        def apply(self, aggregate: Any) -> None:
            aggregate._chained = self.chain_prev is not None
            aggregate._chain_head = None
            aggregate._chain_event = self

    class AttemptBegan(TaskEvent):
        TOPIC: ClassVar[str] = "devs:Task.AttemptBegan"
        trigger = Trigger.ATTEMPT
        strategy: str

    class BlacklistedStrategyAttempted(TaskEvent):
        """``task:blacklisted_strategy_attempted``: blocked before any LLM call."""

        TOPIC: ClassVar[str] = "devs:Task.BlacklistedStrategyAttempted"
        trigger = Trigger.BLOCK_ATTEMPT
        failure: FailureRecord
        matched_strategy: str
        consecutive_failures: int
        stuck: StuckAssessment | None = None

    class GatePassed(TaskEvent):
        TOPIC: ClassVar[str] = "devs:Task.GatePassed"
        trigger = Trigger.PASS_GATE
        gate: str | None
        strategy: str | None

    class GateFailed(TaskEvent):
        """``GATE_FAILED``: the gate's name, reason, exit code and the new count."""

        TOPIC: ClassVar[str] = "devs:Task.GateFailed"
        trigger = Trigger.FAIL_GATE
        failure: FailureRecord
        consecutive_failures: int
        stuck: StuckAssessment | None = None

    class Escalated(TaskEvent):
        """``ESCALATION_TRIGGERED``: a human is asked (``USER_ESCALATION``)."""

        TOPIC: ClassVar[str] = "devs:Task.Escalated"
        trigger = Trigger.ESCALATE
        session: HumanSession
        report: FailureAnalysisReport

    class HandedOff(TaskEvent):
        """``hand_off_required``: the task goes to the human queue."""

        TOPIC: ClassVar[str] = "devs:Task.HandedOff"
        trigger = Trigger.HAND_OFF
        payload: HandoffPayload

    class Paused(TaskEvent):
        TOPIC: ClassVar[str] = "devs:Task.Paused"
        trigger = Trigger.PAUSE
        session: HumanSession

    class EntropyMeasured(TaskEvent):
        TOPIC: ClassVar[str] = "devs:Task.EntropyMeasured"
        trigger = Trigger.MEASURE_ENTROPY
        score: float
        threshold: float

    class LessonLogged(TaskEvent):
        TOPIC: ClassVar[str] = "devs:Task.LessonLogged"
        trigger = Trigger.LOG_LESSON
        strategy: str
        rca_summary: str

    class Resumed(TaskEvent):
        TOPIC: ClassVar[str] = "devs:Task.Resumed"
        trigger = Trigger.RESUME
        actor: str
        reason: str
        session_id: str | None

    class Rewound(TaskEvent):
        TOPIC: ClassVar[str] = "devs:Task.Rewound"
        trigger = Trigger.REWIND
        actor: str
        reason: str
        to_commit: str | None
        session_id: str | None

    class Skipped(TaskEvent):
        TOPIC: ClassVar[str] = "devs:Task.Skipped"
        trigger = Trigger.SKIP
        actor: str
        reason: str
        session_id: str | None

    class DeadlineExpired(TaskEvent):
        """Nobody answered the pending session by its deadline: the task is
        handed off (fails closed), never resumed. A claim on the session
        carries over to the hand-off."""

        TOPIC: ClassVar[str] = "devs:Task.DeadlineExpired"
        trigger = Trigger.EXPIRE_DEADLINE
        session_id: str
        deadline_at: datetime
        actor: str
        reason: str
        payload: HandoffPayload
        claimed_by: str | None = None
        """Who had claimed the session, and now holds the hand-off."""

    class DeadlineReminded(TaskEvent):
        """The pending session's deadline is near: a reminder went out."""

        TOPIC: ClassVar[str] = "devs:Task.DeadlineReminded"
        trigger = Trigger.REMIND
        session_id: str
        deadline_at: datetime
        waiting_in: TaskState
        """The state the task waits in, which a reminder leaves as it is (so
        its message names it without a fold of the task)."""

    class HandoffClaimed(TaskEvent):
        """Someone claimed a stop ("I'm on it"): an escalation, a pause or a
        hand-off (named for the hand-offs, which alone could be claimed when
        the event was first recorded)."""

        TOPIC: ClassVar[str] = "devs:Task.HandoffClaimed"
        trigger = Trigger.CLAIM
        actor: str
        waiting_in: TaskState = TaskState.HAND_OFF
        """The state the claimed task waits in (a claim leaves it there)."""

    class ClaimReleased(TaskEvent):
        """The claimer let go of a stop: anyone may answer it again."""

        TOPIC: ClassVar[str] = "devs:Task.ClaimReleased"
        trigger = Trigger.RELEASE
        actor: str
        waiting_in: TaskState

    class ClaimTakenOver(TaskEvent):
        """Someone took a claimed stop over from its claimer."""

        TOPIC: ClassVar[str] = "devs:Task.ClaimTakenOver"
        trigger = Trigger.TAKE_OVER
        actor: str
        previous: str
        """Who held the claim."""
        reason: str
        waiting_in: TaskState

    class UsageRecorded(TaskEvent):
        """A model call's tokens, and its cost as priced when recorded
        (``None``: the model had no price; its tokens still count)."""

        TOPIC: ClassVar[str] = "devs:Task.UsageRecorded"
        trigger = Trigger.RECORD_USAGE
        quiet = True
        model: str
        input_tokens: int
        output_tokens: int
        cache_read_tokens: int = 0
        cache_creation_tokens: int = 0
        cost_usd: float | None = None
        usage_id: str | None = None

    class BudgetWarned(TaskEvent):
        """The task has spent the policy's warning fraction of a budget."""

        TOPIC: ClassVar[str] = "devs:Task.BudgetWarned"
        trigger = Trigger.WARN_BUDGET
        quiet = True
        spend: Spend
        warn: float
        """The fraction it crossed (the policy's ``budget_warn``)."""
        waiting_in: TaskState
        """The state the task is in, which a warning leaves as it is (so its
        message names it without a fold of the task)."""

    class BudgetRaised(TaskEvent):
        """A person set the task's budget (money, tokens or both) above what
        it spent."""

        TOPIC: ClassVar[str] = "devs:Task.BudgetRaised"
        trigger = Trigger.RAISE_BUDGET
        actor: str
        reason: str
        budget_usd: float | None = None
        budget_tokens: int | None = None

    class HandoffResolved(TaskEvent):
        TOPIC: ClassVar[str] = "devs:Task.HandoffResolved"
        actor: str
        reason: str
        resolution: Resolution

        def state_after(self, state: str) -> TaskState:
            return destination(RESOLUTION_TRIGGERS[self.resolution], state)

    @staticmethod
    def create_id(task_id: str) -> str:
        return f"task:{task_id}"

    @classmethod
    def _create(
        cls, event_class: type[Any], *, id: str | None = None, **kwargs: Any
    ) -> Task:
        """The ``Started`` event opens the hash chain with the task's id."""
        kwargs.setdefault("chain_prev", cls.create_id(kwargs["task_id"]))
        task: Task = super()._create(event_class, id=id, **kwargs)
        return task

    def trigger_event(self, event_class: type[Any], **kwargs: Any) -> None:
        """Every event after ``Started`` links to the one before it."""
        kwargs["chain_prev"] = self.chain_head()
        super().trigger_event(event_class, **kwargs)

    def chain_head(self) -> str | None:
        """The SHA-256 of the task's last event (``None``: an unchained task).

        Computed when first asked (the next event needs it), not on replay.
        """
        if not self._chained:
            return None
        if self._chain_event is not None:
            self._chain_head = chain.event_hash(self._chain_event)
            self._chain_event = None
        return self._chain_head

    def derive(self) -> None:
        """After a snapshot: the chain head it kept (none in an old one)."""
        self._chain_event = None
        self.__dict__.setdefault("_chain_head", None)
        self.__dict__.setdefault("_chained", self._chain_head is not None)
        self.__dict__.setdefault("stuck", None)
        self.__dict__.setdefault("reminded_session_id", None)
        for name in (
            "usage",
            "usage_ids",
            "budget_usd",
            "budget_tokens",
            "warned_at",
            "answered_at",
        ):
            self.__dict__.setdefault(name, None)

    def __eq__(self, other: object) -> bool:
        """Equal state and chain head (however far each has computed it)."""
        if type(self) is not type(other):
            return False
        assert isinstance(other, Task)
        skip = ("_chain_event", "_chain_head")
        mine = {k: v for k, v in self.__dict__.items() if k not in skip}
        theirs = {k: v for k, v in other.__dict__.items() if k not in skip}
        return mine == theirs and self.chain_head() == other.chain_head()

    __hash__ = None  # type: ignore[assignment]

    @event(Started)
    def __init__(
        self,
        task_id: str,
        run_id: str | None,
        agent: str | None,
        last_commit: str | None,
        policy: Policy,
        links: dict[str, str] | None = None,
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
        self.stuck: StuckAssessment | None = None
        self.reminded_session_id: str | None = None
        self.links = dict(links) if links else None
        self.usage: Usage | None = None
        self.usage_ids: set[str] | None = None
        self.budget_usd: float | None = None
        self.budget_tokens: int | None = None
        self.warned_at: tuple[float | None, int | None] | None = None
        self.answered_at: int | None = None
        """The version of the last event a person's answer must have seen
        (``None``: the latest); the quiet ones after it change nothing."""

    # ----------------------------------------------------------------- derived

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

    def spend(self) -> Spend:
        """What the task spent, and its budgets (a person's raise, else the
        policy's)."""
        budget_usd = self.budget_usd
        if budget_usd is None:
            budget_usd = self.policy.task_budget_usd
        budget_tokens = self.budget_tokens
        if budget_tokens is None:
            budget_tokens = self.policy.task_budget_tokens
        return Spend.counted(self.usage or Usage(), budget_usd, budget_tokens)

    def report(self) -> FailureAnalysisReport:
        last = self.failures[-1] if self.failures else None
        return FailureAnalysisReport(
            task_id=self.task_id,
            failure_count=self.consecutive_failures,
            failed_strategies=self.failed_strategies,
            last_error=last.last_error if last else "",
            last_error_hash=last.error_hash if last else None,
            stuck=self.stuck,
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
            stuck=self._assess(failure),
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
        """Record a gate result; a failure climbs the ladder, a pass completes.

        A failure's ``error`` and ``output`` may be of any length: each is
        redacted whole, then cut to ``ERROR_MAX`` / ``OUTPUT_MAX`` characters
        (:func:`~devs.domain.values.cut`, which says so at its end), and the
        end of that is kept in the record.
        """
        # The events are triggered directly, not by calling the @event methods
        # (_pass_gate, _fail_gate), which apply them all the same: the
        # decorator's binding of arguments costs about 4 us a call, and this is
        # the command every decision goes through.
        gate = redact(gate) if gate else gate
        if result.passed:
            destination(Trigger.PASS_GATE, self.state)
            clean_strategy = redact(strategy) if strategy else self.current_strategy
            self.trigger_event(Task.GatePassed, gate=gate, strategy=clean_strategy)
            return
        destination(Trigger.FAIL_GATE, self.state)
        # Redacted whole, then cut to their limits (saying so): cut first, a
        # secret across the cut point would be half kept, too short to be
        # recognised. The hash and the failing-test count read the whole text.
        clean_output = redact(clean_text(output)) if output else ""
        clean_error = redact(clean_text(error)) if error else ""
        if not clean_error:
            clean_error = _describe_failure(result)
        # The runner's error line; else the caller's own error's last line,
        # else the output's.
        line = (
            error_line(clean_error, clean_output)
            if error
            else error_line(clean_output, clean_error)
        )
        kept_error = _kept(clean_error, ERROR_MAX, ERROR_MESSAGE_LIMIT)
        kept_output = _kept(clean_output, OUTPUT_MAX, OUTPUT_EXCERPT_LIMIT)
        failure = FailureRecord.of(
            {
                "kind": "gate",
                "gate": gate,
                "strategy": redact(strategy) if strategy else self.current_strategy,
                "reason": str(result.reason),
                "exit_code": result.exit_code,
                "error_message": kept_error,
                "output_excerpt": kept_output,
                "error_hash": error_hash(clean_output or clean_error),
                "at": datetime_now_with_tzinfo(),
                "failing_tests": failing_tests(clean_output[-FAILING_TESTS_READ:])
                if clean_output
                else None,
                "error_line": line,
            }
        )
        self._fail(failure)  # the chart allowed it above

    def fail(self, failure: FailureRecord) -> None:
        """Record a failed gate (already judged and redacted) and climb the ladder.

        ``record_gate`` builds the record; a replay (:mod:`devs.domain.replay`)
        hands in the one it read, so it decides on the very same failure.
        """
        destination(Trigger.FAIL_GATE, self.state)
        self._fail(failure)

    def _fail(self, failure: FailureRecord) -> None:
        """:meth:`fail`, once the chart has allowed a failed gate."""
        self.trigger_event(
            Task.GateFailed,
            failure=failure,
            consecutive_failures=self.consecutive_failures + 1,
            stuck=self._assess(failure),
        )
        self._climb_ladder(blocked=False)

    def _assess(self, failure: FailureRecord) -> StuckAssessment | None:
        """The stuck score with ``failure`` as the newest (``None`` when off)."""
        if self.policy.stuck_detection is StuckDetection.OFF:
            return None
        return assess([*self.failures[-(STUCK_WINDOW - 1) :], failure])

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
        self._stuck_gate()

    def _stuck_gate(self) -> None:
        """In ``gate`` mode, a stuck score at or above the entropy threshold
        pauses the task as a reported entropy score would (source ``derived``),
        unless the ladder has already stopped it."""
        score = self.stuck.score if self.stuck is not None else None
        if (
            score is None
            or self.policy.stuck_detection is not StuckDetection.GATE
            or score < self.policy.hitl_entropy_threshold
            or self.pending_session is not None
            or self.state not in WORKING
        ):
            return
        self._pause(
            session=self._new_session(
                SessionReason.ENTROPY_LIMIT, entropy_score=score, source="derived"
            )
        )

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
        session = self._new_session(
            SessionReason.ENTROPY_LIMIT, entropy_score=score, source="reported"
        )
        self._pause(session=session)
        return session

    def record_usage(
        self,
        *,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        cache_creation_tokens: int = 0,
        cost_usd: float | None,
        usage_id: str | None = None,
    ) -> bool:
        """Count a model call's tokens and cost (already priced: ``None`` is
        an unknown cost); whether it was recorded (a ``usage_id`` recorded
        before is not, again). Past the warning fraction of a budget, a
        warning is recorded once per budget; at or over a budget, a working
        task pauses for a human (reason ``budget_exhausted``)."""
        destination(Trigger.RECORD_USAGE, self.state)
        if usage_id is not None and self.usage_ids and usage_id in self.usage_ids:
            return False
        self._record_usage(
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_creation_tokens=cache_creation_tokens,
            cost_usd=cost_usd,
            usage_id=usage_id,
        )
        self._judge_spend()
        return True

    def _judge_spend(self) -> None:
        """After a usage: pause a working task over its budget; else warn
        once per budget past the warning fraction."""
        spend = self.spend()
        if spend.over:  # stopped for it now, or waiting, or done: no warning
            if self.state in WORKING and self.pending_session is None:
                self._pause(
                    session=self._new_session(
                        SessionReason.BUDGET_EXHAUSTED, spend=spend
                    )
                )
            return
        budgets = (spend.budget_usd, spend.budget_tokens)
        warn = self.policy.warn_at
        if (
            spend.used >= warn
            and self.warned_at != budgets
            and self.state in UNFINISHED
        ):
            self._warn_budget(spend=spend, warn=warn, waiting_in=self.state)

    def raise_budget(
        self,
        *,
        usd: float | None,
        tokens: int | None,
        actor: str,
        reason: str,
        if_version: int | None = None,
        as_recorded: bool = False,
    ) -> None:
        """A person sets the task's budget to ``usd`` and/or ``tokens``, each
        above what the task has spent of it; refused (nothing written) if
        neither is given, one is not above the spend, the task moved past
        ``if_version``, or someone else claimed its stop."""
        self._answering(if_version)
        destination(Trigger.RAISE_BUDGET, self.state)
        self._unclaimed(redact(actor), as_recorded)
        if usd is None and tokens is None:
            msg = "raise_budget needs usd, tokens or both: the budget to set"
            raise InvalidInput(msg, field="usd")
        spent = self.spend()
        if usd is not None and usd <= spent.spent_usd:
            msg = (
                f"usd {usd:g} is not above what task {self.task_id!r} has spent "
                f"(USD {spent.spent_usd:.6g}): set a budget above it"
            )
            raise InvalidInput(msg, field="usd")
        if tokens is not None and tokens <= spent.tokens:
            msg = (
                f"tokens {tokens:,} is not above what task {self.task_id!r} has "
                f"used ({spent.tokens:,} tokens): set a budget above it"
            )
            raise InvalidInput(msg, field="tokens")
        self._raise_budget(
            actor=redact(actor),
            reason=redact(reason),
            budget_usd=usd,
            budget_tokens=tokens,
        )

    def stop_for_run_budget(self, spend: Spend) -> bool:
        """The task's run spent its budget (``spend``, the run's): a working
        task with no stop pending pauses for a human, reason
        ``budget_exhausted``; any other is left as it is. Whether it paused."""
        if self.state not in WORKING or self.pending_session is not None:
            return False
        self._pause(
            session=self._new_session(SessionReason.BUDGET_EXHAUSTED, spend=spend)
        )
        return True

    def _within_budget(self) -> None:
        """Refuse to send a task over its budget back to work."""
        spend = self.spend()
        if not spend.over:
            return
        which = []
        if spend.over_usd:
            which.append(f"USD {spend.spent_usd:.6g} of {spend.budget_usd:g}")
        if spend.over_tokens:
            which.append(f"{spend.tokens:,} of {spend.budget_tokens:,} tokens")
        msg = (
            f"task {self.task_id!r} has spent its budget ({'; '.join(which)}): "
            f"raise it first (`devs budget {self.task_id} --usd N`, "
            f"POST /tasks/{self.task_id}/budget, or raise_budget), then resume"
        )
        raise OverBudget(msg, task_id=self.task_id)

    def log_lesson(self, strategy: str, rca_summary: str) -> Task.LessonLogged:
        """Record a lesson; the same strategy again replaces the summary."""
        destination(Trigger.LOG_LESSON, self.state)
        clean = redact(strategy)
        if clean not in self.lessons and len(self.lessons) >= MAX_LESSONS_PER_TASK:
            msg = (
                f"task {self.task_id!r} already has {MAX_LESSONS_PER_TASK:,} lessons;"
                " no more can be logged"
            )
            raise InvalidInput(msg)
        self._log_lesson(strategy=clean, rca_summary=redact(rca_summary))
        logged = self.pending_events[-1]
        assert isinstance(logged, Task.LessonLogged)
        return logged

    def resume(
        self,
        *,
        actor: str,
        reason: str,
        if_version: int | None = None,
        as_recorded: bool = False,
    ) -> str | None:
        """Let the agent go on; returns the human session this answers.

        Every answer (``resume``, ``rewind``, ``skip``, ``resolve_handoff``,
        ``claim``, ``release``, ``take_over``) may name the version of the
        task it answers (``if_version``): another version is refused
        (:class:`StaleAnswer`, nothing written). A stop claimed by someone
        else is refused (:class:`Claimed`) unless ``as_recorded`` (a replay
        of what was recorded)."""
        self._answering(if_version)
        destination(Trigger.RESUME, self.state)
        clean_actor = redact(actor)
        self._unclaimed(clean_actor, as_recorded)
        if not as_recorded:
            self._within_budget()
        session_id = self.pending_session_id
        self._resume(actor=clean_actor, reason=redact(reason), session_id=session_id)
        return session_id

    def rewind(
        self,
        *,
        actor: str,
        reason: str,
        to_commit: str | None,
        if_version: int | None = None,
        as_recorded: bool = False,
    ) -> str | None:
        """Back to work from a commit; returns the human session this answers."""
        self._answering(if_version)
        destination(Trigger.REWIND, self.state)
        clean_actor = redact(actor)
        self._unclaimed(clean_actor, as_recorded)
        session_id = self.pending_session_id
        self._rewind(
            actor=clean_actor,
            reason=redact(reason),
            to_commit=to_commit if to_commit is not None else self.starting_commit,
            session_id=session_id,
        )
        return session_id

    def skip(
        self,
        *,
        actor: str,
        reason: str,
        if_version: int | None = None,
        as_recorded: bool = False,
    ) -> str | None:
        """Skip the task; returns the human session this answers."""
        self._answering(if_version)
        destination(Trigger.SKIP, self.state)
        clean_actor = redact(actor)
        self._unclaimed(clean_actor, as_recorded)
        session_id = self.pending_session_id
        self._skip(actor=clean_actor, reason=redact(reason), session_id=session_id)
        return session_id

    def claim(self, *, actor: str, if_version: int | None = None) -> None:
        """Say "I'm on it" for the stop the task waits in (an escalation, a
        pause or a hand-off): until released or taken over, only ``actor``
        may answer it."""
        self._answering(if_version)
        destination(Trigger.CLAIM, self.state)
        clean_actor = redact(actor)
        if self.claimed_by == clean_actor:
            msg = f"task {self.task_id!r} is already claimed by you ({clean_actor!r})"
            raise IllegalTransition(msg, state=self.state)
        self._unclaimed(clean_actor, as_recorded=False)
        self._claim(actor=clean_actor, waiting_in=self.state)

    claim_handoff = claim
    """The name a claim had when only hand-offs could be claimed."""

    def release(self, *, actor: str, if_version: int | None = None) -> None:
        """The claimer lets go of the stop: anyone may answer it again."""
        self._answering(if_version)
        destination(Trigger.RELEASE, self.state)
        clean_actor = redact(actor)
        if self.claimed_by is None:
            msg = f"task {self.task_id!r} is not claimed: there is nothing to release"
            raise IllegalTransition(msg, state=self.state)
        self._unclaimed(clean_actor, as_recorded=False)
        self._release(actor=clean_actor, waiting_in=self.state)

    def take_over(
        self, *, actor: str, reason: str, if_version: int | None = None
    ) -> str:
        """Take a claimed stop over from its claimer (recorded: who took it
        from whom, and why); returns who held it."""
        self._answering(if_version)
        destination(Trigger.TAKE_OVER, self.state)
        clean_actor = redact(actor)
        previous = self.claimed_by
        if previous is None:
            msg = f"task {self.task_id!r} is not claimed: claim it instead"
            raise IllegalTransition(msg, state=self.state)
        if previous == clean_actor:
            msg = f"task {self.task_id!r} is already claimed by you ({clean_actor!r})"
            raise IllegalTransition(msg, state=self.state)
        self._take_over(
            actor=clean_actor,
            previous=previous,
            reason=redact(reason),
            waiting_in=self.state,
        )
        return previous

    def resolve_handoff(
        self,
        *,
        actor: str,
        resolution: Resolution,
        reason: str,
        if_version: int | None = None,
        as_recorded: bool = False,
    ) -> None:
        """End a hand-off: ``return`` it to the agent, ``complete`` or
        ``skip`` it. Unclaimed, anyone may; claimed, only its claimer."""
        self._answering(if_version)
        destination(RESOLUTION_TRIGGERS[resolution], self.state)
        clean_actor = redact(actor)
        self._unclaimed(clean_actor, as_recorded)
        self._resolve(actor=clean_actor, reason=redact(reason), resolution=resolution)

    def _answering(self, if_version: int | None) -> None:
        """Refuse an answer to a version of the task that is not the latest,
        or one of the quiet versions after it (usage recorded while a person
        read the task changes nothing they answer)."""
        if if_version is None or if_version == self.version:
            return
        if self.answered_at is not None and self.answered_at <= if_version < (
            self.version
        ):
            return
        msg = (
            f"task {self.task_id!r} is at version {self.version} ({self.state}), "
            f"not the version {if_version} this answer was given for: it changed "
            "since (someone else may have answered first). Nothing was written; "
            f"read it again (`devs show {self.task_id}`) and answer what it is now"
        )
        raise StaleAnswer(
            msg, task_id=self.task_id, version=self.version, answered=if_version
        )

    def _unclaimed(self, actor: str, as_recorded: bool) -> None:
        """Refuse ``actor``'s answer to a stop someone else claimed."""
        holder = self.claimed_by
        if holder is None or holder == actor or as_recorded:
            return
        msg = (
            f"task {self.task_id!r} is claimed by {holder!r}: they are on it. "
            f"Ask them to release it (`devs release {self.task_id}`), or take it "
            f"over (`devs take-over {self.task_id} --reason ...`)"
        )
        raise Claimed(msg, task_id=self.task_id, claimed_by=holder)

    def expire_deadline(self, *, now: datetime | None) -> str:
        """Hand the task off because nobody answered its human session by the
        session's deadline (actor ``devs:deadline``, reason
        ``human_deadline``); returns the session's id.

        ``now`` is the clock's time, which must have reached the deadline;
        ``None`` takes the expiry as recorded (a replay: a re-decided task's
        session opened at another time, so its deadline is not compared).
        Refused (``IllegalTransition``, nothing recorded) when the task waits
        on no session with a deadline, or the deadline is still ahead.
        """
        session = self._session_with_deadline(Trigger.EXPIRE_DEADLINE, now)
        assert session.deadline_at is not None
        if now is not None and now < session.deadline_at:
            msg = (
                f"the deadline of task {self.task_id!r} in state {self.state} "
                f"(session {session.session_id}) is "
                f"{session.deadline_at.isoformat()}, still ahead at "
                f"{now.isoformat()}: not expired"
            )
            raise IllegalTransition(msg, state=self.state)
        payload = self._handoff_payload(reason=HUMAN_DEADLINE)
        self._expire(
            session_id=session.session_id,
            deadline_at=session.deadline_at,
            actor=DEADLINE_ACTOR,
            reason=HUMAN_DEADLINE,
            payload=payload,
            claimed_by=self.claimed_by,
        )
        return session.session_id

    def remind_deadline(self, *, now: datetime | None, before: float) -> str:
        """Record that a reminder went out for the pending session, ``before``
        seconds ahead of its deadline; returns the session's id.

        ``now`` is the clock's time, which must have reached
        ``deadline_at - before``; ``None`` takes the reminder as recorded (a
        replay). Refused (``IllegalTransition``, nothing recorded) when the
        task waits on no session with a deadline, when this session was
        reminded already, or when it is too early.
        """
        if not 0 <= before <= MAX_HUMAN_DEADLINE:  # also refuses NaN
            msg = f"before must be seconds in [0, {MAX_HUMAN_DEADLINE}], got {before!r}"
            raise InvalidInput(msg, field="before")
        session = self._session_with_deadline(Trigger.REMIND, now)
        assert session.deadline_at is not None
        if self.reminded_session_id == session.session_id:
            msg = (
                f"session {session.session_id} of task {self.task_id!r} in state "
                f"{self.state} was reminded already: a session is reminded once"
            )
            raise IllegalTransition(msg, state=self.state)
        if now is not None:
            due = session.deadline_at - timedelta(seconds=before)
            if now < due:
                msg = (
                    f"the reminder for task {self.task_id!r} in state "
                    f"{self.state} (session {session.session_id}) is due at "
                    f"{due.isoformat()}, {before:g} s before its deadline; it "
                    f"is {now.isoformat()}"
                )
                raise IllegalTransition(msg, state=self.state)
        self._remind(
            session_id=session.session_id,
            deadline_at=session.deadline_at,
            waiting_in=self.state,
        )
        return session.session_id

    # -------------------------------------------------------------- internals

    def _session_with_deadline(
        self, trigger: Trigger, now: datetime | None
    ) -> HumanSession:
        """The pending session, if it has a deadline and ``trigger`` is
        allowed now; else ``IllegalTransition`` naming the task and its
        state. ``now`` must know its timezone."""
        if now is not None and now.utcoffset() is None:
            msg = f"now must be a datetime with a timezone, got {now.isoformat()}"
            raise InvalidInput(msg, field="now")
        session = self.pending_session
        if session is None:
            msg = (
                f"task {self.task_id!r} in state {self.state} waits on no human "
                "session: a deadline runs only while a task is escalated or "
                "paused"
            )
            raise IllegalTransition(msg, state=self.state)
        if session.deadline_at is None:
            msg = (
                f"the human session of task {self.task_id!r} in state "
                f"{self.state} has no deadline (the task's policy sets no "
                "human_deadline)"
            )
            raise IllegalTransition(msg, state=self.state)
        destination(trigger, self.state)
        return session

    def _new_session(
        self,
        reason: SessionReason,
        entropy_score: float | None = None,
        source: EntropySource | None = None,
        spend: Spend | None = None,
    ) -> HumanSession:
        opened_at = datetime_now_with_tzinfo()
        deadline = self.policy.human_deadline
        return HumanSession(
            session_id=str(uuid4()),
            reason=reason,
            opened_at=opened_at,
            entropy_score=entropy_score,
            entropy_source=source,
            spend=spend,
            deadline_at=(
                opened_at + timedelta(seconds=deadline)
                if deadline is not None
                else None
            ),
        )

    def _handoff_payload(self, reason: str | None = None) -> HandoffPayload:
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
            stuck=self.stuck,
            reason=reason,
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
        self.current_strategy = strategy

    @event(BlacklistedStrategyAttempted)
    def _block_attempt(
        self,
        failure: FailureRecord,
        matched_strategy: str,
        consecutive_failures: int,
        stuck: StuckAssessment | None = None,
    ) -> None:
        self._record_failure(failure, consecutive_failures)
        self.stuck = stuck

    @event(GatePassed)
    def _pass_gate(self, gate: str | None, strategy: str | None) -> None:
        self.consecutive_failures = 0
        self.failures = []
        self.current_strategy = None
        self.stuck = None

    @event(GateFailed)
    def _fail_gate(
        self,
        failure: FailureRecord,
        consecutive_failures: int,
        stuck: StuckAssessment | None = None,
    ) -> None:
        self._record_failure(failure, consecutive_failures)
        self.stuck = stuck

    @event(Escalated)
    def _escalate(self, session: HumanSession, report: FailureAnalysisReport) -> None:
        self.pending_session = session

    @event(HandedOff)
    def _hand_off(self, payload: HandoffPayload) -> None:
        self.handoff = payload
        self.claimed_by = None

    @event(Paused)
    def _pause(self, session: HumanSession) -> None:
        self.pending_session = session

    @event(EntropyMeasured)
    def _measure_entropy(self, score: float, threshold: float) -> None:
        """A score below the threshold is recorded; nothing else changes."""

    @event(LessonLogged)
    def _log_lesson(self, strategy: str, rca_summary: str) -> None:
        if strategy not in self.lessons:
            self.lessons.append(strategy)

    @event(Resumed)
    def _resume(self, actor: str, reason: str, session_id: str | None) -> None:
        self.pending_session = None
        self.claimed_by = None

    @event(Rewound)
    def _rewind(
        self, actor: str, reason: str, to_commit: str | None, session_id: str | None
    ) -> None:
        self.pending_session = None
        self.handoff = None
        self.claimed_by = None
        self.current_strategy = None
        if to_commit is not None:
            self.last_commit = to_commit

    @event(Skipped)
    def _skip(self, actor: str, reason: str, session_id: str | None) -> None:
        self.pending_session = None
        self.handoff = None
        self.claimed_by = None

    @event(DeadlineExpired)
    def _expire(
        self,
        session_id: str,
        deadline_at: datetime,
        actor: str,
        reason: str,
        payload: HandoffPayload,
        claimed_by: str | None = None,
    ) -> None:
        self.pending_session = None
        self.handoff = payload
        self.claimed_by = claimed_by

    @event(DeadlineReminded)
    def _remind(
        self, session_id: str, deadline_at: datetime, waiting_in: TaskState
    ) -> None:
        self.reminded_session_id = session_id

    @event(HandoffClaimed)
    def _claim(self, actor: str, waiting_in: TaskState = TaskState.HAND_OFF) -> None:
        self.claimed_by = actor

    @event(ClaimReleased)
    def _release(self, actor: str, waiting_in: TaskState) -> None:
        self.claimed_by = None

    @event(ClaimTakenOver)
    def _take_over(
        self, actor: str, previous: str, reason: str, waiting_in: TaskState
    ) -> None:
        self.claimed_by = actor

    @event(UsageRecorded)
    def _record_usage(
        self,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        cache_creation_tokens: int = 0,
        cost_usd: float | None = None,
        usage_id: str | None = None,
    ) -> None:
        self.usage = (self.usage or Usage()).plus(
            Usage.one(
                input_tokens,
                output_tokens,
                cache_read_tokens,
                cache_creation_tokens,
                cost_usd,
            )
        )
        if usage_id is not None:
            if self.usage_ids is None:
                self.usage_ids = set()
            self.usage_ids.add(usage_id)

    @event(BudgetWarned)
    def _warn_budget(self, spend: Spend, warn: float, waiting_in: TaskState) -> None:
        self.warned_at = (spend.budget_usd, spend.budget_tokens)

    @event(BudgetRaised)
    def _raise_budget(
        self,
        actor: str,
        reason: str,
        budget_usd: float | None = None,
        budget_tokens: int | None = None,
    ) -> None:
        if budget_usd is not None:
            self.budget_usd = budget_usd
        if budget_tokens is not None:
            self.budget_tokens = budget_tokens

    @event(HandoffResolved)
    def _resolve(self, actor: str, reason: str, resolution: Resolution) -> None:
        self.handoff = None
        self.claimed_by = None


RESOLUTION_TRIGGERS = {
    Resolution.RETURN: Trigger.RETURN_TO_AGENT,
    Resolution.COMPLETE: Trigger.COMPLETE_BY_HUMAN,
    Resolution.SKIP: Trigger.SKIP_BY_HUMAN,
}

HUMAN_EVENTS: dict[HumanAction, type[TaskEvent]] = {
    HumanAction.RESUME: Task.Resumed,
    HumanAction.REWIND: Task.Rewound,
    HumanAction.SKIP: Task.Skipped,
    HumanAction.CLAIM: Task.HandoffClaimed,
    HumanAction.RESOLVE: Task.HandoffResolved,
    HumanAction.RELEASE: Task.ClaimReleased,
    HumanAction.TAKE_OVER: Task.ClaimTakenOver,
}
"""The event each human action records."""


def task_id_of(originator_id: str) -> str:
    """The task id inside a task aggregate's id (``task:<id>``)."""
    return originator_id.removeprefix("task:")


def _describe_failure(result: GateResult) -> str:
    if result.exit_code is None:
        return "process was killed or timed out"
    return f"process exited with code {result.exit_code}"


register_topic(Task.Snapshot.TOPIC, Task.Snapshot)


def _kept(text: str, limit: int, stored: int) -> str:
    """What a failure keeps of ``text``: at most ``stored`` characters, its
    head and its tail with a marker of what was cut between
    (:func:`devs.domain.output.keep`); a text longer than its ``limit`` was
    cut to it first (:func:`~devs.domain.values.cut`, whose marker leads)."""
    if len(text) > limit:
        text = cut(text, limit)
    return keep(text, stored)
