"""The MCP tools' contract, as a client reads it: each command's input is its
domain model's (:mod:`devs.domain.arguments`: limits, patterns, one
description per field), strict and closed; refusals name the field in the
caller's words; annotations say what a tool does; the server says its
version and advertises only what it has."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from importlib import metadata
from typing import Any

import pytest
from mcp import Client

from devs.adapters.config import memory_env, open_service
from devs.adapters.mcp import build_server
from devs.domain import RecoveryService
from devs.domain.arguments import COMMANDS
from tests.helpers import event_count


@pytest.fixture
def served() -> Iterator[RecoveryService]:
    service = open_service(env=memory_env())
    yield service
    service.close()


def ask(service: RecoveryService, work: Any) -> Any:
    async def session() -> Any:
        async with Client(build_server(lambda: service)) as client:
            return await work(client)

    return asyncio.run(session())


def test_each_command_tool_takes_its_domain_models_fields(
    served: RecoveryService,
) -> None:
    async def work(client: Client) -> Any:
        return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in ask(served, work)}
    commands = [name for name in tools if name in COMMANDS]
    assert commands == ["start_task", "begin_attempt", "record_gate",
                        "report_entropy", "log_lesson", "record_usage"]  # fmt: skip
    assert "raise_budget" not in tools  # a person's answer, never an agent's
    for name in commands:
        schema = tools[name].input_schema
        assert schema["additionalProperties"] is False, name
        assert list(schema["properties"]) == list(COMMANDS[name].model_fields), name
        for field, described in schema["properties"].items():
            assert described.get("description"), (name, field)
    exit_code = tools["record_gate"].input_schema["properties"]["exit_code"]
    assert exit_code["anyOf"][0]["maximum"] == 2**32 - 1
    for tool in tools.values():
        assert tool.input_schema["additionalProperties"] is False, tool.name
        for field, described in tool.input_schema["properties"].items():
            assert described.get("description"), (tool.name, field)
        assert tool.annotations is not None, tool.name
    assert tools["task_status"].annotations.read_only_hint is True
    assert tools["lessons"].annotations.read_only_hint is True
    assert tools["record_gate"].annotations.read_only_hint is False
    assert tools["record_gate"].annotations.destructive_hint is False


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (
            {"task_id": "t1", "exit_code": "2"},
            "invalid_input (field exit_code): exit_code must be an integer or "
            "None, got str '2'",
        ),
        (
            {"task_id": "t1", "exit_code": 2, "outptu": "boom"},
            "invalid_input (field outptu): unknown field 'outptu'; did you mean "
            "'output'?",
        ),
        ({"task_id": "t1"}, "invalid_input (field exit_code): exit_code is required"),
        (
            {"task_id": "", "exit_code": 1},
            "invalid_input (field task_id): task_id must not be empty",
        ),
        (
            {"task_id": "t1", "exit_code": 2**40},
            "invalid_input (field exit_code): exit_code 1099511627776 is out of "
            "range [-2147483648, 4294967295]",
        ),
    ],
)
def test_a_refused_argument_is_a_tool_error_in_the_callers_words(
    served: RecoveryService, arguments: dict[str, Any], words: str
) -> None:
    served.start_task("t1")
    before = event_count(served)

    async def work(client: Client) -> Any:
        return await client.call_tool("record_gate", arguments)

    answer = ask(served, work)
    assert answer.is_error
    text = answer.content[0].text
    assert words in text, text
    assert "pydantic" not in text
    assert "validation error for" not in text
    assert event_count(served) == before


def test_a_valid_call_is_recorded_with_its_output(served: RecoveryService) -> None:
    served.start_task("t1")

    async def work(client: Client) -> Any:
        return await client.call_tool(
            "record_gate", {"task_id": "t1", "exit_code": 2, "output": "E boom"}
        )

    answer = ask(served, work)
    assert not answer.is_error, answer.content
    assert answer.structured_content["exit_code"] == 2
    assert served.failure_report("t1").failure_count == 1


def test_the_server_says_its_version_and_advertises_only_tools(
    served: RecoveryService,
) -> None:
    async def work(client: Client) -> Any:
        return client.server_info, client.server_capabilities

    info, capabilities = ask(served, work)
    assert info is not None
    assert info.version == metadata.version("devs-recovery")
    assert capabilities.tools is not None
    assert capabilities.prompts is None
    assert capabilities.resources is None
