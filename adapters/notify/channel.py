"""What a channel is: the :class:`Channel` protocol each kind of channel
(webhook, Slack, e-mail: one module each) provides, and the
:class:`Endpoint` it gives for each place its settings name.

A new kind of channel is one module with a class that has ``kind`` and
``endpoints`` and one line in :data:`devs.adapters.notify.registry.CHANNELS`
(and, if it reads variables of its own, their fields in
:class:`~devs.adapters.notify.settings.NotifySettings`). The sender leases,
tries, retries and dead-letters its deliveries as every other's, by the one
status mapping (:mod:`devs.adapters.notify.status`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import httpx

from devs.adapters.notify.status import Attempt
from devs.domain.outbox import OutboxMessage

if TYPE_CHECKING:
    from devs.adapters.notify.settings import NotifySettings

logger = logging.getLogger("devs.outbox")

Send = Callable[[httpx.Client, OutboxMessage, "str | None", float], Attempt]
"""One try of one message: ``send(client, message, link, timeout)``, where
``link`` is the task's console page (``None``: no ``DEVS_PUBLIC_URL``) and
``timeout`` the seconds each phase of the try has."""


def channel_key(kind: str, address: str) -> str:
    """An endpoint's key in ``outbox_channels``: its kind and a digest of
    its address (which may hold a credential)."""
    digest = hashlib.sha256(address.encode()).hexdigest()[:16]
    return f"{kind}:{digest}"


class Endpoint:
    """One configured place messages go: its key in ``outbox_channels`` (a
    digest of its address), how it is shown, the message types it takes
    (``None``: all), how a message is sent to it, and whether a task's
    messages are tried there one at a time, in order (so that they thread
    for the people who read them)."""

    def __init__(
        self,
        kind: str,
        address: str,
        shown: str,
        types: frozenset[str] | None,
        send: Send,
        *,
        in_order: bool = False,
    ) -> None:
        self.key = channel_key(kind, address)
        self.kind, self.shown, self.types, self.send = kind, shown, types, send
        self.in_order = in_order


@runtime_checkable
class Threads(Protocol):
    """Where each task's thread on an endpoint is remembered (the
    ``outbox_threads`` table): a Slack message's ``ts``, an e-mail's
    ``Message-ID``."""

    def thread_of(self, channel: str, task_id: str) -> str | None:
        """The thread of ``task_id`` on ``channel`` (``None``: none yet)."""

    def start_thread(
        self, channel: str, task_id: str, thread: str, message_id: str
    ) -> str:
        """Record ``thread`` as the thread of ``task_id`` on ``channel``,
        started by ``message_id``, unless one is recorded already; the id of
        the message that started the one recorded."""


class Channel(Protocol):
    """A kind of channel: what it must provide to be registered."""

    @property
    def kind(self) -> str:
        """Its name (``webhook``, ``slack``, ``email``): the first part of
        each of its endpoints' keys, shown by ``devs webhooks list``."""

    def endpoints(
        self, settings: NotifySettings, threads: Threads | None
    ) -> Sequence[Endpoint]:
        """The endpoints ``settings`` configure (none: the channel is off);
        ``threads`` remembers each task's thread, when the store can."""


def thread_of(threads: Threads | None, channel: str, task_id: str) -> str | None:
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


def start_thread(
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
