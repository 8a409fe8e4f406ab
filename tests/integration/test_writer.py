"""The HTTP worker's writer: commands handed over run on its threads, one
wake-up of the loop each; on PostgreSQL several threads take them."""

from __future__ import annotations

import asyncio
import threading

import pytest
from fastapi.testclient import TestClient

from devs.adapters.config import Settings, open_service
from devs.adapters.http import create_app
from devs.adapters.http.dispatch import POSTGRES_WRITERS, Writer


def test_several_threads_take_commands_at_once() -> None:
    """Three commands that each wait for the other two finish only if three
    threads run them together."""
    barrier = threading.Barrier(3, timeout=10)

    async def main() -> list[str]:
        writer = Writer(threads=3)
        try:
            names = await asyncio.gather(
                *(writer.run(lambda: _meet(barrier)) for _ in range(3))
            )
            assert writer.busy == 0
            return list(names)
        finally:
            writer.close()

    names = asyncio.run(main())
    assert len(set(names)) == 3


def _meet(barrier: threading.Barrier) -> str:
    barrier.wait()
    return threading.current_thread().name


def test_an_error_reaches_the_request_and_a_cancelled_one_is_counted_out() -> None:
    release = threading.Event()

    async def main() -> None:
        writer = Writer()
        try:
            with pytest.raises(ZeroDivisionError):
                await writer.run(lambda: 1 // 0)
            assert writer.busy == 0
            slow = asyncio.ensure_future(writer.run(release.wait))
            await asyncio.sleep(0.05)
            slow.cancel()
            assert writer.busy == 1  # its command still runs
            release.set()
            for _ in range(200):
                if writer.busy == 0:
                    break
                await asyncio.sleep(0.01)
            assert writer.busy == 0
        finally:
            release.set()
            writer.close()

    asyncio.run(main())


def test_a_worker_on_postgresql_has_several_writers(pg_url: str) -> None:
    before = set(threading.enumerate())
    service = open_service(Settings(database_url=pg_url))
    app = create_app(service)
    try:
        with TestClient(app) as client:
            assert client.post("/tasks", json={"task_id": "t"}).status_code == 201
            assert app.state.devs.writer.size == POSTGRES_WRITERS
            writers = [
                thread
                for thread in set(threading.enumerate()) - before
                if thread.name.startswith("devs-writer-")
            ]
            assert len(writers) == POSTGRES_WRITERS
    finally:
        service.close()
    assert not [thread for thread in writers if thread.is_alive()]  # all ended
