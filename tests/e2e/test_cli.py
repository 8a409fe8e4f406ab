"""The installed ``devs`` command, run as a user runs it: a process per call.

``Devs`` forks each command from a process that has already imported the CLI
(``tests/devs_process.py``: its own pid, streams, environment, working
directory and exit status, without the 0.35 s import); the tests that are
about the process's start run ``devs`` with ``subprocess`` themselves."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devs.adapters.sandbox import WEAKER_ISOLATION, sandbox_unavailable
from devs.domain import UnknownRun, UnknownTask
from tests import devs_process
from tests.helpers import event_count, require_bwrap

DEVS = str(Path(sys.executable).with_name("devs"))
PY = sys.executable
SECRET = "sk-live-" + "abcdefghij" + "klmnop1234"  # never written whole in a command
LEAK = (
    "import sys; key = 'sk-live-' + 'abcdefghij' + 'klmnop1234';"
    " print('Authorization: Bearer', key); print('password=', 'hun' + 'ter2', sep='');"
    " sys.exit(1)"
)

# Exit codes, as docs/cli.md documents them.
OK, RETRY, USAGE, ESCALATED, PAUSED, HANDED_OFF, BAD_INPUT, NOT_FOUND, REFUSED = range(
    9
)
STORE, CONFLICT = 9, 10


class Devs:
    def __init__(self, db: Path, cwd: Path) -> None:
        self.db = db
        self.cwd = cwd

    def __call__(
        self, *args: str, code: int = OK, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = devs_process.run(
            [DEVS, "--db", str(self.db), *args],
            timeout=60,
            cwd=self.cwd,
            env={**os.environ, **(env or {})},
        )
        assert result.returncode == code, (
            result.returncode,
            result.stdout,
            result.stderr,
        )
        return result

    def json(
        self, *args: str, code: int = OK, env: dict[str, str] | None = None
    ) -> Any:
        """Run with ``--json`` (before any ``--``) and parse what it printed."""
        split = args.index("--") if "--" in args else len(args)
        with_json = (*args[:split], "--json", *args[split:])
        return json.loads(self(*with_json, code=code, env=env).stdout)


@pytest.fixture
def devs(tmp_path: Path) -> Devs:
    # The store apart from the folder the commands (and so the gates) run in:
    # a gate never runs in the store's folder unless asked.
    (tmp_path / "store").mkdir()
    return Devs(tmp_path / "store" / "state.sqlite", tmp_path)


def assert_one_line_error(result: subprocess.CompletedProcess[str], text: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("devs: error: ")
    assert text in lines[0]
    assert result.stdout == ""


def gate_notice() -> str:
    """What each ``devs gate run`` writes to stderr here: nothing under bwrap;
    where bwrap cannot sandbox, its one-line fallback notice, except in CI
    (``$CI`` set; CI installs bwrap), where the test fails, as ``require_bwrap``
    does."""
    why = sandbox_unavailable()
    if why is None:
        return ""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the sandboxed gate tests, but {why}")
    return f"devs: warning: {why}; the gate runs with {WEAKER_ISOLATION}\n"


def test_the_whole_ladder_through_real_gates(devs: Devs, tmp_path: Path) -> None:
    notice = gate_notice()  # bwrap is not what this test is about
    dag = tmp_path / "dag.json"
    dag.write_text(json.dumps({"t1": [], "t2": ["t1"]}))
    devs("run", "start", "r1", "--dag", str(dag))
    devs(
        "task", "start", "t1", "--run", "r1", "--agent", "coder", "--commit", "abc1234"
    )

    devs("attempt", "t1", "first idea")
    failed = devs("gate", "run", "t1", "--", "false", code=RETRY)
    assert "t1: tests failed (NON_ZERO_EXIT, exit code 1)" in failed.stdout
    devs("gate", "run", "t1", "--gate", "lint", "--", "false", code=RETRY)

    escalated = devs("gate", "run", "t1", "--", "false", code=ESCALATED)
    lines = escalated.stdout.splitlines()
    start = lines.index("⚠ ENTROPY PAUSE — Max retry threshold reached")
    block = lines[start:]
    assert block[1:3] == ["Task: t1", "Failures: 3"]
    assert block[3] == "Failed strategies:"
    assert "  - first idea" in block
    assert any(line.startswith("Last error: exited with code 1") for line in block)
    assert (
        block[-1] == "Run `devs rewind t1` to revert or `devs skip` to skip this task."
    )
    assert escalated.stderr == notice  # the block goes to stdout only
    assert devs.json("run", "show", "r1")["status"] == "PAUSED"

    devs("resume", "t1", "--reason", "try again", "--actor", "alice")
    killed = devs.json(
        "gate", "run", "t1", "--timeout", "0.3", "--", "sleep", "5", code=ESCALATED
    )
    assert killed["run"]["exit_code"] is None
    assert killed["run"]["timed_out"] is True
    assert killed["decision"]["reason"] == "PROCESS_KILLED"
    assert killed["decision"]["consecutive_failures"] == 4

    devs("resume", "t1", "--reason", "last try", "--actor", "alice")
    handed = devs("gate", "run", "t1", "--", PY, "-c", LEAK, code=HANDED_OFF)
    assert "✋ HAND-OFF" in handed.stdout
    assert (
        "Run `devs claim t1`, then `devs resolve t1 --resolution return|complete|skip`."
        in (handed.stdout)
    )
    [entry] = devs.json("handoffs")
    assert entry["payload"]["failure_count"] == 5
    assert len(entry["payload"]["last_error_hash"]) == 64

    devs("claim", "t1", "--actor", "bob")
    devs(
        "resolve",
        "t1",
        "--as",
        "complete",
        "--reason",
        "fixed by hand",
        "--actor",
        "bob",
    )
    state = devs.json("run", "show", "r1")
    assert state["status"] == "RUNNING"
    assert state["ready"] == ["t2"]
    devs("task", "start", "t2", "--run", "r1")
    passed = devs("gate", "run", "t2", "--", "true")
    assert "t2: tests passed; task complete" in passed.stdout
    assert devs.json("run", "show", "r1")["status"] == "COMPLETED"


def test_a_leaked_secret_is_stored_and_printed_nowhere(devs: Devs) -> None:
    devs("task", "start", "t1")
    outputs = [
        devs("gate", "run", "t1", "--", PY, "-c", LEAK, code=RETRY),
        devs("gate", "run", "t1", "--json", "--", PY, "-c", LEAK, code=RETRY),
        devs("-v", "gate", "run", "t1", "--", PY, "-c", LEAK, code=ESCALATED),
        devs("task", "show", "t1"),
        devs("task", "show", "t1", "--json"),
        devs("history", "t1", "--json"),
        devs("gate", "status", "t1", "--json"),
    ]
    recorded = json.loads(outputs[1].stdout)
    assert recorded["decision"]["error_hash"] == recorded["run"]["output_hash"]
    for result in outputs:
        assert SECRET not in result.stdout + result.stderr
        assert "hunter2" not in result.stdout + result.stderr
    raw = b"".join(p.read_bytes() for p in devs.db.parent.glob("state.sqlite*"))
    assert SECRET.encode() not in raw
    assert b"hunter2" not in raw
    with sqlite3.connect(devs.db) as connection:
        states = [
            row[0] for row in connection.execute("SELECT state FROM stored_events")
        ]
    assert all(SECRET.encode() not in state for state in states)


def test_json_outputs_parse(devs: Devs) -> None:
    devs("task", "start", "t1", "--agent", "coder")
    assert devs.json("task", "show", "t1")["status"] == "running"
    attempt = devs.json("attempt", "t1", "use a regex")
    assert attempt["proceed"] is True
    assert attempt["directive"] == ""
    lesson = devs.json("lesson", "t1", "use a regex", "regex cannot nest")
    assert lesson["failed_strategy"] == "use a regex"
    assert devs.json("lessons", "t1")[0]["rca_summary"] == "regex cannot nest"
    blocked = devs.json("attempt", "t1", "use a regex!", code=PAUSED)
    assert blocked["blacklisted"] is True
    assert blocked["matched_strategy"] == "use a regex"
    [session] = devs.json("sessions")
    assert session["reason"] == "blacklisted_strategy"
    status = devs.json("gate", "status", "t1")
    assert status["triggered"] is True
    assert status["session_id"] == session["session_id"]
    [task] = devs.json("status")
    assert task["state"] == "PAUSED"
    history = devs.json("history", "t1")
    assert [h["event"] for h in history][-2:] == [
        "BlacklistedStrategyAttempted",
        "Paused",
    ]
    at = devs.json("history", "t1", "--at", "2")
    assert at["state"]["state"] == "RUNNING"
    assert len(at["history"]) == 2
    page = devs.json("history", "t1", "--after", "1", "--limit", "2")
    assert page == history[1:3]
    assert devs.json("history", "t1", "--after", str(len(history))) == []
    lines = devs("history", "t1", "--after", "2", "--limit", "1").stdout.splitlines()
    assert len(lines) == 1
    assert devs.json("handoffs") == []
    resumed = devs.json("resume", "t1")
    assert resumed["actor"]
    assert resumed["reason"] == "(no reason given)"
    below = devs.json("entropy", "t1", "0.2")
    assert below["triggered"] is False
    above = devs.json("entropy", "t1", "0.9", code=PAUSED)
    assert above["triggered"] is True


def test_human_readable_blocks(devs: Devs) -> None:
    devs("task", "start", "t1")
    devs("lesson", "t1", "use a regex", "regex cannot nest")
    blocked = devs("attempt", "t1", "use a regex", code=PAUSED)
    assert "⛔ BLACKLISTED STRATEGY" in blocked.stdout
    assert "Matches the lesson: use a regex" in blocked.stdout
    devs("resume", "t1")
    paused = devs("entropy", "t1", "0.8", code=PAUSED)
    assert paused.stdout.startswith("⏸ ENTROPY PAUSE — Agent entropy limit reached")
    assert "Entropy: 0.8 (threshold 0.75)" in paused.stdout
    again = devs("entropy", "t1", "0.95", code=PAUSED)
    assert again.stdout == paused.stdout.replace("0.8 (", "0.95 (")


@pytest.mark.parametrize(
    "args",
    [
        ("task", "show", "ghost"),
        ("attempt", "ghost", "s"),
        ("entropy", "ghost", "0.5"),
        ("gate", "run", "ghost", "--", "true"),
        ("gate", "status", "ghost"),
        ("lessons", "ghost"),
        ("history", "ghost"),
        ("resume", "ghost"),
        ("run", "show", "nope"),
        ("status", "--run", "nope"),
    ],
)
def test_unknown_ids(devs: Devs, args: tuple[str, ...]) -> None:
    devs("task", "start", "t1")
    before = event_count(devs.db)
    result = devs(*args, code=NOT_FOUND)
    assert_one_line_error(result, "unknown")
    assert event_count(devs.db) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("history", "ghost"),
            "unknown task 'ghost': start it with `devs task start ghost` first",
        ),
        (
            ("gate", "run", "ghost", "--", "true"),
            "unknown task 'ghost': start it with `devs task start ghost` first",
        ),
        (
            ("attempt", "a ghost", "s"),
            "unknown task 'a ghost': start it with `devs task start 'a ghost'` first",
        ),
        (
            ("run", "show", "nope"),
            "unknown run 'nope': start it with `devs run start nope --dag FILE` first",
        ),
        (
            ("task", "start", "t2", "--run", "nope"),
            "unknown run 'nope': start it with `devs run start nope --dag FILE` first",
        ),
        (
            ("status", "--run", "nope"),
            "unknown run 'nope': start it with `devs run start nope --dag FILE` first",
        ),
    ],
)
def test_unknown_ids_name_the_command_that_starts_them(
    devs: Devs, args: tuple[str, ...], message: str
) -> None:
    devs("task", "start", "t1")
    result = devs(*args, code=NOT_FOUND)
    assert result.stderr.splitlines() == [f"devs: error: {message}"]
    assert result.stdout == ""


def test_the_python_api_keeps_its_own_words_for_unknown_ids() -> None:
    assert str(UnknownTask("x")) == "unknown task 'x': start it with start_task() first"
    assert str(UnknownRun("r")) == "unknown run 'r': start it with start_run() first"


def test_a_gate_that_prints_one_huge_line_is_recorded_with_its_error_cut(
    devs: Devs,
) -> None:
    """One 200,000-character line: the gate's error is how it ended and its
    error line (the one rule, cut to 300 characters); its output keeps its
    head and its tail, saying what was cut; the failed gate is recorded."""
    huge = "print('x' * 200_000); raise SystemExit(1)"
    devs("task", "start", "t1")
    ran = devs.json("gate", "run", "t1", "--", PY, "-c", huge, code=RETRY)
    decision = ran["decision"]
    assert (decision["reason"], decision["consecutive_failures"]) == (
        "NON_ZERO_EXIT",
        1,
    )
    assert decision["error_hash"] == ran["run"]["output_hash"]
    [*_, entry] = devs.json("history", "t1")
    assert entry["event"] == "GateFailed"
    failure = entry["changes"]["failure"]
    assert failure["error_message"] == "exited with code 1: " + "x" * 299 + "…"
    assert failure["error_line"].startswith("exited with code 1: xxx")
    assert len(failure["error_line"]) == 300
    excerpt = failure["output_excerpt"]
    assert len(excerpt) == 4_000
    assert excerpt.startswith("x" * 1_000 + "\n[… ")
    assert " characters cut …]\nxxx" in excerpt
    shown = devs.json("task", "show", "t1")["failure_history"][-1]
    assert shown["error_message"] == failure["error_message"]
    # The plain forms print it too, and the human-readable run says retry.
    again = devs("gate", "run", "t1", "--", PY, "-c", huge, code=RETRY)
    assert "t1: tests failed (NON_ZERO_EXIT, exit code 1)" in again.stdout
    assert "exited with code 1: xxxx" in devs("task", "show", "t1").stdout


def test_a_gate_that_prints_nul_characters_is_recorded(devs: Devs) -> None:
    devs("task", "start", "t1")
    nul = "print('before\\0after'); raise SystemExit(1)"
    ran = devs.json("gate", "run", "t1", "--", PY, "-c", nul, code=RETRY)
    assert ran["decision"]["consecutive_failures"] == 1
    last = devs.json("task", "show", "t1")["failure_history"][-1]
    assert last["output_excerpt"] == "before\ufffdafter\n"
    assert last["error_message"] == "exited with code 1: before\ufffdafter"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("entropy", "t1", "abc"), "score must be a number in [0, 1], got 'abc'"),
        (("entropy", "t1", "1.5"), "score 1.5 is out of range [0, 1]"),
        (("entropy", "t1", "nan"), "score must be a finite number"),
        (("attempt", "t1", ""), "strategy must not be empty"),
        (("lesson", "t1", "s", ""), "rca_summary must not be empty"),
        (
            ("gate", "run", "t1", "--timeout", "0", "--", "true"),
            "timeout 0.0 is out of range",
        ),
        (("gate", "run", "t1", "--", "no-such-command-xyz"), "command not found"),
        (("task", "start", "bad\nid"), "task_id must not contain control characters"),
    ],
)
def test_bad_input(devs: Devs, args: tuple[str, ...], message: str) -> None:
    devs("task", "start", "t1")
    before = event_count(devs.db)
    result = devs(*args, code=BAD_INPUT)
    assert_one_line_error(result, message)
    assert event_count(devs.db) == before


def test_illegal_transitions_are_refused(devs: Devs) -> None:
    devs("task", "start", "t1")
    before = event_count(devs.db)
    assert_one_line_error(
        devs("resume", "t1", code=REFUSED), "cannot resume a task in state RUNNING"
    )
    assert_one_line_error(devs("claim", "t1", code=REFUSED), "cannot claim")
    assert_one_line_error(
        devs("task", "start", "t1", code=REFUSED), "task 't1' was already started"
    )
    assert event_count(devs.db) == before
    devs("gate", "run", "t1", "--", "true")
    marker = devs.cwd / "ran"
    refused = devs("gate", "run", "t1", "--", "touch", str(marker), code=REFUSED)
    assert_one_line_error(refused, "state COMPLETED")
    assert not marker.exists()  # refused before the command ran


def test_malformed_dag_file(devs: Devs, tmp_path: Path) -> None:
    bad = tmp_path / "dag.json"
    bad.write_text("{not json")
    assert_one_line_error(
        devs("run", "start", "r1", "--dag", str(bad), code=BAD_INPUT),
        "is not valid JSON",
    )
    bad.write_text(json.dumps({"a": ["b"], "b": ["a"]}))
    assert_one_line_error(
        devs("run", "start", "r1", "--dag", str(bad), code=BAD_INPUT), "cycle"
    )
    assert not devs.db.exists() or event_count(devs.db) == 0


def test_unopenable_database(tmp_path: Path) -> None:
    result = subprocess.run(
        [DEVS, "--db", str(tmp_path / "missing" / "dir" / "x.sqlite"), "status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == STORE
    assert_one_line_error(result, "cannot open the database")


@pytest.mark.parametrize(
    "content", [b"\x00garbage" * 500, b"SQLite format 3\x00truncated"]
)
def test_a_damaged_database_is_one_line_and_exit_9(
    tmp_path: Path, content: bytes
) -> None:
    db = tmp_path / "damaged.sqlite"
    db.write_bytes(content)
    for args in (["status"], ["task", "start", "t1"]):
        result = subprocess.run(
            [DEVS, "--db", str(db), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == STORE
        assert_one_line_error(result, "damaged or not a devs-recovery database")
    assert db.read_bytes() == content  # nothing written


def test_verify_exits_0_when_ok_and_1_with_problems(devs: Devs) -> None:
    devs("task", "start", "t1")
    devs("lesson", "t1", "patch the regex", "it cannot nest")
    # The command that recorded the lesson folded it (docs/read-models.md):
    # nothing is behind, though no query has read it yet.
    ok = devs("verify")
    assert ok.stdout.startswith("ok: 9 read models match the log up to position 2")
    with sqlite3.connect(devs.db) as connection:
        connection.execute("DELETE FROM lessons_learned")
    found = devs("verify", code=RETRY)
    lines = found.stdout.splitlines()
    assert lines[0] == "1 problem(s), log up to position 2:"
    assert lines[1].startswith(
        "- read model 'lessons_learned', table lessons_learned: 1 row(s) of the log "
        "missing"
    )
    report = devs.json("verify", code=RETRY)
    assert report["ok"] is False
    assert len(report["problems"]) == 1
    devs("projections", "rebuild")
    assert devs.json("verify")["ok"] is True


def test_usage_errors(devs: Devs) -> None:
    assert devs("attempt", "t1", code=USAGE).stderr
    assert devs("resolve", "t1", "--as", "later", code=USAGE).stderr
    assert devs("gate", "run", "t1", code=USAGE).stderr


def test_skip_without_a_task_skips_the_one_waiting(devs: Devs, tmp_path: Path) -> None:
    assert_one_line_error(devs("skip", code=NOT_FOUND), "no task is waiting")
    dag = tmp_path / "dag.json"
    dag.write_text(json.dumps({"a": [], "b": ["a"]}))
    devs("run", "start", "r1", "--dag", str(dag))
    devs("task", "start", "a", "--run", "r1")
    devs("entropy", "a", "0.9", code=PAUSED)
    skipped = devs("skip", "--reason", "not needed")
    assert "a: skipped by" in skipped.stdout
    assert "next node b" in skipped.stdout
    devs("task", "start", "b", "--run", "r1")
    devs("task", "start", "c")
    devs("entropy", "b", "0.9", code=PAUSED)
    devs("entropy", "c", "0.9", code=PAUSED)
    assert "several tasks wait" in devs("skip", code=USAGE).stderr


def test_rewind_prints_the_commit(devs: Devs) -> None:
    devs("task", "start", "t1", "--commit", "abc1234")
    assert "revert to abc1234" in devs("rewind", "t1").stdout
    assert "revert to ffff000" in devs("rewind", "t1", "--to-commit", "ffff000").stdout


def test_environment_is_scrubbed_for_gates(devs: Devs) -> None:
    devs("task", "start", "t1")
    code = "import os; print('value:', os.environ.get('DEPLOY_TOKEN')); exit(1)"
    env = {"DEPLOY_TOKEN": "xyz"}
    scrubbed = devs.json("gate", "run", "t1", "--", PY, "-c", code, env=env, code=RETRY)
    assert "DEPLOY_TOKEN" in scrubbed["run"]["scrubbed_env"]
    last = devs.json("task", "show", "t1")["failure_history"][-1]
    assert last["output_excerpt"].strip() == "value: None"
    devs.json(
        "gate",
        "run",
        "t1",
        "--pass-env",
        "DEPLOY_TOKEN",
        "--",
        PY,
        "-c",
        code,
        env=env,
        code=RETRY,
    )
    last = devs.json("task", "show", "t1")["failure_history"][-1]
    assert last["output_excerpt"].strip() == "value: xyz"


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A directory that is neither under /tmp nor the home directory."""
    base = Path(tempfile.mkdtemp(prefix="devs-cli-test-", dir="/var/tmp")).resolve()
    yield base
    shutil.rmtree(base)


def test_gates_run_sandboxed(devs: Devs, outside_tmp: Path) -> None:
    require_bwrap()
    home = outside_tmp / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("aws_secret_access_key = k\n")
    env = {"HOME": str(home)}
    devs("task", "start", "t1")
    # Exit 0 only if the command could read the file.
    read = f"print(open({str(home / '.aws' / 'credentials')!r}).read())"
    blocked = devs.json("gate", "run", "t1", "--", PY, "-c", read, env=env, code=RETRY)
    assert blocked["run"]["isolation"] == "bwrap"
    last = devs.json("task", "show", "t1")["failure_history"][-1]
    assert "FileNotFoundError" in last["output_excerpt"]
    devs(
        "gate",
        "run",
        "t1",
        "--allow-path",
        str(home / ".aws"),
        "--",
        PY,
        "-c",
        read,
        env=env,
    )

    devs("task", "start", "t2")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        connect = f"import socket; socket.create_connection(('127.0.0.1', {port}))"
        devs("gate", "run", "t2", "--", PY, "-c", connect, code=RETRY)
        devs("gate", "run", "t2", "--network", "--", PY, "-c", connect)
        listener.accept()[0].close()


def test_a_gate_cannot_touch_the_database(devs: Devs) -> None:
    require_bwrap()
    devs("task", "start", "t1")
    before = event_count(devs.db)
    forge = f"open({str(devs.db)!r}, 'ab').write(b'forged')"
    devs("gate", "run", "t1", "--", PY, "-c", forge, code=RETRY)
    last = devs.json("task", "show", "t1")["failure_history"][-1]
    assert "Read-only file system" in last["output_excerpt"]
    assert event_count(devs.db) == before + 1  # the gate's own event, nothing else


def test_without_bwrap_gates_fall_back_or_refuse(devs: Devs) -> None:
    no_bwrap = {"PATH": str(devs.cwd / "empty-path")}  # PY and DEVS are absolute
    devs("task", "start", "t1")
    before = event_count(devs.db)
    marker = devs.cwd / "ran"
    touch = f"open({str(marker)!r}, 'w').close()"
    refused = devs(
        "gate",
        "run",
        "t1",
        "--require-isolation",
        "--",
        PY,
        "-c",
        touch,
        env=no_bwrap,
        code=REFUSED,
    )
    assert_one_line_error(
        refused, "gate isolation is required, but bwrap is not installed"
    )
    assert not marker.exists()
    assert event_count(devs.db) == before

    ran = devs("gate", "run", "t1", "--", PY, "-c", touch, env=no_bwrap)
    assert marker.exists()
    assert ran.stderr.splitlines() == [
        "devs: warning: bwrap is not installed (not on PATH); the gate runs with "
        "a process group, rlimits and a scrubbed environment only (no file-system "
        "or network isolation)"
    ]
    assert event_count(devs.db) == before + 1


def test_database_from_option_env_or_default(tmp_path: Path) -> None:
    base_env = {k: v for k, v in os.environ.items() if k != "DEVS_DB"}

    def run(*args: str, extra: dict[str, str] | None = None) -> None:
        subprocess.run(
            [DEVS, *args],
            cwd=tmp_path,
            env={**base_env, **(extra or {})},
            check=True,
            capture_output=True,
            timeout=60,
        )

    run("task", "start", "a")
    assert (tmp_path / "devs_state.sqlite").exists()
    run("task", "start", "b", extra={"DEVS_DB": str(tmp_path / "env.sqlite")})
    assert (tmp_path / "env.sqlite").exists()
    run("--db", str(tmp_path / "opt.sqlite"), "task", "start", "c")
    assert (tmp_path / "opt.sqlite").exists()


def test_status_table_and_diagram(devs: Devs) -> None:
    devs("task", "start", "t1")
    devs("gate", "run", "t1", "--", "false", code=RETRY)
    table = devs("status").stdout
    assert "GATE_FAILED" in table
    assert "t1" in table
    diagram = devs("diagram").stdout
    assert "stateDiagram-v2" in diagram
    assert "RUNNING --> GATE_FAILED: fail_gate" in diagram


def test_projections_rebuild(devs: Devs) -> None:
    devs("task", "start", "t1")
    devs("lesson", "t1", "s", "r")
    before = devs.json("lessons", "t1")
    result = devs("projections", "rebuild")
    assert result.stdout.startswith("rebuilt all projections up to position ")
    assert devs.json("lessons", "t1") == before
    assert (
        "rebuilt lessons_learned"
        in devs("projections", "rebuild", "lessons_learned").stdout
    )
    assert_one_line_error(
        devs("projections", "rebuild", "nope", code=BAD_INPUT), "unknown projection"
    )


def test_demo_walks_the_whole_ladder(tmp_path: Path) -> None:
    result = subprocess.run(
        [DEVS, "demo", "--db", str(tmp_path / "demo.sqlite")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = result.stdout
    for expected in (
        "[exit 1: RETRY]",
        "⛔ BLACKLISTED STRATEGY",
        "[exit 4: PAUSED]",
        "⏸ ENTROPY PAUSE — Agent entropy limit reached",
        "⚠ ENTROPY PAUSE — Max retry threshold reached",
        "Run `devs rewind build` to revert or `devs skip` to skip this task.",
        "[exit 3: ESCALATED]",
        "killed after the 0.5s timeout",
        "✋ HAND-OFF",
        "[exit 5: HANDED_OFF]",
        "ship: tests passed; task complete",
    ):
        assert expected in out
    assert SECRET not in out + result.stderr
    refused = subprocess.run(
        [DEVS, "demo", "--db", str(tmp_path / "demo.sqlite")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == BAD_INPUT


def test_a_blocked_attempt_that_climbs_the_ladder_prints_both_blocks(
    devs: Devs,
) -> None:
    env = {"DEVS_ESCALATION_THRESHOLD": "2", "DEVS_HANDOFF_THRESHOLD": "3"}
    devs("task", "start", "t1", env=env)
    devs("gate", "run", "t1", "--", "false", code=RETRY)
    devs("lesson", "t1", "use a regex", "regex cannot nest")
    escalated = devs("attempt", "t1", "use a regex", code=ESCALATED).stdout
    assert escalated.index("⛔ BLACKLISTED STRATEGY") < escalated.index(
        "⚠ ENTROPY PAUSE — Max retry threshold reached"
    )
    devs("resume", "t1")
    handed = devs("attempt", "t1", "use a regex", code=HANDED_OFF).stdout
    assert handed.index("⛔ BLACKLISTED STRATEGY") < handed.index("✋ HAND-OFF")
    assert "Failures: 3" in handed


def test_the_cli_on_postgresql(devs: Devs, pg_url: str) -> None:
    """DEVS_DATABASE_URL puts every command on PostgreSQL; no SQLite file."""
    env = {"DEVS_DATABASE_URL": pg_url}
    devs("task", "start", "t1", env=env)
    devs("gate", "run", "t1", "--", "false", code=RETRY, env=env)
    status = devs.json("task", "show", "t1", env=env)
    assert status["consecutive_failures"] == 1
    assert not devs.db.exists()
    refused = devs(
        "task", "show", "t1", code=6, env={"DEVS_DATABASE_URL": "mysql://u:pw@h/d"}
    )
    assert_one_line_error(refused, "DEVS_DATABASE_URL must start with postgresql://")
    assert "pw" not in refused.stderr


def test_devs_project_keeps_the_read_models_for_external_processes(
    devs: Devs, pg_url: str
) -> None:
    """Commands run with DEVS_PROJECTIONS=external fold nothing themselves; a
    `devs project` worker folds for them, and stops cleanly on SIGTERM."""
    env = {"DEVS_DATABASE_URL": pg_url, "DEVS_PROJECTIONS": "external"}
    worker = subprocess.Popen(
        [DEVS, "project", "--check-every", "0.1"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        devs("task", "start", "t1", env=env)
        devs("gate", "run", "t1", "--", "false", code=RETRY, env=env)
        devs("gate", "run", "t1", "--", "false", code=RETRY, env=env)
        # `status` reads a read model: it waits for the worker to fold (the
        # worker may still be starting on a loaded machine: a bound, not a
        # speed; under the 60 s a command is given, so a wait that runs out
        # says so, with what the worker said).
        waited = subprocess.run(
            [DEVS, "--db", str(devs.db), "status", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=devs.cwd,
            env={**os.environ, **env, "DEVS_READ_WAIT": "45"},
            check=False,
        )
        if waited.returncode != 0:
            worker.terminate()
            _, said = worker.communicate(timeout=30)
            pytest.fail(f"status: {waited.stderr!r}; the worker said: {said!r}")
        listed = json.loads(waited.stdout)
        assert [(row["task_id"], row["consecutive_failures"]) for row in listed] == [
            ("t1", 2)
        ]
    finally:
        if worker.returncode is None:
            worker.terminate()
    _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr
    assert "stopped at position" in stderr
    assert stderr.strip().splitlines()[-1].endswith(str(event_count_pg(pg_url)))


def test_devs_project_without_a_worker_the_reads_say_so(
    devs: Devs, pg_url: str
) -> None:
    env = {
        "DEVS_DATABASE_URL": pg_url,
        "DEVS_PROJECTIONS": "external",
        "DEVS_READ_WAIT": "0.2",
    }
    devs("task", "start", "t1", env=env)
    waited = devs("status", code=9, env=env)
    assert_one_line_error(waited, "is a `devs project` worker running?")


def test_devs_project_on_sqlite_is_refused(devs: Devs) -> None:
    refused = devs("project", code=8)
    assert_one_line_error(refused, "devs project keeps PostgreSQL read models")


def event_count_pg(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as connection:
        row = connection.execute(
            "SELECT max(notification_id) FROM recoveryservice_events"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_an_invalid_threshold_is_one_warning_on_stderr(devs: Devs) -> None:
    """It was a log record nobody saw: the task started with 3, silently."""
    started = devs(
        "task", "start", "t", "--json", env={"DEVS_ESCALATION_THRESHOLD": "abc"}
    )
    assert json.loads(started.stdout)["policy"]["escalation_threshold"] == 3
    lines = started.stderr.strip().splitlines()
    assert lines == [
        "devs: warning: ignoring DEVS_ESCALATION_THRESHOLD='abc' (Input should be "
        "a valid integer, unable to parse string as an integer); using the default 3"
    ]


def test_a_missing_directory_is_named(devs: Devs) -> None:
    result = subprocess.run(
        [DEVS, "--db", "missing-dir/x.sqlite", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=devs.cwd,
        check=False,
    )
    assert result.returncode == STORE, result.stderr
    assert_one_line_error(result, "the directory 'missing-dir' does not exist")
    assert not (devs.cwd / "missing-dir").exists()


def test_resolve_takes_resolution_as_python_and_http_name_it(devs: Devs) -> None:
    """``--resolution`` is the name the Python API and HTTP use; ``--as``
    still works."""
    for task_id, option in (("t1", "--resolution"), ("t2", "--as")):
        devs("task", "start", task_id, env={"DEVS_HANDOFF_THRESHOLD": "1"})
        devs("gate", "run", task_id, "--", "false", code=HANDED_OFF)
        devs("claim", task_id, "--actor", "bob")
        done = devs.json("resolve", task_id, option, "complete", "--actor", "bob")
        assert done["resolution"] == "complete"
        assert done["state"] == "COMPLETED"


def test_a_task_started_again_names_the_commands_that_go_on(devs: Devs) -> None:
    devs("task", "start", "t1")
    assert_one_line_error(
        devs("task", "start", "t1", code=REFUSED),
        "task 't1' was already started: record its attempts with "
        "`devs attempt t1 STRATEGY`, or show it with `devs task show t1`",
    )
