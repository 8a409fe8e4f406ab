"""Answers: the forms an operator sends for a stopped task (``POST
/console/actions/ACTION``), each recorded with the signed-in operator as
its actor and the task's version the page was drawn for (a raise of a
budget paused task's budget too); the answers that end a task or move its
run ask to confirm first; a refused one says why and draws the form again
as the task is now."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from devs.adapters.console.inbox import item_of
from devs.adapters.console.pages import (
    HEADERS,
    PREFIX,
    RESOLUTION_WORDS,
    AppConsole,
    ConsoleRoute,
    in_thread,
    page,
    read_form,
    refusal,
    refused_origin,
    same_origin,
    status_of,
    task_or_none,
    to_login,
)
from devs.adapters.console.sessions import operator_of
from devs.domain import DevsError, InvalidInput, RecoveryService, TaskSummary
from devs.domain.errors import Claimed, StaleAnswer
from devs.domain.output import shown as bidi_shown
from devs.domain.redaction import excerpt

router = APIRouter(route_class=ConsoleRoute)

ACTIONS = (
    "resume",
    "rewind",
    "skip",
    "resolve",
    "claim",
    "release",
    "take_over",
    "raise_budget",
)
"""Every answer a console form sends (``POST /console/actions/ACTION``)."""
NEEDS_REASON = {
    "rewind": "rewind it",
    "skip": "skip it",
    "resolve": "resolve it",
    "take_over": "take it over",
}
"""The answers refused without a reason (it goes in the task's history)."""
CONFIRMED = ("rewind", "skip", "resolve")
"""The answers that end a task or move its run: each asks to confirm first."""


def _consequence(action: str, fields: dict[str, str], task: TaskSummary | None) -> str:
    """What an answer that asks to confirm will do, in a sentence."""
    if action == "skip":
        return (
            "The task ends as SKIPPED and its run moves on to the nodes after "
            "it. This cannot be undone."
        )
    if action == "rewind":
        commit = fields.get("to_commit", "").strip() or (
            (task.starting_commit if task is not None else None)
            or "its starting commit"
        )
        return (
            f"The task goes back to work from commit {commit}: its agent starts "
            "again from there."
        )
    resolution = fields.get("resolution", "")
    if resolution == "complete":
        return "The task ends as COMPLETED (done by hand) and its run moves on."
    if resolution == "skip":
        return "The task ends as SKIPPED and its run moves on without it."
    agent = (task.agent if task is not None else None) or "its agent"
    failures = task.consecutive_failures if task is not None else 0
    return (
        f"The task goes back to {agent}, which failed it {failures} times in a "
        "row: it runs again."
    )


Budget = tuple[float | None, int | None]
"""A raise's new budgets: in USD, in tokens (``None``: left as it is)."""


def _budget_of(fields: dict[str, str]) -> Budget:
    """The budgets a raise's form gives (``usd``, ``tokens``: ``$2.50``,
    ``1,000,000``), or :class:`InvalidInput` saying what to write; their
    ranges, and that each is above what the task spent, are the service's
    to check."""
    usd_text = fields.get("usd", "").strip()
    if usd_text[:3].upper() == "USD":
        usd_text = usd_text[3:]
    usd_text = usd_text.strip().removeprefix("$").replace(",", "").replace("_", "")
    token_text = "".join(fields.get("tokens", "").split())
    token_text = token_text.replace(",", "").replace("_", "")
    if not usd_text and not token_text:
        msg = (
            "Write the new budget: in USD, in tokens or both, above what the "
            "task has spent. Nothing was done."
        )
        raise InvalidInput(msg)
    usd = None
    if usd_text:
        try:
            usd = float(usd_text) if len(usd_text) <= 40 else math.nan
        except ValueError:
            usd = math.nan
        if not math.isfinite(usd):
            msg = (
                "Write the budget in USD as a number, such as 5 or 2.50. "
                "Nothing was done."
            )
            raise InvalidInput(msg)
    tokens = None
    if token_text:
        if not (
            token_text.isascii() and token_text.isdigit() and len(token_text) <= 18
        ):
            msg = (
                "Write the budget in tokens as a whole number, such as 2000000. "
                "Nothing was done."
            )
            raise InvalidInput(msg)
        tokens = int(token_text)
    return usd, tokens


def _stale_message(service: RecoveryService, error: StaleAnswer, task_id: str) -> str:
    """Who moved the task on since the page was drawn, and its state now."""
    state = "changed"
    actor = None
    with contextlib.suppress(DevsError):
        state = str(service.task(task_id).state)
        entries = service.history(task_id, after=error.answered or 0, limit=100)
        for entry in reversed(entries):
            who = entry.changes.get("actor")
            if isinstance(who, str) and who:
                actor = who
                break
    if actor is not None:
        said = bidi_shown(actor)
        return f"{said} answered first: the task is now {state}. Nothing was done."
    return (
        f"The task moved on since this page was drawn: it is now {state}. "
        "Nothing was done."
    )


def _claimed_message(holder: str | None) -> str:
    return (
        f"{bidi_shown(holder or 'Someone else')} is on it (claimed): take it over "
        "to answer "
        "it (your reason is kept below). Nothing was done."
    )


def _back(fields: dict[str, str]) -> str | None:
    back = fields.get("back", "")
    if (
        back.startswith(PREFIX + "/")
        and "//" not in back
        and "\\" not in back
        and back.isprintable()
        and len(back) <= 1_000
    ):
        return back
    return None


def _with_done(target: str, action: str, task_id: str, fields: dict[str, str]) -> str:
    said = f"done={action}&task={quote(task_id, safe='')}"
    if action == "resolve":
        said += f"&resolution={quote(fields.get('resolution', ''), safe='')}"
    target = target.split("#", 1)[0]
    return f"{target}{'&' if '?' in target else '?'}{said}"


def answer_page(
    request: Request,
    operator: str,
    action: str,
    fields: dict[str, str],
    status: int,
    message: str,
    service: RecoveryService,
) -> HTMLResponse:
    """A refused answer: the message, and the task's answer form again as
    the task is now (its version), with what was typed kept."""
    task_id = fields.get("task_id", "")
    task = task_or_none(service, task_id) if task_id else None
    item = item_of(service, task) if task is not None else None
    return page(
        request,
        "answer.html",
        status,
        title=f"Not done: {task_id}",
        operator=operator,
        task_id=task_id,
        task=task,
        item=item,
        message=message,
        action=action,
        typed=fields,
        back=_back(fields) or f"{PREFIX}/",
    )


def _calls(
    service: RecoveryService,
    action: str,
    task_id: str,
    operator: str,
    said: str,
    version: int,
    fields: dict[str, str],
    budget: Budget = (None, None),
) -> Callable[[], Any]:
    """The service's command for ``action``, to run on the app's writer."""
    usd, tokens = budget
    calls: dict[str, Callable[[], Any]] = {
        "resume": lambda: service.resume(
            task_id, actor=operator, reason=said, if_version=version
        ),
        "rewind": lambda: service.rewind(
            task_id,
            actor=operator,
            reason=said,
            to_commit=fields.get("to_commit", "").strip() or None,
            if_version=version,
        ),
        "skip": lambda: service.skip(
            task_id, actor=operator, reason=said, if_version=version
        ),
        "claim": lambda: service.claim(task_id, actor=operator, if_version=version),
        "release": lambda: service.release(task_id, actor=operator, if_version=version),
        "take_over": lambda: service.take_over(
            task_id, actor=operator, reason=said, if_version=version
        ),
        "resolve": lambda: service.resolve_handoff(
            task_id,
            actor=operator,
            resolution=fields.get("resolution", ""),  # type: ignore[arg-type]
            reason=said,
            if_version=version,
        ),
        "raise_budget": lambda: service.raise_budget(
            task_id,
            usd=usd,
            tokens=tokens,
            actor=operator,
            reason=said,
            if_version=version,
        ),
    }
    return calls[action]


@router.post("/actions/{action}")
async def act(request: Request, action: str, console: AppConsole) -> Response:
    if not same_origin(request):
        return refused_origin()
    operator = await operator_of(request, console)
    if operator is None:
        return to_login(request)
    fields = await read_form(request)
    if action not in ACTIONS:
        message = f"there is no action {excerpt(action, 40)!r}"
        return refusal(404, message, operator=operator)
    task_id = fields.get("task_id", "")
    # A textarea sends its lines with CRLF: recorded with LF.
    reason = fields.get("reason", "").replace("\r\n", "\n").strip()
    written = fields.get("version", "")
    service = console.service_of()
    signed = operator

    def again(status: int, message: str) -> Awaitable[HTMLResponse]:
        return in_thread(
            lambda: answer_page(
                request, signed, action, fields, status, message, service
            )
        )

    task = await in_thread(lambda: service.task(task_id))  # unknown: 404 page
    if not written.isdigit() or len(written) > 18:
        return await again(
            422,
            "This form did not say which version of the task it answers: "
            "here it is as it is now. Nothing was done.",
        )
    version = int(written)
    holder = task.claimed_by
    if holder and holder != operator and action != "take_over":
        return await again(409, _claimed_message(holder))
    if version != task.version:  # before asking anything more
        stale = StaleAnswer(
            "stale", task_id=task_id, version=task.version, answered=version
        )
        message = await in_thread(lambda: _stale_message(service, stale, task_id))
        return await again(412, message)
    budget: Budget = (None, None)
    if action == "raise_budget":
        try:
            budget = _budget_of(fields)
        except InvalidInput as error:
            return await again(422, str(error))
    if action in NEEDS_REASON and not reason:
        return await again(
            422, f"Write why you {NEEDS_REASON[action]}: the reason is recorded."
        )
    if action == "resolve" and fields.get("resolution", "") not in RESOLUTION_WORDS:
        return await again(
            422,
            "Choose how to resolve it: complete it, skip it, or return it "
            "to its agent.",
        )
    if action in CONFIRMED and fields.get("confirmed") != "1":
        return page(
            request,
            "confirm.html",
            title=f"Confirm: {action} {task_id}",
            operator=operator,
            action=action,
            task=task,
            typed=fields,
            consequence=_consequence(action, fields, task),
            resolution_words=RESOLUTION_WORDS,
            back=_back(fields) or f"{PREFIX}/",
        )
    said = reason or "(no reason given)"
    try:
        await console.writer.run(
            _calls(service, action, task_id, operator, said, version, fields, budget)
        )
    except Claimed as error:
        return await again(409, _claimed_message(error.claimed_by))
    except StaleAnswer as error:
        refused = error
        message = await in_thread(lambda: _stale_message(service, refused, task_id))
        return await again(412, message)
    except DevsError as error:
        return await again(status_of(error), f"Not done: {error}")
    target = _back(fields) or f"{PREFIX}/"
    return RedirectResponse(
        _with_done(target, action, task_id, fields), 303, headers=HEADERS
    )
