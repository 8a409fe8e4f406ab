"""SVG pictures for the web console: the task state chart, a run's DAG, bar charts.

Pure functions returning markup. Every piece of data is escaped; the markup has
no scripts, no event attributes and no inline styles, only presentation
attributes and classes.
"""

from __future__ import annotations

import functools
import html
import math
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from devs.domain.chart import MACHINE
from devs.domain.ports import RunState

MAX_DAG_NODES = 200
"""Nodes :func:`dag_svg` draws at most; it says how many more there are."""
MAX_DAG_EDGES = 1_000
"""Edges :func:`dag_svg` draws at most between the nodes it draws."""
MAX_BARS = 50
"""Bars :func:`bar_chart_svg` draws at most; it says how many more there are."""
LABEL_CHARS = 24
"""Visible characters of a node or bar label; the full text is in a title."""

FONT = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"
CHAR = 0.62
"""A monospace character's width, as a fraction of the font size."""
AMBER = "#b45309"
GREY = "#64748b"

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _esc(text: object) -> str:
    """``text`` escaped for an attribute or element; characters XML cannot
    carry at all become U+FFFD."""
    return html.escape(_NOT_XML.sub("\ufffd", str(text)), quote=True)


def _clip(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _n(value: float) -> str:
    """A coordinate, to one decimal, without a trailing ``.0``."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _width(chars: int, size: float) -> float:
    return chars * size * CHAR


class _Bounds:
    """The smallest box around what has been placed."""

    def __init__(self) -> None:
        self.x0 = self.y0 = math.inf
        self.x1 = self.y1 = -math.inf

    def add(self, x0: float, y0: float, x1: float, y1: float) -> None:
        self.x0 = min(self.x0, x0, x1)
        self.y0 = min(self.y0, y0, y1)
        self.x1 = max(self.x1, x0, x1)
        self.y1 = max(self.y1, y0, y1)

    def add_text(
        self, x: float, y: float, chars: int, size: float, anchor: str
    ) -> None:
        width = _width(chars, size)
        left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
        self.add(left, y - size, left + width, y + size * 0.3)


def _svg(kind: str, label: str, bounds: _Bounds, parts: Iterable[str]) -> str:
    """The root element around ``parts``, sized to ``bounds`` plus a margin."""
    margin = 12
    x0, y0 = bounds.x0 - margin, bounds.y0 - margin
    width, height = (
        bounds.x1 - bounds.x0 + 2 * margin,
        bounds.y1 - bounds.y0 + 2 * margin,
    )
    text = _esc(label)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="devs-svg devs-{kind}"'
        f' role="img" aria-label="{text}"'
        f' viewBox="{_n(x0)} {_n(y0)} {_n(width)} {_n(height)}"'
        f' width="{_n(width)}" height="{_n(height)}"'
        f' font-family="{FONT}" font-size="12" fill="#0f172a">'
        f"<title>{text}</title>{''.join(parts)}</svg>"
    )


def _arrow(marker_id: str, colour: str) -> str:
    return (
        f'<defs><marker id="{marker_id}" viewBox="0 0 10 10" refX="9" refY="5"'
        ' markerWidth="7" markerHeight="7" orient="auto">'
        f'<path d="M0,0 L10,5 L0,10 z" fill="{colour}" stroke="none"/></marker></defs>'
    )


def _lines(
    lines: Sequence[str], x: float, y: float, *, size: float, anchor: str, cls: str
) -> str:
    """A text block of ``lines`` centred vertically on ``y``, with a white halo."""
    step = size * 1.2
    top = y - step * (len(lines) - 1) / 2 + size * 0.35
    spans = "".join(
        f'<tspan x="{_n(x)}" y="{_n(top + i * step)}">{_esc(line)}</tspan>'
        for i, line in enumerate(lines)
    )
    return (
        f'<text class="{cls}" font-size="{_n(size)}" text-anchor="{anchor}"'
        ' fill="#334155" stroke="#ffffff" stroke-width="3" stroke-linejoin="round"'
        f' paint-order="stroke">{spans}</text>'
    )


def _through(points: Sequence[tuple[float, float]], *, mid: float | None = None) -> str:
    """A path down (or up) through ``points``: S-curves from the first point to
    the second, the third to the fourth and so on, straight lines in between.
    The first curve bends at height ``mid`` if given, else halfway."""
    (x, y), *rest = points
    d = [f"M{_n(x)},{_n(y)}"]
    for i, (nx, ny) in enumerate(rest):
        if i % 2:
            d.append(f"L{_n(nx)},{_n(ny)}")
        else:
            bend = (y + ny) / 2 if mid is None or i else mid
            d.append(f"C{_n(x)},{_n(bend)} {_n(nx)},{_n(bend)} {_n(nx)},{_n(ny)}")
        x, y = nx, ny
    return " ".join(d)


def _note(
    bounds: _Bounds, text: str, y: float, *, cls: str, size: int = 12, fill: str = ""
) -> str:
    """A line of text at the left edge."""
    bounds.add_text(0, y, len(text), size, "start")
    paint = f' fill="{fill}"' if fill else ""
    weight = ' font-weight="bold"' if cls == "heading" else ""
    return (
        f'<text class="{cls}" x="0" y="{_n(y)}" font-size="{size}"{paint}{weight}>'
        f"{_esc(text)}</text>"
    )


# ------------------------------------------------------------ the state chart

_STATE_FONT = 13
_TRIGGER_FONT = 10
_STATE_H = 38
_STATE_GAP_X = 150
_STATE_GAP_Y = 150


def _machine_transitions() -> list[tuple[str, str, str]]:
    """``(source, dest, trigger)`` for every transition of :data:`MACHINE`,
    walked as :func:`devs.domain.chart.mermaid` walks it: a transition without
    a destination leaves the state as it is, a loop."""
    return [
        (str(t.source), str(t.dest or t.source), str(name))
        for name, event in MACHINE.events.items()
        for ts in event.transitions.values()
        for t in ts
    ]


@dataclass(frozen=True)
class _Edge:
    source: str
    dest: str
    triggers: tuple[str, ...]


@dataclass(frozen=True)
class _ChartLayout:
    states: tuple[str, ...]
    centres: dict[str, tuple[float, float]]
    box_w: float
    final: frozenset[str]
    edges: str
    bounds: tuple[float, float, float, float]


def _clip_to_box(
    centre: tuple[float, float], towards: tuple[float, float], hw: float, hh: float
) -> tuple[float, float]:
    """Where the ray from ``centre`` towards ``towards`` leaves the box."""
    dx, dy = towards[0] - centre[0], towards[1] - centre[1]
    if dx == 0 and dy == 0:
        return centre
    scale = min(hw / abs(dx) if dx else math.inf, hh / abs(dy) if dy else math.inf)
    return centre[0] + dx * scale, centre[1] + dy * scale


def _edge_title(edge: _Edge) -> str:
    return f"{edge.source} → {edge.dest}: {', '.join(edge.triggers)}"


def _edge_group(edge: _Edge, path: str, label: str) -> str:
    return (
        f'<g class="transition" data-source="{_esc(edge.source)}"'
        f' data-dest="{_esc(edge.dest)}"><title>{_esc(_edge_title(edge))}</title>'
        f'<path d="{path}"/>{label}</g>'
    )


@functools.cache
def _chart_layout() -> _ChartLayout:
    states = tuple(str(s) for s in MACHINE.states)
    merged: dict[tuple[str, str], list[str]] = {}
    for source, dest, trigger in _machine_transitions():
        triggers = merged.setdefault((source, dest), [])
        if trigger not in triggers:
            triggers.append(trigger)
    edges = [_Edge(s, d, tuple(t)) for (s, d), t in merged.items()]

    # Layers: breadth-first depth from the initial state.
    following: dict[str, list[str]] = {s: [] for s in states}
    for edge in edges:
        following.setdefault(edge.source, []).append(edge.dest)
    initial = str(MACHINE.initial)
    depth = {initial: 0}
    queue = deque([initial])
    while queue:
        state = queue.popleft()
        for dest in following.get(state, ()):
            if dest not in depth:
                depth[dest] = depth[state] + 1
                queue.append(dest)
    unreached = max(depth.values()) + 1
    layers: dict[int, list[str]] = {}
    for state in states:
        layers.setdefault(depth.get(state, unreached), []).append(state)

    box_w = _width(max(len(s) for s in states), _STATE_FONT) + 32
    hw, hh = box_w / 2, _STATE_H / 2
    slot = box_w + _STATE_GAP_X
    widest = max(len(row) for row in layers.values())
    centres: dict[str, tuple[float, float]] = {}
    index: dict[str, int] = {}
    for number, row in enumerate(layers[level] for level in sorted(layers)):
        left = (widest - len(row)) * slot / 2
        for i, state in enumerate(row):
            centres[state] = (left + i * slot + hw, number * (_STATE_H + _STATE_GAP_Y))
            index[state] = i
    bounds = _Bounds()
    for x, y in centres.values():
        bounds.add(x - hw, y - hh, x + hw, y + hh)

    pairs = {(e.source, e.dest) for e in edges}
    parts: list[str] = []
    for edge in edges:
        (x1, y1), (x2, y2) = centres[edge.source], centres[edge.dest]
        lines = list(edge.triggers)
        if edge.source == edge.dest:
            # A loop on the right side, its triggers beside it.
            r = x1 + hw
            path = (
                f"M{_n(r)},{_n(y1 - 9)} C{_n(r + 40)},{_n(y1 - 30)}"
                f" {_n(r + 40)},{_n(y1 + 30)} {_n(r)},{_n(y1 + 9)}"
            )
            label = _lines(
                lines, r + 36, y1, size=_TRIGGER_FONT, anchor="start", cls="trigger"
            )
            for i, line in enumerate(lines):
                bounds.add_text(
                    r + 36,
                    y1 + (i - len(lines) / 2) * 12,
                    len(line),
                    _TRIGGER_FONT,
                    "start",
                )
            bounds.add(r, y1 - 30, r + 40, y1 + 30)
        elif y1 == y2:
            # Same layer: an arc under the row (over it when going left),
            # deeper the further it reaches.
            span = abs(index[edge.dest] - index[edge.source])
            side = way = 1 if x2 > x1 else -1
            sx, ex = x1 + way * hw / 2, x2 - way * hw / 2
            sy = ey = y1 + side * hh
            apex = 30 + 30 * (span - 1)
            cy = sy + side * apex / 0.75
            path = _through([(sx, sy), (ex, ey)], mid=cy)
            ly = sy + side * apex
            label = _lines(
                [", ".join(lines)],
                (sx + ex) / 2,
                ly,
                size=_TRIGGER_FONT,
                anchor="middle",
                cls="trigger",
            )
            bounds.add(sx, sy, ex, ly)
            bounds.add_text(
                (sx + ex) / 2, ly + 6, len(", ".join(lines)), _TRIGGER_FONT, "middle"
            )
        else:
            # Between layers: straight, or bowed apart when the reverse
            # transition exists too; the label sits on the outer side.
            bow = 30.0 if (edge.dest, edge.source) in pairs else 0.0
            dx, dy = x2 - x1, y2 - y1
            length = math.hypot(dx, dy)
            px, py = -dy / length, dx / length
            ctrl = ((x1 + x2) / 2 + px * bow, (y1 + y2) / 2 + py * bow)
            start = _clip_to_box((x1, y1), ctrl, hw, hh)
            end = _clip_to_box((x2, y2), ctrl, hw + 2, hh + 2)
            path = (
                f"M{_n(start[0])},{_n(start[1])} Q{_n(ctrl[0])},{_n(ctrl[1])}"
                f" {_n(end[0])},{_n(end[1])}"
            )
            t = 0.72
            lx = (1 - t) ** 2 * start[0] + 2 * t * (1 - t) * ctrl[0] + t**2 * end[0]
            ly = (1 - t) ** 2 * start[1] + 2 * t * (1 - t) * ctrl[1] + t**2 * end[1]
            if bow:
                anchor = "start" if px > 0 else "end"
                lx += 6 if px > 0 else -6
            else:
                anchor = "middle"
            label = _lines(
                lines, lx, ly, size=_TRIGGER_FONT, anchor=anchor, cls="trigger"
            )
            for i, line in enumerate(lines):
                bounds.add_text(
                    lx, ly + (i - len(lines) / 2) * 12, len(line), _TRIGGER_FONT, anchor
                )
        parts.append(_edge_group(edge, path, label))

    # The initial state's mark: a dot and an arrow into it.
    ix, iy = centres[initial]
    parts.append(
        f'<g class="initial"><circle cx="{_n(ix)}" cy="{_n(iy - hh - 40)}" r="6"'
        ' fill="#334155"/>'
        f'<path d="M{_n(ix)},{_n(iy - hh - 34)} L{_n(ix)},{_n(iy - hh - 2)}"/></g>'
    )
    bounds.add(ix - 6, iy - hh - 46, ix + 6, iy)
    final = frozenset(
        s for s in states if not any(d != s for d in following.get(s, ()))
    )
    return _ChartLayout(
        states=states,
        centres=centres,
        box_w=box_w,
        final=final,
        edges=(
            f'<g class="transitions" fill="none" stroke="#475569" stroke-width="1.3"'
            f' marker-end="url(#devs-chart-arrow)">{"".join(parts)}</g>'
        ),
        bounds=(bounds.x0, bounds.y0, bounds.x1, bounds.y1),
    )


def state_chart_svg(current: str | None) -> str:
    """The task state chart, drawn from :data:`devs.domain.chart.MACHINE`, with
    the state named ``current`` (if any) marked."""
    layout = _chart_layout()
    hw, hh = layout.box_w / 2, _STATE_H / 2
    parts = [_arrow("devs-chart-arrow", "#475569"), layout.edges]
    for state in layout.states:
        x, y = layout.centres[state]
        is_current = state == current
        if is_current:
            head = (
                f'<g class="state current" data-state="{_esc(state)}"'
                ' aria-current="true">'
            )
            fill, stroke, width, weight = (
                "#fde68a",
                "#b45309",
                "2.5",
                ' font-weight="bold"',
            )
        else:
            head = f'<g class="state" data-state="{_esc(state)}">'
            fill, stroke, width, weight = "#eef2ff", "#4f46e5", "1.3", ""
        ring = (
            f'<rect class="final-ring" x="{_n(x - hw + 4)}" y="{_n(y - hh + 4)}"'
            f' width="{_n(2 * hw - 8)}" height="{_n(2 * hh - 8)}" rx="6"'
            f' fill="none" stroke="{stroke}" stroke-width="1"/>'
            if state in layout.final
            else ""
        )
        title = f"{state} (current state)" if is_current else state
        parts.append(
            f"{head}<title>{_esc(title)}</title>"
            f'<rect x="{_n(x - hw)}" y="{_n(y - hh)}" width="{_n(2 * hw)}"'
            f' height="{_n(2 * hh)}" rx="9" fill="{fill}" stroke="{stroke}"'
            f' stroke-width="{width}"/>{ring}'
            f'<text x="{_n(x)}" y="{_n(y + _STATE_FONT * 0.35)}" text-anchor="middle"'
            f' font-size="{_STATE_FONT}"{weight}>{_esc(state)}</text></g>'
        )
    bounds = _Bounds()
    bounds.add(*layout.bounds)
    if current is None:
        label = "Task state chart"
    elif current in layout.centres:
        label = f"Task state chart; current state: {current}"
    else:
        label = f"Task state chart; current state {_clip(current, 200)} is not in it"
    return _svg("state-chart", label, bounds, parts)


# ---------------------------------------------------------------- a run's DAG

NODE_STATES = ("completed", "skipped", "paused", "running", "ready", "waiting")
"""A DAG node's states, in the order :func:`dag_svg` decides them."""

_NODE_PAINT = {
    "completed": ("#dcfce7", "#15803d", ""),
    "skipped": ("#f1f5f9", "#94a3b8", ' stroke-dasharray="4 3"'),
    "paused": ("#fee2e2", "#b91c1c", ""),
    "running": ("#dbeafe", "#1d4ed8", ""),
    "ready": ("#fef9c3", "#a16207", ""),
    "waiting": ("#ffffff", "#64748b", ""),
}
_NODE_FONT = 12
_NODE_W = _width(LABEL_CHARS, _NODE_FONT) + 20
_NODE_H = 34
_NODE_GAP_X = 24
_ROW_GAP = 46
_PER_ROW = 8
_GRAPH_TOP = 92
_MAX_DETOURS = 5_000
"""Rows that edges, together, step around; further edges go straight."""


def _layers(
    nodes: list[str], prerequisites: dict[str, tuple[str, ...]]
) -> dict[str, int]:
    """Each node's longest chain of prerequisites (Kahn's order, linear); nodes
    on a cycle, which a valid run has none of, go one layer below the rest."""
    after: dict[str, list[str]] = {n: [] for n in nodes}
    waiting = dict.fromkeys(nodes, 0)
    for node in nodes:
        for before in prerequisites[node]:
            after[before].append(node)
            waiting[node] += 1
    layer = dict.fromkeys(nodes, 0)
    queue = deque(n for n in nodes if not waiting[n])
    placed = 0
    while queue:
        node = queue.popleft()
        placed += 1
        for next_node in after[node]:
            layer[next_node] = max(layer[next_node], layer[node] + 1)
            waiting[next_node] -= 1
            if not waiting[next_node]:
                queue.append(next_node)
    if placed < len(nodes):
        last = max(layer.values()) + 1
        for node in nodes:
            if waiting[node]:
                layer[node] = last
    return layer


def _window(buckets: list[list[str]], start: int, cap: int) -> dict[int, list[str]]:
    """Up to ``cap`` nodes: whole layers from ``start`` on, then earlier ones."""
    shown: dict[int, list[str]] = {}
    room = cap
    for level in range(start, len(buckets)):
        if not room:
            break
        shown[level] = buckets[level][:room]
        room -= len(shown[level])
    for level in range(start - 1, -1, -1):
        if not room:
            break
        bucket = buckets[level]
        shown[level] = bucket[max(0, len(bucket) - room) :]
        room -= len(shown[level])
    return dict(sorted(shown.items()))


def dag_svg(run: RunState) -> str:
    """A run's DAG: nodes layered by their longest chain of prerequisites,
    edges from prerequisite to node, each node coloured by its state. At most
    :data:`MAX_DAG_NODES` nodes are drawn, from the layer before the first
    unsettled one on."""
    order: dict[str, None] = {}
    for node in run.order:
        order.setdefault(node, None)
    for node in run.dag:
        order.setdefault(node, None)
    for listed in run.dag.values():
        for node in listed:
            order.setdefault(node, None)
    nodes = list(order)
    prerequisites = {
        n: tuple(p for p in dict.fromkeys(run.dag.get(n, ())) if p != n) for n in nodes
    }

    completed, skipped = set(run.completed), set(run.skipped)
    paused, started, ready = set(run.paused_by), set(run.started), set(run.ready)

    def state_of(node: str) -> str:
        if node in completed:
            return "completed"
        if node in skipped:
            return "skipped"
        if node in paused:
            return "paused"
        if node in started:
            return "running"
        if node in ready:
            return "ready"
        return "waiting"

    states = {n: state_of(n) for n in nodes}
    counts = dict.fromkeys(NODE_STATES, 0)
    for state in states.values():
        counts[state] += 1

    bounds = _Bounds()
    parts = [_arrow("devs-dag-arrow", "#94a3b8")]
    heading = f"Run {_clip(run.run_id, 60)} · {run.status.value} · {len(nodes):,} tasks"
    parts.append(_note(bounds, heading, 20, cls="heading", size=14))
    x = 0.0
    for state in NODE_STATES:
        fill, stroke, dash = _NODE_PAINT[state]
        text = f"{state} {counts[state]:,}"
        parts.append(
            f'<g class="legend-item {state}" data-legend="{state}">'
            f'<rect x="{_n(x)}" y="36" width="14" height="14" rx="3" fill="{fill}"'
            f' stroke="{stroke}"{dash}/>'
            f'<text x="{_n(x + 20)}" y="47" font-size="11">{_esc(text)}</text></g>'
        )
        x += 20 + _width(len(text), 11) + 18
    bounds.add(0, 36, x, 50)
    summary = (
        f"Task graph of run {run.run_id} ({run.status.value}): {len(nodes):,} tasks, "
        + ", ".join(f"{counts[s]:,} {s}" for s in NODE_STATES)
    )
    if not nodes:
        parts.append(_note(bounds, "no tasks", 80, cls="no-data", size=13, fill=GREY))
        return _svg("dag", summary, bounds, parts)

    layer = _layers(nodes, prerequisites)
    buckets: list[list[str]] = [[] for _ in range(max(layer.values()) + 1)]
    for node in nodes:
        buckets[layer[node]].append(node)
    unsettled = [layer[n] for n in nodes if states[n] not in ("completed", "skipped")]
    start = max(0, min(unsettled) - 1) if unsettled else 0
    shown = _window(buckets, start, MAX_DAG_NODES)
    drawn = sum(len(row) for row in shown.values())

    y = float(_GRAPH_TOP)
    if drawn < len(nodes):
        levels = list(shown)
        note = (
            f"Showing {drawn:,} tasks (layers {levels[0] + 1:,} to {levels[-1] + 1:,}"
            f" of {len(buckets):,}) and {len(nodes) - drawn:,} more not drawn"
        )
        parts.append(_note(bounds, note, 72, cls="more", fill=AMBER))
        summary += f"; {note}"

    # Place the rows: each layer in rows of at most _PER_ROW nodes, centred,
    # ordered by where the layer's prerequisites stand (fewer crossings).
    slot = _NODE_W + _NODE_GAP_X
    widest = min(_PER_ROW, max(len(row) for row in shown.values()))
    place: dict[str, tuple[float, float]] = {}
    row_of: dict[str, int] = {}
    rows: list[tuple[float, float, int]] = []
    for level_nodes in shown.values():
        keys: dict[str, float] = {}
        for i, node in enumerate(level_nodes):
            xs = [place[p][0] for p in prerequisites[node] if p in place]
            keys[node] = (
                sum(xs) / len(xs) if xs else i / len(level_nodes) * widest * slot
            )
        ordered = sorted(level_nodes, key=keys.__getitem__)
        for first in range(0, len(ordered), _PER_ROW):
            row = ordered[first : first + _PER_ROW]
            left = (widest - len(row)) * slot / 2
            for i, node in enumerate(row):
                place[node] = (left + i * slot, y)
                row_of[node] = len(rows)
            rows.append((y, left, len(row)))
            y += _NODE_H + _ROW_GAP
    bounds.add(-_NODE_GAP_X, _GRAPH_TOP, widest * slot, y - _ROW_GAP)

    edges: list[str] = []
    hidden_edges = 0
    detours = _MAX_DETOURS
    unseen: dict[str, int] = {}
    for node, (nx, ny) in place.items():
        for before in prerequisites[node]:
            if before not in place:
                unseen[node] = unseen.get(node, 0) + 1
                continue
            if len(edges) >= MAX_DAG_EDGES:
                hidden_edges += 1
                continue
            bx, by = place[before]
            points = [(bx + _NODE_W / 2, by + _NODE_H)]
            end = (nx + _NODE_W / 2, ny - 2)
            passing = range(row_of[before] + 1, row_of[node])
            if len(passing) <= detours:
                # Through the gap between nodes nearest the straight line
                # in each row the edge crosses.
                detours -= len(passing)
                for top, left, count in (rows[k] for k in passing):
                    share = (top - points[0][1]) / (end[1] - points[0][1])
                    want = points[0][0] + (end[0] - points[0][0]) * share
                    gap = round((want - left + _NODE_GAP_X / 2) / slot)
                    gx = left + min(max(gap, 0), count) * slot - _NODE_GAP_X / 2
                    points += [(gx, top - 6), (gx, top + _NODE_H + 6)]
            points.append(end)
            edges.append(f'<path d="{_through(points)}"/>')
    parts.append(
        '<g class="edges" fill="none" stroke="#94a3b8" stroke-width="1.2"'
        f' marker-end="url(#devs-dag-arrow)">{"".join(edges)}</g>'
    )
    if hidden_edges:
        note = f"and {hidden_edges:,} more edges not drawn"
        parts.append(_note(bounds, note, y, cls="more", fill=AMBER))

    for node, (nx, ny) in place.items():
        state = states[node]
        fill, stroke, dash = _NODE_PAINT[state]
        title = f"{node} — {state}"
        if unseen.get(node):
            title += f"; {unseen[node]:,} prerequisites not drawn"
        text_y = ny + _NODE_H / 2 + _NODE_FONT * 0.35
        parts.append(
            f'<g class="node {state}" data-node="{_esc(node)}"'
            f' data-node-state="{state}"><title>{_esc(title)}</title>'
            f'<rect x="{_n(nx)}" y="{_n(ny)}" width="{_n(_NODE_W)}" height="{_NODE_H}"'
            f' rx="6" fill="{fill}" stroke="{stroke}"'
            f' stroke-width="{"2" if state == "running" else "1.2"}"{dash}/>'
            f'<text x="{_n(nx + _NODE_W / 2)}" y="{_n(text_y)}" text-anchor="middle"'
            f' font-size="{_NODE_FONT}">{_esc(_clip(node))}</text></g>'
        )
    return _svg("dag", summary, bounds, parts)


# ----------------------------------------------------------------- bar charts

_BAR_FONT = 12
_BAR_H = 18
_BAR_STEP = 26
_BAR_MAX_W = 360.0


def _clean(value: float) -> float:
    """``value`` as a finite non-negative float; anything else is 0."""
    try:
        number = float(value)
    except (OverflowError, TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) and number > 0 else 0.0


def format_value(value: float, unit: str = "") -> str:
    """``3`` for whole numbers, ``3.14`` or ``0.0012`` otherwise, then the unit."""
    if abs(value) >= 1e15:
        text = f"{value:.3g}"
    elif value.is_integer():
        text = f"{int(value):,}"
    elif abs(value) >= 0.01:
        text = f"{value:,.2f}".rstrip("0").rstrip(".")
    else:
        text = f"{value:.2g}"
    if not unit:
        return text
    return f"{text}{unit}" if unit == "%" else f"{text} {unit}"


def bar_chart_svg(
    title: str, bars: Sequence[tuple[str, float]], *, unit: str = ""
) -> str:
    """Horizontal bars, one per ``(label, value)``; negative, NaN and infinite
    values count as 0, and a chart of zeros (or of nothing) says "no data"."""
    values = [_clean(value) for _, value in bars]
    top = max(values, default=0.0)
    bounds = _Bounds()
    parts = [_note(bounds, _clip(title, 80), 18, cls="heading", size=14)]
    if not top:
        parts.append(_note(bounds, "no data", 48, cls="no-data", size=13, fill=GREY))
        return _svg("bar-chart", f"{title}: no data", bounds, parts)

    shown = list(zip(bars[:MAX_BARS], values[:MAX_BARS], strict=True))
    label_w = _width(max(len(_clip(label)) for (label, _), _ in shown), _BAR_FONT) + 12
    y = 36.0
    for (label, _), value in shown:
        text = format_value(value, unit)
        width = value / top * _BAR_MAX_W
        text_y = _n(y + _BAR_H / 2 + _BAR_FONT * 0.35)
        parts.append(
            f'<g class="bar" data-label="{_esc(label)}">'
            f"<title>{_esc(f'{label}: {text}')}</title>"
            f'<text class="label" x="{_n(label_w - 8)}" y="{text_y}"'
            f' text-anchor="end" font-size="{_BAR_FONT}">{_esc(_clip(label))}</text>'
            f'<rect x="{_n(label_w)}" y="{_n(y)}" width="{_n(width)}" height="{_BAR_H}"'
            f' rx="3" fill="#6366f1"/>'
            f'<text class="value" x="{_n(label_w + width + 6)}" y="{text_y}"'
            f' font-size="{_BAR_FONT}">{_esc(text)}</text></g>'
        )
        bounds.add(0, y, label_w + width + 6 + _width(len(text), _BAR_FONT), y + _BAR_H)
        y += _BAR_STEP
    if len(bars) > MAX_BARS:
        note = f"and {len(bars) - MAX_BARS:,} more"
        parts.append(_note(bounds, note, y + 12, cls="more", fill=AMBER))
    summary = f"{title}: " + ", ".join(
        f"{label} {format_value(value, unit)}" for (label, _), value in shown
    )
    if len(bars) > MAX_BARS:
        summary += f" and {len(bars) - MAX_BARS:,} more"
    return _svg("bar-chart", summary, bounds, parts)
