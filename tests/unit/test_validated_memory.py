"""``@validated`` remembers what it made of a call's arguments, for the same
call again: the body receives exactly what a fresh validation gives, every
refusal is refused again with the same words, and nothing is kept that must
not be (a text holding a secret, a long text, an idempotency key, a request,
the instance a method is called on)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devs.domain import values
from devs.domain.errors import InvalidInput
from devs.domain.values import (
    EntropyScore,
    ErrorText,
    ExitCode,
    GateName,
    IdempotencyKey,
    Limit,
    Position,
    RequestText,
    Strategy,
    TaskId,
    validated,
)


class Service:
    """Methods shaped like the service's; each returns what it received."""

    def __init__(self, name: str) -> None:
        self.name = name

    @validated
    def record_gate(
        self,
        task_id: TaskId,
        exit_code: ExitCode,
        *,
        gate: GateName | None = None,
        strategy: Strategy | None = None,
        error: ErrorText | None = None,
    ) -> tuple[object, ...]:
        return self.name, task_id, exit_code, gate, strategy, error

    @validated
    def report_entropy(self, task_id: TaskId, score: EntropyScore) -> object:
        return score

    @validated
    def notifications(
        self, *, after: Position = 0, limit: Limit = 100
    ) -> tuple[int, int]:
        return after, limit


@validated
def pending(idempotency_key: IdempotencyKey, request: RequestText) -> str:
    return f"{idempotency_key} {request}"


@pytest.fixture(autouse=True)
def empty_memory() -> Iterator[None]:
    values._KNOWN.clear()
    yield
    values._KNOWN.clear()


def outcome(call: Callable[[], object]) -> object:
    try:
        return ("returned", call())
    except (InvalidInput, TypeError) as error:
        return (type(error).__name__, str(error), getattr(error, "field", None))


def alone(call: Callable[[], object]) -> object:
    """How ``call`` ends with nothing remembered: pydantic alone."""
    kept = values._KNOWN
    values._KNOWN = {}
    try:
        return outcome(call)
    finally:
        values._KNOWN = kept


def kept_texts() -> set[str]:
    """Every text in memory: of the calls and of what was made of them."""
    return {
        value
        for (_, _, given, *names), (args, kwargs) in values._KNOWN.items()
        for value in (*given, *names, *args, *kwargs.values())
        if isinstance(value, str)
    }


def test_a_call_again_gets_what_validation_made_of_it() -> None:
    service = Service("s")
    first = service.record_gate("t1", 1, gate="tests", error="assert 1 == 2")
    assert len(values._KNOWN) == 1
    again = service.record_gate("t1", 1, gate="tests", error="assert 1 == 2")
    assert again == first == ("s", "t1", 1, "tests", None, "assert 1 == 2")
    assert len(values._KNOWN) == 1
    assert service.report_entropy("t1", 1) == 1.0  # an int score becomes a float
    score = service.report_entropy("t1", 1)
    assert type(score) is float
    assert score == 1.0
    assert service.notifications(limit=5) == service.notifications(limit=5) == (0, 5)


def test_the_instance_is_the_caller_s_and_is_not_kept() -> None:
    one, other = Service("one"), Service("other")
    assert one.record_gate("t1", 1)[0] == "one"
    assert other.record_gate("t1", 1)[0] == "other"  # the same call, remembered
    assert len(values._KNOWN) == 1
    assert all(one not in key and other not in key for key in values._KNOWN)


def test_refusals_are_refused_again_and_never_kept() -> None:
    service = Service("s")
    assert service.record_gate("t1", 1)
    for _ in range(2):
        with pytest.raises(InvalidInput, match="exit_code must be an integer"):
            service.record_gate("t1", True)  # True == 1, but not an int
        with pytest.raises(InvalidInput, match="task_id must not be empty"):
            service.record_gate("", 1)
        with pytest.raises(TypeError, match="missing"):
            service.record_gate("t1")  # type: ignore[call-arg]
    assert len(values._KNOWN) == 1


def test_only_short_plain_clean_texts_are_kept() -> None:
    service = Service("s")
    secret = "token=ghp_" + "a" * 36
    assert service.record_gate("t1", 1, gate=secret)[3] == "token=[REDACTED]"
    assert service.record_gate("t1", 1, error=secret)[5] == secret  # redacted later
    long = "x" * (values.ID_MAX + 1)
    service.record_gate("t1", 1, error=long)
    service.report_entropy("t1", 0.5)  # a float: not kept
    assert values._KNOWN == {}
    service.record_gate("t1", 1, error="y" * values.ID_MAX)
    assert len(values._KNOWN) == 1
    assert kept_texts() >= {"t1", "y" * values.ID_MAX}
    assert not any("ghp_" in text for text in kept_texts())


def test_idempotency_keys_and_requests_are_never_kept() -> None:
    assert pending("key-1", "req") == pending("key-1", "req") == "key-1 req"
    assert values._KNOWN == {}


def test_positional_and_keyword_calls_are_told_apart() -> None:
    service = Service("s")
    assert service.record_gate("t1", 1, gate="g") == ("s", "t1", 1, "g", None, None)
    assert service.record_gate("t1", 1, error="g") == ("s", "t1", 1, None, None, "g")
    assert service.record_gate("t1", exit_code=1) == ("s", "t1", 1, None, None, None)
    assert service.record_gate(task_id="t1", exit_code=1)[1:3] == ("t1", 1)
    with pytest.raises(TypeError):
        Service.record_gate(task_id="t1", exit_code=1)  # type: ignore[call-arg]


def test_the_memory_is_bounded() -> None:
    service = Service("s")
    for n in range(values._KNOWN_MAX + 10):
        service.record_gate(f"t{n}", 1)
    assert 0 < len(values._KNOWN) <= values._KNOWN_MAX


TEXTS = st.one_of(
    st.sampled_from(["t1", " t1", "", "tests", "a\nb", "x" * 201, "sk-" + "a" * 20]),
    st.text(max_size=8),
)
ARGUMENTS = st.one_of(
    TEXTS, st.integers(-(2**33), 2**33), st.none(), st.booleans(), st.floats()
)


@settings(max_examples=300)
@given(st.lists(st.tuples(ARGUMENTS, ARGUMENTS, ARGUMENTS), min_size=1, max_size=6))
def test_remembered_or_not_a_call_ends_as_pydantic_alone_ends_it(
    calls: list[tuple[Any, Any, Any]],
) -> None:
    service = Service("s")
    for task_id, exit_code, gate in calls * 2:  # each call twice

        def call(t: Any = task_id, c: Any = exit_code, g: Any = gate) -> object:
            return service.record_gate(t, c, gate=g)

        assert outcome(call) == alone(call)
