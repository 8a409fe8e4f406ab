"""The thresholds that decide the failure ladder, with environment overrides.

One pydantic model holds every threshold with its default and range. The
environment may override each one (``DEVS_ESCALATION_THRESHOLD``, ...). An invalid
override is not fatal: it logs a warning naming the variable and the problem, and
that one setting falls back to its default. The policy in force is recorded in a
task's first event, so a replay decides as the original did.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping

from pydantic import Field, ValidationError, field_validator

from devs.domain.model import Value

logger = logging.getLogger("devs.policy")

ENV_PREFIX = "DEVS_"


class Policy(Value):
    """Thresholds in force for a task."""

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
        description="Entropy score at or above which the task pauses for a human.",
    )
    failure_history_cap: int = Field(
        default=20,
        ge=1,
        le=200,
        description="Most recent failures kept in the task and its hand-off payload.",
    )

    @field_validator("hitl_entropy_threshold")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            msg = "must be a finite number"
            raise ValueError(msg)
        return value


def env_var(field: str) -> str:
    """The environment variable that overrides ``field``."""
    return f"{ENV_PREFIX}{field.upper()}"


def load_policy(environ: Mapping[str, str] | None = None) -> Policy:
    """Build the policy from ``environ`` (default: ``os.environ``).

    Each invalid variable is reported with a warning and replaced by its default.
    """
    env = os.environ if environ is None else environ
    overrides: dict[str, str] = {}
    for name, field in Policy.model_fields.items():
        raw = env.get(env_var(name))
        if raw is None:
            continue
        value = raw.strip()
        try:
            Policy.model_validate({name: value})
        except ValidationError as error:
            logger.warning(
                "ignoring %s=%r (%s); using the default %r",
                env_var(name),
                raw,
                error.errors()[0]["msg"],
                field.default,
            )
            continue
        overrides[name] = value
    return Policy.model_validate(overrides)
