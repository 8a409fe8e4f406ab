"""Two people at the command line: ``--if-version`` and claims on any stop,
run as a user runs ``devs`` (a subprocess per call)."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_cli import (
    ESCALATED,
    OK,
    REFUSED,
    RETRY,
    Devs,
    assert_one_line_error,
    devs,
)
from tests.helpers import event_count

__all__ = ["devs"]  # the fixture, used by name


def escalate(devs: Devs) -> int:
    devs("task", "start", "t1", "--agent", "coder")
    for code in (RETRY, RETRY, ESCALATED):
        devs("gate", "run", "t1", "--", "false", code=code)
    version: int = devs.json("task", "show", "t1")["version"]
    return version


def test_show_says_the_version_to_answer(devs: Devs) -> None:
    version = escalate(devs)
    shown = devs("task", "show", "t1").stdout
    assert f"version: {version} (answer it with --if-version {version})" in shown
    assert "claimed by: nobody yet" in shown


def test_a_stale_answer_is_refused_and_writes_nothing(devs: Devs) -> None:
    version = escalate(devs)
    devs("resume", "t1", "--actor", "bob", "--reason", "env fixed")
    before = event_count(devs.db)
    refused = devs(
        "skip",
        "t1",
        "--actor",
        "alice",
        "--reason",
        "give up",
        "--if-version",
        str(version),
        code=REFUSED,
    )
    assert_one_line_error(refused, f"is at version {version + 1} (RUNNING)")
    assert event_count(devs.db) == before
    assert devs.json("task", "show", "t1")["state"] == "RUNNING"


def test_if_version_must_be_a_positive_integer(devs: Devs) -> None:
    escalate(devs)
    bad = devs("resume", "t1", "--actor", "a", "--if-version", "0", code=2)
    assert "--if-version" in bad.stderr


def test_claim_release_and_take_over(devs: Devs, tmp_path: Path) -> None:
    version = escalate(devs)
    claimed = devs(
        "claim", "t1", "--actor", "alice", "--if-version", str(version), code=OK
    )
    assert "t1: claimed by alice (ESCALATION)" in claimed.stdout
    before = event_count(devs.db)
    refused = devs("resume", "t1", "--actor", "bob", "--reason", "r", code=REFUSED)
    assert_one_line_error(refused, "is claimed by 'alice'")
    assert event_count(devs.db) == before
    taken = devs("take-over", "t1", "--actor", "bob", "--reason", "alice is off")
    assert "t1: taken over by bob from alice (ESCALATION)" in taken.stdout
    assert devs.json("sessions")[0]["claimed_by"] == "bob"
    released = devs.json("release", "t1", "--actor", "bob")
    assert released["action"] == "release"
    assert released["claimed_by"] is None
    devs("resume", "t1", "--actor", "alice", "--reason", "go on")
    assert devs.json("task", "show", "t1")["state"] == "RUNNING"
