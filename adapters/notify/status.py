"""What one try of a channel came to, and when to try again: the one
mapping of an HTTP answer to an outcome that every channel uses.

- 2xx: ``delivered``;
- 410 Gone: ``gone`` (the endpoint asks never to be called again: it is
  disabled until ``devs webhooks redeliver``);
- 408, 429, 5xx, any other answer, or none within the timeout: ``retry``,
  a ``Retry-After`` honoured (:func:`retry_after`);
- a 4xx other than 408, 410 and 429 is also :func:`permanent`: it refuses
  the message itself. A webhook retries it all the same (Standard Webhooks
  does); Slack sends the message again as plain text, and a second refusal
  is ``refused`` (dead at once, the endpoint left enabled).
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum

import httpx

from devs.domain.model import Immutable

ATTEMPT_TIMEOUT = 15.0
"""Seconds an endpoint has to answer an attempt."""
JITTER = 0.2
"""The most a wait of the schedule is lengthened by, as a fraction of it."""
RETRY_AFTER_MAX = 86_400.0
"""The longest ``Retry-After`` honoured (a day); longer is taken as a day."""


class Attempted(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"
    GONE = "gone"
    REFUSED = "refused"
    """The endpoint refused this message for good (Slack's ``invalid_blocks``
    and then its plain-text form too): dead at once, the endpoint left
    enabled."""


class Attempt(Immutable):
    """What one delivery attempt came to."""

    outcome: Attempted
    status: int | None
    """The endpoint's status (HTTP's; an SMTP reply code for e-mail;
    ``None``: no answer)."""
    error: str | None = None
    retry_after: float | None = None
    """Seconds the endpoint asked to wait (``Retry-After``), if it did."""


def permanent(status: int) -> bool:
    """Whether an HTTP answer refuses the message itself, for good: a 4xx
    other than 408 (timeout) and 429 (too many requests), and not 410 (the
    endpoint is gone, which disables it)."""
    return 400 <= status < 500 and status not in (408, 410, 429)


def answered(
    status: int,
    where: str,
    *,
    said: str = "",
    retry_after_header: str | None = None,
    gone: str = "it is disabled",
) -> Attempt:
    """The attempt an HTTP answer of ``status`` from ``where`` (as errors
    show it) came to; ``said``: what the endpoint said, already made safe to
    show (``" (…)"`` or ``""``); ``gone``: what a 410 means, in words."""
    if 200 <= status < 300:
        return Attempt(outcome=Attempted.DELIVERED, status=status)
    if status == 410:
        return Attempt(
            outcome=Attempted.GONE,
            status=status,
            error=f"{where} answered 410 Gone{said}: {gone}",
        )
    return Attempt(
        outcome=Attempted.RETRY,
        status=status,
        error=f"{where} answered {status}{said}",
        retry_after=retry_after(retry_after_header),
    )


def unanswered(error: Exception, where: str, timeout: float) -> Attempt:
    """The attempt a call to ``where`` came to when it got no answer: a
    ``retry``, naming the kind of failure (never the address's secrets)."""
    if isinstance(error, httpx.TimeoutException | TimeoutError):
        text = f"no answer from {where} within {timeout:g} s"
    else:
        text = f"{type(error).__name__} calling {where}"
    return Attempt(outcome=Attempted.RETRY, status=None, error=text)


def retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delta-seconds or an
    HTTP date), at most :data:`RETRY_AFTER_MAX`; ``None``: none, or one that
    cannot be read."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), RETRY_AFTER_MAX)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = (moment - datetime.now(UTC)).total_seconds()
    return min(max(seconds, 0.0), RETRY_AFTER_MAX)


_JITTER = random.Random()
"""The back-off's own generator, apart from the ``random`` module's shared one."""
os.register_at_fork(after_in_child=_JITTER.seed)  # as `random` does its own


def next_wait(
    tries: int,
    backoff: Sequence[float],
    retry_after: float | None = None,
    *,
    rng: random.Random | None = None,
) -> float | None:
    """Seconds until the next try after ``tries`` failed ones (``None``: no
    try is left, the message is dead-lettered). The schedule's wait with up
    to :data:`JITTER` of it added, or the endpoint's ``Retry-After`` when it
    asks for longer."""
    if tries < 1 or tries > len(backoff):
        return None
    wait = backoff[tries - 1]
    wait += wait * JITTER * (rng or _JITTER).random()
    if retry_after is not None and retry_after > wait:
        wait = retry_after
    return wait
