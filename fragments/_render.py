"""Drawing a fragmented dataflow graph: DOT text for Graphviz and a PNG.

Both outputs come from one *picture* (``fragments._picture``): a networkx graph of what
is drawn, with every edge already classified (a value inside a fragment, a
loop-carried value, call order, an interface, an allreduce).  DOT and PNG only
differ in how they spell that picture, so they cannot disagree about what the
FDG is.  The PNG is laid out in ``fragments._render_png``, without Graphviz.

Example::

    fdg = fragments.partition(msrl.trace(algorithm), policies.load_policy("local"))
    write_dot(fdg, "fdg_local.dot")
    write_png(fdg, "fdg_local.png")
"""

from __future__ import annotations

import os
from collections.abc import Callable

from fragments._fdg import FragmentedGraph
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
from fragments._render_png import fdg_figure

# How each kind of edge is drawn in DOT.
_DOT_STYLE = {
    VALUE: "penwidth=1",
    CARRY: "style=dashed, penwidth=1, constraint=false",
    ORDER: 'style=dotted, color="#777777", arrowhead=empty',
    INTERFACE: "style=bold, penwidth=2.5",
    ALLREDUCE: 'style="bold,dashed", penwidth=2.5',
}


def _quote(text: str) -> str:
    """A DOT quoted string: node names hold dots and brackets, and any name could be a keyword."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def fdg_to_dot(fdg: FragmentedGraph) -> str:
    """The FDG as a Graphviz digraph: a cluster per fragment, a node per dataflow
    node, thin edges inside fragments and bold labelled edges for interfaces.
    The same FDG always gives the same text, so the file can be diffed."""
    picture, colours = picture_of(fdg), fragment_colours(fdg)
    lines = [
        f"digraph {_quote('fdg_' + fdg.policy.name)} {{",
        f"  label={_quote(title_of(fdg))};",
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
            f'    style="rounded,filled"; color={_quote(colour)}; fillcolor={_quote(tint(colour, 0.88))};',
        ]
        for node in fragment.nodes:
            label = picture.nodes[node]["label"]
            lines.append(f"    {_quote(node)} [label={_quote(label)}, fillcolor={_quote(tint(colour, 0.6))}];")
        lines.append("  }")
    for producer, consumer, data in picture.edges(data=True):
        attributes = _DOT_STYLE[data["kind"]]
        if data["label"]:
            colour = colours[picture.nodes[producer]["fragment"]]
            attributes += f", label={_quote(data['label'])}, color={_quote(colour)}"
        lines.append(f"  {_quote(producer)} -> {_quote(consumer)} [{attributes}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


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


__all__ = ["fdg_figure", "fdg_to_dot", "fragment_colours", "write_dot", "write_png"]
