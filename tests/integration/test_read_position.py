"""Read-your-writes means the position asked for, on every backend: a query
given a log position (``reading_after``, HTTP's ``?after=`` and
``X-Devs-After``) waits until the read models folded that position, never
for the end of a log that others keep writing; a wait that runs out is
``NotCaughtUp`` (HTTP 504 ``not_caught_up``) on SQLite and PostgreSQL alike.
A position past the end of the log itself is ``PositionNotRecorded`` (HTTP
409 ``position_not_recorded``) at once, never after the whole wait."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from devs.adapters.client import HttpRecoveryClient
from devs.adapters.http import create_app
from devs.domain import (
    InvalidInput,
    NotCaughtUp,
    PositionNotRecorded,
    RecoveryService,
)
from tests.conftest import MakeService

LONG_WAIT = "30"
"""A read wait no test here waits out: an answer that comes at once is well
within ``AT_ONCE``."""
AT_ONCE = 3.0


@contextmanager
def at_once() -> Iterator[None]:
    """The block ends well before the read wait (``LONG_WAIT``) would."""
    began = time.monotonic()
    yield
    took = time.monotonic() - began
    assert took < AT_ONCE, f"took {took:.1f} s: the read wait was waited out"


def on_postgres(service: RecoveryService) -> bool:
    return type(service.read_models).__module__.endswith(".postgres")


def seen(reader: RecoveryService) -> list[str]:
    """The tasks a query at ``folded`` of :func:`lagging` lists: on PostgreSQL
    only t1 (no runner folded more); on SQLite whoever wrote t2-t4 folded
    them too, so a query sees them at once."""
    return ["t1"] if on_postgres(reader) else ["t1", "t2", "t3", "t4"]


def lagging(
    make_service: MakeService, read_wait: str = "0.5"
) -> tuple[RecoveryService, int, int]:
    """A service whose read models folded position ``folded`` of a log that
    others wrote on to ``end``: on PostgreSQL no runner follows it
    (``external``); on SQLite the writer folded its own events, so nothing
    lags there (docs/read-models.md)."""
    first = make_service()
    with first.written() as written:
        first.start_task("t1")
    assert written.position is not None
    folded = first.wait_for(written.position)
    first.close()  # its runner (PostgreSQL) folds no more
    other = make_service(DEVS_PROJECTIONS="external")
    for task_id in ("t2", "t3", "t4"):
        other.start_task(task_id)
    end = other.recorder.max_notification_id() or 0
    assert end > folded
    reader = make_service(DEVS_PROJECTIONS="external", DEVS_READ_WAIT=read_wait)
    return reader, folded, end


def test_a_query_at_a_position_waits_for_it_not_for_the_end_of_the_log(
    make_service: MakeService,
) -> None:
    reader, folded, _ = lagging(make_service)
    with reader.reading_after(folded):
        assert [entry.task_id for entry in reader.tasks()] == seen(reader)
        assert reader.gate_status("t1").state == "RUNNING"
    assert reader.wait_for(folded, timeout=0.2) >= folded


def test_a_position_past_the_end_of_the_log_is_refused_at_once(
    make_service: MakeService,
) -> None:
    """Checked against the log itself, not the read models: a position
    another process wrote after this one's read models last looked is still
    waited for (folded on SQLite; on PostgreSQL with no runner, 504 after
    the wait), while one past the log's end is refused at once."""
    reader, _, end = lagging(make_service, read_wait=LONG_WAIT)
    with at_once(), pytest.raises(PositionNotRecorded) as raised:
        reader.wait_for(end + 100)
    assert str(raised.value) == (
        f"position {end + 100} has not been recorded: the log ends at position "
        f"{end} (a position a command answered is never past the end of its log)"
    )
    assert (raised.value.position, raised.value.last) == (end + 100, end)
    assert raised.value.field == "position"
    assert isinstance(raised.value, InvalidInput)
    with at_once(), pytest.raises(PositionNotRecorded), reader.reading_after(end + 1):
        reader.tasks()
    # Written by another process just now: in the log, so waited for.
    other = make_service(DEVS_PROJECTIONS="external")
    with other.written() as written:
        other.start_task("t5")
    assert written.position is not None
    assert written.position > end
    if on_postgres(reader):  # no runner folds it: the wait runs out
        with pytest.raises(NotCaughtUp, match=r"within 0\.2 s"):
            reader.wait_for(written.position, timeout=0.2)
    else:  # the reader folds it itself
        assert reader.wait_for(written.position, timeout=5) == written.position


def test_bad_positions_and_waits_are_refused(make_service: MakeService) -> None:
    service = make_service()
    for position in (-1, 1.5, "3", None):
        with pytest.raises(InvalidInput) as raised:
            service.wait_for(position)  # type: ignore[arg-type]
        assert raised.value.field == "position"
    for timeout in (0, -1, float("nan"), 301, "soon"):
        with pytest.raises(InvalidInput) as raised:
            service.wait_for(0, timeout=timeout)  # type: ignore[arg-type]
        assert raised.value.field == "timeout"
    with pytest.raises(InvalidInput):
        service.reading_after(-5)


def test_over_http_after_n_answers_at_n_while_others_write_on(
    make_service: MakeService,
) -> None:
    reader, folded, end = lagging(make_service, read_wait=LONG_WAIT)
    app = create_app(reader, read_wait=float(LONG_WAIT))
    with TestClient(app) as client:
        listed = client.get(f"/tasks?after={folded}")
        assert listed.status_code == 200, listed.text
        assert [entry["task_id"] for entry in listed.json()] == seen(reader)
        header = client.get("/sessions", headers={"X-Devs-After": str(folded)})
        assert header.status_code == 200, header.text
        for path, headers, field in (
            (f"/tasks?after={end + 100}", {}, "after"),
            ("/sessions", {"X-Devs-After": str(end + 1)}, "X-Devs-After"),
            (f"/position?after={end + 1}", {}, "after"),
        ):
            with at_once():
                late = client.get(path, headers=headers)
            assert late.status_code == 409, late.text
            assert late.json()["error"] == "position_not_recorded"
            assert late.json()["field"] == field
            asked = path.rsplit("=", 1)[-1] if "=" in path else headers[field]
            assert late.json()["detail"].startswith(
                f"position {asked} has not been recorded: the log ends at "
                f"position {end} "
            )


def test_the_http_client_waits_for_a_position_and_reads_at_it(
    make_service: MakeService,
) -> None:
    reader, folded, end = lagging(make_service, read_wait=LONG_WAIT)
    with TestClient(create_app(reader, read_wait=0.5)) as http:
        client = HttpRecoveryClient(http)
        assert client.wait_for(folded) >= folded
        with client.reading_after(folded):
            assert [entry.task_id for entry in client.tasks()] == seen(reader)
        with at_once(), pytest.raises(PositionNotRecorded) as raised:
            client.wait_for(end + 100, timeout=300)
        assert str(raised.value).startswith(
            f"position {end + 100} has not been recorded: the log ends at "
            f"position {end} "
        )
        with (
            at_once(),
            pytest.raises(PositionNotRecorded),
            client.reading_after(end + 100),
        ):
            client.tasks()
        if on_postgres(reader):
            # In the log but not folded (no runner): waited for, and a
            # client's timeout never outlasts the server's read wait (0.5 s).
            with pytest.raises(NotCaughtUp, match=r"within 0\.5 s"):
                client.wait_for(end, timeout=300)
        else:
            assert client.wait_for(end, timeout=300) == end
        for position in (-1, 1.5, True):
            with (
                pytest.raises(InvalidInput) as refused,
                client.reading_after(position),  # type: ignore[arg-type]
            ):
                pass
            assert refused.value.field == "position"
        for query in ("after=-1", "after=x", "timeout=0", "timeout=nan", "timeout=301"):
            answer = http.get(f"/position?{query}")
            assert answer.status_code == 422, answer.text
            assert answer.json()["field"] == query.split("=")[0]
