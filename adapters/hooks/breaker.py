"""The circuit breaker for ready-made coding agents: ``devs hook AGENT``.

An agent runs ``devs hook`` at points of its loop with one JSON event; the
event is read in the agent's dialect (:mod:`devs.adapters.hooks.dialect`) as a
:class:`Seen`, decided by :class:`Breaker` with any
:class:`~devs.domain.service.RecoveryApi` (the local store, or ``devs serve``
with ``DEVS_URL``), and answered as an :class:`Answer` in the agent's words.
Gates, strategies, lessons, halts and how tasks are named: docs/agents.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from devs.adapters.gate_run import command_line
from devs.adapters.hooks import variables
from devs.adapters.hooks.usage import (
    CURSORS_MAX,
    UNKNOWN_MODEL,
    Cursor,
    Reader,
    moved,
    read_session,
)
from devs.domain import blacklist
from devs.domain.chart import FINISHED, WAITING, WORKING, TaskState
from devs.domain.decisions import Outcome, TaskSummary
from devs.domain.errors import AlreadyExists, InvalidInput, NotFound
from devs.domain.names import SessionReason
from devs.domain.output import error_line as the_error_line
from devs.domain.output import shown as the_error_line_shown
from devs.domain.redaction import redact
from devs.domain.service import RecoveryApi
from devs.domain.spend import Spend
from devs.domain.values import ID_MAX, LINK_MAX, STRATEGY_MAX

TASK_ENV = "DEVS_TASK_ID"
URL_ENV = "DEVS_URL"
GATE_PATTERN_ENV = "DEVS_GATE_PATTERN"
HOOK_TIMEOUT_ENV = "DEVS_HOOK_TIMEOUT"
NUDGE_ENV = "DEVS_HOOK_NUDGE"
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"0", "false", "no", "off"})
DEFAULT_HOOK_TIMEOUT = 10.0
MAX_HOOK_TIMEOUT = 600.0

GATE_PATTERN = (
    r"(?:^|[\s;&|(])"
    r"(?:pytest|py\.test"
    r"|python(?:3(?:\.\d+)?)?\s+-m\s+pytest"
    r"|(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?test"
    r"|cargo\s+(?:test|nextest)"
    r"|go\s+test"
    r"|make\s+(?:-\S+\s+)*(?:test|check)"
    r"|tox|nox)"
    r"(?=$|[\s;&|)])"
)
"""What makes a shell command a gate, by default: pytest (``python -m pytest``
too), ``npm``/``pnpm``/``yarn``/``bun test``, ``cargo test``, ``go test``,
``make test`` (or ``check``), tox and nox, anywhere in the command line."""

GATE_SCAN = 8_192
"""How much of a command the gate pattern reads (a command longer than this
is a gate only if its gate command appears in its first 8 KiB)."""

EDIT_TEXT_MAX = 1_000
"""How much of one edit's new text the strategy keeps."""
COMMAND_TEXT_MAX = 200
"""How much of one command the strategy keeps."""
PENDING_MAX = 50
"""How many changes since the last gate the state file keeps (the latest)."""
ERROR_LINE_MAX = 300
DIRECTIVE_SHOWN = 6_000
"""How much of the blacklist directive a refusal quotes (Claude Code cuts a
hook's strings at 10,000 characters; the stop reason follows it)."""

_EXIT_CODE = re.compile(
    r"(?:exit code|exit status|exited with (?:non-zero )?(?:status )?code"
    r"|non-zero status code)[:=]?\s{0,4}(-?\d{1,10})",
    re.IGNORECASE,
)
"""The exit code in an agent's error text: ``Exit code 1``, ``Command exited
with non-zero status code 1``, ``exit status 2``."""


# ===================================================================== what
# The agent's event, in the referee's terms.

EventKind = Literal[
    "session_start",
    "prompt",
    "pre_tool",
    "post_tool",
    "post_tool_failure",
    "batch",
    "stop",
    "other",
]
"""What an event is to the breaker: ``prompt`` a user's prompt about to be
sent to the model, ``batch`` the tool calls of one model answer all done
(the last point before the next model request: Claude Code's
``PostToolBatch``)."""


@dataclass(frozen=True)
class Seen:
    """One hook event, read out of the agent's dialect."""

    kind: EventKind
    name: str
    """The event's name in the agent's words (``PreToolUse``)."""
    cwd: str | None = None
    command: str | None = None
    """A shell tool's command line."""
    edits: tuple[tuple[str, str], ...] = ()
    """An editing tool's changes, each a path and its new text."""
    edits_now: bool = False
    """The agent sends no event after these edits (Codex's ``apply_patch``
    run as a shell command): they count when announced, on ``pre_tool``."""
    exit_code: int | None = None
    failed: bool = False
    output: str = ""
    stop_hook_active: bool = False
    unjudged: bool = False
    """A shell command ran, but the agent did not say how it ended (nor its
    output): a gate so ended is not recorded."""
    transcript: str | None = None
    """Where the agent keeps the session's transcript (Claude Code's and
    Codex's ``transcript_path``): a task started on this event links it."""
    session: str | None = None
    """The agent's id of its session, where the hooks need it to find the
    session's file (Copilot CLI's ``sessionId``)."""


@dataclass(frozen=True)
class Answer:
    """What the breaker tells the agent; the dialect says it in its words.

    ``halt`` stops the agent altogether (the ladder stopped the task);
    ``deny`` refuses the tool call about to run; ``block`` refuses to let the
    agent stop (its last gate is red); ``context`` is said to the agent.
    Nothing set: the agent goes on as if there were no hook."""

    halt: str | None = None
    deny: str | None = None
    block: str | None = None
    context: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.halt or self.deny or self.block or self.context)


NOTHING = Answer()


# ============================================================ the guard
# What an agent's tool call may not do: answer for a person, or reach the
# referee's own files. Defence in depth for a shell the referee does not
# sandbox (docs/security.md, "Threat model"): it reads the command as words,
# so a determined agent can still hide a call (a script it wrote, python -c);
# it stops the plain ones, and each refusal is said to the agent.

PERSON_COMMANDS = frozenset(
    {
        "budget",
        "claim",
        "release",
        "take-over",
        "resolve",
        "resume",
        "rewind",
        "skip",
        "operator",
        "hooks",
        "webhooks",
        "projections",
        "deadlines",
    }
)
"""``devs`` commands that answer for a person or change the referee: a person
runs them, never the agent the referee watches."""
_TOKEN = re.compile(
    r"""(?P<word>(?:'[^']*+'|"(?:[^"\\]++|\\.)*+"|\\.|\$(?!\()|[^\s'"\\;&|()<>`$]++)++)"""
    r"""|(?P<substitution>\$\(|`)|(?P<separator>[;&|()<>\n])|\s++""",
    re.DOTALL,
)
r"""A shell command's words, as the shell joins them (``de''vs``, ``"devs"``,
``re\sume`` are ``devs`` and ``resume``), and what ends a command: a
separator, or a substitution (``$(`` or a backquote), which starts one of its
own. Every piece is possessive: one pass, whatever the text."""
_QUOTING = re.compile(r"""'([^']*+)'|"((?:[^"\\]++|\\.)*+)"|\\(.)""", re.DOTALL)
_TAKES_VALUE = frozenset({"--db", "--url"})
_FEEDERS = frozenset({"xargs", "parallel"})
"""Programs that run a command with words read elsewhere (stdin)."""


def _unquoted(word: str) -> str:
    if not any(mark in word for mark in "'\"\\"):
        return word
    return _QUOTING.sub(
        lambda m: m.group(1) if m.group(1) is not None else m.group(2) or m.group(3),
        word,
    )


def _devs_program(word: str) -> bool:
    base = word.rsplit("/", 1)[-1]
    return base in ("devs", "devs.exe") or word.startswith("devs.adapters")


def shell_words(command: str) -> Iterator[str | None]:
    """The words of ``command``, unquoted, with ``None`` where one command
    ends and another begins (a separator), and ``"$("`` where a substitution
    begins."""
    for match in _TOKEN.finditer(command):
        if (word := match.group("word")) is not None:
            yield _unquoted(word)
        elif match.group("substitution") is not None:
            yield "$("
        elif match.group("separator") is not None:
            yield None


def person_command(command: str) -> str | None:
    """The ``devs`` subcommand in ``command`` that only a person may run, if
    any (``devs --db s.sqlite resume T`` -> ``resume``); ``"(unknown)"`` when
    a substitution or a feeder (``xargs devs``) chooses it, which cannot be
    read before it runs. One pass over the command's words."""
    expecting = False  # after a devs program: its options, then the command
    skip_value = False
    fed = False  # a feeder (xargs) came first in this command
    for word in shell_words(command):
        if word is None or word == "$(":
            if expecting and word == "$(":
                return "(unknown)"
            expecting = skip_value = fed = False
            continue
        if _devs_program(word):
            if fed:
                return "(unknown)"
            expecting, skip_value = True, False
            continue
        if not expecting:
            fed = fed or word.rsplit("/", 1)[-1] in _FEEDERS
            continue
        if skip_value:
            skip_value = False
            continue
        if word.startswith("-"):
            skip_value = word in _TAKES_VALUE
            continue
        expecting = False
        if word in PERSON_COMMANDS:
            return word
    return None


def guarded_paths(store: str, state_dir: Path, sockets: Path | None) -> tuple[str, ...]:
    """The referee's own files an agent's tool may not name: a SQLite store
    (``sqlite:PATH``) with its ``-wal``, ``-shm`` and ``-journal``, the
    hooks' state folder and the hook server's socket folder."""
    paths: list[str] = []
    if store.startswith("sqlite:"):
        db = os.path.realpath(store.removeprefix("sqlite:"))
        paths += [db, *(db + suffix for suffix in ("-wal", "-shm", "-journal"))]
    paths.append(os.path.realpath(state_dir))
    if sockets is not None:
        paths.append(os.path.realpath(sockets))
    return tuple(paths)


def reaches_referee(seen: Seen, guarded: Sequence[str], cwd: str) -> str | None:
    """Why this tool call reaches for the referee, or ``None``."""
    if seen.command:
        if (word := person_command(seen.command)) == "(unknown)":
            return (
                "a `devs` command whose words are chosen as it runs (a "
                "substitution, xargs) may answer for a person: a person runs it"
            )
        if word is not None:
            return (
                f"`devs {word}` answers for a person or changes the referee: "
                "a person runs it, not the agent"
            )
        names = {os.path.basename(p) for p in guarded if not os.path.isdir(p)}
        folders = [p for p in guarded if os.path.isdir(p)]
        for word in shell_words(seen.command):
            if not word or word == "$(":
                continue
            # A store's file by its name, as a word or a path's last part
            # (``devs_state.sqlite-journal``, ``./devs_state.sqlite``); a
            # folder, whose name says little (``hooks``), by its whole path.
            name = word.rstrip("/").rsplit("/", 1)[-1].split("=")[-1]
            if name in names:
                return f"the command names the referee's file {name}"
            for folder in folders:
                if folder in word:
                    return f"the command names the referee's folder {folder}"
    for edited, _ in seen.edits:
        real = os.path.realpath(os.path.join(cwd, edited))
        for path in guarded:
            if real == path or real.startswith(path.rstrip("/") + "/"):
                return f"the edit writes the referee's file {os.path.basename(path)}"
    return None


# ============================================================ the settings


@dataclass(frozen=True)
class HookSettings:
    """``devs hook``'s own settings, read from the environment (the store's
    are the usual ``DEVS_DB`` / ``DEVS_DATABASE_URL``)."""

    task_id: str | None = None
    url: str | None = None
    token: str | None = None
    gate_pattern: re.Pattern[str] = field(
        default_factory=lambda: re.compile(GATE_PATTERN)
    )
    state_dir: Path = field(default_factory=lambda: default_state_dir(os.environ))
    timeout: float = DEFAULT_HOOK_TIMEOUT
    nudge: bool = True
    """A failed gate below the thresholds tells the agent what failed so far
    (``DEVS_HOOK_NUDGE``, on by default)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> HookSettings:
        """The settings, each wrong one an ``InvalidInput`` naming its variable."""
        task_id = (environ.get(TASK_ENV) or "").strip() or None
        if task_id is not None:
            _check_task_id(task_id, TASK_ENV)
        url = (environ.get(URL_ENV) or "").strip() or None
        if url is not None and not re.match(r"https?://[^\s/]+", url):
            msg = f"{URL_ENV} must be the http:// or https:// URL of a devs serve"
            raise InvalidInput(msg, field=URL_ENV)
        pattern_text = environ.get(GATE_PATTERN_ENV) or GATE_PATTERN
        try:
            pattern = re.compile(pattern_text)
        except re.error as error:
            msg = f"{GATE_PATTERN_ENV} is not a regular expression ({error})"
            raise InvalidInput(msg, field=GATE_PATTERN_ENV) from None
        timeout = DEFAULT_HOOK_TIMEOUT
        if raw := (environ.get(HOOK_TIMEOUT_ENV) or "").strip():
            try:
                timeout = float(raw)
            except ValueError:
                timeout = float("nan")
            if not 0 < timeout <= MAX_HOOK_TIMEOUT:  # NaN fails this too
                msg = (
                    f"{HOOK_TIMEOUT_ENV} must be a number of seconds in "
                    f"(0, {MAX_HOOK_TIMEOUT:g}], got {raw[:40]!r}"
                )
                raise InvalidInput(msg, field=HOOK_TIMEOUT_ENV)
        token = environ.get("DEVS_API_TOKEN") or None
        nudge = (environ.get(NUDGE_ENV) or "on").strip().lower()
        if nudge not in _ON | _OFF:
            msg = f"{NUDGE_ENV} must be on or off, got {nudge[:40]!r}"
            raise InvalidInput(msg, field=NUDGE_ENV)
        return cls(
            task_id=task_id,
            url=url.rstrip("/") if url else None,
            token=token,
            gate_pattern=pattern,
            state_dir=default_state_dir(environ),
            timeout=timeout,
            nudge=nudge in _ON,
        )


def default_state_dir(environ: Mapping[str, str]) -> Path:
    """``DEVS_HOOK_STATE_DIR``, else ``$XDG_STATE_HOME/devs/hooks``, else
    ``~/.local/state/devs/hooks`` (:func:`devs.adapters.hooks.variables.state_dir`);
    ``InvalidInput`` naming a bad one."""
    try:
        return variables.state_dir(environ)
    except variables.BadVariable as error:
        raise InvalidInput(str(error), field=error.variable) from None


def _check_task_id(task_id: str, name: str) -> None:
    bad = (
        len(task_id) > ID_MAX or not task_id.isprintable() or redact(task_id) != task_id
    )
    if bad:
        msg = (
            f"{name} must be a task id: one line of at most {ID_MAX} printable "
            "characters, with nothing that looks like a credential"
        )
        raise InvalidInput(msg, field=name)


# ================================================================ the task


def _git(cwd: str, *args: str) -> list[str] | None:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.splitlines()


@dataclass(frozen=True)
class Place:
    """Where the agent works: the repository's top folder (``cwd`` itself
    outside a repository) and its branch."""

    top: str
    branch: str | None
    cwd: str

    def head(self) -> str | None:
        """The commit at HEAD (``None`` outside a repository or before its
        first commit)."""
        lines = _git(self.cwd, "rev-parse", "--verify", "-q", "HEAD")
        return lines[0] if lines else None


def place_of(cwd: str) -> Place:
    """The repository and branch of ``cwd`` (one ``git`` call, two in a
    repository without a commit; a detached HEAD is named by its commit)."""
    lines = _git(cwd, "rev-parse", "--show-toplevel", "--abbrev-ref", "HEAD")
    if lines is None or len(lines) < 2:
        top_lines = _git(cwd, "rev-parse", "--show-toplevel")
        if not top_lines:
            return Place(top=os.path.abspath(cwd), branch=None, cwd=cwd)
        branch_lines = _git(cwd, "symbolic-ref", "--short", "-q", "HEAD")
        branch = branch_lines[0] if branch_lines else None
        return Place(top=top_lines[0], branch=branch, cwd=cwd)
    top, branch = lines[0], lines[1]
    place = Place(top=top, branch=branch, cwd=cwd)
    if branch == "HEAD":
        head = place.head()
        place = Place(top=top, branch=head[:12] if head else None, cwd=cwd)
    return place


_UNSAFE = re.compile(r"[^A-Za-z0-9._/@+-]+")


def task_base(place: Place) -> str:
    """The task a repository and branch stand for: ``NAME@BRANCH-HASH``, HASH
    the first 8 hex digits of the SHA-256 of the repository's absolute path
    (two clones of one repository are two tasks)."""
    digest = hashlib.sha256(place.top.encode("utf-8", "surrogatepass")).hexdigest()
    name = _UNSAFE.sub("-", os.path.basename(place.top.rstrip("/")) or "root")
    branch = _UNSAFE.sub("-", place.branch or "no-branch")
    base = f"{name[:60]}@{branch[:100]}-{digest[:8]}"
    return base if redact(base) == base else f"repo-{digest[:16]}"


def generation_id(base: str, generation: int) -> str:
    return base if generation <= 1 else f"{base}.{generation}"


# =========================================================== the state file


@dataclass
class HookRecord:
    """What the breaker remembers between two calls, for one task series."""

    generation: int = 1
    changes: list[str] = field(default_factory=list)
    """What the agent did since the last gate (redacted, bounded)."""
    stopped: str | None = None
    """The stop reason when the task was last seen stopped."""
    stop_blocked: str | None = None
    """The failure a ``Stop`` was already refused for (task and version)."""
    refused: int = 0
    """How many of :attr:`changes` (the first) are a refused strategy still
    in the working tree: dropped once the tree no longer has them."""
    transcript: str | None = None
    """The transcript the event being handled names (not kept between calls)."""
    usage: dict[str, Cursor] = field(default_factory=dict)
    """How far each session file of the agent was read for usage."""
    warning: str | None = None
    """A budget warning not yet said to the agent (said with the next
    answer that can carry it)."""
    unsent: list[Unsent] = field(default_factory=list)
    """Usage read (the cursors moved past it) and not yet recorded: sent
    first by the next call, under the same ``usage_id`` (one a failed call
    did record counts once)."""

    def dump(self) -> bytes:
        return orjson.dumps(
            {
                "generation": self.generation,
                "changes": self.changes,
                "stopped": self.stopped,
                "stop_blocked": self.stop_blocked,
                "refused": self.refused,
                "usage": {key: c.dump() for key, c in self.usage.items()},
                "warning": self.warning,
                "unsent": [list(u) for u in self.unsent],
            }
        )

    @classmethod
    def load(cls, raw: bytes) -> HookRecord:
        try:
            data = orjson.loads(raw)
            generation = int(data.get("generation", 1))
            changes = [str(c) for c in data.get("changes", [])][-PENDING_MAX:]
            stopped = data.get("stopped")
            blocked = data.get("stop_blocked")
            refused = int(data.get("refused", 0))
            warning = data.get("warning")
            unsent = [_unsent(raw) for raw in (data.get("unsent") or [])[:UNSENT_MAX]]
            cursors = data.get("usage") or {}
            usage = {
                str(key): Cursor.load(raw)
                for key, raw in list(cursors.items())[-CURSORS_MAX:]
            }
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            return cls()  # a damaged file is a fresh start: the log is the truth
        return cls(
            generation=max(1, generation),
            changes=changes,
            stopped=str(stopped) if stopped else None,
            stop_blocked=str(blocked) if blocked else None,
            refused=min(max(0, refused), len(changes)),
            usage=usage,
            warning=str(warning)[: ERROR_LINE_MAX * 2] if warning else None,
            unsent=[u for u in unsent if u is not None],
        )


Unsent = tuple[str, str, int, int, int, int, str]
"""A usage read and not yet recorded: task id, model, the four token counts
(input, output, cache reads, cache writes), usage id."""
UNSENT_MAX = 500


def _unsent(raw: Any) -> Unsent | None:
    """An unsent usage from the state file (``None``: damaged)."""
    try:
        task_id, model, a, b, c, d, usage_id = raw
        counts = [int(x) for x in (a, b, c, d)]
    except (TypeError, ValueError):
        return None
    if not all(0 <= x <= 10**12 for x in counts):
        return None
    return (
        str(task_id)[:ID_MAX],
        str(model)[:ID_MAX],
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        str(usage_id)[:ID_MAX],
    )


class HookState:
    """The state file of one task series: ``DIR/<hash>.json``, the hash of
    the store and the task, read and written under an exclusive lock (the
    agent may run hooks of parallel tool calls at once). The log stays the
    truth: a lost or damaged file only forgets the changes since the last
    gate, and the series' generation is found again in the log."""

    def __init__(self, directory: Path, store: str, base: str) -> None:
        self.base = base
        key = hashlib.sha256(f"{store}\0{base}".encode()).hexdigest()[:32]
        self.directory = directory
        self.path = directory / f"{key}.json"
        self._written: bytes | None = None
        """The record as the file holds it (while the lock is held)."""

    @contextlib.contextmanager
    def open(self) -> Iterator[HookRecord]:
        """The record, locked; written back when the block ends normally."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock_path = self.path.with_suffix(".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                raw = self.path.read_bytes()
            except FileNotFoundError:
                raw = b"{}"
            record = HookRecord.load(raw)
            self._written = record.dump()
            yield record
            self.save(record)
        finally:
            os.close(fd)  # releases the lock

    def save(self, record: HookRecord) -> None:
        """Write the record now (inside :meth:`open`'s block, the lock held):
        what a call must not lose if it fails after this point."""
        after = record.dump()
        if after == self._written:
            return
        handle, temporary = tempfile.mkstemp(
            dir=self.directory, prefix=".hook-", suffix=".tmp"
        )
        with os.fdopen(handle, "wb") as file:
            file.write(after)
        os.replace(temporary, self.path)
        self._written = after

    def peek(self) -> HookRecord:
        """The record as it is, unlocked (to answer when the store fails)."""
        try:
            return HookRecord.load(self.path.read_bytes())
        except OSError:
            return HookRecord()


# ============================================================= the strategy


def _bounded(text: str, limit: int) -> str:
    flat = text if len(text) <= limit else text[:limit] + " [...]"
    return flat.replace("\x00", "")


def edit_change(path: str, new_text: str) -> str:
    """An edit as a strategy shows it: its path and new text, redacted. A
    text longer than ``EDIT_TEXT_MAX`` keeps its head and its tail, with a
    digest of the whole between them: two long texts that differ anywhere
    (a fix near the end of a file) are two changes."""
    if len(new_text) <= EDIT_TEXT_MAX:
        return f"edit {_one_line(path, 500)}: {redact(new_text)}".replace("\x00", "")
    half = EDIT_TEXT_MAX // 2
    # Redacted before it is cut: a secret across the cut would be kept in
    # part, too short to be recognised.
    head = redact(new_text[: 2 * half])[:half]
    tail = redact(new_text[-2 * half :])[-half:]
    digest = hashlib.sha256(new_text.encode("utf-8", "surrogatepass")).hexdigest()
    shown = f"{head} [... {len(new_text)} characters, sha256 {digest[:16]} ...] {tail}"
    return f"edit {_one_line(path, 500)}: {shown}".replace("\x00", "")


def _one_line(text: str, limit: int) -> str:
    """``text`` redacted whole, on one line, then cut to ``limit``: a secret
    across a cut would be half kept, too short to be recognised (redact is
    linear)."""
    return _bounded(" ".join(redact(text).split()), limit)


def command_change(command: str) -> str:
    return f"ran: {_one_line(command, COMMAND_TEXT_MAX)}"


_LOOKING = frozenset(
    {"ls", "cat", "head", "tail", "grep", "pwd", "wc", "which", "stat", "echo", "true"}
)
"""Programs that only read (none has an option that writes a file or runs
another program: ``find -delete``, ``tree -o``, ``rg --pre`` are not here)."""
_GIT_LOOKING = frozenset({"status", "diff", "log", "show", "rev-parse", "blame"})
_GIT_WRITING = re.compile(r"--(?:output|ext-diff|textconv|config-env)")
"""Options of git's reading commands that write a file or run a program."""
_SYSTEM_BIN = ("/bin/", "/usr/bin/", "/usr/local/bin/")
_SHELL_SYNTAX = re.compile(r"[;&|<>`$()\\\n]")


def looks_only(command: str) -> bool:
    """Whether ``command`` only looks (``git status``, ``ls``, ``cat x``): one
    command of a known read-only program (by its bare name or from the
    system's folders), no redirection, pipe, list or substitution, no option
    that writes or runs something. Such a command changes nothing: it is no
    part of a strategy (``ran: git status`` is not a fix)."""
    if len(command) > COMMAND_TEXT_MAX or _SHELL_SYNTAX.search(command):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if not words:
        return False
    program = words[0]
    if "/" in program:
        if not program.startswith(_SYSTEM_BIN) or program.count("/") > 4:
            return False
        program = program.rsplit("/", 1)[1]
    if program != "git":
        return program in _LOOKING
    rest = words[1:]
    while rest and rest[0] == "-C":  # another folder: still only reading
        rest = rest[2:]
    if not rest or rest[0] not in _GIT_LOOKING:
        return False  # -c (a config: runs programs), or a command that writes
    return not any(_GIT_WRITING.match(word) for word in rest)


def strategy_of(changes: Sequence[str], command: str) -> str:
    """A gate's strategy: what changed since the last gate (the edits, the
    other commands), at most ``STRATEGY_MAX`` characters. The gate's command
    is not part of it: the same patch tested another way is the same
    strategy. With no change, the rerun is named as such (never a lesson)."""
    if not changes:
        return f"rerun without changes: {_one_line(command, COMMAND_TEXT_MAX)}"
    text = "\n".join(changes)
    if len(text) <= STRATEGY_MAX:
        return text
    # The head, and a digest of the whole: changes that differ past the cut
    # are another strategy.
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    mark = f" [... sha256 {digest[:16]}]"
    return text[: STRATEGY_MAX - len(mark)] + mark


def error_line(output: str, exit_code: int | None) -> str:
    """The line of a failure's output that says what went wrong, one line, at
    most 300 characters, redacted: the one rule every surface uses
    (:func:`devs.domain.output.error_line`: pytest's ``E`` line, else the
    first ``FAILED``/``ERROR`` line or a line that opens with an error's
    name, ``panic:`` or ``npm ERR!``, else the last non-empty line); with no
    line, how the process ended."""
    line = the_error_line(output, limit=4 * ERROR_LINE_MAX)
    if not line:
        return f"exited with code {exit_code}" if exit_code is not None else "failed"
    shown = the_error_line_shown(line)  # bidirectional controls made visible
    return _one_line(shown, ERROR_LINE_MAX - 1).replace(" [...]", "…")


def exit_code_in(text: str) -> int | None:
    """The exit code an agent wrote into its error text, if it wrote one."""
    found = _EXIT_CODE.search(text[:2_000])
    if found is None:
        return None
    code = int(found.group(1))
    return code if -(2**31) <= code <= 2**32 - 1 else None


# ============================================================== the breaker

RESUME_HINT = "devs resume {task} --actor NAME --reason WHY"
REVERT = (
    "These changes are still in the working tree ({files}): revert them "
    "(git checkout -- FILE, or undo the edit) before you run the tests again."
)
"""Said with a refused strategy: the next test run over the same tree would
be the same strategy, refused again."""
NUDGE_LESSONS = 20
"""The most recent failed strategies a nudge lists."""
_EDITED = re.compile(r"edit (.{1,500}?): ")


def edited_files(changes: Sequence[str]) -> list[str]:
    """The files pending edits name, each once, in order."""
    named: list[str] = []
    for change in changes:
        found = _EDITED.match(change)
        if found is not None and found.group(1) not in named:
            named.append(found.group(1))
    return named


def stop_reason(summary: TaskSummary, cli: str = "devs") -> str:
    """Why the task is stopped, its failures, the last error, and the command
    a human runs to let the agent go on (``cli``: how the human calls devs
    on this store, e.g. ``devs --db PATH``)."""
    task = shlex.quote(summary.task_id)
    policy = summary.policy
    count = summary.consecutive_failures
    session = summary.pending_session
    run_stop = (
        session is not None
        and session.spend is not None
        and session.spend.scope == "run"
    )
    if summary.state is TaskState.HAND_OFF:
        what = (
            f"handed off to a human after {count} failures "
            f"(hand-off threshold {policy.handoff_threshold})"
        )
        how = (
            f"{cli} claim {task} --actor NAME, then "
            f"{cli} resolve {task} --resolution return --actor NAME --reason WHY"
        )
    else:
        if session is not None and session.reason is SessionReason.BLACKLISTED_STRATEGY:
            what = "paused: the agent tried again a strategy that already failed"
        elif session is not None and session.reason is SessionReason.BUDGET_EXHAUSTED:
            spend = session.spend if run_stop else (summary.spend or session.spend)
            whose = f"its run {summary.run_id}'s tasks" if run_stop else "it"
            what = (
                f"budget pause: {whose} spent USD {spend.spent_usd:.4f} and "
                f"{spend.tokens:,} tokens, the budget reached"
                if spend is not None
                else "budget pause: the budget is spent"
            )
        elif session is not None and session.reason is SessionReason.ENTROPY_LIMIT:
            kind = "stuck" if session.entropy_source == "derived" else "entropy"
            score = session.entropy_score
            shown = f"{score:.2f}" if score is not None else "?"
            what = (
                f"{kind} pause: score {shown} reached the threshold "
                f"{policy.hitl_entropy_threshold:g}"
            )
        else:
            what = (
                f"escalated to a human: {count} failed gates in a row "
                f"(escalation threshold {policy.escalation_threshold})"
            )
        how = f"{cli} resume {task} --actor NAME --reason WHY"
        if run_stop:
            run = shlex.quote(summary.run_id or "")
            how = (
                f"{cli} budget --run {run} --usd N --actor NAME --reason WHY, "
                f"then {how}"
            )
        elif session is not None and session.reason is SessionReason.BUDGET_EXHAUSTED:
            how = f"{cli} budget {task} --usd N --actor NAME --reason WHY, then {how}"
    gates = [f for f in summary.failure_history if f.kind == "gate"]
    recorded = gates or list(summary.failure_history)
    last = recorded[-1] if recorded else None
    last_line = error_line(last.last_error, last.exit_code) if last else "(none)"
    return (
        f"devs-recovery stopped task {summary.task_id}: {what}. "
        f"Failures: {count}. Last error: {last_line}. "
        f"A human lets the agent go on with: {how} "
        f"(or sends it back with {cli} rewind {task}, or skips it with "
        f"{cli} skip {task})."
    )


WARNED_ON = frozenset({"session_start", "post_tool"})
"""The events whose answer every agent shows the model (``additionalContext``):
a budget warning waits for the next of them."""


def budget_warning(task_id: str, spend: Spend) -> str:
    """What the agent is told when its task crosses the warning fraction."""
    parts = []
    if spend.budget_usd is not None:
        parts.append(f"USD {spend.spent_usd:.4f} of {spend.budget_usd:g}")
    if spend.budget_tokens is not None:
        parts.append(f"{spend.tokens:,} of {spend.budget_tokens:,} tokens")
    return (
        f"devs-recovery: task {task_id} has spent most of its budget "
        f"({', '.join(parts)}). At the budget it stops for a human: finish "
        "the work or say what is left."
    )


def stopped(summary: TaskSummary) -> bool:
    return summary.state in WAITING


class Breaker:
    """Decides what one hook event means for the task, with the service."""

    def __init__(
        self,
        api: Callable[[], RecoveryApi],
        *,
        agent: str,
        base: str,
        explicit: bool,
        state: HookState,
        gate_pattern: re.Pattern[str],
        place: Place | None = None,
        cli: str = "devs",
        guarded: Sequence[str] = (),
        nudge: bool = True,
        usage: Reader | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.nudge = nudge
        self.usage = usage
        self.environ = environ if environ is not None else {}
        self._open = api
        self.guarded = tuple(guarded)
        self._api: RecoveryApi | None = None
        self.agent = agent
        self.base = base
        self.explicit = explicit
        self.state = state
        self.gate_pattern = gate_pattern
        self.place = place
        self.cli = cli

    @property
    def api(self) -> RecoveryApi:
        """The service, opened at its first use (an edit is remembered
        without opening the store)."""
        if self._api is None:
            self._api = self._open()
        return self._api

    # ------------------------------------------------------------ the task

    def is_gate(self, command: str | None) -> bool:
        return bool(command) and bool(self.gate_pattern.search(command[:GATE_SCAN]))  # type: ignore[index]

    def _current(self, record: HookRecord) -> tuple[str, TaskSummary | None]:
        """The series' current task (and its summary, ``None`` if not yet
        started): the remembered generation, moved past finished tasks."""
        generation = record.generation
        for _ in range(100_000):
            task_id = generation_id(self.base, generation)
            try:
                summary = self.api.task(task_id)
            except NotFound:  # UnknownTask, in process and over HTTP
                if generation > 1 and self._known(self.base) is None:
                    # Remembered but unknown here (another store, or the file
                    # outlived its database): look from the start again.
                    generation = 1
                    record.generation = 1
                    continue
                record.generation = generation
                return task_id, None
            if summary.state in FINISHED and not self.explicit:
                generation += 1
                record.generation = generation
                continue
            record.generation = generation
            return task_id, summary
        msg = "too many finished tasks in this series"
        raise InvalidInput(msg)

    def _known(self, task_id: str) -> TaskSummary | None:
        try:
            return self.api.task(task_id)
        except NotFound:
            return None

    def _started(self, record: HookRecord) -> TaskSummary:
        task_id, summary = self._current(record)
        if summary is not None:
            return summary
        place = self.place
        links = {
            name: where
            for name, where in (
                ("transcript", record.transcript),
                ("branch", place.branch if place is not None else None),
            )
            if where and len(where) <= LINK_MAX and "\n" not in where
        }
        try:
            return self.api.start_task(
                task_id,
                agent=self.agent,
                last_commit=place.head() if place is not None else None,
                links=links or None,
            )
        except AlreadyExists:  # another hook of the same agent started it
            return self.api.task(task_id)

    def _remember(self, record: HookRecord, summary: TaskSummary | None) -> None:
        record.stopped = (
            stop_reason(summary, self.cli)
            if summary is not None and stopped(summary)
            else None
        )

    # ------------------------------------------------------------ events

    def handle(self, seen: Seen) -> Answer:
        with self.state.open() as record:
            return self._handle(seen, record)

    def _handle(self, seen: Seen, record: HookRecord) -> Answer:
        record.transcript = seen.transcript
        session_file = None
        if self.usage is not None:
            session_file = self.usage.where(seen.transcript, seen.session, self.environ)
        spent: str | None = None
        if session_file is not None and seen.kind == "session_start":
            # What the files gained before this session went on belongs to
            # the task refereed until now: read before a new one starts.
            spent = self._spent(session_file, record)
        answer = self._decided(seen, record)
        if session_file is not None:
            # (At a session's start, what the task just started has made:
            # what was read before is moved past, nothing counts twice.)
            spent = self._spent(session_file, record) or spent
        if spent == "paused" and seen.kind != "session_start":
            # The model calls read now spent the budget: halted here, and a
            # tool about to run is refused (docs/agents.md#spend).
            record.warning = None
            deny = record.stopped if seen.kind == "pre_tool" else None
            return Answer(deny=deny, halt=record.stopped)
        if spent not in (None, "paused"):
            record.warning = spent
        if (
            record.warning is not None
            and seen.kind in WARNED_ON
            and not answer.context
            and not answer.halt
        ):
            answer = dataclasses.replace(answer, context=record.warning)
            record.warning = None
        return answer

    def _spent(self, session_file: Path, record: HookRecord) -> str | None:
        """Record the usage the agent's session files gained since the last
        call, against the task being refereed: ``"paused"`` when it spent
        a budget, the warning when it crossed the budget's warning fraction,
        else ``None``. Nothing is read before the series' first task starts
        (its usage counts then, from the files' start); the calls made after
        a task finished, before the next one starts, are the finished one's
        (a finished task takes usage, and is stopped by none)."""
        assert self.usage is not None
        sent = self._send(record) if record.unsent else None  # a failed call's
        forgotten = not record.usage  # a first call, or a lost state file
        read_now = read_session(self.usage, session_file, record.usage)
        found = [
            (found, model, tokens)
            for _, _, found in read_now
            for model, tokens in found.by_model.items()
            if tokens.any
        ]
        if not found:
            moved(record.usage, read_now)
            return sent
        _, summary = self._current(record)
        if summary is None and record.generation > 1:
            # Between two tasks of the series (the last one finished, the
            # next not started): the calls made since are the last one's.
            summary = self._known(generation_id(self.base, record.generation - 1))
        if summary is None:
            return sent  # counted once the series' first task starts
        if forgotten and summary.spend is not None and summary.spend.tokens:
            # The task has usage but this state file read none: it was lost.
            # What the files hold was counted before (up to the last call):
            # read on from their ends, never twice.
            moved(record.usage, read_now)
            return sent
        # The cursors move past what was read, and what it holds is kept
        # unsent, both written before anything is sent: a call that fails
        # midway leaves the next to send the rest, under the same ids.
        moved(record.usage, read_now)
        record.unsent = [
            *record.unsent,
            *(
                (
                    summary.task_id,
                    model,
                    tokens.input_tokens,
                    tokens.output_tokens,
                    tokens.cache_read_tokens,
                    tokens.cache_creation_tokens,
                    where.usage_id(model),
                )
                for where, model, tokens in found
            ),
        ][-UNSENT_MAX:]
        self.state.save(record)
        return self._send(record) or sent

    def _send(self, record: HookRecord) -> str | None:
        """Record the usage read and not yet recorded: ``"paused"`` when it
        spent a budget, the warning when it crossed a warning fraction. A
        model name the service refuses (a control character…) is counted as
        ``unknown``: its tokens still count."""
        paused: str | None = None
        warning: str | None = None
        while record.unsent:
            task_id, model, a, b, c, d, usage_id = record.unsent[0]
            for name in dict.fromkeys((model, UNKNOWN_MODEL)):
                try:
                    decision = self.api.record_usage(
                        task_id,
                        model=name,
                        input_tokens=a,
                        output_tokens=b,
                        cache_read_tokens=c,
                        cache_creation_tokens=d,
                        usage_id=usage_id,
                    )
                except InvalidInput as error:
                    if error.field == "model" and name != UNKNOWN_MODEL:
                        continue
                    break  # not a usage the service counts
                except NotFound:
                    break  # its task is gone (another store): dropped
                if decision.triggered:
                    paused = task_id
                if decision.warned:
                    warning = budget_warning(task_id, decision.spend)
                break
            record.unsent.pop(0)
        if paused is not None:
            self._remember(record, self.api.task(paused))
            return "paused"
        return warning

    def _decided(self, seen: Seen, record: HookRecord) -> Answer:
        if seen.kind == "session_start":
            return self._session_start(record)
        if seen.kind == "pre_tool":
            return self._pre_tool(seen, record)
        if seen.kind in ("post_tool", "post_tool_failure"):
            return self._post_tool(seen, record)
        if seen.kind == "stop":
            return self._stop(seen, record)
        if seen.kind in ("prompt", "batch"):
            return self._held(record)
        return NOTHING

    def _held(self, record: HookRecord) -> Answer:
        """Before the next model request (a prompt, the end of a batch of
        tool calls): a stopped task halts the agent there, so the model is
        not asked again."""
        _, summary = self._current(record)
        self._remember(record, summary)
        if summary is not None and stopped(summary):
            return Answer(halt=record.stopped)
        return NOTHING

    def _session_start(self, record: HookRecord) -> Answer:
        summary = self._started(record)
        self._remember(record, summary)
        if stopped(summary):
            return Answer(context=record.stopped)
        return NOTHING

    def _pre_tool(self, seen: Seen, record: HookRecord) -> Answer:
        where = seen.cwd or (self.place.top if self.place is not None else ".")
        if (why := reaches_referee(seen, self.guarded, where)) is not None:
            return Answer(deny=f"devs-recovery refuses this tool call: {why}.")
        gate = self.is_gate(seen.command) and not seen.edits_now  # a patch
        if gate:
            summary: TaskSummary | None = self._started(record)
        else:
            _, summary = self._current(record)
        self._remember(record, summary)
        if summary is None or summary.state in FINISHED:
            if seen.edits_now:
                self._changed(record, seen)
            return NOTHING
        if stopped(summary):
            # Refused, and the agent halted where its protocol can say so
            # here: Claude Code ignores a halt on PostToolUseFailure, so its
            # next tool call is where the turn ends (docs/agents.md).
            return Answer(deny=record.stopped, halt=record.stopped)
        if seen.edits_now:
            self._changed(record, seen)
            return NOTHING
        if gate and record.refused and self._reverted(record.changes[: record.refused]):
            # The refused changes left the tree (the agent or a human undid
            # them): what is pending is what came after.
            record.changes = record.changes[record.refused :]
            record.refused = 0
        if not gate or not record.changes:
            # Nothing changed since the last gate: a rerun is no new
            # strategy; the ladder counts its failure all the same.
            return NOTHING
        strategy = strategy_of(record.changes, seen.command or "")
        if not self._failed_before(summary.task_id, strategy):
            return NOTHING
        # The same patch again: the blacklist refuses it (and pauses the task).
        decision = self.api.begin_attempt(summary.task_id, strategy)
        if decision.proceed:
            return NOTHING
        after = self.api.task(summary.task_id)
        self._remember(record, after)
        # The refused changes stay pending while they are in the working
        # tree: a gate run over them again is this strategy again.
        record.refused = len(record.changes)
        directive = decision.directive
        if len(directive) > DIRECTIVE_SHOWN:  # the agents cap a reason at 10,000
            directive = directive[:DIRECTIVE_SHOWN] + "\n[...]"
        reason = "\n".join(
            part
            for part in (
                "This strategy already failed and must not be tried again.",
                REVERT.format(files=self._files(record.changes)),
                directive,
                record.stopped,
            )
            if part
        )
        return Answer(deny=reason, halt=record.stopped)

    def _files(self, changes: Sequence[str]) -> str:
        """The files the pending edits name (for the agent to revert)."""
        named = edited_files(changes)
        return ", ".join(named[:20]) or "the changes since the last test run"

    def _changed(self, record: HookRecord, seen: Seen) -> None:
        made = [redact(edit_change(self._shown(p), t)) for p, t in seen.edits]
        self._pending(record, made)

    @staticmethod
    def _pending(record: HookRecord, made: Sequence[str]) -> None:
        """``made`` added to the pending changes (the oldest go past
        ``PENDING_MAX``, the refused ones first)."""
        changes = [*record.changes, *made]
        dropped = max(0, len(changes) - PENDING_MAX)
        record.changes = changes[dropped:]
        record.refused = max(0, record.refused - dropped)

    def _reverted(self, refused: Sequence[str]) -> bool:
        """Whether the files of ``refused`` changes are as the last commit has
        them (git says so; without git, or with no file named: no)."""
        files = edited_files(refused)
        if self.place is None or not files:
            return False
        changed = _git(
            self.place.top,
            "status",
            "--porcelain",
            "--untracked-files=all",
            "--",
            *files,
        )
        return changed == []

    def _failed_before(self, task_id: str, strategy: str) -> bool:
        """Whether these very changes (whitespace aside) failed before.

        The service's blacklist matches strategies within 20 % edit distance
        of a lesson, which suits strategies told in words. Two patches a
        character apart are two fixes (the right one is often a character
        away from a wrong one), so the blacklist is asked only about changes
        that failed as they are."""
        wanted = " ".join(strategy.split())
        return any(
            " ".join(lesson.failed_strategy.split()) == wanted
            for lesson in self.api.lessons(task_id)
        )

    def _post_tool(self, seen: Seen, record: HookRecord) -> Answer:
        if seen.edits:
            self._changed(record, seen)
            return NOTHING
        if not seen.command:
            return NOTHING
        if not self.is_gate(seen.command):
            if looks_only(seen.command):
                return NOTHING  # changes nothing: no part of a strategy
            self._pending(record, [redact(command_change(seen.command))])
            return NOTHING
        if seen.unjudged:
            return NOTHING  # how the gate ended is unknown: nothing recorded
        summary = self._started(record)
        if summary.state not in (TaskState.RUNNING, TaskState.GATE_FAILED):
            self._remember(record, summary)
            return Answer(halt=record.stopped) if stopped(summary) else NOTHING
        strategy = strategy_of(record.changes, seen.command)
        changed = bool(record.changes)
        record.changes = []
        record.refused = 0
        # As MCP's run_gate names a gate: redacted whole, then cut.
        gate_name = command_line(seen.command)
        failed = seen.failed or (seen.exit_code not in (None, 0))
        if not failed:
            self.api.record_gate(
                summary.task_id,
                0,
                gate=gate_name,
                strategy=strategy,
                output=seen.output,
            )
            record.stopped = None
            return NOTHING
        code = seen.exit_code if seen.exit_code not in (None, 0) else None
        first = error_line(seen.output, code)
        decision = self.api.record_gate(
            summary.task_id,
            code,
            gate=gate_name,
            strategy=strategy,
            error=first,
            output=seen.output,
        )
        if changed:
            self.api.log_lesson(summary.task_id, strategy, first)
        if decision.outcome in (Outcome.PAUSE, Outcome.ESCALATE, Outcome.HAND_OFF):
            after = self.api.task(summary.task_id)
            self._remember(record, after)
            return Answer(halt=record.stopped)
        record.stopped = None
        return Answer(
            context=self._nudge(summary, decision.consecutive_failures, first)
        )

    def _nudge(self, summary: TaskSummary, failures: int, first: str) -> str:
        """What a failed gate below the thresholds tells the agent: the count,
        the error, and every strategy that failed so far as the blacklist's
        directive (the same words a refusal would use), so that the agent
        changes course before a human is asked."""
        head = (
            f"devs-recovery: gate failed ({failures} in a row; a human is asked "
            f"at {summary.policy.escalation_threshold}). First error: {first}. "
            "Do not repeat a change that already failed: try a different approach."
        )
        if not self.nudge:
            return head
        failed = [
            lesson.failed_strategy for lesson in self.api.lessons(summary.task_id)
        ]
        said = blacklist.directive(failed[-NUDGE_LESSONS:])
        if len(said) > DIRECTIVE_SHOWN:
            said = said[:DIRECTIVE_SHOWN] + "\n[...]"
        return f"{head}\n{said}" if said else head

    def _shown(self, path: str) -> str:
        """A path as the strategy shows it: relative to the repository."""
        if self.place is not None and os.path.isabs(path):
            try:
                return os.path.relpath(path, self.place.top)
            except ValueError:
                return path
        return path

    def _stop(self, seen: Seen, record: HookRecord) -> Answer:
        _, summary = self._current(record)
        self._remember(record, summary)
        if summary is None or seen.stop_hook_active:
            return NOTHING
        if summary.state not in WORKING or summary.consecutive_failures == 0:
            return NOTHING  # stopped, finished, or no failure since a pass
        mark = f"{summary.task_id}@{summary.version}"
        if record.stop_blocked == mark:
            return NOTHING  # refused once for this failing gate already
        record.stop_blocked = mark
        last = summary.failure_history[-1] if summary.failure_history else None
        line = error_line(last.last_error, last.exit_code) if last else "(none)"
        return Answer(
            block=(
                f"devs-recovery: the last gate of task {summary.task_id} failed "
                f"({summary.consecutive_failures} in a row): the gate is red. "
                f"Last error: {line}. Make it pass before you stop."
            )
        )


def answer_json(value: Mapping[str, Any]) -> str:
    return orjson.dumps(value).decode()
