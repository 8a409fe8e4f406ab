"""One gate run (:mod:`devs.adapters.gate_run`): the command line every
surface records, the gate settings, and the three callers — ``devs gate
run``, MCP's ``run_gate`` and the agents' hooks — storing the same redacted
command for a command that holds a secret."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from devs.adapters.config import Settings, open_service
from devs.adapters.gate_run import GateCall, command_line, run_and_record
from devs.adapters.hooks.registry import load
from devs.adapters.hooks.runner import respond
from devs.adapters.sandbox import GateSettings
from devs.domain import InvalidInput, UnknownTask
from devs.domain.values import NAME_MAX
from tests.adversarial.test_mcp_gates import call, with_env
from tests.e2e.test_mcp import stdio
from tests.helpers import event_count

DEVS = str(Path(sys.executable).with_name("devs"))
PY = sys.executable
TOKEN = "sk-live-" + "abcdefghij" + "klmnop1234"
PASSWORD = "hun" + "ter2-" + "correct-horse"
# A gate command holding two secrets, that fails: as an agent would run it.
COMMAND = [
    PY,
    "-c",
    "import sys; sys.exit(1)",
    f"Authorization: Bearer {TOKEN}",
    f"--password={PASSWORD}",
]
UNSANDBOXED = {"DEVS_DANGEROUSLY_ALLOW_UNSANDBOXED_GATES": "1"}  # not about bwrap


def test_command_line_is_one_line_redacted_whole_then_cut() -> None:
    line = command_line(COMMAND)
    assert TOKEN not in line
    assert PASSWORD not in line
    assert line.startswith(f"{shlex.quote(PY)} -c 'import sys; sys.exit(1)' ")
    assert "[REDACTED]" in line
    # A shell line is taken as it is: the same command reads the same.
    assert command_line(shlex.join(COMMAND)) == line
    assert command_line(["python", "-c", "a\nb\tc"]) == "python -c 'a b c'"
    long = command_line(["x" * 300])
    assert len(long) == NAME_MAX
    assert long.endswith("…")
    # A secret across the cut is redacted whole before the cut.
    across = command_line(["y" * (NAME_MAX - 10), f"token={TOKEN}"])
    assert "abcdefghij" not in across
    assert command_line("\x00 \x1b") == "gate"


def test_gate_settings_are_read_from_their_variables() -> None:
    assert GateSettings.from_environ({}) == GateSettings.from_environ(
        {"DEVS_GATE_TMP_MB": " "}
    )
    read = GateSettings.from_environ(
        {
            "DEVS_GATE_TMP_MB": "64",
            "DEVS_GATE_MAX_PROCESSES": "50",
            "DEVS_GATE_MAX_TIMEOUT": "30",
            "DEVS_GATE_MAX_MEMORY_MB": "512",
            "DEVS_GATE_MAX_CPU_SECONDS": "20",
            "DEVS_DANGEROUSLY_ALLOW_UNSANDBOXED_GATES": "yes",
            "DEVS_TMP_MB": "1",  # not one of them: never read
        }
    )
    assert (
        read.tmp_mb,
        read.max_processes,
        read.max_timeout,
        read.max_memory_mb,
        read.max_cpu_seconds,
        read.allow_unsandboxed,
    ) == (64, 50, 30, 512, 20, True)
    assert GateSettings(max_timeout=5).max_timeout == 5  # a value in code


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("DEVS_GATE_TMP_MB", "lots", "must be a whole number in [1, 1048576]"),
        ("DEVS_GATE_MAX_PROCESSES", "0", "must be a whole number in [1, 1000000]"),
        ("DEVS_GATE_MAX_TIMEOUT", "1.5", "must be a whole number in [1, 86400]"),
        ("DEVS_GATE_MAX_MEMORY_MB", "-1", "must be a whole number in [1, 1048576]"),
        ("DEVS_GATE_MAX_CPU_SECONDS", "86401", "must be a whole number in [1, 86400]"),
        (
            "DEVS_DANGEROUSLY_ALLOW_UNSANDBOXED_GATES",
            "maybe",
            "must be 1 or 0 (true/false, yes/no, on/off)",
        ),
    ],
)
def test_a_wrong_gate_setting_names_its_variable(
    variable: str, value: str, said: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        GateSettings.from_environ({variable: value})
    assert raised.value.field == variable
    assert str(raised.value) == f"{variable} {said}, got {value!r}"


def test_a_gate_call_checks_before_it_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with open_service(Settings(db=str(tmp_path / "s.sqlite"))) as service:
        touch = GateCall(
            "nope", (PY, "-c", f"open({str(marker)!r}, 'w')"), cwd=tmp_path / "w"
        )
        with pytest.raises(UnknownTask):
            run_and_record(service, touch)
        service.start_task("t")
        bad_name = GateCall("t", ("true",), gate="\n", cwd=tmp_path)
        with pytest.raises(InvalidInput) as raised:
            run_and_record(service, bad_name)
        assert raised.value.field == "gate"
        assert not marker.exists()
        assert event_count(tmp_path / "s.sqlite") == 1


def hook_event(command: str, cwd: Path) -> dict[str, Any]:
    """Claude Code's PostToolUseFailure of a Bash command."""
    fixtures = Path(__file__).parent.parent / "fixtures" / "hooks" / "claude-code"
    event: dict[str, Any] = json.loads(
        (fixtures / "PostToolUseFailure-Bash.json").read_text()
    )
    event["tool_input"] = {"command": command}
    event["error"] = "Exit code 1\n"
    event["cwd"] = str(cwd)
    return event


def last_gate(db: Path, task_id: str) -> str:
    shown = subprocess.run(
        [DEVS, "--db", str(db), "task", "show", task_id, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    gate: str = json.loads(shown.stdout)["failure_history"][-1]["gate"]
    return gate


def test_the_three_callers_store_the_same_redacted_command(tmp_path: Path) -> None:
    """The same command holding a bearer token and a password, run by ``devs
    gate run`` (which records it under ``--gate`` and prints it), by MCP's
    ``run_gate`` and reported by an agent's hook (which record it as the
    gate's name): one line, alike, no secret anywhere in the store."""
    work = tmp_path / "work"
    work.mkdir()
    db = tmp_path / "store" / "devs_state.sqlite"
    db.parent.mkdir()
    expected = command_line(COMMAND)
    with open_service(Settings(db=str(db))) as service:
        for task in ("cli", "mcp", "hook"):
            service.start_task(task)

    # devs gate run
    gate_run = [DEVS, "--db", str(db), "gate", "run", "cli", "--cwd", str(work)]
    cli = subprocess.run(
        [*gate_run, "--json", "--", *COMMAND],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **UNSANDBOXED},
        check=False,
    )
    assert cli.returncode == 1, cli.stderr
    assert json.loads(cli.stdout)["run"]["command"] == expected
    shown = subprocess.run(
        [*gate_run, "--", *COMMAND],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.stdout.startswith(f"$ {expected}  ->  exited with code 1"), shown

    # MCP run_gate
    connect = with_env(stdio(db, work), db, work, UNSANDBOXED)
    (ran,) = anyio.run(
        call, connect, ("run_gate", {"task_id": "mcp", "command": COMMAND})
    )
    assert not ran.is_error, ran
    assert last_gate(db, "mcp") == expected

    # The hook: the agent ran the same command line and it failed.
    dialect = load("claude-code").dialect
    environ = {
        "DEVS_TASK_ID": "hook",
        "DEVS_HOOK_STATE_DIR": str(tmp_path / "hooks"),
        "DEVS_GATE_PATTERN": r"sys\.exit",
    }
    with open_service(Settings(db=str(db))) as service:
        _, code = respond(
            dialect,
            json.dumps(hook_event(shlex.join(COMMAND), work)).encode(),
            environ,
            lambda: service,
            f"sqlite:{db}",
        )
        assert code == 0
    assert last_gate(db, "hook") == expected

    assert last_gate(db, "cli") == "tests"  # the CLI's --gate, by default
    stored = sqlite_text(db)
    assert TOKEN not in stored
    assert PASSWORD not in stored
    assert "abcdefghij" not in stored


def sqlite_text(db: Path) -> str:
    """Every byte of the store and its journal, as text."""
    return "".join(
        p.read_bytes().decode("utf-8", "replace")
        for p in db.parent.iterdir()
        if p.name.startswith(db.name)
    )


def test_a_secret_far_down_a_command_is_not_half_kept_in_its_name() -> None:
    """A token past 4,000 characters of blank lines: the whole line is
    redacted before it is cut, so no part of it reaches the gate's name."""
    token = "ghp_" + "Zq8xY3kP0aB7cD" + "e" * 22
    for blanks in (1_880, 3_975, 3_990, 3_999, 10_000):
        name = command_line(["false", "\n" * blanks + token])
        assert "ghp_" not in name, (blanks, name)
        assert "Zq8x" not in name, (blanks, name)
