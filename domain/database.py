"""Which database the service uses: ``DEVS_DATABASE_URL``, or SQLite.

``DEVS_DATABASE_URL`` is a libpq URL (``postgresql://user:pw@host:5432/db``,
or ``postgresql://user@/db?host=/path/to/socket/dir``); it selects
eventsourcing's own PostgreSQL persistence with its ``POSTGRES_*`` settings.
Without it the service uses SQLite (``DEVS_DB``), unless eventsourcing's
``PERSISTENCE_MODULE=eventsourcing.postgres`` is set with those settings.
"""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

from devs.domain.errors import InvalidInput

DATABASE_URL_ENV = "DEVS_DATABASE_URL"
READ_WAIT_ENV = "DEVS_READ_WAIT"
PROJECTIONS_ENV = "DEVS_PROJECTIONS"
"""PostgreSQL: ``runner`` (fold the log in this process) or ``external``."""
DEFAULT_READ_WAIT = 5.0
POSTGRES_FACTORY = "devs.adapters.postgres:PostgresFactory"
"""eventsourcing's PostgreSQL factory, its tables created one process at a time."""
POSTGRES_MODULES = (
    POSTGRES_FACTORY,
    "eventsourcing.postgres",
    "eventsourcing.postgres:PostgresFactory",
)


def postgres_env(url: str) -> dict[str, str]:
    """eventsourcing's PostgreSQL settings for the libpq URL ``url``.

    ``InvalidInput`` (field ``DEVS_DATABASE_URL``) names what is wrong; the
    URL's password is never repeated.
    """
    try:
        parts = urlsplit(url)
        port_in_url = parts.port
    except ValueError as error:
        msg = (
            f"{DATABASE_URL_ENV} is not a URL libpq reads ({_without_password(error)})"
        )
        raise InvalidInput(msg, field=DATABASE_URL_ENV) from None
    if parts.scheme not in ("postgresql", "postgres"):
        msg = (
            f"{DATABASE_URL_ENV} must start with postgresql://, "
            f"got a {parts.scheme or 'schemeless'!r} URL"
        )
        raise InvalidInput(msg, field=DATABASE_URL_ENV)
    query = {name: values[-1] for name, values in parse_qs(parts.query).items()}
    settings = {
        "host": query.get("host") or unquote(parts.hostname or ""),
        "port": query.get("port") or str(port_in_url or 5432),
        "user": query.get("user") or unquote(parts.username or ""),
        "password": query.get("password") or unquote(parts.password or ""),
        "dbname": query.get("dbname") or unquote(parts.path.lstrip("/")),
    }
    missing = [name for name in ("host", "user", "dbname") if not settings[name]]
    if missing:
        msg = (
            f"{DATABASE_URL_ENV} names no {' and no '.join(missing)} "
            "(postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME, or "
            "postgresql://USER@/DBNAME?host=/socket/dir)"
        )
        raise InvalidInput(msg, field=DATABASE_URL_ENV)
    if not settings["port"].isdigit() or not 0 < int(settings["port"]) < 65536:
        msg = f"{DATABASE_URL_ENV} has a port out of range [1, 65535]"
        raise InvalidInput(msg, field=DATABASE_URL_ENV)
    return {
        "PERSISTENCE_MODULE": POSTGRES_FACTORY,
        "POSTGRES_DBNAME": settings["dbname"],
        "POSTGRES_HOST": settings["host"],
        "POSTGRES_PORT": settings["port"],
        "POSTGRES_USER": settings["user"],
        "POSTGRES_PASSWORD": settings["password"],
    }


def _without_password(error: ValueError) -> str:
    return str(error).split(":", 1)[0]


def read_wait(value: str | None) -> float:
    """``DEVS_READ_WAIT``: how long a query waits for the read models, in
    seconds in (0, 300] (default 5); ``InvalidInput`` otherwise."""
    try:
        wait = DEFAULT_READ_WAIT if value is None else float(value)
    except ValueError:
        wait = -1.0
    if not 0 < wait <= 300:
        msg = f"{READ_WAIT_ENV} must be a number of seconds in (0, 300], got {value!r}"
        raise InvalidInput(msg, field=READ_WAIT_ENV)
    return wait
