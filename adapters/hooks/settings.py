"""The hook edge's settings as one pydantic-settings class: every variable
of :data:`devs.adapters.hooks.variables.VARIABLES` (``DEVS_HOOK_SERVER``,
``DEVS_HOOK_SERVER_IDLE``, ``DEVS_HOOK_TIMEOUT``, ``DEVS_HOOK_STATE_DIR``),
read by the hook server. Its validators are that table's own readers, so a
bad value is the same error here as on the fast path (which reads them
without pydantic, for its start-up time), as ``InvalidInput`` naming the
variable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError, field_validator
from pydantic_settings import (
    SettingsConfigDict,
)

from devs.adapters.hooks import variables
from devs.adapters.hooks.variables import BadVariable
from devs.domain.errors import InvalidInput
from devs.domain.policy import EnvironSettings

PREFIX = "DEVS_HOOK_"


def _invalid(error: ValidationError) -> InvalidInput:
    """The first of pydantic's errors as ``InvalidInput`` naming the
    variable (the table's own message, when its reader refused it)."""
    first = error.errors()[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, BadVariable):
        return InvalidInput(str(cause), field=cause.variable)
    name = str(first["loc"][0]) if first["loc"] else ""
    variable = f"{PREFIX}{name.upper()}"
    return InvalidInput(f"{variable} is not valid: {first['msg']}", field=variable)


def _text(value: Any) -> str | None:
    """A value given in code as the environment would give it."""
    return None if value is None else str(value)


class HookEdgeSettings(EnvironSettings):
    """The hook client's and server's settings: ``HookEdgeSettings()`` reads
    ``os.environ``, ``HookEdgeSettings.from_environ(mapping)`` a mapping;
    each field is the variable ``DEVS_HOOK_<FIELD>``."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, case_sensitive=True, frozen=True
    )

    server: bool = True
    """``DEVS_HOOK_SERVER``: hand the installed hooks' calls to a hook
    server (off: each call answered in its own process)."""
    server_idle: float = variables.DEFAULT_IDLE
    """``DEVS_HOOK_SERVER_IDLE``: seconds a hook server waits for a call
    before it ends, in (0, 86400]."""
    timeout: float = variables.DEFAULT_TIMEOUT
    """``DEVS_HOOK_TIMEOUT``: seconds a hook call may take, in (0, 600]."""
    state_dir: Path | None = None
    """``DEVS_HOOK_STATE_DIR``: the hooks' state files (unset:
    :func:`devs.adapters.hooks.variables.state_dir`'s default)."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise _invalid(error) from None

    @field_validator("server", mode="before")
    @classmethod
    def _server(cls, value: Any) -> bool:
        return variables.server_on(_text(value))

    @field_validator("server_idle", mode="before")
    @classmethod
    def _server_idle(cls, value: Any) -> float:
        return variables.server_idle(_text(value))

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> float:
        return variables.timeout(_text(value))

    @field_validator("state_dir", mode="before")
    @classmethod
    def _state_dir(cls, value: Any) -> Path | None:
        return variables.state_folder(_text(value))
