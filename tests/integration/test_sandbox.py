"""The sandboxed gate runner, on real processes.

The tests that take the ``isolation`` fixture run twice: under bubblewrap
("require") and without it ("none"). Where bwrap cannot sandbox on this host the
first is skipped, except in CI (``$CI`` set), where it fails: CI installs bwrap.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from devs.adapters.sandbox import (
    Isolation,
    run_gate,
    scrub_environment,
)
from devs.domain import InvalidInput
from devs.domain.redaction import error_hash
from tests.helpers import require_bwrap, wait_until

PY = sys.executable


@pytest.fixture(params=["require", "none"])
def isolation(request: pytest.FixtureRequest) -> Isolation:
    mode: Isolation = request.param
    if mode == "require":
        require_bwrap()
    return mode


def is_alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting to be reaped does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def processes_with(token: str) -> list[int]:
    """Live processes whose command line holds ``token``.

    Sandboxed processes have other pids inside their namespace, so a gate
    cannot tell the host its children's pids; they are found by a token.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline and is_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


CHILD = "open('child-started', 'w').close(); import time; time.sleep(60)"


def sleeper(token: str) -> str:
    """Python code that starts a child which creates ``child-started`` in the
    working directory and sleeps, with ``{token}-child`` in its argv (assembled
    at run time: only the child's command line holds it)."""
    return (
        "import subprocess, sys;"
        f"subprocess.Popen([sys.executable, '-c', {CHILD!r}, {token!r} + '-child'],"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)"
    )


def test_exit_codes_pass_through(isolation: Isolation) -> None:
    assert run_gate(["true"], isolation=isolation).exit_code == 0
    result = run_gate([PY, "-c", "raise SystemExit(3)"], isolation=isolation)
    assert result.exit_code == 3
    assert result.error == "exited with code 3"
    assert result.isolation == ("bwrap" if isolation == "require" else "none")
    assert result.fallback is None


def test_output_is_captured_merged_redacted_and_hashed() -> None:
    result = run_gate(
        [
            PY,
            "-c",
            "import sys; print('out'); print('password=hunter2', file=sys.stderr)",
        ]
    )
    assert "out" in result.output
    assert "hunter2" not in result.output
    assert "password=[REDACTED]" in result.output
    assert result.output_hash == error_hash(result.output)


def test_timeout_kills_the_whole_group(tmp_path: Path, isolation: Isolation) -> None:
    token = f"devs-test-{uuid.uuid4()}"
    # The command waits for its child to run, then outlives the timeout.
    script = (
        f"{sleeper(token)}; import os, time\n"
        "while not os.path.exists('child-started'): time.sleep(0.05)\n"
        "time.sleep(60)"
    )
    result = run_gate(
        [PY, "-c", script, token],
        cwd=tmp_path,
        timeout=8.0,  # room for both to start on a loaded machine
        isolation=isolation,
    )
    assert result.exit_code is None
    assert result.timed_out
    # the timeout given, however long killing the group took after it
    assert result.duration_seconds > 8.0
    assert result.error == "killed after the 8s timeout"
    # The child ran (it wrote the file) ...
    assert (tmp_path / "child-started").exists()
    # ... and after the timeout, neither it nor the command does.
    assert wait_until(lambda: not processes_with(token))


def test_background_children_die_with_the_gate(
    tmp_path: Path, isolation: Isolation
) -> None:
    token = f"devs-test-{uuid.uuid4()}"
    # The command exits once its child runs.
    script = (
        f"{sleeper(token)}; import os, time\n"
        "while not os.path.exists('child-started'): time.sleep(0.05)"
    )
    result = run_gate([PY, "-c", script], cwd=tmp_path, timeout=30, isolation=isolation)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "child-started").exists()
    assert wait_until(lambda: not processes_with(token))


def test_cpu_limit_kills_a_busy_loop(isolation: Isolation) -> None:
    result = run_gate(
        [PY, "-c", "while True: pass"],
        cpu_seconds=1,
        timeout=30,
        isolation=isolation,
    )
    assert result.exit_code is None
    assert result.signal_name == "SIGXCPU"
    assert result.error == "killed by SIGXCPU"


def test_memory_limit_stops_a_large_allocation(isolation: Isolation) -> None:
    result = run_gate(
        [PY, "-c", "x = bytearray(2 * 1024**3)"],
        memory_mb=256,
        timeout=30,
        isolation=isolation,
    )
    assert result.exit_code == 1
    assert "MemoryError" in result.output


def test_output_is_capped_keeping_the_end() -> None:
    result = run_gate(
        [PY, "-c", "print('a' * 500_000); print('THE END')"], output_cap=1_000
    )
    assert result.truncated_bytes > 400_000
    assert result.output.rstrip().endswith("THE END")
    assert result.output.startswith("[")
    assert len(result.output) < 1_100


def test_nul_characters_in_the_output_become_replacement_characters(
    isolation: Isolation,
) -> None:
    """A NUL cannot be recorded (no text argument takes one): like an
    undecodable byte, it becomes U+FFFD, so the gate is still recorded."""
    result = run_gate(
        [PY, "-c", "import sys; sys.stdout.write('a\\0b\\n'); sys.exit(1)"],
        isolation=isolation,
    )
    assert result.output == "a\ufffdb\n"
    assert result.error_line == "exited with code 1: a\ufffdb"
    assert result.output_hash == error_hash(result.output)


def test_working_directory(tmp_path: Path, isolation: Isolation) -> None:
    result = run_gate(
        [PY, "-c", "import os; print(os.getcwd())"], cwd=tmp_path, isolation=isolation
    )
    assert result.output.strip() == str(tmp_path)


def test_environment_is_scrubbed_unless_passed_through(isolation: Isolation) -> None:
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": "/tmp",
        "MY_API_TOKEN": "abc",
        "DB_PASSWORD": "p",
        "DATABASE_URL": "postgresql://u:p@h/db",
        "SOME_URL": "https://user:pw@example.invalid/x",
        "HARMLESS": "1",
    }
    # Python may add LC_CTYPE; bwrap sets PWD (the working directory).
    code = "import os; print(sorted(set(os.environ) - {'LC_CTYPE', 'PWD'}))"
    result = run_gate([PY, "-c", code], environ=environ, isolation=isolation)
    assert result.output.strip() == "['HARMLESS', 'HOME', 'PATH']"
    assert result.scrubbed_env == (
        "DATABASE_URL",
        "DB_PASSWORD",
        "MY_API_TOKEN",
        "SOME_URL",
    )
    kept = run_gate(
        [PY, "-c", code],
        environ=environ,
        pass_env=["MY_API_TOKEN"],
        isolation=isolation,
    )
    assert "MY_API_TOKEN" in kept.output


def test_scrub_environment_rules() -> None:
    clean, removed = scrub_environment(
        {"GITHUB_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "y", "EDITOR": "vi"}
    )
    assert clean == {"EDITOR": "vi"}
    assert removed == ["AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"command": []}, "command must not be empty"),
        ({"command": ["definitely-not-a-command-xyz"]}, "command not found"),
        ({"command": ["true"], "timeout": 0}, "timeout 0 is out of range"),
        ({"command": ["true"], "timeout": float("nan")}, "timeout must be a number"),
        ({"command": ["true"], "cpu_seconds": -1}, "cpu_seconds -1 is out of range"),
        ({"command": ["true"], "memory_mb": 0}, "memory_mb 0 is out of range"),
        ({"command": ["true"], "cwd": "/nonexistent/dir"}, "does not exist"),
        ({"command": ["true"], "isolation": "strict"}, "isolation must be one of"),
        ({"command": ["true"], "allow_paths": ["/nonexistent/x"]}, "does not exist"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    command = kwargs.pop("command")
    with pytest.raises(InvalidInput, match=message):
        run_gate(command, **kwargs)  # type: ignore[arg-type]
