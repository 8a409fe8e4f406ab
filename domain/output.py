"""What people read of an agent's output: one module decides it for every
surface (the console, Slack, e-mail, webhooks, the CLI, the hooks' stop
reasons), so they all agree.

:func:`clean` strips terminal control sequences when output is stored,
:func:`keep` bounds it by keeping its head and its tail, :func:`error_line`
picks "the last error", and :func:`shown` makes bidirectional controls
visible on display. Every function here is linear in its input.
"""

from __future__ import annotations

import re

ESCAPES = re.compile(
    r"\x1b(?:"
    r"\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erases
    r"|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
    r"|[PX^_][^\x1b\n]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|[ -/]*[0-~]"  # two- and three-character escapes
    r")?"
    r"|\x9b[0-?]*[ -/]*[@-~]"  # CSI as one C1 character
)
"""A terminal control sequence. Each alternative stops at the next ESC, so
matching is linear however many unterminated sequences a text holds (and an
unterminated string ends with its line)."""

_DROPPED = dict.fromkeys(
    [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0)]
)
"""Control characters other than tab and newline (``\\r`` is made a newline
before this applies)."""

BIDI_CONTROLS = frozenset(
    [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)
"""Unicode's bidirectional formatting characters: embeddings, overrides,
isolates and marks."""

_SHOWN_BIDI = {code: f"<U+{code:04X}>" for code in BIDI_CONTROLS}

CUT_MARKER = "\n[… {cut:,} characters cut …]\n"
"""What :func:`keep` puts where it cut."""

ERROR_LINE_MAX = 300
"""The longest error line: a longer one is cut, with ``…``."""

_PREFERRED = (
    re.compile(r"E\s"),  # pytest's assertion and exception lines
    re.compile(r"(?:FAILED|ERROR|FAIL|--- FAIL|FAILURE)\b"),
    re.compile(
        r"(?:[\w.]{0,80}(?:Error|Exception)\b|error(?:\[\w{1,10}\])?:|panic:|npm ERR!)"
    ),
)
"""The runner's error line, most telling first; each is matched at a line's
start."""


def clean(text: str) -> str:
    """``text`` without terminal control sequences or control characters
    (tab and newline kept; ``\\r\\n`` and a lone ``\\r`` become ``\\n``)."""
    if not text:
        return text
    if "\x1b" in text or "\x9b" in text:
        text = ESCAPES.sub("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text.translate(_DROPPED)


def keep(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters; else its head (a
    quarter of ``limit``) and its tail, with :data:`CUT_MARKER` between
    saying how many characters were cut: ``limit`` characters in all (one
    fewer where a surrogate pair at an edge is dropped rather than split)."""
    length = len(text)
    if length <= limit:
        return text
    head_size = limit // 4
    # The marker's length depends on the count it gives, which depends on the
    # marker's length: the count has at most as many digits as ``length``.
    # From the longest marker (the most digits) the tail only grows, and
    # settles within a few steps where the marker says exactly what it cuts.
    tail_size = 0
    for _ in range(8):
        marker = CUT_MARKER.format(cut=length - head_size - tail_size)
        grown = max(limit - head_size - len(marker), 0)
        if grown == tail_size:
            break
        tail_size = grown
    head = text[:head_size]
    tail = text[length - tail_size :] if tail_size else ""
    if head and "\ud800" <= head[-1] <= "\udbff":  # half of a surrogate pair
        head = head[:-1]
    if tail and "\udc00" <= tail[0] <= "\udfff":
        tail = tail[1:]
    marker = CUT_MARKER.format(cut=length - len(head) - len(tail))
    return head + marker + tail


def error_line(
    text: str, *more: str, exit_code: int | None = None, limit: int = ERROR_LINE_MAX
) -> str:
    """The line that says what went wrong, on one line, at most
    :data:`ERROR_LINE_MAX` characters: the runner's error line (pytest's
    ``E``, else the first ``FAILED``/``ERROR`` line, else the first line
    opening with an error's name, ``panic:`` or ``npm ERR!``), looked for in
    ``text`` then in each of ``more`` (a gate's output, then its error
    message); else the last non-empty line of the first that has one. With
    no line at all, how the process ended (``exit code 2``), or ``""``.
    (Cut what is redacted: a caller that redacts after asks for a longer
    ``limit``, then cuts.)"""
    fallback: str | None = None
    for each in (text, *more):
        preferred, last = _lines(each)
        if preferred is not None:
            return one_line(preferred, limit)
        if fallback is None:
            fallback = last
    if fallback is None:
        return "" if exit_code is None else f"exit code {exit_code}"
    return one_line(fallback, limit)


def _lines(text: str) -> tuple[str | None, str | None]:
    """``text``'s most telling error line (``None``: none) and its last
    non-empty line."""
    found: list[str | None] = [None] * len(_PREFERRED)
    last: str | None = None
    for raw in clean(text).split("\n") if text else ():
        line = raw.strip()
        if not line or line.startswith("[… "):
            continue
        last = line
        if found[0] is not None:
            continue
        head = line[:200]
        for rank, pattern in enumerate(_PREFERRED):
            if found[rank] is None and pattern.match(head):
                found[rank] = line
                break
    return next((line for line in found if line is not None), None), last


def one_line(text: str, limit: int) -> str:
    """``text`` on one line (runs of white space made one space), cut to
    ``limit`` characters with ``…``."""
    flat = " ".join(text[: limit * 4].split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def shown(text: str) -> str:
    """``text`` with each bidirectional control written as ``<U+202E>``, so
    it cannot reorder what is displayed around it."""
    return text.translate(_SHOWN_BIDI)


def readable(text: str) -> str:
    """What a person is shown of an agent's text: :func:`clean`, then
    :func:`shown`."""
    return shown(clean(text))
