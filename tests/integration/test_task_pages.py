"""The task list a page at a time (``tasks(after=, limit=)``), on every
backend (the ``backend`` fixture: a SQLite file, SQLite in memory,
PostgreSQL): ordered by task id in code point order, each page read by the
store (``LIMIT``), never by loading every task."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devs.domain import InvalidInput, RecoveryService
from devs.domain.values import LIMIT_MAX
from tests.conftest import MakeService

# Ids whose code point order differs from a locale's (case, accents,
# punctuation, digits, a character outside the BMP): the order must be the
# same on every backend.
IDS = (
    "b",
    "B",
    "a",
    "A",
    "_x",
    "a-b",
    "a b",
    "ab",
    "10",
    "9",
    "é",
    "e",
    "z",
    "Ж",
    "中",
    "😀",
    "~",
)


def started(service: RecoveryService, ids: tuple[str, ...] = IDS) -> None:
    for task_id in ids:
        service.start_task(task_id)


def paged(
    service: RecoveryService, limit: int, after: str | None = None, **only: Any
) -> list[list[str]]:
    """Every page of the list, from ``after`` on, ``limit`` at a time."""
    pages: list[list[str]] = []
    while True:
        page = [
            entry.task_id for entry in service.tasks(after=after, limit=limit, **only)
        ]
        assert len(page) <= limit
        if page:
            pages.append(page)
        if len(page) < limit:
            return pages
        after = page[-1]


def test_the_list_is_ordered_by_id_in_code_point_order(
    make_service: MakeService,
) -> None:
    service = make_service()
    started(service)
    assert [entry.task_id for entry in service.tasks()] == sorted(IDS)


@pytest.mark.parametrize("limit", [1, 2, 5, len(IDS) - 1, len(IDS), LIMIT_MAX])
def test_paging_yields_every_task_once_in_order(
    make_service: MakeService, limit: int
) -> None:
    service = make_service()
    started(service)
    pages = paged(service, limit)
    assert list(itertools.chain.from_iterable(pages)) == sorted(IDS)
    assert all(len(page) == limit for page in pages[:-1])


def test_a_page_starts_after_any_id_even_one_that_names_no_task(
    make_service: MakeService,
) -> None:
    service = make_service()
    started(service)
    for after in ("a", "aa", "Z", "zz", "\U0010ffff", "0"):
        found = [entry.task_id for entry in service.tasks(after=after)]
        assert found == [task_id for task_id in sorted(IDS) if task_id > after]
    assert service.tasks(after="\U0010ffff", limit=3) == []


def test_pages_of_one_state_and_one_run(make_service: MakeService) -> None:
    service = make_service()
    service.start_run("r", {"n3": [], "n1": [], "n2": [], "n4": []})
    for node in ("n3", "n1", "n2", "n4"):
        service.start_task(node, run_id="r")
    started(service, ("m", "o"))
    service.record_gate("n2", 1)
    service.record_gate("o", 1)
    in_run = paged(service, 3, run_id="r")
    assert in_run == [["n1", "n2", "n3"], ["n4"]]
    failed = paged(service, 1, state="GATE_FAILED")
    assert failed == [["n2"], ["o"]]
    assert paged(service, 2, run_id="r", state="RUNNING") == [["n1", "n3"], ["n4"]]
    assert paged(service, 2, after="n2", run_id="r") == [["n3", "n4"]]


def test_the_read_models_page_in_their_query(make_service: MakeService) -> None:
    """The port itself: ``task_entries(after=, limit=)`` on each backend."""
    service = make_service()
    started(service)
    service.catch_up()
    models = service.read_models
    page = models.task_entries(limit=4)
    assert [entry.task_id for entry in page] == sorted(IDS)[:4]
    following = models.task_entries(after=page[-1].task_id, limit=4)
    assert [entry.task_id for entry in following] == sorted(IDS)[4:8]
    assert models.task_entries(after=sorted(IDS)[-1]) == []


BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"limit": 0}, "limit", "limit must be an integer in [1, 10000], got 0"),
    ({"limit": -1}, "limit", "limit must be an integer in [1, 10000], got -1"),
    ({"limit": LIMIT_MAX + 1}, "limit", "limit must be an integer in [1, 10000]"),
    ({"limit": 2**70}, "limit", "limit must be an integer in [1, 10000]"),
    ({"limit": float("nan")}, "limit", "limit must be an integer in [1, 10000]"),
    ({"limit": 2.0}, "limit", "limit must be an integer in [1, 10000]"),
    ({"limit": True}, "limit", "limit must be an integer in [1, 10000]"),
    ({"limit": "5"}, "limit", "limit must be an integer in [1, 10000]"),
    ({"after": ""}, "after", "after must not be empty"),
    ({"after": "a\nb"}, "after", "after must not contain control characters"),
    ({"after": "a\x00"}, "after", "after must not contain control characters"),
    ({"after": "bad\ud800"}, "after", "after must be valid Unicode text"),
    ({"after": " a"}, "after", "after must not start or end with whitespace"),
    ({"after": "x" * 201}, "after", "after is 201 characters long"),
    ({"after": 5}, "after", "after must be a string, got int 5"),
]


@pytest.mark.parametrize(("given", "field", "message"), BAD)
def test_a_bad_page_is_refused_naming_the_argument(
    make_service: MakeService, given: dict[str, Any], field: str, message: str
) -> None:
    service = make_service()
    started(service, ("a", "b"))
    end = service.recorder.max_notification_id()
    with pytest.raises(InvalidInput) as refused:
        service.tasks(**given)
    assert refused.value.field == field
    assert message in str(refused.value)
    assert service.recorder.max_notification_id() == end  # nothing written


_ID_TEXT = st.text(
    alphabet=st.sampled_from(list("aAbBzZ09-_.~éßЖ中😀")), min_size=1, max_size=5
)


def test_any_limit_pages_through_every_task_exactly_once_in_order(
    make_service: MakeService,
) -> None:
    """Whatever the ids and the limit, the pages of one run (each example
    its own run, on one service) are every task of it after ``start``,
    each exactly once, in code point order, every page but the last full."""
    service = make_service()
    runs = itertools.count()

    @settings(max_examples=20, suppress_health_check=list(HealthCheck))
    @given(
        names=st.sets(_ID_TEXT, max_size=12),
        limit=st.integers(min_value=1, max_value=14),
        start=st.none() | _ID_TEXT,
    )
    def pages_hold(names: set[str], limit: int, start: str | None) -> None:
        run_id = f"run-{next(runs)}"
        ids = {f"{run_id}/{name}" for name in names}
        never_started = f"{run_id}:none"  # a run has a node at least
        service.start_run(run_id, {node: [] for node in (*ids, never_started)})
        for task_id in ids:
            service.start_task(task_id, run_id=run_id)
        after = None if start is None else f"{run_id}/{start}"
        pages = paged(service, limit, after, run_id=run_id)
        expected = sorted(t for t in ids if after is None or t > after)
        assert list(itertools.chain.from_iterable(pages)) == expected
        assert all(len(page) == limit for page in pages[:-1])

    pages_hold()
