"""The hook edge's variables, declared once: each one's name, default and
range, and its strict reading (docs/configuration.md).

The installed hooks' fast path reads them with this module, which imports
nothing but the standard library (pydantic-settings is slow to import:
docs/performance.md); the hook server reads them through
:class:`devs.adapters.hooks.settings.HookEdgeSettings`, whose validators are
these same functions. Either way a bad value is the same error naming its
variable (:class:`BadVariable`), never a silent default.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

SERVER_ENV = "DEVS_HOOK_SERVER"
IDLE_ENV = "DEVS_HOOK_SERVER_IDLE"
TIMEOUT_ENV = "DEVS_HOOK_TIMEOUT"
STATE_DIR_ENV = "DEVS_HOOK_STATE_DIR"

DEFAULT_IDLE = 600.0
MAX_IDLE = 86_400.0
DEFAULT_TIMEOUT = 10.0
MAX_TIMEOUT = 600.0
ON = frozenset({"1", "on", "true", "yes"})
OFF = frozenset({"0", "off", "false", "no"})
SHOWN_MAX = 40
"""Characters of a bad value its error repeats."""


class BadVariable(ValueError):
    """A hook variable's value that is not one: its message names the
    variable, what it takes and (cut) what it was given."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(message)
        self.variable = variable


def _given(text: str) -> str:
    return repr(text[:SHOWN_MAX])


def switch(variable: str, default: bool) -> Callable[[str | None], bool]:
    """How an on/off variable is read: ``on``/``1``/``true``/``yes`` or
    ``off``/``0``/``false``/``no`` (any case); unset or blank: ``default``."""

    def read(text: str | None) -> bool:
        word = (text or "").strip().lower()
        if not word:
            return default
        if word in ON:
            return True
        if word in OFF:
            return False
        msg = f"{variable} must be on or off, got {_given(word)}"
        raise BadVariable(variable, msg)

    return read


def seconds(
    variable: str, default: float, most: float
) -> Callable[[str | None], float]:
    """How a number of seconds in (0, ``most``] is read; unset or blank:
    ``default``. NaN, infinities and words are refused."""

    def read(text: str | None) -> float:
        raw = (text or "").strip()
        if not raw:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not 0 < value <= most:  # NaN fails this too
            msg = (
                f"{variable} must be a number of seconds in (0, {most:g}], "
                f"got {_given(raw)}"
            )
            raise BadVariable(variable, msg)
        return value

    return read


def folder(variable: str) -> Callable[[str | None], Path | None]:
    """How a folder is read: a path of printable characters; unset or
    blank: ``None`` (the caller's default)."""

    def read(text: str | None) -> Path | None:
        raw = (text or "").strip()
        if not raw:
            return None
        if not raw.isprintable():
            msg = f"{variable} must be a folder's path of printable characters"
            raise BadVariable(variable, msg)
        return Path(raw)

    return read


class Variable:
    """One variable of the hook edge, as docs/configuration.md lists it (a
    plain class: :mod:`dataclasses` would cost the fast path ~10 ms of
    imports)."""

    __slots__ = ("default", "name", "read", "takes")

    def __init__(
        self,
        name: str,
        default: str,
        takes: str,
        read: Callable[[str | None], object],
    ) -> None:
        self.name = name
        self.default = default
        """The default, as docs/configuration.md writes it (a test checks)."""
        self.takes = takes
        """What values it takes, as docs/configuration.md writes it."""
        self.read = read


server_on = switch(SERVER_ENV, True)
server_idle = seconds(IDLE_ENV, DEFAULT_IDLE, MAX_IDLE)
timeout = seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT, MAX_TIMEOUT)
state_folder = folder(STATE_DIR_ENV)

VARIABLES = (
    Variable(
        SERVER_ENV,
        "`on`",
        "`on` or `off` (also `1`/`0`, `true`/`false`, `yes`/`no`, any case)",
        server_on,
    ),
    Variable(
        IDLE_ENV, f"`{DEFAULT_IDLE:g}`", f"seconds in (0, {MAX_IDLE:g}]", server_idle
    ),
    Variable(
        TIMEOUT_ENV,
        f"`{DEFAULT_TIMEOUT:g}`",
        f"seconds in (0, {MAX_TIMEOUT:g}]",
        timeout,
    ),
    Variable(
        STATE_DIR_ENV,
        "`$XDG_STATE_HOME/devs/hooks`, else `~/.local/state/devs/hooks`",
        "a folder's path of printable characters",
        state_folder,
    ),
)
"""Every variable the hook client, the hook server and the state files
read (the hook's own decisions' settings, ``DEVS_TASK_ID``, ``DEVS_URL``,
``DEVS_GATE_PATTERN``, ``DEVS_HOOK_NUDGE``, are
:class:`devs.adapters.hooks.breaker.HookSettings`')."""


def state_dir(environ: Mapping[str, str]) -> Path:
    """``DEVS_HOOK_STATE_DIR``, else ``$XDG_STATE_HOME/devs/hooks``, else
    ``~/.local/state/devs/hooks``."""
    given = state_folder(environ.get(STATE_DIR_ENV))
    if given is not None:
        return given
    if xdg := (environ.get("XDG_STATE_HOME") or "").strip():
        return Path(xdg) / "devs" / "hooks"
    return Path.home() / ".local" / "state" / "devs" / "hooks"


class HookVariables:
    """The hook edge's variables as the fast path reads them."""

    __slots__ = ("server", "server_idle", "state_dir", "timeout")

    def __init__(
        self, server: bool, server_idle: float, timeout: float, state_dir: Path
    ) -> None:
        self.server = server
        self.server_idle = server_idle
        self.timeout = timeout
        self.state_dir = state_dir


def read(environ: Mapping[str, str] | None = None) -> HookVariables:
    """Every variable of :data:`VARIABLES` from ``environ`` (default:
    ``os.environ``); the first bad one a :class:`BadVariable`."""
    env = os.environ if environ is None else environ
    return HookVariables(
        server=server_on(env.get(SERVER_ENV)),
        server_idle=server_idle(env.get(IDLE_ENV)),
        timeout=timeout(env.get(TIMEOUT_ENV)),
        state_dir=state_dir(env),
    )
