"""The app: :func:`create_app` assembles the routers, the front door, the
MCP endpoint and the agents' hook endpoint; :func:`app_from_env` is what
``devs serve`` runs in each worker."""

from __future__ import annotations

import asyncio
import os
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Sequence,
)
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from devs.adapters.config import (
    DEFAULT_MAX_BODY_BYTES,
    EXTERNAL,
    NOTIFIER_ENV,
    Settings,
    check_secret,
    check_token,
    open_service,
)
from devs.adapters.hooks.runner import store_identity
from devs.adapters.http import streams
from devs.adapters.http.auth import Callers
from devs.adapters.http.contract import (
    DOCS_ASSETS,
    ETAG_HEADERS,
    MCP_PATH,
    POSITION_HEADERS,
    VERSION,
    answers,
    operation_id,
)
from devs.adapters.http.dispatch import Served
from devs.adapters.http.errors import (
    _bad_request,
    _client_gone,
    _devs_error,
    _http_error,
    _internal_error,
    body_model,
    error_response,
)
from devs.adapters.http.front_door import FrontDoor, HostCheck
from devs.adapters.http.routes import (
    audits,
    humans,
    metrics,
    notifications,
    runs,
    tasks,
)
from devs.adapters.http.routes import service as service_routes
from devs.adapters.notify.sender import Background
from devs.adapters.notify.settings import NotifySettings, notify_settings
from devs.domain import (
    DevsError,
    InvalidInput,
    RecoveryService,
)

ROUTERS = (
    service_routes.router,
    runs.router,
    tasks.router,
    humans.router,
    audits.router,
    metrics.router,
    notifications.router,
    streams.router,
)
"""One router per resource; ``create_app`` includes them all."""


def _not_null(parameter: dict[str, Any]) -> None:
    """An optional parameter's schema without its ``null``."""
    schema = parameter.get("schema", {})
    members = schema.get("anyOf")
    if parameter.get("required") or not isinstance(members, list):
        return
    kept = [member for member in members if member.get("type") != "null"]
    if len(kept) == 1:
        rest = {key: value for key, value in schema.items() if key != "anyOf"}
        parameter["schema"] = {**kept[0], **rest}


def _finish_the_document(app: FastAPI, *, token: bool) -> None:
    """``/openapi.json`` as a client reads it: with a token, every call takes
    it as a bearer token (so that Swagger UI's "Authorize" sends it); an
    optional header's schema is its value's (a header left out is absent,
    never ``null``: FastAPI writes ``anyOf [..., null]`` for an optional
    parameter, and a client would send the text ``null``)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        document = generate()
        if token:
            schemes = document.setdefault("components", {}).setdefault(
                "securitySchemes", {}
            )
            schemes["bearer"] = {"type": "http", "scheme": "bearer"}
            document["security"] = [{"bearer": []}]
        for operations in document.get("paths", {}).values():
            for operation in operations.values():
                for parameter in operation.get("parameters", []):
                    _not_null(parameter)
        return document

    app.openapi = openapi  # type: ignore[method-assign]


# ---------------------------------------------------------------- the app


# ---------------------------------------------------------------- the app


def create_app(
    service: RecoveryService | Callable[[], RecoveryService],
    *,
    token: str | None = None,
    read_wait: float | None = None,
    console_secret: str | None = None,
    notify: NotifySettings | None = None,
    allowed_hosts: Sequence[str] | None = None,
    max_body_bytes: int | None = DEFAULT_MAX_BODY_BYTES,
    hook_store: str = "memory",
) -> FastAPI:
    """The ASGI app over ``service`` (or what ``service()`` opens at startup,
    closed at shutdown). With ``token``, every request but ``/healthz`` and
    the documentation needs ``Authorization: Bearer <token>``.
    ``console_secret`` signs the console's sessions (``DEVS_CONSOLE_SECRET``;
    default: a random one for this app, its sessions ending with it). With
    ``notify``, a thread of the app sends the outbox's messages and sweeps
    the human waits' deadlines while it runs (:mod:`devs.adapters.notify`).
    With ``allowed_hosts`` (``devs serve`` gives ``DEVS_ALLOWED_HOSTS``), a
    request whose ``Host`` is not the connection's own address, a loopback
    name or one of them is a 421 (:class:`HostCheck`); ``None``: any
    ``Host`` (an app called in process). A body over ``max_body_bytes`` is a
    413 (:class:`FrontDoor`). ``hook_store`` names the store in the hooks'
    state files of this machine (``POST /hooks/AGENT``: an agent's ``http``
    hooks), as ``devs --db FILE hook AGENT`` names it."""
    served = Served(service, read_wait)
    mcp = McpEndpoint(served, guarded=token is not None)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        opened = served.open()
        background = None
        try:
            if notify is not None:
                background = Background(served.service, notify).start()
            async with mcp.running():
                yield
        finally:
            if background is not None:
                await asyncio.to_thread(background.stop)
            served.close()
            if opened is not None:
                opened.close()

    app = FastAPIOffline(
        static_url=DOCS_ASSETS.rstrip("/"),
        title="devs-recovery",
        summary="An event-sourced referee for AI coding agents",
        version=VERSION,
        license_info={"name": "MIT", "identifier": "MIT"},
        lifespan=lifespan,
    )
    app.state.devs = served
    if token is not None:
        try:
            check_token(token)
        except ValueError as error:
            raise InvalidInput(str(error), field="token") from None
    _finish_the_document(app, token=token is not None)
    expected = None if token is None else token.encode()
    app.add_middleware(Callers, expected=expected, served=served)
    hosts = None if allowed_hosts is None else HostCheck(allowed_hosts)
    app.add_middleware(FrontDoor, hosts=hosts, max_body=max_body_bytes)
    app.add_exception_handler(DevsError, _devs_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _bad_request)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(ClientDisconnect, _client_gone)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _internal_error)
    for router in ROUTERS:
        app.include_router(router)
    app.router.routes.append(Route(MCP_PATH, mcp, methods=["GET", "POST", "DELETE"]))
    app.router.routes.append(
        Route(HOOKS_PATH, _hook_endpoint(served, hook_store), methods=["POST"])
    )
    from devs.adapters import console

    if console_secret is not None:
        try:
            check_secret(console_secret)
        except ValueError as error:
            raise InvalidInput(str(error), field="console_secret") from None
    console.mount(app, lambda: served.service, served.writer, secret=console_secret)
    return app


def _describe_routes(routes: list[BaseRoute]) -> None:
    """What ``/openapi.json`` says of each route: its ``operationId`` as an
    SDK would name it (``recordGate``), the refusals it can really answer
    (:func:`~devs.adapters.http.contract.answers`) and the headers its answer
    carries (``X-Devs-Position`` after a command, ``ETag`` on a task)."""
    for route in routes:
        if not isinstance(route, APIRoute):
            continue
        method = sorted(route.methods or {"GET"})[0]
        route.operation_id = operation_id(route.name, method)
        queries = bool(route.dependant.query_params) or any(
            sub.query_params or sub.header_params
            for sub in route.dependant.dependencies
        )
        tag = str(route.tags[0]) if route.tags else None
        named = {param.name for param in route.dependant.query_params}
        model = body_model(route)
        if model is not None:
            named |= set(model.model_fields)
        chosen = answers(
            method,
            route.path,
            body=route.body_field is not None,
            queries=queries,
            tag=tag,
            ids=bool(named & {"task_id", "task_ids", "run_id"}),
        )
        success: dict[str, Any] = {}
        if method == "POST" and route.path != "/what-if":
            success["headers"] = POSITION_HEADERS
        if route.path == "/tasks/{task_id}" and method == "GET":
            success["headers"] = ETAG_HEADERS
        if success:
            chosen[route.status_code or 200] = success
        route.responses = {**chosen, **route.responses}


for _router in ROUTERS:
    _describe_routes(_router.routes)


HOOKS_PATH = "/hooks/{agent}"
"""Where an agent's ``http`` hooks POST their events (docs/agents.md)."""


def _hook_endpoint(
    served: Served, store: str
) -> Callable[[Request], Awaitable[Response]]:
    """``POST /hooks/AGENT``: one hook event of AGENT (Claude Code's ``http``
    hooks), answered as ``devs hook AGENT`` answers it, in a thread (git and
    the store are blocking). Behind the API token like every path."""

    async def answer(request: Request) -> Response:
        from devs.adapters.hooks.registry import AGENTS, load
        from devs.adapters.hooks.runner import over_http

        agent = request.path_params["agent"]
        posting = [name for name in AGENTS if load(name).http]
        if agent not in posting:
            msg = (
                f"no http hooks for agent {agent[:40]!r}: "
                f"{', '.join(posting)} POST their events here"
            )
            raise InvalidInput(msg, field="agent")
        raw = await request.body()
        status, body = await run_in_threadpool(
            over_http, agent, raw, served.service, store, dict(os.environ)
        )
        return Response(body, status, media_type="application/json")

    return answer


class McpEndpoint:
    """``/mcp``: the MCP server (:mod:`devs.adapters.mcp`) over streamable
    HTTP, stateless and answering in JSON (any worker answers any request),
    behind the app's token like every other path. Its commands run on the
    worker's writer thread, as the HTTP API's do.

    The MCP SDK's session manager may run once only: a new MCP server is
    built each time the app starts (a test may start one app twice). Without
    a token, DNS-rebinding protection admits only loopback ``Host`` and
    ``Origin`` headers; with one, the token is the protection (a page in a
    browser cannot send it to another origin)."""

    def __init__(self, served: Served, *, guarded: bool) -> None:
        self.served = served
        self.guarded = guarded
        self._endpoint: ASGIApp | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        from mcp.server.transport_security import TransportSecuritySettings

        from devs.adapters.mcp import build_server

        served = self.served
        # Without a token, anyone on this machine may call it: no run_gate
        # (it runs the caller's command).
        server = build_server(
            lambda: served.service,
            commands=served.writer.run,
            run_gates=self.guarded,
        )
        security = (
            TransportSecuritySettings(enable_dns_rebinding_protection=False)
            if self.guarded
            else None
        )
        sub = server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            transport_security=security,
        )
        endpoint = sub.routes[0].app  # type: ignore[attr-defined]
        async with server.session_manager.run():
            self._endpoint = endpoint
            try:
                yield
            finally:
                self._endpoint = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self._endpoint
        if endpoint is None:
            answer = error_response(
                503, "unavailable", "the MCP server starts with the app"
            )
            await answer(scope, receive, send)
            return
        await endpoint(scope, receive, send)


# ------------------------------------------------------------------ serving


def app_from_env() -> FastAPI:
    """The app ``devs serve`` runs in each worker, opened with the
    environment's settings (:class:`devs.adapters.config.Settings`): the
    database, the token (``DEVS_API_TOKEN``), the read-your-writes bound
    (``DEVS_READ_WAIT``), the ``Host`` names it answers to
    (``DEVS_ALLOWED_HOSTS``) and the largest body (``DEVS_MAX_BODY_BYTES``)."""
    settings = Settings()
    token = settings.api_token.get_secret_value() if settings.api_token else None
    secret = settings.console_secret
    # Beside a notifier process of ``devs serve``, the workers send nothing.
    notify = None if os.environ.get(NOTIFIER_ENV) == EXTERNAL else notify_settings()
    return create_app(
        lambda: open_service(settings),
        token=token,
        read_wait=settings.read_wait,
        console_secret=secret.get_secret_value() if secret else None,
        notify=notify,
        allowed_hosts=settings.allowed_hosts,
        max_body_bytes=settings.max_body_bytes,
        hook_store=store_identity(settings),
    )
