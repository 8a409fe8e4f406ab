"""Pydantic base classes for event-sourced aggregates with string ids.

Follows eventsourcing 9.5's ``examples/aggregate7`` and ``examples/aggregate8``:
events are frozen pydantic models, so the mapper can dump them to JSON-safe dicts
and validate them back, and snapshots carry a typed state model so that nested
models and datetimes survive the round trip.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Self

from eventsourcing.domain import (
    BaseAggregate,
    CanInitAggregate,
    CanMutateAggregate,
    CanSnapshotAggregate,
    datetime_now_with_tzinfo,
)
from eventsourcing.utils import get_topic
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from devs.domain.eventsourcing_internals import AGGREGATE_TIMES, NOT_IN_SNAPSHOT

_datetime_adapter = TypeAdapter(datetime)


class Immutable(BaseModel):
    """A frozen value object that rejects unknown fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def of(cls, fields: dict[str, Any]) -> Self:
        """``cls(**fields)``: pydantic validates the dict as it is, without the
        keyword arguments in between (as ``model_validate`` does, with less
        around it). For the values every decision builds."""
        built: Self = cls.__pydantic_validator__.validate_python(fields)
        return built


class Value(Immutable):
    """An immutable value held in aggregate state (scalars, tuples, values)."""


class DomainEvent(Immutable):
    """A fact about one aggregate, at one version, at one time."""

    originator_id: str
    originator_version: int
    timestamp: datetime = Field(default_factory=datetime_now_with_tzinfo)


class SnapshotState(Immutable):
    """Typed state of a snapshot; subclasses declare the aggregate's fields."""

    model_config = ConfigDict(extra="allow", frozen=True)

    def __init__(self, **kwargs: Any) -> None:
        for key in AGGREGATE_TIMES:
            kwargs[key] = _datetime_adapter.validate_python(kwargs[key])
        super().__init__(**kwargs)


class AggregateSnapshot(DomainEvent, CanSnapshotAggregate[str]):
    """A snapshot; subclasses annotate ``state`` with a :class:`SnapshotState`.

    Attributes an aggregate lists in ``DERIVED`` are left out of the snapshot
    and rebuilt by its ``derive()`` after the snapshot is restored.
    """

    topic: str
    state: Any

    @classmethod
    def take(cls, aggregate: Any) -> Self:
        skipped = {*NOT_IN_SNAPSHOT, *aggregate.DERIVED}
        state = {
            key: value for key, value in vars(aggregate).items() if key not in skipped
        }
        return cls(
            originator_id=aggregate.id,
            originator_version=aggregate.version,
            timestamp=cls.create_timestamp(),
            topic=get_topic(type(aggregate)),
            state=state,
        )

    def mutate(self, aggregate: Any) -> Any:
        restored = super().mutate(aggregate)
        assert isinstance(restored, Aggregate)
        restored.derive()
        return restored


class AggregateEvent(DomainEvent, CanMutateAggregate[str]):
    """An event that changes an existing aggregate."""


class AggregateCreated(AggregateEvent, CanInitAggregate[str]):
    """The first event of an aggregate."""

    originator_topic: str


class Aggregate(BaseAggregate[str]):
    """Base aggregate: string ids, pydantic events with explicit topics.

    Subclasses declare their "created" event by subclassing
    :class:`AggregateCreated`, and give every event a stable ``TOPIC``.
    """

    DERIVED: ClassVar[tuple[str, ...]] = ()
    """Attributes computed from the others: not snapshotted, see ``derive``."""

    Snapshot: ClassVar[type[AggregateSnapshot]]
    """Each aggregate's snapshot class (a nested ``AggregateSnapshot``)."""

    class Event(AggregateEvent):
        pass

    def derive(self) -> None:
        """Recompute the ``DERIVED`` attributes from the recorded ones."""
