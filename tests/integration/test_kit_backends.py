"""devs.testing runs in memory by default; a file (or PostgreSQL) is one
argument away."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from devs.adapters.config import sqlite_path
from devs.domain import Policy, RecoveryService
from devs.testing import RecoveryMachine, memory_service, sqlite_service


def test_the_machine_s_default_service_is_in_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DEVS_DATABASE_URL", "postgresql://nobody@nowhere/none")
    assert RecoveryMachine.make_service is memory_service
    service = memory_service(Policy(escalation_threshold=2))
    service.start_task("t")
    assert "mode=memory" in service.env["SQLITE_DBNAME"]
    assert service.record_gate("t", 1).outcome == "stay"
    assert service.record_gate("t", 1).outcome == "escalate"
    assert [entry.task_id for entry in service.tasks()] == ["t"]
    assert service.verify().ok
    other = memory_service(Policy())
    assert other.tasks() == []  # each service has a store of its own
    # Every connection of the pool sees the one store, from any thread.
    with ThreadPoolExecutor(4) as pool:
        listed = list(pool.map(lambda _: len(service.tasks()), range(200)))
    assert listed == [1] * 200
    assert service.task("t").state == "ESCALATION"
    service.close()
    other.close()


def test_sqlite_service_keeps_a_file() -> None:
    service = sqlite_service(Policy())
    service.start_task("t")
    assert Path(sqlite_path(service)).is_file()
    service.close()


def test_the_plugin_s_service_is_in_memory(
    devs_service: RecoveryService, tmp_path: Path
) -> None:
    devs_service.start_task("t")
    assert "mode=memory" in devs_service.env["SQLITE_DBNAME"]
    assert list(tmp_path.iterdir()) == []


class TestOnAFile:
    @pytest.fixture
    def devs_env(self, tmp_path: Path) -> dict[str, str]:
        return {"SQLITE_DBNAME": str(tmp_path / "kept.sqlite")}

    def test_overriding_devs_env_puts_the_store_in_a_file(
        self, devs_service: RecoveryService, tmp_path: Path
    ) -> None:
        devs_service.start_task("t")
        assert (tmp_path / "kept.sqlite").is_file()
