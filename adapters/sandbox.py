"""The sandboxed gate runner: run a real command and judge it by its exit code.

A gate command is code the agent wrote, so it runs isolated: in its own process
group with a timeout, limits and a scrubbed environment, inside bubblewrap where
it can build a sandbox; where it cannot, it says why (``GateRun.fallback``) or
refuses if isolation is required (:class:`IsolationUnavailable`). Its output is
captured up to a cap, decoded, redacted and hashed before anything else sees
it, and the referee's store stays out of its reach. What a gate sees and the
bounds (:class:`GateSettings`): docs/security.md, docs/cli.md.
"""

from __future__ import annotations

import errno
import functools
import io
import json
import os
import pwd
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import parse_qs, quote, unquote, urlsplit

from pydantic import ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from devs.adapters.config import (
    SWITCH_OFF,
    SWITCH_ON,
    Backend,
    backend_of,
    sqlite_path,
)
from devs.domain.errors import DevsError, InvalidInput
from devs.domain.output import error_line as the_error_line
from devs.domain.policy import EnvironSettings, EnvironSource
from devs.domain.redaction import error_hash, redact, secret_kind

if TYPE_CHECKING:
    from devs.domain import RecoveryService

DEFAULT_OUTPUT_CAP = 1_048_576  # bytes of output kept (the last ones)
KILL_GRACE_SECONDS = 2.0
PROBE_TIMEOUT_SECONDS = 10.0

Isolation = Literal["auto", "require", "none"]
ISOLATIONS: tuple[Isolation, ...] = ("auto", "require", "none")

# What the runner still does without bubblewrap; the fallback notice names it.
WEAKER_ISOLATION = (
    "a process group, rlimits and a scrubbed environment only "
    "(no file-system or network isolation)"
)

# The referee's own settings are none of a gate's business: every DEVS_*
# variable is removed but these (unless passed through by name).
GATE_DEVS_VARIABLES = frozenset({"DEVS_TASK_ID"})

_SECRET_NAME = re.compile(
    r"(?i)(TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY"
    r"|CREDENTIAL|AUTH|SESSION|COOKIE|SIGNATURE|WEBHOOK|[_-]PWD$|^AWS_|^GH_|^GITHUB_"
    r"|^OPENAI|^ANTHROPIC|^DEVS_|DATABASE_URL$|_DSN$|SMTP_URL$)"
)
# A value that carries a credential: a URL with a user (and password) in it,
# a key in its query (?token=, &sig=, X-Amz-Signature=, ...), or a key in its
# path (Slack, Discord, Teams and Telegram webhooks, any .../webhook/...).
_SECRET_VALUE = re.compile(
    r"(?i)://[^\s/?#@]+@"
    r"|[?&][\w.-]*(?:token|key|sig|signature|secret|passw(?:or)?d|pwd|auth"
    r"|credential|code)s?="
    r"|hooks\.slack\.com/|discord(?:app)?\.com/api/webhooks/|webhook\.office\.com/"
    r"|api\.telegram\.org/bot|/webhooks?/"
)
# A piece of a URL that looks like a key: 16 or more characters of a token's
# alphabet (hex, base64, base64url, percent-encoded), of at least two of
# digits, lower- and upper-case letters (``3f9a0c...``, ``Zm9vYmFy...``;
# not ``getting-started``, ``20240101``, nor ``v1.2.3``).
_KEY_LIKE = re.compile(r"[A-Za-z0-9_+=~%-]{16,}")
_URL_START = re.compile(r"(?i)[a-z][a-z0-9+.-]{0,30}://")

ALLOW_UNSANDBOXED_ENV = "DEVS_DANGEROUSLY_ALLOW_UNSANDBOXED_GATES"
TMP_MB_ENV = "DEVS_GATE_TMP_MB"
MAX_PROCESSES_ENV = "DEVS_GATE_MAX_PROCESSES"
MAX_TIMEOUT_ENV = "DEVS_GATE_MAX_TIMEOUT"
MAX_MEMORY_ENV = "DEVS_GATE_MAX_MEMORY_MB"
MAX_CPU_ENV = "DEVS_GATE_MAX_CPU_SECONDS"


_VARIABLES = {
    "allow_unsandboxed": ALLOW_UNSANDBOXED_ENV,
    "tmp_mb": TMP_MB_ENV,
    "max_processes": MAX_PROCESSES_ENV,
    "max_timeout": MAX_TIMEOUT_ENV,
    "max_memory_mb": MAX_MEMORY_ENV,
    "max_cpu_seconds": MAX_CPU_ENV,
}
_MAXIMA = {
    "tmp_mb": 1_048_576,
    "max_processes": 1_000_000,
    "max_timeout": 86_400,
    "max_memory_mb": 1_048_576,
    "max_cpu_seconds": 86_400,
}


class _GateVariables(EnvironSource):
    """Each setting from its own variable (:data:`_VARIABLES`: they share no
    prefix), read with the mapping's ``get``; no other variable is read."""

    def get_field_value(
        self, field: FieldInfo, field_name: str
    ) -> tuple[Any, str, bool]:
        return self.environ.get(_VARIABLES[field_name]), field_name, False


class GateSettings(EnvironSettings):
    """The gates' bounds and the unsandboxed switch: ``GateSettings()`` reads
    ``os.environ``, ``GateSettings.from_environ(mapping)`` a mapping (values
    given in code win; docs/configuration.md). A blank variable keeps the
    default; a wrong one is an ``InvalidInput`` naming its variable."""

    model_config = SettingsConfigDict(frozen=True)

    allow_unsandboxed: bool = False
    """``DEVS_DANGEROUSLY_ALLOW_UNSANDBOXED_GATES``: an agent's gate (MCP
    ``run_gate``) may run without the sandbox where bwrap cannot build one."""
    tmp_mb: int = 1_024
    """``DEVS_GATE_TMP_MB``: the size of each private tmpfs (MiB)."""
    max_processes: int = 1_024
    """``DEVS_GATE_MAX_PROCESSES``: processes (and threads) a gate runs at once."""
    max_timeout: int = 1_800
    """``DEVS_GATE_MAX_TIMEOUT``: the longest timeout an agent may ask (s)."""
    max_memory_mb: int = 4_096
    """``DEVS_GATE_MAX_MEMORY_MB``: an agent's gate's memory limit: its
    default and the most it may ask (MiB of address space)."""
    max_cpu_seconds: int = 1_800
    """``DEVS_GATE_MAX_CPU_SECONDS``: an agent's gate's CPU limit: its
    default and the most it may ask."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as error:
            first = error.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else ""
            variable = _VARIABLES.get(name, name)
            cause = (first.get("ctx") or {}).get("error")
            msg = (
                str(cause)
                if isinstance(cause, ValueError)
                else f"{variable} is not valid: {first['msg']}"
            )
            raise InvalidInput(msg, field=variable) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Values in code, then the variables; no .env or secrets files.
        environ = cls.environ_source(settings_cls)
        assert isinstance(environ, EnvironSource)
        return (init_settings, _GateVariables(settings_cls, environ.environ))

    @field_validator("allow_unsandboxed", mode="before")
    @classmethod
    def _switch(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return value
        raw = str(value).strip().lower()
        if not raw or raw in SWITCH_OFF:
            return False
        if raw in SWITCH_ON:
            return True
        msg = (
            f"{ALLOW_UNSANDBOXED_ENV} must be 1 or 0 (true/false, yes/no, "
            f"on/off), got {raw[:40]!r}"
        )
        raise ValueError(msg)

    @field_validator(*_MAXIMA, mode="before")
    @classmethod
    def _whole(cls, value: Any, info: ValidationInfo) -> Any:
        name = str(info.field_name)
        raw = str(value).strip()
        if not raw:
            return cls.model_fields[name].default
        try:
            number = int(raw) if not isinstance(value, bool) else 0
        except ValueError:
            number = 0
        if not 1 <= number <= _MAXIMA[name]:
            msg = (
                f"{_VARIABLES[name]} must be a whole number in "
                f"[1, {_MAXIMA[name]}], got {raw[:40]!r}"
            )
            raise ValueError(msg)
        return number


class IsolationUnavailable(DevsError):
    """Gate isolation was required, or its sandbox could not be set up.

    Nothing ran: the caller records nothing.
    """


def scrub_environment(
    environ: Mapping[str, str], pass_through: Iterable[str] = ()
) -> tuple[dict[str, str], list[str]]:
    """The environment without secret-looking variables, and the names removed.

    A variable is secret-looking when its name says so (``*TOKEN*``,
    ``*SECRET*``, ``*PASSWORD*``, ``*API_KEY*``, ``*WEBHOOK*``,
    ``*DATABASE_URL``, ``*_DSN``, ``*SMTP_URL``, ``AWS_*``, ...), it is one of
    the referee's own settings (``DEVS_*`` but :data:`GATE_DEVS_VARIABLES`), or
    its value holds a credential: a URL with a user or password, a key in its
    query (``?token=``, ``&sig=``, ...) or in its path (a Slack, Discord,
    Teams or Telegram webhook, any ``/webhook/``), a key-like piece of a URL
    (:func:`_keyed_url`), or anything :func:`~devs.domain.redaction.redact`
    would hide (a token by its shape: ``ghp_...``, ``hf_...``, ``sk-...``).
    ``*_PWD`` names a password (``MYSQL_PWD``); ``PWD`` and ``OLDPWD`` are
    working directories and stay. Names in ``pass_through`` are always kept.
    """
    keep = set(pass_through) | GATE_DEVS_VARIABLES
    clean: dict[str, str] = {}
    removed: list[str] = []
    for name, value in environ.items():
        if name not in keep and (_SECRET_NAME.search(name) or _secret_value(value)):
            removed.append(name)
        else:
            clean[name] = value
    return clean, sorted(removed)


def _secret_value(value: str) -> bool:
    """Whether an environment variable's value holds a credential."""
    return bool(
        _SECRET_VALUE.search(value)
        or _keyed_url(value)
        or secret_kind(value) is not None
        or redact(value) != value
    )


def _key_like(piece: str) -> bool:
    if not _KEY_LIKE.fullmatch(piece):
        return False
    kinds = (
        any(c.isdigit() for c in piece),
        any(c.islower() for c in piece),
        any(c.isupper() for c in piece),
    )
    return sum(kinds) >= 2


def _keyed_url(value: str) -> bool:
    """Whether a URL in ``value`` carries a key-like path segment or query
    value (``https://ci.example/notify/3f9a...``, ``?k=Zm9vYmFy...``): a
    capability URL, whoever holds it may call it."""
    if "://" not in value:
        return False
    for word in value.split():
        found = _URL_START.search(word)
        if found is None:
            continue
        rest = word[found.end() :].split("#", 1)[0]
        path, _, query = rest.partition("?")
        pieces = path.split("/")[1:]  # not the host
        pieces += [pair.partition("=")[2] for pair in query.split("&")]
        if any(_key_like(piece) for piece in pieces):
            return True
    return False


@dataclass(frozen=True)
class GateRun:
    """What a gate command did, and how it was isolated."""

    command: tuple[str, ...]
    exit_code: int | None
    output: str
    output_hash: str
    duration_seconds: float
    timed_out: bool = False
    signal_name: str | None = None
    truncated_bytes: int = 0
    scrubbed_env: tuple[str, ...] = field(default_factory=tuple)
    isolation: Literal["bwrap", "none"] = "none"
    # Set when bubblewrap was wanted but unavailable: the one-line notice.
    fallback: str | None = None
    timeout_seconds: float | None = None
    """The timeout the command was given (``None``: none)."""

    @property
    def error(self) -> str:
        """A one-line account of how the command ended."""
        if self.timed_out:
            # The timeout given, not the time taken: killing and reaping the
            # group takes a moment longer (0.6 s of a 0.5 s timeout, loaded).
            given = self.timeout_seconds
            if given is None:
                given = self.duration_seconds
            return f"killed after the {given:g}s timeout"
        if self.signal_name is not None:
            return f"killed by {self.signal_name}"
        return f"exited with code {self.exit_code}"

    @property
    def error_line(self) -> str:
        """``error`` and the output's error line (the one rule every surface
        uses, :func:`devs.domain.output.error_line`: pytest's ``E`` line, not
        its summary): what a gate records as its error message."""
        line = the_error_line(self.output)
        return f"{self.error}: {line}" if line else self.error


class _TailBuffer:
    """Keeps the last ``cap`` bytes written to it and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.dropped = 0

    def write(self, chunk: bytes) -> None:
        self.data += chunk
        excess = len(self.data) - self.cap
        if excess > 0:
            del self.data[:excess]  # O(excess): CPython moves the start, not the data
            self.dropped += excess


def _limits(
    cpu_seconds: int | None,
    memory_mb: int | None,
    max_processes: int | None,
    cgroup: _Cgroup | None,
) -> None:
    """Runs in the child before exec."""
    if cgroup is not None:
        cgroup.join()
    elif max_processes is not None:
        # Counted over every process of the real user, and ignored for root.
        resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))
    if cpu_seconds is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    if memory_mb is not None:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _positive(name: str, value: float | None, maximum: float) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        msg = f"{name} must be a number"
        raise InvalidInput(msg)
    if not 0 < value <= maximum:
        msg = f"{name} {value} is out of range (0, {maximum:g}]"
        raise InvalidInput(msg)


# ---------------------------------------------------------------- bubblewrap
#
# The options, and why (checked on Debian 12, bwrap 0.8.0, as root and as an
# unprivileged user; they are the ones a stock Debian or Ubuntu CI host takes):
#
# --unshare-all   new user (if possible), ipc, pid, net, uts and cgroup (if
#                 possible) namespaces. The user and cgroup ones are the "-try"
#                 kind, so the same line works as root (no user namespace
#                 needed) and as a user where unprivileged user namespaces are
#                 allowed; an explicit --unshare-user would fail where they are
#                 not. --share-net (with network=True) keeps the host network.
# --cap-drop ALL  (as root) bwrap run by root keeps every capability inside the
#                 sandbox; with CAP_SYS_ADMIN the command can simply `umount`
#                 the tmpfs over the home directory and read what is under it
#                 (done here). Others get no capabilities anyway, and a setuid
#                 bwrap refuses the option from them.
# --die-with-parent  the sandbox dies with the runner.
# --ro-bind / /   everything read-only (submounts too).
# --dev /dev      a minimal /dev: null, zero, random, tty, pts, shm; no disks.
# --proc /proc    the proc of the new pid namespace. Never bind the host's
#                 /proc: /proc/<runner pid>/environ holds the unscrubbed
#                 environment.
# --tmpfs /tmp, --tmpfs /run, --tmpfs HOME
#                 empty and private. A read-only bind does not stop connect()
#                 on a unix socket, so /run (docker.sock, D-Bus, systemd) and
#                 /tmp (X11, ssh-agent) are hidden, not just read-only.
# /var/tmp       (--tmpfs, then --remount-ro) empty and read-only: other
#                 servers keep sockets there too.
# --bind-fd FD CWD, --ro-bind-fd FD PATH
#                 every folder or file of the host mounted in the sandbox (the
#                 writable working directory above all) comes from a
#                 descriptor devs opened, one path component at a time with
#                 O_NOFOLLOW, and checked (_open_path): bwrap --bind CWD CWD
#                 would resolve CWD again, later, and another gate that can
#                 write a folder on CWD's path could swap it (renameat2
#                 RENAME_EXCHANGE) with a symlink to the store's folder in
#                 between. bwrap 0.8.0 turns the descriptor back into its
#                 current path, mounts that, then compares the mount with the
#                 descriptor (st_dev, st_ino) and dies on a mismatch ("Race
#                 condition binding dirfd") before the command runs: a swap in
#                 that window is caught, not mounted. The destination is a
#                 path resolved inside the sandbox being built: a folder on it
#                 swapped for a symlink puts the mount elsewhere, which only
#                 covers that place (with the checked folder, which holds no
#                 store); / is read-only, so nothing else of the host becomes
#                 writable, bwrap's check above compares the destination too,
#                 and the store's own mounts (its sealed folder, the mount
#                 points between) lie where no gate can rename anything: each
#                 is a mount point in every gate that could write around it.
# --chdir CWD, --json-status-fd FD
#                 bwrap reports the sandboxed child's pid on FD once it has
#                 started it: no report means the sandbox failed to start and
#                 the command never ran (not a failing gate).
# No --new-session: the runner already calls setsid() before exec, so there is
# no controlling terminal to inject keystrokes into (TIOCSTI), and the
# sandboxed processes stay in the process group the timeout kills. The pid
# namespace kills those that leave the group when the command exits.
_BWRAP_BASE = (
    "--unshare-all",
    "--die-with-parent",
    *(("--cap-drop", "ALL") if os.geteuid() == 0 else ()),
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
)
_PRIVATE_DIRS = ("/tmp", "/run")
# Shared with other users too, but kept read-only as the rest of the file
# system (a gate writing there got EROFS before, and still does): empty.
_SEALED_DIRS = ("/var/tmp",)

# Mount kinds, in the order bwrap applies them at one depth. _SEAL: an empty
# tmpfs made read-only once everything above it is mounted (the store's
# folder); _MASK: /dev/null, read-only, over a file (one of the store's).
_HIDE, _EXPOSE, _WRITABLE, _PROTECT, _SEAL, _MASK = range(6)
_OPTION = {_HIDE: "--tmpfs", _EXPOSE: "--ro-bind-fd", _WRITABLE: "--bind-fd"}
_OPTION[_PROTECT] = "--ro-bind-fd"
_EMPTY = (_HIDE, _SEAL)
_SEAL_BYTES = 65_536


@dataclass(frozen=True)
class _Mount:
    kind: int
    path: str

    @property
    def depth(self) -> int:
        return len(Path(self.path).parts)

    def holds(self, path: str) -> bool:
        return path == self.path or path.startswith(self.path.rstrip("/") + "/")

    @property
    def bound(self) -> bool:
        """Whether bwrap mounts a folder or file of the host here (from an
        opened file descriptor: :func:`_open_sources`)."""
        return self.kind in (_EXPOSE, _WRITABLE, _PROTECT)

    def options(self, tmp_bytes: int, source: int = -1) -> list[str]:
        if self.kind == _HIDE:
            return ["--size", str(tmp_bytes), "--tmpfs", self.path]
        if self.kind == _SEAL:
            return ["--size", str(_SEAL_BYTES), "--tmpfs", self.path]
        if self.kind == _MASK:
            return ["--ro-bind", "/dev/null", self.path]
        return [_OPTION[self.kind], str(source), self.path]


def _ordered(mounts: Iterable[_Mount]) -> list[_Mount]:
    """In bwrap order: a deeper mount goes on top of a shallower one."""
    unique = {(m.kind, m.path): m for m in mounts}.values()
    return sorted(unique, key=lambda m: (m.depth, m.kind, m.path))


def _cover(path: str, mounts: Sequence[_Mount]) -> _Mount | None:
    """The mount that decides what the sandbox shows at ``path`` (None: ``/``)."""
    return next((m for m in reversed(mounts) if m.holds(path)), None)


def _find_bwrap(bwrap: str | None) -> tuple[str | None, str]:
    """The bwrap program to use, or None and why there is none."""
    if bwrap is None:
        found = shutil.which("bwrap")
        return (found, "") if found else (None, "bwrap is not installed (not on PATH)")
    found = shutil.which(bwrap)
    return (found, "") if found else (None, f"bwrap is not installed (no {bwrap!r})")


@functools.cache
def _probe(program: str) -> str | None:
    """Why ``program`` cannot build the gate sandbox on this host, or None."""
    try:
        probe = subprocess.run(
            [program, *_BWRAP_BASE, "--", program, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{program} did not start a sandbox in {PROBE_TIMEOUT_SECONDS:g}s"
    except OSError as error:
        return f"{program} cannot run: {error.strerror or error}"
    if probe.returncode == 0:
        return None
    said = (probe.stderr + probe.stdout).decode("utf-8", "replace").strip()
    first = said.splitlines()[0].strip() if said else f"exit code {probe.returncode}"
    return f"bwrap cannot create a sandbox here ({first})"


def sandbox_unavailable(bwrap: str | None = None) -> str | None:
    """Why gates cannot run under bubblewrap here, or None when they can.

    ``bwrap`` names the program (default: ``bwrap`` on ``PATH``). The answer
    comes from running it once per process with the sandbox's options.
    """
    program, why = _find_bwrap(bwrap)
    return why if program is None else _probe(program)


def _home_dirs(env: Mapping[str, str]) -> set[str]:
    """The command's ``$HOME`` and the user's home directory, as real paths."""
    homes = {env.get("HOME", "")}
    with suppress(KeyError):
        homes.add(pwd.getpwuid(os.getuid()).pw_dir)
    found = set()
    for home in filter(None, homes):
        real = os.path.realpath(home)
        if real != "/" and Path(real).is_dir():
            found.add(real)
    return found


# A Python interpreter's name: python, python3, python3.12, python3.13t, pypy3.
_PYTHON_NAME = re.compile(r"(?:python|pypy)[0-9.]*[a-z]?")


def _prefix(path: str) -> str:
    """The installation a program belongs to: two levels up (``PREFIX/bin/x``)."""
    return os.path.dirname(os.path.dirname(path))


def _python_dirs(command: str, workdir: str, env: Mapping[str, str]) -> set[str]:
    """The installations a Python gate command runs from.

    When the command's program is a Python (by name), a script whose ``#!``
    interpreter is one, or a version manager's shim (a program in a
    ``shims`` directory: pyenv, asdf, rbenv, mise): the prefix of the program
    and of that interpreter, both as found on ``PATH`` and with symlinks
    resolved (``~/.pyenv/shims/python`` -> ``~/.pyenv``,
    ``~/proj/.venv/bin/python`` -> ``~/proj/.venv`` and the prefix of the
    interpreter it links to).
    """
    try:
        program = _locate(command, workdir, env)
    except InvalidInput:
        return set()  # _check_visible says what is wrong
    found: list[str] = []
    if (
        _PYTHON_NAME.fullmatch(os.path.basename(program))
        or os.path.basename(os.path.dirname(program)) == "shims"
    ):
        found.append(program)
    interpreter = _interpreter(program, workdir, env)
    if interpreter is not None and _PYTHON_NAME.fullmatch(
        os.path.basename(interpreter)
    ):
        found += [program, interpreter]
    return {
        _prefix(seen)
        for path in found
        for seen in (os.path.abspath(path), os.path.realpath(path))
    }


def _runtime_dirs(command: str, workdir: str, env: Mapping[str, str]) -> set[str]:
    """What a gate sees read-only by default, where the sandbox would hide it:
    the Python installation running devs (``sys.prefix``, ``sys.base_prefix``,
    the prefix of ``sys.executable`` with symlinks resolved), the active
    virtual environment (``$VIRTUAL_ENV``) and the installations of a Python
    gate command (:func:`_python_dirs`). Existing directories only, as real
    paths; :func:`_mounts` leaves out any that holds a whole hidden directory
    (a home directory, ``/tmp``, ``/run``) or is ``/``."""
    candidates = {
        sys.prefix,
        sys.base_prefix,
        _prefix(os.path.realpath(sys.executable)),
        env.get("VIRTUAL_ENV", ""),
        *_python_dirs(command, workdir, env),
    }
    found = set()
    for path in filter(None, candidates):
        real = os.path.realpath(path)
        if real != "/" and os.path.isabs(path) and Path(real).is_dir():
            found.add(real)
    return found


def _runtime_folder(env: Mapping[str, str]) -> set[str]:
    """``$XDG_RUNTIME_DIR`` (the user's sockets: the hook server's, D-Bus,
    agents), as a real path, where it exists (it is usually under ``/run``)."""
    given = (env.get("XDG_RUNTIME_DIR") or "").strip()
    real = os.path.realpath(given) if os.path.isabs(given) else ""
    return {real} if real not in ("", "/") and Path(real).is_dir() else set()


def _store_mounts(workdir: str, store: _Store) -> list[_Mount]:
    """What keeps the store's folder out of reach: see :func:`run_gate`."""
    folder = store.folder
    if folder is None:
        return []
    if folder == workdir:
        return [_Mount(_PROTECT, workdir)]  # in_store_folder: checked before
    if _Mount(_SEAL, folder).holds(workdir) or folder == "/":
        return []  # read-only already (its files are masked)
    return _sealed(workdir, folder)


def _socket_mounts(workdir: str, store: _Store, hidden: list[_Mount]) -> list[_Mount]:
    """What keeps a PostgreSQL store's socket directories out of reach: each
    an empty read-only directory, unless a private one hides it already."""
    found: list[_Mount] = []
    for folder in store.sockets:
        if _Mount(_SEAL, folder).holds(workdir):
            msg = (
                f"the gate's working directory {workdir!r} lies in the "
                f"referee's PostgreSQL socket directory {folder!r}, which a "
                "gate must not reach: run the gate in another folder"
            )
            raise InvalidInput(msg, field="cwd")
        cover = _cover(folder, hidden)
        if cover is None or cover.kind not in _EMPTY:
            found += _sealed(workdir, folder)
    return found


def _sealed_dirs(workdir: str, hidden: list[_Mount]) -> list[_Mount]:
    """``/var/tmp`` (its real path) empty and read-only, unless it is the
    working directory or hidden already (a symlink to ``/tmp``)."""
    found: list[_Mount] = []
    for folder in map(os.path.realpath, _SEALED_DIRS):
        cover = _cover(folder, hidden)
        if (
            folder not in ("/", workdir)
            and Path(folder).is_dir()
            and (cover is None or cover.kind not in _EMPTY)
        ):
            found += _sealed(workdir, folder)
    return found


def _sealed(workdir: str, folder: str) -> list[_Mount]:
    """``folder`` an empty read-only directory; each folder between the
    working directory and it a mount point, when the working directory holds
    it."""
    found = [_Mount(_SEAL, folder)]
    if _Mount(_WRITABLE, workdir).holds(folder):
        # Each folder between the working directory and the store's is a
        # mount point: renaming one would move the store out of its path
        # for the referee, and a file made in its place would be opened.
        between = Path(folder).parent
        while str(between) != workdir:
            found.append(_Mount(_WRITABLE, str(between)))
            between = between.parent
    return found


def _mounts(
    workdir: str,
    env: Mapping[str, str],
    network: bool,
    allow_paths: Iterable[str],
    read_only_paths: Iterable[str],
    command: str,
    store: _Store | None = None,
) -> list[_Mount]:
    homes = _home_dirs(env) | _runtime_folder(env)
    base = [_Mount(_HIDE, d) for d in _PRIVATE_DIRS if Path(d).is_dir()]
    base += [_Mount(_HIDE, h) for h in homes]
    base.append(_Mount(_WRITABLE, workdir))
    base += _sealed_dirs(workdir, _ordered(base))
    if store is not None:
        base += _store_mounts(workdir, store)
        base += _socket_mounts(workdir, store, _ordered(base))
    mounts = _ordered(base)

    def hidden(path: str) -> bool:
        cover = _cover(path, mounts)
        return cover is not None and cover.kind in _EMPTY

    exposed = [p for p in allow_paths if hidden(p)]
    # The Python installations, unless exposing one would expose a whole
    # hidden directory (a home directory, /tmp, /run, the store's folder).
    hiding = [m.path for m in mounts if m.kind in _EMPTY]
    exposed += [
        p
        for p in _runtime_dirs(command, workdir, env)
        if hidden(p) and not any(_Mount(_EXPOSE, p).holds(h) for h in hiding)
    ]
    resolv = os.path.realpath("/etc/resolv.conf")
    if network and hidden(resolv) and Path(resolv).is_file():
        exposed.append(resolv)  # systemd-resolved keeps it under /run
    mounts = _ordered([*mounts, *(_Mount(_EXPOSE, p) for p in exposed)])
    protected = []
    for path in read_only_paths:
        cover = _cover(path, mounts)
        if cover is not None and cover.kind == _WRITABLE and Path(path).exists():
            protected.append(_Mount(_PROTECT, path))
    mounts = _ordered([*mounts, *protected])

    # The store's files that are still in sight (its folder holds the working
    # directory, or is it): /dev/null in their place.
    def in_sight(path: str) -> bool:
        cover = _cover(path, mounts)
        return cover is None or cover.kind not in _EMPTY

    files = store.files if store is not None else ()
    masked = [_Mount(_MASK, f) for f in files if Path(f).is_file() and in_sight(f)]
    return _ordered([*mounts, *masked])


def _locate(program: str, workdir: str, env: Mapping[str, str]) -> str:
    """The absolute path ``program`` runs from, as ``execvp`` finds it."""
    if "/" in program:
        path = os.path.join(workdir, program)
        if not os.path.lexists(path):
            msg = f"command not found: {program!r}"
            raise InvalidInput(msg)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            msg = f"command is not executable: {program!r}"
            raise InvalidInput(msg)
        return os.path.normpath(path)
    search = os.pathsep.join(
        os.path.join(workdir, d) for d in os.get_exec_path(dict(env))
    )
    found = shutil.which(program, path=search)
    if found is None:
        msg = f"command not found: {program!r}"
        raise InvalidInput(msg)
    return os.path.normpath(found)


def _interpreter(path: str, workdir: str, env: Mapping[str, str]) -> str | None:
    """The program a ``#!`` script names (through ``env``), if any."""
    try:
        with open(path, "rb") as script:
            head = script.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        if not names:
            return None
        with suppress(InvalidInput):
            return _locate(names[0], workdir, env)
        return None
    return words[0]


def _check_visible(
    command: str, workdir: str, env: Mapping[str, str], mounts: Sequence[_Mount]
) -> None:
    """Refuse a command whose program or interpreter the sandbox hides."""
    program = _locate(command, workdir, env)
    needed = [program]
    interpreter = _interpreter(program, workdir, env)
    if interpreter is not None:
        needed.append(interpreter)
    shared = {os.path.realpath(d) for d in _SEALED_DIRS}
    for path in needed:
        for seen in (os.path.abspath(path), os.path.realpath(path)):
            cover = _cover(seen, mounts)
            if cover is not None and (
                cover.kind == _HIDE or (cover.kind == _SEAL and cover.path in shared)
            ):
                msg = (
                    f"command {command!r} needs {seen}, which the gate sandbox "
                    f"hides (it is under {cover.path}); expose it, or the "
                    "installation it belongs to, with --allow-path "
                    "(allow_paths= in Python)"
                )
                raise InvalidInput(msg)


def _bwrap_argv(
    program: str,
    command: Sequence[str],
    workdir: str,
    network: bool,
    mounts: Sequence[_Mount],
    sources: Sequence[int],
    status_fd: int,
    tmp_bytes: int,
) -> list[str]:
    """``sources``: for each mount, the descriptor bwrap mounts (-1: none)."""
    return [
        program,
        *_BWRAP_BASE,
        # bwrap's /dev holds /dev/shm on an unbounded tmpfs: bound it too.
        *("--size", str(tmp_bytes), "--tmpfs", "/dev/shm"),
        *(["--share-net"] if network else []),
        *(
            option
            for mount, source in zip(mounts, sources, strict=True)
            for option in mount.options(tmp_bytes, source)
        ),
        # Sealed once whatever is shown inside them is mounted.
        *(
            option
            for mount in mounts
            if mount.kind == _SEAL
            for option in ("--remount-ro", mount.path)
        ),
        "--chdir",
        workdir,
        "--json-status-fd",
        str(status_fd),
        "--",
        *command,
    ]


def _started(status: bytes) -> bool:
    """Whether bwrap's JSON status lines report a started child."""
    for line in status.decode("utf-8", "replace").splitlines():
        with suppress(ValueError):
            report = json.loads(line)
            if isinstance(report, dict) and "child-pid" in report:
                return True
    return False


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
STORE_SUFFIXES = ("", "-wal", "-shm", "-journal")


_POSTGRES_URL = re.compile(r"(?i)postgres(?:ql)?://")
_PORT_AT_END = re.compile(r":[0-9]*$")


@dataclass(frozen=True)
class _Store:
    """The referee's store as a gate must not reach it.

    A SQLite store: its folder and files as real paths, and ``configured``,
    the path the referee opens it by, made absolute but not resolved (a
    symlink on it is followed at each open). A PostgreSQL store (a
    ``postgresql://`` URL): the socket directories its host names (real
    paths of existing folders; a host name or address is out of reach in the
    sandbox's network namespace)."""

    folder: str | None
    files: tuple[str, ...]
    configured: str | None = None
    sockets: tuple[str, ...] = ()

    @classmethod
    def of(cls, database: str | Path) -> _Store:
        text = str(database)
        if _CONTROL.search(text):
            msg = f"store {text!r} holds a control character"
            raise InvalidInput(msg, field="store")
        if _POSTGRES_URL.match(text):
            return cls(None, (), sockets=_socket_dirs(text))
        if text.startswith("file:"):  # a SQLite URI: its path, without the query
            text = text[5:].split("?", 1)[0].split("#", 1)[0]
            if text.startswith("//"):
                text = text[2:]
        configured = os.path.join(os.getcwd(), os.path.expanduser(text))
        real = os.path.realpath(configured)
        return cls(
            os.path.dirname(real),
            tuple(real + s for s in STORE_SUFFIXES),
            configured,
        )


def _socket_dirs(url: str) -> tuple[str, ...]:
    """The existing socket directories a libpq URL's hosts name (``host=``
    in its query, else its host part, percent-encoded), as real paths."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError:
        hostname = None
        parts = urlsplit("")
    hosts: list[str] = []
    for values in parse_qs(parts.query, keep_blank_values=True).get("host", []):
        hosts += values.split(",")
    # The host part as written (libpq keeps its case) and as config reads it.
    netloc = parts.netloc.rpartition("@")[2]
    hosts += [unquote(_PORT_AT_END.sub("", h)) for h in netloc.split(",")]
    hosts.append(unquote(hostname or ""))
    found: list[str] = []
    for host in hosts:
        if host.startswith("/"):
            real = os.path.realpath(host)
            if real != "/" and Path(real).is_dir() and real not in found:
                found.append(real)
    return tuple(found)


def store_file(service: RecoveryService) -> str | None:
    """What of ``service``'s store a gate must not reach (``run_gate``'s
    ``store``): its SQLite file; for PostgreSQL, a ``postgresql://`` URL
    naming only the socket directories its host names (no credentials), or
    ``None`` when it names none (the network namespace keeps gates from its
    server); ``None`` in memory."""
    backend = backend_of(service)
    if backend is Backend.POSTGRES:
        host = str(service.env.get("POSTGRES_HOST") or "")
        folders = [h for h in host.split(",") if h.startswith("/")]
        if not folders:
            return None
        return "postgresql://?host=" + quote(",".join(folders), safe="/,")
    if backend is not Backend.SQLITE:
        return None
    path = sqlite_path(service)
    # A SQLite file whose relative name reads as a URL is named as a path.
    return f"./{path}" if _POSTGRES_URL.match(path) else path


def _writable_link(path: str, writable: str) -> str | None:
    """Where ``path`` (absolute) passes through a symlink, or a ``..``, in
    ``writable`` (a real folder) or below it: a place a gate that may write
    there could replace, so that the next open of ``path`` finds a file of
    its making. ``None`` when there is none. Resolves as the kernel does,
    one component at a time, following symlinks (at most 40)."""
    inside = _Mount(_WRITABLE, writable).holds
    pending = list(reversed(PurePosixPath(path).parts[1:]))
    current = "/"
    links = 0
    while pending:
        name = pending.pop()
        if name == "..":
            if current != writable and inside(current):
                return os.path.join(current, name)
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        if not os.path.islink(candidate):
            current = candidate
            continue
        links += 1
        if inside(current) or links > 40:
            return candidate
        target = PurePosixPath(os.readlink(candidate))
        if target.is_absolute():
            current = "/"
            pending += reversed(target.parts[1:])
        else:
            pending += reversed(target.parts)
    return None


def _open_path(real: str, *, folder: bool) -> int:
    """``real`` (an absolute path without symlinks) opened ``O_PATH``, one
    component at a time, none followed if it is a symlink: the descriptor
    names exactly what was at that path, whatever is renamed or swapped
    afterwards. ``OSError`` when a component is a symlink (``ELOOP``) or not
    a folder, or ``real`` is not a folder though ``folder``."""
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open("/", flags | os.O_DIRECTORY)
    try:
        names = PurePosixPath(real).parts[1:]
        for index, name in enumerate(names):
            opened = os.open(name, flags, dir_fd=fd)
            os.close(fd)
            fd = opened
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):
                raise OSError(errno.ELOOP, "a symlink", real)
            if (folder or index < len(names) - 1) and not stat.S_ISDIR(mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a folder", real)
        if os.readlink(f"/proc/self/fd/{fd}") != real:
            raise OSError(errno.ESTALE, "moved while it was opened", real)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_sources(mounts: Sequence[_Mount], workdir: str, folder: int) -> list[int]:
    """For each mount bwrap makes from the host, a descriptor of what it
    shows (the working directory: the one checked, ``folder``); -1 for the
    others. The caller closes them."""
    sources: list[int] = []
    try:
        for mount in mounts:
            if not mount.bound:
                sources.append(-1)
            elif mount.path == workdir:
                sources.append(os.dup(folder))  # bwrap closes each one it used
            else:
                sources.append(_open_path(mount.path, folder=False))
    except BaseException:
        _close(sources)
        raise
    return sources


def _close(fds: Iterable[int]) -> None:
    for fd in fds:
        if fd >= 0:
            with suppress(OSError):
                os.close(fd)


def _same_file(path: str, opened: os.stat_result) -> bool:
    try:
        found = os.stat(path)
    except OSError:
        return False
    return (found.st_dev, found.st_ino) == (opened.st_dev, opened.st_ino)


class _Cgroup:
    """A ``pids`` cgroup of its own for one gate, where this host lets the
    runner make one (cgroup v1's ``pids`` hierarchy, or a cgroup v2 folder
    whose subtree has the ``pids`` controller): the bound on the processes and
    threads a gate runs at once, root's too. ``None`` from :meth:`make` where
    there is none (``RLIMIT_NPROC`` is all there is then)."""

    _made = 0
    ROOT = Path("/sys/fs/cgroup")

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def _parents(cls) -> list[Path]:
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError:
            return []
        found = []
        for line in lines:
            _, controllers, where = line.split(":", 2)
            relative = where.lstrip("/")
            if "pids" in controllers.split(","):
                found.append(cls.ROOT / "pids" / relative)
            elif controllers == "" and (cls.ROOT / "cgroup.controllers").is_file():
                parent = cls.ROOT / relative
                with suppress(OSError):
                    enabled = (parent / "cgroup.subtree_control").read_text()
                    if "pids" in enabled.split():
                        found.append(parent)
        return found

    @classmethod
    def make(cls, max_processes: int) -> _Cgroup | None:
        for parent in cls._parents():
            cls._made += 1
            path = parent / f"devs-gate-{os.getpid()}-{cls._made}"
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                (path / "pids.max").write_text(str(max_processes))
            except OSError:
                with suppress(OSError):
                    path.rmdir()
                continue
            return cls(path)
        return None

    def join(self) -> None:
        """Runs in the child before exec: it and all it starts are counted."""
        fd = os.open(self.path / "cgroup.procs", os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)

    def remove(self) -> None:
        """Once the gate's processes are gone (killed and reaped by then)."""
        for _ in range(50):
            try:
                self.path.rmdir()
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)  # the last ones are still exiting
            else:
                return


def check_allow_paths(paths: Iterable[str | Path]) -> tuple[str, ...]:
    """``paths`` as a library caller's ``allow_paths``: absolute paths, without
    control characters, that exist. Raises :class:`InvalidInput` naming the
    first that is not."""
    if isinstance(paths, str | bytes | Path):
        msg = "allow_paths must be a list of paths, not one path"
        raise InvalidInput(msg, field="allow_paths")
    checked = []
    for path in paths:
        if not isinstance(path, str | Path):
            msg = f"allow_paths must hold paths, got {type(path).__name__}"
            raise InvalidInput(msg, field="allow_paths")
        text = str(path)
        if _CONTROL.search(text):
            msg = f"allowed path {text!r} holds a control character"
            raise InvalidInput(msg, field="allow_paths")
        if not os.path.isabs(text):
            msg = f"allowed path {text!r} must be absolute"
            raise InvalidInput(msg, field="allow_paths")
        if not os.path.exists(text):
            msg = f"allowed path {text!r} does not exist"
            raise InvalidInput(msg, field="allow_paths")
        checked.append(text)
    return tuple(checked)


def _real_paths(paths: Iterable[str | Path], what: str) -> list[str]:
    found = []
    for path in paths:
        if _CONTROL.search(str(path)):
            msg = f"{what} {str(path)!r} holds a control character"
            raise InvalidInput(msg)
        real = os.path.realpath(os.path.expanduser(str(path)))
        if not os.path.exists(real):
            msg = f"{what} {str(path)!r} does not exist"
            raise InvalidInput(msg)
        found.append(real)
    return found


def run_gate(
    command: Sequence[str],
    *,
    cwd: str | Path | None = None,
    timeout: float = 600.0,
    cpu_seconds: int | None = None,
    memory_mb: int | None = None,
    pass_env: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
    output_cap: int = DEFAULT_OUTPUT_CAP,
    isolation: Isolation = "auto",
    network: bool = False,
    allow_paths: Iterable[str | Path] = (),
    read_only_paths: Iterable[str | Path] = (),
    bwrap: str | None = None,
    store: str | Path | None = None,
    in_store_folder: bool = False,
    settings: GateSettings | None = None,
    within: str | Path | None = None,
) -> GateRun:
    """Run ``command`` sandboxed and report how it ended.

    ``isolation``: ``"auto"`` runs under bubblewrap where it works and falls
    back to the weaker isolation elsewhere (``GateRun.fallback`` says why);
    ``"require"`` raises :class:`IsolationUnavailable` instead, before running
    anything; ``"none"`` does not use bubblewrap. Under bubblewrap,
    ``network`` keeps the host network, ``allow_paths`` are shown read-only
    where the sandbox would hide them (in the home directory, ``/tmp``,
    ``/run``), and ``read_only_paths`` that lie in the working directory are
    read-only there. Shown read-only without asking: the Python running devs,
    the active virtual environment and a Python command's installation
    (:func:`_runtime_dirs`). ``bwrap`` names the program (default: ``bwrap``
    on ``PATH``).

    The working directory is resolved and opened once, one component at a
    time, no symlink followed (:func:`_open_path`); its checks hold for that
    descriptor, bwrap mounts it (``--bind-fd``) and the command starts in it,
    so swapping a folder on its path for a symlink meanwhile changes nothing
    (a path that changed while being opened is :class:`InvalidInput`).
    ``within``: the working directory must be that folder or lie in it
    (checked on the folder opened; :class:`InvalidInput` otherwise).

    ``store`` names the referee's store (:func:`store_file`). A SQLite file:
    no gate may open, create or replace it, its ``-wal``, ``-shm`` or
    ``-journal``. Under bubblewrap its folder is an empty read-only
    directory (each folder between the working directory and it a mount
    point, which cannot be renamed), unless the folder holds the working
    directory: there it is read-only already, and its files are
    ``/dev/null``. A working directory that *is* the store's folder is
    refused (:class:`InvalidInput`, before anything runs) unless
    ``in_store_folder``, which runs the gate with that folder read-only; so
    is one that is that folder or holds it by another path (a bind mount),
    and a store whose configured path passes through a symlink or a ``..``
    in the working directory (the gate could replace it:
    :func:`_writable_link`). A ``postgresql://`` URL: the socket directories
    its host names are empty read-only directories (or already hidden); a
    working directory inside one is refused.

    ``settings`` (default: :meth:`GateSettings.from_environ` of this process)
    bounds each private tmpfs and the processes; ``max_processes`` is a
    ``pids`` cgroup where one can be made, else ``RLIMIT_NPROC``.
    """
    if not command:
        msg = "command must not be empty"
        raise InvalidInput(msg)
    _positive("timeout", timeout, 86_400)
    _positive("cpu_seconds", cpu_seconds, 86_400)
    _positive("memory_mb", memory_mb, 1_048_576)
    _positive("output_cap", output_cap, 1 << 30)
    if isolation not in ISOLATIONS:
        msg = f"isolation must be one of {', '.join(ISOLATIONS)}, got {isolation!r}"
        raise InvalidInput(msg)
    workdir = Path(cwd) if cwd is not None else Path.cwd()
    limits = settings if settings is not None else GateSettings.from_environ(os.environ)
    real_workdir, folder = _open_workdir(workdir, within)
    sources: list[int] = []
    status_read = status_write = -1
    try:
        try:
            kept = _Store.of(store) if store is not None else None
            _check_store(kept, workdir, real_workdir, folder, in_store_folder)
            env, scrubbed = scrub_environment(
                os.environ if environ is None else environ, pass_env
            )
            allowed = _real_paths(allow_paths, "allowed path")
            program, fallback = _sandbox_program(isolation, bwrap)
            argv = list(command)
            if program is not None:
                mounts = _mounts(
                    real_workdir,
                    env,
                    network,
                    allowed,
                    [os.path.realpath(p) for p in read_only_paths],
                    command[0],
                    kept,
                )
                _check_visible(command[0], real_workdir, env, mounts)
                sources = _open_sources(mounts, real_workdir, folder)
                status_read, status_write = os.pipe()
                argv = _bwrap_argv(
                    program,
                    command,
                    real_workdir,
                    network,
                    mounts,
                    sources,
                    status_write,
                    limits.tmp_mb * 1024 * 1024,
                )
        except OSError as error:
            _close((status_read, status_write))
            msg = (
                "a path of the gate changed while its sandbox was being set up "
                f"({error.strerror or error}: {error.filename!s:.300}); nothing ran"
            )
            raise InvalidInput(msg) from None

        cgroup = _Cgroup.make(limits.max_processes)
        try:
            return _run(
                command,
                argv,
                folder,
                env,
                scrubbed,
                program,
                fallback,
                (status_read, status_write),
                sources,
                timeout,
                output_cap,
                lambda: _limits(cpu_seconds, memory_mb, limits.max_processes, cgroup),
            )
        finally:
            if cgroup is not None:
                cgroup.remove()
    finally:
        _close([folder, *sources])


def _open_workdir(workdir: Path, within: str | Path | None) -> tuple[str, int]:
    """The working directory's real path, and a descriptor of it, opened
    once (:func:`_open_path`): everything after is checked on it, bwrap
    mounts it, and the command starts in it."""
    if not workdir.is_dir():
        msg = f"working directory {str(workdir)!r} does not exist"
        raise InvalidInput(msg, field="cwd")
    try:
        real = os.path.realpath(workdir)
        folder = _open_path(real, folder=True)
    except OSError as error:
        msg = (
            f"working directory {str(workdir)!r} changed while the gate was "
            f"being set up ({error.strerror or error}); nothing ran"
        )
        raise InvalidInput(msg, field="cwd") from None
    if within is not None:
        home = os.path.realpath(within)
        if not _Mount(_WRITABLE, home).holds(real):
            os.close(folder)
            msg = (
                f"working directory {str(workdir)!r} (now {real!r}) is not "
                f"inside {home!r}"
            )
            raise InvalidInput(msg, field="cwd")
    return real, folder


def _check_store(
    kept: _Store | None,
    workdir: Path,
    real_workdir: str,
    folder: int,
    in_store_folder: bool,
) -> None:
    """Refuse a gate that could reach the store: see :func:`run_gate`."""
    if kept is None or kept.folder is None or kept.configured is None:
        return
    in_folder = kept.folder == real_workdir
    if in_folder and not in_store_folder:
        msg = (
            f"the gate's working directory {str(workdir)!r} holds the "
            f"referee's store {os.path.basename(kept.files[0])!r}: a gate "
            "never runs in the store's folder unless asked. Keep the store "
            "in another folder (DEVS_DB or --db), run the gate in another "
            "one (--cwd; run_gate's cwd), or ask to run it there with the "
            "folder read-only (--in-store-folder; run_gate's in_store_folder)"
        )
        raise InvalidInput(msg, field="cwd")
    opened = os.fstat(folder)
    for above in (kept.folder, *map(str, PurePosixPath(kept.folder).parents)):
        if above != real_workdir and _same_file(above, opened):
            msg = (
                f"the gate's working directory {str(workdir)!r} is the "
                f"folder {above!r} by another path (a bind mount), which holds "
                "the referee's store: run the gate in another folder"
            )
            raise InvalidInput(msg, field="cwd")
    if in_folder:
        return  # read-only to the gate
    place = _writable_link(kept.configured, real_workdir)
    if place is not None:
        msg = (
            f"the referee opens its store by the path {kept.configured!r}, "
            f"which passes through {place!r}: a symlink (or '..') in the "
            f"gate's working directory {real_workdir!r}, which the gate could "
            "replace to have the referee open a store of its making. Name "
            f"the store by its real path ({kept.files[0]!r}; DEVS_DB or "
            "--db), or run the gate in another folder"
        )
        raise InvalidInput(msg, field="store")


def _sandbox_program(
    isolation: Isolation, bwrap: str | None
) -> tuple[str | None, str | None]:
    """The bwrap program to run the gate under (None: none), and the
    fallback notice when the gate runs without it."""
    if isolation == "none":
        return None, None
    program, why = _find_bwrap(bwrap)
    why = why if program is None else (_probe(program) or "")
    if not why:
        return program, None
    if isolation == "require":
        msg = f"gate isolation is required, but {why}"
        raise IsolationUnavailable(msg)
    return None, f"{why}; the gate runs with {WEAKER_ISOLATION}"


def _run(
    command: Sequence[str],
    argv: list[str],
    folder: int,
    env: dict[str, str],
    scrubbed: list[str],
    program: str | None,
    fallback: str | None,
    status: tuple[int, int],
    sources: Sequence[int],
    timeout: float,
    output_cap: int,
    limits: Callable[[], None],
) -> GateRun:
    """Run ``argv`` (the command, or bwrap and the command) in ``folder``
    (a descriptor of the working directory) and judge it."""
    status_read, status_write = status
    buffer = _TailBuffer(int(output_cap))

    def preexec() -> None:
        os.fchdir(folder)  # the folder checked, not whatever its path names now
        limits()

    start = time.monotonic()
    try:
        process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=(
                (status_write, *(fd for fd in sources if fd >= 0))
                if program is not None
                else ()
            ),
            preexec_fn=preexec,
        )
    except OSError as error:
        if program is not None:
            os.close(status_read)
            msg = f"the gate sandbox could not be set up: {program}: {error}"
            raise IsolationUnavailable(msg) from None
        if isinstance(error, FileNotFoundError):
            msg = f"command not found: {command[0]!r}"
            raise InvalidInput(msg) from None
        if isinstance(error, PermissionError):
            msg = f"command is not executable: {command[0]!r}"
            raise InvalidInput(msg) from None
        raise
    finally:
        if program is not None:
            os.close(status_write)

    stdout = cast(io.BufferedReader, process.stdout)

    def pump() -> None:
        for chunk in iter(lambda: stdout.read1(65_536), b""):
            buffer.write(chunk)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(process, grace=KILL_GRACE_SECONDS)
    finally:
        # Members left behind by the leader die with the gate (and free the pipe).
        _kill_group(process, grace=0.0)
        reader.join(timeout=KILL_GRACE_SECONDS)
        if not reader.is_alive():
            # A process that left the group may still hold the pipe; closing it
            # under the reader would block until that process exits.
            stdout.close()
    duration = time.monotonic() - start

    if program is not None:
        report = _read_available(status_read)
        os.close(status_read)
        if not timed_out and not _started(report):
            said = buffer.data.decode("utf-8", "replace").strip().splitlines()
            msg = "the gate sandbox could not be set up: " + (
                said[-1].strip() if said else f"bwrap exit code {process.returncode}"
            )
            raise IsolationUnavailable(msg)

    returncode = process.returncode
    signal_name: str | None = None
    exit_code: int | None = returncode
    if timed_out:
        exit_code = None
    elif returncode is not None and returncode < 0:
        signal_name = signal.Signals(-returncode).name
        exit_code = None
    elif program is not None and returncode is not None and returncode > 128:
        # bwrap reports a child killed by signal N as exit code 128 + N.
        with suppress(ValueError):
            signal_name = signal.Signals(returncode - 128).name
            exit_code = None

    # Undecodable bytes and NULs (which no text argument takes) become U+FFFD:
    # whatever the command printed, its gate can be recorded.
    text = buffer.data.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
    if buffer.dropped:
        text = f"[{buffer.dropped:,} earlier bytes of output dropped]\n" + text
    clean = redact(text)
    return GateRun(
        command=tuple(command),
        exit_code=exit_code,
        output=clean,
        output_hash=error_hash(clean),
        duration_seconds=duration,
        timed_out=timed_out,
        timeout_seconds=timeout,
        signal_name=signal_name,
        truncated_bytes=buffer.dropped,
        scrubbed_env=tuple(scrubbed),
        isolation="bwrap" if program is not None else "none",
        fallback=fallback,
    )


def _read_available(fd: int) -> bytes:
    """What is in the pipe now, without waiting for its writers to close it."""
    os.set_blocking(fd, False)
    chunks = []
    with suppress(BlockingIOError):
        while chunk := os.read(fd, 65_536):
            chunks.append(chunk)
    return b"".join(chunks)


def _kill_group(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after ``grace``.

    With ``start_new_session`` the leader's pid is the group id; the group
    outlives its leader while any member lives.
    """
    if grace > 0:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
