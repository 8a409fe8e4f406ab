"""The counterexample of a :class:`~devs.testing.RecoveryMachine` search as a
test you can paste: plain calls on a service, in the order the machine sent
them, ending in the check that failed written as an ``assert``.

Hypothesis prints the machine's own steps (``state.record_gate(...)``); those
need the machine to run. :class:`Script` writes the same steps as calls on the
service the machine's ``make_service`` returns, with the task ids, the policy
and every argument written out, so the failure reproduces without hypothesis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devs.domain.policy import Policy
from devs.testing.model import Command

LESSON_CAUSE = "root cause: it failed"
"""The ``rca_summary`` of every lesson the machine logs."""
REASONS = {
    "resume": "go on",
    "rewind": "start over",
    "skip": "not worth it",
    "resolve": "done by hand",
    "take_over": "their shift ended",
}
"""The ``reason`` of each human action the machine sends."""

_INDENT = "    "
_REFUSALS = frozenset({"import pytest", "from devs.domain import IllegalTransition"})


def call_code(command: Command, task_id: str) -> str:
    """The call the machine sends for ``command`` to task ``task_id``, as
    Python source on a variable ``service``."""
    t = repr(task_id)
    name = command.name
    if name == "begin_attempt":
        return f"service.begin_attempt({t}, {command.text!r})"
    if name == "record_gate":
        return f"service.record_gate({t}, {command.code!r}, output={command.text!r})"
    if name == "report_entropy":
        return f"service.report_entropy({t}, {command.score!r})"
    if name == "log_lesson":
        return f"service.log_lesson({t}, {command.text!r}, {LESSON_CAUSE!r})"
    if name == "claim":
        return f"service.claim_handoff({t}, actor={command.actor!r})"
    if name == "release":
        return f"service.release({t}, actor={command.actor!r})"
    if name == "take_over":
        return (
            f"service.take_over({t}, actor={command.actor!r}, "
            f"reason={REASONS['take_over']!r})"
        )
    if name == "resolve":
        return (
            f"service.resolve_handoff({t}, actor={command.actor!r}, "
            f"resolution={command.resolution!r}, reason={REASONS['resolve']!r})"
        )
    # resume, rewind, skip
    return f"service.{name}({t}, actor={command.actor!r}, reason={REASONS[name]!r})"


def policy_code(policy: Policy) -> str:
    """``Policy(...)`` with the fields that differ from the defaults."""
    fields = policy.model_dump(mode="json", exclude_defaults=True)
    return f"Policy({', '.join(f'{k}={v!r}' for k, v in fields.items())})"


class Script:
    """The steps of one example, written as a test function.

    :meth:`start`, :meth:`step` and :meth:`check` are called by the machine
    as it goes; :meth:`failed` marks the check that failed; :meth:`text` is
    the test."""

    def __init__(self, machine: Any) -> None:
        self.machine = machine
        self.lines: list[str] = []
        self.imports = {"from devs.domain import Policy"}
        self.failure: list[str] = []

    # ------------------------------------------------------------- writing

    def start(self, policy: Policy, ids: list[str], *, took_policy: bool) -> None:
        factory = self._factory()
        given = policy_code(policy) if took_policy else ""
        if not took_policy:
            self.imports.discard("from devs.domain import Policy")
        self.lines.append(f"service = {factory}({given})")
        self.lines += [f"service.start_task({task_id!r})" for task_id in ids]

    def step(self, command: Command, task_id: str, *, refused: bool) -> None:
        call = call_code(command, task_id)
        if refused:
            self.imports |= {
                "import pytest",
                "from devs.domain import IllegalTransition",
            }
            self.lines += [
                "with pytest.raises(IllegalTransition):  # the ladder refuses it",
                f"{_INDENT}{call}",
            ]
        else:
            self.lines.append(call)

    def failed(
        self,
        message: str,
        probe: str | None = None,
        expected: Any = None,
        *,
        expected_code: str | None = None,
        differs: bool = False,
        raises: BaseException | None = None,
    ) -> None:
        """The check that failed: ``assert <probe> == <expected>`` (its
        ``repr``, or ``expected_code`` as written; ``!=`` if ``differs``).
        ``raises``: the exception a call raised (the call, last in the
        script, raises it again)."""
        said = " ".join(message.split())
        if raises is not None:
            self.failure = [f"# the referee raised here: {said:.300}"]
            return
        self.failure = [f"# the referee and the ladder part here: {said:.300}"]
        if probe is not None:
            right = expected_code if expected_code is not None else repr(expected)
            self.failure.append(f"assert {probe} {'!=' if differs else '=='} {right}")

    def failed_on_refusal(self, command: Command, task_id: str, state: str) -> None:
        """The last step was accepted where the ladder refuses it."""
        self.imports |= _REFUSALS
        call = call_code(command, task_id)
        self.failure = [
            f"# the ladder refuses this in state {state}; the referee accepted it",
            "with pytest.raises(IllegalTransition):",
            f"{_INDENT}{call}",
        ]

    # ------------------------------------------------------------- reading

    def _factory(self) -> str:
        """How the test makes the service: the machine's ``make_service``,
        imported from the machine's module."""
        from devs.testing import machine as kit

        factory: Callable[..., Any] = self.machine.make_service
        if factory is kit.memory_service or factory is kit.sqlite_service:
            self.imports.add(f"from devs.testing import {factory.__name__}")
            return factory.__name__
        module = self.machine.__module__
        qualname = self.machine.__qualname__
        if "<locals>" in qualname or module == "__main__":
            self.imports.add(
                f"# import {self.machine.__name__}: the machine the search ran "
                f"({module}.{qualname})"
            )
            return f"{self.machine.__name__}.make_service"
        self.imports.add(f"from {module} import {qualname.split('.')[0]}")
        return f"{qualname}.make_service"

    def text(self) -> str:
        """The test function, imports first."""
        imports = sorted(self.imports, key=lambda line: (line.startswith("#"), line))
        body = [*self.lines, *self.failure]
        if not self.failure:
            body.append("# (no check failed)")
        return "\n".join(
            [
                *imports,
                "",
                "",
                "def test_counterexample() -> None:",
                *(f"{_INDENT}{line}" for line in body),
                "",
            ]
        )


__all__ = ["LESSON_CAUSE", "REASONS", "Script", "call_code", "policy_code"]
