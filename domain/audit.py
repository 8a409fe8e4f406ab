"""What auditors ask of the log: what-if replay, the replay check, the hash
chain, exports and one task's audit trail.

:class:`Audits` is composed into
:class:`~devs.domain.application.RecoveryService` (its ``audits``) with the
store it reads, and writes nothing. :class:`TaskHistory` is the one replay of
a task's stored history its queries share; only the store's own problems are
:class:`~devs.domain.errors.UnreadableEvent`, anything else a fold raises is
a bug and raised as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import orjson
from eventsourcing.application import AggregateNotFoundError, Repository
from eventsourcing.persistence import (
    ApplicationRecorder,
    EventStore,
    Mapper,
    StoredEvent,
)
from eventsourcing.utils import get_topic

from devs.domain import chain, replay
from devs.domain.chart import TaskState
from devs.domain.errors import UnreadableEvent
from devs.domain.model import Immutable
from devs.domain.policy import Policy
from devs.domain.ports import ReadModels
from devs.domain.redaction import redact
from devs.domain.spend import Usage
from devs.domain.task import Task, TaskEvent, task_id_of

PAGE = 1_000
"""Events read from the store at once."""
EXPORT_FORMAT = "devs-audit"
EXPORT_VERSION = 1
UNHASHABLE = (TypeError, ValueError, RecursionError)
"""What hashing a body no event has (nested too deep) raises
(:func:`devs.domain.chain.body_hash`)."""
FIRST_MISSING = "its first event (version 1, Started) is missing"


# ------------------------------------------------------------- one replay


class OutOfSequence(UnreadableEvent):
    """A stored task event that does not follow the one before it: its first
    event is missing, one was deleted, reordered or repeated, or it is not an
    event of this task. The history cannot be replayed past it."""

    def __init__(
        self, task_id: str, why: str, *, originator_version: int, topic: str
    ) -> None:
        super().__init__(
            f"task {task_id!r}: {why}",
            originator_id=Task.create_id(task_id),
            originator_version=originator_version,
            topic=topic,
        )
        self.why = why


def _out_of_sequence(task: Task | None, event: Any, originator_id: str) -> str | None:
    """Why ``event`` cannot be applied next to ``task`` (``None``: before the
    first event), or ``None`` when it follows it."""
    version = event.originator_version
    if event.originator_id != originator_id:
        return f"version {version} is an event of {event.originator_id!r}"
    if task is None:
        if isinstance(event, Task.Snapshot):  # the task as it was at its version
            return None
        if version != 1:
            return FIRST_MISSING
        if not isinstance(event, Task.Started):
            return f"version 1 is {get_topic(type(event))}, not {Task.Started.TOPIC}"
        return None
    expected = task.version + 1
    if version != expected:
        what = "deleted" if version > expected else "reordered or repeated"
        return (
            f"version {expected} expected, found version {version} "
            f"(an event was {what})"
        )
    if not isinstance(event, TaskEvent):
        return f"version {version} is {get_topic(type(event))}, not a task's event"
    return None


class Replayed(NamedTuple):
    """A stored event of a task, and the task right after it."""

    event: Any
    """The domain event, as stored."""
    task: Task
    """The task as this event left it: one object for the whole replay,
    changed by each event in turn (read it before the next)."""


class TaskHistory:
    """One replay of a task's stored history, a page at a time.

    Iterating it yields each event after version ``after`` (at most ``limit``
    of them; all when ``None``) with the task as that event left it. It starts
    from the task as it was at version ``after``, loaded through the
    repository from the latest snapshot before it, and reads only the page
    (``PAGE`` events at a time), never the whole stream.

    An event that cannot be decoded raises the mapper's
    :class:`~devs.domain.errors.UnreadableEvent`; one that does not follow the
    one before it, :class:`OutOfSequence` (also an ``UnreadableEvent``): the
    events before it have been yielded. Nothing else is caught: a fold that
    raises is a bug, and its error is raised as it is.

    ``task`` is the task as replayed so far: ``None`` until an event of it is
    found (after iterating, ``None`` when the task has no event up to the
    page's end: an unknown task).
    """

    __slots__ = (
        "_events",
        "_originator_id",
        "_store",
        "after",
        "limit",
        "task",
        "task_id",
    )

    def __init__(
        self,
        store: Repository[str],
        events: EventStore[str],
        task_id: str,
        *,
        after: int = 0,
        limit: int | None = None,
    ) -> None:
        self._store = store
        self._events = events
        self._originator_id = Task.create_id(task_id)
        self.task_id = task_id
        self.after = after
        self.limit = limit
        self.task: Task | None = None

    def __iter__(self) -> Iterator[Replayed]:
        task = self.task = self._at(self.after)
        version, left = self.after, self.limit
        while left is None or left > 0:
            size = PAGE if left is None else min(PAGE, left)
            read = 0
            for event in self._events.get(self._originator_id, gt=version, limit=size):
                task = self.task = self._follow(task, event)
                read += 1
                yield Replayed(event, task)
            if read < size or task is None:
                return
            version = task.version
            if left is not None:
                left -= read

    def _at(self, version: int) -> Task | None:
        """The task as it was at ``version`` (``None``: no event up to it)."""
        if not version:
            return None
        try:
            task: Task = self._store.get(
                self._originator_id, version=version, projector_func=self._fold
            )
        except AggregateNotFoundError:
            return None
        return task

    def _fold(self, task: Task | None, events: Iterable[Any]) -> Task | None:
        for event in events:  # the latest snapshot first, if any
            task = self._follow(task, event)
        return task

    def _follow(self, task: Task | None, event: Any) -> Task:
        why = _out_of_sequence(task, event, self._originator_id)
        if why is not None:
            raise OutOfSequence(
                self.task_id,
                why,
                originator_version=event.originator_version,
                topic=get_topic(type(event)),
            )
        followed: Task = event.mutate(task)
        return followed


# ---------------------------------------------------------------- answers


class Totals(Immutable):
    """What the ladder did over the tasks examined."""

    escalations: int
    pauses: int
    handoffs: int
    human_sessions: int
    """Escalations and pauses: each asked a human."""
    tasks_reaching_a_human: int
    failures_before_first_human: int
    """Summed over the tasks that reached a human: failed gates and blocked
    attempts before the first escalation, pause or hand-off."""


class WhatIfReport(Immutable):
    """Every examined history re-decided under ``policy``."""

    policy: Policy
    tasks: int
    events: int
    recorded: Totals
    what_if: Totals
    assumed_resumes: int
    dropped_human_actions: int
    changed: list[replay.TaskWhatIf]
    """The tasks whose ladder would have gone otherwise."""
    unreadable: list[str]
    """Tasks left out: one of their events cannot be decoded."""
    saved: Usage = Usage()
    """What the other policy's budgets would have saved, every task
    together: the usage recorded while a task was at work after a budget
    stop of the other policy that no recorded raise answered."""


class ReplayCheckReport(Immutable):
    """Today's code against every recorded decision: ``ok`` when none differ."""

    ok: bool
    tasks: int
    events: int
    differences: list[replay.Difference]
    unreadable: list[str]


class AuditEntry(Immutable):
    """One event of a task's audit trail."""

    version: int
    event: str
    timestamp: datetime
    actor: str | None
    state: TaskState
    consecutive_failures: int
    changes: dict[str, Any]
    chain_prev: str | None
    hash: str | None
    """The SHA-256 of this event's canonical form (chained tasks only)."""


class TaskAudit(Immutable):
    """A task's replayed history (a page of it) with the state of its hash
    chain, checked over every event."""

    task_id: str
    chain: chain.ChainStatus
    entries: list[AuditEntry]
    problem: str | None = None
    """Why the replay stopped early (an event that cannot be decoded or is
    out of sequence); the entries end before it."""


_HIDDEN = frozenset(
    {
        "originator_id",
        "originator_version",
        "timestamp",
        "originator_topic",
        "chain_prev",
    }
)


def _entry(task: Task, event: Any, version: int) -> AuditEntry:
    body = event.model_dump(mode="json")
    return AuditEntry(
        version=version,
        event=type(event).__name__,
        timestamp=event.timestamp,
        actor=getattr(event, "actor", None),
        state=task.state,
        consecutive_failures=task.consecutive_failures,
        changes={k: v for k, v in body.items() if k not in _HIDDEN},
        chain_prev=body.get("chain_prev"),
        hash=chain.event_hash(event) if task._chained else None,
    )


def _cannot(task_id: str, error: UnreadableEvent) -> str:
    """Why a task's history cannot be re-decided, in one line."""
    if isinstance(error, OutOfSequence):
        return f"task {task_id!r} cannot be re-decided: {error.why}"
    return str(error)


def _why(error: UnreadableEvent) -> str:
    """What the decoder said of a stored body, in one line, redacted (a
    decoder may quote the bytes it read)."""
    cause = error.__cause__ or error
    return " ".join(f"{type(cause).__name__}: {redact(str(cause))[:200]}".split())


def _totals(courses: Sequence[replay.Course]) -> Totals:
    reached = [
        c.failures_before_first_human
        for c in courses
        if c.failures_before_first_human is not None
    ]
    escalations = sum(c.escalations for c in courses)
    pauses = sum(c.pauses for c in courses)
    return Totals(
        escalations=escalations,
        pauses=pauses,
        handoffs=sum(c.handoffs for c in courses),
        human_sessions=escalations + pauses,
        tasks_reaching_a_human=len(reached),
        failures_before_first_human=sum(reached),
    )


class Audits:
    """The audit queries of the service (see the module docstring), over the
    service's store: its event store, recorder, mapper and repository, its
    read models, and three of its checks (a task that exists, read models
    caught up, a run that exists)."""

    def __init__(
        self,
        *,
        events: EventStore[str],
        recorder: ApplicationRecorder,
        mapper: Mapper[str],
        repository: Repository[str],
        read_models: ReadModels,
        require_task: Callable[[str], None],
        fresh: Callable[[], None],
        run_state: Callable[[str], Any],
    ) -> None:
        self.events = events
        self.recorder = recorder
        self.mapper = mapper
        self.repository = repository
        self.read_models = read_models
        self.require_task = require_task
        self.fresh = fresh
        self.run_state = run_state

    # ------------------------------------------------------------- selection

    def _examined(
        self, task_ids: Sequence[str] | None, run_id: str | None
    ) -> list[str]:
        if run_id is not None:
            self.run_state(run_id)  # UnknownRun
        if task_ids:
            for task_id in task_ids:
                self.require_task(task_id)
            chosen = list(dict.fromkeys(task_ids))
            if run_id is None:
                return chosen
            in_run = {e.task_id for e in self.read_models.task_entries(run_id=run_id)}
            return [task_id for task_id in chosen if task_id in in_run]
        self.fresh()
        entries = self.read_models.task_entries(run_id=run_id)
        return [entry.task_id for entry in entries]

    def replay(
        self, task_id: str, after: int = 0, limit: int | None = None
    ) -> TaskHistory:
        """The task's stored history after version ``after`` (a page of at
        most ``limit`` events), replayed: :class:`TaskHistory`."""
        return TaskHistory(
            self.repository, self.events, task_id, after=after, limit=limit
        )

    def _task_events(self, task_id: str) -> list[Any]:
        """The task's events, from its ``Started``, each following the one
        before it; ``UnreadableEvent`` when one cannot be decoded, or is out
        of sequence (:class:`OutOfSequence`: the first missing, one deleted)."""
        found = [replayed.event for replayed in self.replay(task_id)]
        if not found:
            raise OutOfSequence(
                task_id,
                FIRST_MISSING,
                originator_version=1,
                topic=Task.Started.TOPIC,
            )
        return found

    def _stored_events(self, task_id: str, gt: int = 0) -> Iterator[StoredEvent]:
        """The task's stored events after version ``gt``, as stored (not
        decoded), read ``PAGE`` at a time."""
        originator_id = Task.create_id(task_id)
        while True:
            page = self.recorder.select_events(originator_id, gt=gt, limit=PAGE)
            yield from page
            if len(page) < PAGE:
                return
            gt = page[-1].originator_version

    # --------------------------------------------------------------- what-if

    def what_if(
        self,
        policy: Policy,
        task_ids: Sequence[str] | None,
        run_id: str | None,
    ) -> WhatIfReport:
        results: list[replay.TaskWhatIf] = []
        unreadable: list[str] = []
        events = 0
        for task_id in self._examined(task_ids, run_id):
            try:
                history = self._task_events(task_id)
            except UnreadableEvent as error:  # undecodable, missing, out of order
                unreadable.append(_cannot(task_id, error))
                continue
            events += len(history)
            results.append(replay.what_if(history, policy))
        return WhatIfReport(
            policy=policy,
            tasks=len(results),
            events=events,
            recorded=_totals([r.recorded for r in results]),
            what_if=_totals([r.what_if for r in results]),
            assumed_resumes=sum(r.assumed_resumes for r in results),
            dropped_human_actions=sum(r.dropped_human_actions for r in results),
            changed=[r for r in results if r.changed],
            unreadable=unreadable,
            saved=functools.reduce(
                Usage.plus, (r.saved for r in results if r.saved), Usage()
            ),
        )

    # ---------------------------------------------------------- replay check

    def replay_check(self, task_ids: Sequence[str] | None) -> ReplayCheckReport:
        differences: list[replay.Difference] = []
        unreadable: list[str] = []
        tasks = events = 0
        for task_id in self._examined(task_ids, None):
            try:
                history = self._task_events(task_id)
            except UnreadableEvent as error:  # undecodable, missing, out of order
                unreadable.append(_cannot(task_id, error))
                continue
            tasks += 1
            events += len(history)
            differences.extend(replay.replay_check(history))
        return ReplayCheckReport(
            ok=not differences and not unreadable,
            tasks=tasks,
            events=events,
            differences=differences,
            unreadable=unreadable,
        )

    # ------------------------------------------------------------ hash chain

    def _body(self, stored: StoredEvent) -> dict[str, Any]:
        """A stored event's JSON body, as it was hashed (not validated).

        ``UnreadableEvent`` when its bytes do not decode to a JSON object; its
        ``__cause__`` is what the decoder raised.
        """
        try:
            state = stored.state
            if self.mapper.cipher:
                state = self.mapper.cipher.decrypt(state)
            if self.mapper.compressor:
                state = self.mapper.compressor.decompress(state)
            body = self.mapper.transcoder.decode(state)
        except Exception as error:  # only the decoders' calls: damaged bytes
            raise self._undecodable(stored, error) from error
        if not isinstance(body, dict):
            found = TypeError(f"the body is {type(body).__name__}, not an object")
            raise self._undecodable(stored, found) from found
        return body

    @staticmethod
    def _undecodable(stored: StoredEvent, error: Exception) -> UnreadableEvent:
        return UnreadableEvent(
            f"stored event {stored.originator_version} of "
            f"{str(stored.originator_id)!r} cannot be decoded: "
            f"{type(error).__name__}: {str(error)[:200]}",
            originator_id=str(stored.originator_id),
            originator_version=stored.originator_version,
            topic=stored.topic,
        )

    def _feed(self, checker: chain.ChainChecker, stored: StoredEvent) -> None:
        task_id = task_id_of(str(stored.originator_id))
        try:
            body = self._body(stored)
        except UnreadableEvent as error:  # damaged bytes: a broken link, not a crash
            checker.feed(
                task_id,
                stored.originator_version,
                stored.topic,
                None,
                unreadable=_why(error),
            )
            return
        checker.feed(task_id, stored.originator_version, stored.topic, body)

    def check_chains(
        self, progress: Callable[[int, int], None] | None = None
    ) -> list[chain.ChainStatus]:
        """Every task's chain, from the whole log (not the read models, which
        an editor of the log could have rebuilt), and each chain's end against
        the head the task index kept when it folded that event."""
        checker = chain.ChainChecker()
        last = self.recorder.max_notification_id() or 0
        start = 1
        while start <= last:
            page = self.recorder.select_notifications(
                start=start, limit=PAGE, stop=last
            )
            if not page:
                break
            for stored in page:
                if str(stored.originator_id).startswith("task:"):
                    self._feed(checker, stored)
            start = page[-1].id + 1
            if progress is not None:
                progress(min(start - 1, last), last)
        # The heads as folded so far: not caught up first, so an edit made
        # since is compared with what was folded before it (and nothing is
        # written).
        for task_id, version, head in self.read_models.chain_heads():
            seen = checker.version(task_id)
            if version > seen:  # recorded since the scan began: read them too
                for later in self._stored_events(task_id, gt=seen):
                    self._feed(checker, later)
            checker.expect_head(task_id, version, head)
        return checker.results()

    def audit(
        self, task_id: str, after: int = 0, limit: int | None = None
    ) -> TaskAudit:
        """The page of the task's replayed history (read alone, from the
        latest snapshot before it) and its whole chain."""
        self.require_task(task_id)
        entries: list[AuditEntry] = []
        problem: str | None = None
        try:
            for event, task in self.replay(task_id, after, limit):
                entries.append(_entry(task, event, event.originator_version))
        except UnreadableEvent as error:  # undecodable, or out of sequence
            problem = (
                f"version {error.originator_version} cannot be replayed: "
                f"{type(error).__name__}: {redact(str(error))[:200]}"
            )
        return TaskAudit(
            task_id=task_id,
            chain=self._chain(task_id),
            entries=entries,
            problem=problem,
        )

    def _chain(self, task_id: str) -> chain.ChainStatus:
        """The task's chain, checked over every stored event (as stored: no
        event is decoded) up to the first break, and its end against the head
        the task index kept."""
        checker = chain.ChainChecker()
        for stored in self._stored_events(task_id):
            self._feed(checker, stored)
            if checker.problem(task_id) is not None:
                break  # the events after a break change nothing
        for found_id, version, head in self.read_models.chain_heads(task_id):
            checker.expect_head(found_id, version, head)
        [status] = checker.results() or [
            chain.ChainStatus(task_id=task_id, state="unchained", events=0)
        ]
        return status

    # ---------------------------------------------------------------- export

    def _export_line(self, task_id: str, stored: StoredEvent) -> dict[str, Any]:
        """One event's line; an event whose body cannot be read is written
        with ``"event": null`` and why (a broken link for ``verify-export``)."""
        line: dict[str, Any] = {
            "task_id": task_id,
            "version": stored.originator_version,
            "topic": stored.topic,
        }
        try:
            body = self._body(stored)
            digest = chain.body_hash(stored.topic, body)
        except (UnreadableEvent, *UNHASHABLE) as error:  # damaged: recorded as such
            cause = error.__cause__ if isinstance(error, UnreadableEvent) else None
            found = cause or error
            reason = f"{type(found).__name__}: {redact(str(found))[:200]}"
            return {**line, "actor": None, "chain_prev": None, "hash": None,
                    "event": None, "unreadable": reason}  # fmt: skip
        chained = body.get("chain_prev") is not None
        return {
            **line,
            "actor": body.get("actor"),
            "chain_prev": body.get("chain_prev"),
            "hash": digest if chained else None,
            "event": body,
        }

    def export(self, task_ids: Sequence[str] | None) -> Iterator[dict[str, Any]]:
        """The audit record, one JSON-ready line at a time, streamed: a
        header naming the format, each task's events in order, then a
        trailer with every task's event count and chain head.

        Tasks come in task-id order (Python's string order, the same on
        every backend and whatever order they were named, created or last
        changed in): two exports of one log list them alike."""
        chosen = self._examined(task_ids, None)  # unknown ids refused now
        return self._export_lines(sorted(chosen))

    def _export_lines(self, chosen: Sequence[str]) -> Iterator[dict[str, Any]]:
        yield {"format": EXPORT_FORMAT, "version": EXPORT_VERSION}
        heads: dict[str, Any] = {}
        for task_id in chosen:
            checker = chain.ChainChecker()
            for stored in self._stored_events(task_id):
                line = self._export_line(task_id, stored)
                checker.feed(
                    task_id,
                    stored.originator_version,
                    stored.topic,
                    line["event"],
                    unreadable=line.get("unreadable"),
                )
                yield line
            [status] = checker.results()
            heads[task_id] = {
                "events": status.events,
                "state": status.state,
                "head": status.head,
            }
        yield {"format": EXPORT_FORMAT, "end": True, "tasks": heads}


def verify_export(
    lines: Iterable[bytes],
) -> tuple[list[chain.ChainStatus], str | None]:
    """Check an exported audit record (its lines, as bytes), with no database.

    Returns every task's chain status and the first problem (``None`` when the
    file is intact): a line that is not JSON, a header or trailer missing, a
    line whose hash is not its event's, a broken link, a task whose events do
    not end where the trailer says, or end otherwise chained than it says.
    """
    checker = chain.ChainChecker()
    header = False
    trailer: dict[str, Any] | None = None
    first_problem: str | None = None
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            return checker.results(), f"line {number} is not JSON: {error}"
        if not isinstance(line, dict):
            return checker.results(), f"line {number} is not a JSON object"
        if not header:
            if line.get("format") != EXPORT_FORMAT or line.get("end"):
                return checker.results(), (
                    f"line {number} is not a {EXPORT_FORMAT} header; "
                    "the file was not written by devs export"
                )
            header = True
            continue
        if trailer is not None:
            return checker.results(), f"line {number} follows the trailer"
        if line.get("end") is True and line.get("format") == EXPORT_FORMAT:
            problem = _trailer_problem(line)
            if problem is not None:
                return checker.results(), f"line {number}: {problem}"
            trailer = line
            continue
        task_id, version, topic, body = (
            line.get("task_id"),
            line.get("version"),
            line.get("topic"),
            line.get("event"),
        )
        if not isinstance(task_id, str) or not isinstance(topic, str):
            return checker.results(), f"line {number} lacks its task id or topic"
        if type(version) is not int:
            return checker.results(), f"line {number}: its version is not an integer"
        if body is not None and not isinstance(body, dict):
            return checker.results(), f"line {number}: its event is not an object"
        if body is not None and line.get("hash") is not None:
            try:
                digest = chain.body_hash(topic, body)
            except (TypeError, ValueError, RecursionError) as error:
                return checker.results(), (
                    f"line {number}: task {task_id!r} version {version} cannot "
                    f"be hashed ({type(error).__name__})"
                )
            if line["hash"] != digest:
                first_problem = first_problem or (
                    f"line {number}: task {task_id!r} version {version} does not "
                    "match its recorded hash (the event was edited)"
                )
        if body is not None and body.get("chain_prev") != line.get("chain_prev"):
            first_problem = first_problem or (
                f"line {number}: task {task_id!r} version {version}: its link "
                "differs from its event's (the line was edited)"
            )
        unreadable = str(line.get("unreadable") or "its event is missing")
        checker.feed(task_id, version, topic, body, unreadable=unreadable)
        if first_problem is None and (problem := checker.problem(task_id)):
            first_problem = f"line {number}: {problem}"
    if not header:
        return checker.results(), "the file is empty: no header"
    if trailer is None:
        return checker.results(), (
            "the file has no trailer: it was cut short (events at its end may "
            "have been deleted)"
        )
    tasks: dict[str, Any] = trailer["tasks"]
    for task_id, summary in tasks.items():
        checker.expect_head(task_id, summary["events"], summary["head"], exact=True)
    results = checker.results()
    exported = {r.task_id: r for r in results}
    for task_id, summary in tasks.items():
        status = exported.get(task_id)
        if status is None:
            first_problem = first_problem or (
                f"task {task_id!r} is named in the trailer but none of its "
                "events are in the file (they were deleted)"
            )
        elif status.state != "broken" and status.state != summary["state"]:
            first_problem = first_problem or (
                f"task {task_id!r} is {status.state} in the file but "
                f"{summary['state']} in its trailer (the links were edited)"
            )
    for status in results:
        if status.task_id not in tasks:
            first_problem = first_problem or (
                f"task {status.task_id!r} is in the file but not in its trailer"
            )
    broken = next((r for r in results if r.state == "broken"), None)
    if first_problem is None and broken is not None:
        first_problem = broken.problem
    return results, first_problem


def _trailer_problem(trailer: dict[str, Any]) -> str | None:
    """What is wrong with a trailer's shape, if anything."""
    tasks = trailer.get("tasks")
    if not isinstance(tasks, dict):
        return "the trailer lacks its tasks"
    for task_id, summary in tasks.items():
        if (
            not isinstance(summary, dict)
            or type(summary.get("events")) is not int
            or summary.get("state") not in ("intact", "unchained", "broken")
            or not isinstance(summary.get("head"), str | None)
        ):
            return f"the trailer's entry for task {task_id[:80]!r} is malformed"
    return None
