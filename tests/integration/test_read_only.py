"""A database that cannot be written (file, directory or mount) can be queried."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devs.adapters.config import Settings, open_service
from devs.adapters.store import persistence
from devs.domain import RecoveryService, StoreError
from devs.projections.sqlite import SQLiteReadModels
from tests.helpers import event_count, table_rows
from tests.integration.test_projections import drive

DEVS = str(Path(sys.executable).with_name("devs"))


@pytest.fixture
def written(db_path: Path) -> Path:
    """A file with some history whose read models have not all caught up."""
    with open_service(Settings(db=str(db_path))) as app:
        drive(app)
        app.catch_up()
        app.start_task("late")  # recorded after the last catch-up
    return db_path


@pytest.fixture
def unwritable(
    written: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RecoveryService]:
    """The file as the process sees it when it may not write it."""
    real_access = os.access

    def access(path: object, mode: int) -> bool:
        if mode == os.W_OK and Path(str(path)) == written:
            return False
        return real_access(path, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "access", access)
    app = open_service(Settings(db=str(written)))
    yield app
    app.close()


def test_it_is_opened_read_only(unwritable: RecoveryService, written: Path) -> None:
    factory = unwritable.factory
    assert isinstance(factory, persistence.SQLiteFactory)
    assert factory.read_only
    assert "mode=ro" in factory.datastore.pool.db_name


def test_queries_answer_from_views_of_its_own(
    unwritable: RecoveryService, written: Path
) -> None:
    events, rows = event_count(written), table_rows(written)
    assert unwritable.task("late").state == "RUNNING"
    assert {entry.task_id for entry in unwritable.tasks()} == {"t1", "t3", "late"}
    assert [lesson.failed_strategy for lesson in unwritable.lessons("t1")] == ["regex"]
    assert [entry.payload.task_id for entry in unwritable.handoff_queue()] == ["t1"]
    assert unwritable.history("t1")[-1].state == "HAND_OFF"
    assert unwritable.verify().ok
    models = unwritable.read_models
    assert isinstance(models, SQLiteReadModels)
    assert models.datastore is not unwritable.factory.datastore
    assert event_count(written) == events
    assert table_rows(written) == rows


def test_commands_say_it_cannot_be_written(
    unwritable: RecoveryService, written: Path
) -> None:
    events = event_count(written)
    with pytest.raises(StoreError, match="cannot be written here"):
        unwritable.start_task("new")
    with pytest.raises(StoreError, match="cannot be written here"):
        unwritable.record_gate("late", 1)
    assert event_count(written) == events


def read_only_directory_command(directory: Path) -> list[str] | None:
    """A prefix that runs a command seeing ``directory`` read-only, or None.

    As a normal user, taking write permission away is enough; root ignores
    permissions, so it needs a read-only bind mount (bubblewrap).
    """
    if os.geteuid() != 0:
        directory.chmod(0o555)
        return []
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    prefix = [
        bwrap,
        "--dev-bind",
        "/",
        "/",
        "--ro-bind",
        str(directory),
        str(directory),
    ]
    probe = subprocess.run(
        [*prefix, "touch", str(directory / "probe")], capture_output=True, check=False
    )
    if probe.returncode == 0 or b"Read-only" not in probe.stderr:
        return None  # bubblewrap cannot make mounts here
    return prefix


def test_the_cli_reads_a_database_in_a_read_only_directory(written: Path) -> None:
    directory = written.parent
    for suffix in ("-wal", "-shm"):  # closed cleanly: SQLite removed them
        assert not Path(f"{written}{suffix}").exists()
    prefix = read_only_directory_command(directory)
    if prefix is None:
        pytest.skip("needs a non-root user or a working bubblewrap")
    try:

        def devs(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*prefix, DEVS, "--db", str(written), *args],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )

        shown = devs("task", "show", "late")
        assert shown.returncode == 0, shown.stderr
        assert "task late: RUNNING" in shown.stdout
        listed = devs("status")
        assert listed.returncode == 0, listed.stderr
        assert "late" in listed.stdout
        refused = devs("task", "start", "new")
        assert refused.returncode == 9
        assert "cannot be written here" in refused.stderr
        assert refused.stderr.count("\n") == 1
    finally:
        directory.chmod(0o755)
    assert sorted(p.name for p in directory.iterdir()) == [written.name]
