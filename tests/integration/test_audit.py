"""Audit on both backends: the hash chain catches edited, deleted and reordered
events by task and version; exports check offline; the replay check passes on
the fixture written by this release and on 0.1.0's; what-if writes nothing."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from devs.adapters.config import Settings, open_service
from devs.adapters.store.persistence import OrjsonTranscoder
from devs.domain import (
    InvalidInput,
    Policy,
    RecoveryService,
    UnknownRun,
    UnknownTask,
    UnreadableEvent,
)
from devs.domain.audit import verify_export
from devs.domain.task import Task
from tests.conftest import MakeService

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

Execute = Callable[[str, tuple[Any, ...]], list[Any]]


@pytest.fixture
def execute(backend: dict[str, str]) -> Iterator[Execute]:
    """Runs SQL on the backend's database behind the service's back (``?``
    placeholders), as someone editing the log by hand would."""
    if backend.get("DEVS_DB"):
        connection = sqlite3.connect(backend["DEVS_DB"])

        def run_sqlite(sql: str, params: tuple[Any, ...]) -> list[Any]:
            rows = connection.execute(sql, params).fetchall()
            connection.commit()
            return rows

        yield run_sqlite
        connection.close()
        return
    with psycopg.connect(backend["DEVS_DATABASE_URL"], autocommit=True) as pg:

        def run_pg(sql: str, params: tuple[Any, ...]) -> list[Any]:
            cursor = pg.execute(sql.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []

        yield run_pg


def _history(service: RecoveryService, task_id: str = "t") -> None:
    service.start_task(task_id, agent="coder", last_commit="c0")
    for i in range(3):
        service.begin_attempt(task_id, "retry the download")
        service.record_gate(task_id, 1, output=f"ConnectionError {i % 2}")
    service.resume(task_id, actor="ann", reason="mirror is back")
    service.begin_attempt(task_id, "use the other mirror")
    service.record_gate(task_id, 0)
    service.tasks()  # a query: the read models fold the log (and keep its heads)


def _table(service: RecoveryService) -> str:
    return str(service.recorder.events_table_name)  # type: ignore[attr-defined]


def _state(execute: Execute, table: str, version: int) -> bytes:
    [(state,)] = execute(
        f"SELECT state FROM {table} WHERE originator_id = ? AND originator_version = ?",
        ("task:t", version),
    )
    return bytes(state)


def _set_state(execute: Execute, table: str, version: int, state: bytes) -> None:
    execute(
        f"UPDATE {table} SET state = ? WHERE originator_id = ? "
        "AND originator_version = ?",
        (state, "task:t", version),
    )


def _problems(make_service: MakeService) -> list[str]:
    report = make_service().verify()
    assert not report.ok
    return [p for p in report.problems if p.startswith("task 't'")]


def test_an_untouched_log_verifies(make_service: MakeService) -> None:
    service = make_service()
    _history(service)
    _history(service, "u")
    report = service.verify()
    assert report.ok, report.problems
    assert report.chains == {"intact": 2, "unchained": 0, "broken": 0}
    audit = service.audit("t")
    assert audit.chain.state == "intact"
    assert audit.chain.head == audit.entries[-1].hash
    assert audit.entries[0].chain_prev == "task:t"
    for before, after in zip(audit.entries, audit.entries[1:], strict=False):
        assert after.chain_prev == before.hash
    assert [e.actor for e in audit.entries if e.actor] == ["ann"]


def test_an_edited_event_is_named(make_service: MakeService, execute: Execute) -> None:
    service = make_service()
    _history(service)
    table = _table(service)
    state = _state(execute, table, 3)
    _set_state(
        execute, table, 3, state.replace(b"ConnectionError 0", b"all fine!!!!!!!!")
    )
    assert _problems(make_service) == [
        "task 't': version 3 does not match the hash recorded at version 4 "
        "(version 3 or 4 was edited, deleted or reordered)"
    ]


def test_an_edited_last_event_is_caught_by_the_head(
    make_service: MakeService, execute: Execute
) -> None:
    service = make_service()
    _history(service)
    last = service.task("t").version
    table = _table(service)
    state = _state(execute, table, last)
    _set_state(execute, table, last, state.replace(b"other mirror", b"own mirror!!"))
    problems = _problems(make_service)
    assert (
        f"task 't': version {last} does not match the hash kept for it" in (problems[0])
    )


def test_a_deleted_event_is_named(make_service: MakeService, execute: Execute) -> None:
    service = make_service()
    _history(service)
    table = _table(service)
    execute(
        f"DELETE FROM {table} WHERE originator_id = ? AND originator_version = ?",
        ("task:t", 5),
    )
    assert _problems(make_service) == [
        "task 't': version 5 expected, found version 6 (an event was deleted)"
    ]


def test_a_deleted_last_event_is_named(
    make_service: MakeService, execute: Execute
) -> None:
    service = make_service()
    _history(service)
    last = service.task("t").version
    execute(
        f"DELETE FROM {_table(service)} WHERE originator_id = ? "
        "AND originator_version = ?",
        ("task:t", last),
    )
    problems = _problems(make_service)
    assert problems[0].startswith(
        f"task 't': its events end at version {last - 1} but version {last} "
        "was recorded"
    )


def test_reordered_events_are_named(
    make_service: MakeService, execute: Execute
) -> None:
    service = make_service()
    _history(service)
    table = _table(service)
    three, five = _state(execute, table, 3), _state(execute, table, 5)
    # Swap two failures' bodies, versions fixed to fit their new places.
    _set_state(
        execute,
        table,
        3,
        five.replace(b'"originator_version":5', b'"originator_version":3'),
    )
    _set_state(
        execute,
        table,
        5,
        three.replace(b'"originator_version":3', b'"originator_version":5'),
    )
    problems = _problems(make_service)
    assert problems[0].startswith(
        "task 't': version 2 does not match the hash recorded at version 3"
    )


def test_export_and_verify_it_offline(
    make_service: MakeService, tmp_path: Path
) -> None:
    service = make_service()
    _history(service)
    _history(service, "u")
    lines = [orjson.dumps(line) for line in service.export()]
    assert orjson.loads(lines[0]) == {"format": "devs-audit", "version": 1}
    trailer = orjson.loads(lines[-1])
    assert (trailer["format"], trailer["end"]) == ("devs-audit", True)
    assert set(trailer["tasks"]) == {"t", "u"}
    results, problem = verify_export(lines)
    assert problem is None
    assert {r.task_id: r.state for r in results} == {"t": "intact", "u": "intact"}
    only_t = [orjson.dumps(line) for line in service.export(["t"])]
    assert set(orjson.loads(only_t[-1])["tasks"]) == {"t"}
    assert len(only_t) == 2 + service.task("t").version
    with pytest.raises(UnknownTask):
        service.export(["nope"])  # refused at once, before any line


def test_an_export_lists_its_tasks_in_task_id_order(
    make_service: MakeService,
) -> None:
    """Created out of order, then changed out of order again (the task index
    lists the least recently changed first): the export is in task-id order,
    its events and its trailer alike, whether all tasks or some are asked
    for, in any order."""
    service = make_service()
    for task_id in ("m", "b10", "z", "b2", "a"):
        service.start_task(task_id)
    for task_id in ("a", "m", "b2"):
        service.record_gate(task_id, 1)

    def order(lines: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
        events = list(dict.fromkeys(line["task_id"] for line in lines[1:-1]))
        return events, list(lines[-1]["tasks"])

    everything = ["a", "b10", "b2", "m", "z"]
    assert order(list(service.export())) == (everything, everything)
    assert order(list(service.export())) == (everything, everything)
    named = order(list(service.export(["z", "b2", "a", "z"])))
    assert named == (["a", "b2", "z"], ["a", "b2", "z"])


def _exported(service: RecoveryService) -> list[bytes]:
    return [orjson.dumps(line) for line in service.export()]


def test_verify_export_names_the_first_broken_link(tmp_path: Path) -> None:
    with open_service(Settings(db=str(tmp_path / "x.sqlite"))) as service:
        _history(service)
        lines = _exported(service)
    edited = list(lines)
    line = orjson.loads(edited[3])
    line["event"]["failure"]["exit_code"] = 0
    edited[3] = orjson.dumps(line)
    assert verify_export(edited)[1] == (
        "line 4: task 't' version 3 does not match its recorded hash "
        "(the event was edited)"
    )
    # Edited with its hash recomputed: the next link breaks.
    from devs.domain.chain import body_hash

    line["hash"] = body_hash(line["topic"], line["event"])
    edited[3] = orjson.dumps(line)
    assert verify_export(edited)[1] == (
        "line 5: task 't': version 3 does not match the hash recorded at version "
        "4 (version 3 or 4 was edited, deleted or reordered)"
    )
    assert verify_export([*lines[:3], *lines[4:]])[1] == (
        "line 4: task 't': version 3 expected, found version 4 (an event was deleted)"
    )
    assert "were deleted" in str(verify_export([*lines[:-2], lines[-1]])[1])
    assert str(verify_export(lines[:-1])[1]).startswith("the file has no trailer")
    assert verify_export([*lines, lines[1]])[1] == (
        f"line {len(lines) + 1} follows the trailer"
    )
    assert verify_export([])[1] == "the file is empty: no header"
    assert verify_export([b"{}"])[1] == (
        "line 1 is not a devs-audit header; the file was not written by devs export"
    )
    assert str(verify_export([lines[0], b"{not json"])[1]).startswith(
        "line 2 is not JSON"
    )


def test_histories_before_the_chain_are_unchained_not_broken(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    shutil.copy(FIXTURES / "v0.1.0.sqlite", db)
    with open_service(Settings(db=str(db))) as old:
        report = old.verify()
        assert report.ok, report.problems
        assert report.chains["unchained"] == 32
        assert report.chains["broken"] == 0
        results, problem = verify_export(_exported(old))
        assert problem is None
        assert {r.state for r in results} == {"unchained"}
        assert old.audit("n00").chain.state == "unchained"
        # An old task goes on unchained: it does not start a chain halfway.
        task_id = next(e.task_id for e in old.tasks() if e.state != "COMPLETED")
        old.log_lesson(task_id, "a later lesson", "why")
        assert old.verify().ok


def test_the_replay_check_passes_on_the_fixture_of_this_release(
    tmp_path: Path,
) -> None:
    db = tmp_path / "fixture.sqlite"
    shutil.copy(FIXTURES / "replay-check.sqlite", db)
    with open_service(Settings(db=str(db))) as app:
        report = app.replay_check()
        assert report.ok, report.differences
        assert (report.tasks, report.events) == (7, 74)
        verification = app.verify()
        assert verification.ok, verification.problems
        assert verification.chains == {"intact": 7, "unchained": 0, "broken": 0}
        # what-if on it is stable too: the totals this release computed.
        what_if = app.what_if(Policy(stuck_detection="gate"))
        assert (what_if.recorded.escalations, what_if.what_if.escalations) == (6, 7)
        assert sorted(t.task_id for t in what_if.changed) == [
            "looping",
            "progressing",
            "strict",
            "unobserved",
        ]


def test_the_replay_check_passes_on_0_1_0_histories(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    shutil.copy(FIXTURES / "v0.1.0.sqlite", db)
    with open_service(Settings(db=str(db))) as old:
        report = old.replay_check()
        assert report.ok, report.differences
        assert report.tasks == 32


def test_what_if_writes_nothing_and_filters(make_service: MakeService) -> None:
    service = make_service()
    service.start_run("r", {"u": []})
    _history(service)
    service.start_task("u", run_id="r")
    service.start_task("v")
    before = service.recorder.max_notification_id()
    report = service.what_if(Policy(escalation_threshold=2))
    assert service.recorder.max_notification_id() == before
    assert report.tasks == 3
    [changed] = report.changed
    assert changed.task_id == "t"
    assert changed.changes[0] == (
        "escalations after GateFailed at versions 5, 7 instead of Escalated at "
        "version 8"
    )
    assert service.what_if(Policy(), task_ids=["t"]).changed == []
    assert service.what_if(Policy(), run_id="r").tasks == 1
    with pytest.raises(UnknownTask):
        service.what_if(Policy(), task_ids=["nope"])
    with pytest.raises(UnknownRun):
        service.what_if(Policy(), run_id="nope")
    # a mapping is changes to the policy in force, taken as they are
    assert service.what_if({"escalation_threshold": 2}) == report
    assert service.what_if({}) == service.what_if(service.policy)
    refusals: list[tuple[dict[str, object], str]] = [
        ({"escalation_threshold": 0}, "escalation_threshold is invalid"),
        ({"escalation_threshold": "2"}, "escalation_threshold is invalid"),
        ({"stuck_detection": "loud"}, "stuck_detection must be one of"),
        ({"nope": 1}, "'nope' is not a policy field"),
    ]
    for changes, words in refusals:
        with pytest.raises(InvalidInput, match=words) as refused:
            service.what_if(changes)
        assert refused.value.field == "policy"
    with pytest.raises(InvalidInput, match="task_ids"):
        service.what_if(Policy(), task_ids=["\x00"])


def test_the_replay_check_reports_a_changed_decision(
    make_service: MakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    from devs.domain.task import Task

    service = make_service()
    _history(service)
    assert service.replay_check().ok
    monkeypatch.setattr(Task, "_escalate", lambda self, session, report: None)
    report = service.replay_check()
    assert not report.ok
    [difference] = report.differences
    assert (difference.task_id, difference.version, difference.event) == (
        "t",
        7,
        "GateFailed",
    )
    assert difference.recorded == "GateFailed(3) -> Escalated(max_retries)"
    assert difference.recomputed == "GateFailed(3)"


def test_metrics_count_stuck_tasks_and_their_signals(
    make_service: MakeService,
) -> None:
    service = make_service()
    # t: the same strategy three times, errors X-Y-X: S = 2, E = 1, 0.75
    _history(service)
    service.start_task("u")
    ideas = ("rewrite the parser", "add a tokenizer first", "mock the clock")
    for i, idea in enumerate(ideas):  # new strategies, new errors: never stuck
        service.begin_attempt("u", idea)
        service.record_gate("u", 1, output=f"error {i}")
    figures = service.metrics()
    assert figures.stuck_tasks == 1
    assert (figures.stuck_score.count, figures.stuck_score.p90) == (2, 0.75)
    assert figures.stuck_score.p50 == 0.0
    assert figures.stuck_signals == {"alternation": 1, "strategy_repeat": 1}
    service.rebuild_projections("metrics")
    assert service.metrics() == figures
    assert service.verify().ok


def test_a_postgresql_database_of_the_last_release_takes_the_new_columns(
    pg_url: str,
) -> None:
    """Tables made before the chain head and stuck scores existed get their
    columns when the service opens them; a rebuild refolds the rows."""
    with open_service(Settings(database_url=pg_url)) as service:
        _history(service)
    with psycopg.connect(pg_url, autocommit=True) as pg:
        for statement in (
            "ALTER TABLE tasks DROP COLUMN version",
            "ALTER TABLE tasks DROP COLUMN chain_head",
            "ALTER TABLE tasks DROP COLUMN stuck_score",
            "ALTER TABLE metrics_tasks DROP COLUMN max_stuck",
            "DROP TABLE metrics_stuck_signals",
            "DROP TABLE devs_views_schema",  # the last release had none
        ):
            pg.execute(statement)
    with open_service(Settings(database_url=pg_url)) as upgraded:
        _history(upgraded, "u")  # the new folds write the new columns
        assert [e.task_id for e in upgraded.tasks()] == ["t", "u"]
        report = upgraded.verify()
        assert not report.ok  # t's rows were folded without the new columns
        assert report.chains["intact"] == 2
        upgraded.rebuild_projections()
        assert upgraded.verify().ok
        assert [e.stuck_score for e in upgraded.tasks()] == [None, None]


def test_the_chain_goes_on_across_snapshots_and_processes(
    make_service: MakeService,
) -> None:
    """A task long enough to be snapshotted (every 200 events) and reloaded
    from its snapshot by another process links its next events correctly."""
    writer = make_service()
    writer.start_task("long")
    for i in range(110):  # two events each: past the first snapshot
        writer.begin_attempt("long", f"idea {i % 7}")
        writer.log_lesson("long", f"lesson {i}", "why")
    assert writer.task("long").version > 200
    assert writer.snapshots is not None
    assert [s.originator_version for s in writer.snapshots.get("task:long")] == [200]
    other = make_service()  # no cached aggregate: loads from the snapshot
    other.begin_attempt("long", "one more idea")
    other.record_gate("long", 0)
    report = other.verify()
    assert report.ok, report.problems
    assert report.chains == {"intact": 1, "unchained": 0, "broken": 0}
    assert other.audit("long").chain.events == other.task("long").version


def _strip_links(execute: Execute, table: str) -> None:
    for version, state in execute(
        f"SELECT originator_version, state FROM {table} WHERE originator_id = ?",
        ("task:t",),
    ):
        body = orjson.loads(bytes(state))
        body.pop("chain_prev", None)
        _set_state(execute, table, version, orjson.dumps(body))


def test_links_removed_from_every_event_are_caught(
    make_service: MakeService, execute: Execute
) -> None:
    """Stripping the links makes the task look older than the chain; its
    Started says it is not, and the head the index kept says so too."""
    service = make_service()
    _history(service)
    _strip_links(execute, _table(service))
    problems = _problems(make_service)
    assert problems[0] == (
        "task 't': version 1 has no link, but it was written by a release that "
        "links every event (the links were removed)"
    )
    checked = make_service()
    checked.rebuild_projections()  # the index refolded from the edited log
    assert not checked.verify().ok


def test_links_removed_in_an_export_are_caught(tmp_path: Path) -> None:
    with open_service(Settings(db=str(tmp_path / "x.sqlite"))) as service:
        _history(service)
        lines = _exported(service)
    stripped = [lines[0]]
    for raw in lines[1:-1]:
        line = orjson.loads(raw)
        line["event"].pop("chain_prev")
        line["chain_prev"] = line["hash"] = None
        stripped.append(orjson.dumps(line))
    stripped.append(lines[-1])
    problem = verify_export(stripped)[1]
    assert problem == (
        "line 2: task 't': version 1 has no link, but it was written by a release "
        "that links every event (the links were removed)"
    )


def test_an_event_added_after_the_trailers_count_is_caught(tmp_path: Path) -> None:
    with open_service(Settings(db=str(tmp_path / "x.sqlite"))) as service:
        _history(service)
        lines = _exported(service)
    last = orjson.loads(lines[-2])
    forged = {
        **last,
        "version": last["version"] + 1,
        "chain_prev": last["hash"],
        "event": {
            **last["event"],
            "originator_version": last["version"] + 1,
            "chain_prev": last["hash"],
        },
    }
    from devs.domain.chain import body_hash

    forged["hash"] = body_hash(forged["topic"], forged["event"])
    problem = verify_export([*lines[:-1], orjson.dumps(forged), lines[-1]])[1]
    assert problem == (
        f"task 't': 1 event(s) after version {last['version']}, where its recorded "
        "end is (events were added)"
    )


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda line: line["event"].update(
                nested=__import__("functools").reduce(
                    lambda inner, _: {"x": inner}, range(100), {}
                )
            ),
            "cannot be hashed",
        ),
        (lambda line: line.update(version=3.0), "its version is not an integer"),
        (lambda line: line.update(version=True), "its version is not an integer"),
        (lambda line: line.update(task_id=None), "lacks its task id or topic"),
        (lambda line: line.update(event=[1]), "its event is not an object"),
    ],
)
def test_hostile_export_lines_are_refused_with_a_line_number(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], problem: str
) -> None:
    with open_service(Settings(db=str(tmp_path / "x.sqlite"))) as service:
        _history(service)
        lines = _exported(service)
    line = orjson.loads(lines[2])
    edit(line)
    found = verify_export([*lines[:2], orjson.dumps(line), *lines[3:]])[1]
    assert found is not None
    assert found.startswith("line 3")
    assert problem in found


@pytest.mark.parametrize(
    "summary",
    [{"events": "x", "state": "intact", "head": None}, [1], {"events": 1}],
)
def test_a_malformed_trailer_is_refused(tmp_path: Path, summary: Any) -> None:
    with open_service(Settings(db=str(tmp_path / "x.sqlite"))) as service:
        _history(service)
        lines = _exported(service)
    trailer = orjson.loads(lines[-1])
    trailer["tasks"]["t"] = summary
    problem = verify_export([*lines[:-1], orjson.dumps(trailer)])[1]
    assert problem == (
        f"line {len(lines)}: the trailer's entry for task 't' is malformed"
    )


def test_a_missing_first_event_is_reported_not_raised(
    make_service: MakeService, execute: Execute
) -> None:
    service = make_service()
    _history(service)
    _history(service, "u")
    execute(
        f"DELETE FROM {_table(service)} WHERE originator_id = ? "
        "AND originator_version = 1",
        ("task:t",),
    )
    fresh = make_service()
    checked = fresh.replay_check()
    assert not checked.ok
    assert checked.tasks == 1  # u
    assert checked.unreadable == [
        "task 't' cannot be re-decided: its first event (version 1, Started) is missing"
    ]
    what_if = fresh.what_if(Policy())
    assert what_if.tasks == 1
    assert len(what_if.unreadable) == 1
    audit = fresh.audit("t")
    assert audit.chain.state == "broken"
    assert audit.entries == []
    assert audit.problem is not None
    assert audit.problem.startswith("version 2 cannot be replayed")


def test_an_undecodable_event_is_exported_as_such(
    make_service: MakeService, execute: Execute
) -> None:
    service = make_service()
    _history(service)
    _set_state(execute, _table(service), 4, b"\xff{not json")
    lines = [orjson.dumps(line) for line in make_service().export()]
    line = orjson.loads(lines[4])
    assert (line["version"], line["event"]) == (4, None)
    assert line["unreadable"].startswith("JSONDecodeError")
    problem = verify_export(lines)[1]
    assert problem is not None
    assert problem.startswith("line 5: task 't': version 4 is unreadable")


def test_task_ids_and_a_run_narrow_together(make_service: MakeService) -> None:
    service = make_service()
    service.start_run("r", {"a": []})
    service.start_task("a", run_id="r")
    _history(service)
    assert service.what_if(Policy(), task_ids=["a", "t"], run_id="r").tasks == 1
    assert service.what_if(Policy(), task_ids=["t"], run_id="r").tasks == 0
    with pytest.raises(UnknownRun):
        service.what_if(Policy(), task_ids=["t"], run_id="nope")


def test_an_audit_reads_a_page_and_checks_the_whole_chain(
    make_service: MakeService,
) -> None:
    service = make_service()
    _history(service)
    whole = service.audit("t")
    page = service.audit("t", after=3, limit=4)
    assert [e.version for e in page.entries] == [4, 5, 6, 7]
    assert page.entries == whole.entries[3:7]
    assert page.chain == whole.chain
    with pytest.raises(InvalidInput, match="limit"):
        service.audit("t", limit=0)


def test_a_body_nested_past_any_event_breaks_the_chain_not_verify(
    make_service: MakeService, execute: Execute
) -> None:
    service = make_service()
    _history(service)
    table = _table(service)
    body = orjson.loads(_state(execute, table, 3))
    nested: dict[str, Any] = {}
    for _ in range(100):
        nested = {"x": nested}
    body["failure"]["deep"] = nested
    _set_state(execute, table, 3, orjson.dumps(body))
    problems = _problems(make_service)
    assert any(
        p.startswith("task 't': version 3 cannot be hashed (ValueError")
        for p in problems
    ), problems


# ------------------------------------------- one replay of a task's history


def _broken_apply(error: Exception) -> Callable[[Any, Any], None]:
    def apply(self: Any, aggregate: Any) -> None:
        raise error

    return apply


@pytest.mark.parametrize("error", [RuntimeError("a bug"), KeyError("a bug")])
@pytest.mark.parametrize("query", ["audit", "history", "what_if", "replay_check"])
def test_a_bug_in_a_fold_is_raised_not_reported_as_unreadable(
    service: RecoveryService,
    monkeypatch: pytest.MonkeyPatch,
    query: str,
    error: Exception,
) -> None:
    """Only an event that cannot be decoded (or does not follow the one
    before it) is the store's problem; a fold that raises is a bug, and is
    raised as itself."""
    _history(service)
    monkeypatch.setattr(Task.GateFailed, "apply", _broken_apply(error))
    calls: dict[str, Callable[[], object]] = {
        "audit": lambda: service.audit("t"),
        "history": lambda: service.history("t"),
        "what_if": lambda: service.what_if(Policy()),
        "replay_check": lambda: service.replay_check(),
    }
    with pytest.raises(type(error), match="a bug"):
        calls[query]()


def test_an_audit_page_reads_only_that_page(
    service: RecoveryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page of a long history is replayed from the latest snapshot before
    it, never from version 1; the chain is still checked over every event."""
    service.start_task("long")
    for _ in range(449):
        service.report_entropy("long", 0.1)  # one EntropyMeasured each
    assert service.task("long").version == 450
    assert service.snapshots is not None
    assert [s.originator_version for s in service.snapshots.get("task:long")] == [
        200,
        400,
    ]
    whole = service.audit("long")
    whole_history = service.history("long")
    decoded: list[int] = []
    decode = service.mapper.to_domain_event

    def counting(stored: Any) -> Any:
        if stored.originator_id == "task:long":
            decoded.append(stored.originator_version)
        return decode(stored)

    monkeypatch.setattr(service.mapper, "to_domain_event", counting)
    page = service.audit("long", after=420, limit=5)
    assert [e.version for e in page.entries] == [421, 422, 423, 424, 425]
    assert page.entries == whole.entries[420:425]
    assert page.chain == whole.chain  # every event's link, as before
    assert page.problem is None
    # The snapshot at 400, the events after it up to 420, then the page.
    assert decoded == [400, *range(401, 426)], decoded
    decoded.clear()
    assert service.history("long", after=420, limit=5) == whole_history[420:425]
    assert decoded == [400, *range(401, 426)], decoded


def test_an_event_missing_in_the_middle_stops_the_replay_as_the_store_s_problem(
    make_service: MakeService, execute: Execute
) -> None:
    service = make_service()
    _history(service)
    _history(service, "u")
    execute(
        f"DELETE FROM {_table(service)} WHERE originator_id = ? "
        "AND originator_version = 5",
        ("task:t",),
    )
    fresh = make_service()
    audit = fresh.audit("t")
    assert [e.version for e in audit.entries] == [1, 2, 3, 4]
    assert audit.problem == (
        "version 6 cannot be replayed: OutOfSequence: task 't': version 5 "
        "expected, found version 6 (an event was deleted)"
    )
    assert fresh.audit("t", after=6).problem == audit.problem
    with pytest.raises(UnreadableEvent, match="version 5 expected, found version 6"):
        fresh.history("t")
    with pytest.raises(UnreadableEvent, match="version 5 expected, found version 6"):
        fresh.history("t", after=7)  # the task as of version 7 cannot be had
    assert fresh.history("t", limit=4)[-1].version == 4  # before it: readable
    expected = [
        "task 't' cannot be re-decided: version 5 expected, found version 6 "
        "(an event was deleted)"
    ]
    checked = fresh.replay_check()
    assert (checked.ok, checked.tasks, checked.unreadable) == (False, 1, expected)
    what_if = fresh.what_if(Policy())
    assert (what_if.tasks, what_if.unreadable) == (1, expected)


def test_an_undecodable_event_before_a_page_stops_its_replay(
    make_service: MakeService, execute: Execute
) -> None:
    service = make_service()
    _history(service)
    _set_state(execute, _table(service), 4, b"\xff{not json")
    fresh = make_service()
    whole = fresh.audit("t")
    assert [e.version for e in whole.entries] == [1, 2, 3]
    assert whole.problem is not None
    assert whole.problem.startswith(
        "version 4 cannot be replayed: UnreadableEvent: stored event 4 of 'task:t' "
    )
    page = fresh.audit("t", after=5, limit=2)
    assert (page.entries, page.problem) == ([], whole.problem)
    assert fresh.audit("t", limit=3) == whole.model_copy(update={"problem": None})


def test_what_a_decoder_says_of_a_damaged_event_is_redacted(
    make_service: MakeService, execute: Execute, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decoder's error may quote the damaged bytes it read: the chain's
    report of them never repeats a credential."""
    secret = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
    service = make_service()
    _history(service)
    table = _table(service)
    _set_state(execute, table, 4, f"\xff damaged {secret}".encode())
    decode = OrjsonTranscoder.decode

    def quoting(self: OrjsonTranscoder, data: bytes) -> Any:
        if secret.encode() in data:
            raise ValueError(f"cannot decode {data.decode(errors='replace')!r}")
        return decode(self, data)

    monkeypatch.setattr(OrjsonTranscoder, "decode", quoting)
    problems = _problems(make_service)
    chain = make_service().audit("t").chain.model_dump_json()
    assert any("version 4" in problem for problem in problems), problems
    assert secret not in " ".join([*problems, chain])
    assert "cannot decode" in chain  # the decoder's words, redacted
