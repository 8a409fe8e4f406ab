"""The private parts of eventsourcing 9.5 that the domain and the read models
rely on, whatever the store.

Where the service goes below eventsourcing's public API (for speed, or inside a
transaction it already holds), it goes through here (or, for what names a
database, ``devs.adapters.store.internals``): each private name used is one
small function, each override of a private method is declared in
:data:`OVERRIDES`, and ``tests/integration/test_eventsourcing_internals.py``
pins them so an upgrade that changes one fails there, naming it. No store is
named: every object is passed in and used by its attributes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from eventsourcing.application import Application
    from eventsourcing.domain import BaseAggregate
    from eventsourcing.persistence import Recording, Tracking
    from eventsourcing.projection import BaseProjectionRunner


class TrackingTables(Protocol):
    """A tracking recorder of eventsourcing's stores (each has these private
    parts, by these names)."""

    tracking_table_exists: bool
    tracking_migration_previous: int | None
    tracking_migration_current: int | None
    table_migration_identifier: str

    def _max_tracking_id(self, application_name: str, c: Any) -> int | None: ...

    def _insert_tracking(self, c: Any, tracking: Tracking) -> None: ...


EVENTSOURCING_VERSION = "9.5"
"""The release whose private parts these are (``pyproject.toml`` pins 9.5.x)."""


# ------------------------------------------------------------- the commands


def notify(app: Application[Any], recordings: list[Recording[Any]]) -> None:
    """``Application._notify(recordings)``: the hook ``Application.save`` calls
    once the events are stored (nothing on ``Application``; a ``system.Leader``
    prompts its followers). ``TaskCommands.save`` takes the library's steps
    itself, without its ``isinstance`` checks, so it calls the hook as they do."""
    app._notify(recordings)


# ------------------------------------------------------ the tracking tables


def max_tracking_id(
    recorder: TrackingTables, application_name: str, cursor: Any
) -> int | None:
    """``_max_tracking_id(application_name, c)`` of the tracking recorders:
    the position recorded for ``application_name`` as the caller's open
    transaction sees it. The public ``max_tracking_id`` reads it
    in a transaction of its own; a view reads it in the transaction that folds,
    under the lock that keeps two catch-ups from folding an event twice."""
    return recorder._max_tracking_id(application_name, cursor)


def insert_tracking(recorder: TrackingTables, cursor: Any, tracking: Any) -> None:
    """``_insert_tracking(c, tracking)`` of the tracking recorders: records
    the position in the caller's open transaction, so that it commits with
    the rows folded (``IntegrityError`` if it would not move
    forward). The public ``insert_tracking`` commits it alone."""
    recorder._insert_tracking(cursor, tracking)


def note_tracking_table(recorder: TrackingTables, cursor: Any) -> None:
    """``tracking_table_exists``, ``tracking_migration_previous``,
    ``tracking_migration_current`` and ``table_migration_identifier`` (fields
    the tracking recorders keep to themselves: ``create_table`` sets them
    before the DDL's transaction, ``_create_table`` reads them), and
    ``_max_tracking_id``: records that the tracking table and its
    ``__migration__`` row exist as seen in ``cursor``'s transaction, so that
    ``_create_table`` does not insert the row again (a process that raced this
    one made both after ``create_table`` looked)."""
    recorder.tracking_table_exists = True
    migrated = recorder._max_tracking_id(recorder.table_migration_identifier, cursor)
    recorder.tracking_migration_previous = migrated
    recorder.tracking_migration_current = migrated


# --------------------------------------------------- the projection runner


def fetched_ahead(subscription: Any) -> bool:
    """``ListenNotifySubscription._notifications``, ``_notifications_index``
    and ``_notifications_queue`` (the subscriptions of the recorders that
    listen for new events, the in-memory one among them): the page ``next()``
    is going through, its place in it, and the pages the pulling thread
    fetched since. Whether ``next()``
    has an event at hand, without waiting; ``False`` for a subscription that
    has no such fields (the runner then folds one event at a time)."""
    try:
        page: Sequence[Any] = subscription._notifications
        index: int = subscription._notifications_index
        queue = subscription._notifications_queue
    except AttributeError:
        return False
    return index < len(page) or not queue.empty()


def leave_thread_error(runner: BaseProjectionRunner[Any], error: BaseException) -> None:
    """``BaseProjectionRunner._thread_error``: where the event-processing
    thread leaves the error that stopped it, for ``run_forever``, ``wait`` and
    ``__exit__`` to raise. The read models' runner's
    ``_process_events_loop`` (an override declared with the store's) leaves
    its error there as the library's loop does."""
    runner._thread_error = error


# --------------------------------------------------------------- aggregates


def create_aggregate(
    cls: type[BaseAggregate[Any]], event_class: type[Any], **kwargs: Any
) -> Any:
    """``BaseAggregate._create(event_class, *, id=None, **kwargs)``: a new
    aggregate from its "created" event class and the event's fields (``id``
    given, or made by ``create_id``), the event pending. Calling the class
    cannot do it when the id is not made from the ``__init__`` arguments
    (``Receipt.issue``) or the event has fields ``__init__`` does not take
    (``chain_prev``, in ``replay.fresh``)."""
    return cls._create(event_class, **kwargs)


AGGREGATE_TIMES = ("_created_on", "_modified_on")
"""The attributes ``BaseAggregate`` keeps its times in: a snapshot's state
holds them (as ISO strings once stored), and restoring one sets them again."""

NOT_IN_SNAPSHOT = ("_id", "_version", "_pending_events")
"""The attributes ``BaseAggregate`` keeps its id, version and new events in:
``CanSnapshotAggregate.take`` leaves them out of a snapshot's state (as
``devs.domain.model.AggregateSnapshot.take`` does) and ``mutate`` sets them
from the snapshot (and no pending events) when it restores one."""


# ---------------------------------------------------------------- overrides


@dataclass(frozen=True)
class Override:
    """A private method of eventsourcing that classes of ours override."""

    base: str
    """The topic of the eventsourcing class that defines it."""
    name: str
    kind: str
    """``method``, ``classmethod`` or ``staticmethod``."""
    parameters: str
    """Its parameters as the library declares them (``*``/``**``: any names),
    which ours take too: the library calls some of them by keyword."""
    overridden_in: tuple[str, ...]
    """The topics of our classes that define it."""
    why: str


OVERRIDES: tuple[Override, ...] = (
    Override(
        "eventsourcing.application:Application",
        "_take_snapshots",
        "method",
        "(self, processing_event)",
        ("devs.domain.commands:TaskCommands",),
        "``save`` calls it after recording; ours snapshots the aggregate as held "
        "instead of reading it back from the store.",
    ),
    Override(
        "eventsourcing.domain:BaseAggregate",
        "_create",
        "classmethod",
        "(cls, event_class, *, id, **)",
        ("devs.domain.task:Task",),
        "calling the class and ``create_aggregate`` go through it; ours opens "
        "a task's hash chain with the task's id.",
    ),
)
"""Every private method of eventsourcing that a class of the domain
overrides (those of the stores' and read models' classes:
``devs.adapters.store.internals.OVERRIDES``)."""
