"""The channels the sender knows, in the order their endpoints are listed.
A new kind of channel is one module (:class:`~devs.adapters.notify.channel.Channel`)
and one line here."""

from __future__ import annotations

from devs.adapters.notify import email, slack, webhook
from devs.adapters.notify.channel import Channel, Endpoint, Threads
from devs.adapters.notify.settings import NotifySettings

CHANNELS: tuple[Channel, ...] = (
    webhook.CHANNEL,
    slack.CHANNEL,
    email.CHANNEL,
)
"""Every kind of channel, each once."""


def channels_of(
    settings: NotifySettings, threads: Threads | None = None
) -> list[Endpoint]:
    """The endpoints ``settings`` configure, of every registered channel.
    ``threads`` remembers each task's Slack thread and first e-mail (without
    it, each Slack message is a new one and each e-mail replies to the
    task's root)."""
    return [
        endpoint
        for channel in CHANNELS
        for endpoint in channel.endpoints(settings, threads)
    ]
