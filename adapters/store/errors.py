"""What a database's error says: the texts SQLite and PostgreSQL (libpq, the
operating system under it) give their failures, read into the domain's
:class:`~devs.domain.commands.Trouble` through its port
(:func:`~devs.domain.commands.reads_store_errors`), so that the domain tells a
lock from a full disk without naming a database.

eventsourcing wraps a driver's error in its own (``OperationalError`` and
kin) keeping the driver's text, and so do the read models: the text is what
every layer still has.
"""

from __future__ import annotations

from devs.domain.commands import Trouble, reads_store_errors

SAID: tuple[tuple[str, Trouble], ...] = (
    ("database or disk is full", Trouble.FULL),  # SQLITE_FULL
    ("No space left on device", Trouble.FULL),  # ENOSPC, as PostgreSQL says it
    ("not a database", Trouble.DAMAGED),  # SQLITE_NOTADB
    ("malformed", Trouble.DAMAGED),  # SQLITE_CORRUPT
    ("locked", Trouble.LOCKED),  # SQLITE_BUSY, SQLITE_LOCKED
    ("busy", Trouble.LOCKED),
    ("readonly", Trouble.READ_ONLY),  # SQLITE_READONLY
    ("read-only", Trouble.READ_ONLY),
)
"""What each text says, the first found winning (a full disk is said as such
whatever else the text holds)."""


def trouble_of(error: BaseException) -> Trouble | None:
    """The :class:`Trouble` ``error``'s text says, if any."""
    text = str(error)
    for words, trouble in SAID:
        if words in text:
            return trouble
    return None


def install() -> None:
    """Let the domain read the stores' errors (:func:`trouble_of`)."""
    reads_store_errors(trouble_of)


install()
