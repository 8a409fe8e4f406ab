"""The sandboxed gate runner, on real processes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from devs.adapters.sandbox import run_gate, scrub_environment
from devs.domain import InvalidInput
from devs.domain.redaction import error_hash

PY = sys.executable


def is_alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting to be reaped does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_dead(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_exit_codes_pass_through() -> None:
    assert run_gate(["true"]).exit_code == 0
    result = run_gate([PY, "-c", "raise SystemExit(3)"])
    assert result.exit_code == 3
    assert result.error == "exited with code 3"


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


def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time;"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid));"
        "time.sleep(60)"
    )
    start = time.monotonic()
    result = run_gate([PY, "-c", script], timeout=1.0)
    assert time.monotonic() - start < 10
    assert result.exit_code is None
    assert result.timed_out
    assert "timeout" in result.error
    assert wait_dead(int(pidfile.read_text()))


def test_background_children_die_with_the_gate(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = (
        "import subprocess, sys;"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL);"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))"
    )
    result = run_gate([PY, "-c", script], timeout=30)
    assert result.exit_code == 0
    assert wait_dead(int(pidfile.read_text()))


def test_cpu_limit_kills_a_busy_loop() -> None:
    result = run_gate([PY, "-c", "while True: pass"], cpu_seconds=1, timeout=30)
    assert result.exit_code is None
    assert result.signal_name == "SIGXCPU"
    assert result.error == "killed by SIGXCPU"


def test_memory_limit_stops_a_large_allocation() -> None:
    result = run_gate(
        [PY, "-c", "x = bytearray(2 * 1024**3)"], memory_mb=256, timeout=30
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


def test_working_directory(tmp_path: Path) -> None:
    result = run_gate([PY, "-c", "import os; print(os.getcwd())"], cwd=tmp_path)
    assert result.output.strip() == str(tmp_path)


def test_environment_is_scrubbed_unless_passed_through() -> None:
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": "/tmp",
        "MY_API_TOKEN": "abc",
        "DB_PASSWORD": "p",
        "DATABASE_URL": "postgresql://u:p@h/db",
        "SOME_URL": "https://user:pw@example.invalid/x",
        "HARMLESS": "1",
    }
    code = "import os; print(sorted(k for k in os.environ if k != 'LC_CTYPE'))"
    result = run_gate([PY, "-c", code], environ=environ)
    assert result.output.strip() == "['HARMLESS', 'HOME', 'PATH']"
    assert result.scrubbed_env == (
        "DATABASE_URL",
        "DB_PASSWORD",
        "MY_API_TOKEN",
        "SOME_URL",
    )
    kept = run_gate([PY, "-c", code], environ=environ, pass_env=["MY_API_TOKEN"])
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
    ],
)
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    command = kwargs.pop("command")
    with pytest.raises(InvalidInput, match=message):
        run_gate(command, **kwargs)  # type: ignore[arg-type]
