"""The inbox: every pending session and open hand-off, oldest first, as
cards or a list, filtered and sorted by its query (``GET /console/`` and the
fragment ``GET /console/inbox`` the script fetches when the log grows)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from devs.adapters.console.pages import (
    HEADERS,
    PREFIX,
    AppConsole,
    Console,
    ConsoleRoute,
    done_message,
    in_thread,
    page,
    position_of,
    task_or_none,
    templates,
    to_login,
)
from devs.adapters.console.sessions import operator_of
from devs.domain import (
    DevsError,
    HandoffEntry,
    NotFound,
    PendingSession,
    RecoveryService,
    Spend,
    TaskSummary,
)
from devs.domain.names import HUMAN_DEADLINE, SessionReason
from devs.domain.task import FailureRecord

INBOX_MAX = 200
"""Items the inbox shows (oldest first); it says how many more wait."""

router = APIRouter(route_class=ConsoleRoute)

WHY = {
    SessionReason.MAX_RETRIES: "Escalation",
    SessionReason.BLACKLISTED_STRATEGY: "Blacklist pause",
    SessionReason.BUDGET_EXHAUSTED: "Budget pause",
}
KINDS = {
    "escalation": "Escalation",
    "entropy": "Entropy pause",
    "stuck": "Stuck pause",
    "blacklist": "Blacklist pause",
    "budget": "Budget pause",
    "handoff": "Hand-off",
}
"""The inbox's ``why`` filter: each kind of stop, and what the page calls it."""


@dataclass
class Item:
    """One thing waiting for a person: a pending session or a hand-off."""

    task_id: str
    kind: str  # "session" or "handoff"
    why: str
    since: datetime
    """When the wait began (a hand-off made by a deadline: when the wait it
    ended began, so "waiting" does not start again)."""
    task: TaskSummary | None
    failure_count: int
    last_error: str
    claimed_by: str | None = None
    signals: list[str] = field(default_factory=list)
    lessons: list[str] = field(default_factory=list)
    entropy: float | None = None
    deadline: datetime | None = None
    """When a session is handed off unless someone answers first."""
    reason_kind: str = "escalation"
    """One of :data:`KINDS`."""
    version: int = 0
    """The task's version the item was drawn for: its forms answer it."""
    gate: str | None = None
    """The last failure's gate, exit code and when."""
    exit_code: int | None = None
    strategies: list[str] = field(default_factory=list)
    """Every strategy its failures name, each once, in the order first tried."""
    spend: Spend | None = None
    """A budget pause's spend and budgets when it stopped."""
    raised: Spend | None = None
    """The task's spend and budgets now, when a person raised a budget
    since the stop (then resuming it is allowed)."""

    @property
    def agent(self) -> str | None:
        return self.task.agent if self.task is not None else None

    @property
    def run_id(self) -> str | None:
        return self.task.run_id if self.task is not None else None


def _why(session: PendingSession, task: TaskSummary | None) -> tuple[str, str]:
    """What the page calls a session's stop, and its :data:`KINDS` key."""
    if session.reason is SessionReason.ENTROPY_LIMIT:
        pending = task.pending_session if task is not None else None
        if pending is not None and pending.entropy_source == "derived":
            return "Stuck pause", "stuck"
        return "Entropy pause", "entropy"
    if session.reason is SessionReason.BLACKLISTED_STRATEGY:
        return WHY[session.reason], "blacklist"
    if session.reason is SessionReason.BUDGET_EXHAUSTED:
        return WHY[session.reason], "budget"
    return WHY.get(session.reason, str(session.reason)), "escalation"


def _signals(task: TaskSummary | None) -> list[str]:
    if task is None or task.stuck is None:
        return []
    return [signal.text for signal in task.stuck.signals]


def _failures(
    task: TaskSummary | None, entry: HandoffEntry | None = None
) -> tuple[FailureRecord, ...]:
    if task is not None and task.failure_history:
        return task.failure_history
    if entry is not None:
        return entry.payload.failure_history
    return ()


def _budget(
    session: PendingSession, task: TaskSummary | None
) -> tuple[Spend | None, Spend | None]:
    """A budget pause's spend when it stopped (its session's), and the
    task's spend now if a budget was raised since."""
    pending = task.pending_session if task is not None else None
    if (
        session.reason is not SessionReason.BUDGET_EXHAUSTED
        or pending is None
        or pending.session_id != session.session_id
    ):
        return None, None
    stopped = pending.spend
    now = task.spend if task is not None else None
    if stopped is None or now is None or getattr(stopped, "scope", None) == "run":
        return stopped, None  # a run's budget is raised on the run
    budgets = (now.budget_usd, now.budget_tokens)
    raised = budgets != (stopped.budget_usd, stopped.budget_tokens)
    return stopped, now if raised else None


def _strategies(failures: tuple[FailureRecord, ...]) -> list[str]:
    """Every strategy the failures name, each once, first tried first (a
    hook-recorded task has no lesson for them: its failures name them)."""
    seen: dict[str, None] = {}
    for failure in failures:
        if failure.strategy:
            seen.setdefault(failure.strategy, None)
    return list(seen)


def _lessons(service: RecoveryService, task_id: str) -> list[str]:
    try:
        lessons = service.lessons(task_id)
    except NotFound:
        return []
    return [f"{lesson.failed_strategy}: {lesson.rca_summary}" for lesson in lessons]


def _wait_began(
    service: RecoveryService, entry: HandoffEntry, task: TaskSummary | None
) -> datetime:
    """When a hand-off's wait began: its enqueueing, or for one a deadline
    made, when the session it ended opened (its deadline less the policy's
    ``human_deadline``), so "waiting" goes on counting."""
    began = entry.payload.enqueued_at
    if entry.payload.reason != HUMAN_DEADLINE or task is None:
        return began
    allowed = task.policy.human_deadline
    if allowed is None:
        return began
    with contextlib.suppress(DevsError):
        recent = service.history(task.task_id, after=max(0, task.version - 20))
        for event in reversed(recent):
            deadline = event.changes.get("deadline_at")
            if event.event.endswith("DeadlineExpired") and isinstance(deadline, str):
                moment = datetime.fromisoformat(deadline)
                return moment - timedelta(seconds=allowed)
    return began


INBOX_SCAN = 2_000
"""Waits the inbox reads in all (oldest first) before it filters them."""


def inbox_items(
    service: RecoveryService, only: str | None = None
) -> tuple[list[Item], int]:
    """Every pending session and open hand-off (or only task ``only``'s),
    oldest first (at most :data:`INBOX_SCAN`), and how many there are in
    all."""
    sessions: list[PendingSession] = service.pending_sessions()
    handoffs: list[HandoffEntry] = service.handoff_queue()
    if only is not None:
        sessions = [s for s in sessions if s.task_id == only]
        handoffs = [h for h in handoffs if h.payload.task_id == only]
    waiting: list[tuple[datetime, Any]] = [(s.opened_at, s) for s in sessions]
    waiting += [(h.payload.enqueued_at, h) for h in handoffs]
    waiting.sort(key=lambda pair: pair[0])
    items = []
    for since, entry in waiting[:INBOX_SCAN]:
        session = isinstance(entry, PendingSession)
        task_id = entry.task_id if session else entry.payload.task_id
        task = task_or_none(service, task_id)
        failures = _failures(task, None if session else entry)
        last = failures[-1] if failures else None
        common = {
            "task_id": task_id,
            "task": task,
            "signals": _signals(task),
            "lessons": _lessons(service, task_id),
            "version": task.version if task is not None else 0,
            "gate": last.gate if last is not None else None,
            "exit_code": last.exit_code if last is not None else None,
            "strategies": _strategies(failures),
            "claimed_by": entry.claimed_by,
        }
        if session:
            why, kind = _why(entry, task)
            spend, raised = _budget(entry, task)
            item = Item(
                kind="session",
                why=why,
                reason_kind=kind,
                since=since,
                failure_count=entry.failure_count,
                last_error=last.last_error if last is not None else "",
                entropy=entry.entropy_score,
                deadline=entry.deadline_at,
                spend=spend,
                raised=raised,
                **common,
            )
        else:
            item = Item(
                kind="handoff",
                why=(
                    "Hand-off: nobody answered before the deadline"
                    if entry.payload.reason == HUMAN_DEADLINE
                    else "Hand-off"
                ),
                reason_kind="handoff",
                since=_wait_began(service, entry, task),
                failure_count=entry.payload.failure_count,
                last_error=entry.payload.last_error
                or (last.last_error if last is not None else ""),
                **common,
            )
        items.append(item)
    return items, len(waiting)


@dataclass(frozen=True)
class Filters:
    """The inbox's filters and order, from its query parameters (a GET
    form: they work without a script)."""

    view: str = "cards"
    """``cards`` or ``list`` (one row per stop)."""
    why: str = ""
    """A :data:`KINDS` key, or every kind."""
    agent: str = ""
    run: str = ""
    claimed: str = ""
    """``claimed``, ``unclaimed``, ``mine``, or any."""
    q: str = ""
    """Part of a task id."""
    sort: str = "waited"
    """``waited`` (longest wait first) or ``deadline`` (soonest first)."""

    @classmethod
    def of(cls, query: Any) -> Filters:
        def pick(name: str, allowed: tuple[str, ...], default: str = "") -> str:
            value = str(query.get(name) or "")
            return value if value in allowed else default

        return cls(
            view=pick("view", ("cards", "list"), "cards"),
            why=pick("why", tuple(KINDS)),
            agent=str(query.get("agent") or "")[:200],
            run=str(query.get("run") or "")[:200],
            claimed=pick("claimed", ("claimed", "unclaimed", "mine")),
            q=str(query.get("q") or "").strip()[:200],
            sort=pick("sort", ("waited", "deadline"), "waited"),
        )

    def query(self, **changed: str) -> str:
        """These filters as a query string (``changed`` replacing some)."""
        values = {
            "view": self.view,
            "why": self.why,
            "agent": self.agent,
            "run": self.run,
            "claimed": self.claimed,
            "q": self.q,
            "sort": self.sort,
            **changed,
        }
        defaults = {"view": "cards", "sort": "waited"}
        kept = {k: v for k, v in values.items() if v and v != defaults.get(k)}
        return "&".join(f"{k}={quote(v, safe='')}" for k, v in kept.items())

    @property
    def active(self) -> bool:
        return bool(self.why or self.agent or self.run or self.claimed or self.q)


def chosen(items: list[Item], filters: Filters, operator: str) -> list[Item]:
    """The items ``filters`` keep, in their order."""
    kept = []
    needle = filters.q.casefold()
    for item in items:
        if filters.why and item.reason_kind != filters.why:
            continue
        if filters.agent and item.agent != filters.agent:
            continue
        if filters.run and item.run_id != filters.run:
            continue
        if filters.claimed == "claimed" and not item.claimed_by:
            continue
        if filters.claimed == "unclaimed" and item.claimed_by:
            continue
        if filters.claimed == "mine" and item.claimed_by != operator:
            continue
        if needle and needle not in item.task_id.casefold():
            continue
        kept.append(item)
    if filters.sort == "deadline":
        far = datetime.max.replace(tzinfo=UTC)
        kept.sort(key=lambda item: (item.deadline or far, item.since))
    return kept


def item_of(service: RecoveryService, task: TaskSummary) -> Item | None:
    """The inbox's item for ``task``, if it waits for a person."""
    items, _ = inbox_items(service, only=task.task_id)
    return items[0] if items else None


def inbox_at(console: Console, service: RecoveryService) -> tuple[int, list[Item], int]:
    """The inbox as the read models hold it at the end of the log now,
    built once per log position for every console of this app."""
    end = service.recorder.max_notification_id() or 0
    cached = console.cache.get("inbox")
    if cached is not None and cached[0] == end:
        return cached  # type: ignore[no-any-return]
    position = service.catch_up()
    items, total = inbox_items(service)
    answer = (position, items, total)
    if position >= end:
        console.cache["inbox"] = answer
    return answer


Shown = tuple[int, list[Item], int, Filters, list[Item]]
"""A log position, the items shown, how many the filters keep, the filters,
and every item."""


def inbox_view(
    request: Request, console: Console, operator: str
) -> Callable[[], Shown]:
    """How to read the inbox ``request`` asks for (in a thread)."""
    filters = Filters.of(request.query_params)
    service = console.service_of()

    def read() -> Shown:
        position, every, _ = inbox_at(console, service)
        kept = chosen(every, filters, operator)
        return position, kept[:INBOX_MAX], len(kept), filters, every

    return read


def inbox_context(
    operator: str, items: list[Item], total: int, filters: Filters
) -> dict[str, Any]:
    return {
        "operator": operator,
        "items": items,
        "total": total,
        "filters": filters,
        "back": f"{PREFIX}/" + (f"?{filters.query()}" if filters.query() else ""),
    }


@router.get("/")
async def inbox(request: Request, console: AppConsole) -> Response:
    operator = await operator_of(request, console)
    if operator is None:
        return to_login(request)
    position, items, total, filters, every = await in_thread(
        inbox_view(request, console, operator)
    )
    return page(
        request,
        "inbox.html",
        title=f"({total}) Inbox",
        position=position,
        done=done_message(request.query_params),
        kinds=KINDS,
        agents=sorted({i.agent for i in every if i.agent}),
        runs=sorted({i.run_id for i in every if i.run_id}),
        **inbox_context(operator, items, total, filters),
    )


@router.get("/inbox")
async def inbox_fragment(request: Request, console: AppConsole) -> Response:
    operator = await operator_of(request, console)
    if operator is None:
        return Response("sign in", 401, headers=HEADERS)
    service = console.service_of()
    after = position_of(request.query_params.get("after"))
    view = inbox_view(request, console, operator)

    def read() -> Shown:
        if after is not None:
            # At most 2 s; then what the read models hold now.
            with contextlib.suppress(DevsError):
                service.wait_for(after, timeout=2.0)
        return view()

    _, items, total, filters, _ = await in_thread(read)
    template = "inbox_rows.html" if filters.view == "list" else "inbox_items.html"
    html = templates.get_template(template).render(
        base=PREFIX, **inbox_context(operator, items, total, filters)
    )
    return HTMLResponse(html, headers={**HEADERS, "X-Inbox-Total": str(total)})
