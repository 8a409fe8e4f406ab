"""The front door: which ``Host`` a request may name, cross-site requests,
the body's size and time bounds and the security headers, all before
authentication."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
from collections.abc import (
    Sequence,
)
from typing import Any

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from devs.adapters.config import (
    ALLOWED_HOSTS_ENV,
    ANY_HOST,
    MAX_BODY_ENV,
    host_and_port,
)
from devs.adapters.http.contract import (
    API_CSP,
    CONSOLE_PREFIX,
    MCP_PATH,
    SECURITY_HEADERS,
)
from devs.adapters.http.errors import error_response

# ------------------------------------------------------------ the front door

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost"})
"""Names that always mean this machine: a browser never asks DNS for them,
so no page can rebind them to another site."""
DOCS_PAGES = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc"})
DOCS_CSP = (
    "default-src 'none'; script-src 'self' {scripts}; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
"""Swagger UI's and ReDoc's pages: their scripts from this server (no CDN:
fastapi-offline), the page's own inline script by its hash, the styles the
scripts set, and never in a frame."""
INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)


class HostCheck:
    """Which ``Host`` headers this server answers (DNS rebinding: a page of
    ``attacker.example``, its name pointed at this machine, sends
    ``Host: attacker.example``).

    Admitted: the address the connection arrived at (the address ``devs
    serve`` listens on; listening on all addresses, whichever of the
    machine's the client used), ``localhost`` and the loopback addresses, and
    the entries of ``DEVS_ALLOWED_HOSTS`` (a name alone: on any port;
    ``name:port``: on that port; ``*``: any ``Host``). A request without
    ``Host`` (HTTP/1.0; never a browser's) is admitted."""

    def __init__(self, allowed: Sequence[str]) -> None:
        self.any = ANY_HOST in allowed
        self.names: set[str] = set()
        self.pairs: set[tuple[str, int]] = set()
        for entry in allowed:
            parsed = host_and_port(entry) if entry != ANY_HOST else None
            if parsed is None:
                continue
            name, port = parsed
            if port is None:
                self.names.add(name)
            else:
                self.pairs.add((name, port))
        self.listed = ", ".join(allowed) or "none"

    def listed_here(self, name: str, port: int | None) -> bool:
        """Whether ``DEVS_ALLOWED_HOSTS`` names ``name`` (on ``port``; no
        port: 80 or 443, the schemes' own)."""
        if self.any or name in self.names:
            return True
        if port is None:
            return (name, 80) in self.pairs or (name, 443) in self.pairs
        return (name, port) in self.pairs

    def admits(self, host: bytes | None, server: Any) -> bool:
        if self.any or host is None:
            return True
        parsed = host_and_port(host.decode("latin-1"))
        if parsed is None:
            return False
        name, port = parsed
        if name in LOOPBACK_NAMES or self.listed_here(name, port):
            return True
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return False
        if address.is_loopback:
            return True
        if not (isinstance(server, tuple | list) and server):
            return False
        try:
            local = ipaddress.ip_address(str(server[0]).partition("%")[0])
        except ValueError:
            return False
        if isinstance(local, ipaddress.IPv6Address) and local.ipv4_mapped:
            local = local.ipv4_mapped
        return address == local


class FrontDoor:
    """What every request meets first, before its token is looked at (a
    plain ASGI middleware, outside :class:`Callers`):

    - more than one ``Host`` header is a 400 ``duplicate_header`` (this
      check would read one of them, the app and the console's own origin
      check another);
    - a ``Host`` this server does not answer to (:class:`HostCheck`) is a 421
      ``misdirected_request``, naming ``DEVS_ALLOWED_HOSTS``;
    - a body over ``max_body`` bytes is a 413 ``too_large``: by its
      ``Content-Length`` before a byte of it is read, or as soon as a chunked
      body passes the bound; the connection is then closed;
    - a POST (PUT, PATCH, DELETE) from a page of another site (its
      ``Origin`` another origin, or ``null``; without ``Origin``, its
      ``Sec-Fetch-Site`` ``cross-site`` or ``same-site``) is a 403
      ``cross_site`` (the console's forms check their own, answering a page);
    - every answer carries ``X-Content-Type-Options: nosniff``,
      ``X-Frame-Options: DENY`` and a Content-Security-Policy (the
      documentation's pages one their scripts work with), unless it sets its
      own (the 500 Starlette answers outside this middleware, to an
      unexpected exception, sets them itself: :func:`_internal_error`); an
      answer sent before the request's body was read closes the connection
      (the rest of the body is not read).

    The request line's and headers' size and time, the body's time, and the
    connections per worker, are bounded before this, by ``devs serve``'s
    protocol (:mod:`devs.adapters.serving`)."""

    def __init__(
        self, app: ASGIApp, hosts: HostCheck | None, max_body: int | None
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = origin = fetch_site = None
        hosts_sent = 0
        length: int | None = None
        chunked = False
        for name, value in scope["headers"]:
            if name == b"host":
                host = host or value
                hosts_sent += 1
            elif name == b"origin":
                origin = value
            elif name == b"sec-fetch-site":
                fetch_site = value
            elif name == b"content-length":
                length = int(value) if value.isdigit() else None
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
        path: str = scope["path"]
        body = _Body(declared=chunked or bool(length))
        send = _answering(send, path, body)
        if hosts_sent > 1:
            answer = error_response(
                400,
                "duplicate_header",
                f"the request has {hosts_sent} Host headers; HTTP/1.1 allows "
                "one (RFC 9112, section 3.2): refused, nothing was done",
                "Host",
            )
            await answer(scope, receive, send)
            return
        hosts = self.hosts
        if hosts is not None and not hosts.admits(host, scope.get("server")):
            shown = (host or b"").decode("latin-1")[:100]
            answer = error_response(
                421,
                "misdirected_request",
                f"this server does not answer to Host {shown!r}: it answers to "
                "the address it listens on, localhost and the loopback "
                f"addresses, and the names in {ALLOWED_HOSTS_ENV} (now: "
                f"{hosts.listed}); add the name it is reached by (behind a "
                f"proxy, on a public name) to {ALLOWED_HOSTS_ENV}",
                "Host",
            )
            await answer(scope, receive, send)
            return
        limit = self.max_body
        if limit is not None and length is not None and length > limit:
            answer = error_response(
                413, "too_large", _too_large(f"is {length:,} bytes", limit)
            )
            await answer(scope, receive, send)
            return
        # MCP's streamable HTTP: every request's Origin is checked, a GET's
        # (its event stream) as well (the MCP specification's "MUST").
        if (scope["method"] not in SAFE_METHODS or path == MCP_PATH) and not (
            _console(path)
        ):
            refused = _cross_site(origin, fetch_site, host, hosts)
            if refused is not None:
                answer = error_response(
                    403,
                    "cross_site",
                    f"{scope['method']} {path[:200]} was sent by a page of "
                    f"another site ({refused}): refused, nothing was done; a "
                    "browser may send it only from this server's own origin "
                    f"(or one in {ALLOWED_HOSTS_ENV})",
                    "Origin",
                )
                await answer(scope, receive, send)
                return
        if body.declared:
            receive = _counting(receive, body, limit)
        await self.app(scope, receive, send)


class _Body:
    """What :class:`FrontDoor` knows of a request's body."""

    __slots__ = ("declared", "done", "received")

    def __init__(self, *, declared: bool) -> None:
        self.declared = declared
        self.done = not declared
        self.received = 0


def _too_large(what: str, limit: int) -> str:
    return (
        f"the request body {what}; the limit is {limit:,} bytes "
        f"({MAX_BODY_ENV}); nothing was read or done"
    )


def _console(path: str) -> bool:
    return path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/")


def _cross_site(
    origin: bytes | None,
    fetch_site: bytes | None,
    host: bytes | None,
    hosts: HostCheck | None,
) -> str | None:
    """Why a request that changes something comes from another site's page,
    or ``None`` when it does not (its ``Origin`` is this server's own, or a
    name of ``DEVS_ALLOWED_HOSTS``; or it has no ``Origin`` and a
    ``Sec-Fetch-Site`` of ``same-origin`` or ``none``, or neither header:
    not a browser)."""
    if origin is None:
        if fetch_site is not None and fetch_site.lower() in (
            b"cross-site",
            b"same-site",
        ):
            return f"Sec-Fetch-Site: {fetch_site.decode('latin-1')[:20]}"
        return None
    shown = f"Origin: {origin.decode('latin-1')[:100]}"
    if origin == b"null":
        return shown
    _, separator, authority = origin.partition(b"://")
    if not separator or b"/" in authority:
        return shown
    if host is not None and authority.lower() == host.lower():
        return None
    parsed = host_and_port(authority.decode("latin-1"))
    if parsed is not None and hosts is not None and hosts.listed_here(*parsed):
        return None
    return shown


def _counting(receive: Receive, body: _Body, limit: int | None) -> Receive:
    """``receive``, counting the body: past ``limit`` bytes, a 413."""

    async def counted() -> Message:
        message = await receive()
        if message["type"] == "http.request":
            body.received += len(message.get("body", b""))
            if limit is not None and body.received > limit:
                raise StarletteHTTPException(
                    413,
                    _too_large(f"passed {limit:,} bytes", limit),
                    headers={"Connection": "close"},
                )
            if not message.get("more_body", False):
                body.done = True
        elif message["type"] == "http.disconnect":
            body.done = True
        return message

    return counted


def _answering(send: Send, path: str, body: _Body) -> Send:
    """``send``, adding the security headers an answer does not set itself,
    and ``Connection: close`` to an answer sent before the request's body was
    read."""
    docs = path in DOCS_PAGES
    held: list[Message] = []

    def completed(start: Message, content: bytes) -> Message:
        headers = list(start.get("headers", []))
        present = {name.lower() for name, _ in headers}
        for name, value in SECURITY_HEADERS:
            if name not in present:
                headers.append((name, value))
        if b"content-security-policy" not in present:
            if docs:
                hashes = " ".join(
                    "'sha256-"
                    + base64.b64encode(hashlib.sha256(script).digest()).decode()
                    + "'"
                    for script in INLINE_SCRIPT.findall(content)
                )
                policy = DOCS_CSP.format(scripts=hashes).encode()
                headers.append((b"content-security-policy", policy))
            else:
                headers.append((b"content-security-policy", API_CSP))
        if not body.done and b"connection" not in present:
            headers.append((b"connection", b"close"))
        return {**start, "headers": headers}

    async def answer(message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if docs:  # its CSP names its inline script's hash: the body first
                held.append(message)
                return
            await send(completed(message, b""))
            return
        if docs and kind == "http.response.body" and held:
            held.append(message)
            if message.get("more_body", False):
                return
            content = b"".join(part.get("body", b"") for part in held[1:])
            start = held[0]
            held.clear()
            await send(completed(start, content))
            await send({"type": "http.response.body", "body": content})
            return
        await send(message)

    return answer
