"""The hook server's socket in the agent's hands: a caller that connects and
says nothing, one that trickles its request a byte a second, a flood of
connections, a header nested past Python's recursion limit. Against the real
server process, started by a real ``devs hook claude-code`` call; the calls
measured are real ``devs hook`` processes too (docs/agents.md, "How long a
hook call takes")."""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from devs.adapters.hooks import server as hook_server
from devs.adapters.hooks.client import ask, call_environ, frame
from tests.e2e.test_hook_server import Calls
from tests.integration.test_hooks import fixture

CALL_MAX = 8.0
"""Seconds a hook call may take here at the most, on a loaded machine (about
0.1 s alone). A call the server does not answer takes the client's own
timeout, ``DEVS_HOOK_TIMEOUT`` + 2 = 12 s, and fails."""


def trickled() -> bytes:
    """A request whose header alone is a thousand bytes long: a quarter of
    an hour at a byte a second."""
    return frame({"agent": "claude-code", "environ": {}, "pad": "x" * 1000}, b"{}")


class Holder(threading.Thread):
    """Keeps a connection to the server open, sending nothing (or one byte
    of :func:`trickled` a second), and opens another whenever the server
    drops it, until stopped."""

    def __init__(self, path: Path, *, trickle: bool) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.trickle = trickle
        self.connected = threading.Event()
        self.stopped = threading.Event()
        self.connections = 0

    def run(self) -> None:
        while not self.stopped.is_set():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as held:
                held.settimeout(1.0)
                held.connect(str(self.path))
                self.connections += 1
                self.connected.set()
                self.hold(held)

    def hold(self, held: socket.socket) -> None:
        payload = trickled()
        sent = 0
        while not self.stopped.is_set():
            try:
                if self.trickle and sent < len(payload):
                    held.send(payload[sent : sent + 1])
                    sent += 1
                held.recv(4096)  # an answer or the end: dropped
            except TimeoutError:
                continue
            except OSError:
                pass
            return

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=30)


def started(tmp_path: Path) -> tuple[Calls, int, Path]:
    calls = Calls(tmp_path)
    assert calls.hook(fixture("claude-code", "SessionStart")).returncode == 0
    pid = calls.wait_for_server()
    (path,) = calls.sockets()
    return calls, pid, path


def timed(calls: Calls, n: int) -> list[tuple[subprocess.CompletedProcess[str], float]]:
    """Gate failure ``n`` as ``Calls.failure`` makes it (an edit, then a
    failing ``pytest``): each call and its seconds."""
    edit = fixture("claude-code", "PostToolUse-Write")
    edit["tool_input"] = {"file_path": f"{calls.repo}/f{n}.py", "content": "x" * n}
    failure = fixture("claude-code", "PostToolUseFailure-Bash")
    failure["tool_input"] = {"command": "pytest"}
    failure["error"] = f"Exit code 1\nE   assert {n} == 0"
    made = []
    for event in (edit, failure):
        begun = time.monotonic()
        done = calls.hook(event)
        made.append((done, time.monotonic() - begun))
    return made


@pytest.mark.waits  # calls wait out the 5 s read deadline
def test_a_silent_and_a_trickling_caller_delay_no_gate_failure(
    tmp_path: Path,
) -> None:
    """Issue 35, point 9. The old server read one call at a time with no
    deadline: each of these calls waited 12.5-12.9 s for the caller ahead of
    it, failed ("the hook server did not answer"), and the agent never heard
    its ``continue: false``. Here about 0.1 s each."""
    calls, pid, path = started(tmp_path)
    holders = [Holder(path, trickle=False), Holder(path, trickle=True)]
    for holder in holders:
        holder.start()
        assert holder.connected.wait(30)
    try:
        made = [timed(calls, n) for n in range(1, 4)]
    finally:
        for holder in holders:
            holder.stop()
    seconds = [round(took, 2) for failure in made for _, took in failure]
    for failure in made:
        for done, _ in failure:
            assert done.returncode == 0, (done.stderr, seconds)
    assert max(seconds) < CALL_MAX, seconds
    for n, (_, (done, _)) in enumerate(made[:2], start=1):
        assert f"{n} in a row" in done.stdout
    # The third failure in a row halts the agent, and it hears it.
    halted = json.loads(made[2][1][0].stdout)
    assert halted["continue"] is False, halted
    assert calls.failures() == 3
    assert calls.server_pid() == pid  # the server answered them all


@pytest.mark.waits  # waits out the 5 s read deadline
def test_a_stalled_caller_is_dropped_after_the_deadline(tmp_path: Path) -> None:
    """Silent or trickling, a connection has ``READ_DEADLINE`` seconds for its
    whole request, then is told so and closed (the old server: 30 s for the
    silent one, as long as it kept trickling for the other)."""
    _, pid, path = started(tmp_path)
    payload = trickled()
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    trickling = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    begun = time.monotonic()
    silent.connect(str(path))
    trickling.connect(str(path))
    dropped: dict[socket.socket, tuple[float, bytes]] = {}
    try:
        sent = 0
        while len(dropped) < 2 and time.monotonic() - begun < 60:
            if trickling not in dropped and sent < len(payload):
                # Once dropped, its answer waits to be read all the same.
                with contextlib.suppress(OSError):
                    sent += trickling.send(payload[sent : sent + 1])
            waiting = [s for s in (silent, trickling) if s not in dropped]
            readable, _, _ = select.select(waiting, [], [], 1.0)
            for ended in readable:
                dropped[ended] = (time.monotonic() - begun, ended.recv(65536))
    finally:
        silent.close()
        trickling.close()
    deadline = hook_server.READ_DEADLINE
    assert len(dropped) == 2, dropped
    for took, said in dropped.values():
        # Not before the deadline, and soon after it (the old server held a
        # silent caller 30 s, a trickling one as long as it kept trickling).
        assert deadline * 0.95 <= took < deadline + 15, dropped
        answer = json.loads(said)
        assert answer["code"] == 1
        assert f"not read within {deadline:g} s" in answer["stderr"]
    assert sent >= deadline * 0.95  # it trickled till then
    assert os.path.exists(f"/proc/{pid}")


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def ask_failure(calls: Calls, path: Path, n: int) -> dict[str, Any]:
    """Gate failure ``n`` asked of the server at ``path`` itself, as the
    installed hook asks it: no fallback in process here."""
    header = {"agent": "claude-code", "environ": call_environ(calls.env)}
    header["cwd"] = str(calls.repo)
    edit = fixture("claude-code", "PostToolUse-Write")
    edit["tool_input"] = {"file_path": f"{calls.repo}/f{n}.py", "content": "x" * n}
    edit["cwd"] = str(calls.repo)
    assert ask(path, frame(header, json.dumps(edit).encode()), 30)["code"] == 0
    failure = fixture("claude-code", "PostToolUseFailure-Bash")
    failure["tool_input"] = {"command": "pytest"}
    failure["error"] = f"Exit code 1\nE   assert {n} == 0"
    failure["cwd"] = str(calls.repo)
    return ask(path, frame(header, json.dumps(failure).encode()), 30)


@pytest.mark.waits  # waits out the 5 s read deadline
def test_a_flood_of_connections_neither_ends_nor_exhausts_the_server(
    tmp_path: Path,
) -> None:
    """Four times ``MAX_CONNECTIONS`` connections, silent, half-sent or
    announcing a 4 GiB header: the server keeps at most the bound of them,
    still answers a call meanwhile and afterwards, and leaks nothing."""
    calls, pid, path = started(tmp_path)
    assert ask_failure(calls, path, 1)["code"] == 0  # the store is open
    before = descriptors(pid)
    bound = hook_server.MAX_CONNECTIONS
    flood: list[socket.socket] = []
    try:
        give_up = time.monotonic() + 60
        while len(flood) < 4 * bound and time.monotonic() < give_up:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.setblocking(False)
            try:
                connection.connect(str(path))
            except OSError:  # the backlog is full: again, once it is taken
                connection.close()
                time.sleep(0.01)
                continue
            flood.append(connection)
            with contextlib.suppress(OSError):
                if len(flood) % 3 == 1:  # a header said to be 4 GiB
                    connection.send(b"\xff\xff\xff\xff")
                elif len(flood) % 3 == 2:  # the start of a header, no more
                    connection.send(trickled()[:100])
        assert len(flood) == 4 * bound
        # While the flood holds its connections, a call is answered by the
        # server (having taken the flood before it: the backlog is in order
        # of connection), which keeps no more than the bound of them.
        answered = ask_failure(calls, path, 2)
        assert answered["code"] == 0, answered
        assert "2 in a row" in str(answered["stdout"])
        assert descriptors(pid) <= before + bound + 4
        # Each connection of the flood is dropped (the oldest first, for the
        # newer ones; the newest at the deadline), none left hanging.
        waiting = list(flood)
        give_up = time.monotonic() + hook_server.READ_DEADLINE + 30
        while waiting and time.monotonic() < give_up:
            readable, _, _ = select.select(waiting, [], [], 1.0)
            waiting = [c for c in waiting if c not in readable]
        assert waiting == []
    finally:
        for connection in flood:
            connection.close()
    third = timed(calls, 3)  # real hook calls, as the agent makes them
    assert all(made.returncode == 0 for made, _ in third), third
    assert json.loads(third[1][0].stdout)["continue"] is False
    assert calls.server_pid() == pid
    assert descriptors(pid) <= before + 4


def test_a_header_nested_past_the_recursion_limit_is_a_bad_request(
    tmp_path: Path,
) -> None:
    """``json`` raises ``RecursionError``, not a ``ValueError``: the old
    server ended on it, and the next calls went unanswered."""
    calls, pid, path = started(tmp_path)
    nested = b"[" * 200_000
    request = len(nested).to_bytes(4, "big") + nested + (2).to_bytes(8, "big") + b"{}"
    answer = ask(path, request, 30)
    assert answer["code"] == 1
    assert "a bad request to the hook server" in str(answer["stderr"])
    assert calls.server_pid() == pid
    assert ask_failure(calls, path, 1)["code"] == 0
