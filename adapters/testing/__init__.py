"""``devs.testing``: property-based tests of an orchestrator driven by the
referee, with hypothesis.

- strategies: :func:`policies`, :func:`task_ids`, :func:`strategy_texts`,
  :func:`outputs`, :func:`actors`, :func:`commands` and
  :func:`command_sequences`;
- :class:`LadderModel`: the failure ladder as plain Python, reading every
  threshold from a policy;
- :class:`RecoveryMachine`: a hypothesis state machine with a rule per command
  and the invariants of docs/testing.md; subclass it and set ``make_service``
  to run it against your backend or your wrapper;
- a pytest plugin (``devs.testing.plugin``, loaded when the package is
  installed) with the fixtures ``devs_service`` and ``devs_policy``.
"""

from devs.testing.machine import RecoveryMachine, sqlite_service
from devs.testing.model import Command, Expected, LadderModel, TaskModel
from devs.testing.strategies import (
    actors,
    command_sequences,
    commands,
    outputs,
    policies,
    strategy_texts,
    task_ids,
)

__all__ = [
    "Command",
    "Expected",
    "LadderModel",
    "RecoveryMachine",
    "TaskModel",
    "actors",
    "command_sequences",
    "commands",
    "outputs",
    "policies",
    "sqlite_service",
    "strategy_texts",
    "task_ids",
]
