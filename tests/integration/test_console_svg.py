"""The console's SVG pictures: drawn from the real state machine, escaped,
well-formed XML, free of scripts and inline styles, and bounded in size."""

from __future__ import annotations

import html
import math
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

import pytest

from devs.adapters.console.svg import (
    MAX_BARS,
    MAX_DAG_NODES,
    bar_chart_svg,
    dag_svg,
    state_chart_svg,
)
from devs.domain.chart import MACHINE, TaskState
from devs.domain.ports import RunState
from devs.domain.run import RunStatus

SVG = "{http://www.w3.org/2000/svg}"

HOSTILE = (
    "<img src=x onerror=alert(1)>",
    "</svg><script>alert(1)</script>",
    '" onmouseover="alert(1)" x="',
    "a'b&c\x00d",
)


def run_state(
    dag: dict[str, tuple[str, ...]],
    *,
    run_id: str = "run-1",
    status: RunStatus = RunStatus.RUNNING,
    started: tuple[str, ...] = (),
    completed: tuple[str, ...] = (),
    skipped: tuple[str, ...] = (),
    ready: tuple[str, ...] = (),
    paused_by: tuple[str, ...] = (),
) -> RunState:
    return RunState(
        run_id=run_id,
        status=status,
        dag=dag,
        order=tuple(dag),
        started=started,
        completed=completed,
        skipped=skipped,
        ready=ready,
        paused_by=paused_by,
        updated_at=datetime.now(UTC),
    )


def parsed(svg: str) -> ET.Element:
    """The markup as XML, checked for what a strict CSP and the console need."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    assert root.get("role") == "img"
    assert root.get("aria-label")
    assert root[0].tag == f"{SVG}title"
    for element in root.iter():
        assert element.tag.removeprefix(SVG) not in {"script", "style", "foreignObject"}
        for name, value in element.attrib.items():
            assert not name.lower().startswith("on"), name
            assert name not in {"style", "href"}, name
            assert not name.endswith("}href"), name
            assert "url(" not in value or value.startswith("url(#"), value
    return root


def with_attribute(root: ET.Element, name: str) -> list[ET.Element]:
    return [e for e in root.iter() if name in e.attrib]


def assert_escaped(svg: str, texts: tuple[str, ...]) -> None:
    assert "<script" not in svg
    assert "<img" not in svg
    for text in texts:
        assert html.escape(text, quote=True) in svg


# ------------------------------------------------------------ the state chart


@pytest.mark.parametrize("current", [*TaskState, None])
def test_the_chart_has_one_group_per_state_and_marks_the_current_one(
    current: TaskState | None,
) -> None:
    root = parsed(state_chart_svg(current))

    groups = with_attribute(root, "data-state")
    assert sorted(g.attrib["data-state"] for g in groups) == sorted(TaskState)
    marked = [g.attrib["data-state"] for g in groups if g.get("aria-current") == "true"]
    assert marked == ([] if current is None else [current])
    for group in groups:
        is_current = group.attrib["data-state"] == current
        assert group.get("class") == ("state current" if is_current else "state")
    fills: dict[str, str | None] = {}
    for group in groups:
        rect = group.find(f"{SVG}rect")
        assert rect is not None
        fills[group.attrib["data-state"]] = rect.get("fill")
    if current is not None:
        current_fill = fills.pop(current)
        assert current_fill not in fills.values()


def test_the_chart_draws_every_transition_of_the_machine_once_per_pair() -> None:
    expected: dict[tuple[str, str], set[str]] = {}
    for name, event in MACHINE.events.items():
        for transitions in event.transitions.values():
            for t in transitions:
                expected.setdefault((t.source, t.dest or t.source), set()).add(name)

    root = parsed(state_chart_svg(None))
    drawn = with_attribute(root, "data-source")
    pairs = [(g.attrib["data-source"], g.attrib["data-dest"]) for g in drawn]
    assert sorted(pairs) == sorted(expected)
    for group, pair in zip(drawn, pairs, strict=True):
        assert group.find(f"{SVG}path") is not None
        shown = "".join(group.itertext())
        for trigger in expected[pair]:
            assert trigger in shown


def test_the_chart_escapes_an_unknown_current_state() -> None:
    for hostile in HOSTILE:
        svg = state_chart_svg(hostile)
        root = parsed(svg)
        assert not [
            g for g in with_attribute(root, "data-state") if "aria-current" in g.attrib
        ]
        assert "<script" not in svg
        assert "<img" not in svg
    assert_escaped(state_chart_svg(HOSTILE[0]), HOSTILE[:1])


# ---------------------------------------------------------------- a run's DAG


def test_dag_nodes_carry_their_state() -> None:
    long_id = "a-very-long-task-identifier-that-goes-on-and-on"
    dag: dict[str, tuple[str, ...]] = {
        "plan": (),
        "skip-me": ("plan",),
        "build": ("plan",),
        "ask": ("plan",),
        long_id: ("build",),
        "later": (long_id, "ask"),
    }
    run = run_state(
        dag,
        status=RunStatus.PAUSED,
        started=("plan", "build", "ask"),
        completed=("plan",),
        skipped=("skip-me",),
        ready=(long_id,),
        paused_by=("ask",),
    )
    svg = dag_svg(run)
    root = parsed(svg)

    nodes = {g.attrib["data-node"]: g for g in with_attribute(root, "data-node")}
    states = {n: g.attrib["data-node-state"] for n, g in nodes.items()}
    assert states == {
        "plan": "completed",
        "skip-me": "skipped",
        "build": "running",
        "ask": "paused",
        long_id: "ready",
        "later": "waiting",
    }
    for node, group in nodes.items():
        assert group.get("class") == f"node {states[node]}"
        title = group.find(f"{SVG}title")
        assert title is not None
        assert title.text is not None
        assert node in title.text
    label = nodes[long_id].find(f"{SVG}text")
    assert label is not None
    assert label.text is not None
    assert label.text.endswith("…")
    assert len(label.text) <= 24
    assert long_id.startswith(label.text[:-1])

    # Every prerequisite is drawn above the node that needs it.
    def top(node: str) -> float:
        rect = nodes[node].find(f"{SVG}rect")
        assert rect is not None
        return float(rect.attrib["y"])

    for node, prerequisites in dag.items():
        for before in prerequisites:
            assert top(before) < top(node)
    legend = with_attribute(root, "data-legend")
    assert {g.attrib["data-legend"] for g in legend} == {
        "completed",
        "skipped",
        "paused",
        "running",
        "ready",
        "waiting",
    }


def test_dag_escapes_hostile_ids() -> None:
    dag: dict[str, tuple[str, ...]] = {HOSTILE[0]: (), HOSTILE[1]: (HOSTILE[0],)}
    dag[HOSTILE[2]] = (HOSTILE[1],)
    dag[HOSTILE[3]] = ()
    run = run_state(dag, run_id=HOSTILE[1], started=(HOSTILE[0],), ready=(HOSTILE[2],))
    svg = dag_svg(run)
    root = parsed(svg)
    assert_escaped(svg, HOSTILE[:3])
    assert {g.attrib["data-node"] for g in with_attribute(root, "data-node")} == {
        *HOSTILE[:3],
        "a'b&c\ufffdd",
    }


def test_an_empty_dag_says_so() -> None:
    svg = dag_svg(run_state({}))
    parsed(svg)
    assert "no tasks" in svg
    assert "data-node=" not in svg


def test_a_dag_of_ten_thousand_nodes_is_drawn_in_bounded_size() -> None:
    count = 10_000
    dag = {
        f"task-{i}": tuple(f"task-{j}" for j in (i - 1, i - 3, i // 2) if 0 <= j < i)
        for i in range(count)
    }
    done = tuple(f"task-{i}" for i in range(count // 2))
    run = run_state(dag, completed=done, started=(*done, f"task-{count // 2}"))

    svg = dag_svg(run)
    root = parsed(svg)

    assert svg.count("data-node=") <= MAX_DAG_NODES
    assert re.search(r"and [\d,]+ more", svg)
    assert len(svg) < 400_000
    drawn = {g.attrib["data-node"]: g for g in with_attribute(root, "data-node")}
    # The window is around the frontier: the running task is drawn.
    assert drawn[f"task-{count // 2}"].attrib["data-node-state"] == "running"


def test_a_wide_dag_is_capped_too() -> None:
    dag: dict[str, tuple[str, ...]] = {f"n{i}": () for i in range(5_000)}
    svg = dag_svg(run_state(dag, ready=tuple(dag)))
    parsed(svg)
    assert svg.count("data-node=") == MAX_DAG_NODES
    assert f"and {5_000 - MAX_DAG_NODES:,} more" in svg


# ----------------------------------------------------------------- bar charts


def bar_values(svg: str) -> dict[str, str]:
    root = parsed(svg)
    values: dict[str, str] = {}
    for group in with_attribute(root, "data-label"):
        texts = [t for t in group.iter(f"{SVG}text") if t.get("class") == "value"]
        assert len(texts) == 1
        assert texts[0].text is not None
        values[group.attrib["data-label"]] = texts[0].text
    return values


def bar_widths(svg: str) -> dict[str, float]:
    root = ET.fromstring(svg)
    widths: dict[str, float] = {}
    for group in with_attribute(root, "data-label"):
        rect = group.find(f"{SVG}rect")
        assert rect is not None
        widths[group.attrib["data-label"]] = float(rect.attrib["width"])
    return widths


def test_bars_format_their_values() -> None:
    svg = bar_chart_svg(
        "Waits", [("int", 3), ("half", 2.5), ("pi", math.pi), ("big", 12_345)], unit="s"
    )
    assert bar_values(svg) == {
        "int": "3 s",
        "half": "2.5 s",
        "pi": "3.14 s",
        "big": "12,345 s",
    }
    widths = bar_widths(svg)
    assert widths["big"] == max(widths.values())
    assert bar_values(bar_chart_svg("Share", [("a", 50)], unit="%")) == {"a": "50%"}


@pytest.mark.parametrize(
    "bars",
    [
        [],
        [("zero", 0)],
        [("nan", math.nan)],
        [("inf", math.inf), ("minus", -math.inf), ("negative", -5)],
    ],
)
def test_bars_without_data_say_so(bars: list[tuple[str, float]]) -> None:
    svg = bar_chart_svg("Empty", bars)
    parsed(svg)
    assert "no data" in svg


def test_bad_values_count_as_zero_next_to_good_ones() -> None:
    bars = [("good", 4.0), ("nan", math.nan), ("inf", math.inf), ("neg", -2.0)]
    svg = bar_chart_svg("Mixed", bars)
    assert "no data" not in svg
    assert bar_values(svg) == {"good": "4", "nan": "0", "inf": "0", "neg": "0"}
    widths = bar_widths(svg)
    assert widths["good"] > 0
    assert widths["nan"] == widths["inf"] == widths["neg"] == 0


def test_bar_charts_escape_titles_labels_and_units() -> None:
    bars = [(hostile, float(i + 1)) for i, hostile in enumerate(HOSTILE)]
    svg = bar_chart_svg(HOSTILE[1], bars, unit=HOSTILE[0])
    parsed(svg)
    assert_escaped(svg, HOSTILE[:3])


def test_many_bars_are_capped() -> None:
    svg = bar_chart_svg("Many", [(f"b{i}", float(i + 1)) for i in range(1_000)])
    parsed(svg)
    assert svg.count('class="bar"') == MAX_BARS
    assert f"and {1_000 - MAX_BARS:,} more" in svg
