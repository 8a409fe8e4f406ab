"""The pytest plugin of ``devs.testing`` (entry point ``pytest11``: active when
devs-recovery is installed): the fixtures ``devs_policy``, ``devs_env`` and
``devs_service``.

pytest imports this module in every run of every environment that has the
package, so at module level it imports only pytest and the standard library;
the domain is imported by the fixtures, when a test asks for one
(``tests/e2e/test_plugin_import.py`` holds it to that)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from devs.domain.application import RecoveryService
    from devs.domain.policy import Policy


@pytest.fixture
def devs_policy() -> Policy:
    """The policy ``devs_service`` decides by: the defaults. Override the
    fixture (or parametrize it) to vary it."""
    from devs.domain.policy import Policy

    return Policy()


@pytest.fixture
def devs_env() -> dict[str, str]:
    """Where ``devs_service`` keeps its log and read models: in memory (the
    default, ``devs.testing.memory_env()``). Override the fixture to use a file —
    ``{"SQLITE_DBNAME": str(tmp_path / "devs.sqlite")}`` — or PostgreSQL —
    ``{"DEVS_DATABASE_URL": url}``."""
    from devs.testing.machine import memory_env

    return memory_env()


@pytest.fixture
def devs_service(
    devs_env: dict[str, str], devs_policy: Policy
) -> Iterator[RecoveryService]:
    """A fresh service on ``devs_env`` (in memory unless overridden),
    deciding by ``devs_policy``; closed after the test."""
    from devs.adapters.config import open_service

    service = open_service(env=dict(devs_env), policy=devs_policy)
    try:
        yield service
    finally:
        service.close()
