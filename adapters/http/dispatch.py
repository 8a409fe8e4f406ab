"""How a request reaches the service: the writer threads that decide
commands off the event loop, the app's state (:class:`Served`), the
read-your-writes wait and the route class that words refusals for HTTP."""

from __future__ import annotations

import asyncio
import contextvars
import re
import threading
from collections.abc import (
    Callable,
    Coroutine,
)
from concurrent.futures import Future, ThreadPoolExecutor
from queue import SimpleQueue
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel

from devs.adapters.config import (
    Backend,
    backend_of,
)
from devs.adapters.http.contract import (
    AFTER_HEADER,
    KEY_HEADER,
    POSITION_HEADER,
    POSITION_TEXT,
    READY_WAIT,
    AfterHeaderValue,
    AfterQuery,
    Body,
    GateBody,
    Readiness,
    T,
    etag,
)
from devs.adapters.http.errors import last_store_failure
from devs.domain import (
    AlreadyExists,
    InvalidInput,
    NotCaughtUp,
    RecoveryService,
    StoreError,
    UnknownRun,
    UnknownTask,
)
from devs.domain.commands import NO_WAIT, WouldWait
from devs.domain.redaction import redact


class Writer:
    """The worker's writer: one long-lived thread that runs its commands, one
    at a time, for the event loop.

    A command may wait for SQLite's write lock (``SQLITE_LOCK_TIMEOUT``, held
    by a ``devs`` CLI command, a rebuild, another server), for PostgreSQL, or
    sleep in its conflict back-off; on this thread it does so while the loop
    goes on answering ``/healthz``, ``/readyz`` and queries. One thread, not
    one per request: the loop hands it a command through a queue and is woken
    when the answer is ready. The worker's commands took turns anyway: one
    Python thread at a time, one SQLite writer at a time.

    Handing over costs thread switches (on SQLite a fifth to two fifths of
    one worker's decisions a second, bench/http_bench.py), so on SQLite the
    loop does a command itself while the writer is idle, under ``NO_WAIT``:
    one that would have to wait raises ``WouldWait`` having written nothing,
    and is handed over then (``create_app``'s ``command``).
    """

    def __init__(self, threads: int = 1) -> None:
        self._calls: SimpleQueue[_Call[Any] | None] = SimpleQueue()
        self._threads: list[threading.Thread] = []
        self.size = threads
        """How many threads take the commands handed over (1 on SQLite, whose
        writes take turns anyway; more on PostgreSQL, where one command's
        round trips to the database leave room for another's)."""
        self.busy = 0
        """Commands handed over and not yet answered (read on the loop)."""

    async def run(self, call: Callable[[], T]) -> T:
        """``call()`` on a writer thread (started the first time); its
        value or its exception."""
        if not self._threads:
            for n in range(self.size):
                thread = threading.Thread(
                    target=self._serve, name=f"devs-writer-{n}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self.busy += 1  # back to 0 only once the thread is done with it
        context = contextvars.copy_context()  # the request's, not the thread's
        self._calls.put((lambda: context.run(call), future, loop))
        return await future

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            call, future, loop = item
            try:
                value = call()
            except BaseException as error:  # handed to the request, raised there
                loop.call_soon_threadsafe(self._done, future, None, error)
            else:
                loop.call_soon_threadsafe(self._done, future, value, None)

    def _done(
        self, future: asyncio.Future[T], value: T, error: BaseException | None
    ) -> None:
        # busy drops here, once the thread is done with the command, not when
        # the request ends: a request cancelled while its command still runs
        # must not let the loop start another. One wake-up of the loop per
        # command: its answer and its end together.
        self.busy -= 1
        if future.done():  # the request was cancelled meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def close(self) -> None:
        """Let the commands handed over finish, then end the threads."""
        for _ in self._threads:
            self._calls.put(None)
        for thread in self._threads:
            thread.join()
        self._threads = []


_Call = tuple[Callable[[], T], "asyncio.Future[T]", asyncio.AbstractEventLoop]


# ------------------------------------------------------------ dependencies


POSTGRES_WRITERS = 3
"""Writer threads of a worker on PostgreSQL (one on SQLite)."""


class Served:
    """What one app serves: its service (opened at startup when given as a
    callable), its writer thread and its read-your-writes bound. Held in
    ``app.state.devs``; routes reach it through :data:`Devs`."""

    def __init__(
        self,
        service: RecoveryService | Callable[[], RecoveryService],
        read_wait: float | None,
    ) -> None:
        self._open = None if isinstance(service, RecoveryService) else service
        self._service = service if isinstance(service, RecoveryService) else None
        self.writer = Writer()
        self._read_wait = read_wait
        self.on_loop = False
        """Whether the loop may run a command itself (under ``NO_WAIT``): on
        SQLite, whose waits can be turned off; on PostgreSQL every command
        goes to the writer. Decided by :meth:`open`, with the writer's size."""
        self._prober: ThreadPoolExecutor | None = None
        self._probe: Future[Readiness] | None = None
        self._probe_lock = threading.Lock()

    async def readiness(self, timeout: float = READY_WAIT) -> Readiness:
        """Whether the store answers and the read models caught up with the
        log, known within ``timeout`` seconds: one probe runs at a time in a
        thread of its own, and every request meanwhile awaits it on the loop
        (a store that does not answer holds one thread, not one per request,
        and no request waits for a free thread first)."""
        with self._probe_lock:
            probe = self._probe
            if probe is None or probe.done():
                if self._prober is None:  # started again after a shutdown
                    self._prober = ThreadPoolExecutor(1, "devs-ready")
                probe = self._probe = self._prober.submit(self._ready)
        try:
            return await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(probe)), timeout
            )
        except TimeoutError:
            known = last_store_failure(self.service)
            if known is not None:
                reason = (
                    f"the store did not answer within {timeout:g} s; the last "
                    f"attempt to connect said: {known}"
                )
            else:
                reason = (
                    f"no answer within {timeout:g} s: the store is slow, or the "
                    "read models are behind the log"
                )
            return Readiness(ready=False, position=0, reason=redact(reason))

    def _ready(self) -> Readiness:
        try:
            position = self.service.catch_up()
        except (StoreError, NotCaughtUp) as error:
            return Readiness(ready=False, position=0, reason=redact(str(error)))
        return Readiness(ready=True, position=position)

    def close(self) -> None:
        """Stop the writer and the readiness probe (a probe still waiting
        for the store is not waited for)."""
        self.writer.close()
        with self._probe_lock:
            prober, self._prober, self._probe = self._prober, None, None
        if prober is not None:
            prober.shutdown(wait=False, cancel_futures=True)

    @property
    def read_wait(self) -> float:
        """How long a query waits for the position it asked for: as given to
        ``create_app``, else the service's own (``DEVS_READ_WAIT``)."""
        if self._read_wait is not None:
            return self._read_wait
        return self.service.read_wait

    @property
    def service(self) -> RecoveryService:
        if self._service is None:
            msg = "the service is opened when the app starts (its lifespan)"
            raise StoreError(msg)
        return self._service

    def open(self) -> RecoveryService | None:
        """Open the service if the app was given a callable (what it opened,
        else ``None``), and decide by its backend where commands run."""
        opened = None
        if self._open is not None and self._service is None:
            self._service = opened = self._open()
        self.on_loop = backend_of(self.service) is not Backend.POSTGRES
        self.writer.size = 1 if self.on_loop else POSTGRES_WRITERS
        return opened

    async def operator_of(self, token: str) -> str | None:
        """The operator whose current token is ``token``, if any: the roster
        as stored now, read in a thread (never on the loop)."""
        service = self.service
        return await asyncio.to_thread(lambda: service.roster().holder(token))

    async def command(
        self,
        status: int,
        key: str | None,
        path: str,
        body: Body,
        call: Callable[[RecoveryService], BaseModel],
        caller: str | None = None,
    ) -> Response:
        """Do a command (once per ``Idempotency-Key``, when one is given) and
        answer it, with the log position it reached (:class:`Writer` says
        where it runs). The answer is the model's own JSON: FastAPI would
        validate the model again against the endpoint's ``response_model``
        (the same class) before writing it."""
        service = self.service

        def decide() -> tuple[str, int]:
            with service.written() as written:
                if key is None:
                    value = call(service)
                else:
                    request = f"POST {path}\n{body.model_dump_json()}"
                    if caller is not None:  # one operator's key is not another's
                        request += f"\noperator {caller}"
                    try:
                        with service.exactly_once(key, request):
                            value = call(service)
                    except InvalidInput as error:
                        if error.field == "idempotency_key":
                            error.field = KEY_HEADER
                        raise
            position = written.position
            if position is None:  # answered from a receipt: the log's end covers it
                position = service.recorder.max_notification_id() or 0
            return value.model_dump_json(), position

        if self.on_loop and not self.writer.busy and not _heavy(body):
            # On SQLite most commands never wait: one is done on the loop
            # (no hand-over, no thread switch) unless it would have to wait
            # for the write lock or a back-off; then, nothing written, it
            # goes to the writer thread like every command behind it.
            token = NO_WAIT.set(True)
            try:
                answer, position = decide()
            except WouldWait:
                pass
            else:
                return _answer(answer, status, position)
            finally:
                NO_WAIT.reset(token)
        answer, position = await self.writer.run(decide)
        return _answer(answer, status, position)


LOOP_TEXT_MAX = 256 * 1024
"""A gate whose error and output hold more characters than this is decided on
the writer thread, never on the loop: redacting it takes time (about 25 ms a
MB)."""


def _heavy(body: Body) -> bool:
    if not isinstance(body, GateBody):
        return False
    texts = (getattr(body, "output", None), getattr(body, "error", None))
    return sum(len(text or "") for text in texts) > LOOP_TEXT_MAX


def _answer(answer: str, status: int, position: int) -> Response:
    headers = {POSITION_HEADER: str(position)}
    version = _answered_version(answer)
    if version is not None:  # a human answer: the task's version after it
        headers["ETag"] = etag(version)
    return Response(answer, status, headers, media_type="application/json")


_DIGITS = re.compile(r"\d{1,19}")


def _answered_version(answer: str) -> int | None:
    """The ``version`` of a human answer's JSON (an :class:`ActionResult`'s
    or a ``BudgetAnswer``'s: they have an ``action``; ``None`` for any other
    answer): linear, as JSON escapes every quote inside a string, so
    ``"action":"`` and ``"version":`` appear only as keys."""
    if '"action":"' not in answer:
        return None
    at = answer.rfind('"version":')
    if at == -1:
        return None
    found = _DIGITS.match(answer, at + len('"version":'))
    return int(found.group()) if found is not None else None


async def _served(request: Request) -> Served:
    served: Served = request.app.state.devs
    return served


Devs = Annotated[Served, Depends(_served)]
"""The app's service, writer and bounds (async: resolved on the loop)."""


POSITION_HEADER_VALUE = re.compile(POSITION_TEXT)


def _read_after(
    served: Devs, after: AfterQuery = None, x_after: AfterHeaderValue = None
) -> int | None:
    """The position a query asked for (``?after=`` or ``X-Devs-After``), once
    the read models folded it: waits at most ``read_wait`` seconds (else 504).
    A sync dependency: it waits in a thread, never on the loop."""
    wanted = after
    field = "after"
    if x_after is not None:
        header = POSITION_HEADER_VALUE.fullmatch(x_after)
        if header is None:
            msg = f"{AFTER_HEADER} must be an integer, got {x_after[:40]!r}"
            raise InvalidInput(msg, field=AFTER_HEADER)
        if after is None:  # ?after= wins when both are sent
            wanted, field = int(x_after), AFTER_HEADER
    if wanted is None:
        return None
    if wanted < 0:
        msg = f"after must be a non-negative integer, got {wanted}"
        raise InvalidInput(msg, field=field)
    try:
        served.service.wait_for(wanted, timeout=served.read_wait)
    except InvalidInput as error:  # past the log's end, or any there can be
        error.field = field  # named as it was sent (its class kept)
        raise
    return wanted


ReadAfter = Annotated[int | None, Depends(_read_after)]
"""The log position a query reads at (``None``: the log as it ends now); the
query runs in ``service.reading_after(position)``."""


# ------------------------------------------------------------------ routers


class HttpRoute(APIRoute):
    """A route whose refusals say what to do in HTTP's words: an unknown task
    or run names ``POST /tasks`` or ``POST /runs``, one started again the
    requests that go on with it, where the service's own message names its
    Python methods (``start_task()``, ``start_run()``, ``begin_attempt()``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def worded(request: Request) -> Response:
            try:
                return await handler(request)
            except UnknownTask as error:
                raise UnknownTask(error.task_id, start_with="POST /tasks") from None
            except UnknownRun as error:
                raise UnknownRun(error.run_id, start_with="POST /runs") from None
            except AlreadyExists as error:
                if error.task_id is not None:
                    path = f"/tasks/{quote(error.task_id, safe='')}"
                    raise AlreadyExists.task(
                        error.task_id,
                        next_step=f"record its attempts with POST {path}/attempts, "
                        f"or read it with GET {path}",
                    ) from None
                if error.run_id is not None:
                    path = f"/runs/{quote(error.run_id, safe='')}"
                    raise AlreadyExists.run(
                        error.run_id,
                        next_step="start its tasks with POST /tasks (its run_id), "
                        f"or read it with GET {path}",
                    ) from None
                raise

        return worded
