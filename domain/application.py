"""``RecoveryService``: the eventsourcing application that referees agent tasks.

Commands validate their input, load the task (and its run), let the aggregates
decide, save task and run events in one atomic ``save``, log the decision and
return a pydantic decision. Queries read the projections, which catch up from the
notification log first (see :mod:`devs.projections.catchup`).
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, ParamSpec, TypeVar

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError
from eventsourcing.sqlite import SQLiteFactory
from eventsourcing.utils import EnvType

from devs.domain import blacklist, values
from devs.domain.chart import STATUS, WAITING, TaskState
from devs.domain.decision_log import log_decision
from devs.domain.decisions import (
    ActionResult,
    AttemptDecision,
    EntropyDecision,
    FailureReport,
    GateDecision,
    GateStatus,
    HandoffEntry,
    HistoryEntry,
    Lesson,
    Notification,
    Outcome,
    PendingSession,
    RunState,
    TaskIndexEntry,
    TaskSummary,
)
from devs.domain.errors import (
    AlreadyExists,
    DevsError,
    InvalidInput,
    UnknownRun,
    UnknownTask,
)
from devs.domain.gate import evaluate
from devs.domain.policy import Policy, load_policy
from devs.domain.redaction import excerpt
from devs.domain.run import Run
from devs.domain.task import Resolution, Task, task_id_of
from devs.projections.catchup import ReadModels
from devs.projections.views import PROJECTIONS, SQLITE_VIEWS

DEFAULT_DB = "devs_state.sqlite"
DB_ENV = "DEVS_DB"
COMMAND_ATTEMPTS = 10
CONFLICT_BACKOFF_SECONDS = 0.002

P = ParamSpec("P")
R = TypeVar("R")

_STATE_OUTCOMES = {
    TaskState.GATE_FAILED: Outcome.STAY,
    TaskState.RUNNING: Outcome.STAY,
    TaskState.PAUSED: Outcome.PAUSE,
    TaskState.ESCALATION: Outcome.ESCALATE,
    TaskState.HAND_OFF: Outcome.HAND_OFF,
}

_STOP_EVENTS = {
    TaskState.ESCALATION: "ESCALATION_TRIGGERED",
    TaskState.HAND_OFF: "HAND_OFF_REQUIRED",
    TaskState.PAUSED: "TASK_PAUSED",
}

_NOTIFYING_EVENTS: dict[type[Any], str] = {
    Task.Escalated: "USER_ESCALATION",
    Task.Paused: "TASK_PAUSED",
    Task.HandedOff: "HAND_OFF_REQUIRED",
    Task.BlacklistedStrategyAttempted: "task:blacklisted_strategy_attempted",
}


def _retry_on_conflict(command: Callable[P, R]) -> Callable[P, R]:
    """Re-run a command that lost a race to another writer of the same task.

    The store refused an event version another process wrote first; the next
    attempt loads the newer state and decides again. Waits are random and grow
    exponentially (eventsourcing's ``retry`` waits a near-constant time, which
    keeps two writers in lock-step).
    """

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        for attempt in range(COMMAND_ATTEMPTS):
            try:
                return command(*args, **kwargs)
            except IntegrityError:
                if attempt == COMMAND_ATTEMPTS - 1:
                    raise
                time.sleep(random.uniform(0, CONFLICT_BACKOFF_SECONDS * 2**attempt))
        raise AssertionError  # pragma: no cover

    return wrapper


class RecoveryService(Application[str]):
    """Referee for agent tasks: attempts, gates, entropy, lessons, humans."""

    name = "RecoveryService"
    env: ClassVar[dict[str, str]] = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "ORIGINATOR_ID_TYPE": "text",
        "MAPPER_TOPIC": "devs.adapters.persistence:PydanticMapper",
        "TRANSCODER_TOPIC": "devs.adapters.persistence:OrjsonTranscoder",
        "AGGREGATE_CACHE_MAXSIZE": "1000",
    }
    snapshotting_intervals: ClassVar[dict[type[Any], int]] = {Task: 50, Run: 50}

    def __init__(self, env: EnvType | None = None, *, policy: Policy | None = None):
        super().__init__(env)
        if not isinstance(self.factory, SQLiteFactory):
            msg = (
                f"persistence module {self.env.get('PERSISTENCE_MODULE')!r} is not "
                "supported; use eventsourcing.sqlite"
            )
            raise DevsError(msg)
        self.policy = policy if policy is not None else load_policy(self.env)
        self.read_models = ReadModels(
            self,
            [
                projection_class(
                    view=self.factory.tracking_recorder(
                        SQLITE_VIEWS[projection_class.name]
                    )
                )
                for projection_class in PROJECTIONS
            ],
        )

    def construct_env(self, name: str, env: EnvType | None = None) -> Any:
        environment = super().construct_env(name, env)
        if not environment.get("SQLITE_DBNAME"):
            environment["SQLITE_DBNAME"] = environment.get(DB_ENV) or DEFAULT_DB
        return environment

    @property
    def db_path(self) -> str:
        return str(self.env.get("SQLITE_DBNAME"))

    def save(self, *objs: Any, **kwargs: Any) -> Any:
        """Save, then cache the saved aggregates.

        eventsourcing caches nothing on save when it fast-forwards cached
        aggregates; but the aggregate just saved is the newest state this process
        knows, so caching it spares the next command from replaying its own
        events. Fast-forwarding still picks up other processes' writes.
        """
        recordings = super().save(*objs, **kwargs)
        cache = self.repository.cache
        if cache is not None:
            for obj in objs:
                if isinstance(obj, Task | Run):
                    cache.put(obj.id, obj)
        return recordings

    # =============================================================== commands

    def start_run(self, run_id: str, dag: Mapping[str, Sequence[str]]) -> RunState:
        """Start a run over ``dag`` (node -> prerequisites); nodes are task ids."""
        run_id = values.identifier("run_id", run_id)
        graph = values.dag(dag)
        run = Run.start(run_id, graph)
        try:
            self.save(run)
        except IntegrityError:
            msg = f"run {run_id!r} was already started"
            raise AlreadyExists(msg) from None
        log_decision("RUN_STARTED", run_id=run_id, nodes=len(graph))
        return _run_state(run)

    @_retry_on_conflict
    def start_task(
        self,
        task_id: str,
        *,
        run_id: str | None = None,
        agent: str | None = None,
        last_commit: str | None = None,
    ) -> TaskSummary:
        """Start refereeing a task, under the policy in force now."""
        task_id = values.identifier("task_id", task_id)
        run_id = values.optional_identifier("run_id", run_id)
        if agent is not None:
            agent = values.text(
                "agent", agent, max_len=values.NAME_MAX, allow_newlines=False
            )
        last_commit = values.optional_identifier("last_commit", last_commit)
        if self._find_task(task_id) is not None:
            msg = f"task {task_id!r} was already started"
            raise AlreadyExists(msg)
        run = self._get_run(run_id) if run_id is not None else None
        if run is not None:
            run.start_node(task_id)
        task = Task(
            task_id=task_id,
            run_id=run_id,
            agent=agent,
            last_commit=last_commit,
            policy=self.policy,
        )
        # A conflict (this task, or its run, written meanwhile) retries: the
        # next attempt finds the task and refuses, or decides on the newer run.
        self.save(task, run)
        log_decision("TASK_STARTED", task_id=task_id, run_id=run_id, agent=agent)
        return _summary(task)

    @_retry_on_conflict
    def begin_attempt(self, task_id: str, strategy: str) -> AttemptDecision:
        """Check a strategy against the task's lessons before any LLM call."""
        strategy = values.text("strategy", strategy, max_len=values.STRATEGY_MAX)
        task = self._get_task(task_id)
        run = self._run_of(task)
        matched = task.begin_attempt(strategy)
        if matched is not None:
            self._pause_run_if_waiting(task, run)
        self.save(task, run)
        outcome = None if matched is None else _STATE_OUTCOMES[task.state]
        decision = AttemptDecision(
            task_id=task.task_id,
            proceed=matched is None,
            blacklisted=matched is not None,
            matched_strategy=matched,
            directive=blacklist.directive(task.lessons),
            state=task.state,
            consecutive_failures=task.consecutive_failures,
            outcome=outcome,
            session_id=task.pending_session_id,
            report=task.report() if task.state is TaskState.ESCALATION else None,
        )
        if matched is not None:
            self._log_stop(
                task,
                "task:blacklisted_strategy_attempted",
                matched_strategy=excerpt(matched, 200),
            )
            self._log_stop(task, None)
        else:
            log_decision("ATTEMPT_BEGAN", task_id=task.task_id, state=task.state)
        return decision

    @_retry_on_conflict
    def record_gate(
        self,
        task_id: str,
        exit_code: int | None,
        *,
        gate: str | None = None,
        strategy: str | None = None,
        error: str | None = None,
        output: str | None = None,
    ) -> GateDecision:
        """Judge a gate by its exit code and climb (or reset) the failure ladder."""
        code = values.exit_code(exit_code)
        if gate is not None:
            gate = values.text(
                "gate", gate, max_len=values.NAME_MAX, allow_newlines=False
            )
        if strategy is not None:
            strategy = values.text("strategy", strategy, max_len=values.STRATEGY_MAX)
        if error is not None:
            error = values.text(
                "error", error, max_len=values.ERROR_MAX, allow_empty=True
            )
        if output is not None:
            output = values.text(
                "output", output, max_len=values.OUTPUT_MAX, allow_empty=True
            )
        task = self._get_task(task_id)
        run = self._run_of(task)
        result = evaluate(code)
        task.record_gate(
            result, gate=gate, strategy=strategy, error=error, output=output
        )
        next_node: str | None = None
        if result.passed:
            if run is not None:
                run.settle(task.task_id, "completed")
                next_node = run.next_node()
            outcome = Outcome.ADVANCE if next_node is not None else Outcome.COMPLETE
        else:
            self._pause_run_if_waiting(task, run)
            outcome = _STATE_OUTCOMES[task.state]
        self.save(task, run)
        last_failure = task.failures[-1] if not result.passed else None
        decision = GateDecision(
            task_id=task.task_id,
            gate=gate,
            passed=result.passed,
            reason=result.reason,
            exit_code=result.exit_code,
            outcome=outcome,
            state=task.state,
            consecutive_failures=task.consecutive_failures,
            next_node=next_node,
            session_id=task.pending_session_id,
            report=task.report() if outcome is Outcome.ESCALATE else None,
            error_hash=last_failure.error_hash if last_failure else None,
        )
        if result.passed:
            log_decision(
                "GATE_PASSED",
                task_id=task.task_id,
                gate=gate,
                outcome=outcome,
                next_node=next_node,
                run_id=task.run_id,
            )
        else:
            log_decision(
                "GATE_FAILED",
                task_id=task.task_id,
                gate=gate,
                reason=result.reason,
                exit_code=result.exit_code,
                consecutive_failures=task.consecutive_failures,
                error_hash=decision.error_hash,
            )
            if outcome is not Outcome.STAY:
                self._log_stop(task, None)
        return decision

    @_retry_on_conflict
    def report_entropy(self, task_id: str, score: float) -> EntropyDecision:
        """Pause the task for a human when the agent's entropy reaches the limit."""
        value = values.entropy_score(score)
        task = self._get_task(task_id)
        run = self._run_of(task)
        pending_before = task.pending_session
        session = task.report_entropy(value)
        if session is not None and pending_before is None:
            self._pause_run_if_waiting(task, run)
        if task.pending_events:
            self.save(task, run)
        decision = EntropyDecision(
            task_id=task.task_id,
            score=value,
            threshold=task.policy.hitl_entropy_threshold,
            triggered=session is not None,
            session_id=session.session_id if session else None,
            state=task.state,
        )
        if session is not None and pending_before is None:
            self._log_stop(task, "ENTROPY_LIMIT", entropy_score=value)
        else:
            log_decision(
                "ENTROPY_MEASURED",
                task_id=task.task_id,
                score=value,
                triggered=decision.triggered,
                session_id=decision.session_id,
            )
        return decision

    @_retry_on_conflict
    def log_lesson(
        self, task_id: str, failed_strategy: str, rca_summary: str
    ) -> Lesson:
        """Record what a root-cause analysis learned; the strategy is blacklisted."""
        failed_strategy = values.text(
            "failed_strategy", failed_strategy, max_len=values.STRATEGY_MAX
        )
        rca_summary = values.text(
            "rca_summary", rca_summary, max_len=values.SUMMARY_MAX
        )
        task = self._get_task(task_id)
        task.log_lesson(failed_strategy, rca_summary)
        logged = task.pending_events[-1]
        assert isinstance(logged, Task.LessonLogged)
        self.save(task)
        log_decision("LESSON_LOGGED", task_id=task.task_id, lessons=len(task.lessons))
        return Lesson(
            task_id=task.task_id,
            failed_strategy=logged.strategy,
            rca_summary=logged.rca_summary,
            logged_at=logged.timestamp,
        )

    @_retry_on_conflict
    def resume(self, task_id: str, *, actor: str, reason: str) -> ActionResult:
        """A human lets the agent go on after an escalation or a pause."""
        actor, reason = _actor(actor), _reason(reason)
        task = self._get_task(task_id)
        run = self._run_of(task)
        session_id = task.pending_session_id
        task.resume(actor=actor, reason=reason)
        if run is not None:
            run.resume(task.task_id)
        self.save(task, run)
        return self._acted(task, run, "resume", actor, reason, session_id=session_id)

    @_retry_on_conflict
    def rewind(
        self, task_id: str, *, actor: str, reason: str, to_commit: str | None = None
    ) -> ActionResult:
        """A human sends the task back to work from a commit (default: its start)."""
        actor, reason = _actor(actor), _reason(reason)
        to_commit = values.optional_identifier("to_commit", to_commit)
        task = self._get_task(task_id)
        run = self._run_of(task)
        session_id = task.pending_session_id
        task.rewind(actor=actor, reason=reason, to_commit=to_commit)
        if run is not None:
            run.resume(task.task_id)
        self.save(task, run)
        return self._acted(
            task,
            run,
            "rewind",
            actor,
            reason,
            session_id=session_id,
            to_commit=task.last_commit,
        )

    @_retry_on_conflict
    def skip(self, task_id: str, *, actor: str, reason: str) -> ActionResult:
        """A human skips the task; its run moves on."""
        actor, reason = _actor(actor), _reason(reason)
        task = self._get_task(task_id)
        run = self._run_of(task)
        session_id = task.pending_session_id
        task.skip(actor=actor, reason=reason)
        if run is not None:
            run.settle(task.task_id, "skipped")
        self.save(task, run)
        return self._acted(task, run, "skip", actor, reason, session_id=session_id)

    @_retry_on_conflict
    def claim_handoff(self, task_id: str, *, actor: str) -> ActionResult:
        """A human takes a handed-off task from the queue."""
        actor = _actor(actor)
        task = self._get_task(task_id)
        task.claim_handoff(actor=actor)
        self.save(task)
        return self._acted(task, None, "claim", actor, None)

    @_retry_on_conflict
    def resolve_handoff(
        self, task_id: str, *, actor: str, resolution: str, reason: str
    ) -> ActionResult:
        """A human ends a hand-off: ``return`` to the agent, ``complete`` or ``skip``.

        The hand-off must have been claimed first.
        """
        actor, reason = _actor(actor), _reason(reason)
        chosen = Resolution(
            values.choice("resolution", resolution, [r.value for r in Resolution])
        )
        task = self._get_task(task_id)
        run = self._run_of(task)
        task.resolve_handoff(actor=actor, resolution=chosen, reason=reason)
        if run is not None:
            if chosen is Resolution.RETURN:
                run.resume(task.task_id)
            else:
                run.settle(
                    task.task_id,
                    "completed" if chosen is Resolution.COMPLETE else "skipped",
                )
        self.save(task, run)
        return self._acted(task, run, "resolve", actor, reason, resolution=chosen)

    # ================================================================ queries

    def task(self, task_id: str) -> TaskSummary:
        """The task as its events say now."""
        return _summary(self._get_task(task_id))

    def state_at(self, task_id: str, version: int) -> TaskSummary:
        """The task as it was right after event number ``version``."""
        task = self._get_task(task_id)
        if isinstance(version, bool) or not isinstance(version, int):
            msg = f"version must be an integer, got {type(version).__name__}"
            raise InvalidInput(msg)
        if not 1 <= version <= task.version:
            msg = (
                f"version {version} is out of range [1, {task.version}] "
                f"for task {task.task_id!r}"
            )
            raise InvalidInput(msg)
        past: Task = self.repository.get(Task.create_id(task.task_id), version=version)
        return _summary(past)

    def history(self, task_id: str) -> list[HistoryEntry]:
        """Every event of the task, replayed in order, with the state after each."""
        task_id = values.identifier("task_id", task_id)
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

    def tasks(
        self, *, state: str | None = None, run_id: str | None = None
    ) -> list[TaskIndexEntry]:
        """Tasks from the index, optionally of one state and/or one run."""
        if state is not None:
            state = values.choice("state", state, [s.value for s in TaskState])
        run_id = values.optional_identifier("run_id", run_id)
        self.read_models.catch_up()
        entries: list[TaskIndexEntry] = self._view("task_index").many(
            state=state, run_id=run_id
        )
        return entries

    def gate_status(self, task_id: str) -> GateStatus:
        return self._one("gate_status", task_id)  # type: ignore[no-any-return]

    def failure_report(self, task_id: str) -> FailureReport:
        return self._one("failure_reports", task_id)  # type: ignore[no-any-return]

    def lessons(self, task_id: str) -> list[Lesson]:
        task_id = self._require_task(task_id)
        found: list[Lesson] = self._view("lessons").many(task_id=task_id)
        return found

    def is_strategy_blacklisted(self, task_id: str, candidate: str) -> bool:
        candidate = values.text("candidate", candidate, max_len=values.STRATEGY_MAX)
        strategies = [lesson.failed_strategy for lesson in self.lessons(task_id)]
        return blacklist.find_match(candidate, strategies) is not None

    def blacklist_directive(self, task_id: str) -> str:
        return blacklist.directive(
            lesson.failed_strategy for lesson in self.lessons(task_id)
        )

    def pending_sessions(self) -> list[PendingSession]:
        self.read_models.catch_up()
        found: list[PendingSession] = self._view("pending_sessions").many()
        return found

    def handoff_queue(self) -> list[HandoffEntry]:
        self.read_models.catch_up()
        found: list[HandoffEntry] = self._view("handoff_queue").many()
        return found

    def run_state(self, run_id: str) -> RunState:
        run_id = values.identifier("run_id", run_id)
        self.read_models.catch_up()
        found: RunState | None = self._view("run_state").one(run_id)
        if found is None:
            raise UnknownRun(run_id)
        return found

    def notifications(self, *, after: int = 0, limit: int = 100) -> list[Notification]:
        """Escalations, pauses, hand-offs and blocked attempts, in log order."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            msg = f"after must be a non-negative integer, got {after!r}"
            raise InvalidInput(msg)
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= 10_000
        ):
            msg = f"limit must be an integer in [1, 10000], got {limit!r}"
            raise InvalidInput(msg)
        topics = [cls.TOPIC for cls in _NOTIFYING_EVENTS]
        records = self.recorder.select_notifications(
            start=after + 1, limit=limit, topics=topics
        )
        return [_notification(n.id, self.mapper.to_domain_event(n)) for n in records]

    def catch_up(self) -> int:
        """Bring every projection up to the end of the log; return the position."""
        return self.read_models.catch_up()

    def rebuild_projections(
        self,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Drop the named projections (default: all) and replay them from 0."""
        return self.read_models.rebuild(names, progress)

    # ============================================================== internals

    def _find_task(self, task_id: str) -> Task | None:
        try:
            task: Task = self.repository.get(Task.create_id(task_id))
        except AggregateNotFoundError:
            return None
        return task

    def _get_task(self, task_id: str) -> Task:
        task_id = values.identifier("task_id", task_id)
        task = self._find_task(task_id)
        if task is None:
            raise UnknownTask(task_id)
        return task

    def _get_run(self, run_id: str) -> Run:
        try:
            run: Run = self.repository.get(Run.create_id(run_id))
        except AggregateNotFoundError:
            raise UnknownRun(run_id) from None
        return run

    def _run_of(self, task: Task) -> Run | None:
        return self._get_run(task.run_id) if task.run_id is not None else None

    def _pause_run_if_waiting(self, task: Task, run: Run | None) -> None:
        if run is not None and task.state in WAITING:
            run.pause(task.task_id, reason=task.state)

    def _view(self, name: str) -> Any:
        return self.read_models.projections[name].view

    def _require_task(self, task_id: str) -> str:
        entry: TaskIndexEntry = self._one("task_index", task_id)
        return entry.task_id

    def _one(self, view: str, task_id: str) -> Any:
        task_id = values.identifier("task_id", task_id)
        self.read_models.catch_up()
        found = self._view(view).one(task_id)
        if found is None:
            raise UnknownTask(task_id)
        return found

    def _log_stop(self, task: Task, event: str | None, **extra: Any) -> None:
        last = task.failures[-1] if task.failures else None
        log_decision(
            event or _STOP_EVENTS[TaskState(task.state)],
            task_id=task.task_id,
            state=task.state,
            consecutive_failures=task.consecutive_failures,
            error_hash=last.error_hash if last else None,
            session_id=task.pending_session_id,
            run_id=task.run_id,
            **extra,
        )

    def _acted(
        self,
        task: Task,
        run: Run | None,
        action: Any,
        actor: str,
        reason: str | None,
        *,
        session_id: str | None = None,
        to_commit: str | None = None,
        resolution: Resolution | None = None,
    ) -> ActionResult:
        result = ActionResult(
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
        log_decision(
            "HUMAN_ACTION",
            task_id=task.task_id,
            action=action,
            actor=actor,
            state=task.state,
            consecutive_failures=task.consecutive_failures,
            session_id=session_id,
        )
        return result


def _actor(actor: object) -> str:
    return values.identifier("actor", actor)


def _reason(reason: object) -> str:
    return values.text("reason", reason, max_len=values.REASON_MAX)


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
        completed=tuple(n for n, o in run.settled.items() if o == "completed"),
        skipped=tuple(n for n, o in run.settled.items() if o == "skipped"),
        ready=run.ready_nodes(),
        paused_by=tuple(run.paused_by),
        updated_at=run.modified_on,
    )


def _notification(position: int, domain_event: Any) -> Notification:
    kind = next(
        k for cls, k in _NOTIFYING_EVENTS.items() if isinstance(domain_event, cls)
    )
    session_id: str | None = None
    failure_count: int | None = None
    if isinstance(domain_event, Task.Escalated | Task.Paused):
        session_id = domain_event.session.session_id
        reason: str = domain_event.session.reason
        if isinstance(domain_event, Task.Escalated):
            failure_count = domain_event.report.failure_count
    elif isinstance(domain_event, Task.HandedOff):
        reason = "hand_off_required"
        failure_count = domain_event.payload.failure_count
    else:
        reason = domain_event.failure.reason
        failure_count = domain_event.consecutive_failures
    return Notification(
        position=position,
        kind=kind,
        task_id=task_id_of(domain_event.originator_id),
        at=domain_event.timestamp,
        session_id=session_id,
        reason=reason,
        failure_count=failure_count,
    )
