"""``devs serve`` on a SQLite file it cannot write: ``/readyz`` says so.

The service opens such a file read-only (docs/security.md, "Read-only
databases"): queries answer, every command is a 503. Before, ``/readyz``
answered 200 there, and a load balancer sent it every command. The tests run
a real ``devs serve`` on a file that cannot be written for real: as root,
whom file modes do not stop, the file is made immutable (``chattr +i``) or
its folder is a read-only bind mount in a mount namespace of the server's
own; as another user, the file's mode is enough.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from devs.adapters.config import Settings, open_service
from tests.e2e.test_serve import DEVS, TOKEN, Server


class Wrapped(Server):
    """``devs serve`` run through ``prefix`` (which execs it, so signals
    reach the server itself)."""

    def __init__(self, prefix: list[str], db: Path) -> None:
        self.cwd = None
        self.environ = {**os.environ, "DEVS_API_TOKEN": TOKEN}
        self.headers = {"Authorization": f"Bearer {TOKEN}"}
        self.arguments = [*prefix, DEVS, "--db", str(db), "serve"]
        errors = self.start()
        assert errors is None, errors


@pytest.fixture
def written(tmp_path: Path) -> Path:
    db = tmp_path / "store" / "devs.sqlite"
    db.parent.mkdir()
    with open_service(Settings(db=str(db))) as service:
        service.start_task("before")
        service.tasks()
    return db


def immutable(db: Path) -> Iterator[list[str]]:
    if os.geteuid() != 0:
        db.chmod(0o444)
        yield []
        return
    made = subprocess.run(["chattr", "+i", str(db)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"chattr +i does not work here: {made.stderr!r}")
    try:
        yield []
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)


def read_only_mount(db: Path) -> Iterator[list[str]]:
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("a read-only bind mount needs root and unshare")
    folder = str(db.parent)
    script = (
        'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    )
    prefix = [unshare, "--mount", "--propagation", "private", "sh", "-c"]
    probe = subprocess.run(
        [*prefix, script, "sh", folder, "touch", f"{folder}/probe"],
        capture_output=True,
        text=True,
        check=False,
    )
    if "Read-only file system" not in probe.stderr:
        pytest.skip(f"no read-only bind mount here: {probe.stderr!r}")
    yield [*prefix, script, "sh", folder]


@pytest.fixture(params=["immutable-file", "read-only-mount"])
def unwritable(request: pytest.FixtureRequest, written: Path) -> Iterator[list[str]]:
    """A prefix that runs ``devs serve`` where ``written`` cannot be written."""
    make = immutable if request.param == "immutable-file" else read_only_mount
    yield from make(written)


def test_readyz_says_a_read_only_store_is_not_ready(
    written: Path, unwritable: list[str]
) -> None:
    before = written.read_bytes()
    server = Wrapped(unwritable, written)
    try:
        assert server.client.get("/healthz").status_code == 200
        ready = server.client.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert ready.json()["ready"] is False
        assert "cannot be written" in ready.json()["reason"]
        assert "read-only" in ready.json()["reason"]
        # Queries keep working; commands are refused, as /readyz said.
        shown = server.client.get("/tasks/before")
        assert shown.status_code == 200, shown.text
        assert shown.json()["state"] == "RUNNING"
        refused = server.client.post("/tasks", json={"task_id": "new"})
        assert refused.status_code == 503, refused.text
        assert "cannot be written here" in refused.json()["detail"]
    finally:
        server.stop()
    assert written.read_bytes() == before


def test_readyz_stays_ready_on_a_store_that_can_be_written(written: Path) -> None:
    server = Wrapped([], written)
    try:
        ready = server.client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["ready"] is True
    finally:
        server.stop()
