"""The outbox's sender and the deadline sweeper, beside the commands.

Neither ever runs on a command's path: a command records its events and
answers; the ``outbox`` read model folds the messages they ask to send; here
a background thread of ``devs serve`` (or ``devs deadlines run``) adds each
configured channel's deliveries (``outbox_deliveries``), leases the due ones,
tries them on a small pool of threads (a slow endpoint holds one thread, no
command and no other endpoint) and records what each try came to: delivered,
tried again on the channel's schedule, or dead-lettered after its last try
(docs/notifications.md).

Every server of one database may run a sender: a delivery is leased to one
sender at a time (for twice the attempt timeout and 5 s more), so a message
is tried by one of them at a time, and again by another if its sender died
mid-try. The deadline sweeper runs in the one process holding the
``deadlines`` lease: each second it hands off the waits whose deadline has
passed and sends the reminders that are due.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

import httpx
from eventsourcing.persistence import OperationalError, PersistenceError

from devs.adapters.people import (
    PeopleSettings,
    SlackPost,
    Threads,
    console_link,
    for_people,
    people_settings,
    post_slack,
    send_email,
    slack_shown,
    thread_root,
)
from devs.adapters.persistence import NO_BUSY_WAIT
from devs.adapters.webhooks import (
    ATTEMPT_TIMEOUT,
    Attempt,
    Attempted,
    WebhookSettings,
    attempt,
    next_wait,
    shown,
    webhook_settings,
)
from devs.domain import DevsError, InvalidInput
from devs.domain.commands import locked
from devs.domain.model import Immutable
from devs.domain.names import DeliveryState, MessageType
from devs.domain.outbox import OutboxMessage
from devs.domain.policy import MAX_HUMAN_DEADLINE, env_var
from devs.domain.ports import Claimed, OutboxDeliveries, PendingSession, Settled

if TYPE_CHECKING:
    from devs.domain.application import RecoveryService

logger = logging.getLogger("devs.outbox")
T = TypeVar("T")

REMINDER_ENV = "DEVS_HUMAN_REMINDER"
TIMEOUT_ENV = "DEVS_WEBHOOK_TIMEOUT"
REMINDER_MAX = 30 * 86_400.0
DEADLINE_ENV = env_var("human_deadline")
DEADLINE_MAX = float(MAX_HUMAN_DEADLINE)
TIMEOUT_MAX = 60.0
OUTBOX = "outbox"
"""The read model the sender reads its messages from."""
SESSIONS = "hitl_sessions"
"""The read model the sweeper reads the waits from."""
POLL = 0.1
"""Seconds between looks at the outbox when nothing is due."""
SWEEP_EVERY = 1.0
"""Seconds between the deadline sweeper's looks at the waits."""
LEASE = "deadlines"
"""The lease the one sweeper of a database holds."""
GATHER = 0.005
"""Seconds a busy sender waits before its next look, for one transaction to
record and claim several deliveries."""
SWEEP_LEASE = 10.0
"""How long the ``deadlines`` lease lasts unless renewed."""
SENDERS = 16
"""Tries under way at once in one process (each starts at once: no try waits
for a thread)."""
PER_CHANNEL = 8
"""Tries under way at once to one endpoint: a slow one holds at most these
threads, the others go on."""
STORE_PAUSE = 1.0
"""Seconds to wait after the store failed before looking again."""


class NotifySettings(Immutable):
    """What the sender and the sweeper are configured with."""

    webhooks: WebhookSettings
    people: PeopleSettings
    reminder: float | None
    """``DEVS_HUMAN_REMINDER``: seconds before a deadline to remind."""
    timeout: float = ATTEMPT_TIMEOUT
    """``DEVS_WEBHOOK_TIMEOUT``: seconds an endpoint has to answer."""

    @property
    def lease(self) -> float:
        """How long a try's delivery is leased to its sender: a try's
        timeout applies to each of its phases (connecting, sending, each
        read), so four of them and 10 s more."""
        return 4 * self.timeout + 10.0


def _seconds(
    environ: Mapping[str, str], name: str, upper: float, default: float | None
) -> float | None:
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= upper:  # NaN fails this too
        msg = f"{name} must be seconds in (0, {upper:.0f}], got {text[:40]!r}"
        raise InvalidInput(msg, field=name)
    return value


def reminder_setting(environ: Mapping[str, str] | None = None) -> float | None:
    """``DEVS_HUMAN_REMINDER`` (and ``DEVS_HUMAN_DEADLINE`` checked): what
    the sweeper alone needs; ``InvalidInput`` naming a wrong one."""
    env = os.environ if environ is None else environ
    _seconds(env, DEADLINE_ENV, DEADLINE_MAX, None)
    return _seconds(env, REMINDER_ENV, REMINDER_MAX, None)


def notify_settings(environ: Mapping[str, str] | None = None) -> NotifySettings:
    """The settings of ``environ`` (default: ``os.environ``); ``InvalidInput``
    naming the variable that is wrong, never repeating a secret."""
    env = os.environ if environ is None else environ
    # A deadline fails closed: one mistyped must stop the server, not be
    # dropped with a warning (the policy's other fields keep their default).
    _seconds(env, DEADLINE_ENV, DEADLINE_MAX, None)
    timeout = _seconds(env, TIMEOUT_ENV, TIMEOUT_MAX, ATTEMPT_TIMEOUT)
    assert timeout is not None
    return NotifySettings(
        webhooks=webhook_settings(env),
        people=people_settings(env),
        reminder=_seconds(env, REMINDER_ENV, REMINDER_MAX, None),
        timeout=timeout,
    )


Send = Callable[[httpx.Client, OutboxMessage, "str | None", float], Attempt]


PEOPLE_KINDS = frozenset({"slack", "email"})
"""The kinds of channel that speak to people: a task's messages are tried
on each one at a time, in order, so that they thread."""


def channel_key(kind: str, address: str) -> str:
    """A channel's key in ``outbox_channels``: its kind and a digest of its
    address (which may hold a credential)."""
    digest = hashlib.sha256(address.encode()).hexdigest()[:16]
    return f"{kind}:{digest}"


class Channel:
    """One configured endpoint: its key in ``outbox_channels`` (a digest of
    its address, which may hold a credential), how it is shown, the message
    types it takes (``None``: all), and how a message is sent to it."""

    def __init__(
        self,
        kind: str,
        address: str,
        shown: str,
        types: frozenset[str] | None,
        send: Send,
    ) -> None:
        self.key = channel_key(kind, address)
        self.kind, self.shown, self.types, self.send = kind, shown, types, send


def _thread_of(threads: Threads | None, channel: str, task_id: str) -> str | None:
    """The task's thread on ``channel``; ``None`` when there is none yet or
    the store cannot say (the message then starts one: a thread is a
    comfort, never a reason not to tell people)."""
    if threads is None:
        return None
    try:
        return threads.thread_of(channel, task_id)
    except Exception as error:
        logger.warning(
            "cannot read the thread of %s: %s", task_id, type(error).__name__
        )
        return None


def _start_thread(
    threads: Threads | None, channel: str, task_id: str, thread: str, message_id: str
) -> str | None:
    """:meth:`Threads.start_thread`; ``None`` when the store cannot say."""
    if threads is None:
        return None
    try:
        return threads.start_thread(channel, task_id, thread, message_id)
    except Exception as error:
        logger.warning(
            "cannot record the thread of %s: %s", task_id, type(error).__name__
        )
        return None


def channels_of(
    settings: NotifySettings, threads: Threads | None = None
) -> list[Channel]:
    """The channels ``settings`` configure: each webhook URL, Slack, e-mail.
    ``threads`` remembers each task's Slack thread and first e-mail (without
    it, each Slack message is a new one and each e-mail replies to the
    task's root)."""
    found: list[Channel] = []
    secret = settings.webhooks.secrets[0] if settings.webhooks.secrets else ""
    for url in settings.webhooks.urls:

        def to_webhook(
            client: httpx.Client,
            message: OutboxMessage,
            link: str | None,
            timeout: float,
            url: str = url,
        ) -> Attempt:
            if link is not None:
                message = message.model_copy(
                    update={"data": {**message.data, "link": link}}
                )
            return attempt(client, url, message, secret, timeout=timeout)

        found.append(Channel("webhook", url, shown(url), None, to_webhook))
    people = settings.people
    kinds = frozenset(kind.value for kind in MessageType if for_people(kind.value))
    if people.slack_url is not None or people.slack_token is not None:
        found.append(_slack_channel(people, kinds, threads))
    if people.smtp is not None and people.recipients:
        server = people.smtp
        address = f"{server.shown}\0{server.user}\0{','.join(people.recipients)}"
        shown_to = f"e-mail to {', '.join(people.recipients)}"
        email_key = channel_key("email", address)

        def to_email(
            client: httpx.Client,
            message: OutboxMessage,
            link: str | None,
            timeout: float,
        ) -> Attempt:
            task_id = message.task_id
            root = thread_root(task_id)
            starter = _start_thread(threads, email_key, task_id, root, message.id)
            first = starter == message.id
            return send_email(people, message, link, timeout=timeout, first=first)

        found.append(Channel("email", address, shown_to, kinds, to_email))
    return found


def _slack_channel(
    people: PeopleSettings, kinds: frozenset[str], threads: Threads | None
) -> Channel:
    """Slack's channel: an incoming webhook (each message a new one), or
    the Web API with a bot token, each task's later messages replies in the
    thread of its first."""
    if people.slack_token is None:
        assert people.slack_url is not None
        hook = SlackPost(url=people.slack_url)

        def to_hook(
            client: httpx.Client,
            message: OutboxMessage,
            link: str | None,
            timeout: float,
        ) -> Attempt:
            return post_slack(client, hook, message, link, timeout=timeout).attempt

        shown_hook = slack_shown(people.slack_url)
        return Channel("slack", people.slack_url, shown_hook, kinds, to_hook)
    api = f"{people.slack_api_url}/chat.postMessage"
    address = f"{people.slack_api_url}\0{people.slack_channel}"
    key = channel_key("slack", address)
    token, channel = people.slack_token, people.slack_channel

    def to_api(
        client: httpx.Client,
        message: OutboxMessage,
        link: str | None,
        timeout: float,
    ) -> Attempt:
        thread = _thread_of(threads, key, message.task_id)
        post = SlackPost(url=api, token=token, channel=channel, thread_ts=thread)
        sent = post_slack(client, post, message, link, timeout=timeout)
        if thread is None and sent.ts is not None:
            _start_thread(threads, key, message.task_id, sent.ts, message.id)
        return sent.attempt

    shown_api = f"Slack {channel} via {slack_shown(people.slack_api_url)}"
    return Channel("slack", address, shown_api, kinds, to_api)


def open_channels(service: RecoveryService, settings: NotifySettings) -> None:
    """Record the channels of ``settings`` not yet known: each hears of what
    is recorded from now on (``devs serve`` does it before its first worker
    answers, so nothing recorded after it starts is taken for history)."""
    channels = channels_of(settings)
    if channels:
        log_end = service.recorder.max_notification_id() or 0
        service.read_models.deliveries.open_channels(
            [(c.key, c.kind, c.shown) for c in channels], log_end
        )


def owner_name() -> str:
    """This process's name in leases: host, PID and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


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
            channel.key: channel for channel in channels_of(settings, threads)
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
        claimed = self.store.exchange(
            self.owner, results, self.types, time.time(), self.settings.lease, wants
        )
        self._forget(finished)
        trying = {(i.channel, i.message.id) for i in self.inflight.values()}
        started = 0
        for item in claimed:
            if (item.channel, item.message.id) in trying:
                continue  # its try is still under way here: not a second one
            channel = self.channels[item.channel]
            public_url = self.settings.people.public_url
            link = console_link(public_url, item.message.task_id)
            task_key = (item.channel, item.message.task_id)
            before = (
                self.last_of_task.get(task_key)
                if channel.kind in PEOPLE_KINDS
                else None
            )
            future = self.pool.submit(
                _after,
                before,
                self.settings.lease / 2,
                channel.send,
                self.client,
                item.message,
                link,
                self.settings.timeout,
            )
            if channel.kind in PEOPLE_KINDS:
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
        if tried.outcome is Attempted.DELIVERED:
            if tried.error:  # delivered otherwise than asked (plain text)
                logger.warning(
                    "%s: %s: %s", channel.shown, item.message.id, tried.error
                )
            return Settled(
                channel=item.channel,
                message_id=item.message.id,
                state=DeliveryState.DELIVERED,
                next_at=None,
                status=tried.status,
                error=None,
            )
        if tried.outcome is Attempted.GONE:
            logger.warning(
                "%s answered 410 Gone to %s: the endpoint is disabled "
                "(devs webhooks redeliver enables it again)",
                channel.shown,
                item.message.id,
            )
            return Settled(
                channel=item.channel,
                message_id=item.message.id,
                state=DeliveryState.DEAD,
                next_at=None,
                status=tried.status,
                error=tried.error,
                disable=True,
            )
        if tried.outcome is Attempted.REFUSED:
            logger.warning(
                "%s refused %s for good: a dead letter after %d tries (%s)",
                channel.shown,
                item.message.id,
                tries,
                tried.error,
            )
            return Settled(
                channel=item.channel,
                message_id=item.message.id,
                state=DeliveryState.DEAD,
                next_at=None,
                status=tried.status,
                error=tried.error,
            )
        wait = next_wait(
            tries, self.settings.webhooks.backoff, tried.retry_after, rng=self.rng
        )
        if wait is None:
            logger.warning(
                "%s: %s is a dead letter after %d tries (%s)",
                channel.shown,
                item.message.id,
                tries,
                tried.error,
            )
            return Settled(
                channel=item.channel,
                message_id=item.message.id,
                state=DeliveryState.DEAD,
                next_at=None,
                status=tried.status,
                error=tried.error,
            )
        logger.info(
            "%s: %s not delivered (%s); try %d in %.0f s",
            channel.shown,
            item.message.id,
            tried.error,
            tries + 1,
            wait,
        )
        return Settled(
            channel=item.channel,
            message_id=item.message.id,
            state=DeliveryState.PENDING,
            next_at=time.time() + wait,
            status=tried.status,
            error=tried.error,
        )

    def drain(self, timeout: float) -> None:
        """Record the tries under way (waiting at most ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while self.inflight and time.monotonic() < deadline:
            self.wait(min(0.1, max(deadline - time.monotonic(), 0.0)))
            self.settle_done()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()


class Sweeper:
    """Ends the human waits whose deadline passed (a hand-off, by
    ``devs:deadline``) and sends the reminders due, in the one process
    holding the ``deadlines`` lease."""

    def __init__(
        self,
        service: RecoveryService,
        reminder: float | None,
        *,
        owner: str | None = None,
    ) -> None:
        self.service = service
        self.reminder = reminder
        self.owner = owner or owner_name()
        self.store: OutboxDeliveries = service.read_models.deliveries
        self.held = False
        """Whether the last look held the lease (else another process
        sweeps)."""

    def sweep(self, now: datetime | None = None) -> tuple[list[str], list[str]]:
        """One look: the tasks handed off, and the tasks reminded (both empty
        when another process holds the lease)."""
        moment = now or datetime.now(UTC)
        self.held = self.store.hold_lease(
            LEASE, self.owner, moment.timestamp(), SWEEP_LEASE
        )
        if not self.held:
            return [], []
        expired: list[str] = []
        reminded: list[str] = []
        for session in self._waits():
            deadline = session.deadline_at
            if deadline is None:
                continue
            try:
                if deadline <= moment:
                    self.service.expire_deadline(session.task_id)
                    expired.append(session.task_id)
                elif (
                    self.reminder is not None
                    and not session.reminded
                    and deadline.timestamp() - self.reminder <= moment.timestamp()
                ):
                    self.service.remind_deadline(session.task_id, before=self.reminder)
                    reminded.append(session.task_id)
            except DevsError as error:  # answered meanwhile, by a person
                logger.info("deadline of %s: %s", session.task_id, error)
        for task_id in expired:
            logger.warning(
                "task %s: nobody answered before its deadline; handed off", task_id
            )
        return expired, reminded

    def _waits(self) -> list[PendingSession]:
        """The pending sessions, read as :class:`Sender` reads the outbox:
        folded here waiting for the write lock's turn, never racing the
        commands for it (a query's catch-up would give up under load)."""
        models = self.service.read_models
        try:
            models.keep_up([SESSIONS])
        except OperationalError as error:
            if not locked(error):
                raise
        return models.pending_sessions()

    def release(self) -> None:
        """Let the lease go (a clean stop), if this sweeper holds it."""
        if self.held:
            self.store.release_lease(LEASE, self.owner)
            self.held = False


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
        busy handler (:data:`~devs.adapters.persistence.NO_BUSY_WAIT`); a
        notifier process of its own (``in_worker=False``) waits its turn."""
        self.in_worker = in_worker
        owner = owner_name()
        self.sender = Sender(service, settings, owner=owner)
        self.sweeper = (
            Sweeper(service, settings.reminder, owner=owner) if sweep else None
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
