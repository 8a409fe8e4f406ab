"""The deadline sweeper: in the one process holding the ``deadlines``
lease, each second it hands off the human waits whose deadline has passed
(by ``devs:deadline``) and records the reminders that are due
(docs/notifications.md#deadlines).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from eventsourcing.persistence import OperationalError

from devs.domain import DevsError
from devs.domain.commands import locked
from devs.domain.ports import OutboxDeliveries, PendingSession

if TYPE_CHECKING:
    from devs.domain.application import RecoveryService

logger = logging.getLogger("devs.outbox")

SESSIONS = "hitl_sessions"
"""The read model the sweeper reads the waits from."""
SWEEP_EVERY = 1.0
"""Seconds between the deadline sweeper's looks at the waits."""
LEASE = "deadlines"
"""The lease the one sweeper of a database holds."""
SWEEP_LEASE = 10.0
"""How long the ``deadlines`` lease lasts unless renewed."""


def owner_name() -> str:
    """This process's name in leases: host, PID and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Sweeper:
    """Ends the human waits whose deadline passed (a hand-off, by
    ``devs:deadline``) and sends the reminders due, in the one process
    holding the ``deadlines`` lease."""

    def __init__(
        self,
        service: RecoveryService,
        reminder: float | None,
        *,
        owner: str | None = None,
    ) -> None:
        self.service = service
        self.reminder = reminder
        self.owner = owner or owner_name()
        self.store: OutboxDeliveries = service.read_models.deliveries
        self.held = False
        """Whether the last look held the lease (else another process
        sweeps)."""

    def sweep(self, now: datetime | None = None) -> tuple[list[str], list[str]]:
        """One look: the tasks handed off, and the tasks reminded (both empty
        when another process holds the lease)."""
        moment = now or datetime.now(UTC)
        self.held = self.store.hold_lease(
            LEASE, self.owner, moment.timestamp(), SWEEP_LEASE
        )
        if not self.held:
            return [], []
        expired: list[str] = []
        reminded: list[str] = []
        for session in self._waits():
            deadline = session.deadline_at
            if deadline is None:
                continue
            try:
                if deadline <= moment:
                    self.service.expire_deadline(session.task_id)
                    expired.append(session.task_id)
                elif (
                    self.reminder is not None
                    and not session.reminded
                    and deadline.timestamp() - self.reminder <= moment.timestamp()
                ):
                    self.service.remind_deadline(session.task_id, before=self.reminder)
                    reminded.append(session.task_id)
            except DevsError as error:  # answered meanwhile, by a person
                logger.info("deadline of %s: %s", session.task_id, error)
        for task_id in expired:
            logger.warning(
                "task %s: nobody answered before its deadline; handed off", task_id
            )
        return expired, reminded

    def _waits(self) -> list[PendingSession]:
        """The pending sessions, read as :class:`Sender` reads the outbox:
        folded here waiting for the write lock's turn, never racing the
        commands for it (a query's catch-up would give up under load)."""
        models = self.service.read_models
        try:
            models.keep_up([SESSIONS])
        except OperationalError as error:
            if not locked(error):
                raise
        return models.pending_sessions()

    def release(self) -> None:
        """Let the lease go (a clean stop), if this sweeper holds it."""
        if self.held:
            self.store.release_lease(LEASE, self.owner)
            self.held = False
