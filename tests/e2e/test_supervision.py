"""``devs serve`` as a process manager sees it: its processes die with the
supervisor (``kill -9`` included), each worker says at start where it
listens and on what, and ``DEVS_ACCESS_LOG`` logs each request."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from importlib import metadata
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_serve import TOKEN, Server
from tests.e2e.test_serve_workers import listening, workers_of
from tests.helpers import wait_until

VERSION = metadata.version("devs-recovery")
GONE = 20
"""How long the supervisor's processes may take to die with it (a bound, not
a speed: they get SIGTERM at once, and stop listening at their next tick)."""


def children_of(pid: int) -> set[int]:
    """Every process whose parent is ``pid`` (the workers, the projector,
    multiprocessing's resource tracker)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: an exited process nobody reaps (its parent
    killed, and this machine's init may not reap) is a zombie, not alive."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def refuses(port: int) -> bool:
    """Whether a connection to ``port`` is refused (nothing listens)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def kill_left(pids: set[int]) -> None:
    """SIGKILL whichever of ``pids`` (this test's server's processes) still
    run, so that a failed test leaves no server behind."""
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def stop_what_is_left(server: Server, children: set[int]) -> None:
    """After a test that failed before its kill, stop the server as usual
    (its workers with it); after one that failed later, the children left."""
    if server.process.poll() is None:
        server.process.terminate()
    kill_left(children)
    server.process.communicate(timeout=60)  # reaped (read again: harmless)


def kill_the_supervisor(server: Server, processes: int) -> set[int]:
    """Once ``processes`` workers (and projector) are up and the workers
    listen: SIGKILL the supervisor, reap it; its children then."""
    supervisor = server.process.pid
    assert wait_until(lambda: len(workers_of(supervisor)) == processes, 30)
    children = children_of(supervisor)
    assert wait_until(lambda: listening(server.port) == 2, 30)
    assert server.client.get("/healthz").status_code == 200
    server.client.close()
    os.kill(supervisor, signal.SIGKILL)
    server.process.wait(timeout=30)
    return children


def test_kill_9_of_the_supervisor_stops_its_workers(tmp_path: Path) -> None:
    server = Server(tmp_path / "state.sqlite", "--workers", "2")
    children: set[int] = set()
    try:
        children = kill_the_supervisor(server, 2)
        assert wait_until(lambda: not any(alive(pid) for pid in children), GONE), {
            pid: alive(pid) for pid in children
        }
        assert wait_until(lambda: refuses(server.port), GONE)
    finally:
        stop_what_is_left(server, children)


def test_kill_9_of_the_supervisor_stops_the_projector_too(
    tmp_path: Path, pg_url: str
) -> None:
    """On PostgreSQL: the workers and the projector die with the supervisor;
    each said at start where it listens, on which database (never the URL's
    password) and in which version."""
    password = "not-for-the-log-2741"  # local connections are trusted: unused
    url = pg_url.replace("@/", f":{password}@/", 1)
    assert password in url
    server = Server(
        tmp_path / "unused.sqlite", "--workers", "2", env={"DEVS_DATABASE_URL": url}
    )
    children: set[int] = set()
    try:
        children = kill_the_supervisor(server, 3)
        assert wait_until(lambda: not any(alive(pid) for pid in children), GONE), {
            pid: alive(pid) for pid in children
        }
        assert wait_until(lambda: refuses(server.port), GONE)
        # every process holding its pipes is gone: they read to their end
        output, errors = server.process.communicate(timeout=30)
    finally:
        stop_what_is_left(server, children)
    assert password not in output + errors
    dbname = pg_url.split("@/", 1)[1].split("?", 1)[0]
    started = [line for line in errors.splitlines() if "listening on" in line]
    assert len(started) == 2, errors
    for line in started:
        match = re.fullmatch(
            r"devs serve: worker (\d+) listening on (\S+) \((.*)\)", line
        )
        assert match, line
        assert int(match[1]) in children
        assert match[2] == server.url
        assert f"PostgreSQL {dbname}" in match[3]
        assert f"devs-recovery {VERSION}" in match[3]
    [projector] = [line for line in errors.splitlines() if "read models of" in line]
    match = re.fullmatch(
        r"devs serve: projector (\d+) keeping the read models of (.*) \((.*)\)",
        projector,
    )
    assert match, projector
    assert int(match[1]) in children
    assert match[2].startswith(f"PostgreSQL {dbname} on /")  # the socket's directory
    assert match[3] == f"devs-recovery {VERSION}"


def serve_and_get(tmp_path: Path, env: dict[str, str]) -> tuple[str, str]:
    """A ``devs serve --workers 2`` that answers a few requests, then is
    stopped: its stdout and stderr."""
    db = tmp_path / "state.sqlite"
    server = Server(db, "--workers", "2", env=env)
    try:
        assert wait_until(lambda: listening(server.port) == 2, 30)
        assert server.client.post("/tasks", json={"task_id": "t1"}).status_code == 201
        listed = server.client.get("/tasks", params={"after": "1"})
        assert listed.status_code == 200
        anonymous = httpx.get(f"{server.url}/tasks", timeout=10)
        assert anonymous.status_code == 401
    finally:
        server.client.close()
        server.process.terminate()
        output, errors = server.process.communicate(timeout=60)
    assert server.process.returncode == 0, errors
    assert TOKEN not in output + errors
    started = [line for line in errors.splitlines() if "listening on" in line]
    assert len(started) == 2, errors  # one line per worker
    for line in started:
        assert line.startswith("devs serve: worker ")
        assert f"listening on {server.url} (SQLite {db}, devs-recovery {VERSION})" in (
            line
        )
    return output, errors


def test_the_access_log_is_on_with_the_setting(tmp_path: Path) -> None:
    output, _ = serve_and_get(tmp_path, {"DEVS_ACCESS_LOG": "1"})
    lines = output.splitlines()
    # the Common Log Format: host ident authuser [time] "request" status size
    clf = r'127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] "%s" %s -'
    for request, status in [
        ("POST /tasks HTTP/1.1", "201"),
        (r"GET /tasks\?after=1 HTTP/1.1", "200"),
        ("GET /tasks HTTP/1.1", "401"),
    ]:
        pattern = clf % (request, status)
        assert any(re.fullmatch(pattern, line) for line in lines), (pattern, output)
    assert '"GET /healthz' in output  # the test's own wait for the server


def test_the_access_log_is_off_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEVS_ACCESS_LOG", raising=False)
    output, errors = serve_and_get(tmp_path, {})
    assert "HTTP/1.1" not in output + errors


def run_script(script: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_child_whose_parent_died_before_it_asked_stops_at_once() -> None:
    """A parent that died before its child asked for the parent-death signal
    sends none: the child sees that its parent is not the one expected."""
    child = run_script(
        """
        import os, time
        from devs.adapters.serving import die_with_parent
        die_with_parent(os.getppid() + 100000)  # not its parent: gone already
        time.sleep(30)
        """
    )
    _, errors = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGTERM, errors


def test_without_prctl_a_thread_watches_the_parent() -> None:
    """Where the kernel sends no parent-death signal, a thread notices the
    parent has gone and stops its process all the same."""
    parent = run_script(
        f"""
        import subprocess, sys
        child = subprocess.Popen(
            [sys.executable, "-c", {WATCHED!r}],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        print(child.pid, child.stdout.readline().strip(), flush=True)
        # and this parent exits: the child is an orphan
        """
    )
    output, errors = parent.communicate(timeout=60)
    assert parent.returncode == 0, errors
    pid, ready = output.split()
    child = int(pid)
    try:
        assert ready == "watching"
        assert wait_until(lambda: not alive(child), GONE)
    finally:
        kill_left({child})


WATCHED = """
import os, time
from devs.adapters import serving
serving.parent_death_signal = lambda signum: False  # as where prctl is not
serving.die_with_parent(os.getppid())
print("watching", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_ends_open_streams_at_once(tmp_path: Path, workers: str) -> None:
    """uvicorn waits for every open response before it exits, and a
    notification stream never ends: SIGTERM took until the supervisor's 30 s
    grace ran out. Now the streams end at once and the server exits."""
    from tests.e2e.test_serve_outage import follow, next_line

    server = Server(tmp_path / "state.sqlite", "--workers", workers)
    lines: queue.Queue[str | None] = queue.Queue()
    try:
        reader = follow(server, lines)
        next_line(lines, "retry:", 30)
        started = time.monotonic()
        server.process.terminate()
        server.process.communicate(timeout=60)
        took = time.monotonic() - started
        reader.join(30)
        assert not reader.is_alive()  # the stream ended
        assert took < 15, took  # 30 s and more before
    finally:
        server.client.close()
        if server.process.poll() is None:
            server.process.kill()
            server.process.communicate(timeout=30)


def test_the_start_line_names_the_store_the_assembly_opens() -> None:
    """With eventsourcing's own POSTGRES_* settings and no URL, PostgreSQL is
    opened (the assembly), and the line said SQLite; never the password."""
    from devs.adapters.config import Settings
    from devs.adapters.serving import store_of

    environ = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_HOST": "db.internal",
        "POSTGRES_PORT": "6432",
        "POSTGRES_DBNAME": "devs",
        "POSTGRES_USER": "devs",
        "POSTGRES_PASSWORD": "s3cret-pw",
    }
    line = store_of(Settings.from_environ(environ), environ)
    assert line == "PostgreSQL devs on db.internal:6432"
    url = {"DEVS_DATABASE_URL": "postgresql://u:pw-secret@h:5433/d"}
    assert store_of(Settings.from_environ(url), url) == "PostgreSQL d on h:5433"
    assert store_of(Settings.from_environ({}), {}).startswith("SQLite /")
