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
"""

from __future__ import annotations

import multiprocessing
import signal
import socket
import sys
import time
from multiprocessing.context import SpawnProcess
from types import FrameType

import uvicorn

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


def run_worker(host: str, port: int, reuse_port: bool) -> None:
    """One worker: its own socket, uvicorn serving the app from the env."""
    sock = listening_socket(host, port, reuse_port=reuse_port)
    config = uvicorn.Config(APP, factory=True, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


def serve(host: str, port: int, workers: int) -> None:
    """Serve on ``host``:``port`` with ``workers`` processes (1: this one)."""
    if workers == 1:
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
    # Bound, never listening: holds the port (chosen here when it is 0) for
    # the workers, and gets no connections itself.
    holder = listening_socket(host, port, reuse_port=True)
    try:
        Supervisor(host, holder.getsockname()[1], workers).run()
    finally:
        holder.close()


class Supervisor:
    """Starts the workers, starts again one that dies, stops them all on
    SIGTERM, SIGINT or SIGHUP."""

    def __init__(self, host: str, port: int, workers: int) -> None:
        self.host, self.port, self.count = host, port, workers
        self.context = multiprocessing.get_context("spawn")
        self.workers: list[SpawnProcess] = []
        self.started: dict[int, float] = {}
        self.stopping = False

    def start_one(self) -> SpawnProcess:
        worker = self.context.Process(
            target=run_worker, args=(self.host, self.port, True), daemon=False
        )
        worker.start()
        self.started[id(worker)] = time.monotonic()
        return worker

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True

    def run(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self.stop)
        self.workers = [self.start_one() for _ in range(self.count)]
        try:
            while not self.stopping:
                time.sleep(0.2)
                for index, worker in enumerate(self.workers):
                    if not worker.is_alive() and not self.stopping:
                        print(
                            f"devs serve: worker {worker.pid} exited with "
                            f"{worker.exitcode}; starting another",
                            file=sys.stderr,
                        )
                        lived = time.monotonic() - self.started.pop(id(worker))
                        if lived < RESTART_PAUSE:  # dying at start: not in a loop
                            time.sleep(RESTART_PAUSE - lived)
                        self.workers[index] = self.start_one()
        finally:
            for worker in self.workers:
                if worker.is_alive():
                    worker.terminate()  # SIGTERM: uvicorn finishes its requests
            for worker in self.workers:
                worker.join(timeout=30)
                if worker.is_alive():
                    worker.kill()
                    worker.join()
