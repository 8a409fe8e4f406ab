"""Re-deciding recorded histories: the replay check and what-if replay.

Pure code over a task's recorded events: each recorded input (an attempt, a
gate result, a human action...) is fed to a fresh in-memory
:class:`~devs.domain.task.Task` through its own commands, and the decisions it
takes are read back; nothing is written, and the work is linear in the events.
:func:`replay_check` compares them with the recorded ones under the recorded
policy; :func:`what_if` follows the ladder under another (docs/audit.md).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from devs.domain.chart import FINISHED, WAITING, TaskState
from devs.domain.errors import DevsError
from devs.domain.eventsourcing_internals import create_aggregate
from devs.domain.gate import evaluate
from devs.domain.model import Value
from devs.domain.names import SessionReason
from devs.domain.policy import Policy
from devs.domain.spend import Usage
from devs.domain.task import Task, TaskEvent, task_id_of

StopKind = Literal["escalation", "pause", "hand_off"]
STOPS: dict[type[Any], StopKind] = {
    Task.Escalated: "escalation",
    Task.Paused: "pause",
    Task.HandedOff: "hand_off",
    Task.DeadlineExpired: "hand_off",
}
"""What each stop is: an expiry hands the task off (nobody answered in time)."""
FAILURES = (Task.GateFailed, Task.BlacklistedStrategyAttempted)
HUMAN_INPUTS = (
    Task.Resumed,
    Task.Rewound,
    Task.Skipped,
    Task.HandoffClaimed,
    Task.ClaimReleased,
    Task.ClaimTakenOver,
    Task.HandoffResolved,
)
NOT_ANSWERS = (Task.LessonLogged, Task.UsageRecorded, Task.BudgetRaised)
"""Inputs that may come while a task waits for a human without answering
it: what-if assumes no resume before them."""
DEADLINE_INPUTS = (Task.DeadlineExpired, Task.DeadlineReminded)
"""The clock's inputs: a session's deadline passed, or came near. Like a
human's answer, each one answers a stop, and is replayed as recorded (never
against today's clock)."""
ASSUMED_ACTOR = "what-if"


def is_input(event: Any) -> bool:
    """Whether ``event`` is something reported to the referee (not decided by it).

    A pause is an input when an entropy score reported by the orchestrator
    caused it, or its run's budget (the other tasks' usage); a pause for a
    blacklisted strategy, a derived stuck score or the task's own budget is a
    decision, as is a budget's warning. A deadline's expiry or
    reminder is an input: the sweeper reports that the clock reached it.
    """
    if isinstance(event, Task.Paused):
        session = event.session
        if session.reason is SessionReason.BUDGET_EXHAUSTED:
            # The run's budget: its other tasks' usage, which this history
            # does not hold, stopped it.
            return session.spend is not None and session.spend.scope == "run"
        return (
            session.reason is SessionReason.ENTROPY_LIMIT
            and session.entropy_source != "derived"
        )
    return not isinstance(
        event, (Task.Started, Task.Escalated, Task.HandedOff, Task.BudgetWarned)
    )


def feed(task: Task, event: Any) -> None:
    """Give ``task`` the input ``event`` recorded, through its own commands.

    Raises the command's :class:`DevsError` when ``task`` refuses it.
    """
    match event:
        case Task.AttemptBegan():
            task.begin_attempt(event.strategy)
        case Task.BlacklistedStrategyAttempted():
            task.begin_attempt(event.failure.strategy or "")
        case Task.GatePassed():
            task.record_gate(
                evaluate(0), gate=event.gate, strategy=event.strategy, error=None,
                output=None,
            )  # fmt: skip
        case Task.GateFailed():
            task.fail(event.failure)
        case Task.EntropyMeasured():
            task.report_entropy(event.score)
        case Task.Paused() if event.session.reason is SessionReason.BUDGET_EXHAUSTED:
            assert event.session.spend is not None  # a run's: an input
            task.stop_for_run_budget(event.session.spend)
        case Task.Paused():
            task.report_entropy(event.session.entropy_score or 0.0)
        case Task.LessonLogged():
            task.log_lesson(event.strategy, event.rca_summary)
        case Task.Resumed():
            task.resume(actor=event.actor, reason=event.reason, as_recorded=True)
        case Task.Rewound():
            task.rewind(
                actor=event.actor,
                reason=event.reason,
                to_commit=event.to_commit,
                as_recorded=True,
            )
        case Task.Skipped():
            task.skip(actor=event.actor, reason=event.reason, as_recorded=True)
        case Task.HandoffClaimed():
            task.claim(actor=event.actor)
        case Task.ClaimReleased():
            task.release(actor=event.actor)
        case Task.ClaimTakenOver():
            task.take_over(actor=event.actor, reason=event.reason)
        case Task.HandoffResolved():
            task.resolve_handoff(
                actor=event.actor,
                resolution=event.resolution,
                reason=event.reason,
                as_recorded=True,
            )
        case Task.DeadlineExpired():
            task.expire_deadline(now=None)
        case Task.DeadlineReminded():
            task.remind_deadline(now=None, before=0)
        case Task.UsageRecorded():  # at the cost recorded: no price read again
            task.record_usage(
                model=event.model,
                input_tokens=event.input_tokens,
                output_tokens=event.output_tokens,
                cache_read_tokens=event.cache_read_tokens,
                cache_creation_tokens=event.cache_creation_tokens,
                cost_usd=event.cost_usd,
                usage_id=event.usage_id,
            )
        case Task.BudgetRaised():
            task.raise_budget(
                usd=event.budget_usd,
                tokens=event.budget_tokens,
                actor=event.actor,
                reason=event.reason,
                as_recorded=True,
            )
        case _:
            msg = f"{type(event).__name__} is not an input"
            raise TypeError(msg)


def fresh(started: Task.Started, policy: Policy) -> Task:
    """An in-memory task as ``started`` began it, deciding by ``policy``
    (unchained: it is never stored, so its events need no links)."""
    task: Task = create_aggregate(
        Task,
        Task.Started,
        task_id=started.task_id,
        run_id=started.run_id,
        agent=started.agent,
        last_commit=started.last_commit,
        policy=policy,
        chain_prev=None,
    )
    task.collect_events()
    return task


def decision(events: Sequence[Any]) -> tuple[tuple[Any, ...], ...]:
    """What is compared of the events one input produced: each event's type,
    the failure count it records and the reason of a session it opens."""
    found: list[tuple[Any, ...]] = []
    for event in events:
        session = getattr(event, "session", None)
        found.append(
            (
                type(event).__name__,
                getattr(event, "consecutive_failures", None),
                session.reason if session is not None else None,
            )
        )
    return tuple(found)


def describe(events: Sequence[Any] | None, refused: str | None = None) -> str:
    """``GateFailed(3) -> Escalated(max_retries)``, for a report."""
    if events is None:
        return f"refused: {refused}"
    parts: list[str] = []
    for name, count, reason in decision(events):
        detail = ", ".join(str(x) for x in (count, reason) if x is not None)
        parts.append(f"{name}({detail})" if detail else name)
    return " -> ".join(parts) or "nothing"


def groups(events: Iterable[Any]) -> Iterable[list[Any]]:
    """Each input with the decisions recorded after it (``Started`` alone first)."""
    group: list[Any] = []
    for event in events:
        if group and (is_input(event) or isinstance(group[0], Task.Started)):
            yield group
            group = []
        group.append(event)
    if group:
        yield group


# -------------------------------------------------------------- replay check


class Difference(Value):
    """An input whose decisions today's code takes differently."""

    task_id: str
    version: int
    event: str
    recorded: str
    recomputed: str


def replay_check(events: Iterable[Any]) -> list[Difference]:
    """Re-decide one task's history under its recorded policy."""
    differences: list[Difference] = []
    recorded: Task | None = None
    task: Task | None = None
    for group in groups(events):
        first = group[0]
        if isinstance(first, Task.Started):
            recorded = first.mutate(None)
            task = fresh(first, first.policy)
            continue
        assert recorded is not None
        assert task is not None
        for event in group:
            recorded = event.mutate(recorded)
        refused: str | None = None
        produced: list[Any] | None
        try:
            feed(task, first)
            produced = list(task.collect_events())
        except DevsError as error:
            produced, refused = None, str(error)
        if produced is None or decision(produced) != decision(group):
            differences.append(
                Difference(
                    task_id=task_id_of(first.originator_id),
                    version=first.originator_version,
                    event=type(first).__name__,
                    recorded=describe(group),
                    recomputed=describe(produced, refused),
                )
            )
            task = _copy(recorded)
    return differences


def _copy(recorded: Task) -> Task:
    task = copy.deepcopy(recorded)
    task._chained = False
    task._chain_event = None
    task._chain_head = None
    return task


# ------------------------------------------------------------------- what-if


class Stop(Value):
    """A stop for a human: at the input of this version."""

    version: int
    """The version of the input it answered: where the two courses are
    compared."""
    kind: StopKind
    event: str
    """The event ``devs history`` shows for it: the stop itself when it was
    recorded (``Escalated``, one version after the ``GateFailed`` it
    answered); in a what-if course, the recorded input it would have
    followed (``GateFailed``)."""
    event_version: int
    """That event's version."""


class Course(Value):
    """Where the ladder went in one task's history."""

    stops: tuple[Stop, ...]
    final_state: TaskState
    failures_before_first_human: int | None
    """Failures (failed gates, blocked attempts) before the first stop;
    ``None`` when it never stopped."""

    @property
    def escalations(self) -> int:
        return sum(1 for s in self.stops if s.kind == "escalation")

    @property
    def pauses(self) -> int:
        return sum(1 for s in self.stops if s.kind == "pause")

    @property
    def handoffs(self) -> int:
        return sum(1 for s in self.stops if s.kind == "hand_off")


class TaskWhatIf(Value):
    """One task: as recorded and as the other policy would have had it."""

    task_id: str
    events: int
    recorded: Course
    what_if: Course
    assumed_resumes: int
    """Stops of the other policy that no recorded human answered: counted as
    answered at once, so the recorded inputs could go on."""
    dropped_human_actions: int
    """Recorded answers to stops the other policy did not make: a human's,
    or a deadline's expiry or reminder (also those the other policy's
    session, having no deadline, refuses)."""
    cut_at: int | None
    """The version from which the recorded history would not have happened
    (the other policy handed the task off before it, or stopped it for its
    budget with no raise recorded)."""
    saved: Usage | None = None
    """What the other policy's budget would have saved: the usage recorded
    after its budget stop that nobody's raise answered (the agent would
    have waited for a person); ``None`` when it saved nothing."""
    changes: tuple[str, ...]
    """Where the ladder would have gone otherwise, one line each."""

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def what_if(events: Sequence[Any], policy: Policy) -> TaskWhatIf:
    """Re-decide one task's history (``events``, in order) under ``policy``."""
    started = events[0]
    assert isinstance(started, Task.Started)
    recorded = _course_recorded(events)
    task = fresh(started, policy)
    stops: list[Stop] = []
    failures = 0
    first_human: int | None = None
    assumed = dropped = 0
    cut_at: int | None = None
    budget_stop: int | None = None
    """The version of the other policy's budget stop not answered yet."""
    was = TaskState.RUNNING  # the recorded task's state before each input
    for group in groups(events[1:]):
        event = group[0]
        version = event.originator_version
        before, was = was, _state_after(group, was)
        ended = task.state in FINISHED or task.state is TaskState.HAND_OFF
        if ended and task.state != before:
            # Taken off the agent (or finished) where the recorded task was
            # not: nothing recorded from here on would have happened.
            cut_at = version
            break
        if isinstance(event, (*HUMAN_INPUTS, *DEADLINE_INPUTS)):
            if (before in WAITING and task.state not in WAITING) or (
                isinstance(event, DEADLINE_INPUTS) and task.pending_session is None
            ):
                dropped += 1  # it answered a stop this policy did not make
                continue
        elif task.pending_session is not None and not isinstance(event, NOT_ANSWERS):
            if task.spend().over:
                # Nobody raised the budget it spent: the agent would have
                # waited, and what was recorded from here on not happened.
                cut_at = version
                break
            task.resume(
                actor=ASSUMED_ACTOR, reason="assumed answered at once", as_recorded=True
            )
            task.collect_events()
            assumed += 1
        try:
            feed(task, event)
        except DevsError:
            dropped += 1
            continue
        if task.state not in WAITING:
            budget_stop = None
        for produced in task.collect_events():
            session = getattr(produced, "session", None)
            if session is not None and session.reason is SessionReason.BUDGET_EXHAUSTED:
                budget_stop = version
            if isinstance(produced, FAILURES):
                failures += 1
            kind = STOPS.get(type(produced))
            if kind is not None:
                stops.append(
                    Stop(
                        version=version,
                        kind=kind,
                        event=type(event).__name__,
                        event_version=version,
                    )
                )
                if first_human is None:
                    first_human = failures
    alternative = Course(
        stops=tuple(stops),
        final_state=TaskState(task.state),
        failures_before_first_human=first_human,
    )
    saved = None
    if budget_stop is not None:
        saved = _usage_after(events, budget_stop)
    return TaskWhatIf(
        task_id=started.task_id,
        events=len(events),
        recorded=recorded,
        what_if=alternative,
        assumed_resumes=assumed,
        dropped_human_actions=dropped,
        cut_at=cut_at,
        saved=saved,
        changes=_changes(recorded, alternative, cut_at, saved),
    )


def _usage_after(events: Sequence[Any], version: int) -> Usage | None:
    """The usage the history recorded after ``version`` while the recorded
    task was at work (``None``: none). Usage recorded while it waited for a
    person was spent whatever the policy: no stop would have saved it."""
    total = Usage()
    state = TaskState.RUNNING
    for event in events:
        working = state not in WAITING
        if isinstance(event, TaskEvent):
            state = event.state_after(state)
        if (
            working
            and isinstance(event, Task.UsageRecorded)
            and event.originator_version > version
        ):
            total = total.plus(
                Usage.one(
                    event.input_tokens,
                    event.output_tokens,
                    event.cache_read_tokens,
                    event.cache_creation_tokens,
                    event.cost_usd,
                )
            )
    return total if total.tokens or total.spent_usd else None


def _state_after(group: Sequence[Any], state: TaskState) -> TaskState:
    for event in group:
        if isinstance(event, TaskEvent):
            state = event.state_after(state)
    return state


def _course_recorded(events: Sequence[Any]) -> Course:
    stops: list[Stop] = []
    failures = 0
    first_human: int | None = None
    state = TaskState.RUNNING
    input_version = 1
    for event in events:
        if is_input(event):
            input_version = event.originator_version
        if isinstance(event, TaskEvent):
            state = event.state_after(state)
        if isinstance(event, FAILURES):
            failures += 1
        kind = STOPS.get(type(event))
        if kind is not None:
            stops.append(
                Stop(
                    version=input_version,
                    kind=kind,
                    event=type(event).__name__,
                    event_version=event.originator_version,
                )
            )
            if first_human is None:
                first_human = failures
    return Course(
        stops=tuple(stops), final_state=state, failures_before_first_human=first_human
    )


def _changes(
    recorded: Course,
    alternative: Course,
    cut_at: int | None,
    saved: Usage | None = None,
) -> tuple[str, ...]:
    """Where the two courses part, in words: stops at other versions, stops
    one of them never made. Each version is named with the event a reader
    finds there in ``devs history``: a recorded stop by its own event
    (``Escalated at version 5``), a what-if one by the recorded input it
    would have followed (``after GateFailed at version 4``)."""
    lines: list[str] = []
    for kind in ("escalation", "pause", "hand_off"):
        was = [s for s in recorded.stops if s.kind == kind]
        would = [s for s in alternative.stops if s.kind == kind]
        if [s.version for s in was] == [s.version for s in would]:
            continue
        name = kind.replace("_", "-")
        if was and would:
            lines.append(f"{name}s after {_events(would)} instead of {_events(was)}")
        elif would:
            lines.append(f"{name}s after {_events(would)} (none recorded)")
        else:
            lines.append(f"no {name} (recorded: {_events(was)})")
    if cut_at is not None:
        stopped = "stopped for its budget" if saved is not None else "handed off"
        lines.append(
            f"{stopped} before version {cut_at}: the recorded history from "
            "there on would not have happened"
        )
    if saved is not None:
        lines.append(
            f"would have saved USD {saved.spent_usd:.4f} and {saved.tokens:,} "
            "tokens (the usage recorded after its budget stop)"
        )
    if recorded.final_state != alternative.final_state:
        lines.append(
            f"ends {alternative.final_state} instead of {recorded.final_state}"
        )
    return tuple(lines)


def _events(stops: Sequence[Stop]) -> str:
    """``GateFailed at versions 3, 4 and BlacklistedStrategyAttempted at
    version 7``: the stops' events, a run of one name at a time."""
    runs: list[tuple[str, list[int]]] = []
    for stop in stops:
        if runs and runs[-1][0] == stop.event:
            runs[-1][1].append(stop.event_version)
        else:
            runs.append((stop.event, [stop.event_version]))
    parts = [f"{event} at {_versions(versions)}" for event, versions in runs]
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _versions(versions: Sequence[int]) -> str:
    word = "version" if len(versions) == 1 else "versions"
    return f"{word} {', '.join(str(v) for v in versions)}"
