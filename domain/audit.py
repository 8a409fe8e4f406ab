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
from devs.domain.errors import UnknownTask, UnreadableEvent
from devs.domain.model import Immutable
from devs.domain.policy import Policy
from devs.domain.ports import ReadModels
from devs.domain.task import Task, TaskEvent, task_id_of

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
    """A task's replayed history with the state of its hash chain."""

    task_id: str
    chain: chain.ChainStatus
    entries: list[AuditEntry]


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
        if task_ids:
            for task_id in task_ids:
                self._require_task(task_id)
            return list(dict.fromkeys(task_ids))
        if run_id is not None:
            self.run_state(run_id)  # UnknownRun
        self.read_models.catch_up()
        entries = self.read_models.task_entries(run_id=run_id)
        return [entry.task_id for entry in entries]

    def _task_events(self, task_id: str) -> list[Any]:
        return list(self.events.get(Task.create_id(task_id)))

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
            except UnreadableEvent as error:
                unreadable.append(str(error))
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
        )

    # ---------------------------------------------------------- replay check

    def _replay_check(self, task_ids: Sequence[str] | None) -> ReplayCheckReport:
        differences: list[replay.Difference] = []
        unreadable: list[str] = []
        tasks = events = 0
        for task_id in self._examined(task_ids, None):
            try:
                history = self._task_events(task_id)
            except UnreadableEvent as error:
                unreadable.append(str(error))
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

    def _audit(self, task_id: str) -> TaskAudit:
        self._require_task(task_id)
        stored_events = self.recorder.select_events(Task.create_id(task_id))
        checker = chain.ChainChecker()
        entries: list[AuditEntry] = []
        task: Task | None = None
        for stored in stored_events:
            self._feed(checker, stored)
            domain_event: Any = self.mapper.to_domain_event(stored)  # UnreadableEvent
            task = domain_event.mutate(task)
            assert task is not None
            body = domain_event.model_dump(mode="json")
            entries.append(
                AuditEntry(
                    version=stored.originator_version,
                    event=type(domain_event).__name__,
                    timestamp=domain_event.timestamp,
                    actor=getattr(domain_event, "actor", None),
                    state=task.state,
                    consecutive_failures=task.consecutive_failures,
                    changes={
                        k: v
                        for k, v in body.items()
                        if k
                        not in {
                            "originator_id",
                            "originator_version",
                            "timestamp",
                            "originator_topic",
                            "chain_prev",
                        }
                    },
                    chain_prev=body.get("chain_prev"),
                    hash=(
                        chain.event_hash(domain_event)
                        if isinstance(domain_event, (TaskEvent, Task.Started))
                        and task._chained
                        else None
                    ),
                )
            )
        for found_id, version, head in self.read_models.chain_heads(task_id):
            checker.expect_head(found_id, version, head)
        [status] = checker.results() or [
            chain.ChainStatus(task_id=task_id, state="unchained", events=0)
        ]
        if task is None:
            raise UnknownTask(task_id)
        return TaskAudit(task_id=task_id, chain=status, entries=entries)

    # ---------------------------------------------------------------- export

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
                body = self._body(stored)
                checker.feed(task_id, stored.originator_version, stored.topic, body)
                chained = body.get("chain_prev") is not None
                yield {
                    "task_id": task_id,
                    "version": stored.originator_version,
                    "topic": stored.topic,
                    "actor": body.get("actor"),
                    "chain_prev": body.get("chain_prev"),
                    "hash": chain.body_hash(stored.topic, body) if chained else None,
                    "event": body,
                }
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
    line whose hash is not its event's, a broken link, a task whose events end
    before the head the trailer names.
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
            if not isinstance(line.get("tasks"), dict):
                return checker.results(), f"line {number}: the trailer lacks tasks"
            trailer = line
            continue
        try:
            task_id = str(line["task_id"])
            version = int(line["version"])
            topic = str(line["topic"])
            body = line["event"]
        except (KeyError, TypeError, ValueError) as error:
            return checker.results(), f"line {number} lacks {error}"
        if not isinstance(body, dict):
            return checker.results(), f"line {number}: its event is not an object"
        if line.get("hash") is not None and line["hash"] != chain.body_hash(
            topic, body
        ):
            first_problem = first_problem or (
                f"line {number}: task {task_id!r} version {version} does not "
                "match its recorded hash (the event was edited)"
            )
        if body.get("chain_prev") != line.get("chain_prev"):
            first_problem = first_problem or (
                f"line {number}: task {task_id!r} version {version}: its link "
                "differs from its event's (the line was edited)"
            )
        checker.feed(task_id, version, topic, body)
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
        if isinstance(summary, dict):
            checker.expect_head(
                str(task_id), int(summary.get("events") or 0), summary.get("head")
            )
    results = checker.results()
    exported = {r.task_id for r in results}
    for task_id in tasks:
        if task_id not in exported:
            first_problem = first_problem or (
                f"task {task_id!r} is named in the trailer but none of its "
                "events are in the file (they were deleted)"
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
