"""``devs mcp`` (stdio) and ``/mcp`` in ``devs serve`` (streamable HTTP), as an
MCP client meets them: the ``mcp`` package's own client, real processes."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.test_serve import TOKEN, Server

DEVS = str(Path(sys.executable).with_name("devs"))

TOOLS = {
    "start_task",
    "begin_attempt",
    "record_gate",
    "run_gate",
    "report_entropy",
    "log_lesson",
    "record_usage",
    "task_status",
    "lessons",
    "task_spend",
}

Connect = Callable[[], AbstractAsyncContextManager[ClientSession]]


def stdio(db: Path, workdir: Path) -> Connect:
    @asynccontextmanager
    async def connect() -> AsyncIterator[ClientSession]:
        params = StdioServerParameters(
            command=DEVS,
            args=["--db", str(db), "mcp", "--workdir", str(workdir)],
            env={**os.environ, "DEVS_DB": str(db)},
        )
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session

    return connect


def http(url: str, token: str | None) -> Connect:
    @asynccontextmanager
    async def connect() -> AsyncIterator[ClientSession]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as client,
            streamable_http_client(f"{url}/mcp", http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session

    return connect


def text(result: Any) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content)


async def the_tools_work(connect: Connect, gate_command: list[str]) -> None:
    async with connect() as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == TOOLS
        # The input schema is the service's own types: limits included.
        score = tools["report_entropy"].input_schema["properties"]["score"]
        assert (score["minimum"], score["maximum"]) == (0.0, 1.0)
        command = tools["run_gate"].input_schema["properties"]["command"]
        assert command["type"] == "array"

        started = await session.call_tool("start_task", {"task_id": "mcp-1"})
        assert not started.is_error, text(started)
        assert started.structured_content is not None
        assert started.structured_content["state"] == "RUNNING"

        again = await session.call_tool("start_task", {"task_id": "mcp-1"})
        assert again.is_error
        assert "already_exists" in text(again)

        wrong = await session.call_tool(
            "report_entropy", {"task_id": "mcp-1", "score": 7}
        )
        assert wrong.is_error
        assert "score" in text(wrong)

        unknown = await session.call_tool(
            "record_gate", {"task_id": "nobody", "exit_code": 1}
        )
        assert unknown.is_error
        assert "not_found" in text(unknown)
        assert "nobody" in text(unknown)

        attempt = await session.call_tool(
            "begin_attempt", {"task_id": "mcp-1", "strategy": "raise the limit"}
        )
        assert attempt.structured_content is not None
        assert attempt.structured_content["proceed"] is True

        ran = await session.call_tool(
            "run_gate",
            {
                "task_id": "mcp-1",
                "command": gate_command,
                "strategy": "raise the limit",
            },
        )
        assert not ran.is_error, text(ran)
        result = ran.structured_content
        assert result is not None
        assert result["exit_code"] == 3
        assert "boom" in result["output_tail"]
        assert result["decision"]["outcome"] == "stay"
        assert result["decision"]["consecutive_failures"] == 1

        lesson = await session.call_tool(
            "log_lesson",
            {
                "task_id": "mcp-1",
                "failed_strategy": "raise the limit",
                "rca_summary": "the limit is not the cause",
            },
        )
        assert not lesson.is_error, text(lesson)
        refused = await session.call_tool(
            "begin_attempt", {"task_id": "mcp-1", "strategy": "raise the limit"}
        )
        assert refused.structured_content is not None
        assert refused.structured_content["proceed"] is False
        assert refused.structured_content["state"] == "PAUSED"

        status = await session.call_tool("task_status", {"task_id": "mcp-1"})
        assert status.structured_content is not None
        assert status.structured_content["state"] == "PAUSED"
        lessons = await session.call_tool("lessons", {"task_id": "mcp-1"})
        assert "the limit is not the cause" in text(lessons)


def boom_command(tmp_path: Path) -> list[str]:
    script = tmp_path / "work" / "gate.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text("import sys\nprint('boom')\nsys.exit(3)\n")
    return [sys.executable, "gate.py"]


def test_the_tools_over_stdio(tmp_path: Path) -> None:
    command = boom_command(tmp_path)
    connect = stdio(tmp_path / "state.sqlite", tmp_path / "work")
    anyio.run(the_tools_work, connect, command)


@pytest.fixture
def served(tmp_path: Path) -> Any:
    (tmp_path / "work").mkdir()
    running = Server(tmp_path / "state.sqlite", cwd=tmp_path / "work")
    yield running
    running.stop()


def test_the_tools_over_http_behind_the_token(served: Server, tmp_path: Path) -> None:
    command = boom_command(tmp_path)
    anyio.run(the_tools_work, http(served.url, TOKEN), command)
    # The same log: the HTTP API sees what the MCP tools did.
    assert served.client.get("/tasks/mcp-1").json()["state"] == "PAUSED"


def test_mcp_over_http_needs_the_token(served: Server) -> None:
    answer = served.client.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": "Bearer wrong-token-wrong-token"},
    )
    assert answer.status_code == 401
    assert answer.json()["error"] == "unauthorized"


def test_a_server_without_a_token_runs_no_ones_commands(tmp_path: Path) -> None:
    """Without a token anyone on the machine may call /mcp: no run_gate."""

    async def tools() -> set[str]:
        async with http(running.url, None)() as session:
            return {tool.name for tool in (await session.list_tools()).tools}

    running = Server(tmp_path / "state.sqlite", token=None)
    try:
        assert anyio.run(tools) == TOOLS - {"run_gate"}
    finally:
        running.stop()
