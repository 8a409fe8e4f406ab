"""The strategy blacklist: fuzzy matching against lessons, and the prompt directive.

A candidate strategy is blacklisted when its Levenshtein distance to a lesson's
strategy is at most ``floor(len(candidate) * 0.20)``. rapidfuzz computes the
distance with ``score_cutoff``, so a long string that is far away is abandoned
early instead of costing a full quadratic comparison.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

SIMILARITY_RATIO = 0.20
DIRECTIVE_HEADER = (
    "SYSTEM: The following strategies have already failed and MUST NOT be used:"
)
DIRECTIVE_ITEM_LIMIT = 500

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
# Sequences that open or close a role, a message or a fenced block in common
# prompt formats; inside a quoted strategy they are neutralised.
_DELIMITERS = re.compile(
    r"(```+|~~~+|<\|[^|>]*\|>|</?\s*(?:system|user|assistant|instructions?)\s*>"
    r"|\[/?INST\]|<<\s*/?SYS\s*>>|^\s*(?:system|assistant|user)\s*:|###+)",
    re.IGNORECASE | re.MULTILINE,
)


def max_distance(candidate: str) -> int:
    """The largest edit distance at which ``candidate`` still matches."""
    return int(len(candidate) * SIMILARITY_RATIO)


def find_match(candidate: str, strategies: Sequence[str]) -> str | None:
    """The strategy closest to ``candidate`` within :func:`max_distance`, if any."""
    if not strategies:
        return None
    best = process.extractOne(
        candidate,
        strategies,
        scorer=Levenshtein.distance,
        score_cutoff=max_distance(candidate),
    )
    return None if best is None else str(best[0])


def similar(candidate: str, other: str) -> bool:
    """Whether ``candidate`` is within :func:`max_distance` of ``other``."""
    limit = max_distance(candidate)
    return bool(Levenshtein.distance(candidate, other, score_cutoff=limit) <= limit)


def sanitise(strategy: str, limit: int = DIRECTIVE_ITEM_LIMIT) -> str:
    """A strategy made safe to quote inside a system prompt.

    Control characters and newlines become spaces, prompt delimiters are replaced,
    double quotes become single quotes (the item is double-quoted), and the text
    is capped at ``limit`` characters.
    """
    text = _DELIMITERS.sub("[removed]", strategy)
    text = _CONTROL.sub(" ", text)
    text = text.replace('"', "'").replace("\\", "/")
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def directive(strategies: Iterable[str]) -> str:
    """The text to prepend to an agent's system prompt; empty when none failed."""
    items = [f'- "{sanitise(s)}"' for s in strategies]
    if not items:
        return ""
    return "\n".join([DIRECTIVE_HEADER, *items])
