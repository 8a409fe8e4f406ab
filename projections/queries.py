"""The queries of the ``ReadModels`` port, over the views by name: the same on
SQLite and PostgreSQL, whose read models differ in how they are kept."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from devs.domain.errors import InvalidInput
from devs.domain.outbox import OutboxMessage
from devs.domain.ports import (
    FailureReport,
    GateStatus,
    HandoffEntry,
    Lesson,
    Metrics,
    ModelSpend,
    PendingSession,
    RunState,
    TaskIndexEntry,
)
from devs.domain.run import Run
from devs.domain.task import Task
from devs.projections.unreadable import Unreadable

R = TypeVar("R")


def unknown_read_models(names: Sequence[str], known: Sequence[str]) -> None:
    """``InvalidInput`` (field ``names``) unless every one of ``names`` is
    one of the ``known`` read models: the same refusal on every backend."""
    unknown = [name for name in names if name not in known]
    if unknown:
        msg = (
            f"unknown projection {', '.join(f'{name!r:.80}' for name in unknown)}; "
            f"known: {', '.join(known)}"
        )
        raise InvalidInput(msg, field="names")


class ViewQueries:
    """Answers from ``self.views`` (read model name -> view).

    ``_ask`` runs each question (a backend may retry it after a repair);
    ``_readable`` refuses a task or run one of whose events could not be read
    (``UnreadableEvent`` naming it), as ``_unreadable`` tells.
    """

    views: dict[str, Any]

    def _ask(self, question: Callable[[], R]) -> R:
        return question()

    def _unreadable(self, originator_id: str) -> Unreadable | None:
        """An event of ``originator_id`` the read models could not decode
        (the first by log position), if any: none, unless a backend says so."""
        return None

    def _readable(self, originator_id: str) -> None:
        """Refuse to answer for a task (or run) one of whose events was skipped."""
        event = self._unreadable(originator_id)
        if event is not None:
            raise event.refusal(originator_id)

    def task_entry(self, task_id: str) -> TaskIndexEntry | None:
        self._readable(Task.create_id(task_id))
        found: TaskIndexEntry | None = self._ask(
            lambda: self.views["tasks"].task_entry(task_id)
        )
        return found

    def task_entries(
        self,
        *,
        state: str | None = None,
        run_id: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[TaskIndexEntry]:
        found: list[TaskIndexEntry] = self._ask(
            lambda: self.views["tasks"].task_entries(
                state=state, run_id=run_id, after=after, limit=limit
            )
        )
        return found

    def chain_heads(
        self, task_id: str | None = None
    ) -> list[tuple[str, int, str | None]]:
        found: list[tuple[str, int, str | None]] = self._ask(
            lambda: self.views["tasks"].chain_heads(task_id)
        )
        return found

    def gate_status(self, task_id: str) -> GateStatus | None:
        self._readable(Task.create_id(task_id))
        return self._ask(lambda: self._gate_status(task_id))

    def _gate_status(self, task_id: str) -> GateStatus | None:
        task = self.views["tasks"].task_row(task_id)
        if task is None:
            return None
        gate = self.views["hitl_failure_gates"].open_gate_of(task_id)
        passed = task["last_gate_passed"]
        return GateStatus(
            task_id=task_id,
            state=task["state"],
            consecutive_failures=task["failure_count"],
            triggered=gate is not None,
            session_id=gate["session_id"] if gate else None,
            reason=gate["reason"] if gate else None,
            entropy_score=gate["entropy_score"] if gate else None,
            triggered_at=gate["opened_at"] if gate else None,
            last_gate=task["last_gate"],
            last_passed=None if passed is None else bool(passed),
            last_reason=task["last_gate_reason"],
            last_exit_code=task["last_exit_code"],
            last_error_hash=task["last_error_hash"],
            updated_at=task["updated_at"],
        )

    def failure_report(self, task_id: str) -> FailureReport | None:
        self._readable(Task.create_id(task_id))
        found: FailureReport | None = self._ask(
            lambda: self.views["task_failures"].failure_report(task_id)
        )
        return found

    def lessons(self, task_id: str) -> list[Lesson]:
        self._readable(Task.create_id(task_id))
        found: list[Lesson] = self._ask(
            lambda: self.views["lessons_learned"].lessons(task_id)
        )
        return found

    def lesson_strategies(self, task_id: str) -> tuple[str, ...]:
        self._readable(Task.create_id(task_id))
        found: tuple[str, ...] = self._ask(
            lambda: self.views["lessons_learned"].lesson_strategies(task_id)
        )
        return found

    def pending_sessions(self) -> list[PendingSession]:
        found: list[PendingSession] = self._ask(
            lambda: self.views["hitl_sessions"].pending_sessions()
        )
        return found

    def handoff_queue(self) -> list[HandoffEntry]:
        found: list[HandoffEntry] = self._ask(
            lambda: self.views["handoff_queue"].handoff_queue()
        )
        return found

    def outbox_messages(self, after: int, limit: int) -> list[OutboxMessage]:
        found: list[OutboxMessage] = self._ask(
            lambda: self.views["outbox"].outbox_messages(after, limit)
        )
        return found

    def run_state(self, run_id: str) -> RunState | None:
        self._readable(Run.create_id(run_id))
        found: RunState | None = self._ask(lambda: self.views["runs"].run_state(run_id))
        return found

    def metrics(
        self, *, run_id: str | None = None, since: datetime | None = None
    ) -> Metrics:
        found: Metrics = self._ask(
            lambda: self.views["metrics"].metrics(run_id=run_id, since=since)
        )
        return found

    def spend_by_model(
        self, *, task_id: str | None = None, run_id: str | None = None
    ) -> tuple[ModelSpend, ...]:
        found: tuple[ModelSpend, ...] = self._ask(
            lambda: self.views["metrics"].spend_by_model(task_id=task_id, run_id=run_id)
        )
        return found
