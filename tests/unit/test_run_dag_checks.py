"""A DAG's ids are checked once each, with the same verdicts and words as the
check of every element in order.

:data:`~devs.domain.values.Dag` takes a quick way for a valid ``dict`` of lists
or tuples of ``str`` (each distinct id checked once) and pydantic's check of
each element for anything else. These tests hold the two to the same results:
the same value received, or the same refusal, word for word.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import WrapValidator

from devs.adapters.config import MEMORY, Settings, open_service
from devs.domain.errors import InvalidInput
from devs.domain.run import MAX_RUN_NODES
from devs.domain.values import ID_MAX, Dag, validated

# Dag without its quick way: pydantic checks every element, in order.
_DAG: Any = Dag
EVERY_ELEMENT: Any = Annotated[
    (
        _DAG.__origin__,
        *(m for m in _DAG.__metadata__ if not isinstance(m, WrapValidator)),
    )
]


@validated
def quick(dag: Dag) -> object:
    return dag


def _every_element(dag: Any) -> object:
    return dag


_every_element.__annotations__ = {"dag": EVERY_ELEMENT}
every_element: Callable[[Any], object] = validated(_every_element)

GITHUB_TOKEN = "ghp_" + "a1B2" * 9


class Letter(StrEnum):
    A = "a"


def outcome(check: Callable[[Any], object], dag: Any) -> tuple[str, object]:
    """What ``check`` made of ``dag``: the value and its types, or the refusal."""
    try:
        received = check(dag)
    except InvalidInput as refusal:
        return "refused", str(refusal)
    assert isinstance(received, dict)
    types = [
        (type(node), type(prerequisites), [type(p) for p in prerequisites])
        for node, prerequisites in received.items()
    ]
    return "received", (type(received), list(received.items()), types)


def same(dag: Any) -> tuple[str, object]:
    expected = outcome(every_element, dag)
    assert outcome(quick, dag) == expected
    return expected


IDS = st.one_of(
    st.sampled_from(
        [
            "a",
            "b",
            "c",
            "task-1",
            "",
            " ",
            "a ",
            " a",
            "a\nb",
            "a\x00",
            "a\x7f",
            "\ud800",
            "x" * ID_MAX,
            "x" * (ID_MAX + 1),
            GITHUB_TOKEN,
            "password=hunter22",
            "渐进式 🙂",
            "\u00a0",
            Letter.A,
        ]
    ),
    st.integers(0, 2),
    st.none(),
)
PREREQUISITES = st.one_of(
    st.lists(IDS, max_size=4),
    st.lists(IDS, max_size=4).map(tuple),
    st.sampled_from(["ab", None, {"a"}, 3]),
)


@given(st.dictionaries(IDS, PREREQUISITES, max_size=5))
def test_any_dag_gets_the_same_value_or_refusal_both_ways(dag: Any) -> None:
    same(dag)


@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d"]),
        st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=6),
        min_size=1,
    )
)
def test_a_valid_dag_gets_the_same_value_both_ways(dag: dict[str, list[str]]) -> None:
    kind, _ = same(dag)
    assert kind == "received"


@pytest.mark.parametrize(
    ("dag", "message"),
    [
        # The first bad element, in order, even when a later one is bad as well.
        ({"a": [""], "": []}, "prerequisite of 'a' must not be empty"),
        ({"": [], 1: []}, "dag node must not be empty"),
        ({"a": [], 1: [""]}, "dag node must be a string, got int 1"),
        (
            {"a": ["a "], "b": "c"},
            "prerequisite of 'a' must not start or end with whitespace: 'a '",
        ),
        (
            {"a": [], GITHUB_TOKEN: []},
            "dag node looks like it holds a credential (GitHub token (ghp_, gho_, "
            "ghu_, ghs_, ghr_)); ids are stored as given, so it is refused",
        ),
        (
            {"a": ["\ud800"]},
            "prerequisite of 'a' must be valid Unicode text (no lone surrogates)",
        ),
        (
            {"a": ["x" * (ID_MAX + 1)]},
            "prerequisite of 'a' is 201 characters long; the limit is 200",
        ),
        ({}, "dag must have at least one node"),
    ],
)
def test_refusals_name_the_first_bad_element(dag: Any, message: str) -> None:
    assert same(dag) == ("refused", message)


def test_ids_that_are_not_exactly_str_arrive_as_str() -> None:
    assert same({Letter.A: [Letter.A]})[0] == "received"
    assert quick({Letter.A: [Letter.A]}) == {"a": ("a",)}


def test_mappings_other_than_dict_are_checked_as_before() -> None:
    from collections import OrderedDict
    from types import MappingProxyType

    for dag in (OrderedDict(a=["b"], b=()), MappingProxyType({"a": ["b"], "b": []})):
        assert same(dag) == same({"a": ("b",), "b": ()})


def largest_with(bad: str) -> dict[str, list[str]]:
    """``MAX_RUN_NODES`` long ids, each waiting for up to ten before it, and
    ``bad`` as the last prerequisite of the last node."""
    nodes = [f"{i:05d}".rjust(ID_MAX, "n") for i in range(MAX_RUN_NODES)]
    dag = {node: nodes[max(0, i - 10) : i] for i, node in enumerate(nodes)}
    dag[nodes[-1]] = [*dag[nodes[-1]], bad]
    return dag


def test_a_credential_deep_in_a_large_dag_is_refused_by_name() -> None:
    dag = largest_with(GITHUB_TOKEN)
    last = next(reversed(dag))
    message = (
        f"prerequisite of {last!r} looks like it holds a credential (GitHub token "
        "(ghp_, gho_, ghu_, ghs_, ghr_)); ids are stored as given, so it is refused"
    )
    assert same(dag) == ("refused", message)
    with open_service(Settings(db=MEMORY, database_url=None)) as app:
        with pytest.raises(InvalidInput) as caught:
            app.start_run("r", dag)
        assert str(caught.value) == message
        assert str(caught.value).count(GITHUB_TOKEN) == 0


def test_a_bad_id_deep_in_a_large_dag_is_refused_by_name() -> None:
    dag = largest_with("bad\tid")
    last = next(reversed(dag))
    assert same(dag) == (
        "refused",
        f"prerequisite of {last!r} must not contain control characters",
    )


def test_a_large_valid_dag_gets_the_same_value_both_ways() -> None:
    dag = largest_with(next(iter(largest_with("x"))))
    assert same(dag)[0] == "received"
