"""The web console: where operators answer the agents (docs/console.md).

Server-rendered pages under ``/console/`` in ``devs serve``: Jinja2 with
autoescaping (``templates/``), one small script and one style sheet served
from this package (``static/``, nothing from another origin). An operator
signs in with its token; the session cookie (HttpOnly, SameSite=Strict,
Secure over https) holds the operator's name and a time, signed
(itsdangerous) with a key derived from the hash of the operator's current
token: a rotation or a removal ends its sessions, and every worker of one
database checks it alike.

Every page is sent with a Content-Security-Policy that admits this origin's
script and style only (no inline script, no other origin), and every form
POST must come from this origin (its ``Origin`` header, else its ``Referer``):
another origin's is a 403 and writes nothing. Every answer is recorded with
the signed-in operator as its actor.

The routes are module-level, one router per part: ``sessions`` (sign-in,
the static files, the 404 page), ``inbox``, ``live`` (the server-sent
events), ``tasks``, ``answers``, ``runs`` (and metrics), ``outbox``; ``svg``
draws the charts, ``pages`` holds what they share. :func:`mount` adds them
to an app with the app's :class:`~devs.adapters.console.pages.Console` in
``app.state``, which each route reaches as a dependency.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from fastapi import APIRouter, FastAPI

from devs.adapters.console import answers, inbox, live, outbox, runs, sessions, tasks
from devs.adapters.console.pages import (
    COOKIE,
    PREFIX,
    SESSION_SECONDS,
    STATE,
    Console,
    Writer,
)
from devs.domain import RecoveryService

router = APIRouter(include_in_schema=False)
"""Every console page under :data:`PREFIX`, the 404 page for any other
address last."""
for part in (sessions, inbox, live, tasks, answers, runs, outbox):
    router.include_router(part.router, prefix=PREFIX)
router.include_router(sessions.fallback, prefix=PREFIX)


def mount(
    app: FastAPI,
    service_of: Callable[[], RecoveryService],
    writer: Writer,
    *,
    secret: str | None = None,
) -> None:
    """Add the console's routes to ``app``: ``service_of()`` gives the app's
    service; ``writer.run(call)`` runs a command where the app runs its
    commands (its writer thread); ``secret`` signs the sessions (default: a
    random one, good for this app only)."""
    key = secret.encode() if secret is not None else secrets.token_bytes(32)
    console = Console(service_of, writer, key, live.LogWatch(service_of))
    setattr(app.state, STATE, console)
    app.include_router(router)


__all__ = ["COOKIE", "PREFIX", "SESSION_SECONDS", "Console", "mount", "router"]
