"""E-mail: the channel that writes the messages for people to
``DEVS_NOTIFY_EMAIL`` through ``DEVS_SMTP_URL``, a task's e-mails threaded
under its first (:func:`thread_root`).

The text is :mod:`devs.adapters.notify.people`'s; headers are built from the
same one-line text, so no CR or LF reaches them. A try is ``delivered`` or
``retry``; its ``status`` is the server's SMTP reply code. No error names a
password.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import smtplib
import ssl
from collections.abc import Sequence
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime

import httpx

from devs.adapters.notify.channel import Endpoint, Threads, channel_key, start_thread
from devs.adapters.notify.people import (
    ID_SHOWN,
    PEOPLE_TYPES,
    Notice,
    clean,
    cut,
    notice,
    said,
)
from devs.adapters.notify.settings import (
    EMAIL_ENV,
    SENDER_NAME,
    SMTP_ENV,
    NotifySettings,
    SmtpSecurity,
    SmtpServer,
)
from devs.adapters.notify.status import (
    ATTEMPT_TIMEOUT,
    Attempt,
    Attempted,
    unanswered,
)
from devs.domain import InvalidInput
from devs.domain.outbox import OutboxMessage

SUBJECT_MAX = 200
SUBJECT_TASK = 100
"""How much of a task id a subject shows."""
REPLY_SHOWN = 120
"""How much of an SMTP server's answer an error repeats."""
_ID_CHARACTERS = re.compile(r"[^A-Za-z0-9_.-]")


def thread_root(task_id: str) -> str:
    """The ``Message-ID`` the e-mails of ``task_id`` thread under: derived
    from a digest of the task id (never the id itself, which an agent
    wrote), the same on every server."""
    digest = hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"<task.{digest[:24]}@{SENDER_NAME}>"


def subject_of(message: OutboxMessage, *, first: bool = True) -> str:
    """The subject of every e-mail of a task, the same for all of them
    (``[devs] fix-login: needs a human``) so that mail clients that thread
    by subject thread them too; ``Re:`` before the replies."""
    task = said(message.task_id, SUBJECT_TASK) or "?"
    subject = f"[devs] {task}: needs a human"
    return subject if first else f"Re: {subject}"


def _body_text(note: Notice, message: OutboxMessage) -> str:
    lines = [note.title, ""]
    lines += [f"{label}: {text}" for label, text in note.facts]
    if note.error:
        lines.append(f"Last error: {note.error}")
    if note.tried:
        lines.append("Tried (latest last):")
        lines += [f"  - {item}" for item in note.tried]
    if note.link:
        lines += ["", f"Answer it: {note.link}"]
    lines += ["", "-- ", f"{SENDER_NAME}, message {clean(message.id, ID_SHOWN)}"]
    return "\n".join(lines) + "\n"


def email_of(
    message: OutboxMessage,
    link: str | None,
    sender: str,
    recipients: Sequence[str],
    *,
    first: bool = True,
    now: datetime | None = None,
) -> EmailMessage:
    """The e-mail of ``message``: the task's subject, a plain-text body, and
    headers that thread it: the first e-mail of a task has the task's
    ``Message-ID`` (:func:`thread_root`), each later one (``first`` false)
    a ``Message-ID`` made of the message's id (the same at every try, so a
    receiver can drop a second copy) and ``In-Reply-To``/``References``
    naming the first."""
    note = notice(message, link, now)
    mail = EmailMessage()
    mail["Subject"] = cut(subject_of(message, first=first), SUBJECT_MAX)
    mail["From"] = sender
    mail["To"] = ", ".join(recipients)
    mail["Date"] = format_datetime(message.timestamp)
    root = thread_root(message.task_id)
    if first:
        mail["Message-ID"] = root
    else:
        identity = _ID_CHARACTERS.sub("", message.id[:ID_SHOWN]) or "message"
        mail["Message-ID"] = f"<{identity}@{SENDER_NAME}>"
        mail["In-Reply-To"] = root
        mail["References"] = root
    mail["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies
    mail.set_content(_body_text(note, message))
    return mail


def _reply(error: smtplib.SMTPResponseException, password: str | None) -> str:
    raw = error.smtp_error
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    if password:
        text = text.replace(password, "***")
    said_text = clean(text, REPLY_SHOWN)
    return f" ({said_text})" if said_text else ""


def _send(
    server: SmtpServer,
    mail: EmailMessage,
    recipients: Sequence[str],
    timeout: float,
    context: ssl.SSLContext | None,
) -> dict[str, tuple[int, bytes]]:
    client: smtplib.SMTP
    if server.security is SmtpSecurity.TLS:
        client = smtplib.SMTP_SSL(
            server.host,
            server.port,
            timeout=timeout,
            context=context or ssl.create_default_context(),
        )
    else:
        client = smtplib.SMTP(server.host, server.port, timeout=timeout)
    try:
        if server.security is SmtpSecurity.STARTTLS:
            client.starttls(context=context or ssl.create_default_context())
        if server.user is not None:
            client.login(server.user, server.password or "")
        return client.send_message(
            mail, from_addr=server.sender, to_addrs=list(recipients)
        )
    finally:
        with contextlib.suppress(OSError):  # sent is sent, whatever QUIT says
            client.quit()
        client.close()


def send_email(
    settings: NotifySettings,
    message: OutboxMessage,
    link: str | None,
    *,
    timeout: float = ATTEMPT_TIMEOUT,
    context: ssl.SSLContext | None = None,
    first: bool = True,
    now: datetime | None = None,
) -> Attempt:
    """Send ``message`` by e-mail to ``settings``' recipients; what came of
    it. ``context`` checks the server's certificate (default: the system's
    trusted authorities); ``first``: the task's first e-mail, which the
    others reply to (:func:`email_of`)."""
    server = settings.smtp_url
    if server is None or not settings.notify_email:
        msg = f"{SMTP_ENV} and {EMAIL_ENV} must be set to send e-mail"
        raise InvalidInput(msg, field=SMTP_ENV)
    recipients = settings.notify_email
    mail = email_of(message, link, server.sender, recipients, first=first, now=now)
    try:
        refused = _send(server, mail, recipients, timeout, context)
    except smtplib.SMTPRecipientsRefused as error:
        codes = sorted({code for code, _ in error.recipients.values()})
        return Attempt(
            outcome=Attempted.RETRY,
            status=codes[0] if codes else None,
            error=f"{server.shown} refused every recipient ({codes})",
        )
    except smtplib.SMTPResponseException as error:
        return Attempt(
            outcome=Attempted.RETRY,
            status=error.smtp_code,
            error=(
                f"{server.shown} answered {error.smtp_code}"
                f"{_reply(error, server.password)}"
            ),
        )
    except (OSError, ValueError) as error:  # smtplib's, ssl's, the socket's
        return unanswered(error, server.shown, timeout)
    if refused:
        return Attempt(
            outcome=Attempted.DELIVERED,
            status=250,
            error=(
                f"{server.shown} refused {len(refused)} of {len(recipients)} "
                f"recipients: {', '.join(sorted(refused))}"
            ),
        )
    return Attempt(outcome=Attempted.DELIVERED, status=250)


class EmailChannel:
    """E-mail's endpoint, when ``DEVS_SMTP_URL`` and ``DEVS_NOTIFY_EMAIL``
    are set: the messages for people, a task's in order."""

    kind = "email"

    def endpoints(
        self, settings: NotifySettings, threads: Threads | None
    ) -> Sequence[Endpoint]:
        server, recipients = settings.smtp_url, settings.notify_email
        if server is None or not recipients:
            return []
        address = f"{server.shown}\0{server.user}\0{','.join(recipients)}"
        key = channel_key(self.kind, address)

        def to_email(
            client: httpx.Client,
            message: OutboxMessage,
            link: str | None,
            timeout: float,
        ) -> Attempt:
            task_id = message.task_id
            root = thread_root(task_id)
            starter = start_thread(threads, key, task_id, root, message.id)
            first = starter == message.id
            return send_email(settings, message, link, timeout=timeout, first=first)

        shown = f"e-mail to {', '.join(recipients)}"
        return [
            Endpoint(self.kind, address, shown, PEOPLE_TYPES, to_email, in_order=True)
        ]


CHANNEL = EmailChannel()
