"""The exceptions a caller of the service can meet.

Every one derives from :class:`DevsError`; bad input is also a ``ValueError`` and an
unknown id is also a ``LookupError``, so generic handlers keep working. A command
that raises has written nothing.
"""

from __future__ import annotations

from devs.domain.redaction import redact


class DevsError(Exception):
    """Base class of every error raised by devs-recovery.

    Its message is redacted: an error that quotes what a caller sent (a value
    out of range, an unknown id) never carries a credential to a log or a
    terminal.
    """

    def __init__(self, *args: object) -> None:
        if args and isinstance(args[0], str):
            args = (redact(args[0]), *args[1:])
        super().__init__(*args)


class InvalidInput(DevsError, ValueError):
    """A value was out of range, malformed, empty or too large.

    ``field`` names the argument refused, when one argument is to blame.
    """

    def __init__(self, *args: object, field: str | None = None) -> None:
        super().__init__(*args)
        self.field = field


class NotFound(DevsError, LookupError):
    """An id names nothing that was recorded."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownTask(NotFound):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"unknown task {task_id!r}: start it with start_task() first")
        self.task_id = task_id


class UnknownRun(NotFound):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"unknown run {run_id!r}: start it with start_run() first")
        self.run_id = run_id


class AlreadyExists(DevsError):
    """A task or run with this id was started before."""


class IllegalTransition(DevsError):
    """The command is not allowed from the task's (or run's) current state."""

    def __init__(self, message: str, *, state: str | None = None) -> None:
        super().__init__(message)
        self.state = state


class Conflict(DevsError):
    """Other writers changed the task (or run) under every retry of a command;
    nothing was written, and the command may be sent again."""


class StoreError(DevsError):
    """The event store cannot be used: damaged, not a database, unreadable, or
    busy for longer than the lock timeout. Nothing was written."""


class UnreadableEvent(StoreError):
    """A stored event cannot be decoded (unknown topic, damaged or foreign
    state). Only what depends on it fails: its own task's (or run's) loads and
    queries; ``RecoveryService.verify()`` lists it by log position."""

    def __init__(
        self,
        message: str,
        *,
        originator_id: str,
        originator_version: int,
        topic: str,
        position: int | None = None,
    ) -> None:
        super().__init__(message)
        self.originator_id = originator_id
        self.originator_version = originator_version
        self.topic = topic
        self.position = position
