"""What a store's error says reaches the domain through its port: the store's
adapter reads the database's texts (``devs.adapters.store.errors``), the
domain matches none (``tests/integration/test_config.py`` checks its code)."""

from __future__ import annotations

import sqlite3

import pytest
from eventsourcing.persistence import OperationalError

from devs.adapters.store.errors import trouble_of
from devs.domain.commands import (
    Trouble,
    WouldWait,
    describe_store_error,
    locked,
    reads_store_errors,
    store_error,
    trouble,
)
from devs.domain.errors import StoreFull


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("database is locked", Trouble.LOCKED),
        ("database table is locked", Trouble.LOCKED),
        ("the server is busy", Trouble.LOCKED),
        ("database or disk is full", Trouble.FULL),
        ("could not extend file: No space left on device", Trouble.FULL),
        ("file is not a database", Trouble.DAMAGED),
        ("database disk image is malformed", Trouble.DAMAGED),
        ("attempt to write a readonly database", Trouble.READ_ONLY),
        ("a read-only transaction", Trouble.READ_ONLY),
        ("disk I/O error", None),
    ],
)
def test_the_store_s_texts_say_what_failed(text: str, said: Trouble | None) -> None:
    raw = sqlite3.OperationalError(text)
    assert trouble_of(raw) is said
    wrapped = OperationalError(raw)  # as eventsourcing raises it
    assert trouble_of(wrapped) is said
    assert trouble(wrapped) is said  # the adapter's reader is installed


def test_the_domain_describes_a_trouble_in_its_own_words() -> None:
    assert "stayed locked by another process" in describe_store_error(
        OperationalError("database is locked")
    )
    full = store_error(OperationalError("database or disk is full"))
    assert isinstance(full, StoreFull)
    assert "disk that holds the database is full" in str(full)
    assert describe_store_error(OperationalError("disk I/O error")) == (
        "the event store failed: disk I/O error"
    )


def test_would_wait_is_a_lock_whatever_the_store() -> None:
    assert trouble(WouldWait("another thread is deciding")) is Trouble.LOCKED
    assert locked(WouldWait("x"))


class _Jammed(Exception):
    """A failure of some other store, worded its own way."""


def test_another_store_s_reader_is_asked_too() -> None:
    def jammed(error: BaseException) -> Trouble | None:
        return Trouble.LOCKED if isinstance(error, _Jammed) else None

    assert trouble(_Jammed("queue jam")) is None
    reads_store_errors(jammed)
    assert locked(_Jammed("queue jam"))
    assert "stayed locked" in describe_store_error(_Jammed("queue jam"))
    assert trouble(OperationalError("database or disk is full")) is Trouble.FULL
