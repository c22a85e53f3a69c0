"""Pictures of a tree: DOT text rendered by Graphviz, and a matplotlib drawing.

Both are optional: ``render`` needs the ``graphviz`` Python package and Graphviz's ``dot``
program (``pip install -e '.[graphviz]'`` in the repository, and ``apt-get install graphviz``),
``plot`` needs matplotlib (``pip install -e '.[plot]'``). Each says so when it is missing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import OptionError, UnsupportedError, install_hint
from .export import (
    check_depth,
    class_colors,
    edge_label,
    fill_color,
    is_cut,
    node_lines,
    resolve_tree,
    shown_as_label,
)
from .tree import Node, Value

__all__ = ["PICTURE_FORMATS", "plot", "render"]

PICTURE_FORMATS = ("svg", "png", "pdf")
"""What ``render`` writes through Graphviz, by the file's extension (``.dot`` is the text)."""


def render(dot: str, path: str | os.PathLike[str]) -> None:
    """Write DOT text to ``path``: as it is for ``.dot``, else drawn by Graphviz as ``.svg``,
    ``.png`` or ``.pdf``.

    Raises OptionError for another extension, UnsupportedError when the ``graphviz`` package or
    Graphviz's ``dot`` program is missing (the message says how to install it).
    """
    fmt = picture_format(path)
    if fmt == "dot":
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(dot)
        return
    try:
        import graphviz
    except ImportError:
        raise UnsupportedError(
            f"drawing {os.fspath(path)!r} needs the graphviz Python package: "
            f"{install_hint('graphviz')} (or write the .dot text and draw it yourself)"
        ) from None
    try:
        data = graphviz.Source(dot).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise UnsupportedError(
            f"drawing {os.fspath(path)!r} needs Graphviz's dot program, which is not "
            "installed: apt-get install graphviz (brew install graphviz on macOS)"
        ) from None
    with open(path, "wb") as fh:
        fh.write(data)


def picture_format(path: str | os.PathLike[str]) -> str:
    """``dot``, ``svg``, ``png`` or ``pdf`` from the file name; anything else is refused."""
    ext = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if ext == "gv":
        ext = "dot"
    if ext != "dot" and ext not in PICTURE_FORMATS:
        raise OptionError(
            f"cannot tell what to write from {os.fspath(path)!r}: name a .dot, .svg, .png or "
            ".pdf file"
        )
    return ext


@dataclass
class _Placed:
    node: Node
    depth: int
    x: float
    parent: int | None  # index in the placed list
    branch: int


def _place(root: Node, limit: int | None) -> list[_Placed]:
    """The nodes drawn, in preorder: leaves and cut tests one slot apart from left to right,
    each test centred over its first and last child (no recursion)."""
    placed: list[_Placed] = []
    stack: list[tuple[Node, int, int | None, int]] = [(root, 0, None, 0)]
    slot = 0
    while stack:
        node, depth, parent, branch = stack.pop()
        placed.append(_Placed(node, depth, 0.0, parent, branch))
        me = len(placed) - 1
        if shown_as_label(node, depth, limit):
            placed[me].x = slot
            slot += 1
            continue
        stack.extend((c, depth + 1, me, i) for i, c in reversed(list(enumerate(node.children))))
    children: dict[int, list[int]] = {}
    for i, p in enumerate(placed):
        if p.parent is not None:
            children.setdefault(p.parent, []).append(i)
    for i in reversed(range(len(placed))):
        kids = children.get(i)
        if kids:
            placed[i].x = (placed[kids[0]].x + placed[kids[-1]].x) / 2
    return placed


def plot(
    model_or_root: Any,
    classes: Sequence[Value] | None = None,
    *,
    ax: Any = None,
    max_depth: int | None = None,
    decimals: int | None = 6,
    fontsize: float | None = None,
    filled: bool = False,
) -> Any:
    """Draw the tree with matplotlib, as ``sklearn.tree.plot_tree`` does: a box per node with
    what ``export.node_lines`` writes (the tested feature, class, weight and errors, class
    distribution), the conditions on the edges, subtrees below ``max_depth`` cut (dashed);
    ``filled`` colours each box as ``export.graphviz(filled=True)`` does.

    Draws on ``ax`` (default: a new figure sized to the tree) and returns the Axes.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise UnsupportedError(
            f"plot() needs matplotlib: {install_hint('plot')}"
        ) from None
    root, labels = resolve_tree(model_or_root, classes)
    limit = check_depth(max_depth)
    placed = _place(root, limit)
    texts = ["\n".join(node_lines(p.node, labels, p.depth, limit, decimals)) for p in placed]
    slots = max(p.x for p in placed) + 1
    levels = max(p.depth for p in placed) + 1
    widest = max(len(line) for t in texts for line in t.splitlines())
    tallest = max(t.count("\n") + 1 for t in texts)
    if ax is None:
        size = fontsize if fontsize is not None else 9.0
        # A slot holds the widest box (a character is about 0.6 em) with room to spare; a
        # level, its tallest box and as much again for the edges and their labels.
        slot = widest * size * 0.6 / 72 + 0.35
        level = tallest * size * 1.3 / 72 * 2.2 + 0.3
        fig, ax = plt.subplots(figsize=(min(max(4.0, slot * slots), 200.0),
                                        min(max(2.0, level * levels), 200.0)))
        fig.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=0.99)
    else:
        inches = ax.get_window_extent().width / ax.figure.dpi
        size = fontsize if fontsize is not None else max(
            3.0, min(10.0, inches / (slots + 0.2) * 72 / (widest * 0.6 + 2)))
    palette = class_colors(len(root.counts)) if filled else []
    ax.set_axis_off()
    ax.set_xlim(-0.6, slots - 0.4)
    ax.set_ylim(-(levels - 1) - 0.6, 0.6)
    for i, p in enumerate(placed):
        if p.parent is not None:
            parent = placed[p.parent]
            ax.plot([parent.x, p.x], [-parent.depth, -p.depth], color="0.35", lw=0.8, zorder=1)
            ax.text((parent.x + p.x) / 2, -(parent.depth + p.depth) / 2,
                    edge_label(parent.node, p.branch, decimals), ha="center", va="center",
                    fontsize=size * 0.9, zorder=2,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none"})
        cut = is_cut(p.node, p.depth, limit)
        ax.text(p.x, -p.depth, texts[i],
                ha="center", va="center", fontsize=size, zorder=3,
                bbox={"boxstyle": "round,pad=0.4" if p.node.is_leaf or cut else "round4,pad=0.4",
                      "fc": fill_color(p.node.proba, palette) if filled else "white",
                      "ec": "0.2", "ls": "--" if cut else "-"})
    return ax
