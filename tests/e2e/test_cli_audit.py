"""The audit commands as a user runs them: ``devs what-if``, ``devs
replay-check``, ``devs verify`` with hash chains, ``devs export`` and ``devs
verify-export``, and the stuck score in ``status``, ``task show``, ``history``
and the escalation block."""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import orjson
import pytest

from devs.adapters.config import Settings, open_service
from tests.e2e.test_cli import BAD_INPUT, Devs, assert_one_line_error

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RETRY = 1
ESCALATED = 3


@pytest.fixture
def devs(tmp_path: Path) -> Devs:
    (tmp_path / "store").mkdir()  # apart from the gates' folder
    return Devs(tmp_path / "store" / "state.sqlite", tmp_path)


def _loop(devs: Devs) -> None:
    devs("task", "start", "t")
    for _ in range(2):
        devs("attempt", "t", "retry the download")
        devs("gate", "run", "t", "--", "false", code=RETRY)


def test_the_stuck_score_is_shown_where_a_human_looks(devs: Devs) -> None:
    _loop(devs)
    devs("attempt", "t", "retry the download")
    escalated = devs("gate", "run", "t", "--", "false", code=ESCALATED)
    assert "Stuck: 1.00 (same strategy 3 times; same error hash 3 times)" in (
        escalated.stdout
    )
    shown = devs("task", "show", "t").stdout
    assert "stuck: 1.00 (same strategy 3 times; same error hash 3 times)" in shown
    status = devs("status").stdout
    assert "stuck" in status
    assert "1.00" in status
    history = devs("history", "t").stdout.splitlines()
    assert "stuck=0.50 (same strategy 2 times; same error hash 2 times)" in history[4]
    as_json = devs.json("task", "show", "t")
    assert as_json["stuck"]["score"] == 1.0


def test_what_if_and_replay_check(devs: Devs) -> None:
    _loop(devs)
    devs("attempt", "t", "retry the download")
    devs("gate", "run", "t", "--", "false", code=ESCALATED)
    out = devs("what-if", "--escalation-threshold", "2").stdout
    assert "what if: escalate at 2, hand off at 5" in out
    assert "1 task(s), 8 event(s) re-decided; 1 would have gone otherwise" in out
    assert (
        "escalations after GateFailed at versions 5, 7 instead of Escalated at "
        "version 8"
    ) in out
    report = devs.json("what-if", "--handoff-threshold", "3", "--task", "t")
    assert report["what_if"]["handoffs"] == 1
    assert report["recorded"]["handoffs"] == 0
    assert devs("replay-check").stdout.startswith("ok: 1 task(s), 8 event(s)")
    assert devs.json("replay-check")["ok"] is True
    bad = devs("what-if", "--entropy-threshold", "nan", code=BAD_INPUT)
    assert_one_line_error(bad, "--entropy-threshold")
    bad = devs("what-if", "--escalation-threshold", "0", code=BAD_INPUT)
    assert_one_line_error(bad, "--escalation-threshold: Input should be greater")


def test_what_if_names_the_events_history_shows(devs: Devs) -> None:
    """Each version ``devs what-if`` names is named with the event ``devs
    history`` shows at it: a recorded escalation by its ``Escalated`` (one
    version after the ``GateFailed`` it answered), a what-if one by the
    ``GateFailed`` it would have followed."""
    _loop(devs)
    devs("attempt", "t", "retry the download")
    devs("gate", "run", "t", "--", "false", code=ESCALATED)
    shown: dict[int, str] = {}
    for line in devs("history", "t").stdout.splitlines():
        version, _, _, event = line.split()[:4]
        shown[int(version.removeprefix("v"))] = event
    assert shown[7] == "GateFailed"
    assert shown[8] == "Escalated"
    named: list[tuple[str, int]] = []
    for policy in (("--escalation-threshold", "2"), ("--escalation-threshold", "4")):
        out = devs("what-if", *policy).stdout
        changes = [line for line in out.splitlines() if line.startswith("  - ")]
        assert changes, out
        for change in changes:
            for event, versions in re.findall(
                r"(\w+) at versions? (\d+(?:, \d+)*)", change
            ):
                named += [(event, int(v)) for v in versions.split(", ")]
    assert ("Escalated", 8) in named
    assert ("GateFailed", 5) in named
    assert [(e, v) for e, v in named if shown.get(v) != e] == []


def test_replay_check_over_the_fixture_of_this_release(tmp_path: Path) -> None:
    db = tmp_path / "fixture.sqlite"
    shutil.copy(FIXTURES / "replay-check.sqlite", db)
    out = Devs(db, tmp_path)("replay-check").stdout
    assert out.strip() == (
        "ok: 7 task(s), 74 event(s): today's code takes every recorded decision"
    )


def test_replay_check_exits_1_when_a_decision_differs(tmp_path: Path) -> None:
    db = tmp_path / "fixture.sqlite"
    shutil.copy(FIXTURES / "replay-check.sqlite", db)
    # Rewrite a recorded policy: the recorded escalations no longer follow.
    with sqlite3.connect(db) as connection:
        [(state,)] = connection.execute(
            "SELECT state FROM stored_events WHERE originator_id = 'task:build' "
            "AND originator_version = 1"
        ).fetchall()
        edited = state.replace(b'"escalation_threshold":3', b'"escalation_threshold":9')
        connection.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = 'task:build' "
            "AND originator_version = 1",
            (edited,),
        )
    devs = Devs(db, tmp_path)
    result = devs("replay-check", code=RETRY)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("2 decision(s) differ")
    assert lines[1].startswith("- task build version ")
    assert (
        "recorded GateFailed(3) -> Escalated(max_retries); today GateFailed(3)"
        in (lines[1])
    )
    verified = devs("verify", code=RETRY).stdout
    assert "task 'build': version 1 does not match the hash recorded at version 2" in (
        verified
    )
    assert "hash chains: 6 intact, 0 unchained" in verified


def test_verify_shows_the_chains(devs: Devs) -> None:
    _loop(devs)
    out = devs("verify").stdout
    assert "hash chains: 1 intact, 0 unchained (written before the chain existed)" in (
        out
    )
    assert devs.json("verify")["chains"] == {"intact": 1, "unchained": 0, "broken": 0}


def test_export_and_verify_export(devs: Devs, tmp_path: Path) -> None:
    _loop(devs)
    out = tmp_path / "audit.jsonl"
    written = devs("export", "--output", str(out)).stdout
    assert written.startswith("exported 1 task(s), 5 event(s) to ")
    assert "  t: 5 events, head " in written
    again = devs("export", "--output", str(out), code=BAD_INPUT)
    assert_one_line_error(again, "exists")
    ok = devs("verify-export", str(out)).stdout
    assert (
        ok.strip()
        == "ok: 1 task(s): 1 intact, 0 unchained (written before the chain existed)"
    )
    lines = out.read_bytes().splitlines()
    gate = orjson.loads(lines[3])
    assert gate["event"]["failure"]["exit_code"] == 1
    assert gate["actor"] is None
    gate["event"]["failure"]["exit_code"] = 0
    lines[3] = orjson.dumps(gate)
    out.write_bytes(b"\n".join(lines) + b"\n")
    broken = devs("verify-export", str(out), code=RETRY).stdout
    assert broken.strip() == (
        "broken: line 4: task 't' version 3 does not match its recorded hash "
        "(the event was edited)"
    )
    report = devs.json("verify-export", str(out), code=RETRY)
    assert report["ok"] is False


def test_export_lists_tasks_in_task_id_order(devs: Devs, tmp_path: Path) -> None:
    """Started z, a, m: exported (and listed) a, m, z, the file as printed."""
    for task_id in ("z", "a", "m"):
        devs("task", "start", task_id)
    out = tmp_path / "audit.jsonl"
    printed = devs("export", "--output", str(out)).stdout.splitlines()
    assert [line.split(":")[0].strip() for line in printed[1:]] == ["a", "m", "z"]
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [line["task_id"] for line in lines[1:-1]] == ["a", "m", "z"]
    assert list(lines[-1]["tasks"]) == ["a", "m", "z"]


def test_an_old_database_exports_unchained(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    shutil.copy(FIXTURES / "v0.1.0.sqlite", db)
    devs = Devs(db, tmp_path)
    out = tmp_path / "old.jsonl"
    devs("export", "n00", "n01", "--output", str(out))
    assert devs("verify-export", str(out)).stdout.strip() == (
        "ok: 2 task(s): 0 intact, 2 unchained (written before the chain existed)"
    )
    with open_service(Settings(db=str(db))) as old:
        assert old.audit("n00").chain.state == "unchained"


def test_export_of_an_unknown_task_writes_no_file(devs: Devs, tmp_path: Path) -> None:
    _loop(devs)
    out = tmp_path / "audit.jsonl"
    result = devs("export", "nope", "--output", str(out), code=7)
    assert_one_line_error(result, "unknown task 'nope'")
    assert not out.exists()
    assert not list(tmp_path.glob("*.partial"))
