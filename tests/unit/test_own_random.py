"""The waits with jitter draw from their own generators: a retry or a
back-off never moves the ``random`` module's shared state, which a program's
own draws (hypothesis checks its strategies' use of it) may depend on."""

from __future__ import annotations

import os
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


def test_a_forked_child_draws_other_jitter_than_its_parent() -> None:
    """Each generator is reseeded in a forked child (as ``random``'s shared one
    is): two processes forked from one must not wait in step."""
    from devs.adapters.notify import status
    from devs.adapters.store import persistence
    from devs.domain import commands

    generators = (commands._JITTER, status._JITTER, persistence._JITTER)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its draws, then out
        os.close(read)
        os.write(write, " ".join(repr(g.random()) for g in generators).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    parent = [repr(g.random()) for g in generators]
    drawn = child.split()
    assert len(drawn) == len(generators)
    assert all(a != b for a, b in zip(drawn, parent, strict=True)), (drawn, parent)
