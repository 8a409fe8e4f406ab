"""What the bubblewrap sandbox keeps a gate command from, on real processes.

Each blocking test also runs the same command without the sandbox, where it
gets through: that is what the sandbox adds, and it shows the test can fail.
The tests that need bwrap skip where it cannot sandbox, except in CI (``$CI``
set), where they fail: CI installs bwrap.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile
import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devs.adapters.sandbox import (
    WEAKER_ISOLATION,
    GateRun,
    Isolation,
    IsolationUnavailable,
    run_gate,
    sandbox_unavailable,
)
from devs.domain import InvalidInput
from tests.helpers import require_bwrap, wait_until
from tests.integration.test_sandbox import PY, processes_with

SECRET = "SECRET-KEY-MATERIAL-" + "0123456789"

# Gate code starts with this: `attempt(label, action)` prints the label and `ok`,
# or the label and the class of the error the action raised.
PRELUDE = """\
import os, pathlib, socket, sys
def attempt(label, action):
    try:
        action()
        print(label, "ok")
    except Exception as error:
        print(label, type(error).__name__)
"""


def outcomes(result: GateRun) -> dict[str, str]:
    """What each attempt of the gate code printed, by label."""
    assert result.exit_code == 0, result.output
    return dict(line.split(" ", 1) for line in result.output.strip().splitlines())


@dataclass(frozen=True)
class Place:
    """A home directory with a secret in it, and a working directory beside it."""

    base: Path
    home: Path
    work: Path

    @property
    def key(self) -> Path:
        return self.home / ".ssh" / "id_ed25519"

    @property
    def env(self) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], "HOME": str(self.home)}

    def run(
        self,
        code: str,
        *,
        isolation: Isolation = "require",
        network: bool = False,
        allow_paths: tuple[Path, ...] = (),
        read_only_paths: tuple[Path, ...] = (),
    ) -> GateRun:
        """Run the Python ``code`` (after the prelude) as the gate, in ``work``."""
        return run_gate(
            [PY, "-c", PRELUDE + textwrap.dedent(code)],
            cwd=self.work,
            environ=self.env,
            timeout=60,
            isolation=isolation,
            network=network,
            allow_paths=allow_paths,
            read_only_paths=read_only_paths,
        )


@pytest.fixture
def place() -> Iterator[Place]:
    """Under /var/tmp, not /tmp: the sandbox's /tmp is private whatever else it
    does, so a home under /tmp would be hidden even if the home were not."""
    require_bwrap()
    base = Path(tempfile.mkdtemp(prefix="devs-sandbox-test-", dir="/var/tmp"))
    try:
        base = base.resolve()
        home, work = base / "home", base / "work"
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "id_ed25519").write_text(SECRET)
        (home / ".config" / "tool").mkdir(parents=True)
        (home / ".config" / "tool" / "settings.toml").write_text("colour = 'blue'\n")
        work.mkdir()
        yield Place(base, home, work)
    finally:
        shutil.rmtree(base)


def test_no_network_unless_asked(place: Place) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        address = ("127.0.0.1", port)
        code = f"attempt('connect', lambda: socket.create_connection({address}))"

        assert outcomes(place.run(code)) == {"connect": "ConnectionRefusedError"}
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing came through
        listener.setblocking(True)

        assert outcomes(place.run(code, network=True)) == {"connect": "ok"}
        listener.accept()[0].close()

        assert outcomes(place.run(code, isolation="none")) == {"connect": "ok"}


def test_the_home_directory_is_empty_and_private(place: Place) -> None:
    code = f"""
        import ctypes
        home = pathlib.Path(os.environ["HOME"])
        print("listing", sorted(os.listdir(home)))
        def unmount():  # as root, this works unless capabilities are dropped
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.umount2(str(home).encode(), 2) != 0:  # MNT_DETACH
                raise OSError(ctypes.get_errno(), "umount2")
        attempt("unmount", unmount)
        attempt("read", lambda: print(open({str(place.key)!r}).read(), file=sys.stderr))
        attempt("write", lambda: (home / "left-behind").write_text("x"))
    """
    sandboxed = place.run(code)
    assert outcomes(sandboxed) == {
        "listing": "[]",
        "unmount": "PermissionError",
        "read": "FileNotFoundError",
        "write": "ok",  # in the empty home, which goes with the sandbox
    }
    assert not (place.home / "left-behind").exists()
    assert SECRET not in sandboxed.output

    unsandboxed = place.run(code, isolation="none")
    assert SECRET in unsandboxed.output
    assert (place.home / "left-behind").exists()


def test_nothing_is_written_outside_the_working_directory(
    place: Place, tmp_path: Path
) -> None:
    targets = {
        "beside": place.base / "beside.txt",  # neither /tmp nor the home
        "tmp": tmp_path / "in-tmp.txt",
        "home": place.home / ".ssh" / "authorized_keys",
        "inside": place.work / "inside.txt",
    }
    code = "\n".join(
        f"attempt({label!r}, lambda: open({str(path)!r}, 'w').write('x'))"
        for label, path in targets.items()
    )
    assert outcomes(place.run(code)) == {
        "beside": "OSError",  # EROFS: read-only file system
        "tmp": "FileNotFoundError",  # its directory is not in the private /tmp
        "home": "FileNotFoundError",  # nor in the empty home
        "inside": "ok",
    }
    landed = {label for label, path in targets.items() if path.exists()}
    assert landed == {"inside"}

    place.run(code, isolation="none")
    assert all(path.exists() for path in targets.values())


def test_host_sockets_are_out_of_reach(place: Place, tmp_path: Path) -> None:
    """A read-only file system does not stop connect() on a unix socket: the
    places where hosts keep them (/tmp, /run) are private instead."""
    path = tmp_path / "agent.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        listener.listen()
        code = f"""
            print("run", sorted(os.listdir("/run")))
            def connect():
                with socket.socket(socket.AF_UNIX) as client:
                    client.connect({str(path)!r})
            attempt("connect", connect)
        """
        assert outcomes(place.run(code)) == {
            "run": "[]",
            "connect": "FileNotFoundError",
        }
        assert outcomes(place.run(code, isolation="none"))["connect"] == "ok"


def test_allow_path_shows_a_named_path_read_only(place: Place) -> None:
    settings = place.home / ".config" / "tool" / "settings.toml"
    code = f"""
        attempt("settings", lambda: open({str(settings)!r}).read())
        attempt("key", lambda: open({str(place.key)!r}).read())
        attempt("write", lambda: open({str(settings)!r}, "a").write("x"))
    """
    assert outcomes(place.run(code)) == {
        "settings": "FileNotFoundError",
        "key": "FileNotFoundError",
        "write": "FileNotFoundError",
    }
    allowed = place.run(code, allow_paths=(settings.parent,))
    assert outcomes(allowed) == {
        "settings": "ok",
        "key": "FileNotFoundError",
        "write": "OSError",  # read-only
    }
    assert settings.read_text() == "colour = 'blue'\n"


def test_read_only_paths_in_the_working_directory(place: Place) -> None:
    log = place.work / "state.sqlite"
    log.write_text("the referee's log")
    code = f"""
        attempt("append", lambda: open({str(log)!r}, "a").write("forged"))
        attempt("remove", lambda: os.remove({str(log)!r}))
        attempt("other", lambda: open("other.txt", "w").write("x"))
    """
    assert outcomes(place.run(code, read_only_paths=(log,))) == {
        "append": "OSError",
        "remove": "OSError",  # a mount point cannot be removed
        "other": "ok",
    }
    assert log.read_text() == "the referee's log"


def test_the_runners_environment_is_out_of_reach(place: Place) -> None:
    """``/proc/<runner>/environ`` holds the unscrubbed environment."""
    environ = Path(f"/proc/{os.getpid()}/environ")
    digest = hashlib.sha256(environ.read_bytes()).hexdigest()
    code = f"""
        import hashlib
        def read():
            data = open({str(environ)!r}, "rb").read()
            print("digest", hashlib.sha256(data).hexdigest())
        attempt("read", read)
    """
    sandboxed = outcomes(place.run(code))
    assert sandboxed.get("digest") != digest
    assert outcomes(place.run(code, isolation="none"))["digest"] == digest


def test_an_ordinary_pytest_gate_passes(place: Place) -> None:
    (place.work / "test_ok.py").write_text(
        "def test_sums(tmp_path):\n"
        "    (tmp_path / 'f').write_text('2')\n"
        "    assert 1 + 1 == int((tmp_path / 'f').read_text())\n"
    )
    passed = run_gate([PY, "-m", "pytest", "-q"], cwd=place.work, environ=place.env)
    assert passed.isolation == "bwrap"
    assert passed.exit_code == 0, passed.output
    assert "1 passed" in passed.output

    (place.work / "test_bad.py").write_text("def test_no():\n    assert False\n")
    failed = run_gate([PY, "-m", "pytest", "-q"], cwd=place.work, environ=place.env)
    assert failed.exit_code == 1
    assert "1 failed, 1 passed" in failed.output


def test_a_daemon_left_behind_dies_with_the_gate(place: Place) -> None:
    """A child that leaves the process group escapes the runner's kill; the pid
    namespace ends it when the command exits."""
    token = f"devs-test-{uuid.uuid4()}"
    daemon = "import os, time; os.setsid(); open('daemon-started', 'w'); time.sleep(60)"
    code = f"""
        import subprocess, time
        subprocess.Popen([sys.executable, "-c", {daemon!r}, {token!r}],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not os.path.exists("daemon-started"):
            time.sleep(0.05)
    """
    result = place.run(code)
    assert result.exit_code == 0, result.output
    assert (place.work / "daemon-started").exists()
    assert wait_until(lambda: not processes_with(token))


def test_a_command_the_sandbox_hides_is_refused_before_it_runs(place: Place) -> None:
    tools = place.home / "bin"
    tools.mkdir()
    tool = tools / "tool"
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)
    script = place.work / "check.sh"
    script.write_text(f"#!{tool}\n")
    script.chmod(0o755)

    for command in ([str(tool)], ["./check.sh"]):
        with pytest.raises(InvalidInput, match=re.escape(f"needs {tool}, which the")):
            run_gate(command, cwd=place.work, environ=place.env)

    allowed = run_gate(
        [str(tool)], cwd=place.work, environ=place.env, allow_paths=[tools]
    )
    assert allowed.output.strip() == "tool ran"


def test_a_python_in_the_home_directory_runs_by_default(place: Place) -> None:
    """A version manager's shim and a virtual environment in the home
    directory: their installations are shown read-only, the rest of the home
    directory stays hidden."""
    real = os.path.realpath(PY)
    shims = place.home / ".manager" / "shims"
    shims.mkdir(parents=True)
    shim = shims / "python"
    shim.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    shim.chmod(0o755)
    venv = place.home / "proj" / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(real)
    tool = venv / "bin" / "tool"
    tool.write_text(f"#!{venv / 'bin' / 'python'}\nprint('tool ran')\n")
    tool.chmod(0o755)
    read_key = f"import os; print(os.path.exists({str(place.key)!r}))"
    env = {**place.env, "PATH": f"{shims}:{os.environ['PATH']}"}

    for command in (
        ["python", "-c", read_key],
        [str(venv / "bin" / "python"), "-c", read_key],
    ):
        result = run_gate(command, cwd=place.work, environ=env, isolation="require")
        assert (result.exit_code, result.output.strip()) == (0, "False"), result
    result = run_gate([str(tool)], cwd=place.work, environ=env, isolation="require")
    assert (result.exit_code, result.output.strip()) == (0, "tool ran"), result


def test_the_active_virtual_environment_is_readable(place: Place) -> None:
    venv = place.home / "envs" / "active"
    venv.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    env = {**place.env, "VIRTUAL_ENV": str(venv)}
    result = run_gate(
        ["sh", "-c", 'cat "$VIRTUAL_ENV/pyvenv.cfg"'],
        cwd=place.work,
        environ=env,
        isolation="require",
    )
    assert (result.exit_code, result.output.strip()) == (0, "home = /usr/bin")


def test_a_python_straight_in_the_home_directory_does_not_show_it(
    place: Place,
) -> None:
    """~/bin/python's installation would be the whole home directory: not
    shown by default, so the command is refused, naming the file."""
    tools = place.home / "bin"
    tools.mkdir()
    python = tools / "python"
    python.symlink_to(os.path.realpath(PY))
    with pytest.raises(InvalidInput, match=re.escape(f"needs {python}, which the")):
        run_gate([str(python), "-c", "pass"], cwd=place.work, environ=place.env)
    env = {**place.env, "VIRTUAL_ENV": str(place.home)}
    result = run_gate(
        ["sh", "-c", f"cat {place.key}"],
        cwd=place.work,
        environ=env,
        isolation="require",
    )
    assert result.exit_code != 0
    assert SECRET not in result.output


# ------------------------------------------------- without a working bwrap


def fake_bwrap(tmp_path: Path, script: str) -> str:
    program = tmp_path / "bwrap"
    program.write_text("#!/bin/sh\n" + script)
    program.chmod(0o755)
    return str(program)


@pytest.mark.parametrize(
    ("make_bwrap", "why"),
    [
        (
            lambda tmp: str(tmp / "missing" / "bwrap"),
            "bwrap is not installed (no '",
        ),
        (
            lambda tmp: fake_bwrap(
                tmp,
                "echo 'bwrap: Creating new namespace failed: Operation not "
                "permitted' >&2; exit 1\n",
            ),
            "bwrap cannot create a sandbox here (bwrap: Creating new namespace "
            "failed: Operation not permitted)",
        ),
    ],
    ids=["missing", "no-namespaces"],
)
def test_without_bwrap_the_gate_falls_back_or_refuses(
    tmp_path: Path, make_bwrap: Callable[[Path], str], why: str
) -> None:
    bwrap = make_bwrap(tmp_path)
    assert sandbox_unavailable(bwrap) is not None
    marker = tmp_path / "ran"
    with pytest.raises(IsolationUnavailable, match="gate isolation is required, but"):
        run_gate(["touch", str(marker)], isolation="require", bwrap=bwrap)
    assert not marker.exists()

    result = run_gate(["touch", str(marker)], bwrap=bwrap)
    assert result.exit_code == 0
    assert marker.exists()
    assert result.isolation == "none"
    assert result.fallback is not None
    assert why in result.fallback
    assert result.fallback.endswith(f"; the gate runs with {WEAKER_ISOLATION}")
    assert "\n" not in result.fallback


def test_a_sandbox_that_fails_to_start_is_not_a_failing_gate(tmp_path: Path) -> None:
    """bwrap answers the probe but cannot mount: the command never ran."""
    bwrap = fake_bwrap(
        tmp_path,
        'case "$*" in *--version) exit 0;; esac\n'
        "echo 'bwrap: Can not mount tmpfs on /newroot/run: No such device' >&2\n"
        "exit 1\n",
    )
    with pytest.raises(
        IsolationUnavailable,
        match="the gate sandbox could not be set up: bwrap: Can not mount tmpfs",
    ):
        run_gate([PY, "-c", "pass"], bwrap=bwrap)
