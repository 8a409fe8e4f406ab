"""The installed hook command's fast path: its hook server (one per store and
settings), as an operator meets it: started by the first call, killed with
SIGKILL, idle, turned off, refused an unsafe folder; its variables, each
bad value an error naming it on the fast path and in the server alike."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from devs.adapters.hooks import variables
from devs.adapters.hooks.settings import HookEdgeSettings
from devs.domain.errors import InvalidInput
from tests.integration.test_hooks import fixture, git_repo

DEVS = str(Path(sys.executable).with_name("devs"))


class Calls:
    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.repo = git_repo(tmp_path / "repo")
        self.db = tmp_path / "state.sqlite"
        # Under /tmp, not tmp_path: a socket's path must fit in 108 bytes, and
        # a pytest-xdist worker's tmp_path is longer (popen-gw0/...).
        self.runtime = Path(tempfile.mkdtemp(prefix="devs-run-", dir="/tmp"))
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


BAD = [
    ("DEVS_HOOK_SERVER", "maybe", "must be on or off, got 'maybe'"),
    ("DEVS_HOOK_SERVER_IDLE", "soon", "must be a number of seconds in (0, 86400]"),
    ("DEVS_HOOK_SERVER_IDLE", "0", "must be a number of seconds in (0, 86400]"),
    ("DEVS_HOOK_SERVER_IDLE", "nan", "must be a number of seconds in (0, 86400]"),
    ("DEVS_HOOK_TIMEOUT", "601", "must be a number of seconds in (0, 600]"),
    ("DEVS_HOOK_TIMEOUT", "-1", "must be a number of seconds in (0, 600]"),
    ("DEVS_HOOK_STATE_DIR", "state\x01dir", "must be a folder's path of printable"),
]


def test_every_variable_is_in_the_table_and_documented_with_its_default() -> None:
    text = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    fields = {f"DEVS_HOOK_{name.upper()}" for name in HookEdgeSettings.model_fields}
    assert {v.name for v in variables.VARIABLES} == fields
    assert {name for name, _, _ in BAD} == fields
    for variable in variables.VARIABLES:
        start = f"| `{variable.name}` |"
        row = next(line for line in text.splitlines() if line.startswith(start))
        assert variable.default in row, variable.name
        assert variable.takes in row, variable.name


def test_unset_or_blank_is_the_default_in_both_readers() -> None:
    for environ in ({}, {v.name: " " for v in variables.VARIABLES}):
        fast = variables.read(environ)
        model = HookEdgeSettings.from_environ(environ)
        assert (fast.server, fast.server_idle, fast.timeout) == (True, 600.0, 10.0)
        assert (model.server, model.server_idle, model.timeout) == (True, 600.0, 10.0)
        assert model.state_dir is None
    given = {
        "DEVS_HOOK_SERVER": " OFF ",
        "DEVS_HOOK_SERVER_IDLE": "86400",
        "DEVS_HOOK_TIMEOUT": "0.5",
        "DEVS_HOOK_STATE_DIR": "/tmp/x",
    }
    fast = variables.read(given)
    model = HookEdgeSettings.from_environ(given)
    assert (fast.server, fast.server_idle, fast.timeout) == (False, 86400.0, 0.5)
    assert (model.server, model.server_idle, model.timeout) == (False, 86400.0, 0.5)
    assert fast.state_dir == model.state_dir == Path("/tmp/x")


@pytest.mark.parametrize(("name", "value", "said"), BAD)
def test_a_bad_value_is_the_same_error_naming_it_in_both_readers(
    name: str, value: str, said: str
) -> None:
    with pytest.raises(variables.BadVariable) as fast:
        variables.read({name: value})
    with pytest.raises(InvalidInput) as model:
        HookEdgeSettings.from_environ({name: value})
    assert str(fast.value) == str(model.value)
    assert str(fast.value).startswith(f"{name} {said}")
    assert fast.value.variable == model.value.field == name


@pytest.mark.parametrize(("name", "value", "said"), BAD)
def test_a_bad_value_fails_the_call_naming_it_and_starts_no_server(
    tmp_path: Path, name: str, value: str, said: str
) -> None:
    calls = Calls(tmp_path, **{name: value})
    done = calls.hook(fixture("claude-code", "SessionStart"))
    assert done.returncode == 1
    assert (
        done.stderr
        == f"devs hook: error: {name} {said}" + done.stderr.split(said, 1)[1]
    )
    assert done.stderr.count("\n") == 1
    time.sleep(0.5)
    assert calls.server_pid() is None
    assert calls.sockets() == []
    assert not calls.db.exists()  # nothing written


@pytest.mark.parametrize(("name", "value", "said"), BAD)
def test_a_bad_value_stops_the_server_before_it_binds(
    tmp_path: Path, name: str, value: str, said: str
) -> None:
    socket_path = tmp_path / "hook.sock"
    done = subprocess.run(
        [sys.executable, "-m", "devs.adapters.hooks.server", str(socket_path)],
        env={**os.environ, name: value},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"devs hook server: error: {name} {said}")
    assert not socket_path.exists()


def test_the_fast_path_imports_the_standard_library_only() -> None:
    probe = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import devs.adapters.launch, devs.adapters.hooks.client\n"
        "from devs.adapters.hooks import variables\n"
        "variables.read({})\n"
        "print('\\n'.join(sorted(m for m in set(sys.modules) - before"
        " if m.split('.')[0] not in sys.stdlib_module_names)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = set(done.stdout.split())
    assert {m.split(".")[0] for m in loaded} == {"devs"}
    assert "devs.adapters.hooks.settings" not in loaded
    assert not any(m.startswith("devs.domain") for m in loaded)
