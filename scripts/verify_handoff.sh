#!/usr/bin/env bash
# Seed 003's check: run the hand-off tests, then drive one task through five
# failing gates and assert, in the state store itself, that it is
# hand_off_required with failure_count 5 and a record in the hand-off queue.
#
#   scripts/verify_handoff.sh            # a fresh store in a temporary directory
#   DEVS_DB=path scripts/verify_handoff.sh
#   PYTHON=.venv/bin/python scripts/verify_handoff.sh
#
# Exits non-zero when the tests fail or any assertion does.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
DEVS_DB="${DEVS_DB:-$(mktemp -d)/devs_state.sqlite}"
export DEVS_DB

"$PYTHON" -m pytest -q -p no:cacheprovider tests/integration/test_handoff.py

"$PYTHON" - <<'PY'
import json
import os
import sqlite3
import sys

from devs.domain import RecoveryService

TASK = "task-09-1-handoff"
db = os.environ["DEVS_DB"]
with RecoveryService(env={"SQLITE_DBNAME": db}) as app:
    app.start_task(TASK, agent="developer-agent", last_commit="4f2a9c1")
    for attempt in range(5):
        decision = app.record_gate(
            TASK,
            1,
            gate="tests",
            strategy=f"strategy {attempt}",
            error="simulated failure",
            output="trace",
        )
        if decision.outcome == "escalate":  # a human is asked at 3 and 4
            app.resume(TASK, actor="verify_handoff", reason="keep trying")
    app.catch_up()

failures = []
with sqlite3.connect(db) as connection:
    row = connection.execute(
        "select status, handoff_meta from tasks where id = ?", (TASK,)
    ).fetchone()
    queued = connection.execute(
        "select failure_count, payload from handoff_queue where task_id = ?", (TASK,)
    ).fetchone()
if row is None:
    failures.append(f"no row for {TASK} in tasks")
else:
    status, meta = row
    print(f"tasks: status={status} handoff_meta={meta}")
    meta = json.loads(meta or "{}")
    if status != "hand_off_required":
        failures.append(f"status is {status!r}, not 'hand_off_required'")
    if meta.get("failure_count") != 5:
        failures.append(f"handoff_meta failure_count is {meta.get('failure_count')!r}")
    if len(meta.get("last_error_hash") or "") != 64:
        failures.append("handoff_meta has no SHA-256 last_error_hash")
if queued is None:
    failures.append(f"no hand-off record for {TASK} in handoff_queue")
else:
    count, payload = queued
    history = json.loads(payload)["failure_history"]
    print(f"handoff_queue: failure_count={count}, {len(history)} failures in history")
    if count != 5 or len(history) != 5:
        failures.append(f"hand-off record has {count} failures, {len(history)} in history")
for failure in failures:
    print(f"verify_handoff: {failure}", file=sys.stderr)
sys.exit(1 if failures else 0)
PY
echo "verify_handoff: ok ($DEVS_DB)"
