"""``devs serve --workers N``: each worker its own socket, under a supervisor."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from devs.adapters.config import DEFAULT_NICENESS, Settings
from devs.adapters.serving import listening_socket
from tests.e2e.test_serve import DEVS, Server, free_port
from tests.helpers import wait_until


def workers_of(pid: int) -> set[int]:
    """The supervisor's worker processes (not multiprocessing's tracker)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == pid and b"spawn_main" in command:
            found.add(int(entry.name))
    return found


def replaced(pid: int, dead: int, before: set[int]) -> bool:
    """Whether the supervisor ``pid`` has started another process in place
    of ``dead``: one reading of /proc (two could see ``dead`` still listed,
    then gone, before anything replaced it), and a pid not seen before."""
    now = workers_of(pid)
    return len(now) == len(before) and dead not in now and bool(now - before)


def answers(server: Server, path: str, params: dict[str, str]) -> int | None:
    """The status of one GET, None when it timed out (to be asked again)."""
    try:
        return server.client.get(path, params=params).status_code
    except httpx.TransportError:
        return None


def niceness(pid: int) -> int:
    """A process's nice value (/proc/PID/stat, field 19)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, DEFAULT_NICENESS), ("", DEFAULT_NICENESS), ("0", 0), (" 19 ", 19)],
)
def test_worker_niceness_reads_the_setting(value: str | None, expected: int) -> None:
    environ = {} if value is None else {"DEVS_WORKER_NICENESS": value}
    assert Settings.from_environ(environ).worker_niceness == expected


def listening_inodes(port: int) -> set[str]:
    """The inodes of the sockets listening on ``port`` (/proc/net/tcp, state 0A)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port:
            found.add(fields[9])
    return found


def listening(port: int) -> int:
    """How many sockets listen on ``port``."""
    return len(listening_inodes(port))


def listeners(pids: set[int], port: int) -> set[int]:
    """Which of ``pids`` hold a socket listening on ``port``."""
    inodes = {f"socket:[{inode}]" for inode in listening_inodes(port)}
    found = set()
    for pid in pids:
        try:
            links = {os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()}
        except OSError:
            continue
        if links & inodes:
            found.add(pid)
    return found


def test_a_workers_socket_sets_nodelay_and_shares_its_port() -> None:
    """Protocol IPPROTO_TCP: asyncio sets TCP_NODELAY on what it accepts
    (uvicorn's shared socket has protocol 0, and its connections do not)."""
    first = listening_socket("127.0.0.1", 0, reuse_port=True)
    port = first.getsockname()[1]
    second = listening_socket("127.0.0.1", port, reuse_port=True)
    try:
        for sock in (first, second):
            assert sock.proto == socket.IPPROTO_TCP
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        first.listen()
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = first.accept()
            with accepted:
                assert accepted.proto == socket.IPPROTO_TCP
                assert client.getsockname()
    finally:
        first.close()
        second.close()


def test_a_dead_worker_is_replaced_and_sigterm_stops_all(tmp_path: Path) -> None:
    server = Server(tmp_path / "state.sqlite", "--workers", "2")
    try:
        # both workers up and listening (the first answers /healthz alone)
        assert wait_until(lambda: len(workers_of(server.process.pid)) == 2, 30)
        assert wait_until(lambda: listening(server.port) == 2, 30)
        before = workers_of(server.process.pid)
        # no projector on SQLite: nothing for the workers to yield to
        assert {niceness(pid) for pid in before} == {niceness(server.process.pid)}
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        assert wait_until(lambda: replaced(server.process.pid, victim, before), 30)
        # The killed worker's connections died with it (the client's
        # keep-alive one may have been one): new connections, to the others.
        server.client.close()
        server.client = httpx.Client(
            base_url=server.url, headers=server.client.headers, timeout=10
        )
        for number in range(6):
            started = server.client.post("/tasks", json={"task_id": f"t{number}"})
            assert started.status_code == 201
        server.process.send_signal(signal.SIGTERM)
        output, errors = server.process.communicate(timeout=30)
        assert f"worker {victim} exited with -9; starting another" in errors, (
            before,
            output,
            errors,
        )
        assert server.process.returncode == 0
        for pid in before - {victim}:  # stopped, and reaped by the supervisor
            assert not Path(f"/proc/{pid}").exists()
    finally:
        if server.process.poll() is None:
            server.stop()
        server.client.close()


def serve(db: Path, port: int, workers: str) -> subprocess.CompletedProcess[str]:
    """``devs serve`` that is expected not to start (its port is taken)."""
    return subprocess.run(
        [DEVS, "--db", str(db), "serve", "--port", str(port), "--workers", workers],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_taken_port_is_one_line(tmp_path: Path, workers: str) -> None:
    port = free_port()
    taken = socket.socket()
    taken.bind(("127.0.0.1", port))
    taken.listen()
    try:
        result = serve(tmp_path / "x.sqlite", port, workers)
    finally:
        taken.close()
    assert result.returncode == 8, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in lines[0]
    assert "Address already in use" in lines[0]


def test_on_postgresql_a_projector_process_keeps_the_read_models(
    tmp_path: Path, pg_url: str
) -> None:
    """Beside the workers (which run no runner, DEVS_WORKER_NICENESS nicer
    than it), a projector process folds the log; killed, it is started again
    and the reads catch up."""
    server = Server(
        tmp_path / "unused.sqlite",
        "--workers",
        "2",
        env={"DEVS_DATABASE_URL": pg_url, "DEVS_WORKER_NICENESS": "3"},
    )
    try:
        assert wait_until(lambda: len(workers_of(server.process.pid)) == 3, 30)
        # a worker listens once it has made itself nicer
        assert wait_until(lambda: listening(server.port) == 2, 30)
        children = workers_of(server.process.pid)
        for pid in children:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert b"DEVS_PROJECTIONS=external" in environ
        (projector,) = children - listeners(children, server.port)  # listens on none
        base = niceness(server.process.pid)
        assert niceness(projector) == base
        assert {niceness(pid) for pid in children - {projector}} == {base + 3}
        started = server.client.post("/tasks", json={"task_id": "t1"})
        after = {"after": started.headers["X-Devs-Position"]}
        assert wait_until(lambda: answers(server, "/tasks", after) == 200, 60)
        os.kill(projector, signal.SIGKILL)
        assert wait_until(lambda: replaced(server.process.pid, projector, children), 30)
        written = server.client.post("/tasks", json={"task_id": "t2"})
        after = {"after": written.headers["X-Devs-Position"]}
        # The new projector starts Python and folds before the read answers:
        # more than DEVS_READ_WAIT on a loaded machine (then 503/504: again).
        assert wait_until(lambda: answers(server, "/tasks", after) == 200, 60)
        tasks = server.client.get("/tasks", params=after)
        assert tasks.status_code == 200, tasks.text
        assert {e["task_id"] for e in tasks.json()} == {"t1", "t2"}
    finally:
        server.client.close()
        server.process.terminate()
        _, errors = server.process.communicate(timeout=30)
    assert f"devs serve: projector {projector} exited with -9" in errors


def test_a_second_server_on_the_same_port_is_refused(tmp_path: Path) -> None:
    """SO_REUSEPORT must not let a second `devs serve` join the first one's
    workers on their port."""
    first = Server(tmp_path / "a.sqlite", "--workers", "2")
    try:
        result = serve(tmp_path / "b.sqlite", first.port, "2")
        assert result.returncode == 8, result.stderr
        assert "Address already in use" in result.stderr
        assert first.client.get("/healthz").status_code == 200
    finally:
        first.stop()
