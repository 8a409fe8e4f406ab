"""The installed hook command's fast path: its hook server (one per store and
settings), as an operator meets it: started by the first call, killed with
SIGKILL, idle, turned off, refused an unsafe folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.test_hooks import fixture, git_repo

DEVS = str(Path(sys.executable).with_name("devs"))


class Calls:
    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.repo = git_repo(tmp_path / "repo")
        self.db = tmp_path / "state.sqlite"
        self.runtime = tmp_path / "run"
        self.runtime.mkdir(mode=0o700)
        self.env = {
            **os.environ,
            "XDG_RUNTIME_DIR": str(self.runtime),
            "DEVS_HOOK_STATE_DIR": str(tmp_path / "hooks"),
            "DEVS_HOOK_SERVER_IDLE": "30",
            **env,
        }
        for name in ("DEVS_DB", "DEVS_URL", "DEVS_TASK_ID", "DEVS_HOOK_SERVER"):
            if name not in env:
                self.env.pop(name, None)

    def hook(self, event: dict[str, object]) -> subprocess.CompletedProcess[str]:
        event["cwd"] = str(self.repo)
        return subprocess.run(
            [DEVS, "--db", str(self.db), "hook", "claude-code"],
            input=json.dumps(event),
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.repo,
            timeout=60,
            check=False,
        )

    def sockets(self) -> list[Path]:
        return sorted((self.runtime / "devs").glob("*.sock"))

    def server_pid(self) -> int | None:
        """The hook server of this test's socket folder, from /proc."""
        wanted = f"devs.adapters.hooks.server\0{self.runtime}/"
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                line = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if wanted in line:
                return int(entry.name)
        return None

    def wait_for_server(self) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pid = self.server_pid()
            if pid is not None and self.sockets():
                return pid
            time.sleep(0.1)
        raise AssertionError("no hook server came up")

    def failure(self, n: int) -> subprocess.CompletedProcess[str]:
        edit = fixture("claude-code", "PostToolUse-Write")
        edit["tool_input"] = {"file_path": f"{self.repo}/f{n}.py", "content": "x" * n}
        assert self.hook(edit).returncode == 0
        event = fixture("claude-code", "PostToolUseFailure-Bash")
        event["tool_input"] = {"command": "pytest"}
        event["error"] = f"Exit code 1\nE   assert {n} == 0"
        return self.hook(event)

    def failures(self) -> int:
        shown = subprocess.run(
            [DEVS, "--db", str(self.db), "status", "--json"],
            capture_output=True,
            text=True,
            env=self.env,
            check=True,
        )
        tasks = json.loads(shown.stdout)
        assert len(tasks) == 1
        count: int = tasks[0]["consecutive_failures"]
        return count


def test_the_first_call_starts_a_server_that_answers_the_next_ones(
    tmp_path: Path,
) -> None:
    calls = Calls(tmp_path)
    assert calls.hook(fixture("claude-code", "SessionStart")).returncode == 0
    pid = calls.wait_for_server()
    (path,) = calls.sockets()
    assert path.stat().st_mode & 0o777 == 0o600
    assert (calls.runtime / "devs").stat().st_mode & 0o777 == 0o700
    for n in range(1, 3):
        done = calls.failure(n)
        assert done.returncode == 0, done.stderr
        assert f"{n} in a row" in done.stdout
    assert calls.server_pid() == pid  # the same server answered them
    assert calls.failures() == 2

    # SIGKILL: the next call is answered all the same (in process), once,
    # and starts a new server.
    os.kill(pid, signal.SIGKILL)
    done = calls.failure(3)
    assert done.returncode == 0, done.stderr
    halted = json.loads(done.stdout)
    assert halted["continue"] is False
    assert calls.failures() == 3
    assert calls.wait_for_server() != pid
    os.kill(calls.wait_for_server(), signal.SIGTERM)


def test_an_idle_server_ends_and_removes_its_socket(tmp_path: Path) -> None:
    calls = Calls(tmp_path, DEVS_HOOK_SERVER_IDLE="1")
    calls.hook(fixture("claude-code", "SessionStart"))
    calls.wait_for_server()
    deadline = time.monotonic() + 30
    while calls.server_pid() is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert calls.server_pid() is None
    assert calls.sockets() == []


def test_off_answers_in_process_and_starts_no_server(tmp_path: Path) -> None:
    calls = Calls(tmp_path, DEVS_HOOK_SERVER="off")
    assert calls.hook(fixture("claude-code", "SessionStart")).returncode == 0
    assert calls.failure(1).returncode == 0
    time.sleep(1)
    assert calls.server_pid() is None
    assert not (calls.runtime / "devs").exists()
    assert calls.failures() == 1


def test_a_folder_others_may_enter_gets_no_server(tmp_path: Path) -> None:
    calls = Calls(tmp_path)
    shared = calls.runtime / "devs"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    assert calls.failure(1).returncode == 0
    time.sleep(1)
    assert calls.server_pid() is None
    assert calls.sockets() == []
    assert calls.failures() == 1
