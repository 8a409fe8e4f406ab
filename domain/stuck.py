"""Stuck detection: a score in [0, 1] derived from a task's recent failures.

Pure code, no I/O: the referee calls :func:`assess` after every failed gate and
blocked attempt, and records the result in that failure's event. Each failure
is compared with the two before it, so the work is linear in the window;
strategies and error hashes that revisit add evidence, progress (fewer failing
tests) clears it, and the signals say in words which pattern drove the score.
The rules and the formula: docs/audit.md ("Stuck detection").
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Sequence
from typing import Literal, NamedTuple, Protocol

from devs.domain import blacklist
from devs.domain.model import Value

WINDOW = 10
"""Most recent failures (since the last pass) that the score looks at."""
EVIDENCE = 4
"""Trailing revisits (strategies and errors together) for a score of 1."""
STUCK_AT = 0.75
"""The score the detector's labelled corpus treats as stuck (the entropy
gate's default threshold); in ``gate`` mode the policy's threshold decides."""

SignalKind = Literal[
    "strategy_repeat", "alternation", "error_repeat", "revisit", "no_progress"
]


Subject = Literal["strategy", "error"]


class StuckSignal(Value):
    """One pattern found in the window, with how many failures show it."""

    kind: SignalKind
    subject: Subject
    count: int
    text: str


class StuckAssessment(Value):
    """A stuck score, the window it looked at and the signals behind it."""

    score: float
    window: int
    strategy_revisits: int
    error_revisits: int
    signals: tuple[StuckSignal, ...] = ()

    @property
    def summary(self) -> str:
        """The signals in one line, or ``"no repetition"``."""
        return "; ".join(s.text for s in self.signals) or "no repetition"


class Failure(Protocol):
    """What the detector reads of one failure (a task's ``FailureRecord``)."""

    @property
    def strategy(self) -> str | None: ...
    @property
    def error_hash(self) -> str: ...
    @property
    def failing_tests(self) -> int | None: ...


class Attempted(NamedTuple):
    """A :class:`Failure` built by hand (tests, benchmarks)."""

    strategy: str | None
    error_hash: str
    failing_tests: int | None = None
    """How many tests failed, when the output says (:func:`failing_tests`)."""


# Bounded digits, no nested repetition: linear in the text.
_FAILING = re.compile(
    r"\b(\d{1,9}) (?:failed|failures?|failing|errors?)\b|\bfailures=(\d{1,9})",
    re.IGNORECASE,
)


def failing_tests(output: str) -> int | None:
    """The last failing-test count an output reports (``3 failed``,
    ``failures=3``, ``3 failing``, ``3 errors``), if any."""
    found: int | None = None
    for match in _FAILING.finditer(output):
        found = int(match.group(1) or match.group(2))
    return found


_READ = operator.attrgetter("strategy", "error_hash", "failing_tests")
"""What the score reads of a failure, as a plain tuple (built in C: no Python
call per failure)."""


def assess(failures: Sequence[Failure]) -> StuckAssessment:
    """The stuck score of ``failures`` (oldest first, the newest last)."""
    # A looping agent sends the same window again and again: kept, bounded.
    return _assess(tuple(map(_READ, failures[-WINDOW:])))


@functools.lru_cache(maxsize=1024)
def _assess(read: tuple[tuple[str | None, str, int | None], ...]) -> StuckAssessment:
    window = [Attempted._make(failure) for failure in read]
    progress = _progress(window)
    raw = [f.strategy or None for f in window]
    strategies = _letters(raw, [_normalised(s) if s else None for s in raw], progress)
    hashes: list[str | None] = [f.error_hash for f in window]
    errors = _letters(hashes, hashes, progress, fuzzy=False)
    s_run = _trailing_revisits(strategies)
    e_run = _trailing_revisits(errors)
    signals = (
        *_signals("strategy", strategies, s_run),
        *_signals("error", errors, e_run),
    )
    if e_run >= 2 and s_run == 0:
        signals = (
            *signals,
            _signal(
                "no_progress",
                "error",
                e_run,
                f"no progress: {e_run} new strategies brought no new error",
            ),
        )
    return _assessment(
        min(1.0, (s_run + e_run) / EVIDENCE), len(window), s_run, e_run, signals
    )


# ----------------------------------------------------------------- internals

# Scores and signals are immutable values drawn from a small set (runs of at
# most WINDOW, a few patterns): each is built once, as gate results are.


@functools.lru_cache(maxsize=4096)
def _signal(kind: SignalKind, subject: Subject, count: int, text: str) -> StuckSignal:
    return StuckSignal.of(
        {"kind": kind, "subject": subject, "count": count, "text": text}
    )


@functools.lru_cache(maxsize=4096)
def _assessment(
    score: float,
    window: int,
    strategy_revisits: int,
    error_revisits: int,
    signals: tuple[StuckSignal, ...],
) -> StuckAssessment:
    return StuckAssessment.of(
        {
            "score": score,
            "window": window,
            "strategy_revisits": strategy_revisits,
            "error_revisits": error_revisits,
            "signals": signals,
        }
    )


Letters = list[tuple[int, bool, int]]
"""Per failure: the cluster it belongs to (0, 1, …), whether it revisits, and
the index of the failure it revisits (its own when it does not)."""


# The window slides by one failure per decision: the same strategies and the
# same pairs of them come back up to WINDOW times, so their keys and distances
# are kept (bounded caches; the strings are shared, not copied).
@functools.lru_cache(maxsize=1024)
def _normalised(strategy: str) -> str:
    return " ".join(strategy.casefold().split())


CHANGES = re.compile(r"(?:edit [^\n]{1,600}?: |ran: )")
"""How a strategy made of recorded changes opens (the hooks' format)."""


def recorded_changes(strategy: str) -> bool:
    """Whether ``strategy`` lists the changes themselves (an edit's path and
    new text, a command run) rather than telling an approach in words."""
    return CHANGES.match(strategy) is not None


@functools.lru_cache(maxsize=4096)
def _similar(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    if a == b:
        return True
    if recorded_changes(a) or recorded_changes(b):
        return False  # what changed differs: another fix, however alike
    return blacklist.similar(a, b)


def _progress(window: Sequence[Failure]) -> list[bool]:
    """Per failure: whether it reports fewer failing tests than the one before."""
    made = [False] * len(window)
    for i in range(1, len(window)):
        now, before = window[i].failing_tests, window[i - 1].failing_tests
        made[i] = now is not None and before is not None and now < before
    return made


def _letters(
    values: Sequence[str | None],
    keys: Sequence[str | None],
    progress: Sequence[bool],
    *,
    fuzzy: bool = True,
) -> Letters:
    """Give each failure a cluster letter: the one of the failure one or two
    back when it is the same (equal keys, or, ``fuzzy``, values within the
    blacklist's distance), else the one of an earlier failure with an equal
    key, else a new one. Linear: at most two comparisons and one dict lookup
    per failure."""
    letters: Letters = []
    seen: dict[str, tuple[int, int]] = {}
    clusters = 0
    for i, k in enumerate(keys):
        letter: int | None = None
        ref = i
        if k is not None:
            for lag in (1, 2):
                if i < lag:
                    break
                other = keys[i - lag]
                if other is not None and (
                    other == k or (fuzzy and _similar(values[i], values[i - lag]))
                ):
                    letter, ref = letters[i - lag][0], i - lag
                    break
            if letter is None and k in seen:
                letter, ref = seen[k]
        revisit = letter is not None and not progress[i]
        if letter is None:
            letter = clusters
            clusters += 1
        if k is not None:
            seen.setdefault(k, (letter, i))
        letters.append((letter, revisit, ref))
    return letters


def _trailing_revisits(letters: Letters) -> int:
    run = 0
    for _, revisit, _ in reversed(letters):
        if not revisit:
            break
        run += 1
    return run


def _all_same(letters: Letters) -> bool:
    return len({c for c, _, _ in letters}) <= 1


def _pattern(letters: Letters) -> str:
    names: dict[int, str] = {}
    for cluster, _, _ in letters:
        if cluster not in names:
            names[cluster] = _name(len(names))
    return "-".join(names[c] for c, _, _ in letters)


def _name(n: int) -> str:
    return chr(ord("A") + n) if n < 26 else f"#{n + 1}"


def _signals(
    subject: Literal["strategy", "error"], letters: Letters, run: int
) -> tuple[StuckSignal, ...]:
    """What the trailing run of revisits looks like, in words."""
    if run == 0:
        return ()
    # From the earliest failure the run revisits: A-B-A-B, not B-A-B.
    start = min(ref for _, _, ref in letters[-run:])
    tail = letters[start:]
    clusters = [c for c, _, _ in tail]
    noun = "strategy" if subject == "strategy" else "error hash"
    if _all_same(tail):
        return (
            _signal(
                "strategy_repeat" if subject == "strategy" else "error_repeat",
                subject,
                len(tail),
                f"same {noun} {len(tail)} times",
            ),
        )
    alternating = len(set(clusters)) == 2 and all(
        clusters[i] != clusters[i - 1] for i in range(1, len(clusters))
    )
    plural = "strategies" if subject == "strategy" else "error hashes"
    if alternating:
        return (
            _signal(
                "alternation",
                subject,
                len(tail),
                f"{plural} alternate {_pattern(tail)}",
            ),
        )
    return (
        _signal(
            "revisit",
            subject,
            len(tail),
            f"{plural} revisit earlier ones {_pattern(tail)}",
        ),
    )
