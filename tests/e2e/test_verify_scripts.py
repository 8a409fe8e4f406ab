"""The seeds' verification scripts run as a user runs them, and can fail."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from devs.adapters.config import Settings, open_service

ROOT = Path(__file__).resolve().parents[2]


def run(
    *command: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_verify_handoff_passes_on_the_state_store(tmp_path: Path) -> None:
    db = tmp_path / "devs_state.sqlite"
    result = run(
        "bash",
        str(ROOT / "scripts" / "verify_handoff.sh"),
        env={"PYTHON": sys.executable, "DEVS_DB": str(db)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "status=hand_off_required" in result.stdout
    assert '"failure_count":5' in result.stdout
    assert "handoff_queue: failure_count=5, 5 failures in history" in result.stdout


def test_verify_handoff_fails_when_the_task_was_not_handed_off(tmp_path: Path) -> None:
    """A store where the task already exists and passed: the script must fail."""
    db = tmp_path / "devs_state.sqlite"
    with open_service(Settings(db=str(db))) as app:
        app.start_task("task-09-1-handoff")
    result = run(
        "bash",
        str(ROOT / "scripts" / "verify_handoff.sh"),
        env={"PYTHON": sys.executable, "DEVS_DB": str(db)},
    )
    assert result.returncode != 0
    assert "already started" in result.stderr


def test_verify_lessons_schema_passes_on_a_real_store(tmp_path: Path) -> None:
    db = tmp_path / "devs_state.sqlite"
    with open_service(Settings(db=str(db))) as app:
        app.start_task("A")
        app.log_lesson("A", "mock the network", "hid a bug")
    result = run(
        sys.executable, str(ROOT / "scripts" / "verify_lessons_schema.py"), str(db)
    )
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def test_verify_lessons_schema_names_what_is_wrong(tmp_path: Path) -> None:
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as connection:
        connection.execute(
            "CREATE TABLE lessons_learned (id TEXT, task_id TEXT, rca_summary TEXT)"
        )
    result = run(
        sys.executable, str(ROOT / "scripts" / "verify_lessons_schema.py"), str(db)
    )
    assert result.returncode == 1
    for problem in (
        "missing column failed_strategy",
        "missing column logged_at",
        "id is not the primary key",
        "no UNIQUE(task_id, failed_strategy)",
        "no index on task_id",
    ):
        assert problem in result.stderr
    missing = run(
        sys.executable,
        str(ROOT / "scripts" / "verify_lessons_schema.py"),
        str(tmp_path / "absent.sqlite"),
    )
    assert missing.returncode == 1
    assert "does not exist" in missing.stderr
