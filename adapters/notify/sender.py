"""The outbox's sender, and the thread that runs it beside the deadline
sweeper.

Neither ever runs on a command's path: a command records its events and
answers, and here a background thread adds each registered channel's
deliveries, leases the due ones and tries them on a small pool of threads, so
a slow endpoint holds one thread and nothing else. Every server of one
database may run a sender; the lease keeps a message to one sender at a time
(docs/notifications.md).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import TYPE_CHECKING, TypeVar

import httpx
from eventsourcing.persistence import OperationalError, PersistenceError

from devs.adapters.notify import registry
from devs.adapters.notify.channel import Send, Threads
from devs.adapters.notify.people import console_link
from devs.adapters.notify.settings import NotifySettings
from devs.adapters.notify.status import Attempt, Attempted, next_wait
from devs.adapters.notify.sweeper import SWEEP_EVERY, Sweeper, owner_name
from devs.adapters.store.persistence import NO_BUSY_WAIT
from devs.domain import DevsError
from devs.domain.commands import locked
from devs.domain.names import DeliveryState
from devs.domain.outbox import OutboxMessage
from devs.domain.ports import Claimed, OutboxDeliveries, Settled

if TYPE_CHECKING:
    from devs.domain.application import RecoveryService

logger = logging.getLogger("devs.outbox")
T = TypeVar("T")

OUTBOX = "outbox"
"""The read model the sender reads its messages from."""
POLL = 0.1
"""Seconds between looks at the outbox when nothing is due."""
GATHER = 0.005
"""Seconds a busy sender waits before its next look, for one transaction to
record and claim several deliveries."""
SENDERS = 16
"""Tries under way at once in one process (each starts at once: no try waits
for a thread)."""
PER_CHANNEL = 8
"""Tries under way at once to one endpoint: a slow one holds at most these
threads, the others go on."""
STORE_PAUSE = 1.0
"""Seconds to wait after the store failed before looking again."""


def open_channels(service: RecoveryService, settings: NotifySettings) -> None:
    """Record the endpoints of ``settings`` not yet known: each hears of
    what is recorded from now on (``devs serve`` does it before its first
    worker answers, so nothing recorded after it starts is taken for
    history)."""
    endpoints = registry.channels_of(settings)
    if endpoints:
        log_end = service.recorder.max_notification_id() or 0
        service.read_models.deliveries.open_channels(
            [(e.key, e.kind, e.shown) for e in endpoints], log_end
        )


def _after(
    before: Future[Attempt] | None,
    patience: float,
    send: Send,
    client: httpx.Client,
    message: OutboxMessage,
    link: str | None,
    timeout: float,
) -> Attempt:
    """``send(...)`` once ``before`` (the same task's previous try on the
    channel) ended, or after ``patience`` seconds at most."""
    if before is not None:
        wait_for([before], timeout=patience)
    return send(client, message, link, timeout)


class Sender:
    """Adds, leases, tries and records deliveries (one thread calls
    :meth:`step`; the tries run on a pool of :data:`SENDERS` threads)."""

    def __init__(
        self,
        service: RecoveryService,
        settings: NotifySettings,
        *,
        owner: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.service = service
        self.settings = settings
        self.owner = owner or owner_name()
        self.store: OutboxDeliveries = service.read_models.deliveries
        threads = self.store if isinstance(self.store, Threads) else None
        self.channels = {
            channel.key: channel for channel in registry.channels_of(settings, threads)
        }
        self.types = {key: channel.types for key, channel in self.channels.items()}
        self.pool = ThreadPoolExecutor(SENDERS, thread_name_prefix="devs-outbox")
        self.client = httpx.Client(follow_redirects=False)
        self.inflight: dict[Future[Attempt], Claimed] = {}
        self.rng = rng or random.Random()
        self.opened = False
        self.outcomes: dict[Future[Attempt], Settled] = {}
        """What each ended try came to, worked out (and logged) once, kept
        until it is recorded (a store away for a while: recorded later)."""
        self.last_of_task: dict[tuple[str, str], Future[Attempt]] = {}
        """The latest try started of each task on each channel to people: a
        task's next try there waits for it (its messages thread in order)."""
        self._turn = 0

    def open(self) -> None:
        """Record the channels not yet known: they hear of what is recorded
        from now on."""
        open_channels(self.service, self.settings)
        self.opened = True

    def step(self) -> int:
        """One look: record the tries that ended, add the new messages'
        deliveries, lease the due ones there is room for (each endpoint at
        most :data:`PER_CHANNEL` at once) and start them, in one write
        transaction (none when there is nothing to do); how many tries ended
        or started."""
        if not self.opened:
            self.open()
        finished = [future for future in self.inflight if future.done()]
        results = [self._outcome(self.inflight[f], f) for f in finished]
        busy = Counter(
            item.channel for f, item in self.inflight.items() if f not in finished
        )
        room = SENDERS - sum(busy.values())
        wants: dict[str, int] = {}
        keys = list(self.channels)
        if keys:  # a different endpoint first each look: each gets its turn
            self._turn = (self._turn + 1) % len(keys)
            keys = keys[self._turn :] + keys[: self._turn]
        for key in keys:
            wants[key] = max(0, min(PER_CHANNEL - busy[key], room))
            room -= wants[key]
        if self.channels:
            self._keep_up()
        try:
            claimed = self.store.exchange(
                self.owner, results, self.types, time.time(), self.settings.lease, wants
            )
        except OperationalError as error:
            if not locked(error):
                raise
            # Another writer holds it (a second sender, a query folding on a
            # store in memory): nothing was written; the tries that ended stay
            # in flight and are recorded at the next look.
            return 0
        self._forget(finished)
        trying = {(i.channel, i.message.id) for i in self.inflight.values()}
        started = 0
        for item in claimed:
            if (item.channel, item.message.id) in trying:
                continue  # its try is still under way here: not a second one
            channel = self.channels[item.channel]
            public_url = self.settings.public_url
            link = console_link(public_url, item.message.task_id)
            task_key = (item.channel, item.message.task_id)
            before = self.last_of_task.get(task_key) if channel.in_order else None
            future = self.pool.submit(
                _after,
                before,
                self.settings.lease / 2,
                channel.send,
                self.client,
                item.message,
                link,
                self.settings.webhook_timeout,
            )
            if channel.in_order:
                self.last_of_task[task_key] = future
            self.inflight[future] = item
            started += 1
        return len(finished) + started

    def _keep_up(self) -> None:
        """The outbox as current as it can be now: folded here on SQLite
        (waiting its turn for the write lock between commands), by the
        runner on PostgreSQL. A lock held too long is no failure: what is
        folded is sent now, the rest at the next look."""
        try:
            self.service.read_models.keep_up([OUTBOX])
        except OperationalError as error:
            if not locked(error):
                raise

    def wait(self, timeout: float) -> None:
        """Until a try ends, at most ``timeout`` seconds."""
        futures = list(self.inflight)
        if not futures:
            time.sleep(timeout)
            return
        wait_for(futures, timeout=timeout, return_when=FIRST_COMPLETED)

    def settle_done(self) -> int:
        """Record the tries that ended (in a transaction of their own)."""
        finished = [future for future in self.inflight if future.done()]
        if not finished:
            return 0
        results = [self._outcome(self.inflight[f], f) for f in finished]
        self.store.settle(self.owner, results, time.time())
        self._forget(finished)
        return len(finished)

    def _forget(self, finished: list[Future[Attempt]]) -> None:
        for future in finished:
            item = self.inflight.pop(future)
            self.outcomes.pop(future, None)
            key = (item.channel, item.message.task_id)
            if self.last_of_task.get(key) is future:
                del self.last_of_task[key]

    def _outcome(self, item: Claimed, future: Future[Attempt]) -> Settled:
        known = self.outcomes.get(future)
        if known is None:
            known = self.outcomes[future] = self._judge(item, future)
        return known

    def _judge(self, item: Claimed, future: Future[Attempt]) -> Settled:
        channel = self.channels[item.channel]
        try:
            tried = future.result()
        except Exception as error:  # a bug in a sender: kept, tried again
            logger.exception("sending %s to %s failed", item.message.id, channel.shown)
            tried = Attempt(
                outcome=Attempted.RETRY, status=None, error=type(error).__name__
            )
        tries = item.tries + 1

        def settled(
            state: DeliveryState, *, next_at: float | None = None, disable: bool = False
        ) -> Settled:
            error = None if state is DeliveryState.DELIVERED else tried.error
            return Settled(
                channel=item.channel,
                message_id=item.message.id,
                state=state,
                next_at=next_at,
                status=tried.status,
                error=error,
                disable=disable,
            )

        if tried.outcome is Attempted.DELIVERED:
            if tried.error:  # delivered otherwise than asked (plain text)
                logger.warning(
                    "%s: %s: %s", channel.shown, item.message.id, tried.error
                )
            return settled(DeliveryState.DELIVERED)
        if tried.outcome is Attempted.GONE:
            logger.warning(
                "%s answered 410 Gone to %s: the endpoint is disabled "
                "(devs webhooks redeliver enables it again)",
                channel.shown,
                item.message.id,
            )
            return settled(DeliveryState.DEAD, disable=True)
        if tried.outcome is Attempted.REFUSED:
            logger.warning(
                "%s refused %s for good: a dead letter after %d tries (%s)",
                channel.shown,
                item.message.id,
                tries,
                tried.error,
            )
            return settled(DeliveryState.DEAD)
        wait = next_wait(
            tries, self.settings.webhook_backoff, tried.retry_after, rng=self.rng
        )
        if wait is None:
            logger.warning(
                "%s: %s is a dead letter after %d tries (%s)",
                channel.shown,
                item.message.id,
                tries,
                tried.error,
            )
            return settled(DeliveryState.DEAD)
        logger.info(
            "%s: %s not delivered (%s); try %d in %.0f s",
            channel.shown,
            item.message.id,
            tried.error,
            tries + 1,
            wait,
        )
        return settled(DeliveryState.PENDING, next_at=time.time() + wait)

    def drain(self, timeout: float) -> None:
        """Record the tries under way (waiting at most ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while self.inflight and time.monotonic() < deadline:
            self.wait(min(0.1, max(deadline - time.monotonic(), 0.0)))
            self.settle_done()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()


class Background:
    """The sender and the sweeper on one thread of their own, until
    :meth:`stop`; a store that fails is looked at again a second later."""

    def __init__(
        self,
        service: RecoveryService,
        settings: NotifySettings,
        *,
        sweep: bool = True,
        in_worker: bool = True,
    ) -> None:
        """``in_worker``: the thread shares its process with requests, so it
        never waits inside the process's connection pool nor in SQLite's
        busy handler (:data:`~devs.adapters.store.persistence.NO_BUSY_WAIT`); a
        notifier process of its own (``in_worker=False``) waits its turn."""
        self.in_worker = in_worker
        owner = owner_name()
        self.sender = Sender(service, settings, owner=owner)
        self.sweeper = (
            Sweeper(service, settings.human_reminder, owner=owner) if sweep else None
        )
        self.stopping = threading.Event()
        self.thread = threading.Thread(
            target=self._run, name="devs-outbox", daemon=True
        )
        self._failing: set[str] = set()
        self._contended = False
        """Whether the last call found the store busy (not away)."""

    def start(self) -> Background:
        try:  # now, not at the thread's first look: nothing is taken for history
            self.sender.open()
        except Exception:  # the store is away: the thread opens them later
            logger.warning("the outbox could not open its endpoints yet")
        self.thread.start()
        return self

    def _run(self) -> None:
        # In a worker: never wait in its pool or SQLite's busy handler while
        # requests would wait behind it; try again at the next look.
        NO_BUSY_WAIT.set(self.in_worker)
        next_sweep = 0.0
        while not self.stopping.is_set():
            if self.sweeper is not None and time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + SWEEP_EVERY
                self._guarded("sweep the deadlines", self.sweeper.sweep)
            busy = self._guarded("send", self.sender.step)
            if busy is None:  # it failed: look again a little later
                self.stopping.wait(POLL if self._contended else STORE_PAUSE)
            elif busy:
                # Let a few more messages and answers gather: one write
                # transaction for them all, not one each.
                self.stopping.wait(GATHER)
            else:
                self.sender.wait(POLL)

    def _guarded(self, what: str, call: Callable[[], T]) -> T | None:
        """``call()``; a failure is said once (a traceback when it is no
        store's), then again when it works once more."""
        self._contended = False
        try:
            value = call()
        except Exception as error:
            if locked(error):  # another writer's turn: the next look goes on
                self._contended = True
                return None
            if what not in self._failing:
                self._failing.add(what)
                if isinstance(error, PersistenceError | DevsError):
                    logger.warning(
                        "the outbox cannot %s: the store is unavailable (%s); "
                        "trying again every %.0f s",
                        what,
                        type(error).__name__,
                        STORE_PAUSE,
                    )
                else:
                    logger.exception("the outbox cannot %s", what)
            return None
        if what in self._failing:
            self._failing.discard(what)
            logger.warning("the outbox can %s again", what)
        return value

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self.thread.join(timeout)
        if not self.thread.is_alive():  # else it still uses the sender
            try:
                self.sender.drain(timeout)
                if self.sweeper is not None:
                    self.sweeper.release()
            except Exception:  # the store is away: the leases run out instead
                logger.warning("the outbox could not record its last tries")
        self.sender.close()
