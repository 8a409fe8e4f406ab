"""How ``devs serve`` listens: each worker process its own listening socket.

uvicorn's ``--workers`` shares one socket among its worker processes. Two
things follow on Linux, both measured by bench/http_bench.py: that socket is
created with protocol 0, so asyncio does not set ``TCP_NODELAY`` on the
connections it accepts and every request after the first on a keep-alive
connection waits about 40 ms for Nagle's algorithm (uvicorn issue #3149); and
a burst of new connections is accepted by whichever worker wakes first, so a
few long-lived clients may all land on one worker while the other idles.

Here every worker binds its own TCP socket (protocol ``IPPROTO_TCP``: asyncio
sets ``TCP_NODELAY``) to the same address with ``SO_REUSEPORT``, and the
kernel spreads new connections over the workers. A small supervisor starts
the workers, starts again one that dies, and stops them all on SIGTERM or
Ctrl-C.

On PostgreSQL the supervisor also runs the read models' projection runner,
in a process of its own (what ``devs project`` runs), and the workers run
none (``DEVS_PROJECTIONS=external``): a runner thread inside a worker shares
that worker's one Python thread at a time with the commands, and under load
it fell seconds behind the log (bench/http_bench.py). With
``DEVS_PROJECTIONS=external`` set for ``devs serve`` itself, it runs none
either: ``devs project`` workers run elsewhere.

Beside a projector, the workers run ``DEVS_WORKER_NICENESS`` (default 5)
nicer than it. On a machine whose cores the workers keep busy, the one
process that folds every worker's events gets the CPU first, so the read
models stay within about 100 ms of the log instead of seconds behind it, for
about an eighth fewer decisions a second (docs/performance.md).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from multiprocessing.context import SpawnProcess
from types import FrameType

import uvicorn

from devs.adapters.config import (
    DEFAULT_NICENESS,
    PROJECTIONS_ENV,
    Projections,
    Settings,
    open_service,
)

APP = "devs.adapters.http:app_from_env"
RESTART_PAUSE = 1.0
"""A worker that died sooner after its start is started again this late."""


def listening_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (``IPPROTO_TCP``, so its
    connections get ``TCP_NODELAY``), shared by port with other processes
    when ``reuse_port``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def run_worker(host: str, port: int, reuse_port: bool, niceness: int = 0) -> None:
    """One worker: its own socket, uvicorn serving the app from the env,
    ``niceness`` nicer than the process that started it."""
    if niceness:
        os.nice(niceness)
    sock = listening_socket(host, port, reuse_port=reuse_port)
    config = uvicorn.Config(APP, factory=True, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


def run_projector() -> None:
    """The read models' projection runner, until SIGTERM (``devs project``)."""
    from devs.projections.postgres import PostgresReadModels

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor stops it
    settings = Settings().model_copy(update={"projections": Projections.RUNNER})
    with open_service(settings) as service:
        models = service.read_models
        assert isinstance(models, PostgresReadModels)
        models.follow(stop)


def serve(
    host: str,
    port: int,
    workers: int,
    *,
    projector: bool = False,
    niceness: int = DEFAULT_NICENESS,
) -> None:
    """Serve on ``host``:``port`` with ``workers`` processes (1 and no
    ``projector``: this one), and with ``projector`` a process that keeps
    the PostgreSQL read models, the workers ``niceness`` nicer than it."""
    if projector:
        os.environ[PROJECTIONS_ENV] = "external"  # the workers' (spawned: they inherit)
    if workers == 1 and not projector:
        run_worker(host, port, reuse_port=False)
        return
    if not hasattr(socket, "SO_REUSEPORT"):  # not on this platform: uvicorn's own
        uvicorn.run(
            APP,
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="warning",
        )
        return
    # First a plain bind: SO_REUSEPORT would let this server join another
    # one's group on a taken port (the same user's) instead of failing.
    probe = listening_socket(host, port, reuse_port=False)
    port = probe.getsockname()[1]
    probe.close()
    # Bound, never listening: holds the port (chosen here when it is 0) for
    # the workers, and gets no connections itself.
    holder = listening_socket(host, port, reuse_port=True)
    try:
        port = holder.getsockname()[1]
        niceness = niceness if projector else 0
        Supervisor(host, port, workers, projector=projector, niceness=niceness).run()
    finally:
        holder.close()


class Supervisor:
    """Starts the workers, starts again one that dies, stops them all on
    SIGTERM, SIGINT or SIGHUP."""

    def __init__(
        self,
        host: str,
        port: int,
        workers: int,
        *,
        projector: bool = False,
        niceness: int = 0,
    ) -> None:
        self.host, self.port, self.count = host, port, workers
        self.projector, self.niceness = projector, niceness
        self.context = multiprocessing.get_context("spawn")
        self.workers: list[SpawnProcess] = []
        self.started: dict[int, float] = {}
        self.stopping = False

    def start_one(self, index: int) -> SpawnProcess:
        """Worker ``index``; with a projector, the last index is it."""
        if index == self.count:
            worker = self.context.Process(target=run_projector, name="projector")
        else:
            worker = self.context.Process(
                target=run_worker, args=(self.host, self.port, True, self.niceness)
            )
        worker.start()
        self.started[id(worker)] = time.monotonic()
        return worker

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True

    def run(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self.stop)
        total = self.count + (1 if self.projector else 0)
        self.workers = [self.start_one(index) for index in range(total)]
        try:
            while not self.stopping:
                time.sleep(0.2)
                for index, worker in enumerate(self.workers):
                    if not worker.is_alive() and not self.stopping:
                        what = worker.name if index == self.count else "worker"
                        print(
                            f"devs serve: {what} {worker.pid} exited with "
                            f"{worker.exitcode}; starting another",
                            file=sys.stderr,
                        )
                        lived = time.monotonic() - self.started.pop(id(worker))
                        if lived < RESTART_PAUSE:  # dying at start: not in a loop
                            time.sleep(RESTART_PAUSE - lived)
                        self.workers[index] = self.start_one(index)
        finally:
            for worker in self.workers:
                if worker.is_alive():
                    worker.terminate()  # SIGTERM: uvicorn finishes its requests
            for worker in self.workers:
                worker.join(timeout=30)
                if worker.is_alive():
                    worker.kill()
                    worker.join()
