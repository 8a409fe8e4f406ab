"""A worker of ``devs serve`` answers while one of its commands waits for the
SQLite write lock another process holds (a ``devs`` CLI command, a rebuild,
another server): the command waits on the worker's writer thread, not on its
event loop."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tests.e2e.test_serve import Server

HOLD = 10.0  # seconds the other process holds the write lock
PROMPT = 1.0  # seconds within which the worker must answer meanwhile

LOCKER = """
import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
connection.execute("COMMIT")
"""


def test_the_worker_answers_while_a_command_waits_for_the_write_lock(
    tmp_path: Path,
) -> None:
    db = tmp_path / "locked.sqlite"
    server = Server(db)
    try:
        assert server.client.post("/tasks", json={"task_id": "t0"}).status_code == 201
        assert [t["task_id"] for t in server.client.get("/tasks").json()] == ["t0"]

        locker = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(db), str(HOLD)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert locker.stdout is not None
        assert locker.stdout.readline().strip() == "locked"
        locked_at = time.monotonic()

        answers: list[httpx.Response] = []

        def command() -> None:
            with httpx.Client(
                base_url=server.url, headers=server.headers, timeout=60
            ) as client:
                answers.append(
                    client.post("/tasks/t0/attempts", json={"strategy": "regex"})
                )

        waiting = threading.Thread(target=command)
        waiting.start()
        time.sleep(0.5)  # the command is in the worker, waiting for the lock

        with httpx.Client(
            base_url=server.url, headers=server.headers, timeout=PROMPT
        ) as prompt:
            probes = 0
            while time.monotonic() - locked_at < HOLD - 2 * PROMPT:
                # A stalled worker times these out (httpx.ReadTimeout).
                assert prompt.get("/healthz").json() == {"ok": True}
                listed = prompt.get("/tasks")
                assert listed.status_code == 200, listed.text
                assert [t["task_id"] for t in listed.json()] == ["t0"]
                probes += 1
                time.sleep(0.5)
        assert probes >= 3
        assert waiting.is_alive()  # the command still waits for the lock
        assert not answers

        waiting.join(timeout=60)
        assert locker.wait(timeout=30) == 0
        assert len(answers) == 1
        assert answers[0].status_code == 200, answers[0].text
        assert answers[0].json()["proceed"] is True
        assert time.monotonic() - locked_at >= HOLD - 0.5  # it did wait for it
    finally:
        server.stop()
