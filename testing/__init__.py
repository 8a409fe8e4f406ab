"""``devs.testing``: property-based tests of an orchestrator driven by the
referee, with hypothesis.

- strategies: :func:`policies`, :func:`task_ids`, :func:`strategy_texts`,
  :func:`outputs`, :func:`actors`, :func:`commands` and
  :func:`command_sequences`;
- :class:`LadderModel`: the failure ladder as plain Python, reading every
  threshold from a policy;
- :class:`RecoveryMachine`: a hypothesis state machine with a rule per command
  and the checks of docs/testing.md; subclass it and set ``make_service``
  to run it against your backend or your wrapper; :func:`search_settings`,
  the settings its search runs with; a failure is also written as a test to
  paste (:class:`Script`);
- a pytest plugin (``devs.testing.plugin``, loaded when the package is
  installed) with the fixtures ``devs_service`` and ``devs_policy``.

The names are imported when first asked for (PEP 562): pytest imports this
package in every run, through the plugin, and hypothesis and the domain are
loaded only by a test that uses the kit.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from devs.testing.machine import (
        SEARCH_STEPS,
        RecoveryMachine,
        memory_env,
        memory_service,
        search_settings,
        sqlite_service,
    )
    from devs.testing.model import Command, Expected, LadderModel, TaskModel
    from devs.testing.script import Script
    from devs.testing.strategies import (
        actors,
        command_sequences,
        commands,
        outputs,
        policies,
        strategy_texts,
        task_ids,
    )

_MODULES = {
    "SEARCH_STEPS": "machine",
    "Script": "script",
    "search_settings": "machine",
    "Command": "model",
    "Expected": "model",
    "LadderModel": "model",
    "RecoveryMachine": "machine",
    "TaskModel": "model",
    "actors": "strategies",
    "command_sequences": "strategies",
    "commands": "strategies",
    "outputs": "strategies",
    "policies": "strategies",
    "memory_env": "machine",
    "memory_service": "machine",
    "sqlite_service": "machine",
    "strategy_texts": "strategies",
    "task_ids": "strategies",
}
_SUBMODULES = frozenset({"machine", "model", "plugin", "script", "strategies"})

__all__ = [
    "SEARCH_STEPS",
    "Command",
    "Expected",
    "LadderModel",
    "RecoveryMachine",
    "Script",
    "TaskModel",
    "actors",
    "command_sequences",
    "commands",
    "memory_env",
    "memory_service",
    "outputs",
    "policies",
    "search_settings",
    "sqlite_service",
    "strategy_texts",
    "task_ids",
]


def _load(name: str) -> object:
    """The exported ``name`` (or submodule), imported now and kept."""
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if not TYPE_CHECKING:  # type checkers see the imports above, and only them
    __getattr__ = _load
