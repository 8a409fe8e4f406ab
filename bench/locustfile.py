"""Locust users for bench/http_bench.py: failed gates, round-robin over own tasks.

Not meant to be run by hand (bench/http_bench.py starts locust with it, then
reads what it writes), though it can be::

    DEVS_BENCH_SAMPLES=/tmp/s locust -f bench/locustfile.py --headless \
        -u 4 -r 4 -t 10s --host http://127.0.0.1:8765

Each user starts its own tasks (``POST /tasks``, ``DEVS_BENCH_TASKS_PER_USER``
of them), then posts ``{"exit_code": 1, "gate": "tests", "error": "assert 1 ==
2"}`` to ``POST /tasks/{id}/gates`` over them in turn, one request at a time
and without pause: bench/bench.py's decisions workload, over HTTP. The server
is expected to run with ``DEVS_ESCALATION_THRESHOLD`` and
``DEVS_HANDOFF_THRESHOLD`` at 1000 (bench.py's patient policy), so a task takes
999 failed gates before its hand-off; a user that went round its tasks 900
times starts new ones.

Every request is recorded as it ends (its name, user, start time, response
time in ms as locust measures it, and HTTP status, 0 for a connection error)
and written as JSON lines to ``$DEVS_BENCH_SAMPLES/samples-<pid>.jsonl`` when
the test stops: exact times, where locust's own statistics round them.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

# Optional (the bench extra): without it, mypy sees no locust at all.
from locust import (  # type: ignore[import-not-found, unused-ignore]
    events,
    task,
)
from locust.contrib.fasthttp import (  # type: ignore[import-not-found, unused-ignore]
    FastHttpUser,
)

GATE_NAME = "POST /tasks/{id}/gates"
CREATE_NAME = "POST /tasks"
GATE_BODY = {"exit_code": 1, "gate": "tests", "error": "assert 1 == 2"}
ROUNDS_PER_TASK_SET = 900  # below the patient policy's hand-off at 1000 failures

TOKEN = os.environ.get("DEVS_BENCH_TOKEN", "")
PREFIX = os.environ.get("DEVS_BENCH_PREFIX", "bench")
TASKS_PER_USER = max(1, int(os.environ.get("DEVS_BENCH_TASKS_PER_USER", "8")))
SAMPLES_DIR = os.environ.get("DEVS_BENCH_SAMPLES", "")

_numbers = itertools.count()
# (name, user, start epoch seconds, response time ms, status)
_samples: list[tuple[str, str, float, float, int]] = []


@events.request.add_listener  # type: ignore[untyped-decorator, unused-ignore]
def _record(
    name: str,
    response_time: float,
    response: Any,
    start_time: float,
    context: dict[str, Any],
    **_: Any,
) -> None:
    status = int(getattr(response, "status_code", 0) or 0)
    user = str(context.get("user", "?"))
    _samples.append((name, user, start_time, response_time, status))


def _write(**_: Any) -> None:
    if not SAMPLES_DIR or not _samples:
        return
    path = Path(SAMPLES_DIR) / f"samples-{os.getpid()}.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for sample in _samples:
            out.write(json.dumps(sample) + "\n")


events.test_stop.add_listener(_write)  # type: ignore[no-untyped-call, unused-ignore]
events.quitting.add_listener(_write)  # type: ignore[no-untyped-call, unused-ignore]


class GateUser(FastHttpUser):  # type: ignore[misc, unused-ignore]
    """One client: its own tasks, one gate at a time, no think time."""

    def on_start(self) -> None:
        self.user_id = f"{PREFIX}-p{os.getpid()}-u{next(_numbers)}"
        self.headers = {"Authorization": f"Bearer {TOKEN}"} if TOKEN else {}
        self.sets = 0
        self.turn = 0
        self.task_ids: list[str] = []
        self.new_tasks()

    def new_tasks(self) -> None:
        self.task_ids = [
            f"{self.user_id}-s{self.sets}-t{i}" for i in range(TASKS_PER_USER)
        ]
        self.sets += 1
        self.turn = 0
        for task_id in self.task_ids:
            self.client.post(
                "/tasks",
                json={"task_id": task_id, "agent": "bench"},
                headers=self.headers,
                name=CREATE_NAME,
                context={"user": self.user_id},
            )

    @task  # type: ignore[untyped-decorator, unused-ignore]
    def gate(self) -> None:
        if self.turn >= ROUNDS_PER_TASK_SET * len(self.task_ids):
            self.new_tasks()
        task_id = self.task_ids[self.turn % len(self.task_ids)]
        self.turn += 1
        self.client.post(
            f"/tasks/{task_id}/gates",
            json=GATE_BODY,
            headers=self.headers,
            name=GATE_NAME,
            context={"user": self.user_id},
        )
