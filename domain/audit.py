"""What auditors ask of the log: what-if replay, the replay check, the hash
chain, exports and one task's audit trail.

:class:`Audits` is mixed into :class:`~devs.domain.application.RecoveryService`;
it reads the event store and the task index, decides with
:mod:`devs.domain.replay` and checks with :mod:`devs.domain.chain`, and
writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import orjson
from eventsourcing.persistence import (
    ApplicationRecorder,
    EventStore,
    Mapper,
    StoredEvent,
)

from devs.domain import chain, replay
from devs.domain.chart import TaskState
from devs.domain.errors import UnreadableEvent
from devs.domain.model import Immutable
from devs.domain.policy import Policy
from devs.domain.ports import ReadModels
from devs.domain.redaction import redact
from devs.domain.task import Task, task_id_of

PAGE = 1_000
EXPORT_FORMAT = "devs-audit"
EXPORT_VERSION = 1


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


def _cannot(task_id: str, error: Exception) -> str:
    """Why a task's history cannot be re-decided, in one line."""
    if isinstance(error, UnreadableEvent):
        return str(error)
    text = redact(" ".join(str(error).split()))[:200]
    return f"task {task_id!r} cannot be re-decided: {type(error).__name__}: {text}"


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
    """The audit queries of the service (see the module docstring)."""

    events: EventStore[str]
    recorder: ApplicationRecorder
    mapper: Mapper[str]
    read_models: ReadModels

    def _require_task(self, task_id: str) -> None:
        raise NotImplementedError

    def run_state(self, run_id: str) -> Any:
        raise NotImplementedError

    # ------------------------------------------------------------- selection

    def _examined(
        self, task_ids: Sequence[str] | None, run_id: str | None
    ) -> list[str]:
        if run_id is not None:
            self.run_state(run_id)  # UnknownRun
        if task_ids:
            for task_id in task_ids:
                self._require_task(task_id)
            chosen = list(dict.fromkeys(task_ids))
            if run_id is None:
                return chosen
            in_run = {e.task_id for e in self.read_models.task_entries(run_id=run_id)}
            return [task_id for task_id in chosen if task_id in in_run]
        self.read_models.catch_up()
        entries = self.read_models.task_entries(run_id=run_id)
        return [entry.task_id for entry in entries]

    def _task_events(self, task_id: str) -> list[Any]:
        """The task's events, from its ``Started``; ``UnreadableEvent`` when
        one cannot be decoded or the first is missing."""
        found = list(self.events.get(Task.create_id(task_id)))
        if not found or not isinstance(found[0], Task.Started):
            msg = (
                f"task {task_id!r} cannot be re-decided: its first event "
                "(version 1, Started) is missing"
            )
            raise UnreadableEvent(
                msg,
                originator_id=Task.create_id(task_id),
                originator_version=1,
                topic=Task.Started.TOPIC,
            )
        return found

    # --------------------------------------------------------------- what-if

    def _what_if(
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
                result = replay.what_if(history, policy)
            except Exception as error:  # an event missing, undecodable, out of order
                unreadable.append(_cannot(task_id, error))
                continue
            events += len(history)
            results.append(result)
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
        )

    # ---------------------------------------------------------- replay check

    def _replay_check(self, task_ids: Sequence[str] | None) -> ReplayCheckReport:
        differences: list[replay.Difference] = []
        unreadable: list[str] = []
        tasks = events = 0
        for task_id in self._examined(task_ids, None):
            try:
                history = self._task_events(task_id)
                found = replay.replay_check(history)
            except Exception as error:  # an event missing, undecodable, out of order
                unreadable.append(_cannot(task_id, error))
                continue
            tasks += 1
            events += len(history)
            differences.extend(found)
        return ReplayCheckReport(
            ok=not differences and not unreadable,
            tasks=tasks,
            events=events,
            differences=differences,
            unreadable=unreadable,
        )

    # ------------------------------------------------------------ hash chain

    def _body(self, stored: StoredEvent) -> dict[str, Any]:
        """A stored event's JSON body, as it was hashed (not validated)."""
        state = stored.state
        if self.mapper.cipher:
            state = self.mapper.cipher.decrypt(state)
        if self.mapper.compressor:
            state = self.mapper.compressor.decompress(state)
        body = self.mapper.transcoder.decode(state)
        if not isinstance(body, dict):
            msg = f"the body is {type(body).__name__}, not an object"
            raise TypeError(msg)
        return body

    def _feed(self, checker: chain.ChainChecker, stored: StoredEvent) -> None:
        task_id = task_id_of(str(stored.originator_id))
        try:
            body = self._body(stored)
        except Exception as error:  # damaged bytes: a broken link, not a crash
            checker.feed(
                task_id,
                stored.originator_version,
                stored.topic,
                None,
                unreadable=f"{type(error).__name__}: {str(error)[:200]}",
            )
            return
        checker.feed(task_id, stored.originator_version, stored.topic, body)

    def _check_chains(
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
                for later in self.recorder.select_events(
                    Task.create_id(task_id), gt=seen
                ):
                    self._feed(checker, later)
            checker.expect_head(task_id, version, head)
        return checker.results()

    def _audit(
        self, task_id: str, after: int = 0, limit: int | None = None
    ) -> TaskAudit:
        self._require_task(task_id)
        checker = chain.ChainChecker()
        entries: list[AuditEntry] = []
        task: Task | None = None
        problem: str | None = None
        last = None if limit is None else after + limit
        for stored in self.recorder.select_events(Task.create_id(task_id)):
            self._feed(checker, stored)
            if problem is not None:
                continue  # the chain is checked to the end; the replay stops
            try:
                domain_event: Any = self.mapper.to_domain_event(stored)
                task = domain_event.mutate(task)
            except Exception as error:  # undecodable, or out of sequence
                problem = (
                    f"version {stored.originator_version} cannot be replayed: "
                    f"{type(error).__name__}: {redact(str(error))[:200]}"
                )
                continue
            assert task is not None
            version = stored.originator_version
            if version <= after or (last is not None and version > last):
                continue
            entries.append(_entry(task, domain_event, version))
        for found_id, version, head in self.read_models.chain_heads(task_id):
            checker.expect_head(found_id, version, head)
        [status] = checker.results() or [
            chain.ChainStatus(task_id=task_id, state="unchained", events=0)
        ]
        return TaskAudit(
            task_id=task_id, chain=status, entries=entries, problem=problem
        )

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
        except Exception as error:  # damaged bytes: recorded as such
            reason = f"{type(error).__name__}: {redact(str(error))[:200]}"
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

    def _export(self, task_ids: Sequence[str] | None) -> Iterator[dict[str, Any]]:
        """The audit record, one JSON-ready line at a time, streamed: a
        header naming the format, each task's events in order, then a
        trailer with every task's event count and chain head."""
        chosen = self._examined(task_ids, None)  # unknown ids refused now
        return self._export_lines(chosen)

    def _export_lines(self, chosen: Sequence[str]) -> Iterator[dict[str, Any]]:
        yield {"format": EXPORT_FORMAT, "version": EXPORT_VERSION}
        heads: dict[str, Any] = {}
        for task_id in chosen:
            checker = chain.ChainChecker()
            for stored in self.recorder.select_events(Task.create_id(task_id)):
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
