"""The metrics (``RecoveryService.metrics``) in Prometheus' text format.

``GET /metrics`` of ``devs serve`` answers :func:`exposition`: a fresh
``CollectorRegistry`` per request holding one collector over the figures just
read, so nothing is kept between scrapes and every worker answers alike. The
names, all ``devs_``, are listed in docs/audit.md#metrics.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from devs.domain import Metrics
from devs.domain.ports import Distribution, ModelSpend

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The classic text format, which ``generate_latest`` writes."""
LABEL_MAX = 100
"""The longest ``strategy`` label, in characters."""
QUANTILES = (("0.5", "p50"), ("0.9", "p90"))
SPEND_SERIES = 500
"""The agent-and-model pairs with a series of their own, the first by name
(a pair keeps its series as the others spend); the rest add up under
``model="other"`` (a model's name is the caller's: its series are
bounded)."""
TOKEN_TYPES = ("input", "output", "cache_read", "cache_creation")


def exposition(figures: Metrics) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MetricsCollector(figures))
    return generate_latest(registry)


class MetricsCollector:
    """A ``prometheus_client`` collector of one :class:`Metrics`."""

    def __init__(self, figures: Metrics) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        figures = self.figures
        tasks = GaugeMetricFamily(
            "devs_tasks", "Tasks by their state now.", labels=["state"]
        )
        for state, count in figures.tasks_by_state.items():
            tasks.add_metric([str(state)], count)
        yield tasks
        yield GaugeMetricFamily(
            "devs_loop_rate",
            "Share of tasks that ever escalated or paused (0 without tasks).",
            value=figures.loop_rate,
        )
        yield summary(
            "devs_failures_before_first_human",
            "Failed gates and blocked attempts of a task before its first "
            "escalation, pause or hand-off (nearest-rank quantiles).",
            figures.failures_before_first_human,
        )
        yield summary(
            "devs_time_to_human_seconds",
            "Seconds from a stop for a human to the human's first answer "
            "(nearest-rank quantiles; count: the answered stops).",
            figures.time_to_human,
        )
        yield GaugeMetricFamily(
            "devs_human_waits_open",
            "Stops for a human that no human has answered yet.",
            value=figures.time_to_human.open,
        )
        handoffs = GaugeMetricFamily(
            "devs_handoffs",
            "Hand-offs by how they ended (return, complete, skip) or open.",
            labels=["resolution"],
        )
        for end, count in figures.handoffs_by_resolution.items():
            handoffs.add_metric([end], count)
        yield handoffs
        yield GaugeMetricFamily(
            "devs_blocked_attempts",
            "Attempts refused because they repeated a failed strategy.",
            value=figures.blocked_attempts,
        )
        repeats = GaugeMetricFamily(
            "devs_failed_strategy_repeats",
            "Failures naming a strategy, for the (at most 10) strategies that "
            "failed most (the label cut to 100 characters).",
            labels=["strategy"],
        )
        for label, count in strategy_labels(figures).items():
            repeats.add_metric([label], count)
        yield repeats
        yield GaugeMetricFamily(
            "devs_stuck_tasks",
            "Tasks whose stuck score ever reached 0.75.",
            value=figures.stuck_tasks,
        )
        yield summary(
            "devs_stuck_score",
            "Per task with a stuck score: the highest it reached.",
            figures.stuck_score,
        )
        signals = GaugeMetricFamily(
            "devs_stuck_signals",
            "Tasks whose highest stuck score each kind of signal drove.",
            labels=["kind"],
        )
        for kind, count in figures.stuck_signals.items():
            signals.add_metric([kind], count)
        yield signals
        money = CounterMetricFamily(
            "devs_spend_usd",
            "Money the tasks' model calls cost, by agent and model (usages "
            "whose model had no price count nothing here).",
            labels=["agent", "model"],
        )
        tokens = CounterMetricFamily(
            "devs_tokens",
            "Tokens the tasks' model calls used, by agent, model and type "
            "(input, output, cache_read, cache_creation).",
            labels=["agent", "model", "type"],
        )
        for (agent, model), spent in spend_series(figures.spend).items():
            money.add_metric([agent, model], spent.spent_usd)
            for kind in TOKEN_TYPES:
                counted = getattr(spent, f"{kind}_tokens")
                tokens.add_metric([agent, model, kind], counted)
        yield money
        yield tokens


def summary(name: str, documentation: str, values: Distribution) -> Metric:
    """A summary: the p50 and p90 (NaN without values), ``_count`` and ``_sum``."""
    metric = Metric(name, documentation, "summary")
    for quantile, field in QUANTILES:
        value = getattr(values, field)
        metric.add_sample(
            name, {"quantile": quantile}, math.nan if value is None else value
        )
    metric.add_sample(f"{name}_count", {}, values.count)
    metric.add_sample(f"{name}_sum", {}, values.total)
    return metric


def strategy_labels(figures: Metrics) -> dict[str, int]:
    """Each top strategy's label (its first 100 characters, the last an
    ellipsis when cut) and failures; strategies whose labels are the same add
    up, so no series appears twice."""
    labels: dict[str, int] = {}
    for item in figures.top_failed_strategies:
        text = item.strategy
        label = text if len(text) <= LABEL_MAX else text[: LABEL_MAX - 1] + "…"
        labels[label] = labels.get(label, 0) + item.failures
    return labels


def _label(text: str) -> str:
    return text if len(text) <= LABEL_MAX else text[: LABEL_MAX - 1] + "…"


def spend_series(spend: tuple[ModelSpend, ...]) -> dict[tuple[str, str], ModelSpend]:
    """Each agent and model's spend by its labels (``agent`` empty for a task
    started without one, both cut to 100 characters), the first
    :data:`SPEND_SERIES` pairs by name and then ``(agent, "other")``
    holding the rest; pairs whose labels are the same add up."""
    series: dict[tuple[str, str], ModelSpend] = {}
    named = sorted(spend, key=lambda item: (item.agent or "", item.model))
    for index, item in enumerate(named):
        agent = _label(item.agent or "")
        key = (agent, _label(item.model) if index < SPEND_SERIES else "other")
        known = series.get(key)
        series[key] = item if known is None else _added(known, item)
    return series


def _added(one: ModelSpend, other: ModelSpend) -> ModelSpend:
    return one.model_copy(
        update={
            "usages": one.usages + other.usages,
            "spent_usd": round(one.spent_usd + other.spent_usd, 9),
            "tokens": one.tokens + other.tokens,
            "input_tokens": one.input_tokens + other.input_tokens,
            "output_tokens": one.output_tokens + other.output_tokens,
            "cache_read_tokens": one.cache_read_tokens + other.cache_read_tokens,
            "cache_creation_tokens": one.cache_creation_tokens
            + other.cache_creation_tokens,
            "unknown_cost_tokens": one.unknown_cost_tokens + other.unknown_cost_tokens,
        }
    )
