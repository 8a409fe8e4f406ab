"""Who is calling: the service's bearer token or an operator's, checked
before anything else reads the request; and the actor a human action names."""

from __future__ import annotations

import hmac
import math

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from devs.adapters.http.contract import (
    CONSOLE_PREFIX,
    DOCS_ASSETS,
    DOCS_PATHS,
    STORE_RETRY_AFTER,
    WELL_KNOWN,
)
from devs.adapters.http.dispatch import Served
from devs.adapters.http.errors import error_response
from devs.domain import (
    Forbidden,
    InvalidInput,
    RecoveryService,
    StoreError,
)
from devs.domain.operators import TOKEN_PREFIX, TOKEN_SHAPE


def _open(path: str) -> bool:
    """Paths served without the token: liveness, the API's documentation
    (a browser cannot send the token for a page's scripts; Swagger UI's
    "Authorize" sends it with each call it makes) and the console, whose
    pages check their own session cookie."""
    return (
        path == "/healthz"
        or path in DOCS_PATHS
        or path.startswith(DOCS_ASSETS)
        or path.startswith(WELL_KNOWN)
        or path == CONSOLE_PREFIX
        or path.startswith(CONSOLE_PREFIX + "/")
    )


OPERATOR_PREFIX = TOKEN_PREFIX.encode()
OPERATOR_STATE = "devs_operator"
"""Where :class:`Callers` leaves the name of the operator whose token a
request carries (``request.state``); absent for the service token."""


def bearer_credentials(given: bytes) -> bytes | None:
    """The token of an ``Authorization`` value whose scheme is Bearer, in any
    case (``bearer``, ``BEARER``: a scheme is case-insensitive, RFC 9110
    section 11.1), after the spaces that follow the scheme; ``None`` for
    another scheme or none."""
    scheme, space, rest = given.partition(b" ")
    if not space or scheme.lower() != b"bearer":
        return None
    return rest.lstrip(b" ")


class Callers:
    """Who is calling. A plain ASGI middleware: a ``@app.middleware("http")``
    function costs about 0.4 ms per request here.

    - ``Authorization: Bearer <DEVS_API_TOKEN>`` (the scheme in any case, the
      token compared in constant time) is the service: an agent or its
      orchestrator;
    - ``Authorization: Bearer devs_op_…`` is an operator, a person: the
      roster is read as the store holds it now (in a thread: never on the
      loop), and the operator's name is left in ``request.state``; a token
      that is unknown, rotated or removed is a 401;
    - anything else is a 401 when the service has a token, and no one in
      particular when it has none.

    ``/healthz``, the documentation and the console pass through (the
    console's pages check their own session cookie)."""

    def __init__(self, app: ASGIApp, expected: bytes | None, served: Served) -> None:
        self.app = app
        self.expected = expected
        """The service's token itself (without the scheme)."""
        self.served = served

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _open(scope["path"]):
            given = b""
            for name, value in scope["headers"]:
                if name == b"authorization":
                    given = value
                    break
            credentials = bearer_credentials(given)
            expected = self.expected
            if (
                expected is not None
                and credentials is not None
                and hmac.compare_digest(credentials, expected)
            ):
                pass
            elif credentials is not None and credentials.startswith(OPERATOR_PREFIX):
                token = credentials.decode("latin-1")
                try:
                    # A token of another shape is no one's: refused without
                    # reading the roster.
                    operator = (
                        await self.served.operator_of(token)
                        if TOKEN_SHAPE.fullmatch(token)
                        else None
                    )
                except StoreError as error:
                    answer = error_response(503, StoreError.kind, str(error))
                    answer.headers["Retry-After"] = str(math.ceil(STORE_RETRY_AFTER))
                    await answer(scope, receive, send)
                    return
                if operator is None:
                    answer = error_response(
                        401,
                        "unauthorized",
                        "the operator token is unknown, was rotated or its "
                        "operator removed: `devs operator rotate NAME` gives a "
                        "new one",
                    )
                    answer.headers["WWW-Authenticate"] = "Bearer"
                    await answer(scope, receive, send)
                    return
                scope.setdefault("state", {})[OPERATOR_STATE] = operator
            elif expected is not None:
                answer = error_response(
                    401,
                    "unauthorized",
                    "the API token is missing or wrong: send DEVS_API_TOKEN in "
                    "the Authorization header, as a bearer token (or an "
                    "operator's token)",
                )
                answer.headers["WWW-Authenticate"] = "Bearer"
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


def acting(service: RecoveryService, operator: str | None, given: str | None) -> str:
    """Who a human action over HTTP is recorded under, or why it is refused.

    With an operator's token: that operator (``actor`` may be left out; one
    that names someone else is :class:`Forbidden`). Without one, once any
    operator exists: :class:`Forbidden` (the service's token is the agents';
    it cannot answer for a person). With no operator at all, as before the
    roster: the body's ``actor``, required."""
    if operator is not None:
        if operator not in service.roster().members:  # removed since its request
            msg = f"operator {operator!r} was removed; nothing was written"
            raise Forbidden(msg)
        if given is not None and given != operator:
            msg = (
                f"actor {given!r} is not the operator whose token was sent "
                f"({operator!r}): leave actor out, or send {given!r}'s own "
                "token; nothing was written"
            )
            raise Forbidden(msg)
        return operator
    if service.roster().members:
        msg = (
            "a human action needs an operator's own token, sent as the bearer "
            "token, once operators exist (`devs operator add NAME` makes one): "
            "the service token, which agents hold, cannot answer for a person; "
            "nothing was written"
        )
        raise Forbidden(msg)
    if given is None:
        msg = "actor is required: name who acts (or send an operator's token)"
        raise InvalidInput(msg, field="actor")
    return given


def _operator(request: Request) -> str | None:
    name: str | None = getattr(request.state, OPERATOR_STATE, None)
    return name
