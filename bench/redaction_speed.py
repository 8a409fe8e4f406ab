"""Redaction speed on ordinary and on hostile text (issue "Hardening", point 1).

Texts come from tests/corpus.py, the corpus the redaction tests use: about
5 MB of ordinary test-runner output, and each hostile text of the issue
repeated to 200,000 characters. Each is redacted (best of ``repeat``) and
recorded as a failed gate's output through the public API.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.corpus

from devs.adapters.config import Settings, open_service
from devs.domain.redaction import redact
from tests.corpus import (
    HOSTILE_ISSUE,
    HOSTILE_MORE,
    hostile,
    runner_output,
)


class Speed(NamedTuple):
    label: str
    mb_per_s: float
    record_s: float  # redacted and recorded by record_gate


class Speeds(NamedTuple):
    ordinary: Speed
    issue: list[Speed]  # the hostile texts the issue lists (target >= 20 MB/s)
    more: list[Speed]  # the corpus's other hostile texts (reported only)


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def speeds(
    db: Path, ordinary_chars: int, hostile_chars: int, repeat: int = 3
) -> Speeds:
    """Every text's redaction speed and time to record."""
    texts = [("ordinary test-runner output", runner_output(ordinary_chars))]
    texts += [(repr(unit), hostile(unit, hostile_chars)) for unit in HOSTILE_ISSUE]
    texts += [(repr(unit), hostile(unit, hostile_chars)) for unit in HOSTILE_MORE]
    app = open_service(Settings(db=str(db)))
    measured = []
    try:
        for i, (label, text) in enumerate(texts):
            seconds = _best(functools.partial(redact, text), repeat)
            task = f"redaction-{i}"
            app.start_task(task)
            start = time.perf_counter()
            app.record_gate(task, 1, output=text)
            recorded = time.perf_counter() - start
            measured.append(Speed(label, len(text) / seconds / 1e6, recorded))
    finally:
        app.close()
    issue_end = 1 + len(HOSTILE_ISSUE)
    return Speeds(measured[0], measured[1:issue_end], measured[issue_end:])


if __name__ == "__main__":
    import tempfile

    measured = speeds(Path(tempfile.mkdtemp()) / "r.sqlite", 5_000_000, 200_000)
    for speed in [measured.ordinary, *measured.issue, *measured.more]:
        print(
            f"{speed.label:40s} {speed.mb_per_s:8.1f} MB/s  "
            f"recorded in {speed.record_s * 1000:7.1f} ms"
        )
