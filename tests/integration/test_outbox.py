"""The ``outbox`` read model: every message the log asks to send, folded in
the same transaction as its position, the same on every backend, rebuilt to
the same rows, and read over HTTP as in process."""

from __future__ import annotations

from typing import Any

from devs.domain import RecoveryService
from devs.domain.outbox import TaskContext, context_after, message_of
from tests.helpers import OUTBOX_STORY, outbox_story


def test_the_outbox_holds_each_message_of_the_log_in_order(make_service: Any) -> None:
    service: RecoveryService = make_service()
    outbox_story(service)
    found = service.outbox_messages()
    assert [m.type.value for m in found] == list(OUTBOX_STORY)
    # The same messages a fold of the log gives, read back as they were made.
    expected = []
    contexts: dict[str, TaskContext | None] = {}
    for record in service.recorder.select_notifications(start=1, limit=1_000):
        domain_event = service.mapper.to_domain_event(record)
        task = domain_event.originator_id
        message = message_of(domain_event, record.id, contexts.get(task))
        contexts[task] = context_after(
            contexts.get(task), domain_event
        ) or contexts.get(task)
        if message is not None:
            expected.append(message)
    assert [m.model_dump(mode="json") for m in found] == [
        m.model_dump(mode="json") for m in expected
    ]
    # Every read model went on past the events that send nothing.
    assert service.metrics().tasks == 3
    assert service.task("t3").state == "SKIPPED"
    # A page at a time.
    first = service.outbox_messages(limit=3)
    rest = service.outbox_messages(after=first[-1].position)
    assert first + rest == found
    assert service.outbox_messages(after=found[-1].position) == []
    # Another process on the same store reads the same.
    other: RecoveryService = make_service()
    assert other.outbox_messages() == found


def test_a_rebuild_gives_the_same_messages_and_verify_agrees(
    make_service: Any,
) -> None:
    service: RecoveryService = make_service()
    outbox_story(service)
    before = service.outbox_messages()
    service.rebuild_projections(["outbox"])
    assert service.outbox_messages() == before
    report = service.verify()
    assert report.ok, report.problems
    assert "outbox" in report.read_models


def test_a_message_of_a_task_in_a_run_names_the_run(make_service: Any) -> None:
    service: RecoveryService = make_service()
    service.start_run("r1", {"a": []})
    service.start_task("a", run_id="r1")
    service.start_task("lone")
    for task_id in ("a", "lone"):
        for i in range(3):
            service.record_gate(task_id, 1, strategy=f"s{i}", error=f"E {i}")
    found = {m.task_id: m.data for m in service.outbox_messages()}
    assert found["a"]["run_id"] == "r1"
    assert list(found["a"])[:2] == ["task_id", "run_id"]
    assert "run_id" not in found["lone"]
    # A rebuild names it again.
    service.rebuild_projections(["outbox"])
    assert {m.task_id: m.data for m in service.outbox_messages()} == found
