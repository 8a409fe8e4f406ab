"""Read-your-writes means the position asked for, on every backend: a query
given a log position (``reading_after``, HTTP's ``?after=`` and
``X-Devs-After``) waits until the read models folded that position, never
for the end of a log that others keep writing; a wait that runs out is
``NotCaughtUp`` (HTTP 504 ``not_caught_up``) on SQLite and PostgreSQL alike."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from devs.adapters.client import HttpRecoveryClient
from devs.adapters.http import create_app
from devs.domain import InvalidInput, NotCaughtUp, RecoveryService
from tests.conftest import MakeService


def lagging(make_service: MakeService) -> tuple[RecoveryService, int, int]:
    """A service whose read models folded position ``folded`` of a log that
    others wrote on to ``end``: on PostgreSQL no runner follows it
    (``external``), on SQLite nothing folds until a query does."""
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
    reader = make_service(DEVS_PROJECTIONS="external", DEVS_READ_WAIT="0.5")
    return reader, folded, end


def test_a_query_at_a_position_waits_for_it_not_for_the_end_of_the_log(
    make_service: MakeService,
) -> None:
    reader, folded, _ = lagging(make_service)
    with reader.reading_after(folded):
        assert [entry.task_id for entry in reader.tasks()] == ["t1"]
        assert reader.gate_status("t1").state == "RUNNING"
    assert reader.wait_for(folded, timeout=0.2) >= folded


def test_a_position_past_the_end_of_the_log_is_not_caught_up(
    make_service: MakeService,
) -> None:
    reader, _, end = lagging(make_service)
    with pytest.raises(NotCaughtUp) as raised:
        reader.wait_for(end + 100, timeout=0.2)
    assert f"did not reach position {end + 100} within 0.2 s" in str(raised.value)
    assert f"the log ends at {end}" in str(raised.value)
    assert raised.value.position == end + 100
    with pytest.raises(NotCaughtUp), reader.reading_after(end + 100):
        reader.tasks()


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
    reader, folded, end = lagging(make_service)
    app = create_app(reader, read_wait=0.5)
    with TestClient(app) as client:
        listed = client.get(f"/tasks?after={folded}")
        assert listed.status_code == 200, listed.text
        assert [entry["task_id"] for entry in listed.json()] == ["t1"]
        header = client.get("/sessions", headers={"X-Devs-After": str(folded)})
        assert header.status_code == 200, header.text
        late = client.get(f"/tasks?after={end + 100}")
        assert late.status_code == 504, late.text
        assert late.json()["error"] == "not_caught_up"
        assert f"did not reach position {end + 100}" in late.json()["detail"]


def test_the_http_client_waits_for_a_position_and_reads_at_it(
    make_service: MakeService,
) -> None:
    reader, folded, end = lagging(make_service)
    with TestClient(create_app(reader, read_wait=0.5)) as http:
        client = HttpRecoveryClient(http)
        assert client.wait_for(folded) >= folded
        with client.reading_after(folded):
            assert [entry.task_id for entry in client.tasks()] == ["t1"]
        with pytest.raises(NotCaughtUp) as raised:
            client.wait_for(end + 100, timeout=0.2)
        assert f"did not reach position {end + 100} within 0.2 s" in str(raised.value)
        with pytest.raises(NotCaughtUp), client.reading_after(end + 100):
            client.tasks()
        # A client's timeout never outlasts the server's read wait (0.5 s).
        with pytest.raises(NotCaughtUp, match=r"within 0\.5 s"):
            client.wait_for(end + 100, timeout=300)
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
