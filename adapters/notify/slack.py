"""Slack: the channel that posts the messages for people to Slack, through
an incoming webhook or the Web API's ``chat.postMessage`` (with a bot token,
a task's messages in one thread).

The text is :mod:`devs.adapters.notify.people`'s, escaped for ``mrkdwn`` then
cut to Slack's limits and set in code spans; answers go through the one status
mapping (:mod:`devs.adapters.notify.status`), and a permanent refusal is tried
once more as plain text. Not apprise: it builds Slack's address itself, so no
local receiver could stand in for Slack in a test. docs/notifications.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import httpx
import orjson
from pydantic import Field

from devs.adapters.notify.channel import (
    Endpoint,
    Threads,
    channel_key,
    start_thread,
    thread_of,
)
from devs.adapters.notify.people import (
    PEOPLE_TYPES,
    Notice,
    clean,
    cut,
    notice,
    units,
)
from devs.adapters.notify.settings import NotifySettings, slack_shown
from devs.adapters.notify.status import (
    ATTEMPT_TIMEOUT,
    Attempt,
    Attempted,
    answered,
    permanent,
    unanswered,
)
from devs.domain.model import Immutable
from devs.domain.outbox import OutboxMessage

REPLY_SHOWN = 120
"""How much of Slack's answer an error repeats."""
BUTTON = "Answer in the console"
SECTION_MAX = 3_000
"""Slack's longest text of a section block (and of a message's ``text``
here), counted once escaped."""
HEADER_MAX = 150
"""Slack's longest text of a header block."""
BLOCKS_MAX = 50
"""Slack's most blocks in one message."""
FACT_MAX = 400
"""The longest line of one fact in a Slack section, escaped."""
BACKTICK_SHOWN = "\u02cb"
"""What a backtick of an agent's text is shown as in Slack (it would end
the code span the text is set in)."""
_TS = re.compile(r"[0-9]{1,20}\.[0-9]{1,12}")


def mrkdwn(text: str) -> str:
    """``text`` as Slack's ``mrkdwn`` shows it literally: ``&``, ``<`` and
    ``>`` escaped (no mention, no link can be written)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cut_escaped(text: str, limit: int) -> str:
    """An escaped ``text`` cut to at most ``limit`` characters, with ``…``,
    never through an entity (``&amp;`` is kept whole or dropped whole)."""
    if units(text) <= limit:
        return text
    head = cut(text, limit)[:-1]
    entity = head.rfind("&")
    if entity != -1 and ";" not in head[entity:]:
        head = head[:entity]
    return head + "…"


def code(text: str, limit: int) -> str:
    """``text`` as an inline code span of at most ``limit`` characters,
    escaped then cut: inside it ``*``, ``_`` and ``~`` format nothing, and a
    backtick, which would end it, is shown as U+02CB, a modifier letter
    grave accent."""
    inner = cut_escaped(mrkdwn(text.replace("`", BACKTICK_SHOWN)), max(limit - 2, 1))
    return f"`{inner}`"


def _section(text: str) -> dict[str, Any]:
    # verbatim: no bare URL becomes a link, no name a mention
    return {
        "type": "section",
        "text": {"type": "mrkdwn", "text": text, "verbatim": True},
    }


_CODED = frozenset({"Task", "Run", "Agent", "Gate", "Blocked strategy", "Claimed by"})
"""Facts that are an agent's or a person's text, shown as code."""


def _line(label: str, text: str, limit: int) -> str:
    head = f"*{label}:* "
    if label in _CODED or label == "Reason given":
        return head + code(text, limit - len(head))
    return head + cut_escaped(mrkdwn(text), limit - len(head))


def _lines_within(lines: Sequence[str], limit: int) -> str:
    """``lines`` joined, as many as fit in ``limit`` characters."""
    kept: list[str] = []
    size = 0
    for line in lines:
        grown = size + units(line) + (1 if kept else 0)
        if grown > limit:
            break
        kept.append(line)
        size = grown
    return "\n".join(kept)


def slack_blocks(note: Notice) -> list[dict[str, Any]]:
    """The blocks of ``note``, each within Slack's limits once escaped: a
    header (plain text, :data:`HEADER_MAX`), the facts, the last error and
    the strategies tried (each a section of at most :data:`SECTION_MAX`), a
    button to the console; at most :data:`BLOCKS_MAX` blocks."""
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            # plain text: nothing in it is a mention, a link or a format
            "text": {
                "type": "plain_text",
                "text": cut(note.title, HEADER_MAX),
                "emoji": False,
            },
        }
    ]
    lines = [_line(label, text, FACT_MAX) for label, text in note.facts]
    if lines:
        blocks.append(_section(_lines_within(lines, SECTION_MAX)))
    if note.error:
        blocks.append(_section("*Last error:* " + code(note.error, SECTION_MAX - 14)))
    if note.tried:
        title = "*Tried* (latest last):"
        items = [f"• {code(item, FACT_MAX)}" for item in note.tried]
        blocks.append(_section(_lines_within([title, *items], SECTION_MAX)))
    if note.link:
        button = {
            "type": "button",
            "text": {"type": "plain_text", "text": BUTTON},
            "url": note.link,
        }
        blocks.append({"type": "actions", "elements": [button]})
    return blocks[:BLOCKS_MAX]


def slack_body(
    message: OutboxMessage, link: str | None, *, now: datetime | None = None
) -> dict[str, Any]:
    """The JSON Slack takes: the headline as ``text`` (what a notification
    shows) and the blocks of :func:`slack_blocks`."""
    note = notice(message, link, now)
    return {
        "text": cut_escaped(mrkdwn(note.title), SECTION_MAX),
        "blocks": slack_blocks(note),
    }


def slack_plain(
    message: OutboxMessage, link: str | None, *, now: datetime | None = None
) -> dict[str, Any]:
    """The plain-text message sent when Slack refused the blocks: the
    headline, the facts, the last error and the link, escaped, in at most
    :data:`SECTION_MAX` characters."""
    note = notice(message, link, now)
    lines = [note.title]
    lines += [f"{label}: {text}" for label, text in note.facts]
    if note.error:
        lines.append(f"Last error: {note.error}")
    if note.link:
        lines.append(f"{BUTTON}: {note.link}")
    escaped = [cut_escaped(mrkdwn(line), SECTION_MAX) for line in lines]
    return {"text": _lines_within(escaped, SECTION_MAX), "mrkdwn": False}


def _answer_said(answer: httpx.Response, secret: str | None) -> str:
    text = answer.text[:2_000]
    if secret:
        text = text.replace(secret, "***")
    return clean(text, REPLY_SHOWN)


def _slack_error(answer: httpx.Response) -> str | None:
    """The ``error`` of a Web API answer's JSON (``None``: ``ok``, or no
    JSON)."""
    try:
        body = orjson.loads(answer.content[:100_000])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict) or body.get("ok", True) is True:
        return None
    return clean(body.get("error") or "unknown_error", 80)


def _slack_ts(answer: httpx.Response) -> str | None:
    try:
        body = orjson.loads(answer.content[:100_000])
    except orjson.JSONDecodeError:
        return None
    ts = body.get("ts") if isinstance(body, dict) else None
    return ts if isinstance(ts, str) and _TS.fullmatch(ts) else None


class SlackPost(Immutable):
    """Where and how one Slack message is posted: an incoming webhook
    (``token`` ``None``), or the Web API's ``chat.postMessage`` with a bot
    token, in ``channel``, in the thread of ``thread_ts`` when given."""

    url: str = Field(repr=False)
    token: str | None = Field(default=None, repr=False)
    channel: str | None = None
    thread_ts: str | None = None

    @property
    def shown(self) -> str:
        return slack_shown(self.url)


class SlackSent(Immutable):
    attempt: Attempt
    ts: str | None = None
    """The posted message's ``ts`` (the Web API's answer; ``None`` from an
    incoming webhook)."""


def _post(
    client: httpx.Client, post: SlackPost, payload: dict[str, Any], timeout: float
) -> httpx.Response | Attempt:
    """One POST of ``payload``: Slack's answer, or the failed try when there
    was none."""
    headers = {
        "content-type": "application/json; charset=utf-8",
        "user-agent": "devs-recovery",
    }
    body = dict(payload)
    if post.token is not None:
        headers["authorization"] = f"Bearer {post.token}"
        body["channel"] = post.channel
        body["unfurl_links"] = False
        body["unfurl_media"] = False
        if post.thread_ts:
            body["thread_ts"] = post.thread_ts
    try:
        return client.post(
            post.url, content=orjson.dumps(body), headers=headers, timeout=timeout
        )
    except httpx.HTTPError as error:
        return unanswered(error, post.shown, timeout)


_REFUSED_MESSAGE = "refused"
_GONE_ERRORS = frozenset({"is_archived", "channel_is_archived"})
_MESSAGE_ERRORS = frozenset(
    {
        "invalid_blocks",
        "invalid_blocks_format",
        "msg_too_long",
        "msg_blocks_too_long",
        "no_text",
        "invalid_arguments",
        "invalid_attachments",
        "too_many_attachments",
        "invalid_json",
        "json_not_object",
    }
)
"""The Web API's answers (HTTP 200, ``ok: false``) refusing the message
itself: sent again as plain text, never retried as it was."""


def _judged(answer: httpx.Response, post: SlackPost) -> tuple[str, Attempt]:
    """What an answer came to: ``("ok", …)``, ``("refused", …)`` (the
    message itself, for good) or ``("final", …)`` (a retry, a gone
    channel)."""
    status = answer.status_code
    where = post.shown
    if 200 <= status < 300 and post.token is not None:
        error = _slack_error(answer)
        if error in _GONE_ERRORS:
            return "final", Attempt(
                outcome=Attempted.GONE,
                status=status,
                error=f"{where} answered {error}: the channel takes no more",
            )
        if error is not None:
            attempt = Attempt(
                outcome=Attempted.RETRY,
                status=status,
                error=f"{where} answered {error}",
            )
            return (_REFUSED_MESSAGE if error in _MESSAGE_ERRORS else "final"), attempt
    said_text = _answer_said(answer, post.token)
    attempt = answered(
        status,
        where,
        said=f" ({said_text})" if said_text else "",
        retry_after_header=answer.headers.get("retry-after"),
        gone="the channel takes no more",
    )
    if attempt.outcome is Attempted.DELIVERED:
        return "ok", attempt
    return (_REFUSED_MESSAGE if permanent(status) else "final"), attempt


def post_slack(
    client: httpx.Client,
    post: SlackPost,
    message: OutboxMessage,
    link: str | None,
    *,
    timeout: float = ATTEMPT_TIMEOUT,
    now: datetime | None = None,
) -> SlackSent:
    """Post ``message`` once; what came of it. A permanent refusal of the
    blocks (a 4xx other than 408, 410 and 429, or the Web API's
    ``invalid_blocks`` and its kind) is followed, in the same try, by the
    message as plain text: delivered if Slack takes that, else
    ``refused`` (dead at once, the channel left enabled), never retried as
    it was."""
    answer = _post(client, post, slack_body(message, link, now=now), timeout)
    if isinstance(answer, Attempt):
        return SlackSent(attempt=answer)
    verdict, attempt = _judged(answer, post)
    if verdict == "ok":
        return SlackSent(attempt=attempt, ts=_slack_ts(answer))
    if verdict != _REFUSED_MESSAGE:
        return SlackSent(attempt=attempt)
    refusal = attempt.error
    again = _post(client, post, slack_plain(message, link, now=now), timeout)
    if isinstance(again, Attempt):
        return SlackSent(attempt=again)
    verdict, second = _judged(again, post)
    if verdict == "ok":
        delivered = Attempt(
            outcome=Attempted.DELIVERED,
            status=second.status,
            error=f"{refusal}; sent as plain text instead",
        )
        return SlackSent(attempt=delivered, ts=_slack_ts(again))
    if verdict == _REFUSED_MESSAGE:
        refused = Attempt(
            outcome=Attempted.REFUSED,
            status=second.status,
            error=f"{refusal}; as plain text too: {second.error}",
        )
        return SlackSent(attempt=refused)
    return SlackSent(attempt=second)


def send_slack(
    client: httpx.Client,
    url: str,
    message: OutboxMessage,
    link: str | None,
    *,
    timeout: float = ATTEMPT_TIMEOUT,
    now: datetime | None = None,
) -> Attempt:
    """POST ``message`` to the incoming webhook ``url``; what came of it
    (:func:`post_slack`)."""
    post = SlackPost(url=url)
    return post_slack(client, post, message, link, timeout=timeout, now=now).attempt


class SlackChannel:
    """Slack's endpoint, when ``DEVS_SLACK_WEBHOOK_URL`` or
    ``DEVS_SLACK_BOT_TOKEN`` is set: the messages for people, a task's in
    order."""

    kind = "slack"

    def endpoints(
        self, settings: NotifySettings, threads: Threads | None
    ) -> Sequence[Endpoint]:
        if settings.slack_bot_token is not None:
            return [self._api(settings, threads)]
        if settings.slack_webhook_url is not None:
            return [self._hook(settings.slack_webhook_url)]
        return []

    def _hook(self, url: str) -> Endpoint:
        """An incoming webhook: each message a new one."""
        hook = SlackPost(url=url)

        def to_hook(
            client: httpx.Client,
            message: OutboxMessage,
            link: str | None,
            timeout: float,
        ) -> Attempt:
            return post_slack(client, hook, message, link, timeout=timeout).attempt

        return Endpoint(
            self.kind, url, slack_shown(url), PEOPLE_TYPES, to_hook, in_order=True
        )

    def _api(self, settings: NotifySettings, threads: Threads | None) -> Endpoint:
        """The Web API with a bot token: each task's later messages replies
        in the thread of its first."""
        api = f"{settings.slack_api_url}/chat.postMessage"
        address = f"{settings.slack_api_url}\0{settings.slack_channel}"
        key = channel_key(self.kind, address)
        token, channel = settings.slack_bot_token, settings.slack_channel

        def to_api(
            client: httpx.Client,
            message: OutboxMessage,
            link: str | None,
            timeout: float,
        ) -> Attempt:
            thread = thread_of(threads, key, message.task_id)
            post = SlackPost(url=api, token=token, channel=channel, thread_ts=thread)
            sent = post_slack(client, post, message, link, timeout=timeout)
            if thread is None and sent.ts is not None:
                start_thread(threads, key, message.task_id, sent.ts, message.id)
            return sent.attempt

        shown = f"Slack {channel} via {slack_shown(settings.slack_api_url)}"
        return Endpoint(self.kind, address, shown, PEOPLE_TYPES, to_api, in_order=True)


CHANNEL = SlackChannel()
