"""The service's interface, declared once: every command and query a caller
has, whichever way it reaches the referee.

``RecoveryService`` and ``devs.adapters.client.HttpRecoveryClient`` both
satisfy :class:`RecoveryApi`, checked by mypy, so a method added to one and not
the other fails the type check; code that works with either types its service
as ``RecoveryApi``. Each implementation validates the plain arguments and
raises only :class:`~devs.domain.errors.DevsError` subclasses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from devs.domain.chart import StateValue
from devs.domain.names import DeliveryStateValue, ResolutionValue, StopScopeValue
from devs.domain.outbox import OutboxMessage

if TYPE_CHECKING:
    from devs.domain.audit import ReplayCheckReport, TaskAudit, WhatIfReport
    from devs.domain.commands import Written
    from devs.domain.decisions import (
        ActionResult,
        AttemptDecision,
        BudgetAnswer,
        EntropyDecision,
        GateDecision,
        HistoryEntry,
        Notification,
        TaskSummary,
        UsageDecision,
    )
    from devs.domain.policy import Policy
    from devs.domain.ports import (
        FailureReport,
        GateStatus,
        HandoffEntry,
        Lesson,
        Metrics,
        PendingSession,
        Redelivered,
        RunState,
        SpendReport,
        TaskIndexEntry,
        Verification,
        WebhooksReport,
    )


class RecoveryApi(Protocol):
    """The referee's commands and queries (docs/python-api.md)."""

    # ------------------------------------------------------------ plumbing

    def exactly_once(self, key: str, request: str) -> AbstractContextManager[None]:
        """Commands in the block are done once per ``key``."""
        ...

    def written(self) -> AbstractContextManager[Written]:
        """The log position the commands of the block reached."""
        ...

    def reading_after(self, position: int | None) -> AbstractContextManager[None]:
        """Queries in the block wait until the read models folded ``position``."""
        ...

    def wait_for(self, position: int, *, timeout: float | None = None) -> int:
        """Wait until the read models folded ``position``; the position reached."""
        ...

    # ------------------------------------------------------------ commands

    def start_run(
        self,
        run_id: str,
        dag: Mapping[str, Sequence[str]],
        *,
        stop_scope: StopScopeValue = "run",
    ) -> RunState: ...

    def start_task(
        self,
        task_id: str,
        *,
        run_id: str | None = None,
        agent: str | None = None,
        last_commit: str | None = None,
        links: dict[str, str] | None = None,
    ) -> TaskSummary: ...

    def begin_attempt(self, task_id: str, strategy: str) -> AttemptDecision: ...

    def record_gate(
        self,
        task_id: str,
        exit_code: int | None,
        *,
        gate: str | None = None,
        strategy: str | None = None,
        error: str | None = None,
        output: str | None = None,
    ) -> GateDecision: ...

    def report_entropy(self, task_id: str, score: float) -> EntropyDecision: ...

    def record_usage(
        self,
        task_id: str,
        *,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        cache_creation_tokens: int = 0,
        cost_usd: float | None = None,
        usage_id: str | None = None,
    ) -> UsageDecision: ...

    def raise_run_budget(
        self, run_id: str, *, usd: float, actor: str, reason: str
    ) -> RunState: ...

    def raise_budget(
        self,
        task_id: str,
        *,
        usd: float | None = None,
        tokens: int | None = None,
        actor: str,
        reason: str,
        if_version: int | None = None,
    ) -> BudgetAnswer: ...

    def log_lesson(
        self, task_id: str, failed_strategy: str, rca_summary: str
    ) -> Lesson: ...

    def resume(
        self, task_id: str, *, actor: str, reason: str, if_version: int | None = None
    ) -> ActionResult: ...

    def rewind(
        self,
        task_id: str,
        *,
        actor: str,
        reason: str,
        to_commit: str | None = None,
        if_version: int | None = None,
    ) -> ActionResult: ...

    def skip(
        self, task_id: str, *, actor: str, reason: str, if_version: int | None = None
    ) -> ActionResult: ...

    def claim(
        self, task_id: str, *, actor: str, if_version: int | None = None
    ) -> ActionResult: ...

    def claim_handoff(
        self, task_id: str, *, actor: str, if_version: int | None = None
    ) -> ActionResult: ...

    def release(
        self, task_id: str, *, actor: str, if_version: int | None = None
    ) -> ActionResult: ...

    def take_over(
        self, task_id: str, *, actor: str, reason: str, if_version: int | None = None
    ) -> ActionResult: ...

    def resolve_handoff(
        self,
        task_id: str,
        *,
        actor: str,
        resolution: ResolutionValue,
        reason: str,
        if_version: int | None = None,
    ) -> ActionResult: ...

    # ------------------------------------------------------------- queries

    def task(self, task_id: str) -> TaskSummary: ...

    def state_at(self, task_id: str, version: int) -> TaskSummary: ...

    def history(
        self, task_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[HistoryEntry]: ...

    def tasks(
        self,
        *,
        state: StateValue | None = None,
        run_id: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[TaskIndexEntry]: ...

    def gate_status(self, task_id: str) -> GateStatus: ...

    def failure_report(self, task_id: str) -> FailureReport: ...

    def lessons(self, task_id: str) -> list[Lesson]: ...

    def is_strategy_blacklisted(self, task_id: str, candidate: str) -> bool: ...

    def blacklist_directive(self, task_id: str) -> str: ...

    def pending_sessions(self) -> list[PendingSession]: ...

    def handoff_queue(self) -> list[HandoffEntry]: ...

    def run_state(self, run_id: str) -> RunState: ...

    def metrics(
        self, *, run_id: str | None = None, since: datetime | None = None
    ) -> Metrics: ...

    def task_spend(self, task_id: str) -> SpendReport: ...

    def run_spend(self, run_id: str) -> SpendReport: ...

    def notifications(
        self, *, after: int = 0, limit: int = 100
    ) -> list[Notification]: ...

    def outbox_messages(
        self, *, after: int = 0, limit: int = 100
    ) -> list[OutboxMessage]: ...

    def webhooks(
        self, *, state: DeliveryStateValue | None = None, limit: int = 50
    ) -> WebhooksReport: ...

    def redeliver(self, message_id: str) -> Redelivered: ...

    def redeliver_failed(self) -> Redelivered: ...

    # --------------------------------------------------------------- audit

    def verify(self) -> Verification: ...

    def what_if(
        self,
        policy: Policy | Mapping[str, Any],
        *,
        task_ids: list[str] | None = None,
        run_id: str | None = None,
    ) -> WhatIfReport: ...

    def replay_check(
        self, *, task_ids: list[str] | None = None
    ) -> ReplayCheckReport: ...

    def audit(
        self, task_id: str, *, after: int = 0, limit: int | None = None
    ) -> TaskAudit: ...
