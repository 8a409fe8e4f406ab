"""The rules the metrics stand on: nearest-rank percentiles (and the SQL that
reads them), the stored time format, and the ``since`` argument."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devs.adapters.cli.metrics import count_text, duration
from devs.domain.errors import InvalidInput
from devs.domain.values import AwareTime, parse_time, validated
from devs.projections.metrics import MetricsTables, moment, nearest_rank


@pytest.mark.parametrize(
    ("percent", "count", "rank"),
    [
        (50, 1, 1),
        (50, 2, 1),
        (50, 3, 2),
        (50, 4, 2),
        (50, 5, 3),
        (90, 1, 1),
        (90, 9, 9),  # ceil(8.1)
        (90, 10, 9),  # exactly 9: no float error rounds it up to 10
        (90, 11, 10),  # ceil(9.9)
        (90, 20, 18),
        (100, 7, 7),
        (1, 100, 1),
        (1, 101, 2),
    ],
)
def test_nearest_rank_by_hand(percent: int, count: int, rank: int) -> None:
    assert nearest_rank(percent, count) == rank


@pytest.mark.parametrize(("percent", "count"), [(0, 5), (101, 5), (50, 0), (-1, 3)])
def test_nearest_rank_refuses_what_has_no_rank(percent: int, count: int) -> None:
    with pytest.raises(ValueError, match="nearest_rank needs"):
        nearest_rank(percent, count)


def reference(values: list[float], percent: int) -> float:
    """The textbook rule, in exact arithmetic: the value at rank
    ceil(P/100 * N) of the sorted values."""
    rank = math.ceil(Fraction(percent * len(values), 100))
    return sorted(values)[rank - 1]


@pytest.fixture(scope="module")
def table() -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(":memory:")
    connection.row_factory = sqlite3.Row
    connection.execute("CREATE TABLE vals (v REAL, other INTEGER)")
    yield connection
    connection.close()


def spread_of(connection: sqlite3.Connection, values: list[float]) -> Any:
    connection.execute("DELETE FROM vals")
    # NULLs and rows of another group must be left out
    connection.executemany(
        "INSERT INTO vals VALUES (?, ?)",
        [(v, 1) for v in values] + [(None, 1), (-1.0, 2)],
    )

    def select(statement: str, params: Any) -> list[Any]:
        return list(connection.execute(statement, params).fetchall())

    return MetricsTables._spread(select, "v", "FROM vals WHERE other = ?", [1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=50), max_size=40))
def test_sql_percentiles_are_the_nearest_rank_values(
    table: sqlite3.Connection, values: list[int]
) -> None:
    found = spread_of(table, [float(v) for v in values])
    assert found.count == len(values)
    if not values:
        assert (found.mean, found.p50, found.p90, found.total) == (None, None, None, 0)
        return
    assert found.total == sum(values)
    assert found.mean == pytest.approx(sum(values) / len(values))
    assert found.p50 == reference([float(v) for v in values], 50)
    assert found.p90 == reference([float(v) for v in values], 90)
    assert found.p50 in values
    assert found.p90 in values


def test_percentiles_of_a_small_set_by_hand(table: sqlite3.Connection) -> None:
    found = spread_of(table, [3.0, 0.0, 3.0, 2.0, 1.0, 3.0])
    # sorted 0 1 2 3 3 3: p50 is the 3rd (2, where interpolation says 2.5),
    # p90 the 6th (ceil(5.4))
    assert (found.count, found.total, found.mean) == (6, 12.0, 2.0)
    assert (found.p50, found.p90) == (2.0, 3.0)


OFFSETS = st.builds(
    timezone,
    st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23)),
)


@settings(max_examples=200, deadline=None)
@given(st.datetimes(timezones=OFFSETS), st.datetimes(timezones=OFFSETS))
def test_stored_times_sort_as_text_as_they_do_in_time(a: datetime, b: datetime) -> None:
    try:
        first, second = moment(a), moment(b)
    except OverflowError:  # a time outside years 1-9999 in UTC
        return
    assert len(first) == len(second) == len("2024-05-01T09:30:00.000000+00:00")
    assert (first < second) == (a < b)
    assert (first == second) == (a == b)
    assert datetime.fromisoformat(first) == a


@validated
def takes(*, since: AwareTime | None = None) -> datetime | None:
    return since


def test_since_must_be_a_datetime_with_a_timezone() -> None:
    two = timezone(timedelta(hours=2))
    found = takes(since=datetime(2024, 5, 1, 11, 30, tzinfo=two))
    assert found == datetime(2024, 5, 1, 9, 30, tzinfo=UTC)
    assert getattr(found, "tzinfo", None) is UTC  # the body gets it in UTC
    assert takes() is None
    refusals: list[tuple[Any, str]] = [
        (datetime(2024, 5, 1), "since must be timezone-aware"),
        ("2024-05-01T00:00:00Z", "since must be a datetime with a timezone, got str"),
        (1714550400, "since must be a datetime with a timezone, got int"),
        (datetime.min.replace(tzinfo=two), "is out of range in UTC"),
    ]
    for value, message in refusals:
        with pytest.raises(InvalidInput, match=message) as refused:
            takes(since=value)
        assert refused.value.field == "since"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T09:30:00Z", datetime(2024, 5, 1, 9, 30, tzinfo=UTC)),
        ("2024-05-01T11:30:00+02:00", datetime(2024, 5, 1, 9, 30, tzinfo=UTC)),
        ("2024-05-01 09:30:00.5+00:00", datetime(2024, 5, 1, 9, 30, 0, 500000, UTC)),
    ],
)
def test_parse_time_reads_iso_8601_with_a_timezone(
    text: str, expected: datetime
) -> None:
    found = parse_time(text, "--since", field="since")
    assert found == expected
    assert found.tzinfo is UTC


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("yesterday", "--since must be an ISO 8601 time"),
        ("", "--since must be an ISO 8601 time"),
        ("2024-05-01", "--since must name its timezone"),
        ("2024-05-01T09:30:00", "--since must name its timezone"),
        ("0001-01-01T00:00:00+05:00", "out of range in UTC"),
    ],
)
def test_parse_time_refuses_what_names_no_moment(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as refused:
        parse_time(text, "--since", field="since")
    assert refused.value.field == "since"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0.000 s"),
        (0.0042, "0.004 s"),
        (4.25, "4.2 s"),
        (42.4, "42 s"),
        (59.6, "1 min 00 s"),
        (185, "3 min 05 s"),
        (2 * 3600 + 7 * 60 + 10, "2 h 07 min"),
        (3 * 86400 + 4 * 3600, "3 d 04 h"),
    ],
)
def test_the_cli_shows_waits_readably(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_the_cli_shows_counts_and_their_means() -> None:
    assert [count_text(v) for v in (3.0, 2.5, 7 / 3, 0.0)] == ["3", "2.5", "2.3", "0"]
