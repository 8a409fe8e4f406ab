"""One hook event answered: :func:`respond` (the event, the agent's dialect,
the service) and :func:`handle` (the same from ``devs hook``'s arguments and
environment, opening the store itself). Used in process by ``devs hook``, and
by the hook server (:mod:`devs.adapters.hooks.server`) that answers the
installed hooks without a process start's imports."""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import signal
import sys
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

import orjson

from devs.adapters.hooks.breaker import (
    TASK_ENV,
    URL_ENV,
    Answer,
    Breaker,
    HookSettings,
    HookState,
    Place,
    Seen,
    guarded_paths,
    place_of,
    task_base,
)
from devs.adapters.hooks.client import EVENT_MAX, server_wanted, socket_folder
from devs.adapters.hooks.dialect import Dialect
from devs.adapters.hooks.registry import AGENTS, load
from devs.adapters.hooks.usage import Reader
from devs.domain import DevsError
from devs.domain.redaction import redact
from devs.domain.service import RecoveryApi

if TYPE_CHECKING:
    from devs.adapters.config import Settings

REFUSED = "the task was last seen stopped, so the tool is refused"


class HookTimeout(Exception):
    """The hook took longer than ``DEVS_HOOK_TIMEOUT``."""


def _alarm(signum: int, frame: FrameType | None) -> NoReturn:
    raise HookTimeout


_SAID: ContextVar[list[str] | None] = ContextVar("devs_hook_said", default=None)
"""Where a hook answered over HTTP keeps what it says (a thread of the
server: not the process's stderr)."""


def _say(line: str) -> None:
    flat = " ".join(redact(line).split())[:2_000]
    said = _SAID.get()
    if said is not None:
        said.append(flat)
        return
    sys.stderr.write(f"devs hook: {flat}\n")


def respond(
    dialect: Dialect,
    raw: bytes,
    environ: Mapping[str, str],
    open_local: Callable[[], RecoveryApi],
    store: str,
    cli: str = "devs",
    cwd: str | None = None,
    *,
    timed: bool = True,
    usage: Reader | None = None,
) -> tuple[str | None, int]:
    """The answer to one hook event (stdout text and exit code). Every
    failure is one line on stderr and exit code 1, which the agents read as
    a hook that failed without blocking; but a tool call is still refused
    when the task was last seen stopped. ``cwd``: where the agent runs, when
    the event does not say (default: this process's). ``timed``: the call is
    cut at ``DEVS_HOOK_TIMEOUT`` (a process's main thread only: a server's
    thread leaves it to the agent's own timeout). ``usage``: how to read the
    agent's session files for its model calls' usage (``None``: not read)."""
    if len(raw) > EVENT_MAX:
        _say(f"error: the hook event is larger than {EVENT_MAX} bytes")
        return None, 1
    try:
        event = orjson.loads(raw)
        if not isinstance(event, dict):
            msg = "the hook event must be a JSON object"
            raise ValueError(msg)
        seen = dialect.read(event)
    except (orjson.JSONDecodeError, ValueError, DevsError) as error:
        _say(f"error: malformed hook event: {error}")
        return None, 1
    state: HookState | None = None
    previous = None
    try:
        settings = HookSettings.from_environ(environ)
        if timed:
            # The timer covers everything below: git, the store, the server.
            previous = signal.signal(signal.SIGALRM, _alarm)
            signal.setitimer(signal.ITIMER_REAL, settings.timeout)
        place = place_of(_folder(seen, cwd))
        state = state_of(seen, settings, environ, store, cwd, place)
        opener = open_local
        if settings.url is not None:
            cli = f"devs (on the machine of {redact(settings.url)}, or its HTTP API)"
            url, token = settings.url, settings.token

            def opener() -> RecoveryApi:
                from devs.adapters.client import HttpRecoveryClient

                return HttpRecoveryClient(url, token=token, timeout=settings.timeout)

        breaker = Breaker(
            opener,
            agent=dialect.agent,
            base=state.base,
            explicit=settings.task_id is not None,
            state=state,
            gate_pattern=settings.gate_pattern,
            place=place,
            cli=cli,
            nudge=settings.nudge,
            usage=usage,
            environ=environ,
            guarded=guarded_paths(
                store,
                settings.state_dir,
                socket_folder(environ) if server_wanted(environ) else None,
            ),
        )
        answer = breaker.handle(seen)
    except Exception as error:  # every failure: said, never a traceback
        return _failed(dialect, seen, state, error)
    finally:
        if previous is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    return dialect.write(seen, answer)


def _folder(seen: Seen, cwd: str | None) -> str:
    here = seen.cwd if seen.cwd and os.path.isdir(seen.cwd) else None
    return here or cwd or os.getcwd()


def state_of(
    seen: Seen,
    settings: HookSettings,
    environ: Mapping[str, str],
    store: str,
    cwd: str | None,
    place: Place | None = None,
) -> HookState:
    """The state file of the event's task series; ``place``: the event's
    folder as :func:`place_of` found it, when known (one ``git`` call a
    hook event, not two)."""
    base = settings.task_id or task_base(place or place_of(_folder(seen, cwd)))
    # A server's tasks are not the local store's: its URL names them.
    identity = f"url:{settings.url}" if settings.url else store
    return HookState(settings.state_dir, identity, base)


def refusal(
    agent: str,
    db: str | None,
    raw: bytes,
    environ: Mapping[str, str],
    error: str,
) -> tuple[str | None, str, int]:
    """When a call could not be answered (``error``): a tool call is still
    refused if its task was last seen stopped; anything else is the error,
    one line, exit 1. Reads only the state file."""
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors):
        try:
            dialect = load(agent).dialect
            seen = dialect.read(orjson.loads(raw))
            settings = HookSettings.from_environ(environ)
            state = state_of(seen, settings, environ, Store(db, environ).identity, None)
            known = state.peek().stopped if seen.kind == "pre_tool" else None
        except Exception:  # unreadable: nothing known
            known = None
        if known:
            _say(f"warning: {error}; {REFUSED}")
            text, code = dialect.write(seen, Answer(deny=known))
            return text, errors.getvalue(), code
        _say(f"error: {error}")
    return None, errors.getvalue(), 1


def _failed(
    dialect: Dialect, seen: Seen, state: HookState | None, error: BaseException
) -> tuple[str | None, int]:
    if isinstance(error, HookTimeout):
        what = "no answer from the store within DEVS_HOOK_TIMEOUT"
    elif isinstance(error, DevsError):
        what = str(error)
    else:
        what = f"{type(error).__name__}: {error}"
    known = state.peek().stopped if state is not None else None
    if known and seen.kind == "pre_tool":
        _say(f"warning: {what}; {REFUSED}")
        return dialect.write(seen, Answer(deny=known))
    _say(f"error: {what}")
    return None, 1


def store_identity(settings: Settings) -> str:
    """The store as the hooks' state files name it (a command hook and an
    ``http`` hook to ``devs serve`` on one store share them)."""
    if settings.database_url is not None:
        return f"pg:{settings.database_url.get_secret_value()}"
    return f"sqlite:{os.path.abspath(settings.db)}"


class Store:
    """The store ``devs --db DB hook`` opens: from ``db`` (``--db``) and the
    environment, opened at its first use and kept (the hook server answers
    every call with one)."""

    def __init__(self, db: str | None, environ: Mapping[str, str]) -> None:
        from devs.adapters.config import DEFAULT_DB, Settings

        # --db takes DEVS_DB's place, as everywhere.
        self.settings = Settings.from_environ(
            {**environ, "DEVS_DB": db} if db else environ
        )
        url = self.settings.database_url
        self.identity = store_identity(self.settings)
        self.cli = "devs"
        if url is None and self.settings.db != DEFAULT_DB:
            self.cli = f"devs --db {shlex.quote(self.settings.db)}"
        self._service: RecoveryApi | None = None

    def open(self) -> RecoveryApi:
        if self._service is None:
            from devs.adapters.config import open_service

            self._service = open_service(self.settings)
        return self._service

    def close(self) -> None:
        close = getattr(self._service, "close", None)
        if close is not None:
            close()
        self._service = None


def handle(
    agent: str,
    db: str | None,
    raw: bytes,
    environ: Mapping[str, str],
    *,
    store: Store | None = None,
    cwd: str | None = None,
) -> tuple[str | None, str, int]:
    """``devs [--db DB] hook AGENT`` for one event: the text for stdout (or
    ``None``), what it said on stderr, and the exit code."""
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors):
        if agent not in AGENTS:
            _say(f"error: unknown agent {agent!r}: one of {', '.join(sorted(AGENTS))}")
            return None, errors.getvalue(), 1
        chosen = load(agent)
        dialect = chosen.dialect
        opened = None
        try:
            if store is None:
                store = opened = Store(db, environ)
        except DevsError as error:
            _say(f"error: {error}")
            return None, errors.getvalue(), 1
        try:
            text, code = respond(
                dialect,
                raw,
                environ,
                store.open,
                store.identity,
                cli=store.cli,
                cwd=cwd,
                usage=chosen.usage,
            )
        finally:
            if opened is not None:
                opened.close()
    return text, errors.getvalue(), code


def over_http(
    agent: str,
    raw: bytes,
    service: RecoveryApi,
    store: str,
    environ: Mapping[str, str],
) -> tuple[int, str]:
    """A hook event POSTed to ``devs serve`` (Claude Code's ``http`` hooks):
    the HTTP status and JSON body. The same decisions as ``devs hook
    AGENT``, with the server's store and the hooks' state files of its
    machine; an answer is 200 with the answer's JSON (``{}``: nothing to
    say), a failure 503 with the line a command hook writes on stderr, which
    Claude Code reads as a hook that failed without blocking. The server
    opens no file an event names: a session's usage is read by the command
    hooks only (docs/agents.md#spend)."""
    try:
        event = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        return _refused(f"error: malformed hook event: {error}")
    folder = event.get("cwd") if isinstance(event, dict) else None
    if not isinstance(folder, str) or not os.path.isdir(folder):
        # The task is named from the event's folder: a folder this server
        # does not have would name every such agent's task alike.
        return _refused(
            "error: the event's folder (cwd) is not on this server: name the "
            "task with the command hooks and DEVS_TASK_ID instead"
        )
    said: list[str] = []
    token = _SAID.set(said)
    try:
        dialect = load(agent).dialect
        # The server answers for itself: never another server, never one task.
        env = {k: v for k, v in environ.items() if k not in (URL_ENV, TASK_ENV)}
        text, code = respond(dialect, raw, env, lambda: service, store, timed=False)
    finally:
        _SAID.reset(token)
    if text is not None:
        return 200, text
    if code == 0:
        return 200, "{}"
    return _refused(said[-1] if said else "error: the hook event was not answered")


def _refused(line: str) -> tuple[int, str]:
    """A hook event answered with its failure (Claude Code runs the tool)."""
    flat = " ".join(redact(line).split())[:2_000]
    return 503, orjson.dumps({"error": f"devs hook: {flat}"}).decode()
