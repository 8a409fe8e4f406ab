"""A fake OpenAI Responses API (``POST /v1/responses``, streamed as server-sent
events) that plays a :class:`~tests.agents.script.Script`.

This module is the wire protocol alone: it reads a request's ``input`` and
``tools``, counts the tool results already in the conversation, asks the
script for the step, and streams the step as Responses events
(``response.created``, ``response.output_item.added`` / ``.done``,
``response.completed``). Which tool a step becomes, and with which
arguments, is the agent's business: a subclass says it in :meth:`call_for`
(Codex's in ``codex.py``; Copilot CLI reuses this handler the same way).

Requests on the side:

- ``POST …/responses`` with ``"stream": false``: the same response as one
  JSON object;
- ``GET …/models``: an empty model list (``{"object": "list", "data": [],
  "models": []}``); Codex 0.171.0 asks for none;
- any other ``GET`` or ``POST``: ``{}`` with status 200, so a telemetry or
  quota call never fails the run (Codex 0.171.0 makes none of the provider);
- a ``/responses`` request that offers no tools (a title, a summary) is
  answered with plain text, and the script counts it apart.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from tests.agents.script import Handler, Say, Shell, Step, Write

RESULT_TYPES = frozenset(
    {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
)
"""Input items that carry a tool's result back to the model."""

_ids = itertools.count(1)


def fresh_id(prefix: str) -> str:
    """A unique id for a response, an item or a call (unique per process)."""
    return f"{prefix}_{next(_ids):06d}"


def tool_results(body: Mapping[str, Any]) -> int:
    """How many tool results the request's conversation (``input``) holds."""
    items = body.get("input")
    if not isinstance(items, list):
        return 0
    return sum(
        1
        for item in items
        if isinstance(item, dict) and item.get("type") in RESULT_TYPES
    )


def tool_names(body: Mapping[str, Any]) -> list[str]:
    """The names of the tools the request offers the model (function and
    freeform ``custom`` tools alike; a built-in tool by its type)."""
    names = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            name = tool.get("name") or tool.get("type")
            if isinstance(name, str):
                names.append(name)
    return names


def message_item(text: str) -> dict[str, Any]:
    """An assistant message output item."""
    return {
        "type": "message",
        "id": fresh_id("msg"),
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def function_call(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A function tool call (``arguments`` as the JSON text the API sends)."""
    return {
        "type": "function_call",
        "id": fresh_id("fc"),
        "call_id": fresh_id("call"),
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def custom_call(name: str, text: str) -> dict[str, Any]:
    """A freeform (``custom``) tool call: the tool's input is raw text."""
    return {
        "type": "custom_tool_call",
        "id": fresh_id("ctc"),
        "call_id": fresh_id("call"),
        "name": name,
        "input": text,
        "status": "completed",
    }


USAGE = {
    "input_tokens": 100,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 10,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 110,
}


def response_object(model: str, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A completed response holding ``items`` (what ``"stream": false``
    returns, and what ``response.completed`` carries)."""
    return {
        "id": fresh_id("resp"),
        "object": "response",
        "model": model,
        "status": "completed",
        "output": list(items),
        "usage": USAGE,
    }


def response_events(
    model: str, items: Sequence[dict[str, Any]]
) -> list[tuple[str | None, Any]]:
    """A whole streamed response: created, each item added and done (a
    message's text as one delta too), completed."""
    done = response_object(model, items)
    started = {**done, "status": "in_progress", "output": []}
    del started["usage"]
    events: list[tuple[str | None, Any]] = [
        ("response.created", {"type": "response.created", "response": started})
    ]
    for index, item in enumerate(items):
        events.append(
            (
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": item,
                },
            )
        )
        if item["type"] == "message":
            events.append(
                (
                    "response.output_text.delta",
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "delta": item["content"][0]["text"],
                    },
                )
            )
        events.append(
            (
                "response.output_item.done",
                {
                    "type": "response.output_item.done",
                    "output_index": index,
                    "item": item,
                },
            )
        )
    events.append(
        ("response.completed", {"type": "response.completed", "response": done})
    )
    return events


class ResponsesHandler(Handler):
    """The Responses API: ``POST …/responses`` streams the script's step.

    A subclass maps a step to the agent's tool call in :meth:`call_for`; this
    class knows only the protocol.
    """

    current: dict[str, Any]
    """The body of the request being answered (for :meth:`call_for`)."""

    def call_for(self, step: Shell | Write, tools: Sequence[str]) -> dict[str, Any]:
        """The output item (a :func:`function_call` or :func:`custom_call`)
        that asks the agent to run ``step`` with one of the offered
        ``tools``. The agent's own handler says how."""
        msg = f"{type(self).__name__} does not say how to call {step!r} with {tools}"
        raise NotImplementedError(msg)

    def items_for(self, step: Step, tools: Sequence[str]) -> list[dict[str, Any]]:
        """The output items of the response for ``step``."""
        if isinstance(step, Say):
            return [message_item(step.text)]
        return [self.call_for(step, tools)]

    def do_POST(self) -> None:  # noqa: N802 (the http.server name)
        path = self.path.split("?", 1)[0]
        body = self.body()
        if not path.endswith("/responses"):
            self.send_json({})
            return
        self.current = body
        tools = tool_names(body)
        step = self.server.script.answer(path, body, tool_results(body), bool(tools))
        model = body.get("model")
        name = model if isinstance(model, str) else ""
        items = self.items_for(step, tools)
        if body.get("stream") is False:
            self.send_json(response_object(name, items))
        else:
            self.send_events(response_events(name, items))

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        path = self.path.split("?", 1)[0]
        if path.endswith("/models"):
            self.send_json({"object": "list", "data": [], "models": []})
            return
        self.send_json({})
