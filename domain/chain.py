"""The tamper-evident log: each task's events form a SHA-256 hash chain.

Every task event carries ``chain_prev``, the hash of its predecessor's
canonical form, which leaves ``null`` fields out so that a later release may
add an optional field without changing old hashes. Pure code, bodies in,
findings out: the same :class:`ChainChecker` serves the store
(``RecoveryService.verify``) and an exported file (``devs verify-export``).
The canonical form and the findings: docs/audit.md.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any, Literal

import orjson
from eventsourcing.utils import get_topic, resolve_topic

from devs.domain.model import Value

ChainState = Literal["intact", "unchained", "broken"]
MAX_DEPTH = 32
"""Deepest nesting a body may have (events nest a few levels)."""


def _without_nulls(value: Any, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:  # no event nests this deep: a crafted body
        msg = f"the body nests deeper than {MAX_DEPTH} levels"
        raise ValueError(msg)
    if isinstance(value, dict):
        return {
            k: _without_nulls(v, depth + 1) for k, v in value.items() if v is not None
        }
    if isinstance(value, list):
        return [_without_nulls(v, depth + 1) for v in value]
    return value


@functools.lru_cache(maxsize=256)
def canonical_topic(topic: str) -> str:
    """The topic the event's class is registered under (``devs:Task.…``), so
    that an event stored under an older alias of its class hashes as its class
    does; a topic that does not resolve is taken as it is."""
    try:
        return get_topic(resolve_topic(topic))
    except Exception:  # an unknown topic: its text is all there is
        return topic


def canonical(topic: str, body: dict[str, Any]) -> bytes:
    """The canonical form of an event's JSON ``body`` stored under ``topic``."""
    return orjson.dumps(
        {**_without_nulls(body), "topic": canonical_topic(topic)},
        option=orjson.OPT_SORT_KEYS,
    )


def body_hash(topic: str, body: dict[str, Any]) -> str:
    """The SHA-256 (hex) of the canonical form."""
    return hashlib.sha256(canonical(topic, body)).hexdigest()


HASHES_KEPT = 64
"""How many events' hashes :func:`event_hash` keeps, by the event object."""
_hashed: dict[int, tuple[Any, str]] = {}


def event_hash(event: Any) -> str:
    """The SHA-256 of a domain event (a pydantic model, never changed once
    made), as stored.

    The hashes of the last events hashed are kept with the events themselves
    (held, so no other object takes their ids): a decision's event is hashed
    where the task index is folded, and again when the task's next event
    links to it; the second is looked up.
    """
    kept = _hashed.get(id(event))
    if kept is not None and kept[0] is event:
        return kept[1]
    digest = _event_hash(event)
    while len(_hashed) >= HASHES_KEPT:
        try:  # another thread may be changing it: then try again
            del _hashed[next(iter(_hashed))]
        except (RuntimeError, KeyError, StopIteration):
            continue
    _hashed[id(event)] = (event, digest)
    return digest


def _event_hash(event: Any) -> str:
    """The SHA-256 of a domain event (a pydantic model), as stored.

    The same canonical form as :func:`body_hash` of its stored body, built
    faster: pydantic leaves the nulls out as it dumps the event to JSON-safe
    Python values, and orjson writes them with the keys sorted, the bytes its
    JSON text read back would give (no text in between, no Python walk).
    """
    cls = type(event)
    serializer = cls.__pydantic_serializer__
    body = serializer.to_python(event, mode="json", exclude_none=True)
    body["topic"] = canonical_topic(get_topic(cls))
    try:
        form = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer past 64 bits: JSON text reads it back as a float
        written = orjson.loads(serializer.to_json(event, exclude_none=True))
        written["topic"] = body["topic"]
        form = orjson.dumps(written, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(form).hexdigest()


def _written_linked(started: dict[str, Any]) -> bool:
    """Whether a ``Started`` body comes from a release that links events: its
    policy names ``stuck_detection``, which came with the chain."""
    policy = started.get("policy")
    return isinstance(policy, dict) and "stuck_detection" in policy


class ChainStatus(Value):
    """One task's chain: ``intact``, ``unchained`` (written before the chain
    existed) or ``broken`` (``problem`` names the version)."""

    task_id: str
    state: ChainState
    events: int
    head: str | None = None
    """The hash of the last event (of a chained task)."""
    broken_at: int | None = None
    problem: str | None = None


class _Task:
    __slots__ = ("broken_at", "chained", "events", "head", "problem", "version")

    def __init__(self) -> None:
        self.version = 0
        self.events = 0
        self.chained: bool | None = None
        self.head: str | None = None
        self.broken_at: int | None = None
        self.problem: str | None = None


class ChainChecker:
    """Checks the chains of many tasks from their events in version order.

    Feed each task's events in order (tasks may interleave, as in the log);
    memory is one small record per task. ``results()`` gives every task's
    :class:`ChainStatus`, ``expect_head`` compares a chain's end with a head
    kept elsewhere (the task index, an export's summary).
    """

    def __init__(self) -> None:
        self._tasks: dict[str, _Task] = {}

    def feed(
        self,
        task_id: str,
        version: int,
        topic: str,
        body: dict[str, Any] | None,
        *,
        unreadable: str | None = None,
    ) -> None:
        """One stored event; ``body`` ``None`` with ``unreadable`` saying why
        when it cannot be decoded."""
        task = self._tasks.setdefault(task_id, _Task())
        if task.broken_at is not None:
            return
        task.events += 1
        expected = task.version + 1
        where = f"task {task_id!r}"
        if version != expected:
            what = "deleted" if version > expected else "reordered or repeated"
            self._break(
                task,
                expected,
                f"{where}: version {expected} expected, found version {version} "
                f"(an event was {what})",
            )
            return
        task.version = version
        if body is None:
            self._break(
                task, version, f"{where}: version {version} is unreadable: {unreadable}"
            )
            return
        link = body.get("chain_prev")
        if version == 1:
            task.chained = link is not None
            if not task.chained and _written_linked(body):
                self._break(
                    task,
                    1,
                    f"{where}: version 1 has no link, but it was written by a "
                    "release that links every event (the links were removed)",
                )
                return
            if task.chained and link != f"task:{task_id}":
                self._break(
                    task,
                    1,
                    f"{where}: version 1 does not open the chain with the task id "
                    "(the event was edited)",
                )
                return
        elif not task.chained:
            if link is not None:
                self._break(
                    task,
                    version,
                    f"{where}: version {version} has a link but the task's first "
                    "event has none (an event was edited)",
                )
            return
        elif link != task.head:
            self._break(
                task,
                version - 1,
                f"{where}: version {version - 1} does not match the hash recorded "
                f"at version {version} (version {version - 1} or {version} was "
                "edited, deleted or reordered)",
            )
            return
        if task.chained:
            try:
                task.head = body_hash(topic, body)
            except (TypeError, ValueError, RecursionError) as error:  # deep nesting
                self._break(
                    task,
                    version,
                    f"{where}: version {version} cannot be hashed "
                    f"({type(error).__name__}: {str(error)[:80]})",
                )

    def expect_head(
        self, task_id: str, version: int, head: str | None, *, exact: bool = False
    ) -> None:
        """The chain must end at ``version`` with hash ``head`` (kept elsewhere).

        In the store, events recorded after the head was kept are checked by
        their links; ``exact`` (an export's trailer, written after its last
        event) refuses them too.
        """
        task = self._tasks.setdefault(task_id, _Task())
        if task.broken_at is not None:
            return
        where = f"task {task_id!r}"
        if task.version < version:
            self._break(
                task,
                task.version + 1,
                f"{where}: its events end at version {task.version} but version "
                f"{version} was recorded (events were deleted)",
            )
        elif task.version > version:
            if exact:
                self._break(
                    task,
                    version + 1,
                    f"{where}: {task.version - version} event(s) after version "
                    f"{version}, where its recorded end is (events were added)",
                )
            return  # in the store: written after the head was kept
        elif head is not None and not task.chained:
            self._break(
                task,
                1,
                f"{where}: a chain head was kept for it, but its events carry no "
                "links (the links were removed)",
            )
        elif task.chained and head is not None and task.head != head:
            self._break(
                task,
                version,
                f"{where}: version {version} does not match the hash kept for it "
                "(the last event was edited)",
            )

    def version(self, task_id: str) -> int:
        """The last version fed for ``task_id`` (0: none)."""
        task = self._tasks.get(task_id)
        return task.version if task is not None else 0

    def problem(self, task_id: str) -> str | None:
        """What broke ``task_id``'s chain, if it is broken."""
        task = self._tasks.get(task_id)
        return task.problem if task is not None else None

    def results(self) -> list[ChainStatus]:
        found: list[ChainStatus] = []
        for task_id, task in self._tasks.items():
            state: ChainState
            if task.broken_at is not None:
                state = "broken"
            elif task.chained:
                state = "intact"
            else:
                state = "unchained"
            found.append(
                ChainStatus(
                    task_id=task_id,
                    state=state,
                    events=task.events,
                    head=task.head if state == "intact" else None,
                    broken_at=task.broken_at,
                    problem=task.problem,
                )
            )
        return found

    @staticmethod
    def _break(task: _Task, version: int, problem: str) -> None:
        task.broken_at = version
        task.problem = problem
