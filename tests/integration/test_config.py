"""One place assembles a service: ``devs.adapters.config``'s settings, its
choice of backend, and ``RecoveryService()`` reaching it by entry point."""

from __future__ import annotations

import ast
import itertools
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devs.adapters import config
from devs.adapters.config import (
    ASSEMBLY,
    Backend,
    Projections,
    Settings,
    assemble,
    backend_of,
    memory_env,
    open_service,
    sqlite_path,
)
from devs.domain import InvalidInput, RecoveryService
from devs.domain.application import ASSEMBLY_GROUP

DOMAIN = Path(__file__).parents[2] / "domain"
SECRET = "s3cret-pw-never-shown"


def test_the_defaults() -> None:
    settings = Settings.from_environ({})
    assert settings.db == "devs_state.sqlite"
    assert settings.database_url is None
    assert settings.read_wait == 5.0
    assert settings.projections is Projections.RUNNER
    assert settings.api_token is None
    assert settings.worker_niceness == 5
    assert settings.backend is Backend.SQLITE


def test_each_variable_is_read() -> None:
    settings = Settings.from_environ(
        {
            "DEVS_DB": "/var/lib/devs/x.sqlite",
            "DEVS_READ_WAIT": " 2.5 ",
            "DEVS_PROJECTIONS": "external",
            "DEVS_API_TOKEN": "tok-0123456789abcdef",
            "DEVS_WORKER_NICENESS": "0",
        }
    )
    assert settings.db == "/var/lib/devs/x.sqlite"
    assert settings.read_wait == 2.5
    assert settings.projections is Projections.EXTERNAL
    assert settings.api_token is not None
    assert settings.api_token.get_secret_value() == "tok-0123456789abcdef"
    assert settings.worker_niceness == 0
    url = Settings.from_environ({"DEVS_DATABASE_URL": "postgresql://u@h/d"})
    assert url.backend is Backend.POSTGRES


def test_empty_variables_are_unset() -> None:
    empty = {
        name: ""
        for name in (
            "DEVS_DB",
            "DEVS_DATABASE_URL",
            "DEVS_READ_WAIT",
            "DEVS_PROJECTIONS",
            "DEVS_API_TOKEN",
            "DEVS_WORKER_NICENESS",
        )
    }
    assert Settings.from_environ(empty) == Settings.from_environ({})


def test_values_in_code_win_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DEVS_DB", "from-env.sqlite")
    monkeypatch.setenv("DEVS_DATABASE_URL", "postgresql://u@h/d")
    assert Settings().db == "from-env.sqlite"
    chosen = Settings(db="in-code.sqlite", database_url=None)
    assert (chosen.db, chosen.backend) == ("in-code.sqlite", Backend.SQLITE)


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("DEVS_READ_WAIT", "x", "must be a number of seconds in (0, 300], got 'x'"),
        ("DEVS_READ_WAIT", "0", "in (0, 300]"),
        ("DEVS_READ_WAIT", "301", "in (0, 300]"),
        ("DEVS_READ_WAIT", "nan", "in (0, 300]"),
        ("DEVS_READ_WAIT", "inf", "in (0, 300]"),
        ("DEVS_PROJECTIONS", "both", "must be one of runner, external"),
        ("DEVS_WORKER_NICENESS", "20", "an integer from 0 to 19"),
        ("DEVS_WORKER_NICENESS", "-1", "an integer from 0 to 19"),
        ("DEVS_WORKER_NICENESS", "٣", "an integer from 0 to 19"),
        ("DEVS_DATABASE_URL", "mysql://u:pw@h/d", "must start with postgresql://"),
        ("DEVS_DB", "a\x00b", "without control characters"),
        ("DEVS_API_TOKEN", "   ", "is blank; a token is at least 16"),
        ("DEVS_API_TOKEN", "short-token", "has 11 characters"),
        ("DEVS_API_TOKEN", "sixteen chars ok", "has spaces"),
        ("DEVS_API_TOKEN", " 0123456789abcdef", "has spaces"),
        ("DEVS_API_TOKEN", "0123456789abcdeé", "non-ASCII"),
    ],
)
def test_a_bad_value_is_refused_naming_its_variable(
    variable: str, value: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        Settings.from_environ({variable: value})
    assert refused.value.field == variable
    assert str(refused.value).startswith(variable)
    assert words in str(refused.value)


def test_a_password_is_never_shown() -> None:
    url = f"postgresql://devs:{SECRET}@db.example/referee"
    settings = Settings.from_environ({"DEVS_DATABASE_URL": url})
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings)
    assert SECRET not in settings.where
    with pytest.raises(InvalidInput) as refused:
        Settings.from_environ({"DEVS_DATABASE_URL": f"postgresql://u:{SECRET}@h"})
    assert SECRET not in str(refused.value)
    token = Settings.from_environ({"DEVS_API_TOKEN": SECRET})
    assert SECRET not in repr(token)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_the_read_wait_is_a_number_of_seconds_in_range(wait: float) -> None:
    if 0 < wait <= 300:
        assert Settings(read_wait=wait).read_wait == wait
    else:
        with pytest.raises(InvalidInput, match="DEVS_READ_WAIT"):
            Settings(read_wait=wait)


# ------------------------------------------------------------------ assemble


def test_sqlite_by_default() -> None:
    env = assemble({})
    assert env["PERSISTENCE_MODULE"] == config.SQLITE_FACTORY
    assert env["SQLITE_DBNAME"] == "devs_state.sqlite"
    assert env["SQLITE_LOCK_TIMEOUT"] == "30"
    assert env["READ_MODELS_TOPIC"] == config.SQLITE_READ_MODELS
    assert env["MAPPER_TOPIC"] == "devs.adapters.store.persistence:PydanticMapper"
    assert env["TRANSCODER_TOPIC"] == "devs.adapters.store.persistence:OrjsonTranscoder"
    assert env["DEVS_READ_WAIT"] == "5.0"


def test_sqlite_dbname_wins_over_devs_db_and_given_settings_are_kept() -> None:
    env = assemble(
        {
            "DEVS_DB": "a.sqlite",
            "SQLITE_DBNAME": "b.sqlite",
            "SQLITE_LOCK_TIMEOUT": "2",
            "READ_MODELS_TOPIC": "my.models:Factory",
        }
    )
    assert env["SQLITE_DBNAME"] == "b.sqlite"
    assert env["SQLITE_LOCK_TIMEOUT"] == "2"
    assert env["READ_MODELS_TOPIC"] == "my.models:Factory"


def test_a_url_selects_postgresql_over_any_sqlite_setting() -> None:
    env = assemble(
        {
            "DEVS_DATABASE_URL": "postgresql://devs:pw@db:6543/referee",
            "SQLITE_DBNAME": "ignored.sqlite",
        }
    )
    assert env["PERSISTENCE_MODULE"] == config.POSTGRES_FACTORY
    assert env["READ_MODELS_TOPIC"] == config.POSTGRES_READ_MODELS
    assert (env["POSTGRES_HOST"], env["POSTGRES_PORT"]) == ("db", "6543")
    assert (env["POSTGRES_POOL_SIZE"], env["POSTGRES_MAX_OVERFLOW"]) == ("2", "8")
    assert "SQLITE_DBNAME" not in env


def test_the_topics_0_1_documented_still_open_a_store(tmp_path: Path) -> None:
    """``devs.adapters.persistence:SQLiteFactory`` and its kin, as 0.1's
    docs/configuration.md gave them, are read as today's topics (the modules
    moved to ``devs.adapters.store``)."""
    old = {
        "PERSISTENCE_MODULE": "devs.adapters.persistence:SQLiteFactory",
        "MAPPER_TOPIC": "devs.adapters.persistence:PydanticMapper",
        "TRANSCODER_TOPIC": "devs.adapters.persistence:OrjsonTranscoder",
    }
    env = assemble({**old, "DEVS_DB": str(tmp_path / "old.sqlite")})
    assert env["PERSISTENCE_MODULE"] == config.SQLITE_FACTORY
    assert env["MAPPER_TOPIC"] == config.CODEC["MAPPER_TOPIC"]
    assert env["TRANSCODER_TOPIC"] == config.CODEC["TRANSCODER_TOPIC"]
    postgres = assemble(
        {"PERSISTENCE_MODULE": "devs.adapters.postgres:PostgresFactory"}
    )
    assert postgres["PERSISTENCE_MODULE"] == config.POSTGRES_FACTORY
    shown = subprocess.run(
        [str(Path(sys.executable).with_name("devs")), "status"],
        env={**os.environ, **old, "DEVS_DB": str(tmp_path / "old.sqlite")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "no tasks" in shown.stdout


@pytest.mark.parametrize(
    "module",
    ["eventsourcing.postgres", "eventsourcing.postgres:PostgresFactory"],
)
def test_eventsourcing_s_own_postgres_setting_gets_ours(module: str) -> None:
    env = assemble({"PERSISTENCE_MODULE": module, "POSTGRES_POOL_SIZE": "7"})
    assert env["PERSISTENCE_MODULE"] == config.POSTGRES_FACTORY
    assert env["READ_MODELS_TOPIC"] == config.POSTGRES_READ_MODELS
    assert env["POSTGRES_POOL_SIZE"] == "7"


def test_memory_is_a_fresh_database_each_time() -> None:
    first = assemble({"DEVS_DB": ":memory:"})["SQLITE_DBNAME"]
    second = assemble({"DEVS_DB": ":memory:"})["SQLITE_DBNAME"]
    assert first != second
    assert first.startswith("file:devs-")
    assert first.endswith("mode=memory&cache=shared")
    shared = memory_env()
    assert assemble(shared)["SQLITE_DBNAME"] == shared["DEVS_DB"]


def test_a_bad_setting_is_refused_before_anything_is_opened(tmp_path: Path) -> None:
    db = tmp_path / "x.sqlite"
    with pytest.raises(InvalidInput, match="DEVS_READ_WAIT") as refused:
        RecoveryService(env={"SQLITE_DBNAME": str(db), "DEVS_READ_WAIT": "-1"})
    assert refused.value.field == "DEVS_READ_WAIT"
    assert not db.exists()


# ------------------------------------------------------------ opening services


def test_recovery_service_finds_the_assembly_by_its_entry_point() -> None:
    (point,) = entry_points(group=ASSEMBLY_GROUP)
    assert point.value == "devs.adapters.config:ASSEMBLY"
    assert point.load() is ASSEMBLY
    given = {"DEVS_DB": "x.sqlite", "DEVS_DATABASE_URL": ""}
    assert ASSEMBLY(given) == assemble(given)


def test_a_process_that_opens_its_service_with_open_service_scans_no_entry_points(
    tmp_path: Path,
) -> None:
    """open_service hands the domain its assembly (use_assembly): no scan of
    every installed package's entry points, 20 to 35 ms of a command's
    start; a service constructed directly afterwards uses it too."""
    script = f"""
import importlib.metadata

scan = importlib.metadata.entry_points

def scanned(**selection):  # pydantic scans for its plugins: let it
    assert selection.get("group") != "devs.assembly", "devs.assembly scanned"
    return scan(**selection)

importlib.metadata.entry_points = scanned
from devs.adapters.config import Settings, open_service
from devs.domain import RecoveryService

with open_service(Settings(db={str(tmp_path / "a.sqlite")!r})) as service:
    service.start_task("t")
with RecoveryService(env={{"SQLITE_DBNAME": {str(tmp_path / "a.sqlite")!r}}}) as again:
    print(again.task("t").state)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "RUNNING"


def test_recovery_service_and_open_service_open_the_same_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("DEVS_DB", "DEVS_DATABASE_URL", "DEVS_READ_WAIT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DEVS_READ_WAIT", "7")
    with RecoveryService() as direct:
        direct.start_task("t")
        assert (backend_of(direct), sqlite_path(direct)) == (
            Backend.SQLITE,
            "devs_state.sqlite",
        )
        assert direct.read_wait == 7.0
    with open_service() as assembled:
        assert assembled.task("t").task_id == "t"
        assert sqlite_path(assembled) == "devs_state.sqlite"
        assert assembled.read_wait == 7.0
    assert (tmp_path / "devs_state.sqlite").is_file()


def test_services_on_one_memory_env_share_one_store() -> None:
    env = memory_env()
    with open_service(env=env) as first, open_service(env=env) as second:
        assert backend_of(first) is Backend.MEMORY
        assert sqlite_path(first).startswith("file:devs-")
        first.start_task("t")
        assert second.task("t").task_id == "t"
    with open_service(Settings(db=":memory:", database_url=None)) as fresh:
        assert fresh.tasks() == []


def test_open_service_on_postgresql(pg_url: str) -> None:
    with open_service(Settings(database_url=pg_url)) as service:
        assert backend_of(service) is Backend.POSTGRES
        service.start_task("t")
        with pytest.raises(InvalidInput, match="PostgreSQL"):
            sqlite_path(service)


# ------------------------------------------------- the domain names no database

CONFIGURATION_WORDS = (
    "DEVS_DB",
    "DEVS_DATABASE_URL",
    "SQLITE_DBNAME",
    "PERSISTENCE_MODULE",
    "POSTGRES_",
    "postgresql://",
    "devs_state.sqlite",
    "devs.adapters.",
    "devs.projections.",
)
DATABASE_NAMES = ("sqlite", "postgres", "psycopg")
"""Names of databases and their drivers: in no import, name or string of the
domain's code (its docstrings may say where a port is implemented)."""
STORE_ERROR_TEXTS = (
    "locked",
    "busy",
    "SQLITE_",
    "disk is full",
    "No space left",
    "not a database",
    "malformed",
    "readonly",
    "read-only",
)
"""How databases word their failures: read by the store's adapter
(``devs.adapters.store.errors``), handed to the domain as a ``Trouble``. The
domain matches none (``"locked" in str(error)``); its own messages may use
the words."""


def _code_strings(path: Path) -> list[str]:
    """The string constants of a module's code, its docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(
            node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        )
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    # A string right after an assignment documents it (an attribute docstring).
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for before, after in itertools.pairwise(body):
                if (
                    isinstance(before, ast.Assign | ast.AnnAssign)
                    and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant)
                ):
                    docstrings.add(id(after.value))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def _code_names(path: Path) -> list[str]:
    """The modules a module imports and the names its code uses or defines."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names += [node.module or "", *(alias.name for alias in node.names)]
        elif isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, ast.Attribute):
            names.append(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.arg):
            names.append(node.arg)
    return names


def _matched_texts(path: Path) -> list[str]:
    """The strings ``path``'s code looks for in others (``"x" in text``,
    ``text.startswith("x")``, ``re.search("x", text)``, ...)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.ops[0], ast.In | ast.NotIn)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.left.value, str)
        ):
            found.append(node.left.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            found += [
                argument.value
                for argument in node.args
                if isinstance(argument, ast.Constant)
                and isinstance(argument.value, str)
                and node.func.attr
                in ("startswith", "endswith", "find", "search", "match", "count")
            ]
    return found


def _database_words(path: Path) -> set[str]:
    """What of ``path``'s code names a database or matches its error texts."""
    return {
        f"{path.name}: {text!r}"
        for text in [*_code_strings(path), *_code_names(path)]
        if any(word in text.lower() for word in DATABASE_NAMES) or ("SQLITE_" in text)
    } | {
        f"{path.name}: {text!r}"
        for text in _matched_texts(path)
        if any(word in text for word in STORE_ERROR_TEXTS)
    }


def test_the_domain_names_no_database_no_url_and_no_file() -> None:
    found = {
        f"{path.name}: {text!r}"
        for path in sorted(DOMAIN.glob("*.py"))
        for text in _code_strings(path)
        if any(word in text for word in CONFIGURATION_WORDS)
    }
    assert found == set()
    named = set().union(*(_database_words(path) for path in DOMAIN.glob("*.py")))
    assert named == set()
    source = "\n".join(path.read_text() for path in DOMAIN.glob("*.py"))
    assert "urlsplit" not in source
    assert "import sqlite3" not in source


def test_the_check_finds_a_database_named_in_the_domain_s_code(tmp_path: Path) -> None:
    """It sees an import, a name and an error text; a docstring may say where
    a port is implemented."""
    module = tmp_path / "leaky.py"
    module.write_text(
        '"""Implemented on SQLite and PostgreSQL."""\n'
        "from eventsourcing.sqlite import SQLiteFactory\n"
        "import psycopg\n"
        "def waits(error):\n"
        '    return "database is locked" in str(error) or "busy" in str(error)\n'
        "def said(error):\n"
        '    return "the database stayed locked" + str(error)\n'
    )
    assert _database_words(module) == {
        "leaky.py: 'eventsourcing.sqlite'",
        "leaky.py: 'SQLiteFactory'",
        "leaky.py: 'psycopg'",
        "leaky.py: 'database is locked'",
        "leaky.py: 'busy'",
    }
    module.write_text('"""Implemented on SQLite and PostgreSQL."""\nX = 1\n')
    assert _database_words(module) == set()


def test_the_url_s_libpq_parameters_reach_every_connection(pg_url: str) -> None:
    """What the server sees of ``application_name`` and ``options``, and the
    ``sslmode`` every connection is made with (libpq ignores it on the
    tests' Unix socket): before, all three were dropped silently."""
    url = (
        f"{pg_url}&application_name=devs-config-test"
        "&options=-c%20statement_timeout%3D4321&sslmode=require"
    )
    with open_service(Settings(database_url=url)) as service:
        service.start_task("t")
        datastore = service.factory.datastore  # type: ignore[attr-defined]
        assert datastore.pool.kwargs["sslmode"] == "require"
        with datastore.get_connection() as connection:
            name = connection.execute("SHOW application_name").fetchone()
            timeout = connection.execute("SHOW statement_timeout").fetchone()
        assert name["application_name"] == "devs-config-test"
        assert timeout["statement_timeout"] == "4321ms"


def test_the_http_bounds_have_their_documented_defaults() -> None:
    settings = Settings.from_environ({})
    assert settings.allowed_hosts == ()
    assert settings.max_body_bytes == 64 * 1024 * 1024
    assert settings.max_header_bytes == 64 * 1024
    assert settings.header_timeout == 10.0
    assert settings.max_connections == 1000


def test_allowed_hosts_are_read_and_normalised() -> None:
    settings = Settings.from_environ(
        {"DEVS_ALLOWED_HOSTS": " Devs.Example.COM., 10.0.0.5:8765,[::1],"}
    )
    assert settings.allowed_hosts == ("devs.example.com", "10.0.0.5:8765", "[::1]")
    assert Settings.from_environ({"DEVS_ALLOWED_HOSTS": "*"}).allowed_hosts == ("*",)


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("DEVS_ALLOWED_HOSTS", "a b", "DEVS_ALLOWED_HOSTS has 'a b', which is not"),
        ("DEVS_ALLOWED_HOSTS", "host:99999", "DEVS_ALLOWED_HOSTS has 'host:99999'"),
        ("DEVS_ALLOWED_HOSTS", "*, devs.example.com", "* (any host) stands alone"),
        ("DEVS_MAX_BODY_BYTES", "1023", "from 1,024 to 1,073,741,824, got '1023'"),
        ("DEVS_MAX_HEADER_BYTES", "64k", "DEVS_MAX_HEADER_BYTES must be a number"),
        ("DEVS_HEADER_TIMEOUT", "301", "(0, 300], got '301'"),
        ("DEVS_MAX_CONNECTIONS", "15", "from 16 to 1,000,000, got '15'"),
    ],
)
def test_a_bad_http_bound_names_its_variable(
    variable: str, value: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        Settings.from_environ({variable: value})
    assert refused.value.field == variable
    assert words in str(refused.value)
