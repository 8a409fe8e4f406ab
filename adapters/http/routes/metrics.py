"""The figures: Prometheus' text format and the same as JSON."""

from __future__ import annotations

from fastapi import APIRouter, Response

from devs.adapters.http.contract import RunQuery, SinceQuery
from devs.adapters.http.dispatch import Devs, HttpRoute, ReadAfter, Served
from devs.adapters.prometheus import CONTENT_TYPE as PROMETHEUS_CONTENT_TYPE
from devs.adapters.prometheus import exposition
from devs.domain import (
    Metrics,
)
from devs.domain.values import parse_time

router = APIRouter(tags=["metrics"], route_class=HttpRoute)


# ------------------------------------------------------------------ metrics


def _figures(served: Served, run_id: str | None, since: str | None) -> Metrics:
    moment = None if since is None else parse_time(since, "since")
    return served.service.metrics(run_id=run_id, since=moment)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}}},
            "description": "the metrics in Prometheus' text format",
        }
    },
)
def prometheus_metrics(
    served: Devs,
    position: ReadAfter,
    run_id: RunQuery = None,
    since: SinceQuery = None,
) -> Response:
    """``metrics()`` in Prometheus' text exposition format (``devs_…``)."""
    with served.service.reading_after(position):
        figures = _figures(served, run_id, since)
    return Response(exposition(figures), media_type=PROMETHEUS_CONTENT_TYPE)


@router.get("/metrics/json")
def metrics_json(
    served: Devs,
    position: ReadAfter,
    run_id: RunQuery = None,
    since: SinceQuery = None,
) -> Metrics:
    """``metrics()`` as JSON."""
    with served.service.reading_after(position):
        return _figures(served, run_id, since)
