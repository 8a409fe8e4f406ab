"""The one vocabulary (domain/vocabulary.py): every recorded event class
has its words, the journal, the notifications and the outbox use them, and
the names (a public contract) are today's, as the docs list them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.domain import CanMutateAggregate

from devs.domain import journal, outbox
from devs.domain.names import MessageType
from devs.domain.operators import Operators
from devs.domain.receipt import Receipt
from devs.domain.run import Run
from devs.domain.task import Task
from devs.domain.vocabulary import HEADLINES, VOCABULARY, message_types, words

DOCS = Path(__file__).resolve().parents[2] / "docs"

TODAY: dict[str, tuple[tuple[str, ...], str | None, tuple[str, ...]]] = {
    "Task.Started": (("TASK_STARTED",), None, ()),
    "Task.AttemptBegan": (("ATTEMPT_BEGAN",), None, ()),
    "Task.BlacklistedStrategyAttempted": (
        ("task:blacklisted_strategy_attempted",),
        "BLACKLISTED_STRATEGY_ATTEMPTED",
        (),
    ),
    "Task.GatePassed": (("GATE_PASSED",), None, ("task.completed",)),
    "Task.GateFailed": (("GATE_FAILED",), None, ()),
    "Task.Escalated": (
        ("ESCALATION_TRIGGERED",),
        "USER_ESCALATION",
        ("session.opened",),
    ),
    "Task.HandedOff": (
        ("HAND_OFF_REQUIRED",),
        "HAND_OFF_REQUIRED",
        ("handoff.opened",),
    ),
    "Task.Paused": (
        ("TASK_PAUSED", "ENTROPY_LIMIT", "BUDGET_EXHAUSTED"),
        "TASK_PAUSED",
        ("session.opened",),
    ),
    "Task.EntropyMeasured": (("ENTROPY_MEASURED",), None, ()),
    "Task.LessonLogged": (("LESSON_LOGGED",), None, ()),
    "Task.UsageRecorded": (("USAGE_RECORDED",), None, ()),
    "Task.BudgetWarned": (("BUDGET_WARNED",), "BUDGET_WARNED", ("budget.warned",)),
    "Task.BudgetRaised": (("BUDGET_RAISED",), None, ()),
    "Task.Resumed": (("HUMAN_ACTION",), None, ("session.answered",)),
    "Task.Rewound": (("HUMAN_ACTION",), None, ("session.answered", "task.rewound")),
    "Task.Skipped": (("HUMAN_ACTION",), None, ("session.answered", "task.skipped")),
    "Task.DeadlineExpired": (
        ("DEADLINE_EXPIRED",),
        "HAND_OFF_REQUIRED",
        ("deadline.expired",),
    ),
    "Task.DeadlineReminded": (("DEADLINE_REMINDED",), None, ("deadline.reminder",)),
    "Task.HandoffClaimed": (
        ("HUMAN_ACTION",),
        None,
        ("session.claimed", "handoff.claimed"),
    ),
    "Task.ClaimReleased": (("HUMAN_ACTION",), None, ("claim.released",)),
    "Task.ClaimTakenOver": (("HUMAN_ACTION",), None, ("claim.taken_over",)),
    "Task.HandoffResolved": (("HUMAN_ACTION",), None, ("handoff.resolved",)),
    "Run.Started": (("RUN_STARTED",), None, ()),
    "Run.NodeStarted": (("RUN_NODE_STARTED",), None, ()),
    "Run.NodeSettled": (("RUN_NODE_SETTLED",), None, ()),
    "Run.Paused": (("RUN_PAUSED",), None, ()),
    "Run.Resumed": (("RUN_RESUMED",), None, ()),
    "Run.Completed": (("RUN_COMPLETED",), None, ()),
    "Run.Spent": (("RUN_SPENT",), None, ()),
    "Run.BudgetExhausted": (("RUN_BUDGET_EXHAUSTED",), None, ()),
    "Run.BudgetRaised": (("RUN_BUDGET_RAISED",), None, ()),
    "Receipt.Issued": (("RECEIPT_ISSUED",), None, ()),
    "Operators.Opened": (("OPERATORS_OPENED",), None, ()),
    "Operators.Added": (("OPERATOR_ADDED",), None, ()),
    "Operators.Rotated": (("OPERATOR_ROTATED",), None, ()),
    "Operators.Removed": (("OPERATOR_REMOVED",), None, ()),
}
"""Each recorded event's log names, notification kind and outbox types as
release 0.1's successors have sent them (captured before the vocabulary
existed): changing one breaks log searches, alerts and receivers."""


def recorded_classes() -> set[type[Any]]:
    """Every event class an aggregate records (its snapshot aside)."""
    found: set[type[Any]] = set()
    for aggregate in (Task, Run, Receipt, Operators):
        for value in vars(aggregate).values():
            if (
                isinstance(value, type)
                and issubclass(value, CanMutateAggregate)
                and value is not getattr(aggregate, "Snapshot", None)
                and value.__name__ != "Event"  # each aggregate's base class
            ):
                found.add(value)
    return found


def test_every_recorded_event_class_has_its_words() -> None:
    classes = recorded_classes()
    assert len(classes) == len(TODAY)  # a new event is added to TODAY too
    missing = sorted(c.__qualname__ for c in classes - set(VOCABULARY))
    assert missing == [], f"add these to domain/vocabulary.py: {missing}"
    assert set(VOCABULARY) == classes


def test_the_names_are_todays() -> None:
    now = {
        cls.__qualname__: (
            tuple(str(name) for name in entry.log),
            None if entry.kind is None else str(entry.kind),
            tuple(str(t) for t in entry.types),
        )
        for cls, entry in VOCABULARY.items()
    }
    assert now == TODAY


def test_an_event_with_no_words_is_named_in_the_error() -> None:
    class Unheard:  # stands for an event class added without its words
        pass

    with pytest.raises(KeyError, match="Unheard has no entry"):
        words(Unheard)


def test_the_journal_notifications_and_outbox_cover_the_vocabulary() -> None:
    described = {c for c in journal.describe.registry if c is not object}
    assert described == set(VOCABULARY)
    notifying = {c for c, entry in VOCABULARY.items() if entry.kind is not None}
    assert set(journal.NOTIFYING_EVENTS) == notifying
    messaging = {c for c, entry in VOCABULARY.items() if entry.outbox}
    assert set(outbox.MESSAGING_EVENTS) == messaging
    assert all(message_types(c) == VOCABULARY[c].types for c in VOCABULARY)


def test_every_message_type_has_a_headline() -> None:
    assert {key[0] for key in HEADLINES} == set(MessageType)
    for said in HEADLINES.values():
        names = set(re.findall(r"{(\w+)}", said.headline))
        assert names <= {"task", "actor", "why", "previous", "deadline"}
        assert "task" in names


def test_the_docs_list_the_vocabulary() -> None:
    """docs/notifications.md's table of types, docs/http.md's kinds and
    docs/architecture.md's log events are the vocabulary's."""
    notifications = (DOCS / "notifications.md").read_text(encoding="utf-8")
    table = notifications.split("## What is sent", 1)[1].split("\n\n", 2)[1]
    listed = set(re.findall(r"^\| `([a-z._]+)` \|", table, re.M))
    types = {str(t) for entry in VOCABULARY.values() for t in entry.types}
    assert listed == types
    http = (DOCS / "http.md").read_text(encoding="utf-8")
    kinds_table = http.split("### Notification kinds", 1)[1].split("\n\n")[2]
    kinds = set(re.findall(r"^\| `([A-Z_]+)` \|", kinds_table, re.M))
    assert kinds == {str(e.kind) for e in VOCABULARY.values() if e.kind}
    architecture = (DOCS / "architecture.md").read_text(encoding="utf-8")
    section = architecture.split("## Structured log", 1)[1].split("\n## ", 1)[0]
    logged = {str(name) for entry in VOCABULARY.values() for name in entry.log}
    assert {name for name in logged if f"`{name}`" not in section} == set()
