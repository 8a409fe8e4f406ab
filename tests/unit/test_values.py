"""Bad input gets a clear error that names the argument and says what was wrong.

Every rule is exercised through ``@validated`` functions shaped like the
service's commands: a method with positional, keyword-only and optional
arguments.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from devs.domain.errors import InvalidInput
from devs.domain.values import (
    DAG_MAX_NODES,
    ERROR_MAX,
    EXIT_CODE_MAX,
    EXIT_CODE_MIN,
    ID_MAX,
    OUTPUT_MAX,
    Actor,
    AgentName,
    CommitId,
    Dag,
    EntropyScore,
    ErrorText,
    ExitCode,
    GateName,
    Limit,
    OutputText,
    Position,
    RcaSummary,
    Reason,
    RunId,
    Strategy,
    TaskId,
    Version,
    validated,
)

CONTROL = [chr(c) for c in range(0x20)] + ["\x7f"]


class Service:
    """Commands with the service's signatures; each returns what it received."""

    @validated
    def start_run(self, run_id: RunId, dag: Dag) -> object:
        """Start a run over ``dag``."""
        return dag

    @validated
    def start_task(
        self,
        task_id: TaskId,
        *,
        run_id: RunId | None = None,
        agent: AgentName | None = None,
        last_commit: CommitId | None = None,
    ) -> tuple[object, ...]:
        return task_id, run_id, agent, last_commit

    @validated
    def record_gate(
        self,
        task_id: TaskId,
        exit_code: ExitCode,
        *,
        gate: GateName | None = None,
        strategy: Strategy | None = None,
        error: ErrorText | None = None,
        output: OutputText | None = None,
    ) -> tuple[object, ...]:
        """Judge a gate by its exit code."""
        return task_id, exit_code, gate, strategy, error, output

    @validated
    def report_entropy(self, task_id: TaskId, score: EntropyScore) -> object:
        return score

    @validated
    def log_lesson(
        self, task_id: TaskId, failed_strategy: Strategy, rca_summary: RcaSummary
    ) -> tuple[str, str]:
        return failed_strategy, rca_summary

    @validated
    def rewind(
        self,
        task_id: TaskId,
        *,
        actor: Actor,
        reason: Reason,
        to_commit: CommitId | None = None,
    ) -> tuple[object, ...]:
        return actor, reason, to_commit

    @validated
    def is_strategy_blacklisted(self, task_id: TaskId, candidate: Strategy) -> str:
        return candidate

    @validated
    def state_at(self, task_id: TaskId, version: Version) -> int:
        return version

    @validated
    def notifications(
        self, *, after: Position = 0, limit: Limit = 100
    ) -> tuple[int, int]:
        return after, limit


@validated
def run_state(run_id: RunId) -> str:
    return run_id


def unchecked_record_gate(
    self: object,
    task_id: str,
    exit_code: int | None,
    *,
    gate: str | None = None,
    strategy: str | None = None,
    error: str | None = None,
    output: str | None = None,
) -> tuple[object, ...]:
    return task_id, exit_code, gate, strategy, error, output


SERVICE = Service()
LOOSE: Any = SERVICE  # for calls with deliberately wrong types
LOOSE_RUN_STATE: Any = run_state
BIG = 10**5000  # more digits than int() will turn into a string


def refusal(call: Callable[[], object]) -> str:
    with pytest.raises(InvalidInput) as caught:
        call()
    return str(caught.value)


# ============================================================ the messages


@pytest.mark.parametrize(
    ("call", "message"),
    [
        # identifiers: task, run, commit ids and actors
        (lambda: LOOSE.start_task(""), "task_id must not be empty"),
        (lambda: LOOSE.start_task(" \t "), "task_id must not be empty"),
        (
            lambda: LOOSE.start_task("x" * 201),
            "task_id is 201 characters long; the limit is 200",
        ),
        (
            lambda: LOOSE.start_task("a\nb"),
            "task_id must not contain control characters",
        ),
        (
            lambda: LOOSE.start_task("a\x00b"),
            "task_id must not contain control characters",
        ),
        (
            lambda: LOOSE.start_task("a\x7fb"),
            "task_id must not contain control characters",
        ),
        (
            lambda: LOOSE.start_task(" padded"),
            "task_id must not start or end with whitespace: ' padded'",
        ),
        (
            lambda: LOOSE.start_task("padded\u3000"),
            "task_id must not start or end with whitespace: 'padded\\u3000'",
        ),
        (lambda: LOOSE.start_task(42), "task_id must be a string, got int 42"),
        (lambda: LOOSE.start_task(None), "task_id must be a string, got NoneType None"),
        (lambda: LOOSE.start_task(b"t1"), "task_id must be a string, got bytes b't1'"),
        (
            lambda: LOOSE.start_task(b"x" * 100),
            "task_id must be a string, got bytes b'" + "x" * 55 + "...",
        ),
        (
            lambda: LOOSE.start_task("\ud800"),
            "task_id must be valid Unicode text (no lone surrogates)",
        ),
        (lambda: LOOSE.start_task("t", run_id=""), "run_id must not be empty"),
        (
            lambda: LOOSE.start_task("t", last_commit="abc "),
            "last_commit must not start or end with whitespace: 'abc '",
        ),
        (lambda: LOOSE_RUN_STATE(7), "run_id must be a string, got int 7"),
        (
            lambda: LOOSE.rewind("t", actor="a\tb", reason="r"),
            "actor must not contain control characters",
        ),
        (
            lambda: LOOSE.rewind("t", actor="a", reason="r", to_commit="x" * 300),
            "to_commit is 300 characters long; the limit is 200",
        ),
        # names: one line, not blank, surrounding spaces allowed
        (lambda: LOOSE.start_task("t", agent="   "), "agent must not be empty"),
        (
            lambda: LOOSE.start_task("t", agent="a\nb"),
            "agent must not contain control characters",
        ),
        (
            lambda: LOOSE.record_gate("t", 0, gate="g" * 201),
            "gate is 201 characters long; the limit is 200",
        ),
        (lambda: LOOSE.record_gate("t", 0, gate=3), "gate must be a string, got int 3"),
        # long texts: newlines allowed, NUL is not
        (lambda: LOOSE.record_gate("t", 0, strategy=""), "strategy must not be empty"),
        (
            lambda: LOOSE.record_gate("t", 0, strategy="s" * 4_001),
            "strategy is 4,001 characters long; the limit is 4,000",
        ),
        (
            lambda: LOOSE.record_gate("t", 0, strategy="a\x00"),
            "strategy must not contain control characters",
        ),
        (lambda: LOOSE.log_lesson("t", "", "why"), "failed_strategy must not be empty"),
        (
            lambda: LOOSE.log_lesson("t", "x" * 4_001, "why"),
            "failed_strategy is 4,001 characters long; the limit is 4,000",
        ),
        (lambda: LOOSE.log_lesson("t", "ok", "\n"), "rca_summary must not be empty"),
        (
            lambda: LOOSE.log_lesson("t", "ok", "y" * 16_001),
            "rca_summary is 16,001 characters long; the limit is 16,000",
        ),
        (lambda: LOOSE.rewind("t", actor="a", reason=""), "reason must not be empty"),
        (
            lambda: LOOSE.rewind("t", actor="a", reason="r" * 4_001),
            "reason is 4,001 characters long; the limit is 4,000",
        ),
        (
            lambda: LOOSE.is_strategy_blacklisted("t", ["s"]),
            "candidate must be a string, got list ['s']",
        ),
        (
            lambda: LOOSE.record_gate("t", 0, error="\x00"),
            "error must not contain control characters",
        ),
        (
            lambda: LOOSE.record_gate("t", 1, output="a\x00"),
            "output must not contain control characters",
        ),
        (
            lambda: LOOSE.record_gate("t", 1, error=7),
            "error must be a string, got int 7",
        ),
        (
            lambda: LOOSE.record_gate("t", 1, output="tail \udfff"),
            "output must be valid Unicode text (no lone surrogates)",
        ),
        (
            lambda: LOOSE.record_gate("t", 1, error="e" * 200_000 + "\ud800"),
            "error must be valid Unicode text (no lone surrogates)",
        ),
        # exit codes
        (
            lambda: LOOSE.record_gate("t", True),
            "exit_code must be an integer or None, got bool True",
        ),
        (
            lambda: LOOSE.record_gate("t", 1.5),
            "exit_code must be an integer or None, got float 1.5",
        ),
        (
            lambda: LOOSE.record_gate("t", "0"),
            "exit_code must be an integer or None, got str '0'",
        ),
        (
            lambda: LOOSE.record_gate("t", 2**32),
            "exit_code 4294967296 is out of range [-2147483648, 4294967295]",
        ),
        (
            lambda: LOOSE.record_gate("t", -(2**31) - 1),
            "exit_code -2147483649 is out of range [-2147483648, 4294967295]",
        ),
        (
            lambda: LOOSE.record_gate("t", BIG),
            "exit_code <int too large to show> is out of range "
            "[-2147483648, 4294967295]",
        ),
        # entropy scores
        (lambda: LOOSE.report_entropy("t", 1.5), "score 1.5 is out of range [0, 1]"),
        (
            lambda: LOOSE.report_entropy("t", -0.01),
            "score -0.01 is out of range [0, 1]",
        ),
        (lambda: LOOSE.report_entropy("t", 2), "score 2.0 is out of range [0, 1]"),
        (
            lambda: LOOSE.report_entropy("t", math.nan),
            "score must be a finite number in [0, 1], got nan",
        ),
        (
            lambda: LOOSE.report_entropy("t", -math.inf),
            "score must be a finite number in [0, 1], got -inf",
        ),
        (
            lambda: LOOSE.report_entropy("t", True),
            "score must be a number, got bool True",
        ),
        (
            lambda: LOOSE.report_entropy("t", "0.5"),
            "score must be a number, got str '0.5'",
        ),
        (
            lambda: LOOSE.report_entropy("t", None),
            "score must be a number, got NoneType None",
        ),
        (
            lambda: LOOSE.report_entropy("t", 10**400),
            "score " + "1" + "0" * 56 + "... is out of range [0, 1]",
        ),
        # versions, positions, limits
        (lambda: LOOSE.state_at("t", "2"), "version must be an integer, got str"),
        (lambda: LOOSE.state_at("t", True), "version must be an integer, got bool"),
        (
            lambda: LOOSE.notifications(after=-1),
            "after must be a non-negative integer, got -1",
        ),
        (
            lambda: LOOSE.notifications(after="3"),
            "after must be a non-negative integer, got '3'",
        ),
        (
            lambda: LOOSE.notifications(limit=0),
            "limit must be an integer in [1, 10000], got 0",
        ),
        (
            lambda: LOOSE.notifications(limit=10_001),
            "limit must be an integer in [1, 10000], got 10001",
        ),
        (
            lambda: LOOSE.notifications(limit=2.0),
            "limit must be an integer in [1, 10000], got 2.0",
        ),
        # DAGs
        (
            lambda: LOOSE.start_run("r", ["a"]),
            "dag must be a mapping of node to prerequisites, got list",
        ),
        (lambda: LOOSE.start_run("r", {}), "dag must have at least one node"),
        (
            lambda: LOOSE.start_run("r", dict.fromkeys(map(str, range(10_001)), ())),
            "dag has 10,001 nodes; the limit is 10,000",
        ),
        (
            lambda: LOOSE.start_run("r", {"a": "b"}),
            "prerequisites of dag node 'a' must be a list of node ids, got str",
        ),
        (
            lambda: LOOSE.start_run("r", {"a": {"b"}}),
            "prerequisites of dag node 'a' must be a list of node ids, got set",
        ),
        (
            lambda: LOOSE.start_run("r", {"a": None}),
            "prerequisites of dag node 'a' must be a list of node ids, got NoneType",
        ),
        (lambda: LOOSE.start_run("r", {"": []}), "dag node must not be empty"),
        (lambda: LOOSE.start_run("r", {1: []}), "dag node must be a string, got int 1"),
        (
            lambda: LOOSE.start_run("r", {"a ": []}),
            "dag node must not start or end with whitespace: 'a '",
        ),
        (
            lambda: LOOSE.start_run("r", {"a": [], "b": [""]}),
            "prerequisite of 'b' must not be empty",
        ),
        (
            lambda: LOOSE.start_run("r", {"a": [], "b": ["a", "x\ny"]}),
            "prerequisite of 'b' must not contain control characters",
        ),
        (
            lambda: LOOSE.start_run("r", {"a": [], "b": [2]}),
            "prerequisite of 'b' must be a string, got int 2",
        ),
    ],
)
def test_refusals_name_the_argument(call: Callable[[], object], message: str) -> None:
    assert refusal(call) == message


def test_the_first_bad_argument_in_signature_order_is_reported() -> None:
    assert refusal(lambda: LOOSE.record_gate("", True, gate="\n")) == (
        "task_id must not be empty"
    )
    # Keyword order does not matter: the signature's does.
    assert refusal(
        lambda: LOOSE.record_gate(output="\x00", exit_code=True, task_id="t")
    ) == ("exit_code must be an integer or None, got bool True")
    assert refusal(lambda: LOOSE.rewind("t", reason="", actor="", to_commit="")) == (
        "actor must not be empty"
    )


def test_the_first_bad_node_of_a_dag_is_reported() -> None:
    message = refusal(lambda: LOOSE.start_run("r", {"a": [""], "": []}))
    assert message == "prerequisite of 'a' must not be empty"


# ============================================================ what passes


def test_valid_arguments_reach_the_body() -> None:
    assert SERVICE.record_gate("task-09-1/handoff", None) == (
        "task-09-1/handoff",
        None,
        None,
        None,
        None,
        None,
    )
    assert SERVICE.record_gate(
        "t",
        EXIT_CODE_MIN,
        gate=" pytest -q ",
        strategy="multi\nline\tstrategy",
        error="",
        output="",
    ) == ("t", EXIT_CODE_MIN, " pytest -q ", "multi\nline\tstrategy", "", "")
    assert SERVICE.record_gate("t", EXIT_CODE_MAX)[1] == EXIT_CODE_MAX
    assert SERVICE.start_task("渐进式 🙂", agent="claude\u00a0code") == (
        "渐进式 🙂",
        None,
        "claude\u00a0code",
        None,
    )
    assert SERVICE.log_lesson("t", "x" * 4_000, "y" * 16_000) == (
        "x" * 4_000,
        "y" * 16_000,
    )
    assert SERVICE.notifications() == (0, 100)
    assert SERVICE.notifications(after=5, limit=10_000) == (5, 10_000)
    assert SERVICE.state_at("t", 0) == 0


def test_optional_arguments_may_be_none_explicitly() -> None:
    assert SERVICE.start_task("t", run_id=None, agent=None, last_commit=None) == (
        "t",
        None,
        None,
        None,
    )
    assert SERVICE.rewind("t", actor="a", reason="r", to_commit=None) == (
        "a",
        "r",
        None,
    )


@pytest.mark.parametrize("score", [0, 1, 0.0, 0.5, 1.0, 5e-324])
def test_scores_become_floats(score: float) -> None:
    received = SERVICE.report_entropy("t", score)
    assert type(received) is float
    assert received == score


def test_a_dag_arrives_as_a_dict_of_tuples_without_repeats() -> None:
    received = SERVICE.start_run("r", {"a": [], "b": ["a", "a"], "c": ("b", "a", "b")})
    assert received == {"a": (), "b": ("a",), "c": ("b", "a")}
    assert type(received) is dict


def test_a_dag_may_be_any_mapping_of_lists_or_tuples() -> None:
    from types import MappingProxyType

    received = SERVICE.start_run("r", MappingProxyType({"a": ["b"], "b": ()}))
    assert received == {"a": ("b",), "b": ()}
    largest = dict.fromkeys(map(str, range(DAG_MAX_NODES)), ())
    assert SERVICE.start_run("r", largest) == largest


def test_ten_million_characters_of_output_are_accepted_as_they_are() -> None:
    output = "o" * 10_000_000
    received = SERVICE.record_gate("t", 1, output=output)
    assert received[5] is output


def test_a_gate_error_or_output_of_any_length_is_accepted_as_it_is() -> None:
    """Not refused when long (an agent's output is hostile input): the task
    redacts it whole, then cuts it to ERROR_MAX / OUTPUT_MAX."""
    error = "e" * (ERROR_MAX + 1)
    output = "o" * (OUTPUT_MAX + 1)
    received = SERVICE.record_gate("t", 1, error=error, output=output)
    assert received[4] is error
    assert received[5] is output


# ============================================================ properties

VISIBLE = st.characters(
    exclude_categories=["Cs"],  # lone surrogates
    exclude_characters=CONTROL,
)
IDS = st.text(VISIBLE, min_size=1, max_size=ID_MAX).filter(
    lambda s: not s[0].isspace() and not s[-1].isspace()
)


@given(IDS)
def test_any_one_line_trimmed_text_of_1_to_200_chars_is_an_id(task_id: str) -> None:
    assert SERVICE.start_task(task_id)[0] == task_id
    assert SERVICE.start_run("r", {task_id: [task_id, task_id]}) == {
        task_id: (task_id,)
    }


SHORTER_IDS = IDS.filter(lambda s: len(s) < ID_MAX)


@given(SHORTER_IDS, st.sampled_from(CONTROL), st.data())
def test_any_control_character_is_refused_in_an_id(
    task_id: str, control: str, data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(task_id)))
    bad = task_id[:at] + control + task_id[at:]
    assert refusal(lambda: SERVICE.start_task(bad)) == (
        "task_id must not contain control characters"
    )


@given(SHORTER_IDS, st.sampled_from([" ", "\u00a0", "\u2003", "\u3000"]), st.booleans())
def test_surrounding_whitespace_is_refused_in_an_id(
    task_id: str, space: str, before: bool
) -> None:
    bad = space + task_id if before else task_id + space
    message = refusal(lambda: SERVICE.start_task(bad))
    prefix = "task_id must not start or end with whitespace: "
    assert message.startswith(prefix)
    shown = message.removeprefix(prefix)
    assert len(shown) <= 60
    assert repr(bad).startswith(shown.removesuffix("..."))


@given(st.text(VISIBLE, min_size=201, max_size=400))
def test_any_id_over_200_chars_is_refused_with_its_length(task_id: str) -> None:
    assert refusal(lambda: SERVICE.start_task(task_id)) == (
        f"task_id is {len(task_id):,} characters long; the limit is 200"
    )


@given(st.text(max_size=100), st.integers(0, 2**16))
def test_any_text_with_a_lone_surrogate_is_refused(text: str, at: int) -> None:
    position = at % (len(text) + 1)
    bad = text[:position] + "\udc80" + text[position:]
    assert refusal(lambda: SERVICE.record_gate("t", 0, strategy=bad)) == (
        "strategy must be valid Unicode text (no lone surrogates)"
    )


@given(st.integers(EXIT_CODE_MIN, EXIT_CODE_MAX))
def test_any_exit_code_in_range_is_accepted(code: int) -> None:
    assert SERVICE.record_gate("t", code)[1] == code


@given(
    st.one_of(
        st.integers(max_value=EXIT_CODE_MIN - 1),
        st.integers(min_value=EXIT_CODE_MAX + 1),
    )
)
def test_any_exit_code_out_of_range_is_refused(code: int) -> None:
    assert refusal(lambda: SERVICE.record_gate("t", code)) == (
        f"exit_code {code} is out of range [{EXIT_CODE_MIN}, {EXIT_CODE_MAX}]"
    )


@given(st.floats(0.0, 1.0))
def test_any_float_in_0_1_is_a_score(score: float) -> None:
    assert SERVICE.report_entropy("t", score) == score


@given(st.floats().filter(lambda x: not 0.0 <= x <= 1.0))
def test_any_float_outside_0_1_or_not_finite_is_refused(score: float) -> None:
    message = refusal(lambda: SERVICE.report_entropy("t", score))
    if math.isfinite(score):
        assert message == f"score {score} is out of range [0, 1]"
    else:
        assert message == f"score must be a finite number in [0, 1], got {score}"


@given(
    st.dictionaries(
        st.text("abcde", min_size=1, max_size=3),
        st.lists(st.text("abcde", min_size=1, max_size=3), max_size=8),
        min_size=1,
    )
)
def test_prerequisites_keep_their_first_occurrence(
    dag: dict[str, list[str]],
) -> None:
    expected: dict[str, tuple[str, ...]] = {}
    for node, prerequisites in dag.items():
        kept: list[str] = []
        for prerequisite in prerequisites:
            if prerequisite not in kept:
                kept.append(prerequisite)
        expected[node] = tuple(kept)
    assert SERVICE.start_run("r", dag) == expected


# ============================================================ the decorator


def test_validated_keeps_name_doc_and_signature() -> None:
    assert Service.record_gate.__name__ == "record_gate"
    assert Service.record_gate.__qualname__ == "Service.record_gate"
    assert Service.record_gate.__doc__ == "Judge a gate by its exit code."
    assert Service.start_run.__doc__ == "Start a run over ``dag``."
    parameters = inspect.signature(Service.record_gate).parameters
    assert list(parameters) == [
        "self",
        "task_id",
        "exit_code",
        "gate",
        "strategy",
        "error",
        "output",
    ]
    assert parameters["gate"].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["gate"].default is None
    assert inspect.signature(SERVICE.record_gate).parameters.keys() == (
        parameters.keys() - {"self"}
    )


def test_wrong_arity_is_still_a_type_error_in_python_s_words() -> None:
    with pytest.raises(TypeError, match="missing a required argument: 'exit_code'"):
        LOOSE.record_gate("t")
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'code'"):
        LOOSE.record_gate("t", 0, code=1)
    with pytest.raises(TypeError, match="too many positional arguments"):
        LOOSE.start_task("t", "r1")
    with pytest.raises(TypeError, match="multiple values for argument 'task_id'"):
        LOOSE.record_gate("t", 0, task_id="u")


class Decision(BaseModel):
    passed: bool


@validated
def decide(task_id: TaskId, passed: object) -> Decision:
    return Decision(passed=passed)


def test_errors_raised_by_the_body_pass_through_untouched() -> None:
    assert decide("t", True) == Decision(passed=True)
    with pytest.raises(ValidationError) as caught:
        decide("t", "perhaps")
    assert caught.value.title == "Decision"
    assert refusal(lambda: decide("", True)) == "task_id must not be empty"


@validated
def unworded(count: int, label: str = "x") -> str:
    return label * count


def test_parameters_without_a_wording_still_name_the_argument() -> None:
    assert unworded(2) == "xx"
    message = refusal(lambda: unworded("many"))  # type: ignore[arg-type]
    assert message.startswith("count is invalid: Input should be a valid integer")


def test_invalid_input_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="task_id must not be empty"):
        LOOSE.start_task("")


def test_every_validated_function_builds_its_validator() -> None:
    """A validator is built at a function's first call, not at import: every
    one the domain decorates builds, so no annotation that
    cannot resolve waits for its first caller."""
    import devs.domain.application  # noqa: F401  (the service's commands)
    from devs.domain.values import DECORATED, _Validator

    assert len(DECORATED) >= 49
    for func in DECORATED:
        built = _Validator.of(func)
        assert built.skip in (0, 1), func.__qualname__
