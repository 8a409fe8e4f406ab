"""Exactly-once commands: ``RecoveryService.exactly_once`` and its receipts."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devs.adapters.config import Settings, open_service
from devs.domain import IllegalTransition, InvalidInput, RecoveryService
from devs.domain.receipt import Receipt

Command = Callable[[RecoveryService], Any]

COMMANDS: list[tuple[str, Command]] = [
    ("start_run", lambda s: s.start_run("r2", {"x": []})),
    ("start_task", lambda s: s.start_task("t2", agent="coder")),
    ("begin_attempt", lambda s: s.begin_attempt("t", "use a cache")),
    ("record_gate", lambda s: s.record_gate("t", 1, gate="pytest", error="E1")),
    ("report_entropy", lambda s: s.report_entropy("t", 0.2)),
    ("log_lesson", lambda s: s.log_lesson("t", "use a cache", "stale reads")),
]


def position(service: RecoveryService) -> int:
    return service.recorder.max_notification_id() or 0


@pytest.fixture
def started(service: RecoveryService) -> RecoveryService:
    service.start_run("r", {"t": []})
    service.start_task("t", run_id="r")
    return service


@pytest.mark.parametrize(("name", "call"), COMMANDS, ids=[n for n, _ in COMMANDS])
def test_a_command_sent_again_answers_as_first_and_writes_nothing(
    started: RecoveryService, name: str, call: Command
) -> None:
    with started.exactly_once(f"key-{name}", name):
        first = call(started)
    written = position(started)
    for _ in range(3):
        with started.exactly_once(f"key-{name}", name):
            again = call(started)
        assert again == first
        assert type(again) is type(first)
    assert position(started) == written


def _escalated(service: RecoveryService, task_id: str) -> None:
    service.start_task(task_id)
    for _ in range(3):
        service.record_gate(task_id, 1)


def _handed_off(service: RecoveryService, task_id: str) -> None:
    _escalated(service, task_id)
    while service.task(task_id).handoff is None:
        if service.task(task_id).pending_session is not None:
            service.resume(task_id, actor="ana", reason="once more")
        service.record_gate(task_id, 1)


HUMAN_ACTIONS: list[tuple[str, Callable[[RecoveryService, str], None], Command]] = [
    ("resume", _escalated, lambda s: s.resume("h", actor="ana", reason="go on")),
    ("rewind", _escalated, lambda s: s.rewind("h", actor="bo", reason="again")),
    ("skip", _escalated, lambda s: s.skip("h", actor="bo", reason="not needed")),
    ("claim", _handed_off, lambda s: s.claim_handoff("h", actor="cy")),
]


@pytest.mark.parametrize(
    ("name", "prepare", "call"), HUMAN_ACTIONS, ids=[n for n, _, _ in HUMAN_ACTIONS]
)
def test_every_human_action_is_exactly_once(
    service: RecoveryService,
    name: str,
    prepare: Callable[[RecoveryService, str], None],
    call: Command,
) -> None:
    prepare(service, "h")
    with service.exactly_once(name, name):
        first = call(service)
    written = position(service)
    with service.exactly_once(name, name):
        assert call(service) == first
    assert position(service) == written


def test_resolving_a_hand_off_is_exactly_once(service: RecoveryService) -> None:
    _handed_off(service, "h")
    service.claim_handoff("h", actor="cy")
    for _ in range(2):
        with service.exactly_once("resolve", "r"):
            done = service.resolve_handoff(
                "h", actor="cy", resolution="complete", reason="fixed by hand"
            )
        assert done.state == "COMPLETED"
    assert [e.event for e in service.history("h")].count("HandoffResolved") == 1


def test_the_same_key_with_another_request_is_refused(
    started: RecoveryService,
) -> None:
    with started.exactly_once("k", "gate 1"):
        started.record_gate("t", 1)
    written = position(started)
    with (
        pytest.raises(InvalidInput, match="another request") as refused,
        started.exactly_once("k", "gate 0"),
    ):
        started.record_gate("t", 0)
    assert refused.value.field == "idempotency_key"
    assert position(started) == written


@pytest.mark.parametrize(
    "key", ["", " ", "has space", "é", "x" * 256, "tab\there", "\ud800"]
)
def test_a_bad_key_is_refused_before_anything(
    started: RecoveryService, key: str
) -> None:
    written = position(started)
    with (
        pytest.raises(InvalidInput, match="idempotency_key") as refused,
        started.exactly_once(key, "r"),
    ):
        started.record_gate("t", 1)
    assert refused.value.field == "idempotency_key"
    assert position(started) == written


def test_the_key_is_never_stored(started: RecoveryService, db_path: Path) -> None:
    key = "order-7f3a-do-not-store-me"
    with started.exactly_once(key, "r"):
        started.record_gate("t", 1)
    assert key.encode() not in db_path.read_bytes()
    assert started._store.get(Receipt.create_id(key)).version == 1


def test_a_refused_command_leaves_no_receipt(started: RecoveryService) -> None:
    started.record_gate("t", 0)  # completed: no more gates
    with pytest.raises(IllegalTransition), started.exactly_once("late", "r"):
        started.record_gate("t", 1)
    # decided again, and refused again: nothing was kept of the first try
    with pytest.raises(IllegalTransition), started.exactly_once("late", "r"):
        started.record_gate("t", 1)


def test_a_key_outlives_the_process(db_path: Path, started: RecoveryService) -> None:
    with started.exactly_once("k", "r"):
        first = started.record_gate("t", 1)
    started.close()
    with open_service(Settings(db=str(db_path))) as reopened:
        written = position(reopened)
        with reopened.exactly_once("k", "r"):
            assert reopened.record_gate("t", 1) == first
        assert position(reopened) == written
        assert reopened.task("t").consecutive_failures == 1


def test_threads_racing_with_one_key_write_once(started: RecoveryService) -> None:
    answers: list[Any] = []
    barrier = threading.Barrier(8)

    def send() -> None:
        barrier.wait()
        with started.exactly_once("race", "gate"):
            answers.append(started.record_gate("t", 1))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 8
    assert all(answer == answers[0] for answer in answers)
    assert started.task("t").consecutive_failures == 1


def _send_from_a_process(db: str, start: Any, results: Any) -> None:
    with open_service(Settings(db=db)) as service:
        start.wait()
        with service.exactly_once("shared", "gate"):
            results.put(service.record_gate("t", 1).model_dump_json())


def test_processes_racing_with_one_key_write_once(
    db_path: Path, started: RecoveryService
) -> None:
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    processes = [
        context.Process(
            target=_send_from_a_process, args=(str(db_path), start, results)
        )
        for _ in range(4)
    ]
    for process in processes:
        process.start()
    start.set()
    answers = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert len(set(answers)) == 1
    assert started.task("t").consecutive_failures == 1
    assert [entry.event for entry in started.history("t")].count("GateFailed") == 1


def test_without_a_key_a_command_is_done_each_time(started: RecoveryService) -> None:
    started.record_gate("t", 1)
    started.record_gate("t", 1)
    assert started.task("t").consecutive_failures == 2
