"""A scripted model for the real coding agents: the steps a fake model API
returns to Claude Code, Codex, Gemini CLI and Copilot CLI, and what the
agents sent it.

A scenario is a list of steps. Each model request is answered by the step
whose index is the number of tool results already in the request's
conversation, so a request is answered the same however often the agent
retries it, and a session continued after a stop (its history carried over)
goes on where it left off. Past the last step the model says
:data:`DONE` and ends its turn. A request that offers the model no tools (a
title, a summary, a classifier the agent runs on the side) is answered with
plain text and counted apart.

Each protocol's server (``fake_*.py`` beside this file) turns a step into its
wire format: the tool the agent has for a shell command, for writing a file.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DONE = "All done."


@dataclass(frozen=True)
class Shell:
    """Run a shell command with the agent's shell tool."""

    command: str


@dataclass(frozen=True)
class Write:
    """Write a whole file with the agent's file tool (path relative to the
    working directory)."""

    path: str
    content: str


@dataclass(frozen=True)
class Say:
    """Answer with text and end the turn."""

    text: str


Step = Shell | Write | Say


@dataclass
class Request:
    """One request the agent made of the model."""

    path: str
    body: dict[str, Any]
    results: int
    """Tool results in its conversation (the step it was answered with)."""
    tools: bool
    """Whether it offered the model tools (a turn of the agent's loop)."""
    step: Step | None = None


@dataclass
class Script:
    """The steps, and every request the agent made (thread-safe)."""

    steps: Sequence[Step]
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    heed: Callable[[str, Step], Step] | None = None
    """A model that listens: given the request's whole text and the step
    the script would take, the step it takes instead."""

    def answer(
        self, path: str, body: dict[str, Any], results: int, tools: bool
    ) -> Step:
        """The step for a request with ``results`` tool results so far."""
        step: Step
        if not tools:
            step = Say("ok")
        elif results < len(self.steps):
            step = self.steps[results]
            if self.heed is not None:
                step = self.heed(json.dumps(body), step)
        else:
            step = Say(DONE)
        with self.lock:
            self.requests.append(Request(path, body, results, tools, step))
        return step

    @property
    def turns(self) -> list[Request]:
        """The requests of the agent's loop (tools offered), in order."""
        with self.lock:
            return [r for r in self.requests if r.tools]

    def furthest(self) -> int:
        """The most tool results any request carried: how many of the steps'
        tool calls the agent ran and reported back."""
        return max((r.results for r in self.turns), default=0)


class Handler(BaseHTTPRequestHandler):
    """The base of each protocol's handler: JSON in, SSE or JSON out."""

    server: FakeServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            value = json.loads(raw or b"{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def send_json(self, value: Any, status: int = 200) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_events(self, events: Sequence[tuple[str | None, Any]]) -> None:
        """Server-sent events (``event:`` when named), then the end."""
        chunks = []
        for name, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            head = f"event: {name}\n" if name else ""
            chunks.append(f"{head}data: {text}\n\n")
        payload = "".join(chunks).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler: type[Handler], script: Script) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.script = script

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextmanager
def serving(handler: type[Handler], script: Script) -> Iterator[FakeServer]:
    """A fake model API on loopback for the length of the block."""
    server = FakeServer(handler, script)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
