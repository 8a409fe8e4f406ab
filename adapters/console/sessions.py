"""Signing in and out: the session cookie (signed with a key derived from
the operator's current token hash, so a rotation or a removal ends its
sessions), who a request is signed in as, the sign-in page, the static
files, and the console's 404 page for any other address."""

from __future__ import annotations

import base64
import binascii
import hashlib
from importlib.resources import files

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from itsdangerous import BadSignature, SignatureExpired, TimestampSigner

from devs.adapters.console.pages import (
    COOKIE,
    HEADERS,
    OPERATOR_STATE,
    PREFIX,
    SESSION_SECONDS,
    AppConsole,
    Console,
    ConsoleRoute,
    in_thread,
    page,
    read_form,
    refusal,
    refused_origin,
    same_origin,
)
from devs.domain import NotFound, RecoveryService
from devs.domain.operators import TOKEN_SHAPE

STATIC = {"console.js": "text/javascript", "console.css": "text/css"}
"""The console's only script and style sheet, served from this package."""

router = APIRouter(route_class=ConsoleRoute)
fallback = APIRouter(route_class=ConsoleRoute)
"""The 404 page for every other address: included after every other route."""


def _signer(key: bytes) -> TimestampSigner:
    return TimestampSigner(
        key, salt="devs-console-session", digest_method=hashlib.sha256
    )


def session_cookie(service: RecoveryService, name: str, secret: bytes) -> str:
    """A signed session for operator ``name``."""
    key = service.roster().key_of(name, secret)
    if key is None:
        raise NotFound(f"unknown operator {name!r}")
    encoded = base64.urlsafe_b64encode(name.encode()).rstrip(b"=")
    return _signer(key).sign(encoded).decode("ascii")


def session_operator(
    service: RecoveryService, cookie: str | None, secret: bytes
) -> str | None:
    """The operator a session cookie was signed for, if it is still good:
    signed with that operator's current key, at most
    :data:`SESSION_SECONDS` old."""
    if not cookie or len(cookie) > 1_000:
        return None
    encoded = cookie.split(".", 1)[0]
    try:
        name = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    key = service.roster().key_of(name, secret)
    if key is None:
        return None
    try:
        _signer(key).unsign(cookie, max_age=SESSION_SECONDS)
    except (BadSignature, SignatureExpired):
        return None
    return name


async def operator_of(request: Request, console: Console) -> str | None:
    """Who ``request`` is signed in as (kept in ``request.state`` for a
    refusal page's header); ``None``: nobody."""
    cookie = request.cookies.get(COOKIE)
    if not cookie:
        return None
    service = console.service_of()
    name = await in_thread(lambda: session_operator(service, cookie, console.key))
    setattr(request.state, OPERATOR_STATE, name)
    return name


@router.get("/static/{name}")
async def static(name: str) -> Response:
    media = STATIC.get(name)
    if media is None:
        return Response("not found", 404, media_type="text/plain")
    content = (files("devs.adapters.console") / "static" / name).read_bytes()
    return Response(
        content,
        media_type=media,
        headers={
            "Cache-Control": "max-age=300",
            "X-Content-Type-Options": "nosniff",
        },
    )


@router.get("/login")
async def login_page(request: Request) -> Response:
    return page(request, "login.html", title="Sign in", operator=None)


@router.post("/login")
async def login(request: Request, console: AppConsole) -> Response:
    if not same_origin(request):
        return refused_origin()
    token = (await read_form(request)).get("token", "").strip()
    service = console.service_of()
    name = None
    if TOKEN_SHAPE.fullmatch(token):
        name = await in_thread(lambda: service.roster().holder(token))
    if name is None:
        return page(
            request,
            "login.html",
            401,
            title="Sign in",
            operator=None,
            error="That token is not an operator's token (it may have been "
            "rotated, or its operator removed). Ask for a new one: "
            "devs operator rotate NAME.",
        )
    signed = name
    cookie = await in_thread(lambda: session_cookie(service, signed, console.key))
    answer = RedirectResponse(f"{PREFIX}/", 303, headers=HEADERS)
    answer.set_cookie(
        COOKIE,
        cookie,
        max_age=SESSION_SECONDS,
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return answer


@router.post("/logout")
async def logout(request: Request) -> Response:
    if not same_origin(request):
        return refused_origin()
    answer = RedirectResponse(f"{PREFIX}/login", 303, headers=HEADERS)
    answer.delete_cookie(COOKIE, path=PREFIX)
    return answer


@router.get("")
async def bare() -> Response:
    return RedirectResponse(f"{PREFIX}/", 307, headers=HEADERS)


@fallback.api_route("/{rest:path}", methods=["GET", "POST"])
async def unknown(request: Request, rest: str, console: AppConsole) -> Response:
    """Any other address under the console: a 404 page, not JSON."""
    operator = await operator_of(request, console)
    return refusal(404, "There is no such page in the console.", operator=operator)
