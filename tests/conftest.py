"""Shared fixtures: a service on a fresh SQLite file per test."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from devs.domain import RecoveryService


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "devs_state.sqlite"


@pytest.fixture
def service(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RecoveryService]:
    for name in (
        "DEVS_ESCALATION_THRESHOLD",
        "DEVS_HANDOFF_THRESHOLD",
        "DEVS_HITL_ENTROPY_THRESHOLD",
        "DEVS_FAILURE_HISTORY_CAP",
        "DEVS_DB",
    ):
        monkeypatch.delenv(name, raising=False)
    app = RecoveryService(env={"SQLITE_DBNAME": str(db_path)})
    yield app
    app.close()


@pytest.fixture
def decisions(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="devs.decisions")
    return caplog
