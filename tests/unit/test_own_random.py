"""The waits with jitter draw from their own generators: a retry or a
back-off never moves the ``random`` module's shared state, which a program's
own draws (hypothesis checks its strategies' use of it) may depend on."""

from __future__ import annotations

import random

from devs.adapters.notify.status import next_wait
from devs.domain.commands import _Attempt


def test_a_conflict_retry_leaves_the_shared_generator_alone() -> None:
    before = random.getstate()
    _Attempt(0).retry()
    assert random.getstate() == before


def test_a_delivery_back_off_leaves_the_shared_generator_alone() -> None:
    before = random.getstate()
    waits = {next_wait(1, [10.0]) for _ in range(20)}
    assert random.getstate() == before
    assert len(waits) > 1  # still jittered
