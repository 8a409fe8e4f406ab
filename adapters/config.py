"""Where the service's configuration lives: its settings, the choice of
backend, and the assembly of a :class:`~devs.domain.RecoveryService`.

Every entry point opens its service here (the CLI, ``devs serve``, the HTTP
app, ``devs.testing``, examples, benchmarks, tests), because the domain names
no database, URL or file: :class:`Settings` reads and validates the
environment once, :func:`open_service` opens a service, and :func:`assemble`
turns its env into eventsourcing's (also reached by ``RecoveryService()``
through the ``devs.assembly`` entry point). docs/configuration.md lists the
settings and backends; docs/architecture.md, the assembly.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from pydantic import SecretStr, ValidationError, field_validator
from pydantic_settings import (
    NoDecode,
    SettingsConfigDict,
)

from devs.adapters.store import errors
from devs.domain.errors import InvalidInput
from devs.domain.policy import EnvironSettings, Policy
from devs.domain.ports import (
    DEFAULT_READ_WAIT,
    PROJECTIONS_KEY,
    READ_MODELS_TOPIC,
    READ_WAIT_KEY,
)

if TYPE_CHECKING:
    from devs.domain.application import RecoveryService

DB_ENV = "DEVS_DB"
DEFAULT_DB = "devs_state.sqlite"
DATABASE_URL_ENV = "DEVS_DATABASE_URL"
READ_WAIT_ENV = READ_WAIT_KEY
PROJECTIONS_ENV = PROJECTIONS_KEY
EXTERNAL = "external"
NOTIFIER_ENV = "DEVS_NOTIFIER"
"""Set to ``external`` by ``devs serve`` for its workers when a notifier
process of its own sends the outbox's messages and sweeps the deadlines (the
workers then run neither); unset, each app runs them in a thread."""
TOKEN_ENV = "DEVS_API_TOKEN"
NICENESS_ENV = "DEVS_WORKER_NICENESS"
STORE_TIMEOUT_ENV = "DEVS_STORE_TIMEOUT"
DEFAULT_STORE_TIMEOUT = 5.0
MAX_STORE_TIMEOUT = 60.0
ACCESS_LOG_ENV = "DEVS_ACCESS_LOG"
ALLOWED_HOSTS_ENV = "DEVS_ALLOWED_HOSTS"
MAX_ALLOWED_HOSTS = 100
ANY_HOST = "*"
"""``DEVS_ALLOWED_HOSTS=*``: every ``Host`` is answered (a proxy in front
checks it)."""
MAX_BODY_ENV = "DEVS_MAX_BODY_BYTES"
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""A gate's output is kept up to 10,000,000 characters (``OUTPUT_MAX``) and a
hook reads events up to 64 MiB: a gate body that large, every character of
its output escaped, still fits."""
BODY_BYTES_RANGE = (1024, 1024 * 1024 * 1024)
MAX_HEADER_ENV = "DEVS_MAX_HEADER_BYTES"
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
HEADER_BYTES_RANGE = (1024, 1024 * 1024)
HEADER_TIMEOUT_ENV = "DEVS_HEADER_TIMEOUT"
DEFAULT_HEADER_TIMEOUT = 10.0
MAX_HEADER_TIMEOUT = 300.0
BODY_TIMEOUT_ENV = "DEVS_BODY_TIMEOUT"
DEFAULT_BODY_TIMEOUT = 30.0
MAX_BODY_TIMEOUT = 300.0
MAX_CONNECTIONS_ENV = "DEVS_MAX_CONNECTIONS"
DEFAULT_MAX_CONNECTIONS = 1000
CONNECTIONS_RANGE = (16, 1_000_000)
DEFAULT_NICENESS = 5
MAX_NICENESS = 19
MEMORY = ":memory:"
"""``DEVS_DB=:memory:``: a fresh database in this process's memory."""

SQLITE_FACTORY = "devs.adapters.store.persistence:SQLiteFactory"
POSTGRES_FACTORY = "devs.adapters.store.postgres:PostgresFactory"
"""eventsourcing's PostgreSQL factory, its tables created one process at a time."""
POSTGRES_MODULES = (
    POSTGRES_FACTORY,
    "eventsourcing.postgres",
    "eventsourcing.postgres:PostgresFactory",
)
SQLITE_READ_MODELS = "devs.projections.sqlite:SQLiteReadModels"
POSTGRES_READ_MODELS = "devs.projections.postgres:PostgresReadModels"
CODEC = {
    "MAPPER_TOPIC": "devs.adapters.store.persistence:PydanticMapper",
    "TRANSCODER_TOPIC": "devs.adapters.store.persistence:OrjsonTranscoder",
}
RENAMED_TOPICS = {
    "devs.adapters.persistence:SQLiteFactory": SQLITE_FACTORY,
    "devs.adapters.postgres:PostgresFactory": POSTGRES_FACTORY,
    "devs.adapters.persistence:PydanticMapper": CODEC["MAPPER_TOPIC"],
    "devs.adapters.persistence:OrjsonTranscoder": CODEC["TRANSCODER_TOPIC"],
}
"""Topics the settings of 0.1 named, before the store's modules moved to
``devs.adapters.store`` (docs/configuration.md gave them): read as today's."""
SQLITE_DEFAULTS = {"SQLITE_LOCK_TIMEOUT": "30"}
POSTGRES_DEFAULTS = {"POSTGRES_POOL_SIZE": "2", "POSTGRES_MAX_OVERFLOW": "8"}
"""Connections per process: eventsourcing opens its pool's size up front."""


class Backend(StrEnum):
    """Where the log and the read models are kept."""

    SQLITE = "sqlite"  # a SQLite file
    MEMORY = "memory"  # a SQLite database in this process's memory
    POSTGRES = "postgres"  # a PostgreSQL database


class Projections(StrEnum):
    """``DEVS_PROJECTIONS``: who folds the PostgreSQL read models."""

    RUNNER = "runner"  # a projection runner thread in each process
    EXTERNAL = "external"  # other processes (``devs project``)


class Settings(EnvironSettings):
    """The service's settings: ``Settings()`` reads ``os.environ``,
    ``Settings.from_environ(mapping)`` a mapping, ``Settings(db=...)`` takes
    values in code (those win over the environment). Invalid values are
    ``InvalidInput`` with ``field`` the variable's name."""

    model_config = SettingsConfigDict(
        env_prefix="DEVS_", case_sensitive=True, frozen=True
    )

    db: str = DEFAULT_DB
    """``DEVS_DB``: the SQLite file, or ``:memory:``."""
    database_url: SecretStr | None = None
    """``DEVS_DATABASE_URL``: a libpq URL; PostgreSQL instead of SQLite."""
    read_wait: float = DEFAULT_READ_WAIT
    """``DEVS_READ_WAIT``: how long a query waits for the read models, in
    seconds in (0, 300]."""
    projections: Projections = Projections.RUNNER
    """``DEVS_PROJECTIONS``: on PostgreSQL, who folds the read models."""
    api_token: SecretStr | None = None
    """``DEVS_API_TOKEN``: the bearer token the HTTP service asks for."""
    console_secret: SecretStr | None = None
    """``DEVS_CONSOLE_SECRET``: the key the console's sessions are signed
    with (mixed with each operator's token hash); ``devs serve`` makes one
    for its workers when it is unset."""
    worker_niceness: int = DEFAULT_NICENESS
    """``DEVS_WORKER_NICENESS``: how much nicer than the projector the
    workers of ``devs serve`` run on PostgreSQL, in [0, 19]."""
    store_timeout: float = DEFAULT_STORE_TIMEOUT
    """``DEVS_STORE_TIMEOUT``: on PostgreSQL, the longest a command or a
    query waits in all for a connection to the database, in seconds in
    (0, 60]; past it, the store is unavailable (HTTP 503)."""
    access_log: bool = False
    """``DEVS_ACCESS_LOG``: ``devs serve`` logs each request (``1``/``on``/
    ``true`` or ``0``/``off``/``false``), its secrets redacted."""
    allowed_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    """``DEVS_ALLOWED_HOSTS``: the ``Host`` names (``name`` or ``name:port``,
    comma-separated; ``*``: any) ``devs serve`` answers besides the address
    a connection arrived at and the loopback names (:func:`allowed_hosts`)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """``DEVS_MAX_BODY_BYTES``: the largest request body, in bytes; a larger
    one is a 413, refused unread."""
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    """``DEVS_MAX_HEADER_BYTES``: the largest request line and headers
    together, in bytes; larger is a 431."""
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    """``DEVS_HEADER_TIMEOUT``: how long a connection has, from its opening
    or its request's first byte, to send the request line and headers, in
    seconds in (0, 300]; then it is closed (408)."""
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    """``DEVS_BODY_TIMEOUT``: how long a request's body has, from the end of
    its headers, to arrive whole, in seconds in (0, 300], a second more for
    each 16 KiB of it received; then the connection is closed (408)."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """``DEVS_MAX_CONNECTIONS``: open connections per worker of ``devs
    serve``; past it, the oldest idle connection is closed for the new one."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise _invalid(error) from None

    @field_validator("db", mode="before")
    @classmethod
    def _db(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and not value.strip()):
            return DEFAULT_DB  # unset and empty alike: the default file
        if isinstance(value, Path):
            value = str(value)
        if isinstance(value, str) and ("\x00" in value or not value.isprintable()):
            msg = f"{DB_ENV} must be a file path without control characters"
            raise ValueError(msg)
        return value

    @field_validator("database_url", mode="before")
    @classmethod
    def _url(cls, value: Any) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if value is None or (isinstance(value, str) and not value.strip()):
            return None  # unset and empty alike: SQLite
        if isinstance(value, str):
            postgres_env(value.strip())  # refused here, naming what is wrong
            return value.strip()
        return value

    @field_validator("api_token", mode="before")
    @classmethod
    def _token(cls, value: Any) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if value is None or value == "":
            return None  # unset: no token asked for
        if isinstance(value, str):
            check_token(value)
        return value

    @field_validator("console_secret", mode="before")
    @classmethod
    def _console_secret(cls, value: Any) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if value is None or value == "":
            return None
        if isinstance(value, str):
            check_secret(value)
        return value

    @field_validator("read_wait", mode="before")
    @classmethod
    def _read_wait(cls, value: Any) -> Any:
        return _seconds(value, READ_WAIT_ENV, DEFAULT_READ_WAIT, 300)

    @field_validator("projections", mode="before")
    @classmethod
    def _projections(cls, value: Any) -> Any:
        if value is None or value == "":
            return Projections.RUNNER
        text = value.strip() if isinstance(value, str) else value
        if text not in set(Projections):
            shown = _shown(value)
            msg = f"{PROJECTIONS_ENV} must be one of runner, external, got {shown}"
            raise ValueError(msg)
        return text

    @field_validator("worker_niceness", mode="before")
    @classmethod
    def _niceness(cls, value: Any) -> Any:
        if value is None or value == "":
            return DEFAULT_NICENESS
        text = value.strip() if isinstance(value, str) else str(value)
        if (
            isinstance(value, str | int)
            and not isinstance(value, bool)
            and text.isascii()
            and text.isdigit()
            and int(text) <= MAX_NICENESS
        ):
            return int(text)
        msg = (
            f"{NICENESS_ENV} must be an integer from 0 to {MAX_NICENESS}, "
            f"got {_shown(value)}"
        )
        raise ValueError(msg)

    @field_validator("store_timeout", mode="before")
    @classmethod
    def _store_timeout(cls, value: Any) -> Any:
        return _seconds(
            value, STORE_TIMEOUT_ENV, DEFAULT_STORE_TIMEOUT, MAX_STORE_TIMEOUT
        )

    @field_validator("access_log", mode="before")
    @classmethod
    def _access_log(cls, value: Any) -> Any:
        if value is None or value == "":
            return False
        if isinstance(value, bool):
            return value
        text = value.strip().lower() if isinstance(value, str) else None
        if text in SWITCH_ON:
            return True
        if text in SWITCH_OFF:
            return False
        msg = (
            f"{ACCESS_LOG_ENV} must be on or off (1, true, yes, on / 0, false, "
            f"no, off), got {_shown(value)}"
        )
        raise ValueError(msg)

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _allowed_hosts(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, str):
            return allowed_hosts(value)
        if isinstance(value, list | tuple):
            return allowed_hosts(",".join(str(entry) for entry in value))
        return value

    @field_validator("max_body_bytes", mode="before")
    @classmethod
    def _max_body(cls, value: Any) -> Any:
        return _bytes(value, MAX_BODY_ENV, DEFAULT_MAX_BODY_BYTES, BODY_BYTES_RANGE)

    @field_validator("max_header_bytes", mode="before")
    @classmethod
    def _max_header(cls, value: Any) -> Any:
        return _bytes(
            value, MAX_HEADER_ENV, DEFAULT_MAX_HEADER_BYTES, HEADER_BYTES_RANGE
        )

    @field_validator("max_connections", mode="before")
    @classmethod
    def _max_connections(cls, value: Any) -> Any:
        return _counted(
            value,
            MAX_CONNECTIONS_ENV,
            DEFAULT_MAX_CONNECTIONS,
            CONNECTIONS_RANGE,
            "an integer",
        )

    @field_validator("header_timeout", mode="before")
    @classmethod
    def _header_timeout(cls, value: Any) -> Any:
        return _seconds(
            value, HEADER_TIMEOUT_ENV, DEFAULT_HEADER_TIMEOUT, MAX_HEADER_TIMEOUT
        )

    @field_validator("body_timeout", mode="before")
    @classmethod
    def _body_timeout(cls, value: Any) -> Any:
        return _seconds(value, BODY_TIMEOUT_ENV, DEFAULT_BODY_TIMEOUT, MAX_BODY_TIMEOUT)

    @property
    def backend(self) -> Backend:
        """Which backend these settings open."""
        if self.database_url is not None:
            return Backend.POSTGRES
        if _in_memory(self.db):
            return Backend.MEMORY
        return Backend.SQLITE

    @property
    def where(self) -> str:
        """The store in words, for an error message (never a password)."""
        if self.backend is Backend.POSTGRES:
            return f"the PostgreSQL database of {DATABASE_URL_ENV}"
        if self.backend is Backend.MEMORY:
            return "the in-memory database"
        return f"the database {self.db!r}"

    def environ(self) -> dict[str, str]:
        """These settings as the service's env variables (what
        :func:`assemble` reads back)."""
        url = self.database_url
        return {
            DB_ENV: self.db,
            DATABASE_URL_ENV: url.get_secret_value() if url is not None else "",
            READ_WAIT_ENV: repr(self.read_wait),
            PROJECTIONS_ENV: str(self.projections),
            STORE_TIMEOUT_ENV: repr(self.store_timeout),
        }


def _integer(value: Any, default: int) -> int | None:
    """``value`` as a whole number (``default`` when unset or empty; an
    integer or its decimal digits, ``_`` allowed between them), else
    ``None``."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = value.strip().replace("_", "") if isinstance(value, str) else ""
    return int(text) if text.isascii() and text.isdigit() else None


def _counted(
    value: Any, variable: str, default: int, bounds: tuple[int, int], what: str
) -> int:
    """A whole number in ``bounds``, or a ``ValueError`` naming ``variable``
    and saying ``what`` it must be ("a number of bytes")."""
    low, high = bounds
    number = _integer(value, default)
    if number is None or not low <= number <= high:
        msg = f"{variable} must be {what} from {low:,} to {high:,}, got {_shown(value)}"
        raise ValueError(msg)
    return number


def _bytes(value: Any, variable: str, default: int, bounds: tuple[int, int]) -> int:
    """A byte count in ``bounds``, or a ``ValueError`` naming ``variable``."""
    return _counted(value, variable, default, bounds, "a number of bytes")


_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*")


def host_and_port(text: str) -> tuple[str, int | None] | None:
    """A ``Host`` value (or an ``Origin``'s authority) split and normalised:
    the name or address in lower case without a trailing dot (an IPv6
    address without its brackets), and the port if one is given; ``None``
    when it is neither a host name nor an IP address, or its port is out of
    range."""
    text = text.strip().lower()
    port_text: str | None = None
    if text.startswith("["):
        address, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        name = address
        port_text = rest[1:] if rest else None
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return None
    else:
        name, colon, given = text.partition(":")
        port_text = given if colon else None
        if name.endswith(".") and len(name) > 1:  # the root's dot: the same name
            name = name[:-1]
        if len(name) > 253 or not _HOST_NAME.fullmatch(name):
            return None
    if port_text is None:
        return name, None
    if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5):
        return None
    port = int(port_text)
    return (name, port) if 0 < port < 65536 else None


def allowed_hosts(text: str) -> tuple[str, ...]:
    """``DEVS_ALLOWED_HOSTS`` read: comma-separated host names or addresses,
    each with or without a port (``devs.example.com``, ``10.0.0.5:8765``,
    ``[2001:db8::1]``), or ``*`` alone for any; normalised (lower case, an
    IPv6 address in brackets). A ``ValueError`` naming the variable for an
    entry that is none of those."""
    entries: list[str] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        if entry == ANY_HOST:
            entries.append(ANY_HOST)
            continue
        parsed = host_and_port(entry)
        if parsed is None:
            msg = (
                f"{ALLOWED_HOSTS_ENV} has {_shown(entry)}, which is not a host "
                "name or address with an optional port (devs.example.com, "
                "devs.example.com:8443, 10.0.0.5, [2001:db8::1]:8765)"
            )
            raise ValueError(msg)
        name, port = parsed
        shown = f"[{name}]" if ":" in name else name
        entries.append(shown if port is None else f"{shown}:{port}")
    if len(entries) > MAX_ALLOWED_HOSTS:
        msg = (
            f"{ALLOWED_HOSTS_ENV} lists {len(entries)} hosts; the limit is "
            f"{MAX_ALLOWED_HOSTS}"
        )
        raise ValueError(msg)
    if ANY_HOST in entries and len(entries) > 1:
        msg = f"{ALLOWED_HOSTS_ENV}: * (any host) stands alone"
        raise ValueError(msg)
    return tuple(dict.fromkeys(entries))


SWITCH_ON = frozenset({"1", "true", "yes", "on"})
SWITCH_OFF = frozenset({"0", "false", "no", "off"})

TOKEN_MIN = 16
"""The fewest characters an API token may have."""


def _unfit(value: str, minimum: int) -> str | None:
    """What keeps ``value`` from being a bearer token or a key (blank; a
    space, control or non-ASCII character; fewer than ``minimum``
    characters), in words that never repeat it; ``None`` if nothing does."""
    if not value.strip():
        return "is blank"
    if not (value.isascii() and value.isprintable()) or any(
        character.isspace() for character in value
    ):
        return "has spaces, control or non-ASCII characters"
    if len(value) < minimum:
        return f"has {len(value)} characters"
    return None


def check_token(token: str) -> str:
    """``token`` if it can be an API token: at least :data:`TOKEN_MIN`
    characters of visible ASCII, no space (a bearer token is compared exactly,
    byte for byte); ``InvalidInput`` naming ``DEVS_API_TOKEN`` otherwise,
    never repeating the token."""
    problem = _unfit(token, TOKEN_MIN)
    if problem is None:
        return token
    msg = (
        f"{TOKEN_ENV} {problem}; a token is at least {TOKEN_MIN} visible ASCII "
        "characters without spaces (say, openssl rand -hex 24)"
    )
    raise ValueError(msg)


CONSOLE_SECRET_ENV = "DEVS_CONSOLE_SECRET"
CONSOLE_SECRET_MIN = 32


def check_secret(secret: str) -> str:
    """``secret`` if it can sign the console's sessions: at least
    :data:`CONSOLE_SECRET_MIN` visible ASCII characters, no space; a
    ``ValueError`` naming ``DEVS_CONSOLE_SECRET`` otherwise, never repeating
    it."""
    problem = _unfit(secret, CONSOLE_SECRET_MIN)
    if problem is None:
        return secret
    msg = (
        f"{CONSOLE_SECRET_ENV} {problem}; it is at least {CONSOLE_SECRET_MIN} "
        "visible ASCII characters without spaces (say, openssl rand -hex 32)"
    )
    raise ValueError(msg)


def _invalid(error: ValidationError) -> InvalidInput:
    """The first of pydantic's errors as ``InvalidInput`` naming the variable."""
    first = error.errors()[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    variable = f"DEVS_{name.upper()}"
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, ValueError):
        return InvalidInput(str(cause), field=variable)
    return InvalidInput(f"{variable} is not valid: {first['msg']}", field=variable)


def _seconds(value: Any, variable: str, default: float, maximum: float) -> float:
    """``value`` as a number of seconds in (0, ``maximum``] (unset or empty:
    ``default``); a ``ValueError`` naming ``variable`` otherwise (NaN too)."""
    if value is None or value == "":
        return default
    try:
        wait = float(value)
    except (TypeError, ValueError):
        wait = -1.0
    if not 0 < wait <= maximum:  # NaN too
        msg = (
            f"{variable} must be a number of seconds in (0, {maximum:g}], "
            f"got {_shown(value)}"
        )
        raise ValueError(msg)
    return wait


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _in_memory(db: str) -> bool:
    return db == MEMORY or "mode=memory" in db


def memory_env() -> dict[str, str]:
    """The ``env`` of a fresh in-memory store that several services of this
    process may share: eventsourcing's SQLite recorders and the same read
    models (the same SQL) in a database of this process alone, named once
    (``file:devs-<uuid>?mode=memory&cache=shared``: every connection of a
    service's pool opens the same database, where a bare ``:memory:`` would
    give each its own), gone with the last service open on it. It never
    follows ``DEVS_DATABASE_URL`` from the environment."""
    return {DB_ENV: _memory_name(), DATABASE_URL_ENV: ""}


def _memory_name() -> str:
    return f"file:devs-{uuid.uuid4().hex}?mode=memory&cache=shared"


def postgres_env(url: str) -> dict[str, str]:
    """eventsourcing's PostgreSQL settings for the libpq URL ``url``.

    ``InvalidInput`` (field ``DEVS_DATABASE_URL``) names what is wrong; the
    URL's password is never repeated.
    """
    try:
        parts = urlsplit(url)
        port_in_url = parts.port
    except ValueError as error:
        reason = str(error).split(":", 1)[0]  # never the URL, nor its password
        msg = f"{DATABASE_URL_ENV} is not a URL libpq reads ({reason})"
        raise InvalidInput(msg, field=DATABASE_URL_ENV) from None
    if parts.scheme not in ("postgresql", "postgres"):
        msg = (
            f"{DATABASE_URL_ENV} must start with postgresql://, "
            f"got a {parts.scheme or 'schemeless'!r} URL"
        )
        raise InvalidInput(msg, field=DATABASE_URL_ENV)
    pairs = parse_qs(parts.query, keep_blank_values=True)
    query = {name: values[-1] for name, values in pairs.items()}
    options = _libpq_options(query)
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
    env = {
        "PERSISTENCE_MODULE": POSTGRES_FACTORY,
        "POSTGRES_DBNAME": settings["dbname"],
        "POSTGRES_HOST": settings["host"],
        "POSTGRES_PORT": settings["port"],
        "POSTGRES_USER": settings["user"],
        "POSTGRES_PASSWORD": settings["password"],
    }
    if options:
        env[LIBPQ_OPTIONS] = urlencode(options)
    return env


LIBPQ_OPTIONS = "POSTGRES_LIBPQ_OPTIONS"
"""The env key of the libpq parameters a ``DEVS_DATABASE_URL`` gives beyond
host, port, user, password and database (``sslmode=require``, ...), URL-encoded;
``devs.adapters.store.postgres.PostgresFactory`` hands them to every connection."""
URL_PARTS = frozenset({"host", "hostaddr", "port", "user", "password", "dbname"})
LIBPQ_PARAMETERS = frozenset(
    {
        "application_name",
        "channel_binding",
        "connect_timeout",
        "gssencmode",
        "keepalives",
        "keepalives_count",
        "keepalives_idle",
        "keepalives_interval",
        "load_balance_hosts",
        "options",
        "passfile",
        "require_auth",
        "sslcert",
        "sslcompression",
        "sslcrl",
        "sslcrldir",
        "sslkey",
        "sslmode",
        "sslnegotiation",
        "sslpassword",
        "sslrootcert",
        "sslsni",
        "ssl_max_protocol_version",
        "ssl_min_protocol_version",
        "target_session_attrs",
        "tcp_user_timeout",
    }
)
"""libpq's connection parameters a URL may set besides its parts
(https://www.postgresql.org/docs/current/libpq-connect.html)."""
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def _libpq_options(query: Mapping[str, str]) -> dict[str, str]:
    """The URL's libpq parameters beyond its parts, checked: an unknown one,
    or an ``sslmode`` libpq does not know, is refused (ignoring it could
    connect without the TLS it asked for)."""
    unknown = sorted(set(query) - URL_PARTS - LIBPQ_PARAMETERS)
    if unknown:
        names = ", ".join(repr(name[:40]) for name in unknown[:5])
        msg = (
            f"{DATABASE_URL_ENV} has a parameter libpq does not know ({names}); "
            "see https://www.postgresql.org/docs/current/libpq-connect.html"
        )
        raise InvalidInput(msg, field=DATABASE_URL_ENV)
    mode = query.get("sslmode")
    if mode is not None and mode not in SSL_MODES:
        msg = (
            f"{DATABASE_URL_ENV} has sslmode={mode[:40]!r}; libpq's modes are "
            f"{', '.join(SSL_MODES)}"
        )
        raise InvalidInput(msg, field=DATABASE_URL_ENV)
    return {
        name: value for name, value in sorted(query.items()) if name in LIBPQ_PARAMETERS
    }


def assemble(environ: Mapping[str, str]) -> dict[str, str]:
    """eventsourcing's settings for a service whose env is ``environ``: the
    ``devs.assembly`` entry point, which ``RecoveryService`` calls with its
    env (its class's, ``os.environ`` and the ``env`` given, merged).

    ``DEVS_DATABASE_URL`` selects PostgreSQL; eventsourcing's own
    ``PERSISTENCE_MODULE=eventsourcing.postgres`` with ``POSTGRES_*`` does
    too. Otherwise SQLite: ``SQLITE_DBNAME`` when given, else ``DEVS_DB``
    (``:memory:``: a fresh in-memory database). eventsourcing settings the
    env gives (``READ_MODELS_TOPIC``, ``SQLITE_LOCK_TIMEOUT``,
    ``POSTGRES_POOL_SIZE``, …) are kept.
    """
    settings = Settings.from_environ(environ)
    errors.install()  # the domain reads the store's errors whatever it is

    def given(key: str) -> str | None:
        value = environ.get(key) or None
        return RENAMED_TOPICS.get(value, value) if value is not None else None

    module = given("PERSISTENCE_MODULE")
    store: dict[str, str]
    if settings.database_url is not None:
        backend = Backend.POSTGRES
        store = postgres_env(settings.database_url.get_secret_value())
    elif module in POSTGRES_MODULES:
        backend = Backend.POSTGRES
        store = {"PERSISTENCE_MODULE": POSTGRES_FACTORY}
    elif module is not None and module != SQLITE_FACTORY:
        backend = Backend.SQLITE  # the caller's own store: the read models say
        store = {}
    else:
        backend = Backend.SQLITE
        name = given("SQLITE_DBNAME") or settings.db
        store = {
            "PERSISTENCE_MODULE": SQLITE_FACTORY,
            "SQLITE_DBNAME": _memory_name() if name == MEMORY else name,
        }
    if backend is Backend.POSTGRES:
        defaults = {READ_MODELS_TOPIC: POSTGRES_READ_MODELS, **POSTGRES_DEFAULTS}
    else:
        defaults = {READ_MODELS_TOPIC: SQLITE_READ_MODELS, **SQLITE_DEFAULTS}
    assembled = {key: given(key) or value for key, value in defaults.items()}
    assembled.update({key: given(key) or value for key, value in CODEC.items()})
    assembled.update(store)
    assembled[READ_WAIT_ENV] = repr(settings.read_wait)
    assembled[PROJECTIONS_ENV] = str(settings.projections)
    assembled[STORE_TIMEOUT_ENV] = repr(settings.store_timeout)
    return assembled


class _Assembly:
    """devs-recovery's :class:`~devs.domain.ports.Assembly`: the
    ``devs.assembly`` entry point, through which a ``RecoveryService``
    constructed directly completes its env (:func:`assemble`) and words a path
    given where its env belongs (:meth:`opening`)."""

    def __call__(self, env: Mapping[str, str], /) -> dict[str, str]:
        return assemble(env)

    def opening(self, path: str, /) -> str:
        return (
            f"open_service(Settings(db={path!r:.200})) (from devs.adapters.config), "
            f"or RecoveryService(env={{{DB_ENV!r}: {path!r:.200}}})"
        )


ASSEMBLY = _Assembly()
"""The ``devs.assembly`` entry point's object (``pyproject.toml``)."""


def open_service(
    settings: Settings | None = None,
    *,
    env: Mapping[str, str] | None = None,
    policy: Policy | None = None,
) -> RecoveryService:
    """A service opened with ``settings`` (default: the environment's,
    ``Settings()``), with ``env`` for eventsourcing settings of its own
    (``{"AGGREGATE_CACHE_MAXSIZE": "0"}``, say), deciding by ``policy``
    (default: the policy the environment sets)."""
    from devs.domain.application import RecoveryService, use_assembly

    use_assembly(ASSEMBLY)  # at hand: no scan of the entry points
    chosen = settings if settings is not None else Settings()
    return RecoveryService(env={**chosen.environ(), **(env or {})}, policy=policy)


def backend_of(service: RecoveryService) -> Backend:
    """Which backend ``service`` keeps its log in."""
    if service.env.get("PERSISTENCE_MODULE") in POSTGRES_MODULES:
        return Backend.POSTGRES
    if _in_memory(str(service.env.get("SQLITE_DBNAME") or "")):
        return Backend.MEMORY
    return Backend.SQLITE


def sqlite_path(service: RecoveryService) -> str:
    """The SQLite database ``service`` keeps its log in (its file, or its
    in-memory name); ``InvalidInput`` on PostgreSQL."""
    if backend_of(service) is Backend.POSTGRES:
        msg = "the service keeps its log in PostgreSQL, not in a SQLite file"
        raise InvalidInput(msg, field="service")
    return str(service.env.get("SQLITE_DBNAME"))
