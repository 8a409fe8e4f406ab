"""The web console: where operators answer the agents (docs/console.md).

Server-rendered pages under ``/console/`` in ``devs serve`` (Jinja2 with
autoescaping, one script and one style sheet of this package, nothing from
another origin), behind a signed session cookie and a same-origin check on
every POST (docs/security.md). The routes are module-level, one router per
part; :func:`mount` adds them to an app with its
:class:`~devs.adapters.console.pages.Console` in ``app.state``, which each
route reaches as a dependency.
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
