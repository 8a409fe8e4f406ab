"""Every decision as one structured (JSON) log line on the ``devs.decisions`` logger.

Lines carry the task id, the counts and the error hash; texts in them were
redacted before they reached the aggregate, so no secret reaches a log.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

logger = logging.getLogger("devs.decisions")
# A library does not decide where logs go: without a handler configured by the
# application, decision lines are dropped instead of reaching stderr.
logging.getLogger("devs").addHandler(logging.NullHandler())

_WARNINGS = frozenset(
    {"ESCALATION_TRIGGERED", "HAND_OFF_REQUIRED", "TASK_PAUSED", "ENTROPY_LIMIT"}
)


def log_decision(event: str, **fields: Any) -> None:
    """Emit ``{"event": event, **fields}`` as one JSON line."""
    level = logging.WARNING if event in _WARNINGS else logging.INFO
    if logger.isEnabledFor(level):
        line = orjson.dumps({"event": event, **fields}, default=str).decode()
        logger.log(level, line)
