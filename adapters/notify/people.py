"""The text a person reads of a message, shared by Slack and e-mail.

People hear of what waits for them and of who picked it up
(:data:`PEOPLE_TYPES`): a stop or a hand-off, a deadline near or passed, a
claim, its release or take-over, an answer, a hand-off's end. Each is
written for a person (:func:`notice`): the headline (the vocabulary's,
:data:`devs.domain.vocabulary.HEADLINES`, filled in), then what happened and
why in words, the run, the agent, the gate and its exit code, the last error
line, the strategies tried, how long is left, and the link that answers.
Every text of a message's ``data`` came from an agent or a person and is
read as hostile: shown through :func:`devs.domain.output.readable` (terminal
sequences gone, bidirectional controls made visible), on one line, cut.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from devs.domain.model import Immutable
from devs.domain.names import HAND_OFF_REQUIRED, MessageType, SessionReason
from devs.domain.outbox import OutboxMessage
from devs.domain.output import error_line, one_line, readable
from devs.domain.vocabulary import HEADLINES

PEOPLE_TYPES: frozenset[str] = frozenset(
    {
        MessageType.SESSION_OPENED.value,
        MessageType.HANDOFF_OPENED.value,
        MessageType.DEADLINE_EXPIRED.value,
        MessageType.DEADLINE_REMINDER.value,
        MessageType.SESSION_CLAIMED.value,
        MessageType.HANDOFF_CLAIMED.value,
        MessageType.CLAIM_RELEASED.value,
        MessageType.CLAIM_TAKEN_OVER.value,
        MessageType.SESSION_ANSWERED.value,
        MessageType.HANDOFF_RESOLVED.value,
    }
)
"""The types of message that go to people: what waits for them, and who
picked it up and how it ended (the others, a gate passed and a skip or
rewind of a task nobody was asked about, go to webhooks only)."""
ID_SHOWN = 200
VALUE_SHOWN = 200
LAST_ERROR_SHOWN = 300
"""The longest last line of an error shown."""
STRATEGIES_SHOWN = 10
"""How many of the latest strategies tried are listed."""

_CONTROLS = dict.fromkeys(
    [
        *range(0x00, 0x20),
        *range(0x7F, 0xA0),
        0x200E,
        0x200F,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0x2028,
        0x2029,
    ],
    " ",
)
"""Control, line-separating and text-direction characters: each becomes a
space."""


def console_link(public_url: str | None, task_id: str) -> str | None:
    """The console's page of ``task_id`` under ``public_url`` (``None``
    without one)."""
    if not public_url:
        return None
    return f"{public_url.rstrip('/')}/console/tasks/{quote(task_id, safe='')}"


def for_people(message_type: str) -> bool:
    """Whether a message of ``message_type`` goes to people."""
    return str(message_type) in PEOPLE_TYPES


def units(text: str) -> int:
    """``text``'s length as Slack counts it at most: in UTF-16 code units
    (a character beyond the Basic Multilingual Plane, an emoji, is two)."""
    return len(text) + sum(1 for character in text if ord(character) > 0xFFFF)


def cut(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` UTF-16 code units, cut with ``…``."""
    if units(text) <= limit:
        return text
    raw = text.encode("utf-16-le", "surrogatepass")[: 2 * max(limit - 1, 0)]
    return raw.decode("utf-16-le", "ignore") + "…"


def clean(value: Any, limit: int = VALUE_SHOWN) -> str:
    """``value`` as one line of at most ``limit`` characters: control
    characters gone, runs of white space one space (settings, and the
    answers of servers). Linear in ``limit`` whatever ``value`` holds."""
    if value is None:
        return ""
    if isinstance(value, float):
        text = f"{value:.3g}"
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = str(value)
        except ValueError:  # an int too long to write out
            text = type(value).__name__
    return cut(" ".join(text[: limit * 4].translate(_CONTROLS).split()), limit)


def said(value: Any, limit: int = VALUE_SHOWN) -> str:
    """An agent's or a person's ``value`` as people read it: one line of at
    most ``limit`` characters, terminal control sequences gone and each
    bidirectional control written as ``<U+202E>``
    (:func:`devs.domain.output.readable`). Linear in ``limit`` whatever
    ``value`` holds."""
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = str(value)
        except ValueError:  # an int too long to write out
            text = type(value).__name__
    return one_line(readable(text[: limit * 4]), limit)


def last_error_line(value: Any) -> str:
    """The last error a message carries, as people read it. ``last_error``
    is already the one line (:func:`devs.domain.output.error_line`); a
    longer text (a message recorded by an older release) is reduced by that
    same rule."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    if "\n" in text or "\r" in text or len(text) > LAST_ERROR_SHOWN:
        text = error_line(text[:1_000_000])
    # Not cut again: a bidirectional control shown as <U+202E> lengthens it.
    return said(text, 8 * LAST_ERROR_SHOWN)


def _data(message: OutboxMessage) -> dict[str, Any]:
    return message.data if isinstance(message.data, dict) else {}


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _times(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _moment(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and len(value) <= 64:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def clock(moment: datetime, now: datetime) -> str:
    """``moment`` as a person reads a time: ``06:45 UTC`` when it is within
    a day of ``now``, else ``28 Nov 06:45 UTC`` (no seconds)."""
    moment = moment.astimezone(UTC)
    if abs((moment - now).total_seconds()) < 20 * 3600:
        return f"{moment:%H:%M} UTC"
    return f"{moment.day} {moment:%b %H:%M} UTC"


def _span(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 1:
        return "less than a minute"
    if minutes < 120:
        return _times(minutes, "minute", "minutes")
    hours = round(seconds / 3600)
    if hours < 48:
        return _times(hours, "hour", "hours")
    return _times(round(seconds / 86_400), "day", "days")


def when(moment: datetime, now: datetime) -> str:
    """How far ``moment`` is from ``now``, and when:
    ``in 14 minutes (06:45 UTC)`` or ``passed 3 hours ago (06:45 UTC)``."""
    seconds = (moment - now).total_seconds()
    if seconds >= 0:
        return f"in {_span(seconds)} ({clock(moment, now)})"
    return f"passed {_span(-seconds)} ago ({clock(moment, now)})"


REASONS = {
    SessionReason.BLACKLISTED_STRATEGY.value: "repeated a strategy that already failed",
    HAND_OFF_REQUIRED: "handed off",
    "human_deadline": "nobody answered before the deadline",
}


def why(message: OutboxMessage) -> str:
    """Why the task stopped, in words: ``failed 3 times in a row``,
    ``repeated a strategy that already failed``, ``looked stuck (entropy
    0.91)``, ``handed off after 5 failures``, ``nobody answered before the
    deadline`` (``""``: the message says no reason)."""
    data = _data(message)
    reason = str(data.get("reason") or "")
    count = _count(data.get("failure_count"))
    if reason == SessionReason.MAX_RETRIES:
        if count is None:
            return "failed too many times in a row"
        return f"failed {_times(count, 'time', 'times')} in a row"
    if reason == SessionReason.ENTROPY_LIMIT:
        score = data.get("entropy_score")
        if isinstance(score, int | float) and not isinstance(score, bool):
            return f"looked stuck (entropy {score:.2f})"
        return "looked stuck"
    if reason == SessionReason.BUDGET_EXHAUSTED:
        spend = data.get("spend")
        spent = _spent(spend)
        if isinstance(spend, dict) and spend.get("scope") == "run":
            spent = spent.replace("of its", "of its run's")
            return f"its run spent {spent}" if spent else "its run spent its budget"
        return f"spent {spent}" if spent else "spent its budget"
    if reason == BUDGET_WARNED:
        return _spent(data.get("spend"))
    if reason == HAND_OFF_REQUIRED:
        if count:
            return f"handed off after {_times(count, 'failure', 'failures')}"
        return "handed off"
    if reason in REASONS:
        return REASONS[reason]
    return f"stopped ({said(reason, 60)})" if reason else ""


BUDGET_WARNED = "budget_warned"
"""The ``reason`` of a ``budget.warned`` message."""


def _spent(spend: object) -> str:
    """``USD 0.85 of its 1 budget`` (or ``900 of its 1,000 tokens``): the
    budget a message's ``spend`` is nearest to; ``""`` if it says none."""
    if not isinstance(spend, dict):
        return ""
    usd, budget = spend.get("spent_usd"), spend.get("budget_usd")
    tokens, most = spend.get("tokens"), spend.get("budget_tokens")
    shares: list[tuple[float, str]] = []
    if isinstance(usd, int | float) and isinstance(budget, int | float) and budget > 0:
        shares.append((usd / budget, f"USD {usd:.2f} of its {budget:g} budget"))
    if isinstance(tokens, int) and isinstance(most, int) and most > 0:
        shares.append((tokens / most, f"{tokens:,} of its {most:,} tokens"))
    return max(shares)[1] if shares else ""


def _answer(data: dict[str, Any]) -> str | None:
    """The ``action`` or ``resolution`` a message's data names, if any."""
    answer = data.get("action") or data.get("resolution")
    return answer if isinstance(answer, str) else None


def headline(message: OutboxMessage, now: datetime | None = None) -> str:
    """One line saying what happened to the task, in words (no code, no
    session id, no timestamp): a chat line, a notification, an e-mail's
    first line. The vocabulary's headline of the message's type, filled in
    (a type or an answer it does not know: said plainly)."""
    data = _data(message)
    task = said(message.task_id, ID_SHOWN) or "?"
    kind = str(message.type)
    actor = said(data.get("actor"), 80) or "someone"
    try:
        known = MessageType(kind)
    except ValueError:
        return f"{task}: {said(kind, 60)}"
    entry = HEADLINES.get((known, _answer(data))) or HEADLINES.get((known, None))
    if entry is None:
        if known is MessageType.HANDOFF_RESOLVED:
            return f"{actor} resolved {task}'s hand-off"
        if any(key[0] is known for key in HEADLINES):
            return f"{actor} answered {task}"
        return f"{task}: {said(kind, 60)}"
    reason = why(message)
    deadline = _moment(data.get("deadline_at"))
    moment = now or datetime.now(UTC)
    fill = {
        "task": task,
        "actor": actor,
        "why": reason,
        "previous": said(data.get("previous"), 80) or "its claimer",
        "deadline": "" if deadline is None else when(deadline, moment),
    }
    text = entry.headline
    if entry.otherwise is not None and (
        ("{why}" in text and not reason) or ("{deadline}" in text and not deadline)
    ):
        text = entry.otherwise
    return text.format_map(fill)


class Notice(Immutable):
    """What a person is told of a message, shared by Slack and e-mail: the
    headline, then labelled one-line facts (the run, the agent, the gate and
    its exit code, the deadline, who claimed it, what they said), the last
    error, the strategies tried (latest last), and the link that answers."""

    title: str
    facts: tuple[tuple[str, str], ...]
    error: str
    tried: tuple[str, ...]
    link: str | None


def _gate(data: dict[str, Any]) -> str:
    gate = said(data.get("gate"), 120)
    code = data.get("exit_code")
    exit_code = (
        f"exit code {code}"
        if isinstance(code, int) and not isinstance(code, bool)
        else ""
    )
    if gate and exit_code:
        return f"{gate}, {exit_code}"
    return gate or exit_code


def notice(
    message: OutboxMessage, link: str | None, now: datetime | None = None
) -> Notice:
    """What both channels say of ``message`` (``now``: the time the
    deadline is counted from; default the clock)."""
    data = _data(message)
    moment = now or datetime.now(UTC)
    kind = str(message.type)
    facts: list[tuple[str, str]] = []

    def add(label: str, text: str) -> None:
        if text:
            facts.append((label, text))

    if kind in (MessageType.SESSION_OPENED, MessageType.HANDOFF_OPENED):
        add("Why", why(message))
    count = _count(data.get("failure_count"))
    if count and str(data.get("reason")) not in (
        SessionReason.MAX_RETRIES.value,
        HAND_OFF_REQUIRED,
    ):
        add("Failures", f"{count} in a row")
    add("Task", said(message.task_id, ID_SHOWN))
    add("Run", said(data.get("run_id"), ID_SHOWN))
    add("Agent", said(data.get("agent")))
    add("Gate", _gate(data))
    blocked = said(data.get("blocked_strategy"))
    add("Blocked strategy", blocked)
    deadline = _moment(data.get("deadline_at"))
    if deadline is not None:
        if kind == MessageType.DEADLINE_EXPIRED:
            add("Deadline", f"passed at {clock(deadline, moment)}")
        elif kind in (MessageType.SESSION_OPENED, MessageType.DEADLINE_REMINDER):
            add("Answer by", when(deadline, moment))
    add("Claimed by", said(data.get("claimed_by"), 80))
    if kind == MessageType.CLAIM_TAKEN_OVER or kind in (
        MessageType.SESSION_ANSWERED,
        MessageType.HANDOFF_RESOLVED,
        MessageType.TASK_REWOUND,
        MessageType.TASK_SKIPPED,
    ):
        add("Reason given", said(data.get("reason")))
    tried_raw = data.get("strategies_tried")
    tried = tuple(
        text
        for text in (
            said(item)
            for item in (tried_raw if isinstance(tried_raw, list) else [])[
                -STRATEGIES_SHOWN:
            ]
        )
        if text
    )
    return Notice(
        title=headline(message, moment),
        facts=tuple(facts),
        error=last_error_line(data.get("last_error")),
        tried=tried,
        link=link,
    )


def facts(message: OutboxMessage) -> tuple[tuple[str, str], ...]:
    """The labelled one-line facts both channels show of ``message``."""
    return notice(message, None).facts
