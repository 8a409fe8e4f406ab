"""Every public method of the service, given a wrong-typed argument, raises a
``DevsError`` (``InvalidInput`` naming the argument, for a value no method
takes) at the call, and writes nothing.

The methods are found by inspection, so a method added to the service is
covered without touching this file (a parameter of a new name needs a valid
value in ``VALID``: the test says which).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devs.adapters.config import open_service
from devs.domain import DevsError, InvalidInput, Policy, RecoveryService

VALID: dict[str, object] = {
    "task_id": "t",
    "run_id": "r",
    "dag": {"t": []},
    "agent": "coder",
    "last_commit": "c1",
    "strategy": "an idea",
    "exit_code": 1,
    "gate": "tests",
    "error": "boom",
    "output": "1 failed",
    "score": 0.1,
    "failed_strategy": "an idea",
    "rca_summary": "it never helps",
    "actor": "ann",
    "reason": "because",
    "to_commit": "c0",
    "resolution": "return",
    "version": 1,
    "after": 0,
    "limit": 10,
    "state": "RUNNING",
    "since": datetime(2024, 1, 1, tzinfo=UTC),
    "policy": {},
    "task_ids": ["t"],
    "names": "tasks",
    "progress": None,
    "key": "job-1",
    "request": "record a gate",
    "candidate": "an idea",
    "position": 0,
    "timeout": 1.0,
    "before": 60.0,
    "name": "ann",
    "message_id": "msg_" + "0" * 32,
    "if_version": None,
    "stop_scope": "run",
    "links": {"pr": "https://example.test/pull/1"},
    "model": "claude-sonnet-4-5",
    "input_tokens": 10,
    "output_tokens": 5,
    "cache_read_tokens": 0,
    "cache_creation_tokens": 0,
    "cost_usd": None,
    "usage_id": "msg_1",
    "usd": 5.0,
    "tokens": None,
}
"""A valid value of each parameter, by name: the others of a call get these."""

NOT_THE_SERVICE_S: dict[str, str] = {
    "construct_env": "eventsourcing's hook: Application.__init__ calls it with "
    "the name and env the constructor already took (tested below)",
    "save": "eventsourcing's Application.save (overridden for speed): it "
    "takes aggregates from the service's own commands, never a caller's values",
}
"""Public functions of the service's classes that are not its API, and why."""

FIELD_NAMES = {("exactly_once", "key"): "idempotency_key"}
"""Where the refusal names the argument otherwise than the parameter."""


def _nan() -> float:
    return math.nan


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


NEVER_VALID: list[Callable[[], object]] = [
    _nan,
    lambda: {"wrong": 1},
    lambda: b"x",
    _Opaque,
]
"""Values no parameter of the service takes: each must be ``InvalidInput``
naming the argument, raised at the call."""

SOMETIMES_VALID: list[Callable[[], object]] = [
    lambda: 7,
    lambda: "seven",
    lambda: None,
    lambda: ["x"],
]
"""Values of the wrong type for some parameters (an int for a text, a text
for a number, ``None`` for a required value, a list for a name): a
``DevsError`` or an answer, never anything else."""


def _public_methods() -> dict[str, inspect.Signature]:
    found: dict[str, inspect.Signature] = {}
    for name, member in inspect.getmembers(RecoveryService):
        if name.startswith("_") or name in NOT_THE_SERVICE_S:
            continue
        if not inspect.isfunction(member):  # properties, attributes
            continue
        if not member.__module__.startswith("devs."):
            continue  # eventsourcing's own Application API, not the service's
        found[name] = inspect.signature(member)
    return found


def _parameters(signature: inspect.Signature) -> list[inspect.Parameter]:
    return [
        p
        for p in signature.parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


METHODS = _public_methods()
TAKING_ARGUMENTS = sorted(name for name, sig in METHODS.items() if _parameters(sig))


def test_the_methods_are_found() -> None:
    assert {
        "start_task",
        "record_gate",
        "history",
        "audit",
        "export",
        "verify",
        "rebuild_projections",
        "exactly_once",
        "what_if",
        "metrics",
    } <= set(TAKING_ARGUMENTS)
    # Taking none, they cannot be handed a wrong one (a call that does not
    # fit the signature is a TypeError, by design: test_arguments.py).
    assert {"catch_up", "written", "close", "pending_sessions"} <= set(METHODS)
    assert not {"catch_up", "written", "close"} & set(TAKING_ARGUMENTS)


@pytest.fixture
def started(service: RecoveryService) -> RecoveryService:
    service.start_run("r", {"t": []})
    service.start_task("t", run_id="r", last_commit="c0")
    service.log_lesson("t", "an idea", "it never helps")
    return service


def _use(result: object) -> None:
    """What a caller does with an answer: read a stream, enter a block."""
    if isinstance(result, Iterator):
        list(result)
    elif isinstance(result, AbstractContextManager):
        with result:
            pass


@pytest.mark.parametrize("method", TAKING_ARGUMENTS)
def test_a_wrong_argument_is_a_devs_error_and_writes_nothing(
    started: RecoveryService, method: str
) -> None:
    service = started
    parameters = _parameters(METHODS[method])
    missing = [p.name for p in parameters if p.name not in VALID]
    assert not missing, f"give VALID a valid value of {missing} ({method})"
    required = {
        p.name: VALID[p.name]
        for p in parameters
        if p.default is inspect.Parameter.empty
    }
    wrong: list[str] = []
    for parameter in parameters:
        field = FIELD_NAMES.get((method, parameter.name), parameter.name)
        for make, always in [
            *((m, True) for m in NEVER_VALID),
            *((m, False) for m in SOMETIMES_VALID),
        ]:
            value = make()
            call = f"{method}({parameter.name}={value!r})"
            before = service.recorder.max_notification_id()
            try:
                result = getattr(service, method)(**{**required, parameter.name: value})
            except DevsError as refused:
                if service.recorder.max_notification_id() != before:
                    wrong.append(f"{call} wrote before it raised {refused!r}")
                if always and (
                    not isinstance(refused, InvalidInput) or refused.field != field
                ):
                    wrong.append(f"{call} raised {refused!r}, not InvalidInput {field}")
                continue
            except Exception as error:  # what this test is about
                wrong.append(f"{call} raised {type(error).__name__}: {error}")
                continue
            if always:
                wrong.append(f"{call} was not refused at the call")
            try:
                _use(result)
            except DevsError:
                pass
            except Exception as error:  # what this test is about
                wrong.append(f"{call}, used, raised {type(error).__name__}: {error}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"env": 7}, "env"),
        ({"env": "SQLITE_DBNAME=x"}, "env"),
        ({"env": {"SQLITE_DBNAME": 7}}, "env"),
        ({"env": {7: "x"}}, "env"),
        ({"env": [("SQLITE_DBNAME", "x")]}, "env"),
        ({"policy": {"escalation_threshold": 2}}, "policy"),
        ({"policy": "strict"}, "policy"),
        ({"policy": math.nan}, "policy"),
    ],
)
def test_the_constructor_refuses_wrong_arguments(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    arguments: dict[str, Any],
    field: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEVS_DB", raising=False)
    env = {"SQLITE_DBNAME": str(tmp_path / "devs.sqlite")}
    with pytest.raises(InvalidInput) as refused:
        RecoveryService(**{"env": env, **arguments})
    assert refused.value.field == field
    assert list(tmp_path.iterdir()) == []  # nothing opened, nothing written
    with open_service(env=env, policy=Policy()) as service:  # and the right ones
        assert service.catch_up() == 0
