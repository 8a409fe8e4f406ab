"""The ``devs`` command as shell users expect it, run as they run it (a
subprocess per call): whole values in a pipe, one-line usage errors, a JSON
error object with ``--json``, and shell completion of task ids."""

from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest

from devs.adapters.config import Settings, open_service
from tests.e2e.test_cli import (
    BAD_INPUT,
    DEVS,
    NOT_FOUND,
    OK,
    USAGE,
    Devs,
)
from tests.integration.test_console_outbox import dead_letter

LONG = "a-rather-long-task-id-" + "that-goes-on" * 8  # far past 80 columns
STRATEGY = "rewrite the parser " + "z" * 120
SECRET = "sk-live-" + "abcdefghij" + "klmnop1234"


@pytest.fixture
def devs(tmp_path: Path) -> Devs:
    return Devs(tmp_path / "state.sqlite", tmp_path)


def waiting_history(db: Path) -> None:
    """Task LONG of run r escalated (a session, a lesson); task h handed off."""
    with open_service(Settings(db=str(db))) as service:
        service.start_run("r", {LONG: []})
        service.start_task(LONG, run_id="r", agent="coder")
        service.log_lesson(LONG, "patch\tthe regex " + "x" * 120, "it cannot nest")
        for _ in range(3):
            service.record_gate(LONG, 1, strategy=STRATEGY, error="boom")
        service.start_task("h")
        for count in range(1, 6):
            service.record_gate("h", 1, error="a long error " + "y" * 100)
            if count in (3, 4):  # asked at 3 and 4; handed off at 5
                service.resume("h", actor="ann", reason="go on")


def rows(stdout: str) -> list[list[str]]:
    return [line.split("\t") for line in stdout.splitlines()]


# ------------------------------------------------ whole values in a pipe


@pytest.mark.parametrize(
    ("args", "header"),
    [
        (["status"], ["state", "task", "run", "failures", "stuck", "updated"]),
        (
            ["sessions"],
            [
                "session",
                "task",
                "reason",
                "opened",
                "failures",
                "entropy",
                "claimed by",
            ],
        ),
        (
            ["handoffs"],
            ["task", "failures", "last error", "agent", "last commit", "claimed by"],
        ),
        (["run", "show", "r"], ["node", "prerequisites", "progress"]),
        (["lessons", LONG], ["failed strategy", "root cause", "logged"]),
    ],
)
def test_a_pipe_gets_every_table_tab_separated_and_whole(
    devs: Devs, args: list[str], header: list[str]
) -> None:
    waiting_history(devs.db)
    printed = devs(*args).stdout
    table = rows(printed)
    if args[0] == "run":
        assert printed.splitlines()[0] == "run r: PAUSED"  # the lines above it
        table = [row for row in table if len(row) > 1]
    assert table[0] == header
    assert all(len(row) == len(header) for row in table), table
    assert "┃" not in printed
    assert "│" not in printed
    assert "…" not in printed  # nothing cut: not an id, not an error
    if args[0] == "handoffs":
        assert table[1][0] == "h"
        assert table[1][2].endswith("y" * 100)
    elif args[0] == "lessons":
        # A tab in a value is a space: the columns stay where they are.
        assert table[1][0] == "patch the regex " + "x" * 120
    else:
        assert LONG in [cell for row in table[1:] for cell in row]


def test_grep_finds_a_long_task_id_in_a_pipe(devs: Devs) -> None:
    """``devs status | grep ID``: the id is printed whole."""
    waiting_history(devs.db)
    shell = subprocess.run(
        f"{DEVS} --db {devs.db} status | grep -F -- {LONG}",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shell.returncode == OK, shell.stderr
    assert shell.stdout.split("\t")[:2] == ["ESCALATION", LONG]


def test_operators_and_the_outbox_in_a_pipe(devs: Devs) -> None:
    devs("operator", "add", "alice", "--actor", "root")
    operators = rows(devs("operator", "list").stdout)
    assert operators[0] == ["name", "added by", "added at", "rotated"]
    assert operators[1][:2] == ["alice", "root"]
    with open_service(Settings(db=str(devs.db))) as service:
        message_id = dead_letter(service, LONG)
    outbox = rows(devs("webhooks", "list").stdout)
    assert outbox[0] == [
        "endpoint",
        "state",
        "pending",
        "delivered",
        "dead",
        "last error",
    ]
    deliveries = outbox.index(
        ["message", "type", "task", "endpoint", "state", "tries", "next"]
    )
    assert outbox[deliveries + 1][0] == message_id
    assert outbox[deliveries + 1][2] == LONG


def test_metrics_in_a_pipe_are_two_tab_separated_tables(devs: Devs) -> None:
    waiting_history(devs.db)
    table = rows(devs("metrics").stdout)
    assert table[0] == ["figure", "value"]
    assert table[1] == ["tasks", "2"]
    assert ["failures", "strategy"] in table
    assert table[-1] == ["3", STRATEGY]


def on_terminal(db: Path, *args: str, columns: int = 80) -> str:
    """What ``devs --db DB ARGS`` prints to a terminal (a pty) of
    ``columns`` columns; it must exit 0."""
    main, child = pty.openpty()
    try:
        ran = subprocess.run(
            [DEVS, "--db", str(db), *args],
            stdout=child,
            stderr=subprocess.PIPE,
            env={**os.environ, "COLUMNS": str(columns)},
            timeout=60,
            check=False,
        )
        os.close(child)
        child = -1
        printed = b""
        while True:
            try:
                chunk = os.read(main, 65_536)
            except OSError:  # the pty is closed: all is read
                break
            if not chunk:
                break
            printed += chunk
    finally:
        os.close(main)
        if child != -1:
            os.close(child)
    assert ran.returncode == OK, ran.stderr
    return printed.decode().replace("\r\n", "\n")


def test_a_terminal_gets_a_drawn_table_with_the_ids_whole(devs: Devs) -> None:
    """On a terminal (a pty here) the table is drawn; the task id column is
    not cut on an 80-column screen, a long error is."""
    waiting_history(devs.db)
    text = on_terminal(devs.db, "status")
    assert "Tasks by state" in text
    assert "┃" in text
    assert LONG in text
    handoffs = on_terminal(devs.db, "handoffs")
    assert "Hand-off queue" in handoffs
    assert "y" * 100 not in handoffs


# ------------------------------------------------------- usage errors


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["status", "--bogus"], "no such option '--bogus' (see devs status --help)"),
        (["--bogus", "status"], "no such option '--bogus'. Did you mean '--verbose'?"),
        (
            ["task", "show"],
            "missing argument 'TASK_ID' (see devs task show --help)",
        ),
        (
            ["run", "start", "r", "--dag", "-", "--stop-scope", "all"],
            "invalid value for '--stop-scope': 'all' is not one of 'run', "
            "'descendants' (see devs run start --help)",
        ),
        (["nope"], "no such command 'nope' (see devs --help)"),
        (["status", "--limit", "x"], "invalid value for '--limit'"),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(
    devs: Devs, args: list[str], said: str
) -> None:
    result = devs(*args, code=USAGE)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"devs: error: {said}"), result.stderr
    assert "Usage:" not in result.stderr
    assert not devs.db.exists()  # nothing opened, nothing written


def test_a_usage_error_with_json_is_a_json_object_too(devs: Devs) -> None:
    result = devs("status", "--json", "--bogus", code=USAGE)
    assert json.loads(result.stdout) == {
        "error": {
            "kind": "usage",
            "message": "no such option '--bogus' (see devs status --help)",
            "exit_code": USAGE,
            "field": None,
        }
    }
    assert result.stderr.startswith("devs: error: no such option '--bogus'")
    # --json after `--` belongs to the gate's command, not to devs.
    after = devs("gate", "run", "t", "--timeout", "x", "--", "x", "--json", code=USAGE)
    assert after.stdout == ""


# ------------------------------------------------ JSON errors with --json


@pytest.mark.parametrize(
    ("args", "code", "kind", "field"),
    [
        (["task", "show", "nope"], NOT_FOUND, "not_found", None),
        (["entropy", "t", "1.5"], BAD_INPUT, "invalid_input", "score"),
        (["status", "--limit", "0"], BAD_INPUT, "invalid_input", "limit"),
        (["task", "start", "t"], 8, "already_exists", None),
        (["resume", "t"], 8, "illegal_transition", None),
    ],
)
def test_a_failing_command_with_json_writes_a_json_error(
    devs: Devs, args: list[str], code: int, kind: str, field: str | None
) -> None:
    devs("task", "start", "t")
    plain = devs(*args, code=code)
    assert plain.stdout == ""
    answer = devs.json(*args, code=code)
    error = answer["error"]
    assert (error["kind"], error["exit_code"], error["field"]) == (kind, code, field)
    # The message is the one line the command says without --json.
    assert f"devs: error: {error['message']}\n" == plain.stderr


def test_a_json_error_carries_no_secret(devs: Devs) -> None:
    result = devs("task", "show", f"t-{SECRET}", "--json", code=BAD_INPUT)
    assert SECRET not in result.stdout + result.stderr
    assert json.loads(result.stdout)["error"]["kind"] == "invalid_input"


# ---------------------------------------------------- shell completion


def complete(
    words: str, env: dict[str, str] | None = None, shell: str = "bash"
) -> subprocess.CompletedProcess[str]:
    parts = words.split(" ")
    return subprocess.run(
        [DEVS],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "_DEVS_COMPLETE": f"{shell}_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(parts) - 1),
            **(env or {}),
        },
        check=False,
    )


def test_completion_scripts_for_bash_zsh_and_fish() -> None:
    for shell, marker in (
        ("bash", "_devs_completion"),
        ("zsh", "#compdef devs"),
        ("fish", "complete --no-files --command devs"),
    ):
        script = subprocess.run(
            [DEVS],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "_DEVS_COMPLETE": f"{shell}_source"},
            check=True,
        )
        assert marker in script.stdout, (shell, script.stdout)


def test_task_ids_complete_from_the_configured_store(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite"
    with open_service(Settings(db=str(db))) as service:
        for task in ("build", "bundle", "ship", LONG):
            service.start_task(task)
    found = complete(f"devs --db {db} task show bu")
    assert found.returncode == OK
    assert found.stdout.splitlines() == ["plain,build", "plain,bundle"]
    assert found.stderr == ""
    # DEVS_DB when --db is not given; every command that takes a task id.
    for words in (
        "devs resume a-rather",
        "devs history a",
        "devs gate status a-",
        "devs status --after a",
        "devs what-if --task a",
        "devs export a",
    ):
        named = complete(words, {"DEVS_DB": str(db)})
        assert named.stdout.splitlines() == [f"plain,{LONG}"], (words, named)
    everything = complete("devs skip ", {"DEVS_DB": str(db)})
    assert len(everything.stdout.splitlines()) == 4
    zsh = complete("devs lessons sh", {"DEVS_DB": str(db)}, shell="zsh")
    assert zsh.stdout.splitlines() == ["plain", "ship", "_"]


def test_completion_without_a_store_says_nothing_and_creates_none(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "none.sqlite"
    found = complete(f"devs --db {missing} task show b")
    assert (found.returncode, found.stdout.strip(), found.stderr) == (OK, "", "")
    assert not missing.exists()
    # A store that cannot be reached, whose URL holds a password; a broken
    # setting: nothing is printed, not the URL, not a warning.
    for env in (
        {"DEVS_DATABASE_URL": f"postgresql://u:{SECRET}@127.0.0.1:1/devs"},
        {"DEVS_READ_WAIT": f"x{SECRET}", "DEVS_DB": str(missing)},
        {"DEVS_ESCALATION_THRESHOLD": "many", "DEVS_DB": str(missing)},
    ):
        quiet = complete("devs task show b", env)
        assert (quiet.returncode, quiet.stdout.strip(), quiet.stderr) == (OK, "", "")
    (tmp_path / "junk.sqlite").write_text("not a database")
    junk = complete(f"devs --db {tmp_path / 'junk.sqlite'} task show b")
    assert (junk.returncode, junk.stdout.strip(), junk.stderr) == (OK, "", "")


def test_completion_never_changes_a_file_that_is_not_a_store(tmp_path: Path) -> None:
    """Tab on another program's SQLite file, or an empty file: nothing is
    completed and the file is left byte for byte as it was (no schema made,
    no journal mode changed)."""
    foreign = tmp_path / "other.db"
    with closing(sqlite3.connect(foreign)) as db:
        db.execute("CREATE TABLE mine (x)")
        db.commit()
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    for path in (foreign, empty):
        before = path.read_bytes()
        found = complete(f"devs --db {path} task show ")
        assert (found.returncode, found.stdout.strip(), found.stderr) == (OK, "", "")
        assert path.read_bytes() == before, path
        assert not Path(f"{path}-wal").exists()
    with closing(sqlite3.connect(foreign)) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master")]
    assert tables == ["mine"]
