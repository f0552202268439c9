"""The PNG drawing of a fragmented dataflow graph, laid out here rather than by Graphviz so that
``msrl graph`` needs no system packages: fragments are columns, left to right in the policy's
order, and nodes are rows in execution order (a valid topological order), so every picture of one
algorithm reads top to bottom the same way."""

from __future__ import annotations

import networkx as nx
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyBboxPatch, Patch
from matplotlib.typing import LineStyleType as LineStyle

from fragments._fdg import Fragment, FragmentedGraph
from fragments._picture import (
    ALLREDUCE,
    CARRY,
    INTERFACE,
    ORDER,
    VALUE,
    fragment_colours,
    fragment_label,
    picture_of,
    tint,
    title_of,
)

# How each kind of edge is drawn: line style, width, legend text.
_PNG_STYLE: dict[str, tuple[LineStyle, float, str]] = {
    VALUE: ("-", 1.0, "value inside a fragment"),
    CARRY: ("--", 1.0, "value carried to the next loop iteration"),
    ORDER: (":", 1.0, "call order on one component"),
    INTERFACE: ("-", 2.6, "interface (op, frequency)"),
    ALLREDUCE: ("--", 2.6, "allreduce of gradients"),
}


# Geometry in inches: the axes map one data unit to one inch, so font sizes and
# box sizes can be reasoned about together.
_CHAR_W = 0.075  # a 9 pt character, roughly
_LABEL_H = 0.2  # an 8 pt edge label with its padding, in inches
_NODE_H, _ROW_H, _GAP = 0.42, 0.75, 1.9


def _layout(fdg: FragmentedGraph, picture: nx.MultiDiGraph) -> tuple[dict[str, tuple[float, float]], float, float]:
    """Node centres (fragment column, execution-order row), node width, column pitch."""
    node_w = max(1.4, _CHAR_W * max(len(label) for label in nx.get_node_attributes(picture, "label").values()) + 0.4)
    panel_w = max(node_w + 0.8, 0.065 * max(len(fragment_label(f)) for f in fdg.fragments.values()))
    pitch = panel_w + _GAP
    column = {name: i for i, name in enumerate(fdg.fragments)}
    positions = {
        name: (column[data["fragment"]] * pitch, -data["row"] * _ROW_H) for name, data in picture.nodes(data=True)
    }
    return positions, node_w, pitch


def fdg_figure(fdg: FragmentedGraph) -> Figure:
    """The whole drawing on one Agg figure whose axes map a data unit to an inch."""
    picture, colours = picture_of(fdg), fragment_colours(fdg)
    positions, node_w, pitch = _layout(fdg, picture)
    rows = len(picture)
    width, height = len(fdg.fragments) * pitch, rows * _ROW_H + 1.0
    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)  # headless: never touches pyplot or a GUI backend
    ax = figure.add_axes((0, 0, 1, 1))
    ax.set_xlim(-pitch / 2, width - pitch / 2)
    ax.set_ylim(-(rows - 0.5) * _ROW_H, 1.0 + _ROW_H / 2)
    ax.set_axis_off()
    ax.text(width / 2 - pitch / 2, 0.95 + _ROW_H / 2, title_of(fdg), ha="center", va="top", fontsize=11, weight="bold")

    for column, (name, fragment) in enumerate(fdg.fragments.items()):
        rows_y = [positions[n][1] for n in fragment.nodes]
        _draw_panel(ax, fragment, column * pitch, rows_y, pitch - _GAP, colours[name])
    for name, data in picture.nodes(data=True):
        _draw_node(ax, data["label"], positions[name], node_w, colours[data["fragment"]])
    pairs: dict[tuple[str, str], int] = {}
    placed: list[tuple[float, float, float]] = []  # interface labels drawn so far: (x, y, half width)
    for (producer, consumer, kind, label), count in _bundled(picture).items():
        start, end = positions[producer], positions[consumer]
        colour = colours[picture.nodes[producer]["fragment"]]
        if producer == consumer:
            _draw_self_loop(ax, start, node_w, kind, label, colour)
        elif start[0] == end[0]:
            _draw_inner_edge(ax, start, end, kind, node_w)
        else:
            pair = (min(producer, consumer), max(producer, consumer))  # either direction: opposite edges overlap too
            repeat = pairs[pair] = pairs.get(pair, -1) + 1
            label = label if count == 1 else f"{label} (x{count})"
            _draw_interface(ax, start, end, label, colour, node_w, pitch, repeat, placed)
    _draw_legend(ax, fdg, picture, colours, width)
    return figure


def _bundled(picture: nx.MultiDiGraph) -> dict[tuple[str, str, str, str], int]:
    """Parallel edges that look alike (four outputs of ``env.step`` crossing as
    one op) drawn once with a count: on a PNG they would only overprint."""
    counts: dict[tuple[str, str, str, str], int] = {}
    for producer, consumer, data in picture.edges(data=True):
        key = (producer, consumer, data["kind"], data["label"])
        counts[key] = counts.get(key, 0) + 1
    return counts


def _draw_panel(ax, fragment: Fragment, x: float, rows_y: list[float], panel_w: float, colour: str) -> None:
    """The fragment's background, like a DOT cluster, titled with its label
    (drawn even when none of its components is called, so no fragment goes missing)."""
    top, bottom = max(rows_y, default=0.0) + 0.75, min(rows_y, default=0.0) - 0.35
    ax.add_patch(
        FancyBboxPatch(
            (x - panel_w / 2, bottom),
            panel_w,
            top - bottom,
            boxstyle="round,pad=0,rounding_size=0.15",
            facecolor=tint(colour, 0.88),
            edgecolor=colour,
            linewidth=1.2,
            zorder=0,
        )
    )
    name, details = fragment_label(fragment).split("  ", 1)
    ax.text(x, top - 0.08, name, ha="center", va="top", fontsize=10, weight="bold", zorder=1)
    ax.text(x, top - 0.3, details, ha="center", va="top", fontsize=8, zorder=1)


def _draw_node(ax, label: str, centre: tuple[float, float], node_w: float, colour: str) -> None:
    x, y = centre
    ax.add_patch(
        FancyBboxPatch(
            (x - node_w / 2, y - _NODE_H / 2),
            node_w,
            _NODE_H,
            boxstyle="round,pad=0,rounding_size=0.08",
            facecolor=tint(colour, 0.6),
            edgecolor=colour,
            linewidth=1.0,
            zorder=2,
        )
    )
    ax.text(x, y, label, ha="center", va="center", fontsize=9, zorder=3)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], rad: float, colour: str, kind: str) -> None:
    style, width, _ = _PNG_STYLE[kind]
    ax.annotate(
        "",
        xy=end,
        xytext=start,
        zorder=4,
        arrowprops=dict(
            arrowstyle="-|>",
            mutation_scale=12,
            color=colour,
            linestyle=style,
            linewidth=width,
            connectionstyle=f"arc3,rad={rad}",
            shrinkA=0,
            shrinkB=0,
        ),
    )


def _edge_label(ax, at: tuple[float, float], text: str, colour: str, ha: str = "center") -> None:
    ax.text(
        *at,
        text,
        ha=ha,
        va="center",
        fontsize=8,
        color=colour,
        weight="bold",
        zorder=5,
        bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none"),
    )


def _draw_inner_edge(ax, start: tuple[float, float], end: tuple[float, float], kind: str, node_w: float) -> None:
    """Inside one column: straight down to the next row; anything longer, or
    going back up, arcs beside the column (values on the left, call order and
    carried values on the right) so that it never crosses a node."""
    (x, y1), (_, y2) = start, end
    colour = "#999999" if kind == ORDER else "#333333"
    if kind != CARRY and y1 - y2 < _ROW_H * 1.01:
        dx = 0.3 * node_w if kind == ORDER else 0.0
        _arrow(ax, (x + dx, y1 - _NODE_H / 2), (x + dx, y2 + _NODE_H / 2), 0.0, colour, kind)
        return
    side = -1 if kind == VALUE else 1
    lift = 0.1 if y2 < y1 else -0.1  # leave below the middle of the side, arrive above it (when going down)
    a, b = (x + side * node_w / 2, y1 - lift), (x + side * node_w / 2, y2 + lift)
    bulge = min(0.35, 0.12 + 0.05 * abs(y1 - y2) / _ROW_H)
    # arc3 bends the curve's middle by rad/2 * dy sideways; solve for a bulge of ``bulge`` inches
    _arrow(ax, a, b, 2 * side * bulge / (b[1] - a[1]), colour, kind)


def _draw_interface(
    ax,
    start,
    end,
    label: str,
    colour: str,
    node_w: float,
    pitch: float,
    repeat: int,
    placed: list[tuple[float, float, float]],
) -> None:
    """Side to side between columns, labelled in the middle; arced when it
    passes other columns or joins a pair of nodes already joined.  Edges that
    cross share a midpoint, so a label that would cover one already drawn moves
    down until it is clear."""
    (x1, y1), (x2, y2) = start, end
    toward = 1 if x2 > x1 else -1
    a, b = (x1 + toward * node_w / 2, y1), (x2 - toward * node_w / 2, y2)
    rad = (0.15 if abs(x2 - x1) > pitch * 1.01 else 0.0) + 0.15 * repeat
    _arrow(ax, a, b, rad, colour, INTERFACE)
    dx, dy = b[0] - a[0], b[1] - a[1]
    x, y = (a[0] + b[0]) / 2 + rad / 2 * dy, (a[1] + b[1]) / 2 - rad / 2 * dx
    half = _CHAR_W * len(label) / 2
    while any(abs(x - px) < half + ph and abs(y - py) < _LABEL_H for px, py, ph in placed):
        y -= _LABEL_H
    placed.append((x, y, half))
    _edge_label(ax, (x, y), label, colour)


def _draw_self_loop(ax, centre: tuple[float, float], node_w: float, kind: str, label: str, colour: str) -> None:
    x, y = centre[0] + node_w / 2, centre[1]
    _arrow(ax, (x, y + 0.09), (x, y - 0.09), -2.2, colour if label else "#333333", kind)
    if label:
        _edge_label(ax, (x + 0.45, y), label, colour, ha="left")


def _draw_legend(ax, fdg: FragmentedGraph, picture: nx.MultiDiGraph, colours: dict[str, str], width: float) -> None:
    """Fragments (replicas, executor) and the edge kinds this picture uses."""
    handles: list[Artist] = [
        Patch(
            facecolor=tint(colours[name], 0.6),
            edgecolor=colours[name],
            label=f"{name}: {f.replicas} replica{'s' if f.replicas > 1 else ''}, executor {f.spec.executor}",
        )
        for name, f in fdg.fragments.items()
    ]
    kinds = {data["kind"] for _, _, data in picture.edges(data=True)}
    handles += [
        Line2D([], [], color="#999999" if kind == ORDER else "#333333", linestyle=style, linewidth=line, label=text)
        for kind, (style, line, text) in _PNG_STYLE.items()
        if kind in kinds
    ]
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        fontsize=8,
        frameon=False,
        ncol=2 if width >= 7 else 1,
    )
