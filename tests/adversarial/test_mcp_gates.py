"""The agent as attacker through MCP ``run_gate``: ``devs mcp`` (stdio) and
``/mcp`` of a real ``devs serve``, each against a real SQLite store.

The agent's token answers for the agent only: a gate command that runs
``devs`` on the store (to add an operator, to start or resume a task under a
person's name) fails and leaves the store as it was. Where bubblewrap cannot
sandbox, an agent's gate is refused unless the operator allowed it. The
memory, CPU and time bounds are tool parameters, capped by the server.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from devs.adapters.gate_run import command_line
from tests import devs_process
from tests.e2e.test_mcp import DEVS, Connect, http, stdio, text
from tests.e2e.test_serve import TOKEN, Server
from tests.e2e.test_without_bwrap import path_without_bwrap
from tests.helpers import event_count, require_bwrap

PY = sys.executable


@pytest.fixture
def base() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="devs-adv-mcp-", dir="/var/tmp")).resolve()
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


def operators(db: Path) -> list[Any]:
    shown = devs_process.run(
        [DEVS, "--db", str(db), "operator", "list", "--json"], check=True
    )
    found: list[Any] = json.loads(shown.stdout)
    return found


def connection(
    kind: str, db: Path, work: Path, env: dict[str, str] | None = None
) -> tuple[Connect, Server | None]:
    """A client of ``devs mcp`` or of ``/mcp`` in ``devs serve``, started in
    ``work`` (its working directory: where run_gate runs by default)."""
    if kind == "stdio":
        connect = stdio(db, work)
        if env:
            return with_env(connect, db, work, env), None
        return connect, None
    server = Server(db, cwd=work, env=env)
    return http(server.url, TOKEN), server


def with_env(_: Connect, db: Path, work: Path, env: dict[str, str]) -> Connect:
    from contextlib import asynccontextmanager

    from mcp import ClientSession, StdioServerParameters, stdio_client

    @asynccontextmanager
    async def connect() -> Any:
        params = StdioServerParameters(
            command=DEVS,
            args=["--db", str(db), "mcp", "--workdir", str(work)],
            env={**os.environ, **env},
        )
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session

    return connect


async def call(connect: Connect, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    results = []
    async with connect() as session:
        for name, arguments in calls:
            results.append(await session.call_tool(name, arguments))
    return results


def ask(
    kind: str,
    db: Path,
    work: Path,
    *calls: tuple[str, dict[str, Any]],
    env: dict[str, str] | None = None,
) -> list[Any]:
    """The tools' answers to ``calls``, made in one session of a server
    started in ``work`` (stopped afterwards)."""
    connect, server = connection(kind, db, work, env=env)
    try:
        return anyio.run(call, connect, *calls)
    finally:
        if server is not None:
            server.stop()


def forge(db: Path) -> list[list[str]]:
    """Gate commands that answer for people with the agent's own access:
    through ``devs``, and through SQLite itself (deleting the task's start)."""
    erase = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
        "c.execute('DELETE FROM stored_events WHERE originator_version = 1'); "
        "c.commit()"
    )
    return [
        [DEVS, "--db", str(db), "operator", "add", "mallory", "--actor", "alice"],
        [DEVS, "--db", str(db), "task", "start", "forged", "--agent", "alice"],
        [PY, "-c", erase, str(db)],
    ]


@pytest.mark.parametrize("kind", ["stdio", "http"])
def test_a_gate_command_cannot_write_the_store(base: Path, kind: str) -> None:
    require_bwrap()
    work = base / "project"
    (work / "state").mkdir(parents=True)
    db = work / "state" / "devs_state.sqlite"
    devs_process.run([DEVS, "--db", str(db), "task", "start", "t1"], check=True)
    results = ask(
        kind,
        db,
        work,
        *(("run_gate", {"task_id": "t1", "command": c}) for c in forge(db)),
    )
    for result in results:
        assert not result.is_error, text(result)
        assert result.structured_content["exit_code"] != 0, text(result)
        assert result.structured_content["isolation"] == "bwrap"
    assert operators(db) == []
    shown = devs_process.run([DEVS, "--db", str(db), "task", "show", "forged"])
    assert shown.returncode != 0  # no such task
    with sqlite3.connect(db) as store:
        topics = [t for (t,) in store.execute("SELECT topic FROM stored_events")]
    # Started, the three failures and what the ladder made of them: the
    # referee's own writes only.
    assert topics[:4] == ["devs:Task.Started", *["devs:Task.GateFailed"] * 3]
    assert all(topic.startswith("devs:Task.") for topic in topics), topics


@pytest.mark.parametrize("kind", ["stdio", "http"])
def test_a_gate_never_runs_in_the_store_folder_unless_asked(
    base: Path, kind: str
) -> None:
    """The default layout: the server started where its store is."""
    require_bwrap()
    db = base / "devs_state.sqlite"
    devs_process.run([DEVS, "--db", str(db), "task", "start", "t1"], check=True)
    command = forge(db)[0]
    refused, asked, outside = ask(
        kind,
        db,
        base,
        ("run_gate", {"task_id": "t1", "command": command}),
        ("run_gate", {"task_id": "t1", "command": command, "in_store_folder": True}),
        ("run_gate", {"task_id": "t1", "command": ["true"], "cwd": "/etc"}),
    )
    assert refused.is_error
    assert "invalid_input (field cwd)" in text(refused)
    assert "holds the referee's store 'devs_state.sqlite'" in text(refused)
    assert "in_store_folder" in text(refused)
    assert not asked.is_error, text(asked)
    assert asked.structured_content["exit_code"] != 0
    assert outside.is_error
    assert "is not inside the server's working directory" in text(outside)
    assert operators(db) == []
    assert not Path(f"{db}-journal").exists()
    assert event_count(db) == 2  # Started, and the failure asked for


@pytest.mark.parametrize("kind", ["stdio", "http"])
def test_without_bwrap_an_agents_gate_is_refused_unless_allowed(
    base: Path, kind: str
) -> None:
    work = base / "project"
    work.mkdir()
    db = base / "store" / "devs_state.sqlite"
    db.parent.mkdir()
    devs_process.run([DEVS, "--db", str(db), "task", "start", "t1"], check=True)
    no_bwrap = {"PATH": path_without_bwrap(base / "bin")}
    marker = work / "ran"
    touch = [PY, "-c", f"open({str(marker)!r}, 'w').close()"]
    (refused,) = ask(
        kind, db, work, ("run_gate", {"task_id": "t1", "command": touch}), env=no_bwrap
    )
    assert refused.is_error
    assert "refused" in text(refused)
    assert "bwrap is not installed" in text(refused)
    assert "DEVS_DANGEROUSLY_ALLOW_UNSANDBOXED_GATES=1" in text(refused)
    assert not marker.exists()
    assert event_count(db) == 1

    allowed = {**no_bwrap, "DEVS_DANGEROUSLY_ALLOW_UNSANDBOXED_GATES": "1"}
    show = [PY, "-c", "import os; print(sorted(os.environ)); raise SystemExit(2)"]
    (ran,) = ask(
        kind, db, work, ("run_gate", {"task_id": "t1", "command": show}), env=allowed
    )
    assert not ran.is_error, text(ran)
    result = ran.structured_content
    assert result["isolation"] == "none"
    assert "bwrap is not installed" in result["fallback"]
    assert "DEVS_" not in result["output_tail"]  # the API token above all
    assert event_count(db) == 2


def test_the_bounds_are_offered_and_capped(base: Path) -> None:
    work = base / "project"
    work.mkdir()
    db = base / "store" / "devs_state.sqlite"
    db.parent.mkdir()
    devs_process.run([DEVS, "--db", str(db), "task", "start", "t1"], check=True)
    env = {
        "DEVS_GATE_MAX_TIMEOUT": "30",
        "DEVS_GATE_MAX_MEMORY_MB": "512",
        "DEVS_GATE_MAX_CPU_SECONDS": "20",
        # bwrap or not, the bounds hold: this test is not about the sandbox.
        "DEVS_DANGEROUSLY_ALLOW_UNSANDBOXED_GATES": "1",
    }
    hog = [PY, "-c", "b = bytearray(700 * 1024 * 1024); print('took it')"]

    async def session() -> tuple[dict[str, Any], list[Any]]:
        async with with_env(stdio(db, work), db, work, env)() as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            schema = tools["run_gate"].input_schema["properties"]
            answers = [
                await client.call_tool("run_gate", {"task_id": "t1", **arguments})
                for arguments in (
                    {"command": ["true"], "timeout": 31},
                    {"command": ["true"], "memory_mb": 513},
                    {"command": ["true"], "cpu_seconds": 21},
                    {"command": hog},
                    {"command": hog, "memory_mb": 256},
                )
            ]
            return schema, answers

    schema, answers = anyio.run(session)
    assert schema["timeout"]["maximum"] == 30
    assert (schema["memory_mb"]["maximum"], schema["memory_mb"]["default"]) == (
        512,
        512,
    )
    assert (schema["cpu_seconds"]["maximum"], schema["cpu_seconds"]["default"]) == (
        20,
        20,
    )
    for answer, field in zip(
        answers[:3], ("timeout", "memory_mb", "cpu_seconds"), strict=True
    ):
        assert answer.is_error, text(answer)
        assert field in text(answer), text(answer)
    for answer in answers[3:]:  # the default bound holds, and a smaller one
        assert not answer.is_error, text(answer)
        assert answer.structured_content["exit_code"] != 0
        assert "MemoryError" in answer.structured_content["output_tail"]
    assert event_count(db) == 3  # the refused calls recorded nothing


def test_a_wrong_gate_setting_is_each_calls_error(base: Path) -> None:
    work = base / "project"
    work.mkdir()
    db = base / "store" / "devs_state.sqlite"
    db.parent.mkdir()
    devs_process.run([DEVS, "--db", str(db), "task", "start", "t1"], check=True)
    connect = with_env(stdio(db, work), db, work, {"DEVS_GATE_MAX_TIMEOUT": "forever"})
    (answer,) = anyio.run(
        call, connect, ("run_gate", {"task_id": "t1", "command": ["true"]})
    )
    assert answer.is_error
    assert "invalid_input (field DEVS_GATE_MAX_TIMEOUT)" in text(answer)
    assert event_count(db) == 1


# Swaps ``sub`` (a folder) and ``lnk`` (a symlink to the store's folder) in
# the server's working directory, as fast as it can, until ``stop`` appears.
SWAP = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
end = time.monotonic() + 90
while time.monotonic() < end and not os.path.exists("stop"):
    for _ in range(200):
        libc.renameat2(-100, b"sub", -100, b"lnk", 2)  # RENAME_EXCHANGE
print("swapped")
"""
TRIES = 100
PLANT_HERE = "test -f devs_state.sqlite || exit 1; touch devs_state.sqlite-journal"


def test_a_gate_swapping_its_cwd_for_a_symlink_never_reaches_the_store(
    base: Path,
) -> None:
    """Two gates at once (the MCP SDK runs tool calls concurrently): one swaps
    ``sub`` with a symlink to the store's folder while the other runs in
    ``cwd: sub``. Whatever instant the swap lands, the second gate runs in the
    folder that was checked, or not at all: the store's folder is never
    mounted writable (before, some tries planted a journal beside the store)."""
    require_bwrap()
    work = base / "project"
    (work / "sub").mkdir(parents=True)
    data = base / "data"
    data.mkdir()
    (work / "lnk").symlink_to(data)
    db = data / "devs_state.sqlite"
    # Every try a failing gate of the same task, none escalates it.
    patient = {"DEVS_ESCALATION_THRESHOLD": "1000", "DEVS_HANDOFF_THRESHOLD": "1000"}
    for task in ("swapper", "t1"):
        subprocess.run(
            [DEVS, "--db", str(db), "task", "start", task],
            check=True,
            env={**os.environ, **patient},
        )
    connect = with_env(stdio(db, work), db, work, patient)
    outcomes: list[str] = []

    async def attack() -> None:
        async with connect() as session, anyio.create_task_group() as group:

            async def swap() -> None:
                await session.call_tool(
                    "run_gate",
                    {"task_id": "swapper", "command": [PY, "-c", SWAP], "timeout": 120},
                )

            group.start_soon(swap)
            await anyio.sleep(1.0)
            try:
                for _ in range(TRIES):
                    answer = await session.call_tool(
                        "run_gate",
                        {
                            "task_id": "t1",
                            "command": ["sh", "-c", PLANT_HERE],
                            "cwd": "sub",
                            "timeout": 30,
                        },
                    )
                    outcomes.append(text(answer)[:200])
                    if Path(f"{db}-journal").exists():
                        break
            finally:
                (work / "stop").touch()

    anyio.run(attack)
    assert not Path(f"{db}-journal").exists(), outcomes
    assert sorted(os.listdir(data)) == ["devs_state.sqlite"], outcomes
    assert len(outcomes) == TRIES
    # Most tries ran (in the folder checked) or were refused as they should
    # be; none failed otherwise.
    ran = [o for o in outcomes if '"exit_code": 1' in o]
    refused = [o for o in outcomes if "invalid_input (field cwd)" in o]
    assert len(ran) + len(refused) == TRIES, outcomes
    assert ran, outcomes


def test_a_multi_line_command_is_recorded_and_a_bad_cwd_is_invalid_input(
    base: Path,
) -> None:
    """A gate named after a ``python -c`` script of several lines: its name
    is one line, so the gate that ran is recorded. A ``cwd`` that cannot be
    resolved (a symlink loop) is an invalid input, not a crash."""
    work = base / "project"
    work.mkdir()
    (work / "loop").symlink_to("loop")
    db = base / "store" / "devs_state.sqlite"
    db.parent.mkdir()
    devs_process.run([DEVS, "--db", str(db), "task", "start", "t1"], check=True)
    env = {"DEVS_DANGEROUSLY_ALLOW_UNSANDBOXED_GATES": "1"}  # not about bwrap
    script = "import sys\nprint('ran')\nsys.exit(3)"
    connect = with_env(stdio(db, work), db, work, env)
    ran, looped = anyio.run(
        call,
        connect,
        ("run_gate", {"task_id": "t1", "command": [PY, "-c", script]}),
        ("run_gate", {"task_id": "t1", "command": ["true"], "cwd": "loop"}),
    )
    assert not ran.is_error, text(ran)
    assert ran.structured_content["exit_code"] == 3
    assert event_count(db) == 2
    shown = subprocess.run(
        [DEVS, "--db", str(db), "task", "show", "t1", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    last = json.loads(shown.stdout)["failure_history"][-1]
    assert last["gate"] == command_line([PY, "-c", script]), last
    assert "-c 'import sys print('\"'\"'ran'\"'\"') sys.exit(3)'" in last["gate"]
    assert looped.is_error
    assert "invalid_input (field cwd)" in text(looped), text(looped)
    assert event_count(db) == 2
