"""The thresholds that decide the failure ladder, with environment overrides.

:class:`Thresholds` declares every threshold once (default, range,
description); :class:`Policy` is the frozen value recorded in each task's
``Started`` event, so a replay decides as the original did, and
:class:`PolicySettings` reads the ``DEVS_*`` overrides. A bad override is not
fatal: one warning on the ``devs.policy`` logger, and that setting keeps its
default (docs/configuration.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from contextvars import ContextVar
from enum import StrEnum
from typing import Any, Self

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from devs.domain.errors import InvalidInput
from devs.domain.model import Value
from devs.domain.redaction import redact

logger = logging.getLogger("devs.policy")

ENV_PREFIX = "DEVS_"


class StuckDetection(StrEnum):
    """What the derived stuck score does (``DEVS_STUCK_DETECTION``)."""

    OBSERVE = "observe"  # recorded and shown; the ladder decides as without it
    GATE = "gate"  # a score at or above the entropy threshold pauses the task
    OFF = "off"  # not computed, not recorded


MAX_HUMAN_DEADLINE = 2_592_000
"""The longest human deadline, in seconds: 30 days."""


class Thresholds(BaseModel):
    """The policy's fields: defaults, ranges and meanings, declared once."""

    escalation_threshold: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="Consecutive failures at which a human is asked (ESCALATION).",
    )
    handoff_threshold: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="Consecutive failures at which the task goes to the human queue.",
    )
    hitl_entropy_threshold: float = Field(
        default=0.75,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="Entropy score at or above which the task pauses for a human.",
    )
    failure_history_cap: int = Field(
        default=20,
        ge=1,
        le=200,
        description="Most recent failures kept in the task and its hand-off payload.",
    )
    stuck_detection: StuckDetection = Field(
        default=StuckDetection.OBSERVE,
        description=(
            "What the stuck score derived from the task's recent failures does: "
            "observe (recorded and shown), gate (a score at or above the entropy "
            "threshold pauses the task), off."
        ),
    )
    human_deadline: float | None = Field(
        default=None,
        gt=0,
        le=MAX_HUMAN_DEADLINE,
        allow_inf_nan=False,
        description=(
            "Seconds a human has to answer an escalation or a pause; unanswered "
            "by then, the task is handed off (reason human_deadline). None: "
            "wait forever."
        ),
    )
    task_budget_usd: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        allow_inf_nan=False,
        description=(
            "USD a task may spend on model calls; at or over it, a working task "
            "pauses for a human (reason budget_exhausted). None: unlimited."
        ),
    )
    task_budget_tokens: int | None = Field(
        default=None,
        ge=1,
        le=10**12,
        description=(
            "Tokens a task may use (input, output and cache, all counted); at "
            "or over it, a working task pauses for a human. None: unlimited."
        ),
    )
    run_budget_usd: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        allow_inf_nan=False,
        description=(
            "USD the tasks of a run may spend together, recorded with each "
            "task's start (not enforced yet). None: unlimited."
        ),
    )
    budget_warn: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        allow_inf_nan=False,
        description=(
            "The fraction of a budget at which a warning is recorded once "
            "(BudgetWarned: a notification and a budget.warned message). "
            "None: 0.8."
        ),
    )


BUDGET_WARN = 0.8
"""The warning fraction of a budget when the policy sets none."""


class Policy(Value, Thresholds):
    """Thresholds in force for a task (stored in its ``Started`` event).

    Every field added after the first release defaults to ``None``: a task's
    ``Started`` event is hashed without its nulls (:mod:`devs.domain.chain`),
    so an event recorded before the field existed hashes as it did."""

    @property
    def warn_at(self) -> float:
        """The fraction of a budget at which a warning is recorded."""
        return BUDGET_WARN if self.budget_warn is None else self.budget_warn

    def changed(self, changes: Mapping[str, object]) -> Policy:
        """This policy with ``changes`` (field name -> value; ``None`` keeps
        the field), each value taken as it is: an int where an int belongs (not
        ``"3"``, not ``True``), a finite number for the entropy threshold and
        for ``human_deadline`` (seconds, an int or a float), a mode's name for
        ``stuck_detection``. A deadline is not removed by changes (``None``
        keeps it): pass a whole :class:`Policy` for that.

        Raises :class:`InvalidInput` naming the first field refused (``field``
        is its name) or a name that is no field; nothing else is checked.
        """
        for name in changes:
            if name not in Thresholds.model_fields:
                known = ", ".join(Thresholds.model_fields)
                msg = f"{_shown(name)} is not a policy field (they are: {known})"
                raise InvalidInput(msg, field="policy")
        chosen = {name: value for name, value in changes.items() if value is not None}
        mode = chosen.get("stuck_detection")
        if mode is not None and not isinstance(mode, StuckDetection):
            if not isinstance(mode, str) or mode not in _MODES:
                msg = f"stuck_detection must be one of {', '.join(_MODES)}"
                raise InvalidInput(msg, field="stuck_detection")
            chosen["stuck_detection"] = StuckDetection(mode)
        try:
            return Policy.model_validate({**self.model_dump(), **chosen}, strict=True)
        except ValidationError as error:
            first = error.errors(include_url=False)[0]
            name = str(first["loc"][0]) if first["loc"] else "policy"
            msg = f"{name} is invalid: {first['msg']}"
            raise InvalidInput(msg, field=name) from None


_MODES = tuple(mode.value for mode in StuckDetection)


def _shown(name: object) -> str:
    """An unknown field's name, as a short printable quote: redacted whole,
    then cut (a cut first could leave part of a credential behind)."""
    try:
        text = repr(redact(str(name)))
    except ValueError:  # an int too long to write out
        text = f"<{type(name).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def env_var(field: str) -> str:
    """The environment variable that overrides ``field``."""
    return f"{ENV_PREFIX}{field.upper()}"


class EnvironSource(PydanticBaseSettingsSource):
    """Settings variables from a mapping (default: ``os.environ``).

    Looks up exactly ``<env_prefix><FIELD>`` with the mapping's ``get``, so
    eventsourcing's ``Environment`` (which :class:`RecoveryService` passes) first
    tries its application-prefixed name, as for its own settings. Other
    variables are never read.
    """

    def __init__(
        self, settings_cls: type[BaseSettings], environ: Mapping[str, str] | None
    ) -> None:
        super().__init__(settings_cls)
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self.prefix = str(self.config.get("env_prefix") or "")

    def get_field_value(
        self, field: FieldInfo, field_name: str
    ) -> tuple[Any, str, bool]:
        return self.environ.get(f"{self.prefix}{field_name.upper()}"), field_name, False

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name, field in self.settings_cls.model_fields.items():
            value, key, _ = self.get_field_value(field, name)
            if value is not None:
                found[key] = value
        return found


# The mapping from_environ() is reading; settings_customise_sources (a
# classmethod, called from __init__) has no other way to receive it.
_environ: ContextVar[Mapping[str, str] | None] = ContextVar("environ", default=None)


class EnvironSettings(BaseSettings):
    """Settings read from the environment or, by :meth:`from_environ`, from a
    mapping (:class:`EnvironSource`, which :meth:`environ_source` gives).

    Values given in code come first, then the variables, read exactly as
    ``<prefix><FIELD>`` with the mapping's ``get`` (eventsourcing's
    ``Environment`` tries its application-prefixed name first); no ``.env``
    or secrets files. A subclass that reads otherwise overrides
    :meth:`settings_customise_sources`."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, cls.environ_source(settings_cls))

    @classmethod
    def environ_source(
        cls, settings_cls: type[BaseSettings]
    ) -> PydanticBaseSettingsSource:
        """The variables of the mapping being read (default: ``os.environ``)."""
        return EnvironSource(settings_cls, _environ.get())

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Self:
        """The settings from ``environ`` (default: ``os.environ``)."""
        token = _environ.set(environ)
        try:
            return cls()
        finally:
            _environ.reset(token)


class PolicySettings(EnvironSettings, Thresholds):
    """The policy as the environment sets it.

    ``PolicySettings()`` reads ``os.environ``;
    ``PolicySettings.from_environ(mapping)`` reads the mapping instead.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, case_sensitive=True, frozen=True
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment only: no .env or secrets files, and a Policy built in
        # code is a Policy(...), not settings.
        return (cls.environ_source(settings_cls),)

    @field_validator("*", mode="wrap")
    @classmethod
    def _default_if_invalid(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        """An invalid variable: one warning, and that setting keeps its default.

        A blank variable of a setting that is unset by default (``None``:
        ``DEVS_HUMAN_DEADLINE``) leaves it unset, without a warning.
        """
        assert info.field_name is not None
        default = cls.model_fields[info.field_name].default
        if default is None and isinstance(value, str) and not value.strip():
            return None
        try:
            return handler(value.strip() if isinstance(value, str) else value)
        except ValidationError as error:
            logger.warning(
                "ignoring %s=%r (%s); using the default %r",
                env_var(info.field_name),
                value,
                error.errors()[0]["msg"],
                default,
            )
            return default

    def policy(self) -> Policy:
        """These thresholds as the value a task records."""
        return Policy.model_validate(self.model_dump())


def load_policy(environ: Mapping[str, str] | None = None) -> Policy:
    """The policy from ``environ`` (default: ``os.environ``).

    Each invalid variable is reported with a warning and replaced by its default.
    """
    return PolicySettings.from_environ(environ).policy()
