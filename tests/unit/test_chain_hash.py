"""A task event's chain hash: :func:`devs.domain.chain.event_hash` is the
SHA-256 of the canonical form that :func:`devs.domain.chain.body_hash` builds
from the event's stored JSON, for every kind of task event.

Pure domain: events are collected from ``Task`` aggregates; the stored body is
the JSON pydantic writes of the event, as the mapper stores it.
"""

from __future__ import annotations

import hashlib
import itertools
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from eventsourcing.utils import get_topic
from pydantic import BaseModel

from devs.domain import chain
from devs.domain.gate import evaluate
from devs.domain.names import Resolution
from devs.domain.policy import Policy, StuckDetection
from devs.domain.task import FailureRecord, Task


def _task(**policy: Any) -> Task:
    return Task(
        task_id="t1",
        run_id="r1",
        agent=None,
        last_commit="c0ffee",
        policy=Policy(**policy),
    )


def _fail(task: Task, strategy: str | None = None, output: str | None = None) -> None:
    task.record_gate(
        evaluate(1), gate="tests", strategy=strategy, error=None, output=output
    )


def every_kind_of_event() -> list[Any]:
    """Events of every ``Task`` event class, with and without optional fields."""
    events: list[Any] = []

    ladder = _task(escalation_threshold=2, handoff_threshold=3)
    ladder.begin_attempt("retry the parser")
    _fail(ladder, output="==== 2 failed, 1 passed ====")
    ladder.log_lesson("retry the parser", "it loops")
    ladder.begin_attempt("retry the parser")  # blocked: the lesson's strategy
    ladder.resume(actor="ann", reason="go on")
    _fail(ladder, "use a table")  # hand-off
    ladder.claim_handoff(actor="ann")
    ladder.resolve_handoff(actor="ann", resolution=Resolution.RETURN, reason="x")
    ladder.report_entropy(0.1)
    ladder.report_entropy(0.9)
    ladder.rewind(actor="ann", reason="from the start", to_commit=None)
    ladder.record_gate(evaluate(0), gate=None, strategy=None, error=None, output=None)
    events += ladder.collect_events()

    gated = _task(stuck_detection=StuckDetection.GATE, hitl_entropy_threshold=0.5)
    _fail(gated, "same idea", output="1 failed")
    _fail(gated, "same idea", output="1 failed")  # stuck: paused
    gated.skip(actor="bob", reason="enough")
    events += gated.collect_events()

    unscored = _task(stuck_detection=StuckDetection.OFF)
    _fail(unscored)
    events += unscored.collect_events()

    kinds = {type(e).__name__ for e in events}
    assert kinds >= {
        "Started",
        "AttemptBegan",
        "BlacklistedStrategyAttempted",
        "GatePassed",
        "GateFailed",
        "Escalated",
        "HandedOff",
        "Paused",
        "EntropyMeasured",
        "LessonLogged",
        "Resumed",
        "Rewound",
        "Skipped",
        "HandoffClaimed",
        "HandoffResolved",
    }
    return events


def _stored_hash(event: Any) -> str:
    """The hash of the event as stored: :func:`chain.body_hash` of its JSON."""
    assert isinstance(event, BaseModel)
    stored = type(event).__pydantic_serializer__.to_json(event)
    return chain.body_hash(get_topic(type(event)), orjson.loads(stored))


def _written_hash(event: Any) -> str:
    """The canonical form as the JSON text with the nulls left out reads back
    (how ``event_hash`` built it before it dumped to Python values)."""
    assert isinstance(event, BaseModel)
    written = type(event).__pydantic_serializer__.to_json(event, exclude_none=True)
    body = orjson.loads(written)
    body["topic"] = chain.canonical_topic(get_topic(type(event)))
    canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


@pytest.mark.parametrize("event", every_kind_of_event(), ids=lambda e: type(e).__name__)
def test_an_event_hashes_as_its_stored_body(event: Any) -> None:
    assert chain.event_hash(event) == _stored_hash(event) == _written_hash(event)


def test_each_link_is_the_hash_of_the_event_before() -> None:
    events = every_kind_of_event()
    for before, after in itertools.pairwise(events):
        if after.originator_version == 1:  # another task's chain begins
            assert after.chain_prev == after.originator_id
        else:
            assert after.chain_prev == chain.event_hash(before)


def test_an_integer_past_64_bits_hashes_as_its_json_reads_back() -> None:
    """No command records one (exit codes are 32-bit), but a stored event read
    back may hold one; its JSON reads back as a float, and so it is hashed."""
    failure = FailureRecord(
        kind="gate",
        reason="NON_ZERO_EXIT",
        exit_code=2**70,
        error_hash="0" * 64,
        at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    event = Task.GateFailed(
        originator_id="task:t1",
        originator_version=2,
        timestamp=datetime(2026, 1, 1, tzinfo=UTC),
        chain_prev="task:t1",
        failure=failure,
        consecutive_failures=1,
    )
    assert chain.event_hash(event) == _stored_hash(event) == _written_hash(event)


def test_a_hash_asked_again_is_kept_by_the_event_object() -> None:
    """The hash of an event just hashed is looked up, by the very object; an
    equal event that is another object is hashed on its own, and the kept
    hashes stay few."""
    events = every_kind_of_event()
    first = events[-1]
    digest = chain.event_hash(first)
    assert chain._hashed[id(first)] == (first, digest)
    assert chain.event_hash(first) == digest == _stored_hash(first)
    twin = first.model_copy()
    assert twin is not first
    assert chain.event_hash(twin) == digest
    assert chain._hashed[id(twin)][0] is twin
    copies = [event.model_copy() for event in events for _ in range(8)]
    assert len(copies) > chain.HASHES_KEPT
    for event in copies:
        assert chain.event_hash(event) == _stored_hash(event)
    assert len(chain._hashed) <= chain.HASHES_KEPT
