"""Drawing a fragmented dataflow graph: DOT text for Graphviz and a PNG.

Both outputs come from one *picture* (``_picture``): a networkx graph of what
is drawn, with every edge already classified (a value inside a fragment, a
loop-carried value, call order, an interface, an allreduce).  DOT and PNG only
differ in how they spell that picture, so they cannot disagree about what the
FDG is.  The PNG is laid out here rather than by Graphviz so that ``msrl
graph`` needs no system packages: fragments are columns, left to right in the
policy's order, and nodes are rows in execution order (a valid topological
order), so every picture of one algorithm reads top to bottom the same way.

Example::

    fdg = fragments.partition(msrl.trace(algorithm), policies.load_policy("local"))
    write_dot(fdg, "fdg_local.dot")
    write_png(fdg, "fdg_local.png")
"""

from __future__ import annotations

import os
from collections.abc import Callable

import networkx as nx
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyBboxPatch, Patch

from fragments._fdg import Fragment, FragmentedGraph
from msrl.core import Role

# matplotlib's tab10: distinct, colour-blind tolerant, and the same in DOT and PNG.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")

# Edge kinds of the picture; the first three stay inside one fragment.
VALUE, CARRY, ORDER, INTERFACE, ALLREDUCE = "value", "carry", "order", "interface", "allreduce"

# How each kind is drawn: DOT attributes, and matplotlib (line style, width, legend text).
_DOT_STYLE = {
    VALUE: "penwidth=1",
    CARRY: "style=dashed, penwidth=1, constraint=false",
    ORDER: 'style=dotted, color="#777777", arrowhead=empty',
    INTERFACE: "style=bold, penwidth=2.5",
    ALLREDUCE: 'style="bold,dashed", penwidth=2.5',
}
_PNG_STYLE = {
    VALUE: ("-", 1.0, "value inside a fragment"),
    CARRY: ("--", 1.0, "value carried to the next loop iteration"),
    ORDER: (":", 1.0, "call order on one component"),
    INTERFACE: ("-", 2.6, "interface (op, frequency)"),
    ALLREDUCE: ("--", 2.6, "allreduce of gradients"),
}


# -- the picture ---------------------------------------------------------------------------------------
def fragment_colours(fdg: FragmentedGraph) -> dict[str, str]:
    """Fragment name -> colour, by the fragment's position in the policy."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(fdg.fragments)}


def fragment_label(fragment: Fragment) -> str:
    """``rollout  2 x  cpu  resources(CPU=1)``: what a reader needs to size the fragment."""
    spec = fragment.spec
    resources = ", ".join(f"{key}={value:g}" for key, value in spec.resources.items())
    return f"{fragment.name}  {spec.replicas} x  {spec.executor}  resources({resources})"


def _picture(fdg: FragmentedGraph) -> nx.MultiDiGraph:
    """What both renderers draw, nodes and edges in a fixed order (determinism)."""
    graph = fdg.graph
    picture = nx.MultiDiGraph()
    for row, node in enumerate(graph.nodes):
        label = node.name + (" [loop]" if node.region else "")
        picture.add_node(node.name, label=label, fragment=fdg.assignment[node.name], row=row)

    drawn: set[tuple[str, str, str]] = set()
    for node in graph.nodes:  # values and order inside a fragment; one edge per (producer, consumer, kind)
        for producer, _, data in graph.nx.in_edges(node.name, data=True):
            if fdg.assignment[producer] != fdg.assignment[node.name]:
                continue
            kind = ORDER if data["kind"] == "order" else CARRY if data["carried"] else VALUE
            if (producer, node.name, kind) not in drawn:
                drawn.add((producer, node.name, kind))
                picture.add_edge(producer, node.name, kind=kind, label="")

    for interface in fdg.interfaces:
        if interface.value is None:  # allreduce: a self-loop on the learner calls that make gradients
            for name in _learner_nodes(fdg, fdg.fragments[interface.src]):
                picture.add_edge(name, name, kind=ALLREDUCE, label="allreduce grads")
            continue
        label = f"{interface.op}, {interface.frequency}"
        for consumer in fdg.fragments[interface.dst].nodes:
            if any(ref == interface.value for ref, _ in graph.node(consumer).inputs()):
                picture.add_edge(interface.ref.node, consumer, kind=INTERFACE, label=label)
    return picture


def _learner_nodes(fdg: FragmentedGraph, fragment: Fragment) -> list[str]:
    """The fragment's ``learn`` calls, where gradients are reduced; failing that,
    every learner call; failing that, the fragment's first node."""
    graph = fdg.graph
    calls = [graph.node(n) for n in fragment.nodes if graph.components.get(graph.node(n).component) is Role.LEARNER]
    learn = [n.name for n in calls if n.method == "learn"]
    return learn or [n.name for n in calls] or fragment.nodes[:1]


# -- DOT -------------------------------------------------------------------------------------------------
def _quote(text: str) -> str:
    """A DOT quoted string: node names hold dots and brackets, and any name could be a keyword."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _tint(colour: str, white: float) -> str:
    """``colour`` mixed with ``white`` parts of white (0: unchanged, 1: white)."""
    channels = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * white):02x}" for c in channels)


def _title(fdg: FragmentedGraph) -> str:
    policy = fdg.policy
    return f"FDG for policy '{policy.name}' (placement {policy.placement}, {policy.mode})"


def fdg_to_dot(fdg: FragmentedGraph) -> str:
    """The FDG as a Graphviz digraph: a cluster per fragment, a node per dataflow
    node, thin edges inside fragments and bold labelled edges for interfaces.
    The same FDG always gives the same text, so the file can be diffed."""
    picture, colours = _picture(fdg), fragment_colours(fdg)
    lines = [
        f"digraph {_quote('fdg_' + fdg.policy.name)} {{",
        f"  label={_quote(_title(fdg))};",
        "  labelloc=t;",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]
    for name, fragment in fdg.fragments.items():
        colour = colours[name]
        lines += [
            f"  subgraph {_quote('cluster_' + name)} {{",
            f"    label={_quote(fragment_label(fragment))};",
            f'    style="rounded,filled"; color={_quote(colour)}; fillcolor={_quote(_tint(colour, 0.88))};',
        ]
        for node in fragment.nodes:
            label = picture.nodes[node]["label"]
            lines.append(f"    {_quote(node)} [label={_quote(label)}, fillcolor={_quote(_tint(colour, 0.6))}];")
        lines.append("  }")
    for producer, consumer, data in picture.edges(data=True):
        attributes = _DOT_STYLE[data["kind"]]
        if data["label"]:
            colour = colours[picture.nodes[producer]["fragment"]]
            attributes += f", label={_quote(data['label'])}, color={_quote(colour)}"
        lines.append(f"  {_quote(producer)} -> {_quote(consumer)} [{attributes}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- PNG -------------------------------------------------------------------------------------------------
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
    picture, colours = _picture(fdg), fragment_colours(fdg)
    positions, node_w, pitch = _layout(fdg, picture)
    rows = len(picture)
    width, height = len(fdg.fragments) * pitch, rows * _ROW_H + 1.0
    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)  # headless: never touches pyplot or a GUI backend
    ax = figure.add_axes((0, 0, 1, 1))
    ax.set_xlim(-pitch / 2, width - pitch / 2)
    ax.set_ylim(-(rows - 0.5) * _ROW_H, 1.0 + _ROW_H / 2)
    ax.set_axis_off()
    ax.text(width / 2 - pitch / 2, 0.95 + _ROW_H / 2, _title(fdg), ha="center", va="top", fontsize=11, weight="bold")

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
            facecolor=_tint(colour, 0.88),
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
            facecolor=_tint(colour, 0.6),
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
    handles = [
        Patch(
            facecolor=_tint(colours[name], 0.6),
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


# -- files -----------------------------------------------------------------------------------------------
def _write_atomic(path: str, write: Callable[[str], None]) -> None:
    """Write through ``path + ".tmp"`` and rename, so a reader (or a crash) never
    sees half a file and an old file survives a failed write."""
    tmp = os.fspath(path) + ".tmp"
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_dot(fdg: FragmentedGraph, path: str) -> None:
    """Write ``fdg_to_dot(fdg)`` to ``path``; render it with ``dot -Tsvg``."""
    text = fdg_to_dot(fdg)

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as file:
            file.write(text)

    _write_atomic(path, write)


def write_png(fdg: FragmentedGraph, path: str) -> None:
    """Draw the FDG with matplotlib (no Graphviz, no display needed) to ``path``."""
    figure = fdg_figure(fdg)
    _write_atomic(path, lambda tmp: figure.savefig(tmp, format="png", dpi=110, bbox_inches="tight", pad_inches=0.2))
