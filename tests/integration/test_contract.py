"""The contract of the read-models port and of the service, on every backend.

One suite, run by the ``backend`` fixture (tests/conftest.py) on a SQLite
file (``sqlite``), a SQLite store in memory (``memory``) and PostgreSQL
(``postgres``, the embedded server of tests/postgres.py). Each test asks the
same of each backend and expects the same answer:

- every command and every query, compared with the same script run on a
  reference service in memory (times, session ids and chain hashes aside),
  and with answers written down here;
- the errors: the same class, message and field;
- waiting for a log position, and past the end of the log;
- rebuilding every read model, one, and an unknown one;
- ``verify`` on a clean store and after damage (deleted rows, a dropped
  table, events that cannot be decoded);
- a dropped read-model table: the next query, fold or opening remakes it
  and refills it from the log;
- a poison event: queries about its task (or run) raise ``UnreadableEvent``
  naming it, every other task is served as before, ``verify`` lists it.

Damage is done behind the service's back with raw SQL (:class:`Store`):
``sqlite3`` on the file, ``psycopg`` on the database, and for the store in
memory the service's own datastore connection (nothing else can reach it).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import psycopg
import pytest
from eventsourcing.sqlite import SQLiteFactory
from pydantic import BaseModel

from devs.adapters.config import open_service
from devs.domain import (
    AlreadyExists,
    IllegalTransition,
    InvalidInput,
    NotFound,
    PositionNotRecorded,
    RecoveryService,
    StoreError,
    UnknownRun,
    UnknownTask,
    UnreadableEvent,
)
from devs.domain.ports import ReadModels
from devs.testing.machine import memory_env
from tests.conftest import MakeService

READ_MODELS = (
    "tasks",
    "hitl_sessions",
    "hitl_failure_gates",
    "lessons_learned",
    "task_failures",
    "handoff_queue",
    "runs",
    "metrics",
    "outbox",
)
DAG = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
BAD_TOPIC = "nowhere:Nothing"
TOPIC_PROBLEM = (
    "TopicError: Failed to resolve topic 'nowhere:Nothing': No module named 'nowhere'"
)


# ------------------------------------------------------------------ helpers


def kind(backend: dict[str, str]) -> str:
    if backend.get("DEVS_DATABASE_URL"):
        return "postgres"
    return "memory" if "mode=memory" in backend["DEVS_DB"] else "sqlite"


class Store:
    """Raw SQL on the service's store, behind its back (``?`` placeholders)."""

    def __init__(self, backend: dict[str, str], service: RecoveryService) -> None:
        self.kind = kind(backend)
        self.backend = backend
        self.service = service
        self.events = str(service.recorder.events_table_name)  # type: ignore[attr-defined]

    def execute(self, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
        if self.kind == "postgres":
            url = self.backend["DEVS_DATABASE_URL"]
            with psycopg.connect(url, autocommit=True) as connection:
                found = connection.execute(statement.replace("?", "%s"), params)
                return found.fetchall() if found.description else []
        if self.kind == "memory":
            factory = self.service.factory
            assert isinstance(factory, SQLiteFactory)
            with factory.datastore.transaction(commit=True) as cursor:
                cursor.execute(statement, params)
                return [tuple(row) for row in cursor.fetchall()]
        path = self.backend["DEVS_DB"]
        with contextlib.closing(sqlite3.connect(path)) as connection:
            rows = connection.execute(statement, params).fetchall()
            connection.commit()
            return rows

    def append(self, originator_id: str, topic: str, state: bytes) -> int:
        """Append an event to ``originator_id`` (as a foreign writer, or a
        release that had a class this one lacks, would); its log position."""
        [(version,)] = self.execute(
            f"SELECT MAX(originator_version) FROM {self.events} "
            "WHERE originator_id = ?",
            (originator_id,),
        )
        row = (originator_id, version + 1, topic, state)
        if self.kind == "postgres":  # the recorder's own insert: it NOTIFYs
            self.execute(
                f"SELECT devs_insert_{self.events}(ARRAY[?]::text[], "
                "ARRAY[?]::bigint[], ARRAY[?]::text[], ARRAY[?]::bytea[])",
                row,
            )
        else:
            self.execute(
                f"INSERT INTO {self.events} (originator_id, originator_version, "
                "topic, state) VALUES (?, ?, ?, ?)",
                row,
            )
        return end(self.service)

    def damage(self, originator_id: str, version: int, state: bytes) -> int:
        """Overwrite the state of a recorded event; its log position."""
        column = "notification_id" if self.kind == "postgres" else "rowid"
        [(position,)] = self.execute(
            f"SELECT {column} FROM {self.events} "
            "WHERE originator_id = ? AND originator_version = ?",
            (originator_id, version),
        )
        self.execute(
            f"UPDATE {self.events} SET state = ? "
            "WHERE originator_id = ? AND originator_version = ?",
            (state, originator_id, version),
        )
        return int(position)


@pytest.fixture
def opened(
    make_service: MakeService, backend: dict[str, str]
) -> tuple[RecoveryService, Store]:
    service = make_service()
    return service, Store(backend, service)


def end(service: RecoveryService) -> int:
    return service.recorder.max_notification_id() or 0


@pytest.fixture
def reference() -> Iterator[RecoveryService]:
    """The same script's answers, from a service in memory."""
    with open_service(env=memory_env()) as service:
        yield service


_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_CHAIN = frozenset({"hash", "chain_prev", "head"})
"""Keys whose value is a link of a task's hash chain (over its events' times)."""
_SECONDS = frozenset({"total", "mean", "p50", "p90"})


def normalized(value: Any, uuids: dict[str, str] | None = None) -> Any:
    """``value`` as JSON, without what differs from one run to the next:
    times, session ids (numbered in order of appearance), the hash chain's
    links, the seconds a wait took (error hashes stay: they hash outputs)."""
    uuids = {} if uuids is None else uuids
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        waits = "open" in value and "count" in value  # WaitTimes
        return {
            key: (
                "<varies>"
                if item is not None and (key in _CHAIN or (waits and key in _SECONDS))
                else normalized(item, uuids)
            )
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [normalized(item, uuids) for item in value]
    if isinstance(value, datetime):
        return "<time>"
    if isinstance(value, str):
        if _TIME.match(value):
            return "<time>"
        if _UUID.match(value):
            return uuids.setdefault(value, f"<session {len(uuids) + 1}>")
    return value


def answers(service: RecoveryService) -> dict[str, Any]:
    """Every command, and every query where its answer says something, in
    one scripted history: a run of four nodes and a task of its own."""
    s = service
    found: dict[str, Any] = {}
    found["start_run"] = s.start_run("r", DAG)
    found["start_task a"] = s.start_task(
        "a", run_id="r", agent="coder", last_commit="c0"
    )
    found["begin_attempt a"] = s.begin_attempt("a", "use a regex")
    found["record_gate a fails"] = s.record_gate(
        "a", 1, gate="pytest", error="E: no", output="FAILED test_parse"
    )
    found["log_lesson a"] = s.log_lesson("a", "use a regex", "it cannot parse nesting")
    found["is_strategy_blacklisted a early"] = s.is_strategy_blacklisted(
        "a", "Use a regex!"
    )
    found["blacklist_directive a early"] = s.blacklist_directive("a")
    found["begin_attempt a blocked"] = s.begin_attempt("a", "use a regex")
    found["gate_status a paused"] = s.gate_status("a")
    found["pending_sessions a paused"] = s.pending_sessions()
    found["waiting_tasks a paused"] = s.waiting_tasks()
    found["run_state paused"] = s.run_state("r")
    found["resume a"] = s.resume("a", actor="ana", reason="pick another idea")
    found["begin_attempt a again"] = s.begin_attempt("a", "use a parser")
    found["record_gate a passes"] = s.record_gate("a", 0, gate="pytest")
    # b: entropy, low then high (a pause), then a rewind
    found["start_task b"] = s.start_task("b", run_id="r", agent="coder")
    found["report_entropy b low"] = s.report_entropy("b", 0.2)
    found["report_entropy b high"] = s.report_entropy("b", 0.95)
    found["gate_status b paused"] = s.gate_status("b")
    found["rewind b"] = s.rewind("b", actor="ana", reason="start over", to_commit="c1")
    # c: three failures escalate, then a skip
    found["start_task c"] = s.start_task("c", run_id="r", agent="tester")
    for i in range(3):
        found[f"record_gate c {i}"] = s.record_gate(
            "c", 1, gate="pytest", error=f"E{i}", output=f"FAILED {i}"
        )
    found["failure_report c escalated"] = s.failure_report("c")
    found["skip c"] = s.skip("c", actor="ana", reason="not needed")
    # b fails until it is handed off, then a human claims and completes it
    for i in range(20):
        if s.task("b").state == "HAND_OFF":
            break
        if s.task("b").pending_session is not None:
            found[f"resume b {i}"] = s.resume("b", actor="ana", reason="once more")
        found[f"record_gate b {i}"] = s.record_gate("b", 1, gate="pytest", error="E")
    found["handoff_queue handed off"] = s.handoff_queue()
    found["claim_handoff b"] = s.claim_handoff("b", actor="bo")
    found["handoff_queue claimed"] = s.handoff_queue()
    found["resolve_handoff b"] = s.resolve_handoff(
        "b", actor="bo", resolution="complete", reason="fixed by hand"
    )
    found["start_task d"] = s.start_task("d", run_id="r", agent="coder")
    found["start_task solo"] = s.start_task("solo", agent="other", last_commit="s0")
    found["record_gate solo"] = s.record_gate("solo", 2, gate="lint", error="E501")
    found.update(queries(s))
    return found


def queries(s: RecoveryService) -> dict[str, Any]:
    """Every query, on the store as it is."""
    found: dict[str, Any] = {}
    for task_id in ("a", "b", "c", "d", "solo"):
        found[f"task {task_id}"] = s.task(task_id)
        found[f"gate_status {task_id}"] = s.gate_status(task_id)
        found[f"failure_report {task_id}"] = s.failure_report(task_id)
        found[f"lessons {task_id}"] = s.lessons(task_id)
        found[f"history {task_id}"] = s.history(task_id)
        found[f"audit {task_id}"] = s.audit(task_id)
    found["tasks"] = s.tasks()
    for state in ("RUNNING", "COMPLETED", "SKIPPED", "GATE_FAILED", "PAUSED"):
        found[f"tasks state={state}"] = s.tasks(state=state)
    found["tasks run_id=r"] = s.tasks(run_id="r")
    found["tasks state=COMPLETED run_id=r"] = s.tasks(state="COMPLETED", run_id="r")
    found["waiting_tasks"] = s.waiting_tasks()
    found["is_strategy_blacklisted a"] = s.is_strategy_blacklisted("a", "use a regex")
    found["is_strategy_blacklisted a other"] = s.is_strategy_blacklisted("a", "x y")
    found["blacklist_directive a"] = s.blacklist_directive("a")
    found["blacklist_directive solo"] = s.blacklist_directive("solo")
    found["pending_sessions"] = s.pending_sessions()
    found["handoff_queue"] = s.handoff_queue()
    found["run_state"] = s.run_state("r")
    found["metrics"] = s.metrics()
    found["metrics run"] = s.metrics(run_id="r")
    found["metrics since"] = s.metrics(since=datetime.now(UTC) + timedelta(days=1))
    found["notifications"] = s.notifications()
    found["notifications page"] = s.notifications(after=3, limit=2)
    found["history page"] = s.history("b", after=2, limit=3)
    found["state_at"] = s.state_at("b", 3)
    found["audit page"] = s.audit("b", after=1, limit=2)
    found["replay_check"] = s.replay_check()
    found["replay_check a"] = s.replay_check(task_ids=["a"])
    found["what_if"] = s.what_if({"escalation_threshold": 2})
    found["what_if run"] = s.what_if({"handoff_threshold": 9}, run_id="r")
    found["verify"] = s.verify()
    return found


def refusal(call: Callable[[], Any]) -> tuple[str, str, str | None]:
    """The error ``call`` raises: its class, message and field."""
    with pytest.raises(Exception) as raised:  # noqa: PT011 (any error: compared)
        call()
    error = raised.value
    return type(error).__name__, str(error), getattr(error, "field", None)


def poisoned(originator_id: str, version: int, position: int, problem: str) -> str:
    """What a query about ``originator_id`` raises, on every backend."""
    return (
        f"{originator_id!r} cannot be shown: its event at log position {position} "
        f"({originator_id!r}, version {version}) cannot be read: {problem}; "
        "other tasks are unaffected (devs verify lists every such event)"
    )


def listed(originator_id: str, version: int, position: int, problem: str) -> str:
    """How ``verify`` lists an event that cannot be decoded, on every backend."""
    return (
        f"event at log position {position} ({originator_id!r}, version "
        f"{version}) cannot be read: {problem}"
    )


def decoding(originator_id: str, version: int, topic: str, problem: str) -> str:
    return (
        f"stored event {version} of {originator_id!r} (topic {topic!r}) cannot "
        f"be decoded: {problem}"
    )


# ------------------------------------------------------ commands and queries


def test_every_command_and_query_answers_as_the_reference_does(
    make_service: MakeService, reference: RecoveryService
) -> None:
    service = make_service()
    got, want = answers(service), answers(reference)
    assert list(got) == list(want)
    uuids: tuple[dict[str, str], dict[str, str]] = ({}, {})
    for key in want:
        assert normalized(got[key], uuids[0]) == normalized(want[key], uuids[1]), key
    # ... and what they say, written down
    assert got["begin_attempt a blocked"].blacklisted
    assert got["is_strategy_blacklisted a early"] is True
    assert got["is_strategy_blacklisted a"] is True
    assert got["is_strategy_blacklisted a other"] is False
    assert "use a regex" in got["blacklist_directive a early"]
    assert got["gate_status a paused"].reason == "blacklisted_strategy"
    assert got["gate_status b paused"].entropy_score == 0.95
    assert got["failure_report c escalated"].escalations == 1
    assert [h.payload.task_id for h in got["handoff_queue handed off"]] == ["b"]
    assert got["handoff_queue claimed"][0].claimed_by == "bo"
    assert got["handoff_queue"] == []
    assert [(e.task_id, e.state) for e in got["tasks"]] == [  # by task id
        ("a", "COMPLETED"),
        ("b", "COMPLETED"),
        ("c", "SKIPPED"),
        ("d", "RUNNING"),
        ("solo", "GATE_FAILED"),
    ]
    assert [e.task_id for e in got["tasks run_id=r"]] == ["a", "b", "c", "d"]
    run = got["run_state"]
    assert (run.status, run.completed, run.skipped, run.started) == (
        "RUNNING",
        ("a", "b"),
        ("c",),
        ("a", "b", "c", "d"),
    )
    assert got["metrics"].tasks == 5
    assert got["metrics run"].tasks == 4
    assert got["metrics since"].tasks == 0
    assert got["metrics"].blocked_attempts == 1
    assert got["state_at"].version == 3
    assert [e.version for e in got["history page"]] == [3, 4, 5]
    assert got["replay_check"].ok
    assert got["verify"].ok, got["verify"].problems
    assert got["verify"].chains == {"intact": 5, "unchained": 0, "broken": 0}
    assert got["verify"].read_models == READ_MODELS


def test_the_read_models_port(make_service: MakeService) -> None:
    """The port itself: its names, positions, catch-up, and a query about
    what does not exist."""
    service = make_service()
    models: ReadModels = service.read_models
    assert models.names == READ_MODELS
    service.start_run("r", {"a": []})
    service.start_task("a", run_id="r")
    service.log_lesson("a", "x", "y")
    last = end(service)
    assert models.catch_up() == last
    assert models.positions() == dict.fromkeys(READ_MODELS, last)
    assert models.wait_for(last, 1.0) >= last
    for missing in (
        models.task_entry("nope"),
        models.gate_status("nope"),
        models.failure_report("nope"),
        models.run_state("nope"),
    ):
        assert missing is None
    assert models.lessons("nope") == []
    assert models.lesson_strategies("a") == ("x",)
    other = make_service()  # another process on the same store, where one can
    other.log_lesson("a", "z", "y")
    assert models.current_lesson_strategies("a") == ("x", "z")
    assert models.current_lesson_strategies("a") == ("x", "z")  # from memory
    assert models.current_lesson_strategies("nope") == ()
    last = end(service)
    assert [entry.task_id for entry in models.task_entries(run_id="r")] == ["a"]
    assert [task for task, _, head in models.chain_heads() if head] == ["a"]
    assert models.rebuild(["runs"]) == last
    assert models.verify().ok


# -------------------------------------------------------------------- errors


def test_the_errors_are_the_same_everywhere(make_service: MakeService) -> None:
    service = make_service()
    service.start_task("t")
    service.start_run("r", {"a": []})
    service.start_task("done")
    service.record_gate("done", 0)
    written = end(service)
    expected: list[tuple[Callable[[], Any], tuple[str, str, str | None]]] = [
        (
            lambda: service.gate_status("nope"),
            (
                UnknownTask.__name__,
                "unknown task 'nope': start it with start_task() first",
                None,
            ),
        ),
        (
            lambda: service.record_gate("nope", 1),
            (
                UnknownTask.__name__,
                "unknown task 'nope': start it with start_task() first",
                None,
            ),
        ),
        (
            lambda: service.lessons("nope"),
            (
                UnknownTask.__name__,
                "unknown task 'nope': start it with start_task() first",
                None,
            ),
        ),
        (
            lambda: service.failure_report("nope"),
            (
                UnknownTask.__name__,
                "unknown task 'nope': start it with start_task() first",
                None,
            ),
        ),
        (
            lambda: service.is_strategy_blacklisted("nope", "x"),
            (
                UnknownTask.__name__,
                "unknown task 'nope': start it with start_task() first",
                None,
            ),
        ),
        (
            lambda: service.run_state("nope"),
            (
                UnknownRun.__name__,
                "unknown run 'nope': start it with start_run() first",
                None,
            ),
        ),
        (
            lambda: service.metrics(run_id="nope"),
            (
                UnknownRun.__name__,
                "unknown run 'nope': start it with start_run() first",
                None,
            ),
        ),
        (
            lambda: service.state_at("t", 9),
            (
                NotFound.__name__,
                "task 't' has no version 9: its versions are 1 to 1",
                None,
            ),
        ),
        (
            lambda: service.start_task("t"),
            (
                AlreadyExists.__name__,
                "task 't' was already started: record its attempts with "
                "begin_attempt(), or read it with task()",
                None,
            ),
        ),
        (
            lambda: service.start_run("r", {"a": []}),
            (
                AlreadyExists.__name__,
                "run 'r' was already started: start its tasks with "
                "start_task(run_id=...), or read it with run_state()",
                None,
            ),
        ),
        (
            lambda: service.resume("t", actor="a", reason="r"),
            (
                IllegalTransition.__name__,
                "cannot resume a task in state RUNNING; allowed from ESCALATION, "
                "PAUSED",
                None,
            ),
        ),
        (
            lambda: service.record_gate("done", 1),
            (
                IllegalTransition.__name__,
                "cannot fail gate a task in state COMPLETED; allowed from "
                "GATE_FAILED, RUNNING",
                None,
            ),
        ),
        (
            lambda: service.rebuild_projections("nope"),
            (
                InvalidInput.__name__,
                f"unknown projection 'nope'; known: {', '.join(READ_MODELS)}",
                "names",
            ),
        ),
        (
            lambda: service.rebuild_projections(["tasks", "nope", "gone"]),
            (
                InvalidInput.__name__,
                f"unknown projection 'nope', 'gone'; known: {', '.join(READ_MODELS)}",
                "names",
            ),
        ),
    ]
    invalid: list[tuple[Callable[[], Any], str, str]] = [
        (
            lambda: service.record_gate("t", 2**40),
            "exit_code 1099511627776 is out of range [-2147483648, 4294967295]",
            "exit_code",
        ),
        (
            lambda: service.report_entropy("t", float("nan")),
            "score must be a finite number in [0, 1], got nan",
            "score",
        ),
        (
            lambda: service.begin_attempt("t", ""),
            "strategy must not be empty",
            "strategy",
        ),
        (
            lambda: service.start_task("bad\ud800id"),
            "task_id must be valid Unicode text (no lone surrogates)",
            "task_id",
        ),
        (
            lambda: service.start_run("c", {"a": ["b"], "b": ["a"]}),
            "dag has a cycle: a -> b -> a",
            "dag",
        ),
        (
            lambda: service.state_at("t", 0),
            "version 0 is out of range [1, 1] for task 't'",
            "version",
        ),
        (
            lambda: service.wait_for(-1),
            "position must be a non-negative integer, got -1",
            "position",
        ),
    ]
    for call, message, argument in invalid:
        expected.append((call, (InvalidInput.__name__, message, argument)))
    for call, refused in expected:
        assert refusal(call) == refused
    assert end(service) == written  # a refusal writes nothing


def test_the_error_messages_match_the_reference(
    make_service: MakeService, reference: RecoveryService
) -> None:
    """Every refusal of the scripted calls: class, message and field as in
    the reference service."""
    calls: list[Callable[[RecoveryService], Any]] = [
        lambda s: s.record_gate("t", 2**40),
        lambda s: s.report_entropy("t", float("nan")),
        lambda s: s.begin_attempt("t", ""),
        lambda s: s.start_task("bad\ud800id"),
        lambda s: s.start_run("c", {"a": ["b"], "b": ["a"]}),
        lambda s: s.state_at("t", 9),
        lambda s: s.wait_for(-1),
        lambda s: s.history("nope"),
        lambda s: s.audit("nope"),
        lambda s: s.task("nope"),
        lambda s: s.skip("done", actor="a", reason="r"),
        lambda s: s.claim_handoff("t", actor="a"),
        lambda s: s.start_task("x", run_id="nope"),
        lambda s: s.metrics(since=datetime(2020, 1, 1)),  # naive: refused
    ]
    service = make_service()
    for s in (service, reference):
        s.start_task("t")
        s.start_task("done")
        s.record_gate("done", 0)
    for call in calls:
        assert refusal(partial(call, service)) == refusal(partial(call, reference))


# ------------------------------------------------------------------ waiting


def test_waiting_for_a_position(make_service: MakeService) -> None:
    service = make_service(DEVS_READ_WAIT="30")
    with service.written() as written:
        service.start_task("w")
    assert written.position is not None
    assert service.wait_for(written.position, timeout=5) >= written.position
    with service.reading_after(written.position):
        assert service.gate_status("w").state == "RUNNING"
    with service.reading_after(None):
        assert [e.task_id for e in service.tasks()] == ["w"]
    last = end(service)
    # Past the log's end: said at once, not after the 30 s read wait.
    began = time.monotonic()
    with pytest.raises(PositionNotRecorded) as raised:
        service.wait_for(last + 10, timeout=30)
    assert str(raised.value) == (
        f"position {last + 10} has not been recorded: the log ends at position "
        f"{last} (a position a command answered is never past the end of its log)"
    )
    assert (raised.value.position, raised.value.last) == (last + 10, last)
    with pytest.raises(PositionNotRecorded), service.reading_after(last + 10):
        service.tasks()
    assert time.monotonic() - began < 3
    service.start_task("x")  # the log grows: a later position is reached
    assert service.wait_for(last + 1, timeout=5) >= last + 1


# --------------------------------------------------- rebuild and verify


def test_rebuild_every_read_model_or_some(make_service: MakeService) -> None:
    service = make_service()
    service.start_run("r", {"a": [], "b": ["a"]})
    service.start_task("a", run_id="r")
    service.log_lesson("a", "x", "y")
    for _ in range(3):
        service.record_gate("a", 1)
    service.start_task("p")
    service.report_entropy("p", 0.99)

    def state() -> Any:
        return normalized(
            [
                service.gate_status("a"),
                service.lessons("a"),
                service.run_state("r"),
                service.failure_report("a"),
                service.pending_sessions(),
                service.tasks(),
                service.metrics(),
            ]
        )

    before = state()
    last = end(service)
    assert service.rebuild_projections() == last
    assert state() == before
    assert service.rebuild_projections("lessons_learned") == last
    assert service.rebuild_projections(["tasks", "runs", "tasks"]) == last
    assert state() == before
    assert service.verify().ok


def test_verify_a_clean_store_then_deleted_and_edited_rows(
    opened: tuple[RecoveryService, Store],
) -> None:
    service, store = opened
    service.start_task("t1")
    service.log_lesson("t1", "use a regex", "it cannot parse nesting")
    service.record_gate("t1", 1, error="E")
    last = service.catch_up()
    report = service.verify()
    assert (report.ok, report.problems, report.position) == (True, [], last)
    assert report.read_models == READ_MODELS
    assert report.positions == dict.fromkeys(READ_MODELS, last)
    assert report.chains == {"intact": 1, "unchained": 0, "broken": 0}

    store.execute("DELETE FROM lessons_learned")
    store.execute("UPDATE tasks SET failure_count = 99 WHERE id = 't1'")
    problems = service.verify().problems
    assert len(problems) == 2, problems
    tasks, lessons = problems
    assert tasks.startswith(
        "read model 'tasks', table tasks: 1 row(s) of the log missing, 1 row(s) "
        f"not from the log, at position {last} (e.g. missing ('t1', None, None"
    )
    assert lessons.startswith(
        "read model 'lessons_learned', table lessons_learned: 1 row(s) of the "
        f"log missing, 0 row(s) not from the log, at position {last} (e.g. "
        "missing ("
    )
    assert lessons.endswith("'t1', 'use a regex', …)); rebuild it")
    service.rebuild_projections()
    assert service.verify().ok
    assert [lesson.failed_strategy for lesson in service.lessons("t1")] == [
        "use a regex"
    ]
    assert service.gate_status("t1").consecutive_failures == 1


# --------------------------------------------------------- a dropped table


def test_a_dropped_table_is_remade_and_refilled(
    opened: tuple[RecoveryService, Store],
) -> None:
    service, store = opened
    service.start_task("t1")
    service.log_lesson("t1", "use a regex", "why")
    service.start_task("h")
    for _ in range(3):
        service.record_gate("h", 1)
    while service.task("h").state != "HAND_OFF":
        if service.task("h").pending_session is not None:
            service.resume("h", actor="ana", reason="go on")
        service.record_gate("h", 1)
    lessons, queue = service.lessons("t1"), service.handoff_queue()
    assert lessons
    assert queue

    store.execute("DROP TABLE lessons_learned")
    assert service.verify().problems == [
        "read model 'lessons_learned': table lessons_learned is missing "
        "(the next query remakes it and refills it from the log)"
    ]
    assert service.lessons("t1") == lessons  # a query meets it
    assert service.is_strategy_blacklisted("t1", "use a regex")
    assert service.verify().ok

    store.execute("DROP TABLE handoff_queue")
    assert service.handoff_queue() == queue
    listing = [entry.task_id for entry in service.tasks()]
    store.execute("DROP TABLE tasks")
    service.start_task("later")  # a fold meets it (or the query after it)
    service.log_lesson("later", "x", "y")
    assert [entry.task_id for entry in service.tasks()] == sorted([*listing, "later"])
    assert [lesson.failed_strategy for lesson in service.lessons("later")] == ["x"]
    assert service.verify().ok


def test_a_table_dropped_while_closed_is_remade_on_open(
    make_service: MakeService, backend: dict[str, str]
) -> None:
    """Needs a second service on the same store (not on ``memory``)."""
    first = make_service()
    first.start_task("t1")
    first.log_lesson("t1", "use a regex", "why")
    lessons = first.lessons("t1")
    Store(backend, first).execute("DROP TABLE lessons_learned")
    first.close()
    second = make_service()
    assert second.verify().ok  # remade when opened
    assert second.lessons("t1") == lessons


# ------------------------------------------------------------ poison events


def test_a_poison_event_stops_only_its_own_task_and_run(
    opened: tuple[RecoveryService, Store],
) -> None:
    service, store = opened
    service.start_run("r", {"p": [], "q": []})
    service.start_task("p", run_id="r")
    service.start_task("t1")
    service.log_lesson("t1", "use a regex", "why")
    service.start_task("t2")
    service.record_gate("t2", 1, error="E")
    service.log_lesson("t2", "use a regex", "why")
    others_before = normalized(
        [service.gate_status("t2"), service.failure_report("t2"), service.lessons("t2")]
    )
    listing = [entry.task_id for entry in service.tasks()]

    task_poison = store.append("task:t1", BAD_TOPIC, b"{}")
    run_poison = store.append("run:r", "devs:Run.NodeStarted", b"\xff{")
    service.start_task("t3")  # written after them: still folded
    service.record_gate("t3", 1, error="E")

    task_problem = decoding("task:t1", 3, BAD_TOPIC, TOPIC_PROBLEM)
    refused = poisoned("task:t1", 3, task_poison, task_problem)
    for query in (
        lambda: service.gate_status("t1"),
        lambda: service.failure_report("t1"),
        lambda: service.lessons("t1"),
        lambda: service.is_strategy_blacklisted("t1", "use a regex"),
        lambda: service.blacklist_directive("t1"),
        lambda: service.read_models.task_entry("t1"),
    ):
        with pytest.raises(UnreadableEvent) as raised:
            query()
        assert str(raised.value) == refused
        assert raised.value.position == task_poison
        assert raised.value.originator_id == "task:t1"
    # loading the task itself decodes its events: the same decoding error
    for load in (
        lambda: service.task("t1"),
        lambda: service.history("t1"),
        lambda: service.state_at("t1", 1),
        lambda: service.record_gate("t1", 1),
    ):
        with pytest.raises(StoreError, match=re.escape(task_problem)):
            load()
    [run_problem] = [
        problem
        for problem in service.verify().problems
        if f"log position {run_poison} " in problem
    ]
    assert run_problem.startswith(
        f"event at log position {run_poison} ('run:r', version 3) cannot be read: "
        "stored event 3 of 'run:r' (topic 'devs:Run.NodeStarted') cannot be "
        "decoded: JSONDecodeError"
    )
    for run_query in (
        lambda: service.run_state("r"),
        lambda: service.metrics(run_id="r"),
    ):
        with pytest.raises(UnreadableEvent) as raised:
            run_query()
        assert raised.value.position == run_poison
        assert str(raised.value).startswith(
            f"'run:r' cannot be shown: its event at log position {run_poison} "
        )

    # every other task is served as before
    assert (
        normalized(
            [
                service.gate_status("t2"),
                service.failure_report("t2"),
                service.lessons("t2"),
            ]
        )
        == others_before
    )
    assert service.gate_status("t3").consecutive_failures == 1
    assert [entry.task_id for entry in service.tasks()] == [*listing, "t3"]
    assert service.pending_sessions() == []
    assert service.handoff_queue() == []
    assert service.notifications() == []
    assert service.metrics().tasks == 4

    def check_verify() -> None:
        report = service.verify()
        assert not report.ok
        assert report.problems[:2] == [
            listed("task:t1", 3, task_poison, task_problem),
            run_problem,
        ]
        # written by hand, the task's event has no link to the one before it
        assert report.problems[2:] == [
            "task 't1': version 2 does not match the hash recorded at version 3 "
            "(version 2 or 3 was edited, deleted or reordered)"
        ]

    check_verify()
    # a rebuild (all, or some) skips it too, and keeps refusing its task
    for names in (None, "lessons_learned"):
        service.rebuild_projections(names)
        with pytest.raises(UnreadableEvent):
            service.lessons("t1")
        with pytest.raises(UnreadableEvent):
            service.run_state("r")
        assert service.gate_status("t3").consecutive_failures == 1
        check_verify()


def test_an_event_damaged_after_it_was_folded(
    opened: tuple[RecoveryService, Store],
) -> None:
    """The read models folded it before it was damaged: ``verify`` finds it;
    a rebuild meets it and from then on its task's queries are refused."""
    service, store = opened
    service.start_task("t1")
    service.record_gate("t1", 1, error="E")
    service.start_task("t2")
    service.record_gate("t2", 1, error="E")
    service.catch_up()
    position = store.damage("task:t1", 2, b"\xff{not json")
    found = f"event at log position {position} ('task:t1', version 2) cannot be read"
    problems = service.verify().problems
    # the read models folded it: they differ from a fold that cannot
    folded = [problem for problem in problems if problem.startswith("read model ")]
    assert [problem.split(":")[0] for problem in folded] == [
        "read model 'tasks', table tasks",
        "read model 'task_failures', table task_failures",
        "read model 'metrics', table metrics_tasks",
        "read model 'outbox', table outbox_task_runs",  # the task's context
    ]
    [listed] = [problem for problem in problems if problem.startswith(found)]
    assert listed.startswith(
        f"{found}: stored event 2 of 'task:t1' (topic 'devs:Task.GateFailed') "
        "cannot be decoded: JSONDecodeError"
    )
    assert service.gate_status("t1").consecutive_failures == 1  # as folded
    service.rebuild_projections()
    with pytest.raises(UnreadableEvent) as raised:
        service.gate_status("t1")
    assert raised.value.position == position
    assert service.gate_status("t2").consecutive_failures == 1
    problems = service.verify().problems
    assert [p for p in problems if not p.startswith("task 't1'")] == [listed]


def test_an_event_recorded_as_undecodable_that_decodes_now_is_reported(
    opened: tuple[RecoveryService, Store],
) -> None:
    """Repaired by hand, it decodes again: ``verify`` says its task's queries
    are still refused until a rebuild, which then serves them again."""
    service, store = opened
    service.start_task("t1")
    service.record_gate("t1", 1, error="E")
    [(state,)] = store.execute(
        f"SELECT state FROM {store.events} "
        "WHERE originator_id = ? AND originator_version = 2",
        ("task:t1",),
    )
    position = store.damage("task:t1", 2, b"\xff{not json")
    service.rebuild_projections()
    with pytest.raises(UnreadableEvent):
        service.gate_status("t1")
    store.damage("task:t1", 2, bytes(state))
    problems = service.verify().problems
    assert problems[-1] == (
        f"event at log position {position} is recorded as undecodable but "
        "decodes now: its task's queries are refused and the read models "
        "lack it; rebuild them"
    )
    # and the read models, folded without it, differ from a fold with it
    assert [problem.split(":")[0] for problem in problems[:-1]] == [
        "read model 'tasks', table tasks",
        "read model 'task_failures', table task_failures",
        "read model 'metrics', table metrics_tasks",
        "read model 'outbox', table outbox_task_runs",  # the task's context
    ]
    service.rebuild_projections()
    assert service.gate_status("t1").consecutive_failures == 1
    assert service.verify().ok
