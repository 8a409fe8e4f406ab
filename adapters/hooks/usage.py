"""Token usage read from the files an agent writes as it works: Claude Code's
transcript (and its subagents'), Codex's rollout, Gemini CLI's chat
recording, Copilot CLI's session events. docs/agents.md#spend says what each
agent exposes, and when it is on disk.

A hook event names the session's file (``transcript_path``; Copilot CLI's
is found from its ``sessionId``); each call reads
only what was appended since the last one (a :class:`Cursor` per file, kept in
the hook's state file), whole lines only, in one pass: a 100 MB transcript
costs one read, then its new tail. What a call finds is summed per model and
recorded as one usage per file and model, named by the file and the byte
range read (``usage_id``), so that the same range recorded twice counts once.

The file is the agent's, so its content is the agent's word: it is opened
without following a last symlink, without blocking (a FIFO is refused), only
as a regular file, at most :data:`READ_MAX` bytes a call; only counts and a
model's name (redacted, bounded, by the service) are taken from it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

READ_MAX = 256 * 1024 * 1024
"""Bytes read in one call, every file of the session together (the rest
waits for the next call)."""
CHUNK = 8 * 1024 * 1024
"""Bytes read at a time."""
SUBAGENT_FILES_MAX = 1_000
"""Subagent transcripts read beside one session's (the first by name)."""
CURSORS_MAX = 2_000
"""Files whose read position the state file keeps (the latest)."""
LINE_MAX = 64 * 1024 * 1024
"""The longest line parsed (a longer one is no usage row)."""
MODEL_MAX = 200
TOKENS_MAX = 10**15
"""The most tokens one row may claim (a larger count is not a count)."""
UNKNOWN_MODEL = "unknown"
RECENT_MAX = 64
"""Ids a cursor remembers as counted."""
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
"""A session id that may name a folder (Copilot CLI's)."""


@dataclass
class Cursor:
    """Where the last read of one file stopped, and what a reader carries
    from one read to the next."""

    offset: int = 0
    message: str | None = None
    """Claude Code: the last message counted (its rows may go on past the
    read's end)."""
    counted: tuple[int, int, int, int] = (0, 0, 0, 0)
    """Claude Code: what was counted of that message."""
    model: str | None = None
    """Codex: the model of the turn being read."""
    totals: tuple[int, int, int, int] = (0, 0, 0, 0)
    """Codex: the session's totals at ``offset``."""
    records: bool = False
    """Codex: the file has ``token_usage_record`` rows (its totals are then
    not counted as well)."""
    recent: tuple[str, ...] = ()
    """Gemini CLI, Copilot CLI, Codex's records: the ids counted last (a
    message may be written again a few rows later)."""
    skip: bool = False
    """``offset`` is inside a line too long to read: skip to its end."""

    def dump(self) -> list[Any]:
        return [
            self.offset,
            self.message,
            list(self.counted),
            self.model,
            list(self.totals),
            self.records,
            list(self.recent),
            self.skip,
        ]

    @classmethod
    def load(cls, raw: Any) -> Cursor:
        """A cursor from the state file (a damaged one starts over)."""
        try:
            offset, message, counted, model, totals, records, recent, skip = raw
            return cls(
                offset=max(0, int(offset)),
                message=str(message)[:MODEL_MAX] if message is not None else None,
                counted=_four(counted),
                model=str(model)[:MODEL_MAX] if model is not None else None,
                totals=_four(totals),
                records=records is True,
                recent=tuple(str(r)[:MODEL_MAX] for r in recent)[-RECENT_MAX:],
                skip=skip is True,
            )
        except (TypeError, ValueError):
            return cls()


def _four(raw: Any) -> tuple[int, int, int, int]:
    a, b, c, d = (max(0, min(int(x), TOKENS_MAX)) for x in raw)
    return a, b, c, d


@dataclass
class Tokens:
    """One model's tokens found in one read of one file."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0

    def add(self, counts: tuple[int, int, int, int]) -> None:
        self.input_tokens += counts[0]
        self.output_tokens += counts[1]
        self.cache_read_tokens += counts[2]
        self.cache_creation_tokens += counts[3]

    @property
    def any(self) -> bool:
        return bool(
            self.input_tokens
            or self.output_tokens
            or self.cache_read_tokens
            or self.cache_creation_tokens
        )


@dataclass(frozen=True)
class Found:
    """What one read of one file found, per model, and its usage ids."""

    path: str
    start: int
    end: int
    by_model: dict[str, Tokens] = field(default_factory=dict)

    def usage_id(self, model: str) -> str:
        """The same file's same byte range and model: the same usage."""
        key = f"{self.path}\0{self.start}\0{self.end}\0{model}"
        return (
            "file-"
            + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40]
        )


class Reader(Protocol):
    """How one agent's session file is read."""

    def where(
        self, transcript: str | None, session: str | None, environ: Mapping[str, str]
    ) -> Path | None:
        """The session's file: the event's ``transcript_path`` (absolute),
        or where the agent keeps the session ``session``; ``None``: none."""
        ...

    def files(self, transcript: Path) -> list[Path]:
        """The files of the session: its own, then its subagents'."""
        ...

    def wanted(self, line: bytes) -> bool:
        """Whether a line may carry usage (a cheap test before parsing)."""
        ...

    def row(self, row: Mapping[str, Any], cursor: Cursor, found: Found) -> None:
        """Count one parsed line into ``found``, moving ``cursor``."""
        ...


# ------------------------------------------------------------ the agents


def _count(value: Any) -> int:
    """A token count as the file gives it (anything else: 0)."""
    if type(value) is int and 0 <= value <= TOKENS_MAX:
        return value
    return 0


def _counts(usage: Mapping[str, Any], *names: str) -> tuple[int, int, int, int]:
    """The four counts ``usage`` gives under ``names`` (input, output, cache
    reads, cache writes; anything not a count: 0)."""
    a, b, c, d = (_count(usage.get(name)) for name in names)
    return a, b, c, d


def _model(value: Any) -> str:
    if isinstance(value, str):
        name = " ".join(value.split())[:MODEL_MAX]
        if name:
            return name
    return UNKNOWN_MODEL


def _tokens(found: Found, model: str) -> Tokens:
    tokens = found.by_model.get(model)
    if tokens is None:
        tokens = found.by_model[model] = Tokens()
    return tokens


def _named(transcript: str | None) -> Path | None:
    """The event's own ``transcript_path``, if it is an absolute path."""
    if not transcript or not os.path.isabs(transcript) or "\x00" in transcript:
        return None
    return Path(transcript)


def _nested(folder: Path, suffix: str = ".jsonl", depth: int = 2) -> list[Path]:
    """The files of ``folder`` (and of its folders, ``depth`` deep) whose
    names end with ``suffix``, by path, at most :data:`SUBAGENT_FILES_MAX`;
    symlinks are not followed."""
    found: list[Path] = []
    if folder.is_symlink():
        return found  # the agent's own folder, not one it links elsewhere
    folders = [(folder, depth)]
    while folders and len(found) < SUBAGENT_FILES_MAX:
        where, left = folders.pop(0)
        try:
            entries = sorted(os.scandir(where), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.is_file(follow_symlinks=False) and entry.name.endswith(suffix):
                found.append(Path(entry.path))
            elif left and entry.is_dir(follow_symlinks=False):
                folders.append((Path(entry.path), left - 1))
    return found[:SUBAGENT_FILES_MAX]


def _once(cursor: Cursor, ident: Any) -> bool:
    """Whether ``ident`` is new to the cursor (then remembered); a row
    without an id is always new."""
    if not isinstance(ident, str) or not ident:
        return True
    ident = ident[:MODEL_MAX]
    if ident in cursor.recent:
        return False
    cursor.recent = (*cursor.recent, ident)[-RECENT_MAX:]
    return True


class NamedByTheEvent:
    """A session file the hook event names (``transcript_path``)."""

    def where(
        self, transcript: str | None, session: str | None, environ: Mapping[str, str]
    ) -> Path | None:
        return _named(transcript)


class ClaudeTranscript(NamedByTheEvent):
    """Claude Code's transcript: one JSON object a line; ``type:
    "assistant"`` rows carry ``message.id``, ``message.model`` and
    ``message.usage``; one message may be several rows (one per content
    block), so each ``message.id`` counts once, at the most its rows say.
    A subagent writes ``<session>/subagents/[…/]agent-*.jsonl`` beside the
    session's ``<session>.jsonl``. Claude Code writes its rows every 100 ms:
    a hook often reads a message a call or two after it was made, and
    every one by ``Stop``."""

    def files(self, transcript: Path) -> list[Path]:
        folder = transcript.with_suffix("") / "subagents"
        return [transcript, *_nested(folder)]

    def wanted(self, line: bytes) -> bool:
        return b'"usage"' in line and b'"assistant"' in line

    def row(self, row: Mapping[str, Any], cursor: Cursor, found: Found) -> None:
        if row.get("type") != "assistant":
            return
        message = row.get("message")
        if not isinstance(message, Mapping):
            return
        usage = message.get("usage")
        if not isinstance(usage, Mapping):
            return
        counts = _counts(
            usage,
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        )
        ident = message.get("id")
        ident = ident[:MODEL_MAX] if isinstance(ident, str) and ident else None
        before = (
            cursor.counted
            if ident is not None and ident == cursor.message
            else (0, 0, 0, 0)
        )
        # A later row of the same message counts only what it adds.
        most = (
            max(counts[0], before[0]),
            max(counts[1], before[1]),
            max(counts[2], before[2]),
            max(counts[3], before[3]),
        )
        added = (
            most[0] - before[0],
            most[1] - before[1],
            most[2] - before[2],
            most[3] - before[3],
        )
        cursor.message, cursor.counted = ident, most
        if any(added):
            _tokens(found, _model(message.get("model"))).add(added)


class CodexRollout(NamedByTheEvent):
    """Codex's rollout: ``turn_context`` rows name the model of the turn;
    a ``token_usage_record`` row (Codex 0.171) gives one response's usage,
    written as the response ends (``response_id``); older versions give
    only ``event_msg`` rows of type ``token_count`` with the session's
    running totals (``info.total_token_usage``), counted by how far they
    moved (a row that repeats them counts nothing). OpenAI's input counts
    include the cached ones."""

    def files(self, transcript: Path) -> list[Path]:
        return [transcript]

    def wanted(self, line: bytes) -> bool:
        return (
            b'"token_usage_record"' in line
            or b'"token_count"' in line
            or b'"turn_context"' in line
        )

    def row(self, row: Mapping[str, Any], cursor: Cursor, found: Found) -> None:
        payload = row.get("payload")
        if not isinstance(payload, Mapping):
            return
        if row.get("type") == "turn_context":
            cursor.model = _model(payload.get("model"))
            return
        if row.get("type") == "token_usage_record":
            self._record(payload, cursor, found)
            return
        if row.get("type") != "event_msg" or payload.get("type") != "token_count":
            return
        if cursor.records:
            return  # counted by the records
        info = payload.get("info")
        total = info.get("total_token_usage") if isinstance(info, Mapping) else None
        if not isinstance(total, Mapping):
            return
        cached = _count(total.get("cached_input_tokens"))
        now = (
            max(0, _count(total.get("input_tokens")) - cached),
            _count(total.get("output_tokens")),
            cached,
            0,
        )
        before = cursor.totals
        if any(n < b for n, b in zip(now, before, strict=True)):
            before = (0, 0, 0, 0)  # the totals started again: a new session
        added = (
            now[0] - before[0],
            now[1] - before[1],
            now[2] - before[2],
            0,
        )
        cursor.totals = now
        if any(added):
            _tokens(found, cursor.model or UNKNOWN_MODEL).add(added)

    def _record(self, payload: Mapping[str, Any], cursor: Cursor, found: Found) -> None:
        usage = payload.get("usage")
        if not isinstance(usage, Mapping):
            return
        if not cursor.records:
            # The totals counted so far stand; from here on, the records.
            cursor.records = True
        if not _once(cursor, payload.get("response_id")):
            return
        cached = _count(usage.get("cached_input_tokens"))
        counts = (
            max(0, _count(usage.get("input_tokens")) - cached),
            _count(usage.get("output_tokens")),
            cached,
            _count(usage.get("cache_write_input_tokens")),
        )
        if any(counts):
            _tokens(found, cursor.model or UNKNOWN_MODEL).add(counts)


class GeminiChat(NamedByTheEvent):
    """Gemini CLI's chat recording (0.61: JSONL, appended): a ``type:
    "gemini"`` row is a model answer with its ``model`` and ``tokens``
    (``input`` counts the ``cached`` ones; ``thoughts`` are billed as output,
    ``tool`` as input). An answer is written again when its tool calls are
    attached: each ``id`` counts once. A subagent's chat is
    ``chats/<session>/<id>.jsonl``."""

    def files(self, transcript: Path) -> list[Path]:
        return [transcript, *_nested(transcript.with_suffix(""), depth=0)]

    def wanted(self, line: bytes) -> bool:
        return b'"tokens"' in line and b'"gemini"' in line

    def row(self, row: Mapping[str, Any], cursor: Cursor, found: Found) -> None:
        tokens = row.get("tokens")
        if row.get("type") != "gemini" or not isinstance(tokens, Mapping):
            return
        if not _once(cursor, row.get("id")):
            return
        cached = _count(tokens.get("cached"))
        counts = (
            max(0, _count(tokens.get("input")) - cached) + _count(tokens.get("tool")),
            _count(tokens.get("output")) + _count(tokens.get("thoughts")),
            cached,
            0,
        )
        if any(counts):
            _tokens(found, _model(row.get("model"))).add(counts)


class CopilotEvents:
    """Copilot CLI's session events, ``<COPILOT_HOME or ~/.copilot>/
    session-state/<sessionId>/events.jsonl``: a ``session.usage_record``
    row per model call (``data.usage``: ``model``, ``inputTokens``,
    ``outputTokens``, ``cacheReadTokens``, ``cacheWriteTokens``; counted
    once by ``accounting.usageId``). Copilot writes them late: a call's
    record is on disk a call or so after it, the session's last after its
    ``sessionEnd``, so it counts when the session is next resumed."""

    def where(
        self, transcript: str | None, session: str | None, environ: Mapping[str, str]
    ) -> Path | None:
        if session is None or SESSION_ID.fullmatch(session) is None:
            return None
        home = environ.get("COPILOT_HOME") or ""
        if not os.path.isabs(home):
            user = environ.get("HOME") or ""
            if not os.path.isabs(user):
                return None
            home = os.path.join(user, ".copilot")
        return Path(home) / "session-state" / session / "events.jsonl"

    def files(self, transcript: Path) -> list[Path]:
        return [transcript]

    def wanted(self, line: bytes) -> bool:
        return b'"session.usage_record"' in line

    def row(self, row: Mapping[str, Any], cursor: Cursor, found: Found) -> None:
        data = row.get("data")
        usage = data.get("usage") if isinstance(data, Mapping) else None
        if row.get("type") != "session.usage_record" or not isinstance(usage, Mapping):
            return
        accounting = usage.get("accounting")
        ident = accounting.get("usageId") if isinstance(accounting, Mapping) else None
        if not _once(cursor, ident or usage.get("apiCallId")):
            return
        counts = _counts(
            usage, "inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens"
        )
        if any(counts):
            _tokens(found, _model(usage.get("model"))).add(counts)


# ------------------------------------------------------------ reading


def read(
    reader: Reader, path: Path, cursor: Cursor, limit: int = READ_MAX
) -> Found | None:
    """What ``path`` holds past ``cursor`` (whole lines, at most
    :data:`READ_MAX` bytes), the cursor moved past it; ``None`` when the
    file cannot be read as a regular file (nothing moves). Linear in the
    bytes read; a line longer than :data:`LINE_MAX` is skipped unread."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        status = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(status.st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb", buffering=0) as file:
        if status.st_size < cursor.offset:
            # Shorter than what was read: the file was written anew.
            for name, value in dataclasses.asdict(Cursor()).items():
                setattr(cursor, name, value)
        start = cursor.offset
        found = Found(path=str(path), start=start, end=start)
        file.seek(start)
        position = start  # the first byte not yet taken as whole lines
        pieces: list[bytes] = []
        pending = 0
        budget = min(limit, status.st_size - start)
        while budget > 0:
            chunk = file.read(min(CHUNK, budget))
            if not chunk:
                break
            budget -= len(chunk)
            last = chunk.rfind(b"\n")
            if last < 0:
                pieces.append(chunk)
                pending += len(chunk)
                if pending > LINE_MAX:  # an overlong line: skipped whole
                    position += pending
                    pieces, pending = [], 0
                    cursor.skip = True
                continue
            data = (
                b"".join((*pieces, chunk[: last + 1])) if pieces else chunk[: last + 1]
            )
            lines = data.split(b"\n")
            lines.pop()  # after the last newline: nothing
            if cursor.skip:  # the rest of an overlong line
                lines[0] = b""
                cursor.skip = False
            for line in lines:
                if len(line) <= LINE_MAX and reader.wanted(line):
                    _parse(reader, line, cursor, found)
            position += len(data)
            rest = chunk[last + 1 :]
            pieces, pending = ([rest], len(rest)) if rest else ([], 0)
        cursor.offset = position
    return Found(path=found.path, start=start, end=position, by_model=found.by_model)


def _parse(reader: Reader, line: bytes, cursor: Cursor, found: Found) -> None:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        return  # a line being written, or not JSON: not a usage
    if isinstance(row, dict):
        reader.row(row, cursor, found)


def read_session(
    reader: Reader, session_file: Path, cursors: Mapping[str, Cursor]
) -> list[tuple[str, Cursor, Found]]:
    """Each file of the session read past its cursor in ``cursors`` (the
    start, for a file not seen before): its key, its cursor moved past what
    was read (``cursors`` is left as it is), and what it held."""
    read_now: list[tuple[str, Cursor, Found]] = []
    left = READ_MAX
    for path in reader.files(session_file):
        if left <= 0:
            break  # the others' turn comes with the next call
        key = str(path)
        known = cursors.get(key)
        cursor = dataclasses.replace(known) if known is not None else Cursor()
        found = read(reader, path, cursor, left)
        if found is not None:
            read_now.append((key, cursor, found))
            left -= found.end - found.start
    return read_now


def moved(
    cursors: dict[str, Cursor], read_now: list[tuple[str, Cursor, Found]]
) -> None:
    """``cursors`` moved past what was read (the oldest dropped past
    :data:`CURSORS_MAX`)."""
    for key, cursor, _ in read_now:
        cursors.pop(key, None)
        cursors[key] = cursor  # the latest last
    while len(cursors) > CURSORS_MAX:
        del cursors[next(iter(cursors))]
