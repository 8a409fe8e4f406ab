"""The exceptions a caller of the service can meet.

Every one derives from :class:`DevsError`; bad input is also a ``ValueError`` and an
unknown id is also a ``LookupError``, so generic handlers keep working. A command
that raises has written nothing.
"""

from __future__ import annotations

from typing import ClassVar

from devs.domain.redaction import redact


class DevsError(Exception):
    """Base class of every error raised by devs-recovery.

    Its message is redacted: an error that quotes what a caller sent (a value
    out of range, an unknown id) never carries a credential to a log or a
    terminal.

    Each kind of error says once how every edge reports it: ``kind`` (the
    ``error`` of an HTTP error body), ``http_status`` and ``exit_code`` (the
    ``devs`` command line's). The HTTP app, its client and the CLI read
    these; :func:`error_of_kind` turns a kind back into its class.
    """

    kind: ClassVar[str] = "refused"
    http_status: ClassVar[int] = 409
    exit_code: ClassVar[int] = 8

    def __init__(self, *args: object) -> None:
        if args and isinstance(args[0], str):
            args = (redact(args[0]), *args[1:])
        super().__init__(*args)


class InvalidInput(DevsError, ValueError):
    """A value was out of range, malformed, empty or too large.

    ``field`` names the argument refused, when one argument is to blame.
    """

    kind = "invalid_input"
    http_status = 422
    exit_code = 6

    def __init__(self, *args: object, field: str | None = None) -> None:
        super().__init__(*args)
        self.field = field


class NotFound(DevsError, LookupError):
    """An id names nothing that was recorded."""

    kind = "not_found"
    http_status = 404
    exit_code = 7

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownTask(NotFound):
    """``start_with`` names what starts a task, in the words of the caller's
    edge: the Python API's method by default; the HTTP app words it again
    (``POST /tasks``) from ``task_id``."""

    def __init__(self, task_id: str, *, start_with: str = "start_task()") -> None:
        super().__init__(f"unknown task {task_id!r}: start it with {start_with} first")
        self.task_id = task_id


class UnknownRun(NotFound):
    """As :class:`UnknownTask`, for a run (``start_run()``; ``POST /runs``)."""

    def __init__(self, run_id: str, *, start_with: str = "start_run()") -> None:
        super().__init__(f"unknown run {run_id!r}: start it with {start_with} first")
        self.run_id = run_id


class AlreadyExists(DevsError):
    """A task or run with this id was started before.

    :meth:`task` and :meth:`run` word it with the next step, in the words of
    the caller's edge (``next_step``: the Python API's methods by default);
    ``task_id`` or ``run_id`` says which it was (``None`` when only a message
    is known, as in an error read back from HTTP)."""

    kind = "already_exists"

    def __init__(
        self, message: str, *, task_id: str | None = None, run_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.run_id = run_id

    @classmethod
    def task(
        cls,
        task_id: str,
        *,
        next_step: str = "record its attempts with begin_attempt(), or read it "
        "with task()",
    ) -> AlreadyExists:
        """Task ``task_id`` exists: start another id, or go on with this one."""
        return cls(
            f"task {task_id!r} was already started: {next_step}", task_id=task_id
        )

    @classmethod
    def run(
        cls,
        run_id: str,
        *,
        next_step: str = "start its tasks with start_task(run_id=...), or read "
        "it with run_state()",
    ) -> AlreadyExists:
        """Run ``run_id`` exists: start another id, or go on with this one."""
        return cls(f"run {run_id!r} was already started: {next_step}", run_id=run_id)


class IllegalTransition(DevsError):
    """The command is not allowed from the task's (or run's) current state."""

    kind = "illegal_transition"

    def __init__(self, message: str, *, state: str | None = None) -> None:
        super().__init__(message)
        self.state = state


class StaleAnswer(DevsError):
    """A human answer named the task's version it answers (``if_version``,
    HTTP ``If-Match``), and the task has moved on since: someone else
    answered first, or the agent or the clock recorded something. Nothing was
    written; read the task again and answer what it is now. HTTP 412."""

    kind = "stale_answer"
    http_status = 412

    def __init__(
        self,
        message: str,
        *,
        task_id: str | None = None,
        version: int | None = None,
        answered: int | None = None,
    ) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.version = version
        """The task's version now."""
        self.answered = answered
        """The version the answer named."""


class Claimed(DevsError):
    """Someone else claimed the stop ("I'm on it"): only they may answer it
    until they release it, or someone takes it over (a recorded event).
    Nothing was written. HTTP 409."""

    kind = "claimed"

    def __init__(
        self, message: str, *, task_id: str | None = None, claimed_by: str | None = None
    ) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.claimed_by = claimed_by


class OverBudget(DevsError):
    """The task has spent its budget (money or tokens): it may not go back to
    work until a person raises the budget past what it spent. Nothing was
    written. HTTP 409."""

    kind = "over_budget"

    def __init__(self, message: str, *, task_id: str | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id


class Conflict(DevsError):
    """Other writers changed the task (or run) under every retry of a command;
    nothing was written, and the command may be sent again."""

    kind = "conflict"
    exit_code = 10


class StoreError(DevsError):
    """The event store cannot be used: damaged, not a database, unreadable, or
    busy for longer than the lock timeout. Nothing was written."""

    kind = "store_unavailable"
    http_status = 503
    exit_code = 9


class StoreUnavailable(StoreError):
    """The store could not be reached within the wait allowed
    (``DEVS_STORE_TIMEOUT``), or refuses the connection for a reason that
    waiting will not mend (a database that does not exist, a wrong password).
    Nothing was written. ``retry_after`` says in how many seconds asking
    again may help (``None``: the caller's default). Reported as the store being
    unavailable, like :class:`StoreError`: not a failure of the database the
    driver may retry, so it ends a command at once."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StoreFull(StoreError):
    """The disk that holds the store is full (or the database reached a size
    limit set on it): nothing was written, and nothing can be until space is
    freed. Queries that read what was folded before still answer; one whose
    read models must first fold new events fails too. HTTP 507; ``devs``
    exit 9, like every store error."""

    kind = "store_full"
    http_status = 507
    retry_after: float | None = 30.0
    """Freeing space takes someone's hand: asking again at once will not help."""


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


class Forbidden(DevsError):
    """The caller is known but may not do this: a human action asked with the
    service's token once operators exist, or an ``actor`` that names someone
    other than the operator whose token was sent. Nothing was written."""

    kind = "forbidden"
    http_status = 403


class UnknownOperator(NotFound):
    """An operator name that was never added (or was removed)."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"unknown operator {name!r}: add one with `devs operator add NAME` "
            "(`devs operator list` shows who there is)"
        )
        self.name = name


class UnknownMessage(NotFound):
    """A message id with no delivery to try again."""

    def __init__(self, message_id: str) -> None:
        super().__init__(
            f"no delivery of message {message_id!r}: it is unknown, or was "
            "recorded before any endpoint was configured (`devs webhooks list` "
            "shows the deliveries there are)"
        )
        self.message_id = message_id


class NotCaughtUp(DevsError):
    """The read models did not fold the log position a query asked for
    (read-your-writes: ``after=N``) within the wait allowed. Nothing is wrong
    with the store; the query may be asked again."""

    kind = "not_caught_up"
    http_status = 504
    exit_code = 9

    def __init__(
        self, message: str, *, position: int | None = None, reached: int | None = None
    ) -> None:
        super().__init__(message)
        self.position = position
        self.reached = reached


class PositionNotRecorded(InvalidInput):
    """A read-your-writes position (``after=N``) past the end of the log: no
    event has been recorded there, so no wait would see it. Said at once,
    with the log's last position, instead of waiting out the bound; a
    position in the log that the read models have not folded yet is still
    waited for (:class:`NotCaughtUp` when the wait runs out).

    HTTP 409: the value is well formed, and conflicts with the log as it is
    (a later request, once the log reaches it, succeeds)."""

    kind = "position_not_recorded"
    http_status = 409

    def __init__(
        self,
        message: str,
        *,
        position: int | None = None,
        last: int | None = None,
        field: str | None = "position",
    ) -> None:
        super().__init__(message, field=field)
        self.position = position
        self.last = last

    @classmethod
    def past_the_end(cls, position: int, last: int) -> PositionNotRecorded:
        """The error for ``position`` asked of a log that ends at ``last``."""
        msg = (
            f"position {position} has not been recorded: the log ends at "
            f"position {last} (a position a command answered is never past "
            "the end of its log)"
        )
        return cls(msg, position=position, last=last)


def error_of_kind(kind: str) -> type[DevsError] | None:
    """The class that reports errors of ``kind`` (``"not_found"`` ->
    :class:`NotFound`), or ``None`` for a kind no class declares."""
    return _KINDS.get(kind)


def _declaring(cls: type[DevsError]) -> list[type[DevsError]]:
    found = [cls] if "kind" in vars(cls) else []
    for subclass in cls.__subclasses__():
        found.extend(_declaring(subclass))
    return found


_KINDS: dict[str, type[DevsError]] = {
    cls.kind: cls for cls in reversed(_declaring(DevsError))
}
"""Each kind's first declaring class (subclasses that repeat none of their
own, like ``UnknownTask``, report as their base)."""
