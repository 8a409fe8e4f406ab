"""Keeping read models current without a subscription (the SQLite way).

SQLite cannot be subscribed to, so the projections catch up from the application's
notification log in the calling process: every query first processes whatever was
recorded since each view's tracking position, so it sees every command that
returned before it, in this process or another. Events are read once per page and
fed to each projection inside one transaction per view; if another process got
there first, its tracking position wins and this one re-reads and goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import IntegrityError, OperationalError, Tracking

from devs.domain.errors import InvalidInput
from devs.projections.base import DocumentProjection

PAGE_SIZE = 500
MAX_CONFLICTS = 20


class ReadModels:
    """The projections of one application, and how they catch up."""

    def __init__(
        self,
        app: Application[Any],
        projections: Sequence[DocumentProjection[Any]],
    ) -> None:
        self.app = app
        self.projections = {p.name: p for p in projections}
        self._positions: dict[str, int] = {}

    def positions(self) -> dict[str, int]:
        """Each projection's tracking position, read from its view."""
        return {
            name: projection.view.max_tracking_id(self.app.name) or 0
            for name, projection in self.projections.items()
        }

    def catch_up(
        self,
        *,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Process every recorded event not yet in each view; return the position."""
        last = self.app.recorder.max_notification_id() or 0
        selected = list(names) if names is not None else list(self.projections)
        if self._positions and all(
            self._positions.get(name, -1) >= last for name in selected
        ):
            return last
        for _ in range(MAX_CONFLICTS):
            try:
                self._catch_up_to(last, selected, progress)
            except (IntegrityError, OperationalError):
                # Another process advanced a view first: re-read and go on.
                self._positions.clear()
                continue
            return last
        msg = "read models could not catch up: too many concurrent updates"
        raise OperationalError(msg)

    def _catch_up_to(
        self,
        last: int,
        names: Sequence[str],
        progress: Callable[[int, int], None] | None,
    ) -> None:
        positions = self.positions()
        self._positions = positions
        start = min(positions[name] for name in names)
        while start < last:
            notifications = self.app.recorder.select_notifications(
                start=start + 1, limit=PAGE_SIZE, stop=last
            )
            if not notifications:
                break
            page = [
                (self.app.mapper.to_domain_event(n), Tracking(self.app.name, n.id))
                for n in notifications
            ]
            for name in names:
                todo = [(e, t) for e, t in page if t.notification_id > positions[name]]
                if not todo:
                    continue
                projection = self.projections[name]
                with projection.view.batch():
                    for domain_event, tracking in todo:
                        projection.process_event(domain_event, tracking)
                positions[name] = todo[-1][1].notification_id
            start = notifications[-1].id
            if progress is not None:
                progress(start, last)

    def rebuild(
        self,
        names: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Drop the named views (default: all) and replay them from position 0."""
        selected = list(names) if names is not None else list(self.projections)
        unknown = [name for name in selected if name not in self.projections]
        if unknown:
            msg = (
                f"unknown projection {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(self.projections)}"
            )
            raise InvalidInput(msg)
        for name in selected:
            self.projections[name].view.clear(self.app.name)
        self._positions.clear()
        return self.catch_up(names=selected, progress=progress)
