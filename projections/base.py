"""Read models: document views with tracking, and the projections that fill them.

Follows eventsourcing 9.5's ``examples/ftsprojection``: an abstract view interface
(a :class:`~eventsourcing.persistence.TrackingRecorder`), one concrete view per
backend, and projections whose ``process_event`` is a ``singledispatchmethod`` with
a default that still records the tracking position. Every change to a view's rows
and its tracking position is written in one transaction, so a view can be dropped
and rebuilt from position 0 to the same rows.

A view holds documents (pydantic models, stored as JSON) under a key, with a few
indexed columns for filtering (``task_id``, ``run_id``, ``state``) and ``seq`` for
ordering.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Generic, TypeVar

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking, TrackingRecorder
from eventsourcing.projection import Projection
from pydantic import BaseModel

TDoc = TypeVar("TDoc", bound=BaseModel)


class DocumentChanges(ABC, Generic[TDoc]):
    """Reads and writes inside one open view transaction."""

    @abstractmethod
    def get(self, key: str) -> TDoc | None:
        """The document stored under ``key``, if any."""

    @abstractmethod
    def put(
        self,
        key: str,
        doc: TDoc,
        *,
        task_id: str | None = None,
        run_id: str | None = None,
        state: str | None = None,
        seq: int | None = None,
    ) -> None:
        """Insert or replace the document under ``key``."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the document under ``key`` (no error if absent)."""


class DocumentView(TrackingRecorder, ABC, Generic[TDoc]):
    """Abstract view: documents of one model type, plus a tracking position."""

    name: ClassVar[str]
    model: ClassVar[type[BaseModel]]

    @abstractmethod
    def changes(
        self, tracking: Tracking
    ) -> AbstractContextManager[DocumentChanges[TDoc]]:
        """Open (or join) a transaction that also records ``tracking``."""

    @abstractmethod
    def batch(self) -> AbstractContextManager[None]:
        """Group the ``changes`` made inside into one transaction."""

    @abstractmethod
    def one(self, key: str) -> TDoc | None:
        """The document under ``key``."""

    @abstractmethod
    def many(
        self,
        *,
        task_id: str | None = None,
        run_id: str | None = None,
        state: str | None = None,
    ) -> list[TDoc]:
        """Documents matching every given column, ordered by ``seq`` then key."""

    @abstractmethod
    def clear(self, application_name: str) -> None:
        """Drop every document and the tracking position, in one transaction."""

    def track(self, tracking: Tracking) -> None:
        """Record ``tracking`` with no change to the documents."""
        with self.changes(tracking):
            pass


TView = TypeVar("TView", bound=DocumentView[Any])


class DocumentProjection(Projection[TView], ABC):
    """A projection into a :class:`DocumentView`.

    Subclasses set ``process_event = tracking_dispatcher()`` and register their
    handlers on it, so each projection has its own dispatch table.
    """


def tracking_dispatcher() -> singledispatchmethod[None]:
    """A ``process_event`` whose default records the position and nothing else."""

    @singledispatchmethod
    def process_event(
        self: DocumentProjection[Any], domain_event: Any, tracking: Tracking
    ) -> None:
        self.view.track(tracking)

    return process_event
