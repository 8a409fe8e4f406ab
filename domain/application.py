"""``RecoveryService``: the eventsourcing application that referees agent tasks.

A thin service layer. A command validates its arguments (pydantic, see
:mod:`devs.domain.values`), gets the task and its run, lets the task decide,
lets the run react (:mod:`devs.domain.reactions`), saves both in one atomic
``save``, and answers with a decision built from the aggregates. The decision
log and the notifications are derived from the recorded events
(:mod:`devs.domain.journal`). Queries read the read models, which the service
is handed by topic from its ``env`` (``READ_MODELS_TOPIC``, SQLite by default)
through the ports of :mod:`devs.domain.ports`.

Aggregates are cached optimistically: a command decides on the cached task
without asking the store for newer events, and the store's unique
``(originator_id, originator_version)`` constraint catches a cache that another
process made stale; the command then drops its cached aggregates, reloads and
decides again. A command that would write nothing, or that refuses, first
makes sure it decided on the newest state.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import Any, ClassVar, TypeVar

from eventsourcing.application import (
    AggregateNotFoundError,
    Application,
    ProcessingEvent,
    Repository,
)
from eventsourcing.persistence import IntegrityError, Recording
from eventsourcing.utils import EnvType, get_topic, resolve_topic

from devs.domain import blacklist, journal
from devs.domain.chart import STATUS, TaskState, Trigger, destination
from devs.domain.decisions import (
    ActionResult,
    AttemptDecision,
    EntropyDecision,
    GateDecision,
    HistoryEntry,
    Notification,
    Outcome,
    TaskSummary,
)
from devs.domain.errors import (
    AlreadyExists,
    DevsError,
    InvalidInput,
    UnknownRun,
    UnknownTask,
)
from devs.domain.gate import GateResult, evaluate
from devs.domain.model import Aggregate
from devs.domain.names import HumanAction, Resolution
from devs.domain.policy import Policy, load_policy
from devs.domain.ports import (
    FailureReport,
    GateStatus,
    HandoffEntry,
    Lesson,
    PendingSession,
    ReadModels,
    RunState,
    TaskIndexEntry,
)
from devs.domain.reactions import react
from devs.domain.run import NodeOutcome, Run
from devs.domain.task import Task
from devs.domain.values import (
    Actor,
    AgentName,
    CommitId,
    Dag,
    EntropyScore,
    ErrorText,
    ExitCode,
    GateName,
    Limit,
    OutputText,
    Position,
    RcaSummary,
    Reason,
    RunId,
    Strategy,
    TaskId,
    Version,
    choice,
    validated,
)

DEFAULT_DB = "devs_state.sqlite"
DB_ENV = "DEVS_DB"
READ_MODELS_TOPIC = "READ_MODELS_TOPIC"
COMMAND_ATTEMPTS = 10
CONFLICT_BACKOFF_SECONDS = 0.002
LOCK_STRIPES = 64

T = TypeVar("T")

_STATE_OUTCOMES = {
    TaskState.GATE_FAILED: Outcome.STAY,
    TaskState.RUNNING: Outcome.STAY,
    TaskState.PAUSED: Outcome.PAUSE,
    TaskState.ESCALATION: Outcome.ESCALATE,
    TaskState.HAND_OFF: Outcome.HAND_OFF,
}


def replay(aggregate: Any, domain_events: Iterable[Any]) -> Any:
    """Apply ``domain_events`` to ``aggregate`` in order (for snapshots).

    eventsourcing's default projector asserts each event against a runtime
    ``Protocol``, which costs more than applying the event; ours are all
    aggregate events.
    """
    for domain_event in domain_events:
        aggregate = domain_event.mutate(aggregate)
    return aggregate


class _Stale(Exception):
    """The cached aggregates were behind the store: reload and decide again."""


class _StripedLocks:
    """Commands on one aggregate in one process take turns (threads share the
    cached aggregate). Task locks are always taken before run locks."""

    def __init__(self) -> None:
        self._tasks = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self._runs = [threading.Lock() for _ in range(LOCK_STRIPES)]

    def task(self, task_id: str) -> threading.Lock:
        return self._tasks[hash(task_id) % LOCK_STRIPES]

    def run(self, run_id: str | None) -> AbstractContextManager[object]:
        if run_id is None:
            return nullcontext()
        return self._runs[hash(run_id) % LOCK_STRIPES]


class RecoveryService(Application[str]):
    """Referee for agent tasks: attempts, gates, entropy, lessons, humans."""

    name = "RecoveryService"
    env: ClassVar[dict[str, str]] = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "ORIGINATOR_ID_TYPE": "text",
        "MAPPER_TOPIC": "devs.adapters.persistence:PydanticMapper",
        "TRANSCODER_TOPIC": "devs.adapters.persistence:OrjsonTranscoder",
        READ_MODELS_TOPIC: "devs.projections.sqlite:SQLiteReadModels",
        "AGGREGATE_CACHE_MAXSIZE": "1000",
        "AGGREGATE_CACHE_FASTFORWARD": "n",
        "DEEPCOPY_FROM_AGGREGATE_CACHE": "n",
    }
    snapshotting_intervals: ClassVar[dict[type[Any], int]] = {Task: 200, Run: 200}
    snapshotting_projectors: ClassVar[dict[type[Any], Any]] = {
        Task: replay,
        Run: replay,
    }

    def __init__(self, env: EnvType | None = None, *, policy: Policy | None = None):
        super().__init__(env)
        self.policy = policy if policy is not None else load_policy(self.env)
        self._locks = _StripedLocks()
        # Queries read aggregates as stored, never a cached object a command in
        # another thread may be deciding on.
        self._store = Repository(self.events, snapshot_store=self.snapshots)
        factory: Callable[[RecoveryService], ReadModels] = resolve_topic(
            self.env[READ_MODELS_TOPIC]
        )
        self.read_models = factory(self)

    def construct_env(self, name: str, env: EnvType | None = None) -> Any:
        environment = super().construct_env(name, env)
        if not environment.get("SQLITE_DBNAME"):
            environment["SQLITE_DBNAME"] = environment.get(DB_ENV) or DEFAULT_DB
        return environment

    @property
    def db_path(self) -> str:
        return str(self.env.get("SQLITE_DBNAME"))

    def close(self) -> None:
        self.read_models.close()
        super().close()

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[str]]:
        """eventsourcing's ``save``, collecting our aggregates' events directly.

        The library collects each object's events behind two runtime-``Protocol``
        ``isinstance`` checks, which on Python 3.11 cost about 50 us, an eighth
        of a durable decision (docs/performance.md). Our own aggregates are
        collected as the library would, then recorded, snapshotted and notified
        by its own steps; anything else goes to the library's ``save``.
        """
        if not all(obj is None or isinstance(obj, Aggregate) for obj in objs):
            return super().save(*objs, **kwargs)
        processing_event: ProcessingEvent[str] = ProcessingEvent()
        for aggregate in objs:
            if aggregate is not None:
                processing_event.events.extend(aggregate.collect_events())
                processing_event.aggregates[aggregate.id] = aggregate
        processing_event.saved_kwargs.update(kwargs)
        recordings = self._record(processing_event)
        self._take_snapshots(processing_event)
        self._notify(recordings)
        self.notify(processing_event.events)  # the library's deprecated hook
        return recordings

    # =============================================================== commands

    @validated
    def start_run(self, run_id: RunId, dag: Dag) -> RunState:
        """Start a run over ``dag`` (node -> prerequisites); nodes are task ids."""
        run = Run.start(run_id, dag)
        try:
            self._commit(run)
        except IntegrityError:
            msg = f"run {run_id!r} was already started"
            raise AlreadyExists(msg) from None
        return _run_state(run)

    @validated
    def start_task(
        self,
        task_id: TaskId,
        *,
        run_id: RunId | None = None,
        agent: AgentName | None = None,
        last_commit: CommitId | None = None,
    ) -> TaskSummary:
        """Start refereeing a task, under the policy in force now."""
        for attempt in self._attempts():
            with self._locks.task(task_id), self._locks.run(run_id):
                if self._find_task(task_id) is not None:
                    msg = f"task {task_id!r} was already started"
                    raise AlreadyExists(msg)
                run = self._get_run(run_id) if run_id is not None else None
                task = Task(
                    task_id=task_id,
                    run_id=run_id,
                    agent=agent,
                    last_commit=last_commit,
                    policy=self.policy,
                )
                try:
                    self._decide_and_save(task, run, lambda _: None)
                except _Stale:
                    pass
                else:
                    return _summary(task)
            attempt.retry()
        raise AssertionError  # pragma: no cover

    @validated
    def begin_attempt(self, task_id: TaskId, strategy: Strategy) -> AttemptDecision:
        """Check a strategy against the task's lessons before any LLM call."""
        with self._command(task_id, lambda t: t.begin_attempt(strategy)) as decided:
            matched, task, _ = decided
            return _attempt_decision(task, matched)

    @validated
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

        with self._command(task_id, decide) as (_, task, run):
            return _gate_decision(task, run, result, gate)

    @validated
    def report_entropy(self, task_id: TaskId, score: EntropyScore) -> EntropyDecision:
        """Pause the task for a human when the agent's entropy reaches the limit."""
        with self._command(task_id, lambda t: t.report_entropy(score)) as decided:
            session, task, _ = decided
            return EntropyDecision(
                task_id=task.task_id,
                score=score,
                threshold=task.policy.hitl_entropy_threshold,
                triggered=session is not None,
                session_id=session.session_id if session else None,
                state=task.state,
            )

    @validated
    def log_lesson(
        self, task_id: TaskId, failed_strategy: Strategy, rca_summary: RcaSummary
    ) -> Lesson:
        """Record what a root-cause analysis learned; the strategy is blacklisted."""
        with self._command(
            task_id, lambda t: t.log_lesson(failed_strategy, rca_summary)
        ) as (logged, _, _):
            pass
        return Lesson(
            task_id=task_id,
            failed_strategy=logged.strategy,
            rca_summary=logged.rca_summary,
            logged_at=logged.timestamp,
        )

    @validated
    def resume(self, task_id: TaskId, *, actor: Actor, reason: Reason) -> ActionResult:
        """A human lets the agent go on after an escalation or a pause."""
        with self._command(task_id, lambda t: t.resume(actor=actor, reason=reason)) as (
            session_id,
            task,
            run,
        ):
            return _acted(task, run, HumanAction.RESUME, actor, reason, session_id)

    @validated
    def rewind(
        self,
        task_id: TaskId,
        *,
        actor: Actor,
        reason: Reason,
        to_commit: CommitId | None = None,
    ) -> ActionResult:
        """A human sends the task back to work from a commit (default: its start)."""
        with self._command(
            task_id, lambda t: t.rewind(actor=actor, reason=reason, to_commit=to_commit)
        ) as (session_id, task, run):
            return _acted(
                task,
                run,
                HumanAction.REWIND,
                actor,
                reason,
                session_id,
                to_commit=task.last_commit,
            )

    @validated
    def skip(self, task_id: TaskId, *, actor: Actor, reason: Reason) -> ActionResult:
        """A human skips the task; its run moves on."""
        with self._command(task_id, lambda t: t.skip(actor=actor, reason=reason)) as (
            session_id,
            task,
            run,
        ):
            return _acted(task, run, HumanAction.SKIP, actor, reason, session_id)

    @validated
    def claim_handoff(self, task_id: TaskId, *, actor: Actor) -> ActionResult:
        """A human takes a handed-off task from the queue."""
        with self._command(task_id, lambda t: t.claim_handoff(actor=actor)) as (
            _,
            task,
            _,
        ):
            return _acted(task, None, HumanAction.CLAIM, actor, None, None)

    @validated
    def resolve_handoff(
        self, task_id: TaskId, *, actor: Actor, resolution: str, reason: Reason
    ) -> ActionResult:
        """A human ends a hand-off: ``return`` to the agent, ``complete`` or ``skip``.

        The hand-off must have been claimed first.
        """
        chosen = Resolution(choice("resolution", resolution, list(Resolution)))
        with self._command(
            task_id,
            lambda t: t.resolve_handoff(actor=actor, resolution=chosen, reason=reason),
        ) as (_, task, run):
            return _acted(
                task, run, HumanAction.RESOLVE, actor, reason, None, resolution=chosen
            )

    # ================================================================ queries

    @validated
    def task(self, task_id: TaskId) -> TaskSummary:
        """The task as its events say now."""
        return _summary(self._stored_task(task_id))

    @validated
    def require_gate_allowed(self, task_id: TaskId) -> TaskSummary:
        """The task, if it takes a gate result now; else ``IllegalTransition``.

        Lets a caller refuse before it runs a (possibly long) gate command.
        """
        summary = _summary(self._stored_task(task_id))
        destination(Trigger.FAIL_GATE, summary.state)
        return summary

    @validated
    def state_at(self, task_id: TaskId, version: Version) -> TaskSummary:
        """The task as it was right after event number ``version``."""
        task = self._stored_task(task_id)
        if not 1 <= version <= task.version:
            msg = (
                f"version {version} is out of range [1, {task.version}] "
                f"for task {task.task_id!r}"
            )
            raise InvalidInput(msg)
        past: Task = self._store.get(task.id, version=version)
        return _summary(past)

    @validated
    def history(self, task_id: TaskId) -> list[HistoryEntry]:
        """Every event of the task, replayed in order, with the state after each."""
        task: Task | None = None
        entries: list[HistoryEntry] = []
        for domain_event in self.events.get(Task.create_id(task_id)):
            task = domain_event.mutate(task)  # type: ignore[attr-defined]
            assert task is not None
            entries.append(
                HistoryEntry(
                    version=domain_event.originator_version,
                    event=type(domain_event).__name__,
                    timestamp=domain_event.timestamp,  # type: ignore[attr-defined]
                    changes=domain_event.model_dump(  # type: ignore[attr-defined]
                        mode="json",
                        exclude={
                            "originator_id",
                            "originator_version",
                            "timestamp",
                            "originator_topic",
                        },
                    ),
                    state=task.state,
                    consecutive_failures=task.consecutive_failures,
                )
            )
        if not entries:
            raise UnknownTask(task_id)
        return entries

    @validated
    def tasks(
        self, *, state: str | None = None, run_id: RunId | None = None
    ) -> list[TaskIndexEntry]:
        """Tasks from the index, optionally of one state and/or one run."""
        if state is not None:
            state = choice("state", state, list(TaskState))
        self.read_models.catch_up()
        return self.read_models.task_entries(state=state, run_id=run_id)

    @validated
    def waiting_tasks(self) -> list[TaskIndexEntry]:
        """Tasks that wait for a human (escalated, paused or handed off)."""
        self.read_models.catch_up()
        return [
            entry
            for state in (TaskState.ESCALATION, TaskState.PAUSED, TaskState.HAND_OFF)
            for entry in self.read_models.task_entries(state=state)
        ]

    @validated
    def gate_status(self, task_id: TaskId) -> GateStatus:
        self.read_models.catch_up()
        return _found(self.read_models.gate_status(task_id), task_id)

    @validated
    def failure_report(self, task_id: TaskId) -> FailureReport:
        self.read_models.catch_up()
        return _found(self.read_models.failure_report(task_id), task_id)

    @validated
    def lessons(self, task_id: TaskId) -> list[Lesson]:
        self._require_task(task_id)
        return self.read_models.lessons(task_id)

    @validated
    def is_strategy_blacklisted(self, task_id: TaskId, candidate: Strategy) -> bool:
        strategies = self._lesson_strategies(task_id)
        return blacklist.find_match(candidate, strategies) is not None

    @validated
    def blacklist_directive(self, task_id: TaskId) -> str:
        return blacklist.directive(self._lesson_strategies(task_id))

    def pending_sessions(self) -> list[PendingSession]:
        self.read_models.catch_up()
        return self.read_models.pending_sessions()

    def handoff_queue(self) -> list[HandoffEntry]:
        self.read_models.catch_up()
        return self.read_models.handoff_queue()

    @validated
    def run_state(self, run_id: RunId) -> RunState:
        self.read_models.catch_up()
        found = self.read_models.run_state(run_id)
        if found is None:
            raise UnknownRun(run_id)
        return found

    @validated
    def notifications(
        self, *, after: Position = 0, limit: Limit = 100
    ) -> list[Notification]:
        """Escalations, pauses, hand-offs and blocked attempts, in log order."""
        records = self.recorder.select_notifications(
            start=after + 1,
            limit=limit,
            topics=[get_topic(cls) for cls in journal.NOTIFYING_EVENTS],
        )
        found = (
            journal.notification(self.mapper.to_domain_event(record), record.id)
            for record in records
        )
        return [n for n in found if n is not None]

    def catch_up(self) -> int:
        """Bring every read model up to the end of the log; return the position."""
        return self.read_models.catch_up()

    def rebuild_projections(
        self,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Drop the named read models (default: all) and replay them from 0."""
        return self.read_models.rebuild(names, progress)

    # ============================================================== internals

    @contextmanager
    def _command(
        self, task_id: str, decide: Callable[[Task], T]
    ) -> Iterator[tuple[T, Task, Run | None]]:
        """Get the task and its run, let the task decide, let the run react, save.

        Yields what ``decide`` returned with the saved task and run, still
        holding their locks: the caller builds its answer from them before
        another thread can change them. Retries, on fresh aggregates, a
        command that lost a race to another writer or decided on a stale cache.
        """
        for attempt in self._attempts():
            with self._locks.task(task_id):
                task = self._get_task(task_id)
                with self._locks.run(task.run_id):
                    run = self._run_of(task)
                    try:
                        outcome = self._decide_and_save(task, run, decide)
                        saved = True
                    except _Stale:
                        saved = False
                    if saved:
                        yield outcome, task, run
                        return
            attempt.retry()

    def _decide_and_save(
        self, task: Task, run: Run | None, decide: Callable[[Task], T]
    ) -> T:
        try:
            outcome = decide(task)
            new_events = list(task.pending_events)
            if run is not None:
                react(run, new_events)
            if not new_events and self._is_stale(task, run):
                raise _Stale
            self._commit(task, run)
        except IntegrityError:
            self._forget(task, run)
            raise _Stale from None
        except DevsError:
            self._forget(task, run)
            if self._is_stale(task, run):
                raise _Stale from None
            raise
        except BaseException:
            self._forget(task, run)
            raise
        return outcome

    def _commit(self, *aggregates: Task | Run | None) -> list[Recording[str]]:
        recordings = self.save(*aggregates)
        for recording in recordings:
            journal.record(recording.domain_event, recording.notification.id)
        return recordings

    def _attempts(self) -> Iterator[_Attempt]:
        for number in range(COMMAND_ATTEMPTS):
            yield _Attempt(number)
        msg = f"gave up after {COMMAND_ATTEMPTS} conflicting writes"
        raise IntegrityError(msg)

    def _is_stale(self, task: Task, run: Run | None) -> bool:
        """Whether the store holds events newer than these (cached) aggregates."""
        return any(
            self.recorder.select_events(aggregate.id, gt=aggregate.version, limit=1)
            for aggregate in (task, run)
            if aggregate is not None and aggregate.version > 0
        )

    def _forget(self, *aggregates: Task | Run | None) -> None:
        """Drop aggregates from the cache: the next get reloads them."""
        cache = self.repository.cache
        if cache is None:
            return
        for aggregate in aggregates:
            if aggregate is not None:
                with suppress(KeyError):
                    cache.get(aggregate.id, evict=True)

    def _find_task(self, task_id: str) -> Task | None:
        try:
            task: Task = self.repository.get(Task.create_id(task_id))
        except AggregateNotFoundError:
            return None
        return task

    def _get_task(self, task_id: str) -> Task:
        task = self._find_task(task_id)
        if task is None:
            raise UnknownTask(task_id)
        return task

    def _stored_task(self, task_id: str) -> Task:
        try:
            task: Task = self._store.get(Task.create_id(task_id))
        except AggregateNotFoundError:
            raise UnknownTask(task_id) from None
        return task

    def _get_run(self, run_id: str) -> Run:
        try:
            run: Run = self.repository.get(Run.create_id(run_id))
        except AggregateNotFoundError:
            raise UnknownRun(run_id) from None
        return run

    def _run_of(self, task: Task) -> Run | None:
        return self._get_run(task.run_id) if task.run_id is not None else None

    def _lesson_strategies(self, task_id: str) -> tuple[str, ...]:
        """The task's failed strategies (held in memory by the read model)."""
        self.read_models.catch_up()
        strategies = self.read_models.lesson_strategies(task_id)
        if not strategies:  # a task with lessons exists; one without may not
            _found(self.read_models.task_entry(task_id), task_id)
        return strategies

    def _require_task(self, task_id: str) -> None:
        self.read_models.catch_up()
        _found(self.read_models.task_entry(task_id), task_id)


class _Attempt:
    """One try of a command; ``retry()`` waits a random, growing moment.

    eventsourcing's own ``retry`` waits a near-constant time, which keeps two
    writers of one task in lock-step.
    """

    def __init__(self, number: int) -> None:
        self.number = number

    def retry(self) -> None:
        time.sleep(random.uniform(0, CONFLICT_BACKOFF_SECONDS * 2**self.number))


def _attempt_decision(task: Task, matched: str | None) -> AttemptDecision:
    stopped = matched is not None
    return AttemptDecision(
        task_id=task.task_id,
        proceed=not stopped,
        blacklisted=stopped,
        matched_strategy=matched,
        directive=blacklist.directive(task.lessons),
        state=task.state,
        consecutive_failures=task.consecutive_failures,
        outcome=_STATE_OUTCOMES[task.state] if stopped else None,
        session_id=task.pending_session_id,
        report=task.report() if task.state is TaskState.ESCALATION else None,
    )


def _gate_decision(
    task: Task, run: Run | None, result: GateResult, gate: str | None
) -> GateDecision:
    next_node = run.next_node() if run is not None else None
    if result.passed:
        outcome = Outcome.ADVANCE if next_node is not None else Outcome.COMPLETE
    else:
        outcome = _STATE_OUTCOMES[task.state]
    last_failure = task.failures[-1] if not result.passed else None
    return GateDecision(
        task_id=task.task_id,
        gate=gate,
        passed=result.passed,
        reason=result.reason,
        exit_code=result.exit_code,
        outcome=outcome,
        state=task.state,
        consecutive_failures=task.consecutive_failures,
        next_node=next_node if result.passed else None,
        session_id=task.pending_session_id,
        report=task.report() if outcome is Outcome.ESCALATE else None,
        error_hash=last_failure.error_hash if last_failure else None,
    )


def _found(value: T | None, task_id: str) -> T:
    if value is None:
        raise UnknownTask(task_id)
    return value


def _acted(
    task: Task,
    run: Run | None,
    action: HumanAction,
    actor: str,
    reason: str | None,
    session_id: str | None,
    *,
    to_commit: str | None = None,
    resolution: Resolution | None = None,
) -> ActionResult:
    return ActionResult(
        task_id=task.task_id,
        action=action,
        actor=actor,
        reason=reason,
        state=task.state,
        resolved_session_id=session_id,
        resolution=resolution,
        to_commit=to_commit,
        next_node=run.next_node() if run is not None else None,
        run_status=run.status if run is not None else None,
    )


def _summary(task: Task) -> TaskSummary:
    return TaskSummary(
        task_id=task.task_id,
        run_id=task.run_id,
        agent=task.agent,
        state=task.state,
        status=STATUS[TaskState(task.state)],
        consecutive_failures=task.consecutive_failures,
        policy=task.policy,
        starting_commit=task.starting_commit,
        last_commit=task.last_commit,
        current_strategy=task.current_strategy,
        failure_history=tuple(task.failures),
        lessons=tuple(task.lessons),
        pending_session=task.pending_session,
        handoff=task.handoff,
        claimed_by=task.claimed_by,
        version=task.version,
        created_on=task.created_on,
        modified_on=task.modified_on,
    )


def _run_state(run: Run) -> RunState:
    return RunState(
        run_id=run.run_id,
        status=run.status,
        dag=dict(run.dag),
        order=run.order,
        started=tuple(run.started),
        completed=tuple(
            n for n, o in run.settled.items() if o == NodeOutcome.COMPLETED
        ),
        skipped=tuple(n for n, o in run.settled.items() if o == NodeOutcome.SKIPPED),
        ready=run.ready_nodes(),
        paused_by=tuple(run.paused_by),
        updated_at=run.modified_on,
    )
