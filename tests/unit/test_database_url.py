"""``DEVS_DATABASE_URL``: libpq URLs to eventsourcing's PostgreSQL settings, and
the views' SQL in PostgreSQL's placeholders."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest

from devs.adapters.config import postgres_env
from devs.domain import InvalidInput


def test_a_tcp_url() -> None:
    env = postgres_env("postgresql://devs:p%40ss@db.example:6543/referee")
    assert env == {
        "PERSISTENCE_MODULE": "devs.adapters.store.postgres:PostgresFactory",
        "POSTGRES_DBNAME": "referee",
        "POSTGRES_HOST": "db.example",
        "POSTGRES_PORT": "6543",
        "POSTGRES_USER": "devs",
        "POSTGRES_PASSWORD": "p@ss",
    }


def test_a_socket_directory_url() -> None:
    env = postgres_env("postgresql://devs@/referee?host=/run/postgresql&port=5433")
    assert (env["POSTGRES_HOST"], env["POSTGRES_PORT"]) == ("/run/postgresql", "5433")
    assert env["POSTGRES_PASSWORD"] == ""
    assert postgres_env("postgres://u@h/d")["POSTGRES_PORT"] == "5432"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("mysql://u:pw@h/d", "must start with postgresql://"),
        ("postgresql://u:secret-pw@h", "names no dbname"),
        ("postgresql:///d", "names no host and no user"),
        ("postgresql://u:secret-pw@h:99999/d", "not a URL libpq reads"),
        ("postgresql://u@/d?host=/s&port=0", "port out of range"),
    ],
)
def test_a_bad_url_is_named_without_its_password(url: str, words: str) -> None:
    with pytest.raises(InvalidInput, match=words) as refused:
        postgres_env(url)
    assert refused.value.field == "DEVS_DATABASE_URL"
    assert "secret-pw" not in str(refused.value)


def test_libpq_parameters_are_kept_for_every_connection() -> None:
    env = postgres_env(
        "postgresql://u:pw@h/d?sslmode=verify-full&application_name=devs"
        "&sslrootcert=/etc/ca.pem"
    )
    assert parse_qs(env["POSTGRES_LIBPQ_OPTIONS"]) == {
        "application_name": ["devs"],
        "sslmode": ["verify-full"],
        "sslrootcert": ["/etc/ca.pem"],
    }
    assert "POSTGRES_LIBPQ_OPTIONS" not in postgres_env("postgresql://u@h/d")
    assert "POSTGRES_LIBPQ_OPTIONS" not in postgres_env("postgresql://u@/d?host=/s")


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("sslmode=bogus", "sslmode='bogus'; libpq's modes are disable, allow"),
        ("sslmode=", "sslmode=''"),
        ("bogusparam=1", "a parameter libpq does not know ('bogusparam')"),
        ("ssl_mode=require", "('ssl_mode')"),
    ],
)
def test_a_parameter_libpq_would_not_take_is_refused(query: str, words: str) -> None:
    """Ignored, ``sslmode=require`` misspelt would connect without TLS."""
    with pytest.raises(InvalidInput) as refused:
        postgres_env(f"postgresql://u:secret-pw@h/d?{query}")
    assert refused.value.field == "DEVS_DATABASE_URL"
    assert words in str(refused.value)
    assert "secret-pw" not in str(refused.value)


def test_the_views_sql_in_postgresql_placeholders() -> None:
    pg = pytest.importorskip("devs.projections.pg")  # the postgres extra
    assert pg.pg_sql("SELECT * FROM t WHERE a = ? AND b = ?") == (
        "SELECT * FROM t WHERE a = %s AND b = %s"
    )
    assert pg.pg_sql("UPDATE t SET a = :a WHERE k = :_key AND c LIKE '5%'") == (
        "UPDATE t SET a = %(a)s WHERE k = %(_key)s AND c LIKE '5%%'"
    )
    assert pg.pg_ddl("x INTEGER, y REAL, z TEXT REFERENCES s (id)") == (
        "x BIGINT, y DOUBLE PRECISION, z TEXT REFERENCES s (id) "
        "DEFERRABLE INITIALLY DEFERRED"
    )
    # SQLite's clustered tables are PostgreSQL's plain ones.
    assert pg.pg_ddl("CREATE TABLE t (k TEXT, PRIMARY KEY (k)) WITHOUT ROWID") == (
        "CREATE TABLE t (k TEXT, PRIMARY KEY (k))"
    )
