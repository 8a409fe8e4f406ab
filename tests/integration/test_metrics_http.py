"""The metrics over HTTP: ``GET /metrics`` in Prometheus' text format,
``GET /metrics/json``, and ``HttpRecoveryClient.metrics``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from devs.adapters.client import HttpRecoveryClient
from devs.adapters.http import create_app
from devs.domain import InvalidInput, Metrics, NotFound, RecoveryService
from devs.domain.names import Resolution

TOKEN = "metrics-token-0123456789"
LONG = "rewrite the tokenizer " * 10  # 220 characters


@pytest.fixture
def http(service: RecoveryService) -> Iterator[TestClient]:
    app = create_app(service, token=TOKEN, read_wait=0.3)
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client


def history(service: RecoveryService) -> datetime:
    """Two tasks of run r, one outside it; returns when the last started."""
    service.start_run("r", {"a": [], "b": []})
    service.start_task("a", run_id="r", agent="codex")
    service.record_usage(
        "a", model="gpt-5", input_tokens=1_000, output_tokens=10, cache_read_tokens=5
    )
    service.begin_attempt("a", LONG)
    for _ in range(3):
        service.record_gate("a", 1, error="boom")
    service.resume("a", actor="ann", reason="go on")
    service.start_task("b", run_id="r")
    service.record_gate("b", 1, strategy="regex")
    service.start_task("c")
    service.report_entropy("c", 0.9)
    return service.history("c", limit=1)[0].timestamp


def families(
    text: str,
) -> dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """Each family's samples: (sample name, sorted labels) -> value."""
    found: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        found[family.name] = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for sample in family.samples
        }
    assert types == {
        "devs_tasks": "gauge",
        "devs_loop_rate": "gauge",
        "devs_failures_before_first_human": "summary",
        "devs_time_to_human_seconds": "summary",
        "devs_human_waits_open": "gauge",
        "devs_handoffs": "gauge",
        "devs_blocked_attempts": "gauge",
        "devs_failed_strategy_repeats": "gauge",
        "devs_stuck_tasks": "gauge",
        "devs_stuck_score": "summary",
        "devs_stuck_signals": "gauge",
        "devs_spend_usd": "counter",
        "devs_tokens": "counter",
    }
    return found


def summary_of(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str
) -> dict[str, float]:
    return {
        "p50": samples[(name, (("quantile", "0.5"),))],
        "p90": samples[(name, (("quantile", "0.9"),))],
        "count": samples[(f"{name}_count", ())],
        "sum": samples[(f"{name}_sum", ())],
    }


def test_prometheus_text_carries_every_figure(
    http: TestClient, service: RecoveryService
) -> None:
    history(service)
    answer = http.get("/metrics")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    found = families(answer.text)
    figures = service.metrics()
    assert found["devs_tasks"] == {
        ("devs_tasks", (("state", state),)): float(count)
        for state, count in figures.tasks_by_state.items()
    }
    assert found["devs_tasks"][("devs_tasks", (("state", "GATE_FAILED"),))] == 1
    assert found["devs_loop_rate"] == {("devs_loop_rate", ()): pytest.approx(2 / 3)}
    before = summary_of(
        found["devs_failures_before_first_human"], "devs_failures_before_first_human"
    )
    assert before == {"p50": 0.0, "p90": 3.0, "count": 2.0, "sum": 3.0}
    waited = summary_of(
        found["devs_time_to_human_seconds"], "devs_time_to_human_seconds"
    )
    assert figures.time_to_human.p50 is not None
    assert waited == {
        "p50": pytest.approx(figures.time_to_human.p50),
        "p90": pytest.approx(figures.time_to_human.p50),  # one answered wait
        "count": 1.0,
        "sum": pytest.approx(figures.time_to_human.total),
    }
    assert found["devs_human_waits_open"] == {("devs_human_waits_open", ()): 1.0}
    assert found["devs_handoffs"] == {
        ("devs_handoffs", (("resolution", end),)): 0.0
        for end in ("return", "complete", "skip", "open")
    }
    assert found["devs_blocked_attempts"] == {("devs_blocked_attempts", ()): 0.0}
    cut = LONG[:99] + "…"
    assert found["devs_failed_strategy_repeats"] == {
        ("devs_failed_strategy_repeats", (("strategy", cut),)): 3.0,
        ("devs_failed_strategy_repeats", (("strategy", "regex"),)): 1.0,
    }
    # Task a failed three times alike (1.0), task b once (0.0).
    assert found["devs_stuck_tasks"] == {("devs_stuck_tasks", ()): 1.0}
    stuck = summary_of(found["devs_stuck_score"], "devs_stuck_score")
    assert stuck == {"p50": 0.0, "p90": 1.0, "count": 2.0, "sum": 1.0}
    assert found["devs_stuck_signals"] == {
        ("devs_stuck_signals", (("kind", "error_repeat"),)): 1.0,
        ("devs_stuck_signals", (("kind", "strategy_repeat"),)): 1.0,
    }
    [spent] = figures.spend
    assert found["devs_spend_usd"] == {
        (
            "devs_spend_usd_total",
            (("agent", "codex"), ("model", "gpt-5")),
        ): pytest.approx(spent.spent_usd)
    }
    assert spent.spent_usd > 0
    labels = (("agent", "codex"), ("model", "gpt-5"))
    assert found["devs_tokens"] == {
        ("devs_tokens_total", (*labels, ("type", kind))): count
        for kind, count in (
            ("input", 1_000.0),
            ("output", 10.0),
            ("cache_read", 5.0),
            ("cache_creation", 0.0),
        )
    }


def test_prometheus_filters_and_an_empty_summary(
    http: TestClient, service: RecoveryService
) -> None:
    since = history(service)
    ran = families(http.get("/metrics", params={"run_id": "r"}).text)
    assert ran["devs_tasks"][("devs_tasks", (("state", "PAUSED"),))] == 0
    assert sum(ran["devs_tasks"].values()) == 2
    later = families(http.get("/metrics", params={"since": since.isoformat()}).text)
    assert sum(later["devs_tasks"].values()) == 1
    waited = summary_of(
        later["devs_time_to_human_seconds"], "devs_time_to_human_seconds"
    )
    assert math.isnan(waited["p50"])
    assert math.isnan(waited["p90"])
    assert (waited["count"], waited["sum"]) == (0.0, 0.0)
    assert later["devs_failed_strategy_repeats"] == {}


def error(answer: Any, status: int, kind: str, field: str | None) -> str:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert (body["error"], body["field"]) == (kind, field)
    detail: str = body["detail"]
    return detail


@pytest.mark.parametrize("path", ["/metrics", "/metrics/json"])
def test_bad_filters_are_refused(
    http: TestClient, service: RecoveryService, path: str
) -> None:
    service.start_task("t")
    assert "since must name its timezone" in error(
        http.get(path, params={"since": "2024-05-01T09:30:00"}),
        422,
        "invalid_input",
        "since",
    )
    assert "since must be an ISO 8601 time" in error(
        http.get(path, params={"since": "last week"}), 422, "invalid_input", "since"
    )
    assert "unknown run 'nope'" in error(
        http.get(path, params={"run_id": "nope"}), 404, "not_found", None
    )
    error(http.get(path, params={"run_id": " r"}), 422, "invalid_input", "run_id")
    unauthorized = http.get(path, headers={"Authorization": "Bearer wrong"})
    assert unauthorized.status_code == 401
    late = error(
        http.get(path, params={"after": 10**6}), 409, "position_not_recorded", "after"
    )
    assert late.startswith(f"position {10**6} has not been recorded")


def test_json_is_the_services_model(http: TestClient, service: RecoveryService) -> None:
    since = history(service)
    for params in ({}, {"run_id": "r"}, {"since": since.isoformat()}):
        answer = http.get("/metrics/json", params=params)
        assert answer.status_code == 200, answer.text
        expected = service.metrics(
            run_id=params.get("run_id"),
            since=since if "since" in params else None,
        )
        assert Metrics.model_validate_json(answer.content) == expected
    assert http.get("/metrics/json").json()["tasks_by_state"]["PAUSED"] == 1


def test_the_routes_are_in_the_openapi_document(http: TestClient) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    text = paths["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(text) == ["text/plain"]
    parameters = {p["name"] for p in paths["/metrics"]["get"]["parameters"]}
    assert {"run_id", "since", "after", "X-Devs-After"} <= parameters
    assert "Metrics" in str(paths["/metrics/json"]["get"]["responses"]["200"])


def test_the_client_answers_as_the_service(service: RecoveryService) -> None:
    with TestClient(create_app(service, token=TOKEN)) as http:
        client = HttpRecoveryClient(http, token=TOKEN)
        client.start_run("r", {"a": [], "b": []})
        client.start_task("a", run_id="r")
        for _ in range(3):
            client.record_gate("a", 1, strategy="regex")
        client.start_task("z")
        since = client.history("z", limit=1)[0].timestamp
        assert client.metrics() == service.metrics()  # reads its own writes
        assert client.metrics().failures_before_first_human.count == 1
        assert client.metrics(run_id="r").tasks == 1
        assert client.metrics(since=since) == service.metrics(since=since)
        assert client.metrics(since=since).tasks == 1
        assert client.metrics(since=since + timedelta(seconds=1)).tasks == 0
        with pytest.raises(InvalidInput, match="since must be") as naive:
            client.metrics(since=datetime(2024, 5, 1))
        assert naive.value.field == "since"
        with pytest.raises(NotFound, match="unknown run 'nope'"):
            client.metrics(run_id="nope")


def test_the_schema_names_every_way_a_hand_off_ends(http: TestClient) -> None:
    schema = http.get("/openapi.json").json()["components"]["schemas"]["Metrics"]
    ends = schema["properties"]["handoffs_by_resolution"]["propertyNames"]["enum"]
    assert ends == [*(str(resolution) for resolution in Resolution), "open"]
