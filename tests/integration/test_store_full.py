"""A full disk is said as a full disk: ``StoreFull`` (HTTP 507), not a race.

Before, a query whose read models had to fold new events met SQLite's
"database or disk is full", took it for a lost race, tried twenty times and
said "too many concurrent updates"; a command said "the event store failed".
Now whoever records events folds them, so a query only reads and answers; a
fold of events another process left unfolded still says a full disk.
The disk here is really full: the database lives on a small tmpfs, filled by
another file until the filesystem says ENOSPC (root only: mounting needs it).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from devs.adapters.config import Settings, open_service
from devs.domain import RecoveryService, StoreError
from devs.domain.errors import StoreFull
from tests.e2e.test_serve import Server


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB filesystem of the test's own, unmounted afterwards."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {mounted.stderr!r}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def write_until_full(fd: int, size: int) -> None:
    while True:
        os.write(fd, b"\0" * size)


def fill(folder: Path) -> Path:
    """Fill ``folder``'s filesystem to the last byte; the file that does."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 4096, 1):
            with pytest.raises(OSError, match="No space left on device"):
                write_until_full(fd, size)
    finally:
        os.close(fd)
    return filler


def history(service: RecoveryService, db: Path) -> int:
    """Events the read models have folded, then some they have not (recorded
    by a process that folds nothing); the log position of the last."""
    service.start_task("folded")
    with open_service(Settings(db=str(db))) as unfolding:
        unfolding.read_models.close()  # records, folds no more
        with unfolding.written() as written:
            for n in range(5):
                unfolding.start_task(f"late-{n}")
    assert written.position is not None
    return written.position


def test_a_command_and_a_fold_on_a_full_disk_say_so(small_disk: Path) -> None:
    db = small_disk / "devs.sqlite"
    service = open_service(Settings(db=str(db)))
    try:
        last = history(service, db)
        filler = fill(small_disk)
        with pytest.raises(StoreFull, match="disk that holds the database is full"):
            service.start_task("new")
        # A query only reads: it answers from what is folded.
        assert [entry.task_id for entry in service.tasks()] == ["folded"]
        with pytest.raises(StoreFull, match="disk that holds the database is full"):
            service.wait_for(last, timeout=5)  # the late tasks must be folded
        with pytest.raises(StoreError) as again:
            service.wait_for(last, timeout=5)  # asked again: the same, never a race
        assert "concurrent" not in str(again.value)
        # Space freed: everything works again, nothing was lost.
        filler.unlink()
        service.start_task("new")  # its fold folds the late tasks too
        names = {entry.task_id for entry in service.tasks()}
        assert names == {"folded", "new"} | {f"late-{n}" for n in range(5)}
    finally:
        service.close()


def test_over_http_a_full_disk_is_a_507_that_names_it(small_disk: Path) -> None:
    db = small_disk / "devs.sqlite"
    with open_service(Settings(db=str(db))) as service:
        service.start_task("folded")
        service.tasks()
    server = Server(db)
    try:
        for n in range(5):
            created = server.client.post("/tasks", json={"task_id": f"late-{n}"})
            assert created.status_code == 201, created.text
        filler = fill(small_disk)
        refused = server.client.post("/tasks", json={"task_id": "new"})
        assert refused.status_code == 507, refused.text
        assert refused.json()["error"] == "store_full"
        assert "disk that holds the database is full" in refused.json()["detail"]
        assert int(refused.headers["Retry-After"]) >= 1
        listed = server.client.get("/tasks")  # a query only reads: it answers
        assert listed.status_code == 200, listed.text
        assert len(listed.json()) == 6
        assert server.client.get("/healthz").status_code == 200
        filler.unlink()
        assert server.client.post("/tasks", json={"task_id": "new"}).status_code == 201
        assert server.client.get("/tasks").status_code == 200
    finally:
        server.stop()
