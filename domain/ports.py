"""Ports: what the application asks of its read models, and what they answer.

The domain declares these; ``devs.projections`` implements them (SQLite views
in-process today), and the application is handed an implementation by topic
from its ``env`` (``READ_MODELS_TOPIC``), the way eventsourcing picks its
persistence module. Nothing here knows about SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol

from devs.domain.chart import TaskState
from devs.domain.gate import GateFailureReason
from devs.domain.model import Immutable
from devs.domain.names import (
    DeliveryState,
    ResolutionValue,
    SessionReason,
    StopScope,
)
from devs.domain.outbox import OutboxMessage
from devs.domain.run import RunStatus
from devs.domain.task import FailureAnalysisReport, HandoffPayload


class TaskIndexEntry(Immutable):
    task_id: str
    run_id: str | None
    state: TaskState
    consecutive_failures: int
    updated_at: datetime
    stuck_score: float | None = None
    """The stuck score of the last failure since the last pass."""


class GateStatus(Immutable):
    """The human-in-the-loop gate of a task, and its last binary gate result."""

    task_id: str
    state: TaskState
    consecutive_failures: int
    triggered: bool
    session_id: str | None
    reason: SessionReason | None
    entropy_score: float | None
    triggered_at: datetime | None
    last_gate: str | None
    last_passed: bool | None
    last_reason: GateFailureReason | None
    last_exit_code: int | None
    last_error_hash: str | None
    updated_at: datetime


class Lesson(Immutable):
    """A lesson learned: a strategy that failed and why (``BlacklistEntry``)."""

    task_id: str
    failed_strategy: str
    rca_summary: str
    logged_at: datetime


class PendingSession(Immutable):
    session_id: str
    task_id: str
    reason: SessionReason
    opened_at: datetime
    entropy_score: float | None
    failure_count: int
    deadline_at: datetime | None = None
    """When the task is handed off unless a human answers first (``None``:
    no deadline)."""
    reminded: bool = False
    """Whether the reminder before the deadline went out."""
    claimed_by: str | None = None
    """Who said "I'm on it" (only they may answer until they release it)."""


class HandoffEntry(Immutable):
    payload: HandoffPayload
    position: int
    claimed_by: str | None
    claimed_at: datetime | None


class FailureReport(Immutable):
    """Failures since the last pass (``task_failures``), and the last escalation."""

    task_id: str
    failure_count: int
    failed_strategies: tuple[str, ...]
    last_error: str | None
    last_error_hash: str | None
    escalations: int
    last_escalation: FailureAnalysisReport | None
    updated_at: datetime


class RunState(Immutable):
    run_id: str
    status: RunStatus
    dag: dict[str, tuple[str, ...]]
    order: tuple[str, ...]
    started: tuple[str, ...]
    completed: tuple[str, ...]
    skipped: tuple[str, ...]
    ready: tuple[str, ...]
    paused_by: tuple[str, ...]
    updated_at: datetime
    stop_scope: StopScope = StopScope.RUN
    """What a task's stop holds up: the whole run, or its descendants only."""
    started_at: datetime | None = None
    """When the run started (none from a server that did not say)."""
    over_budget: bool = False
    """Its tasks spent its budget (``DEVS_RUN_BUDGET_USD``), not raised since:
    it is paused, and no task starts in it."""


HandoffEnd = Literal[ResolutionValue, "open"]
"""How a hand-off ended (a resolution; a rewind counts as ``return``, a skip as
``skip``), or ``open`` while it has not."""


class Distribution(Immutable):
    """Some values (one per task, or per wait): how many, their sum and mean,
    and their 50th and 90th percentiles by the nearest-rank rule (the value
    at rank ceil(p / 100 * count) in ascending order, 1-based, so always one of
    the values). ``None`` when there are none."""

    count: int
    total: float
    mean: float | None
    p50: float | None
    p90: float | None


class WaitTimes(Distribution):
    """Seconds from a task's stop for a human to the human's first answer;
    ``count`` waits were answered, ``open`` still wait."""

    open: int


class StrategyFailures(Immutable):
    strategy: str
    failures: int


class ModelSpend(Immutable):
    """What the calls of one model by one agent spent (the ``metrics`` read
    model's ``metrics_spend``, docs/audit.md#spend)."""

    agent: str | None
    """The tasks' agent (``None``: a task started without one)."""
    model: str
    usages: int
    """The usages recorded (a repeated ``usage_id`` records none)."""
    spent_usd: float
    """The cost of the usages whose model had a price."""
    tokens: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int
    unknown_cost_tokens: int
    """The tokens of usages whose model had no price (in ``tokens``, not in
    ``spent_usd``)."""


class SpendReport(Immutable):
    """What a task or a run spent on model calls, its budgets, and each
    model's share (``devs spend``, ``GET /tasks/{id}/spend``, ``GET
    /runs/{id}/spend``). The totals' names are the ones a budget stop's
    session carries (:class:`~devs.domain.spend.Spend`)."""

    task_id: str | None
    """The task reported on (``None`` for a run)."""
    run_id: str | None
    """The run reported on, or the task's run."""
    spent_usd: float
    budget_usd: float | None
    """``None``: no budget in money."""
    tokens: int
    """Every token counted: input, output, cache reads and cache writes."""
    budget_tokens: int | None
    """``None``: no budget in tokens (a run has none)."""
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int
    unknown_cost_tokens: int
    """The tokens of usages whose model had no price."""
    by_model: tuple[ModelSpend, ...]
    """Each agent and model, most spent first (then by name)."""


class Metrics(Immutable):
    """How tasks went, over every task, or those of ``run_id``, or those started
    at or after ``since`` (both: both). docs/audit.md#metrics says each figure.
    """

    run_id: str | None
    since: datetime | None
    tasks: int
    tasks_by_state: dict[TaskState, int]
    """Every state, zeros included."""
    loop_rate: float
    """The share of tasks that ever escalated or paused (0.0 without tasks)."""
    failures_before_first_human: Distribution
    """Per task that stopped for a human: the failures (failed gates and
    blocked attempts) before its first escalation, pause or hand-off."""
    time_to_human: WaitTimes
    """Per stop for a human (escalation, pause, hand-off): the seconds until
    a human answered it (resume, rewind, skip; a claim for a hand-off)."""
    handoffs_by_resolution: dict[HandoffEnd, int]
    blocked_attempts: int
    """Attempts refused because they repeated a failed strategy."""
    top_failed_strategies: tuple[StrategyFailures, ...]
    """The (at most 10) strategies with the most failures, most first, ties
    by text."""
    stuck_tasks: int = 0
    """Tasks whose stuck score (docs/audit.md#stuck-detection) ever reached
    0.75."""
    stuck_score: Distribution = Distribution(
        count=0, total=0.0, mean=None, p50=None, p90=None
    )
    """Per task with a stuck score: the highest it reached."""
    stuck_signals: dict[str, int] = {}
    """Per signal kind (``strategy_repeat``, ``alternation``, …): the tasks
    whose highest stuck score it drove."""
    spend: tuple[ModelSpend, ...] = ()
    """Per agent and model: the tokens and money the tasks' model calls
    used, most spent first."""


class Verification(Immutable):
    """What ``RecoveryService.verify()`` found: ``ok`` when ``problems`` is empty.

    Each problem is one line: a read model whose rows differ from a fold of the
    log, a missing table, a position past the end of the log, or an event that
    cannot be decoded, named by its log position.
    """

    ok: bool
    problems: list[str]
    position: int
    """The end of the log when the check began."""
    read_models: tuple[str, ...]
    """The read models compared."""
    positions: dict[str, int]
    """How far each stored read model had read the log: each is compared with a
    fold of the log up to its own position (the next query reads the rest)."""
    chains: dict[str, int] = {}
    """Tasks by the state of their hash chain: ``intact``, ``unchained``
    (written before the chain existed), ``broken`` (each one a problem)."""


# ---------------------------------------------------------------- the ports


class Assembly(Protocol):
    """What the ``devs.assembly`` entry point gives a :class:`RecoveryService`
    constructed directly: the edge that knows stores, files and URLs.
    devs-recovery's own is ``devs.adapters.config:ASSEMBLY``."""

    def __call__(self, env: Mapping[str, str], /) -> Mapping[str, str]:
        """eventsourcing's settings for a service whose env is ``env``: which
        store, which read models."""
        ...

    def opening(self, path: str, /) -> str:
        """The calls that open a store at ``path``, in the caller's words (for
        a refusal of a path passed where ``env`` belongs)."""
        ...


class TaskIndex(Protocol):
    def task_entry(self, task_id: str) -> TaskIndexEntry | None:
        """The task's row, if the task was started."""

    def task_entries(
        self,
        *,
        state: str | None = None,
        run_id: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[TaskIndexEntry]:
        """Tasks of one state and/or one run, ordered by task id in code point
        order (on every backend): only those whose id sorts after ``after``,
        at most ``limit`` of them (``None``: no bound). Paged by the store,
        which reads only the page."""

    def chain_heads(
        self, task_id: str | None = None
    ) -> list[tuple[str, int, str | None]]:
        """Each task's (id, last version, hash of that event), as folded: the
        anchor a hash chain's last event is checked against."""


class GateStatuses(Protocol):
    def gate_status(self, task_id: str) -> GateStatus | None:
        """The task's human gate and its last binary gate result."""


class LessonsLearned(Protocol):
    def lessons(self, task_id: str) -> list[Lesson]:
        """The task's lessons, the most recently logged last."""

    def lesson_strategies(self, task_id: str) -> tuple[str, ...]:
        """Just the failed strategies (what the blacklist compares against)."""


class HumanSessions(Protocol):
    def pending_sessions(self) -> list[PendingSession]:
        """Sessions that wait for a human, oldest first."""


class HandoffQueue(Protocol):
    def handoff_queue(self) -> list[HandoffEntry]:
        """Handed-off tasks, oldest first."""


class FailureReports(Protocol):
    def failure_report(self, task_id: str) -> FailureReport | None:
        """Failures since the last pass (``task_failures``)."""


class RunStates(Protocol):
    def run_state(self, run_id: str) -> RunState | None:
        """The run's status and its nodes."""


class TaskMetrics(Protocol):
    def metrics(
        self, *, run_id: str | None = None, since: datetime | None = None
    ) -> Metrics:
        """How the tasks (of one run, started at or after ``since``) went."""

    def spend_by_model(
        self, *, task_id: str | None = None, run_id: str | None = None
    ) -> tuple[ModelSpend, ...]:
        """Each agent and model's spend, over one task, one run's tasks or
        every task."""


class OutboxMessages(Protocol):
    def outbox_messages(self, after: int, limit: int) -> list[OutboxMessage]:
        """The messages of the events after log position ``after`` (the
        ``outbox`` read model), in log order, at most ``limit``."""


class ReadModels(
    TaskIndex,
    GateStatuses,
    LessonsLearned,
    HumanSessions,
    HandoffQueue,
    FailureReports,
    RunStates,
    TaskMetrics,
    OutboxMessages,
    Protocol,
):
    """Every read model of the application, and how they are kept current."""

    names: tuple[str, ...]
    deliveries: OutboxDeliveries
    """What became of each message on each channel (kept beside the read
    models, in the same database, but never rebuilt: it is no fold of the log)."""

    def catch_up(self) -> int:
        """Bring every read model up to the end of the log; return the position."""

    def current_lesson_strategies(self, task_id: str) -> tuple[str, ...]:
        """``lesson_strategies(task_id)`` as current as after ``catch_up()``
        (the blacklist's question: in one read where the backend can)."""

    def keep_up(self, names: Sequence[str]) -> int:
        """Bring the named read models up to the end of the log as it is now,
        for a background reader (the outbox's sender) that may wait its turn:
        where this process folds them (SQLite) the write lock is waited for
        between the commands, never raced for; where a runner folds them
        (PostgreSQL) nothing is waited for. The position they reached."""

    def wait_for(self, position: int, timeout: float) -> int:
        """Wait until every read model has folded log position ``position``,
        at most ``timeout`` seconds; return the position they reached (at or
        past ``position``). Waits for that position only, never for the end
        of the log: under steady writes by others it still ends.

        ``PositionNotRecorded`` at once when ``position`` is past the end of
        the log (read from the log itself, never from the read models: on a
        shared store another process may have just written it), so that no
        wait is spent on a position nobody has written; ``NotCaughtUp`` when
        the wait runs out; ``StoreError`` when the store cannot be used."""

    def rebuild(
        self,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Replay the named read models (default: all) from 0 beside the stored
        ones, then swap them in, in one transaction."""

    def positions(self) -> dict[str, int]:
        """Each read model's tracking position."""

    def verify(
        self, progress: Callable[[int, int], None] | None = None
    ) -> Verification:
        """Refold every read model from the log and compare it with the stored
        one; report undecodable events by log position. Writes nothing."""

    def close(self) -> None:
        """Release connections the read models hold of their own."""


ReadModelsFactory = Callable[[Any], ReadModels]
"""What ``READ_MODELS_TOPIC`` names: called with the application."""

READ_MODELS_TOPIC = "READ_MODELS_TOPIC"
"""The env key naming the application's :data:`ReadModelsFactory`."""
READ_WAIT_KEY = "DEVS_READ_WAIT"
"""The env key of how long a query waits for the read models, in seconds
(validated where the service is assembled, ``devs.adapters.config``)."""
DEFAULT_READ_WAIT = 5.0
PROJECTIONS_KEY = "DEVS_PROJECTIONS"
"""The env key of who folds read models kept in a shared database:
``runner`` (a thread of each process) or ``external``."""


def read_wait_of(env: Any) -> float:
    """The read wait an assembled env holds (``READ_WAIT_KEY``)."""
    value = env.get(READ_WAIT_KEY)
    return float(value) if value else DEFAULT_READ_WAIT


# ------------------------------------------------------------- deliveries


class ChannelEntry(Immutable):
    """One endpoint the outbox sends to (a webhook URL, Slack, e-mail), as
    recorded the first time a server was configured with it."""

    channel: str
    """Its key: ``webhook:``, ``slack:`` or ``email:`` and a digest of its
    address (an address may hold a credential: it is never stored)."""
    kind: str
    shown: str
    """Its address without credentials or query (``https://host/path``)."""
    since_position: int
    """It hears of the events recorded after this log position."""
    enabled: bool
    disabled_reason: str | None
    pending: int
    delivered: int
    dead: int
    last_error: str | None


class DeliveryEntry(Immutable):
    """One message on one channel."""

    message_id: str
    channel: str
    type: str
    task_id: str
    position: int
    state: DeliveryState
    tries: int
    next_at: datetime | None
    """When it is tried next (``None`` once delivered or dead)."""
    last_status: int | None
    last_error: str | None
    updated_at: datetime


class WebhooksReport(Immutable):
    """Every endpoint the outbox sends to, and the latest deliveries."""

    channels: list[ChannelEntry]
    deliveries: list[DeliveryEntry]


class Redelivered(Immutable):
    """How many deliveries were made due again."""

    count: int


class Claimed(Immutable):
    """A delivery leased to one sender for one try."""

    channel: str
    message: OutboxMessage
    tries: int
    """Tries already made."""


class Settled(Immutable):
    """What one try came to, as the sender records it."""

    channel: str
    message_id: str
    state: DeliveryState
    next_at: float | None
    """The clock time of the next try (``time.time()``) while pending."""
    status: int | None
    error: str | None
    disable: bool = False
    """The endpoint asked never to be called again (410): disable it."""


class OutboxDeliveries(Protocol):
    """The state of every delivery, with the leases that keep two senders
    (processes, servers of one database) from trying one message at once."""

    def open_channels(
        self, channels: Sequence[tuple[str, str, str]], log_end: int
    ) -> None:
        """Record each ``(channel, kind, shown)`` not yet known, hearing of
        the events after ``log_end`` (enabling a channel on an old database
        sends none of its history)."""

    def enqueue(self, channels: Mapping[str, frozenset[str] | None], limit: int) -> int:
        """Add, for each channel (name -> the message types it takes, ``None``:
        all), the outbox's messages past its position, at most ``limit`` per
        channel; how many deliveries were added."""

    def claim(
        self, owner: str, channels: Sequence[str], now: float, lease: float, limit: int
    ) -> list[Claimed]:
        """Lease up to ``limit`` due deliveries of ``channels`` to ``owner``
        for ``lease`` seconds (skipping those leased to another sender)."""

    def exchange(
        self,
        owner: str,
        results: Sequence[Settled],
        channels: Mapping[str, frozenset[str] | None],
        now: float,
        lease: float,
        wants: Mapping[str, int],
    ) -> list[Claimed]:
        """``settle``, ``enqueue`` and a claim of up to ``wants[channel]``
        deliveries of each channel, in one write transaction (a sender's one
        look), or none at all when there is nothing to record, add or claim
        (read first)."""

    def settle(self, owner: str, results: Sequence[Settled], now: float) -> None:
        """Record what ``owner``'s tries came to; a delivery whose lease
        ``owner`` lost meanwhile (it took longer than the lease) is left as
        the sender now holding it records it."""

    def channels(self) -> list[ChannelEntry]:
        """Every channel ever opened, with its counts."""

    def delivery_entries(
        self, state: DeliveryState | None, limit: int
    ) -> list[DeliveryEntry]:
        """The latest deliveries (of one state), newest message first."""

    def redeliver(self, message_id: str | None, now: float) -> int:
        """Make due again every delivery of ``message_id`` (``None``: every
        dead one), re-enabling the channels they belong to; how many."""

    def hold_lease(self, name: str, owner: str, now: float, seconds: float) -> bool:
        """Take or keep the lease ``name`` (one sweeper across servers) for
        ``seconds``; whether ``owner`` holds it."""

    def release_lease(self, name: str, owner: str) -> None:
        """Let the lease ``name`` go if ``owner`` holds it (a clean stop:
        another process takes it over at once, not when it runs out)."""
