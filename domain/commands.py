"""How a command gets, decides and saves: the optimistic cache and its guards.

:class:`TaskCommands` is the base of ``RecoveryService``. For speed a command
decides on eventsourcing's cached aggregates without asking the store for
newer events or copying them, and saves task and run in one transaction; the
store's unique version key, a freshness check before a refusal, and dropping
the cache on any failure keep that safe across threads and processes
(docs/architecture.md).
"""

from __future__ import annotations

import functools
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from enum import Enum, auto
from typing import Any, ClassVar, ParamSpec, TypeVar

from eventsourcing.application import (
    AggregateNotFoundError,
    Application,
    ProcessingEvent,
    Repository,
)
from eventsourcing.persistence import (
    IntegrityError,
    OperationalError,
    PersistenceError,
    Recording,
)
from eventsourcing.utils import EnvType

from devs.domain import eventsourcing_internals, journal
from devs.domain.errors import (
    AlreadyExists,
    Conflict,
    DevsError,
    StoreError,
    StoreFull,
    StoreUnavailable,
    UnknownRun,
    UnknownTask,
)
from devs.domain.model import Aggregate
from devs.domain.operators import Operators
from devs.domain.reactions import react
from devs.domain.receipt import Pending, Receipt
from devs.domain.run import Run
from devs.domain.task import Task

logger = logging.getLogger("devs.commands")

COMMAND_ATTEMPTS = 10
CONFLICT_BACKOFF_SECONDS = 0.002
LOCK_STRIPES = 64

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")
A = TypeVar("A")


def _nothing(_: Task) -> None:
    """A decision that adds nothing (a new task's events are its own)."""


NO_WAIT: ContextVar[bool] = ContextVar("devs_no_wait", default=False)
"""Whether the commands of this context must not wait: not for the store's
write lock (another process's, or the process's one writer connection), not
in the back-off after a lost race. Such a command raises :class:`WouldWait`
instead, having written nothing. ``devs serve`` runs a command on its event
loop this way, and hands it to its writer thread (where it may wait) only
then."""


class WouldWait(OperationalError):
    """A command run under ``NO_WAIT`` would have had to wait; nothing was
    written. Run it again where it may wait. (An ``OperationalError``: a
    snapshot that would wait is skipped like one the store refused.)"""


class Trouble(Enum):
    """What a failure of the store says, as the store's adapter reads it."""

    LOCKED = auto()
    """Another writer holds the lock the call needed (waited for as long as
    the store allows, or, under ``NO_WAIT``, not at all)."""
    FULL = auto()
    """The disk under the store is full."""
    DAMAGED = auto()
    """The store's file is damaged, or is not a store."""
    READ_ONLY = auto()
    """The store cannot be written here."""


StoreErrorReader = Callable[[BaseException], Trouble | None]
"""The port through which the store's adapter says what its errors mean:
called with an error the store raised, it answers the :class:`Trouble` it
says, or ``None`` (a failure with nothing more to say). The domain matches
no database's error text itself."""

_READERS: list[StoreErrorReader] = []


def reads_store_errors(reader: StoreErrorReader) -> None:
    """Read the store's errors with ``reader`` too (the store's adapter
    installs its own when its persistence is made; once per reader)."""
    if reader not in _READERS:
        _READERS.append(reader)


def trouble(error: BaseException) -> Trouble | None:
    """What ``error``, a failure of the store, says (:data:`StoreErrorReader`);
    :class:`WouldWait` is another writer's lock (or turn) too."""
    if isinstance(error, WouldWait):
        return Trouble.LOCKED
    for reader in _READERS:
        found = reader(error)
        if found is not None:
            return found
    return None


def locked(error: BaseException) -> bool:
    """Whether ``error`` is another writer's lock: another process's, as the
    store's adapter says, or, under ``NO_WAIT``, the process's writer
    connection or an aggregate's lock (``WouldWait``)."""
    return trouble(error) is Trouble.LOCKED


class StoreWait:
    """What one call of the service (a command or a query, with whatever it
    calls itself) has spent waiting for the store: the store's adapter bounds
    the call's waits in all, not each wait on its own (on a database server
    by ``DEVS_STORE_TIMEOUT``: a command that waits for a connection, loses it,
    waits again and then checks what it decided on waits that long in all).

    ``waited``: seconds spent waiting so far. ``deadline``
    (``time.monotonic()``): once the store has failed the call (a connection
    lost, or none had in time), when its waits end, whatever it does
    meanwhile; ``None`` before. ``reason``: what failed it, if known.
    ``limit``: the seconds the store's adapter allows in all (its factory's
    ``store_timeout``), if it bounds them; a wait for another thread's turn
    on a task or run (:func:`take`) is bounded by what is left of it."""

    __slots__ = ("deadline", "limit", "reason", "waited")

    def __init__(self, limit: float | None = None) -> None:
        self.waited = 0.0
        self.deadline: float | None = None
        self.reason: str | None = None
        self.limit = limit

    def left(self) -> float | None:
        """Seconds the call may still wait (``None``: no bound is known)."""
        if self.limit is None:
            return None
        if self.deadline is not None:
            return self.deadline - time.monotonic()
        return self.limit - self.waited


STORE_WAIT: ContextVar[StoreWait | None] = ContextVar("devs_store_wait", default=None)
"""The :class:`StoreWait` of the service's call running in this context (set
by :func:`store_errors` around the outermost one); ``None`` outside any."""


def store_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn a failure of the event store into :class:`StoreError`.

    Every public command and query of the service is wrapped, so a caller
    meets only :class:`DevsError` subclasses (and ``TypeError`` for a call
    that does not fit the signature). The outermost call also gets a
    :class:`StoreWait` of its own, which bounds its waits for the store in all.
    """

    @functools.wraps(func)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        token = None
        if STORE_WAIT.get() is None:
            service = args[0] if args else None
            limit = getattr(getattr(service, "factory", None), "store_timeout", None)
            bound = float(limit) if isinstance(limit, (int, float)) else None
            token = STORE_WAIT.set(StoreWait(bound))
        try:
            return func(*args, **kwargs)
        except WouldWait:
            raise  # not a failure: the caller runs the command where it may wait
        except OperationalError as error:
            if NO_WAIT.get() and locked(error):
                raise WouldWait(str(error)) from error  # nothing was written
            raise store_error(error) from error
        except PersistenceError as error:
            raise store_error(error) from error
        finally:
            if token is not None:
                STORE_WAIT.reset(token)

    return guarded


def full(error: BaseException) -> bool:
    """Whether ``error`` says the disk under the store is full."""
    return trouble(error) is Trouble.FULL


def store_error(error: BaseException) -> StoreError:
    """The :class:`StoreError` (:class:`StoreFull` for a full disk) that
    reports ``error``, a failure of the store."""
    if full(error):
        return StoreFull(describe_store_error(error))
    return StoreError(describe_store_error(error))


def describe_store_error(error: BaseException) -> str:
    """One line saying what is wrong with the store, and what to do."""
    text = str(error)
    said = trouble(error)
    if said is Trouble.FULL:
        return (
            f"the disk that holds the database is full ({text}): nothing was "
            "written; free space on it, then try again"
        )
    if said is Trouble.DAMAGED:
        return f"the database file is damaged or not a devs-recovery database ({text})"
    if said is Trouble.LOCKED:
        return (
            f"the database stayed locked by another process longer than the "
            f"store's lock timeout ({text}); try again"
        )
    if said is Trouble.READ_ONLY:
        return f"the database cannot be written here ({text})"
    return f"the event store failed: {text}"


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


def take(lock: threading.Lock) -> None:
    """Acquire ``lock``; under ``NO_WAIT`` only if it is free, else
    ``WouldWait`` (another thread of the process decides on the aggregate).

    A wait for the lock counts as a wait for the store (:class:`StoreWait`):
    while the store is away, the thread that holds it is waiting for the
    store, and the time this call then has for its own waits is what is left
    of one bound, not a bound of its own after the other's. Where the store
    bounds waits (``StoreWait.limit``), the lock is waited for that long at
    most: then :class:`StoreUnavailable` (the lock is not fair: a thread that
    gives it back may take it again first, over and over)."""
    if lock.acquire(blocking=False):
        return
    if NO_WAIT.get():
        msg = "another thread is deciding on this task or run"
        raise WouldWait(msg)
    call = STORE_WAIT.get()
    left = call.left() if call is not None else None
    started = time.monotonic()
    if left is None:
        lock.acquire()
    elif not lock.acquire(timeout=max(0.0, left)):
        limit = call.limit if call is not None else None
        msg = (
            f"no turn on this task or run within {limit:g} s: other requests "
            "of this process held it, waiting for the store"
        )
        raise StoreUnavailable(msg, retry_after=limit)
    if call is not None and call.deadline is None:
        call.waited += time.monotonic() - started


@contextmanager
def turn(lock: threading.Lock | None) -> Iterator[None]:
    """Hold ``lock`` (if any) for the block, taken as :func:`take` takes it."""
    if lock is None:
        yield
        return
    take(lock)
    try:
        yield
    finally:
        lock.release()


class _StripedLocks:
    """Commands on one aggregate in one process take turns (threads share the
    cached aggregate). Task locks are always taken before run locks."""

    def __init__(self) -> None:
        self._tasks = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self._runs = [threading.Lock() for _ in range(LOCK_STRIPES)]

    def task(self, task_id: str) -> threading.Lock:
        return self._tasks[hash(task_id) % LOCK_STRIPES]

    def run(self, run_id: str | None) -> threading.Lock | None:
        if run_id is None:
            return None
        return self._runs[hash(run_id) % LOCK_STRIPES]

    def run_lock(self, run_id: str) -> threading.Lock:
        return self._runs[hash(run_id) % LOCK_STRIPES]


_JITTER = random.Random()
"""The retries' own generator: a wait never draws from (so never moves) the
``random`` module's shared one, which a program's own draws may depend on."""
os.register_at_fork(after_in_child=_JITTER.seed)  # as `random` does its own


class _Attempt:
    """One try of a command; ``retry()`` waits a random, growing moment.

    eventsourcing's own ``retry`` waits a near-constant time, which keeps two
    writers of one task in lock-step.
    """

    def __init__(self, number: int) -> None:
        self.number = number

    def retry(self) -> None:
        if NO_WAIT.get():
            msg = "another writer changed the aggregate: a retry waits first"
            raise WouldWait(msg)
        time.sleep(_JITTER.uniform(0, CONFLICT_BACKOFF_SECONDS * 2**self.number))


def _conflict(subject: str) -> Conflict:
    msg = (
        f"{subject} was changed by other writers during each of "
        f"{COMMAND_ATTEMPTS} tries; nothing was written, send the command again"
    )
    return Conflict(msg)


RECEIPT: ContextVar[Pending | None] = ContextVar("devs_receipt", default=None)
"""The receipt the commands of this context must leave (``exactly_once``)."""


class Written:
    """The log positions the commands of a ``written()`` block recorded."""

    __slots__ = ("position",)

    def __init__(self) -> None:
        self.position: int | None = None
        """The highest, or ``None`` while they recorded nothing."""


WRITTEN: ContextVar[Written | None] = ContextVar("devs_written", default=None)


class _Command:
    """``TaskCommands._command`` written out as a class.

    ``run()`` gets the task and its run, lets the task decide, lets the run
    react, builds the answer and saves, retrying as ``_command`` says. The
    answer is built holding the locks of the task and its run, before the
    save: a receipt (``exactly_once``) is saved with the events and holds it.
    (A generator-based ``contextmanager`` costs a few microseconds more per
    command, on the path of every decision.)
    """

    __slots__ = ("_answer", "_commands", "_decide", "_held", "_task_id")

    def __init__(
        self,
        commands: TaskCommands,
        task_id: str,
        decide: Callable[[Task], Any],
        answer: Callable[[Any, Task, Run | None], Any],
    ) -> None:
        self._commands = commands
        self._task_id = task_id
        self._decide = decide
        self._answer = answer
        self._held: list[threading.Lock] = []

    def run(self) -> Any:
        receipt = RECEIPT.get()
        for number in range(COMMAND_ATTEMPTS):
            if receipt is not None:
                issued = self._commands._issued(receipt)
                if issued is not None:
                    return issued
            try:
                return self._try(receipt)
            except _Stale:
                pass
            _Attempt(number).retry()
        raise _conflict(f"task {self._task_id!r}")

    def _try(self, receipt: Pending | None) -> Any:
        """One attempt: the answer; ``_Stale`` if decided on a stale cache."""
        commands, held = self._commands, self._held
        lock = commands._locks.task(self._task_id)
        take(lock)
        held.append(lock)
        try:
            task = commands._get_task(self._task_id)
            if task.run_id is not None:
                lock = commands._locks.run_lock(task.run_id)
                take(lock)
                held.append(lock)
            run = commands._run_of(task)
            return commands._decide_and_save(
                task, run, self._decide, self._answer, receipt
            )
        finally:
            while held:
                held.pop().release()


class TaskCommands(Application[str]):
    """The command mechanics of the application (see the module docstring)."""

    env: ClassVar[dict[str, str]] = {
        "AGGREGATE_CACHE_MAXSIZE": "1000",
        "AGGREGATE_CACHE_FASTFORWARD": "n",
        "DEEPCOPY_FROM_AGGREGATE_CACHE": "n",
    }
    snapshotting_intervals: ClassVar[dict[type[Any], int]] = {Task: 200, Run: 200}
    snapshotting_projectors: ClassVar[dict[type[Any], Any]] = {
        Task: replay,
        Run: replay,
    }

    def __init__(self, env: EnvType | None = None) -> None:
        super().__init__(env)
        self._locks = _StripedLocks()
        # Queries read aggregates as stored, never a cached object a command in
        # another thread may be deciding on.
        self._store = Repository(self.events, snapshot_store=self.snapshots)

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[str]]:
        """eventsourcing's ``save``, collecting our aggregates' events directly.

        The library collects each object's events behind two runtime-``Protocol``
        ``isinstance`` checks, which on Python 3.11 cost about 50 us, an eighth
        of a durable decision (docs/performance.md). Our own aggregates are
        collected as the library would, then recorded, snapshotted and notified
        by its own steps; anything else goes to the library's ``save``.
        """
        for obj in objs:
            if obj is not None and not isinstance(obj, Aggregate):
                return super().save(*objs, **kwargs)
        processing_event: ProcessingEvent[str] = ProcessingEvent()
        events, aggregates = processing_event.events, processing_event.aggregates
        for aggregate in objs:
            if aggregate is not None:
                events += aggregate.collect_events()
                if not isinstance(aggregate, Receipt):  # never read back here
                    aggregates[aggregate.id] = aggregate
        if kwargs:
            processing_event.saved_kwargs.update(kwargs)
        # The library's recording step (``Application._record``), by its public
        # parts: the event store, then the repository's cache. The events go
        # to the recorder as well, for whatever it folds them into as it
        # records them (it need not decode what it was given).
        recordings = self.events.put(
            events, tracking=None, decoded=events, **processing_event.saved_kwargs
        )
        cache = self.repository.cache
        if cache is not None and not self.repository.fastforward:
            for aggregate_id, saved in aggregates.items():
                cache.put(aggregate_id, saved)
        try:
            self._take_snapshots(processing_event)
        except PersistenceError as error:
            # The events are committed: the command stands. A snapshot only
            # saves replay time; the next interval takes one again. (Under
            # NO_WAIT one that would wait for a lock is skipped quietly.)
            if not NO_WAIT.get():
                logger.warning("snapshot not taken: %s", error)
        eventsourcing_internals.notify(self, recordings)
        self.notify(events)  # the library's deprecated hook
        return recordings

    def _take_snapshots(self, processing_event: ProcessingEvent[str]) -> None:
        """Snapshot each saved aggregate that crossed its interval, as held.

        eventsourcing's own step reads the aggregate back from the store at the
        due version (the previous snapshot and up to an interval of events) and
        replays it: an extra read and replay every 200 events that cost a tenth
        of a decision on average (docs/performance.md). The aggregate just saved
        holds exactly the state its committed events give, so it is snapshotted
        as it is, at its own version (the last of the batch, which may lie past
        the due one when a command recorded several events).
        """
        if self.snapshots is None:
            return
        due: dict[str, Aggregate] = {}
        intervals, aggregates = self.snapshotting_intervals, processing_event.aggregates
        for event in processing_event.events:
            aggregate = aggregates.get(event.originator_id)
            interval = intervals.get(type(aggregate))
            if (
                interval is not None
                and event.originator_version % interval == 0
                and isinstance(aggregate, Aggregate)
            ):
                due[aggregate.id] = aggregate
        if due:
            self.snapshots.put(
                [type(aggregate).Snapshot.take(aggregate) for aggregate in due.values()]
            )

    def _create(
        self,
        task_id: str,
        run_id: str | None,
        make: Callable[[], Task],
        answer: Callable[[Task], A],
    ) -> A:
        """Start a task (and its node in the run); its answer is built, locks
        held, before the save."""
        receipt = RECEIPT.get()
        for attempt in self._attempts(f"task {task_id!r}"):
            if receipt is not None:
                issued = self._issued(receipt)
                if issued is not None:
                    return issued  # type: ignore[no-any-return]
            with turn(self._locks.task(task_id)), turn(self._locks.run(run_id)):
                if self._find_task(task_id) is not None:
                    raise AlreadyExists.task(task_id)
                run = self._get_run(run_id) if run_id is not None else None
                task = make()
                with suppress(_Stale):
                    return self._decide_and_save(
                        task, run, _nothing, lambda _, t, __: answer(t), receipt
                    )
            attempt.retry()
        raise AssertionError("unreachable: _attempts raises when they run out")

    def _command(
        self,
        task_id: str,
        decide: Callable[[Task], T],
        answer: Callable[[T, Task, Run | None], A],
    ) -> A:
        """Get the task and its run, let the task decide, let the run react,
        build the answer (from what ``decide`` returned and the task and run as
        decided), save, and return the answer.

        Retries, on fresh aggregates, a command that lost a race to another
        writer or decided on a stale cache. Inside ``exactly_once``, the
        command's receipt is saved with its events, and a command whose receipt
        is already stored answers from it without deciding again.
        """
        answered: A = _Command(self, task_id, decide, answer).run()
        return answered

    def _decide_and_save(
        self,
        task: Task,
        run: Run | None,
        decide: Callable[[Task], T],
        answer: Callable[[T, Task, Run | None], A],
        receipt: Pending | None = None,
    ) -> A:
        try:
            outcome = decide(task)
            new_events = list(task.pending_events)
            reacted = run is not None and react(run, new_events)
            # Nothing written means no version conflict can reveal a stale cache:
            # a task that wrote nothing, or a run whose reaction wrote nothing,
            # is checked against the store instead.
            unwritten = not new_events or (
                reacted and run is not None and not run.pending_events
            )
            if unwritten and self._is_stale(task, run):
                raise _Stale
            answered = answer(outcome, task, run)
            if receipt is None:
                self._commit(task, run)
            else:
                self._commit(task, run, Receipt.issue(receipt, answered))
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
        return answered

    def _commit(
        self, *aggregates: Task | Run | Receipt | Operators | None
    ) -> list[Recording[str]]:
        recordings = self.save(*aggregates)
        for recording in recordings:
            journal.record(recording.domain_event, recording.notification.id)
        written = WRITTEN.get()
        if written is not None and recordings:
            last = recordings[-1].notification.id
            if written.position is None or last > written.position:
                written.position = last
        return recordings

    def _issued(self, receipt: Pending) -> Any:
        """The stored answer of ``receipt``'s command, or ``None`` if it was
        never done; ``InvalidInput`` if its key was used for another request."""
        try:
            issued: Receipt = self._store.get(receipt.id)
        except AggregateNotFoundError:
            return None
        return issued.answer_to(receipt)

    def _attempts(self, subject: str) -> Iterator[_Attempt]:
        for number in range(COMMAND_ATTEMPTS):
            yield _Attempt(number)
        raise _conflict(subject)

    def _is_stale(self, task: Task, run: Run | None) -> bool:
        """Whether the store holds events newer than these aggregates as loaded
        (their version before the events this command added)."""
        for aggregate in (task, run):
            if aggregate is None:
                continue
            loaded = aggregate.version - len(aggregate.pending_events)
            if loaded > 0 and self.recorder.select_events(
                aggregate.id, gt=loaded, limit=1
            ):
                return True
        return False

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
