"""``RecoveryService``: the eventsourcing application that referees agent tasks.

A thin service layer: a command validates its arguments, lets the task decide
and the run react, saves both in one ``save`` and answers from the aggregates
(:mod:`devs.domain.commands`, :mod:`devs.domain.decisions`); queries read the
read models handed in by topic (``READ_MODELS_TOPIC``) through the ports of
:mod:`devs.domain.ports`, so the domain names no database.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Annotated, Any, ClassVar, ParamSpec, TypeVar

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import datetime_now_with_tzinfo
from eventsourcing.persistence import IntegrityError
from eventsourcing.utils import EnvType, get_topic, resolve_topic
from pydantic import Field

from devs.domain import blacklist, journal
from devs.domain.audit import Audits, ReplayCheckReport, TaskAudit, WhatIfReport
from devs.domain.chart import WAITING, Trigger, destination
from devs.domain.commands import (
    COMMAND_ATTEMPTS,
    RECEIPT,
    WRITTEN,
    TaskCommands,
    Written,
    store_errors,
    turn,
)
from devs.domain.decisions import (
    ActionResult,
    AttemptDecision,
    BudgetAnswer,
    DeadlineResult,
    EntropyDecision,
    GateDecision,
    HistoryEntry,
    Notification,
    TaskSummary,
    UsageDecision,
    action_result,
    attempt_decision,
    deadline_result,
    gate_decision,
    history_entry,
    run_state_of,
    task_summary,
)
from devs.domain.errors import (
    AlreadyExists,
    Conflict,
    InvalidInput,
    NotFound,
    OverBudget,
    StoreError,
    UnknownMessage,
    UnknownRun,
    UnknownTask,
    UnreadableEvent,
)
from devs.domain.gate import evaluate
from devs.domain.names import DeliveryState, HumanAction, Resolution, StopScope
from devs.domain.operators import (
    IssuedToken,
    OperatorEntry,
    Operators,
)
from devs.domain.outbox import OutboxMessage
from devs.domain.policy import MAX_HUMAN_DEADLINE, Policy, load_policy
from devs.domain.ports import (
    READ_MODELS_TOPIC,
    Assembly,
    FailureReport,
    GateStatus,
    HandoffEntry,
    Lesson,
    Metrics,
    PendingSession,
    ReadModels,
    Redelivered,
    RunState,
    SpendReport,
    TaskIndexEntry,
    Verification,
    WebhooksReport,
    read_wait_of,
)
from devs.domain.receipt import Pending, Receipt
from devs.domain.redaction import redact
from devs.domain.run import Run
from devs.domain.spend import price_of, prices_from
from devs.domain.task import HumanSession, Task
from devs.domain.values import (
    Actor,
    AgentName,
    AnsweredVersion,
    AwareTime,
    BudgetTokens,
    BudgetUsd,
    CommitId,
    CostUsd,
    Dag,
    DeliveryStateName,
    EntropyScore,
    ErrorText,
    ExitCode,
    GateName,
    IdempotencyKey,
    Limit,
    Links,
    MessageId,
    ModelName,
    OutputText,
    Position,
    RcaSummary,
    Reason,
    RequestText,
    ResolutionName,
    RunId,
    StateName,
    StopScopeName,
    Strategy,
    TaskId,
    TokenCount,
    UsageId,
    Version,
    valid_position,
    validated,
)

ASSEMBLY_GROUP = "devs.assembly"
"""The entry-point group of the :class:`~devs.domain.ports.Assembly` that
completes a service's env: which store, which read models
(``devs.adapters.config:ASSEMBLY``)."""
logger = logging.getLogger("devs.service")
UNPRICED_SAID = 1_000
"""Models without a price a process says so of (once each)."""
T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


READ_AFTER: ContextVar[int | None] = ContextVar("devs_read_after", default=None)
"""The log position the queries of a ``reading_after`` block wait for."""

WaitSeconds = Annotated[float, Field(gt=0, le=300, allow_inf_nan=False, strict=False)]
"""How long to wait, in seconds: a number in (0, 300]."""

LeadSeconds = Annotated[
    float, Field(ge=0, le=MAX_HUMAN_DEADLINE, allow_inf_nan=False, strict=False)
]
"""How long before a deadline, in seconds: a number in [0, 30 days]."""

PolicyOrChanges = Annotated[
    Mapping[str, Any] | Policy, Field(union_mode="left_to_right")
]
"""A whole :class:`Policy`, or the fields to change in the policy in force
(a mapping is taken as changes, never as a policy with defaults)."""


def api(func: Callable[P, R]) -> Callable[P, R]:
    """A public command or query: its arguments validated, its store failures
    reported as :class:`StoreError`. Its ``unchecked`` is the same without the
    validation (:func:`unchecked`)."""
    checked = store_errors(validated(func))
    checked.unchecked = store_errors(func)  # type: ignore[attr-defined]
    return checked


def unchecked(method: Callable[P, R]) -> Callable[P, R]:
    """A command of the service (``RecoveryService.record_gate``) that does
    not validate its arguments again: for an edge that validated every one
    against the command's model (:data:`devs.domain.arguments.COMMANDS`,
    whose fields are the method's parameters with the same types), so that
    each value is validated, and its text redacted, once. A method without
    one (a subclass's own, not made by :func:`api`) is itself."""
    found: Callable[P, R] = getattr(method, "unchecked", method)
    return found


class RecoveryService(TaskCommands):
    """Referee for agent tasks: attempts, gates, entropy, lessons, humans."""

    name = "RecoveryService"
    env: ClassVar[dict[str, str]] = {
        "ORIGINATOR_ID_TYPE": "text",
        **TaskCommands.env,
    }

    @store_errors
    def __init__(self, env: EnvType | None = None, *, policy: Policy | None = None):
        _check_env(env)
        if policy is not None and not isinstance(policy, Policy):
            msg = f"policy must be a Policy or None, got {_shown(policy)}"
            raise InvalidInput(msg, field="policy")
        try:
            super().__init__(env)
            self.policy = policy if policy is not None else load_policy(self.env)
            self.read_wait = read_wait_of(self.env)
            """How long a query waits for the read models (``DEVS_READ_WAIT``)."""
            self.prices = prices_from(self.env)
            """What a model's tokens cost (:mod:`devs.domain.spend`; the
            package's table and ``DEVS_PRICES``)."""
            factory: Callable[[RecoveryService], ReadModels] = resolve_topic(
                self.env[READ_MODELS_TOPIC]
            )
            self.read_models = factory(self)
            self.audits = Audits(
                events=self.events,
                recorder=self.recorder,
                mapper=self.mapper,
                repository=self._store,
                read_models=self.read_models,
                require_task=self._require_task,
                fresh=self._fresh,
                run_state=self.run_state,
            )
            """The audit queries (:mod:`devs.domain.audit`) over this store."""
        except BaseException:
            # A store that could not be opened: its connections (a PostgreSQL
            # pool and its threads) are let go now, not whenever the garbage
            # collector runs, which may be in one of those threads.
            opened = getattr(self, "factory", None)
            if opened is not None:
                opened.close()
            raise

    def construct_env(self, name: str, env: EnvType | None = None) -> Any:
        """The env (this class's, ``os.environ`` and ``env``, merged), completed
        by the assembly: which store and which read models. The domain names
        none; ``devs.adapters.config.assemble`` does, found by its entry point
        (``devs.assembly``)."""
        environment = super().construct_env(name, env)
        environment.update(_assembly()(environment))
        return environment

    def close(self) -> None:
        self.read_models.close()
        super().close()

    # =============================================================== commands

    def exactly_once(self, key: str, request: str) -> AbstractContextManager[None]:
        """Within this block, commands are done once per ``key``.

        ``key`` is the caller's name for one command (1-255 visible ASCII
        characters), ``request`` what it asked, as the caller writes it down
        (only its SHA-256 is kept). The command's events are saved with a
        receipt holding its answer, in one transaction; sent again with the
        same key and request — after a crash, from another process — it
        writes nothing and returns the first answer. The same key with another
        request is ``InvalidInput`` (field ``idempotency_key``). A refused
        command leaves no receipt: sent again, it is decided again.

        One command per block: the key names one command. A key or request
        that is not such a text is ``InvalidInput`` at the call.
        """
        return _receipt(_pending(key, request))

    @contextmanager
    def written(self) -> Iterator[Written]:
        """The log position the commands of this block reached: what they
        recorded, without asking the store (``None`` if they recorded
        nothing: refused, or answered from a receipt)."""
        written = Written()
        token = WRITTEN.set(written)
        try:
            yield written
        finally:
            WRITTEN.reset(token)

    @api
    def start_run(
        self, run_id: RunId, dag: Dag, *, stop_scope: StopScopeName = "run"
    ) -> RunState:
        """Start a run over ``dag`` (node -> prerequisites); nodes are task ids.

        ``stop_scope`` says what a task's stop (an escalation, a pause, a
        hand-off) holds up: ``run`` (the default) pauses the whole run until
        it is answered; ``descendants`` lets ready branches beside it start,
        while the stopped task's descendants wait. Recorded with the run's
        start, so a replay decides the same way, as is its budget (the
        policy's ``run_budget_usd``: what its tasks may spend together)."""
        receipt = RECEIPT.get()
        if receipt is not None and (issued := self._issued(receipt)) is not None:
            return issued  # type: ignore[no-any-return]
        run = Run.start(
            run_id, dag, StopScope(stop_scope), budget_usd=self.policy.run_budget_usd
        )
        with turn(self._locks.run(run_id)):  # once saved, it is in the shared cache
            answer = run_state_of(run)
            try:
                if receipt is None:
                    self._commit(run)
                else:
                    self._commit(run, Receipt.issue(receipt, answer))
            except IntegrityError:
                if receipt is not None and (issued := self._issued(receipt)):
                    return issued  # type: ignore[no-any-return]
                raise AlreadyExists.run(run_id) from None
            return answer

    @api
    def start_task(
        self,
        task_id: TaskId,
        *,
        run_id: RunId | None = None,
        agent: AgentName | None = None,
        last_commit: CommitId | None = None,
        links: Links | None = None,
    ) -> TaskSummary:
        """Start refereeing a task, under the policy in force now.

        ``links`` name what the agent's side knows of it, for the people who
        answer it: ``transcript`` (its session's transcript path), ``branch``,
        ``pr`` (a pull request's URL)…"""

        def make() -> Task:
            if links:
                return Task(
                    task_id=task_id,
                    run_id=run_id,
                    agent=agent,
                    last_commit=last_commit,
                    policy=self.policy,
                    links=links,
                )
            return Task(
                task_id=task_id,
                run_id=run_id,
                agent=agent,
                last_commit=last_commit,
                policy=self.policy,
            )

        return self._create(task_id, run_id, make, task_summary)

    @api
    def begin_attempt(self, task_id: TaskId, strategy: Strategy) -> AttemptDecision:
        """Check a strategy against the task's lessons before any LLM call."""
        return self._command(
            task_id,
            lambda t: t.begin_attempt(strategy),
            lambda matched, task, _: attempt_decision(task, matched),
        )

    @api
    def record_gate(
        self,
        task_id: TaskId,
        exit_code: ExitCode,
        *,
        gate: GateName | None = None,
        strategy: Strategy | None = None,
        error: ErrorText | None = None,
        output: OutputText | None = None,
    ) -> GateDecision:
        """Judge a gate by its exit code and climb (or reset) the failure ladder."""
        result = evaluate(exit_code)

        def decide(task: Task) -> None:
            task.record_gate(
                result, gate=gate, strategy=strategy, error=error, output=output
            )

        return self._command(
            task_id, decide, lambda _, task, run: gate_decision(task, run, result, gate)
        )

    @api
    def report_entropy(self, task_id: TaskId, score: EntropyScore) -> EntropyDecision:
        """Pause the task for a human when the agent's entropy reaches the limit."""

        def answer(session: HumanSession | None, task: Task, _: Run | None) -> Any:
            return EntropyDecision(
                task_id=task.task_id,
                score=score,
                threshold=task.policy.hitl_entropy_threshold,
                triggered=session is not None,
                session_id=session.session_id if session else None,
                state=task.state,
            )

        decision: EntropyDecision = self._command(
            task_id, lambda t: t.report_entropy(score), answer
        )
        return decision

    @api
    def record_usage(
        self,
        task_id: TaskId,
        *,
        model: ModelName,
        input_tokens: TokenCount,
        output_tokens: TokenCount,
        cache_read_tokens: TokenCount = 0,
        cache_creation_tokens: TokenCount = 0,
        cost_usd: CostUsd | None = None,
        usage_id: UsageId | None = None,
    ) -> UsageDecision:
        """Count a model call's tokens against the task's budgets; its cost
        is ``cost_usd`` when given, else priced now by the model's price
        (``None`` when the model has none: its tokens still count). A
        ``usage_id`` recorded before records nothing. Past the budget's
        warning fraction a warning is recorded once; at or over a budget, a
        working task pauses for a human (reason ``budget_exhausted``)."""
        if cost_usd is None:
            price = price_of(model, self.prices)
            if price is not None:
                cost_usd = price.cost(
                    input_tokens,
                    output_tokens,
                    cache_read_tokens,
                    cache_creation_tokens,
                )
            else:
                self._unpriced(model)

        def decide(task: Task) -> bool:
            return task.record_usage(
                model=model,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cache_read_tokens=cache_read_tokens,
                cache_creation_tokens=cache_creation_tokens,
                cost_usd=cost_usd,
                usage_id=usage_id,
            )

        run_stop: dict[str, bool] = {}

        def answer(recorded: bool, task: Task, run: Run | None) -> UsageDecision:
            new = [type(e) for e in task.pending_events]
            paused = Task.Paused in new
            # The run's budget: spent by this usage (every working task of
            # the run stops), or spent before (this task stops).
            run_stop["crossed"] = run is not None and any(
                isinstance(e, Run.BudgetExhausted) for e in run.pending_events
            )
            run_stop["over"] = run is not None and run.over_budget
            return UsageDecision(
                task_id=task.task_id,
                recorded=recorded,
                model=model,
                cost_usd=cost_usd if recorded else None,
                spend=task.spend(),
                state=task.state,
                triggered=paused,
                warned=Task.BudgetWarned in new,
                session_id=task.pending_session_id,
            )

        decision: UsageDecision = self._command(task_id, decide, answer)
        crossed = run_stop.get("crossed", False)
        if not run_stop.get("over") or (decision.triggered and not crossed):
            return decision
        run_id = self._stored_task(task_id).run_id
        assert run_id is not None
        stopped = self._stop_for_run_budget(run_id, None if crossed else task_id)
        if task_id not in stopped:
            return decision
        summary = self.task(task_id)
        return decision.model_copy(
            update={
                "state": summary.state,
                "triggered": True,
                "session_id": summary.pending_session.session_id
                if summary.pending_session
                else None,
            }
        )

    def _unpriced(self, model: str) -> None:
        """Say once (per process and model) that a model has no price."""
        said = self.__dict__.setdefault("_said_unpriced", set())
        if model in said or len(said) >= UNPRICED_SAID:
            return
        said.add(model)
        logger.warning(
            "model %r has no price (devs.domain.spend.PRICES, or DEVS_PRICES): "
            "its tokens count against token budgets, its cost is unknown",
            model,
        )

    def _stop_for_run_budget(self, run_id: str, only: str | None) -> list[str]:
        """Stop for a human every working task of the run (or ``only``),
        its budget spent; the tasks that stopped. Each is a command of its
        own: a crash between two leaves the others to stop at their next
        usage."""
        run = self._get_run(run_id)
        stopped: list[str] = []

        def still_over(paused: bool, task: Task, run: Run | None) -> bool:
            if run is None or not run.over_budget:
                raise _RaisedMeanwhile  # a person raised it: nothing written
            return paused

        # Commands of their own, not the usage's: its idempotency key (the
        # receipt of its answer) must not answer for them.
        receipt = RECEIPT.set(None)
        try:
            for node in [only] if only is not None else run.working_nodes():
                try:
                    if self._command(
                        node,
                        lambda t: t.stop_for_run_budget(run.spend()),
                        still_over,
                    ):
                        stopped.append(node)
                except UnknownTask:
                    continue  # a node started in the run but not yet as a task
                except _RaisedMeanwhile:
                    break
        finally:
            RECEIPT.reset(receipt)
        return stopped

    @api
    def raise_run_budget(
        self, run_id: RunId, *, usd: BudgetUsd, actor: Actor, reason: Reason
    ) -> RunState:
        """A person sets the run's budget (USD, every task's usage together)
        above what its tasks spent. The tasks its budget stopped are then
        resumed one by one, as any stop."""
        receipt = RECEIPT.get()
        for attempt in self._attempts(f"run {run_id!r}"):
            if receipt is not None and (issued := self._issued(receipt)) is not None:
                return issued  # type: ignore[no-any-return]
            with turn(self._locks.run(run_id)):
                run = self._get_run(run_id)
                try:
                    run.raise_budget(usd, actor=redact(actor), reason=redact(reason))
                    answer = run_state_of(run)
                    if receipt is None:
                        self._commit(run)
                    else:
                        self._commit(run, Receipt.issue(receipt, answer))
                except IntegrityError:
                    self._forget(None, run)
                except BaseException:
                    self._forget(None, run)
                    raise
                else:
                    return answer
            attempt.retry()
        raise AssertionError("unreachable: _attempts raises when they run out")

    @api
    def raise_budget(
        self,
        task_id: TaskId,
        *,
        usd: BudgetUsd | None = None,
        tokens: BudgetTokens | None = None,
        actor: Actor,
        reason: Reason,
        if_version: AnsweredVersion | None = None,
    ) -> BudgetAnswer:
        """A person sets the task's budget (USD, tokens or both) above what
        it has spent; then resuming it is allowed. Like every answer it may
        name the task's version it is for, and a claim holds it for its
        claimer."""

        def decide(task: Task) -> None:
            task.raise_budget(
                usd=usd,
                tokens=tokens,
                actor=actor,
                reason=reason,
                if_version=if_version,
            )

        def answer(_: None, task: Task, __: Run | None) -> BudgetAnswer:
            raised = task.pending_events[-1]
            assert isinstance(raised, Task.BudgetRaised)
            return BudgetAnswer(
                task_id=task.task_id,
                actor=raised.actor,
                reason=raised.reason,
                spend=task.spend(),
                state=task.state,
                version=task.version,
            )

        return self._command(task_id, decide, answer)

    @api
    def log_lesson(
        self, task_id: TaskId, failed_strategy: Strategy, rca_summary: RcaSummary
    ) -> Lesson:
        """Record what a root-cause analysis learned; the strategy is blacklisted."""

        def answer(logged: Task.LessonLogged, _: Task, __: Run | None) -> Lesson:
            return Lesson(
                task_id=task_id,
                failed_strategy=logged.strategy,
                rca_summary=logged.rca_summary,
                logged_at=logged.timestamp,
            )

        return self._command(
            task_id, lambda t: t.log_lesson(failed_strategy, rca_summary), answer
        )

    @api
    def resume(
        self,
        task_id: TaskId,
        *,
        actor: Actor,
        reason: Reason,
        if_version: AnsweredVersion | None = None,
    ) -> ActionResult:
        """A human lets the agent go on after an escalation or a pause.

        Every human answer may name the task's version it answers
        (``if_version``, the ``version`` of :meth:`task`): if the task has
        moved on since, it is refused with :class:`StaleAnswer` and nothing is
        written. A stop someone else claimed is refused with :class:`Claimed`.
        """

        def answer(session_id: str | None, task: Task, run: Run | None) -> ActionResult:
            if run is not None and run.over_budget:
                raise over_run_budget(task.task_id, run)
            return action_result(
                task, run, HumanAction.RESUME, actor, reason, session_id
            )

        return self._command(
            task_id,
            lambda t: t.resume(actor=actor, reason=reason, if_version=if_version),
            answer,
        )

    @api
    def rewind(
        self,
        task_id: TaskId,
        *,
        actor: Actor,
        reason: Reason,
        to_commit: CommitId | None = None,
        if_version: AnsweredVersion | None = None,
    ) -> ActionResult:
        """A human sends the task back to work from a commit (default: its start)."""
        return self._command(
            task_id,
            lambda t: t.rewind(
                actor=actor, reason=reason, to_commit=to_commit, if_version=if_version
            ),
            lambda session_id, task, run: action_result(
                task,
                run,
                HumanAction.REWIND,
                actor,
                reason,
                session_id,
                to_commit=task.last_commit,
            ),
        )

    @api
    def skip(
        self,
        task_id: TaskId,
        *,
        actor: Actor,
        reason: Reason,
        if_version: AnsweredVersion | None = None,
    ) -> ActionResult:
        """A human skips the task; its run moves on."""
        return self._command(
            task_id,
            lambda t: t.skip(actor=actor, reason=reason, if_version=if_version),
            lambda session_id, task, run: action_result(
                task, run, HumanAction.SKIP, actor, reason, session_id
            ),
        )

    @api
    def claim(
        self,
        task_id: TaskId,
        *,
        actor: Actor,
        if_version: AnsweredVersion | None = None,
    ) -> ActionResult:
        """A human says "I'm on it" for the stop a task waits in (an
        escalation, a pause or a hand-off): until they release it or someone
        takes it over, an answer by anyone else is refused (:class:`Claimed`).
        """
        return self._command(
            task_id,
            lambda t: t.claim(actor=actor, if_version=if_version),
            lambda _, task, __: action_result(
                task, None, HumanAction.CLAIM, actor, None, None
            ),
        )

    @api
    def claim_handoff(
        self,
        task_id: TaskId,
        *,
        actor: Actor,
        if_version: AnsweredVersion | None = None,
    ) -> ActionResult:
        """:meth:`claim`, by the name it had when only hand-offs could be
        claimed."""
        return self.claim(task_id, actor=actor, if_version=if_version)

    @api
    def release(
        self,
        task_id: TaskId,
        *,
        actor: Actor,
        if_version: AnsweredVersion | None = None,
    ) -> ActionResult:
        """The claimer of a stop lets go of it: anyone may answer it again."""
        return self._command(
            task_id,
            lambda t: t.release(actor=actor, if_version=if_version),
            lambda _, task, __: action_result(
                task, None, HumanAction.RELEASE, actor, None, None
            ),
        )

    @api
    def take_over(
        self,
        task_id: TaskId,
        *,
        actor: Actor,
        reason: Reason,
        if_version: AnsweredVersion | None = None,
    ) -> ActionResult:
        """A human takes a claimed stop over from its claimer (recorded: who
        took it from whom, and why)."""
        return self._command(
            task_id,
            lambda t: t.take_over(actor=actor, reason=reason, if_version=if_version),
            lambda previous, task, __: action_result(
                task,
                None,
                HumanAction.TAKE_OVER,
                actor,
                reason,
                None,
                previous=previous,
            ),
        )

    @api
    def resolve_handoff(
        self,
        task_id: TaskId,
        *,
        actor: Actor,
        resolution: ResolutionName,
        reason: Reason,
        if_version: AnsweredVersion | None = None,
    ) -> ActionResult:
        """A human ends a hand-off: ``return`` to the agent, ``complete`` or
        ``skip``. Anyone may resolve an unclaimed hand-off; a claimed one only
        its claimer."""
        chosen = Resolution(resolution)
        return self._command(
            task_id,
            lambda t: t.resolve_handoff(
                actor=actor, resolution=chosen, reason=reason, if_version=if_version
            ),
            lambda _, task, run: action_result(
                task, run, HumanAction.RESOLVE, actor, reason, None, resolution=chosen
            ),
        )

    @api
    def expire_deadline(self, task_id: TaskId) -> DeadlineResult:
        """The clock: nobody answered the task's human session by its
        deadline (the policy's ``human_deadline``), so the task is handed off
        (fails closed; actor ``devs:deadline``, reason ``human_deadline``)
        and its run stays paused. ``IllegalTransition``, nothing written,
        when the task waits on no session with a deadline or the deadline is
        still ahead (an answer that came first cancelled it)."""

        def decide(task: Task) -> HumanSession:
            session = task.pending_session
            task.expire_deadline(now=datetime_now_with_tzinfo())
            assert session is not None  # refused otherwise
            return session

        return self._command(
            task_id,
            decide,
            lambda session, task, run: deadline_result(
                task, run, session, expired=True
            ),
        )

    @api
    def remind_deadline(
        self, task_id: TaskId, *, before: LeadSeconds
    ) -> DeadlineResult:
        """The clock: the task's human session is due within ``before``
        seconds; record that a reminder went out (once per session).
        ``IllegalTransition``, nothing written, when the task waits on no
        session with a deadline, the session was reminded already, or its
        deadline is more than ``before`` seconds ahead."""

        def decide(task: Task) -> HumanSession:
            session = task.pending_session
            task.remind_deadline(now=datetime_now_with_tzinfo(), before=before)
            assert session is not None  # refused otherwise
            return session

        return self._command(
            task_id,
            decide,
            lambda session, task, run: deadline_result(
                task, run, session, expired=False
            ),
        )

    # ============================================================== operators

    @api
    def add_operator(self, name: Actor, *, actor: Actor) -> IssuedToken:
        """Add an operator, a person who may answer for people over HTTP;
        its token, shown this once (only its hash is kept)."""
        token = self._on_roster(lambda roster: roster.add(name, actor=actor))
        return IssuedToken(name=name, token=token)

    @api
    def rotate_operator(self, name: Actor, *, actor: Actor) -> IssuedToken:
        """A new token for an operator: the old one, and every console
        session signed in with it, stop working."""
        token = self._on_roster(lambda roster: roster.rotate(name, actor=actor))
        return IssuedToken(name=name, token=token)

    @api
    def remove_operator(self, name: Actor, *, actor: Actor) -> OperatorEntry:
        """Take an operator away: its token and sessions stop working."""
        return self._on_roster(lambda roster: roster.remove(name, actor=actor))

    @api
    def operators(self) -> list[OperatorEntry]:
        """Every operator (never a token), in the order they were added."""
        return self.roster().entries()

    @store_errors
    def roster(self) -> Operators:
        """The roster as the store holds it now (never a cached copy): an
        empty one when no operator was ever added."""
        try:
            roster: Operators = self._store.get(Operators.create_id())
        except AggregateNotFoundError:
            return Operators()
        return roster

    def _on_roster(self, change: Callable[[Operators], T]) -> T:
        """Change the roster and save it; decided again on the roster as
        stored when another process changed it first."""
        for _ in range(COMMAND_ATTEMPTS):
            roster = self.roster()
            answer = change(roster)
            try:
                self._commit(roster)
            except IntegrityError:
                continue
            return answer
        msg = "other writers changed the operators every time; send it again"
        raise Conflict(msg)

    # ================================================================ queries

    @api
    def task(self, task_id: TaskId) -> TaskSummary:
        """The task as its events say now."""
        return task_summary(self._stored_task(task_id))

    @api
    def require_gate_allowed(self, task_id: TaskId) -> TaskSummary:
        """The task, if it takes a gate result now; else ``IllegalTransition``.

        Lets a caller refuse before it runs a (possibly long) gate command.
        """
        summary = task_summary(self._stored_task(task_id))
        destination(Trigger.FAIL_GATE, summary.state)
        return summary

    @api
    def state_at(self, task_id: TaskId, version: Version) -> TaskSummary:
        """The task as it was right after event number ``version``."""
        task = self._stored_task(task_id)
        if version < 1:
            msg = (
                f"version {version} is out of range [1, {task.version}] "
                f"for task {task.task_id!r}"
            )
            raise InvalidInput(msg, field="version")
        if version > task.version:
            msg = (
                f"task {task.task_id!r} has no version {version}: its versions "
                f"are 1 to {task.version}"
            )
            raise NotFound(msg)
        past: Task = self._store.get(task.id, version=version)
        return task_summary(past)

    @api
    def history(
        self, task_id: TaskId, *, after: Position = 0, limit: Limit | None = None
    ) -> list[HistoryEntry]:
        """The task's events after version ``after`` (at most ``limit`` of them),
        replayed in order, each with the state it left the task in.

        Reads only that page, and the task as it was at version ``after``
        (from its latest snapshot before it): a long history is read a page
        at a time. A page past the last event is empty. An event that cannot
        be decoded, or does not follow the one before it, is
        ``UnreadableEvent``.
        """
        replayed = self.audits.replay(task_id, after, limit)
        entries = [history_entry(event, task) for event, task in replayed]
        if replayed.task is None:
            raise UnknownTask(task_id)
        return entries

    @api
    def tasks(
        self,
        *,
        state: StateName | None = None,
        run_id: RunId | None = None,
        after: TaskId | None = None,
        limit: Limit | None = None,
    ) -> list[TaskIndexEntry]:
        """Tasks from the index, optionally of one state and/or one run,
        ordered by task id (code point order), a page at a time: those whose
        id sorts after ``after`` (the last id of the page before; it need not
        name a task), at most ``limit`` of them (default: all). The next page
        starts after the last id of this one; a page shorter than ``limit``
        is the last."""
        self._fresh()
        return self.read_models.task_entries(
            state=state, run_id=run_id, after=after, limit=limit
        )

    @api
    def waiting_tasks(self) -> list[TaskIndexEntry]:
        """Tasks that wait for a human (escalated, paused or handed off)."""
        self._fresh()
        return [
            entry
            for state in WAITING
            for entry in self.read_models.task_entries(state=state)
        ]

    @api
    def gate_status(self, task_id: TaskId) -> GateStatus:
        self._fresh()
        return _found(self.read_models.gate_status(task_id), task_id)

    @api
    def failure_report(self, task_id: TaskId) -> FailureReport:
        self._fresh()
        return _found(self.read_models.failure_report(task_id), task_id)

    @api
    def lessons(self, task_id: TaskId) -> list[Lesson]:
        self._require_task(task_id)
        return self.read_models.lessons(task_id)

    @api
    def is_strategy_blacklisted(self, task_id: TaskId, candidate: Strategy) -> bool:
        strategies = self._lesson_strategies(task_id)
        return blacklist.find_match(candidate, strategies) is not None

    @api
    def blacklist_directive(self, task_id: TaskId) -> str:
        return blacklist.directive(self._lesson_strategies(task_id))

    @api
    def pending_sessions(self) -> list[PendingSession]:
        self._fresh()
        return self.read_models.pending_sessions()

    @api
    def handoff_queue(self) -> list[HandoffEntry]:
        self._fresh()
        return self.read_models.handoff_queue()

    @api
    def run_state(self, run_id: RunId) -> RunState:
        self._fresh()
        found = self.read_models.run_state(run_id)
        if found is None:
            raise UnknownRun(run_id)
        return found

    @api
    def metrics(
        self, *, run_id: RunId | None = None, since: AwareTime | None = None
    ) -> Metrics:
        """How the tasks went: states, loop rate, failures before the first
        human, time to a human, hand-offs, blocked attempts, the strategies
        that failed most (docs/audit.md#metrics).

        ``run_id``: only that run's tasks (an unknown run is ``UnknownRun``);
        ``since``: only tasks started at or after it (a ``datetime`` with a
        timezone; a naive one is ``InvalidInput``).
        """
        self._fresh()
        if run_id is not None and self.read_models.run_state(run_id) is None:
            raise UnknownRun(run_id)
        return self.read_models.metrics(run_id=run_id, since=since)

    @api
    def task_spend(self, task_id: TaskId) -> SpendReport:
        """What the task spent on model calls, its budgets (a person's raise,
        else its policy's), and each model's share (docs/failure-ladder.md#spend)."""
        task = self._stored_task(task_id)
        self._fresh()
        spend = task.spend()
        return SpendReport(
            task_id=task.task_id,
            run_id=task.run_id,
            **spend.model_dump(exclude={"scope"}),
            by_model=self.read_models.spend_by_model(task_id=task.task_id),
        )

    @api
    def run_spend(self, run_id: RunId) -> SpendReport:
        """What the run's tasks spent on model calls together, its budget
        (``None``: unlimited), and each agent and model's share."""
        self._fresh()
        if self.read_models.run_state(run_id) is None:
            raise UnknownRun(run_id)
        try:
            run: Run = self._store.get(Run.create_id(run_id))
        except AggregateNotFoundError:
            raise UnknownRun(run_id) from None
        by_model = self.read_models.spend_by_model(run_id=run_id)
        return SpendReport(
            task_id=None,
            run_id=run_id,
            spent_usd=round(sum(m.spent_usd for m in by_model), 9),
            budget_usd=run.budget_usd,
            tokens=sum(m.tokens for m in by_model),
            budget_tokens=None,
            input_tokens=sum(m.input_tokens for m in by_model),
            output_tokens=sum(m.output_tokens for m in by_model),
            cache_read_tokens=sum(m.cache_read_tokens for m in by_model),
            cache_creation_tokens=sum(m.cache_creation_tokens for m in by_model),
            unknown_cost_tokens=sum(m.unknown_cost_tokens for m in by_model),
            by_model=by_model,
        )

    @api
    def outbox_messages(
        self, *, after: Position = 0, limit: Limit = 100
    ) -> list[OutboxMessage]:
        """The messages the log asks to send (``session.opened``,
        ``handoff.claimed``, …: docs/notifications.md), of the events after
        log position ``after``, in log order, at most ``limit``; from the
        ``outbox`` read model."""
        self._fresh()
        return self.read_models.outbox_messages(after, limit)

    @api
    def webhooks(
        self, *, state: DeliveryStateName | None = None, limit: Limit = 50
    ) -> WebhooksReport:
        """Every endpoint the outbox sends to (webhooks, Slack, e-mail: each
        enabled or not, its pending, delivered and dead counts, its last
        error) and the latest ``limit`` deliveries (of ``state`` only, when
        given), newest first (docs/notifications.md)."""
        deliveries = self.read_models.deliveries
        chosen = None if state is None else DeliveryState(state)
        return WebhooksReport(
            channels=deliveries.channels(),
            deliveries=deliveries.delivery_entries(chosen, limit),
        )

    @api
    def redeliver(self, message_id: MessageId) -> Redelivered:
        """Try message ``message_id`` again, at once, on every endpoint it
        went to (delivered, pending or dead), enabling an endpoint that had
        answered 410; ``UnknownMessage`` if it has no delivery."""
        count = self.read_models.deliveries.redeliver(message_id, time.time())
        if count == 0:
            raise UnknownMessage(message_id)
        return Redelivered(count=count)

    @api
    def redeliver_failed(self) -> Redelivered:
        """Try every dead letter again, at once (enabling the endpoints that
        had answered 410); how many (0: there was none)."""
        return Redelivered(
            count=self.read_models.deliveries.redeliver(None, time.time())
        )

    @api
    def notifications(
        self, *, after: Position = 0, limit: Limit = 100
    ) -> list[Notification]:
        """Escalations, pauses, hand-offs and blocked attempts, in log order."""
        records = self.recorder.select_notifications(
            start=after + 1,
            limit=limit,
            topics=[get_topic(cls) for cls in journal.NOTIFYING_EVENTS],
        )
        found: list[Notification] = []
        for record in records:
            try:
                domain_event = self.mapper.to_domain_event(record)
            except UnreadableEvent as error:  # reported by verify(), by position
                logger.error("notification %d left out: %s", record.id, error)
                continue
            notification = journal.notification(domain_event, record.id)
            if notification is not None:
                found.append(notification)
        return found

    @store_errors
    def verify(
        self, progress: Callable[[int, int], None] | None = None
    ) -> Verification:
        """Check the store: refold every read model from the log and compare it
        with the stored one, find every event that cannot be decoded, and check
        every task's hash chain (:mod:`devs.domain.chain`).

        Writes nothing. ``ok`` is true when ``problems`` (one line each: a read
        model that differs, a missing table, an undecodable event by its log
        position, a broken chain by task and version) is empty;
        ``rebuild_projections()`` repairs the read models, never a chain.
        ``progress``, if given, is called with (done, total) as it goes.
        """
        progress = _progress(progress)
        report = self.read_models.verify(progress)
        chains = self.audits.check_chains(progress)
        broken = [status.problem or "" for status in chains if status.state == "broken"]
        counts = {"intact": 0, "unchained": 0, "broken": 0}
        for status in chains:
            counts[status.state] += 1
        problems = [*report.problems, *broken]
        return report.model_copy(
            update={"ok": not problems, "problems": problems, "chains": counts}
        )

    @api
    def what_if(
        self,
        policy: PolicyOrChanges,
        *,
        task_ids: list[TaskId] | None = None,
        run_id: RunId | None = None,
    ) -> WhatIfReport:
        """Re-decide recorded histories under ``policy`` (all tasks, the named
        ones, or a run's) and say where the ladder would have gone otherwise.

        ``policy`` is a :class:`Policy`, or a mapping of changes to the policy
        in force (``{"escalation_threshold": 2}``: the other fields keep
        theirs; :meth:`Policy.changed`). Writes nothing; linear in the events
        read (:mod:`devs.domain.replay`).
        """
        if not isinstance(policy, Policy):
            try:
                policy = self.policy.changed(policy)
            except InvalidInput as error:  # the argument is ``policy``
                raise InvalidInput(str(error), field="policy") from None
        return self.audits.what_if(policy, task_ids, run_id)

    @api
    def replay_check(
        self, *, task_ids: list[TaskId] | None = None
    ) -> ReplayCheckReport:
        """Re-decide every recorded history (or the named ones) with today's
        code under the policy each recorded; report every input whose
        decisions differ from the recorded ones. Writes nothing."""
        return self.audits.replay_check(task_ids)

    @api
    def audit(
        self, task_id: TaskId, *, after: Position = 0, limit: Limit | None = None
    ) -> TaskAudit:
        """The task's replayed history — the events after version ``after``,
        at most ``limit`` of them — each with its actor and its link in the
        hash chain, and the state of the whole chain."""
        return self.audits.audit(task_id, after, limit)

    @api
    def export(self, task_ids: list[TaskId] | None = None) -> Iterator[dict[str, Any]]:
        """A self-contained audit record, one JSON-ready line at a time: a
        header, every event of the tasks (default: all) as stored with its
        hash and actor, task by task in task-id order, then a trailer with
        every task's event count and chain head (in the same order). Unknown
        tasks are refused at the call. ``devs verify-export`` checks such a
        file without a database."""
        return self.audits.export(task_ids)

    def reading_after(self, position: int | None) -> AbstractContextManager[None]:
        """Within this block, queries of the read models wait until they have
        folded log position ``position`` (read-your-writes: a position a
        command answered, ``written().position`` or HTTP's
        ``X-Devs-Position``), for at most ``DEVS_READ_WAIT`` seconds, then
        answer — or raise ``NotCaughtUp``. They wait for that position only,
        not for the end of the log, so other clients' writes never hold them
        up. ``None``: as outside the block (the end of the log as it is
        now). A position past the end of the log is ``PositionNotRecorded``
        at once (no wait): nothing has been recorded there."""
        return _reading(None if position is None else valid_position(position))

    @api
    def wait_for(
        self, position: Position, *, timeout: WaitSeconds | None = None
    ) -> int:
        """Wait until every read model has folded log position ``position``,
        at most ``timeout`` seconds (default ``DEVS_READ_WAIT``); return the
        position they reached. ``NotCaughtUp`` when the wait runs out;
        ``PositionNotRecorded`` at once, without waiting, when ``position``
        is past the end of the log (the log's own last position, which
        another process may just have moved: not the read models')."""
        wait = self.read_wait if timeout is None else timeout
        return self.read_models.wait_for(position, wait)

    @store_errors
    def catch_up(self) -> int:
        """Bring every read model up to the end of the log; return the position."""
        return self.read_models.catch_up()

    @store_errors
    def rebuild_projections(
        self,
        names: str | Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Replay the named read models (default: all) from position 0.

        They are built beside the stored ones and swapped in in one
        transaction: queries and commands go on meanwhile, and a rebuild that
        fails leaves the stored ones as they were. ``names`` is one read
        model's name or a sequence of them; ``progress``, if given, is called
        with (done, total) as it goes.
        """
        if isinstance(names, str):
            names = (names,)
        elif names is not None:
            if not isinstance(names, Sequence) or not all(
                isinstance(name, str) for name in names
            ):
                msg = f"names must be read model names (str), got {_shown(names)}"
                raise InvalidInput(msg, field="names")
            names = tuple(names)
        return self.read_models.rebuild(names, _progress(progress))

    # ============================================================== internals

    def _fresh(self) -> None:
        """Bring the read models up to what this query must see: the position
        of the ``reading_after`` block it runs in, else the end of the log."""
        position = READ_AFTER.get()
        if position is None:
            self.read_models.catch_up()
        else:
            self.read_models.wait_for(position, self.read_wait)

    def _lesson_strategies(self, task_id: str) -> tuple[str, ...]:
        """The task's failed strategies (held in memory by the read model), as
        current as :meth:`_fresh` makes them."""
        if READ_AFTER.get() is None:  # caught up and read, in one go
            strategies = self.read_models.current_lesson_strategies(task_id)
        else:
            self._fresh()
            strategies = self.read_models.lesson_strategies(task_id)
        if not strategies:  # a task with lessons exists; one without may not
            self._require_task(task_id)
        return strategies

    def _require_task(self, task_id: str) -> None:
        self._fresh()
        _found(self.read_models.task_entry(task_id), task_id)


@contextmanager
def _reading(position: int | None) -> Iterator[None]:
    token = READ_AFTER.set(position)
    try:
        yield
    finally:
        READ_AFTER.reset(token)


@validated
def _pending(idempotency_key: IdempotencyKey, request: RequestText) -> Pending:
    return Pending.of(idempotency_key, request)


@contextmanager
def _receipt(pending: Pending) -> Iterator[None]:
    """The commands of this block leave ``pending``'s receipt."""
    token = RECEIPT.set(pending)
    try:
        yield
    finally:
        RECEIPT.reset(token)


class _RaisedMeanwhile(Exception):
    """The run's budget was raised while its tasks were being stopped."""


def over_run_budget(task_id: str, run: Run) -> OverBudget:
    """The refusal to resume a task whose run spent its budget."""
    spend = run.spend()
    msg = (
        f"task {task_id!r} is in run {run.run_id!r}, which has spent its budget "
        f"(USD {spend.spent_usd:.6g} of {spend.budget_usd:g}): raise the run's "
        f"budget first (`devs budget --run {run.run_id} --usd N`, POST "
        f"/runs/{run.run_id}/budget, or raise_run_budget), then resume"
    )
    return OverBudget(msg, task_id=task_id)


def _shown(value: object) -> str:
    """A refused value, short (its type when its text says little)."""
    text = redact(repr(value))
    if len(text) > 80:
        text = f"{text[:79]}…"
    return f"{text} ({type(value).__name__})"


def _check_env(env: object) -> None:
    """``env`` must be ``None`` or a mapping of setting names to texts.

    The refusal names what is wrong, never a value (a setting may hold a
    password)."""
    if env is None:
        return
    if isinstance(env, (str, bytes, os.PathLike)):  # a store, meant as a path
        path = os.fsdecode(env)
        msg = (
            f"env must be a mapping of setting names to texts, got a "
            f"{type(env).__name__}: RecoveryService() takes no path; to open "
            f"the store at {path!r:.200}, call {_assembly().opening(path)}"
        )
        raise InvalidInput(msg, field="env")
    wrong = f"{type(env).__name__}"
    if isinstance(env, Mapping):
        wrong = next(
            (
                f"a setting name of type {type(name).__name__}"
                if not isinstance(name, str)
                else f"{name!r:.80} of type {type(value).__name__}"
                for name, value in env.items()
                if not isinstance(name, str) or not isinstance(value, str)
            ),
            "",
        )
        if not wrong:
            return
    msg = f"env must be a mapping of setting names to texts (str), got {wrong}"
    raise InvalidInput(msg, field="env")


def _progress(progress: object) -> Callable[[int, int], None] | None:
    """``progress`` if it is ``None`` or can be called; else ``InvalidInput``
    (before any work, not at its first call)."""
    if progress is None or callable(progress):
        return progress
    msg = (
        f"progress must be a function of (done, total) or None, got {_shown(progress)}"
    )
    raise InvalidInput(msg, field="progress")


def _found(value: T | None, task_id: str) -> T:
    if value is None:
        raise UnknownTask(task_id)
    return value


_USED: list[Assembly] = []
"""The assembly :func:`use_assembly` gave, if any."""


def use_assembly(assembly: Assembly) -> None:
    """Complete every service's env with ``assembly`` rather than the entry
    point's. ``devs.adapters.config``, which defines the package's own, calls
    it as it loads: a process that has the assembly at hand then skips the
    scan of every installed package's entry points (20 to 35 ms of each
    ``devs`` command here)."""
    _USED[:] = [assembly]
    _assembly.cache_clear()


@functools.cache
def _assembly() -> Assembly:
    """The :class:`Assembly` :func:`use_assembly` gave; else that of the
    ``devs.assembly`` entry point: exactly one must be installed
    (devs-recovery's own, ``devs.adapters.config:ASSEMBLY``)."""
    if _USED:
        return _USED[0]
    from importlib.metadata import entry_points

    found = entry_points(group=ASSEMBLY_GROUP)
    if len(found) != 1:
        names = ", ".join(sorted(point.value for point in found)) or "none"
        msg = (
            f"a RecoveryService needs exactly one {ASSEMBLY_GROUP!r} entry point "
            f"(installed with devs-recovery), found {names}: reinstall the package"
        )
        raise StoreError(msg)
    assembly: Assembly = next(iter(found)).load()
    return assembly
