"""sqltree's exporters for a fitted estimator, in the layouts of scikit-learn's.

scikit-learn's own ``export_text``, ``export_graphviz`` and ``plot_tree`` take a fitted
sqltree estimator too (they read ``tree_``). These do the same for every tree sqltree grows:
they also print nominal tests (``color in {red, blue}``, ``outlook = sunny``), which
scikit-learn's arrays cannot state, and C4.5's tests of more than two branches.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..export import class_colors, fill_color
from ._base import SQLTreeEstimator
from ._tree import FlatTree


def _names(est: SQLTreeEstimator, feature_names: Any) -> list[str]:
    if feature_names is not None:
        return [str(n) for n in feature_names]
    return list(est._feature_columns)


def _fill(t: FlatTree, i: int, palette: list[tuple[int, int, int]]) -> str:
    """A node's fill: its class's colour by purity, or for a regression tree one colour,
    stronger the higher the node's value among the tree's (as scikit-learn fills them)."""
    if t.values is None:
        return fill_color(t.proba[i], palette)
    low, high = float(t.values.min()), float(t.values.max())
    alpha = (float(t.values[i]) - low) / (high - low) if high > low else 0.0
    rgb = [round(alpha * c + (1 - alpha) * 255) for c in palette[0]]
    return "#" + "".join(f"{c:02x}" for c in rgb)


def _classes(est: SQLTreeEstimator, class_names: Any) -> list[Any]:
    """The class names leaves print (none for a regressor, whose leaves print values)."""
    if class_names is not None:
        return list(class_names)
    return list(getattr(est, "classes_", []))


def _value_text(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _conditions(
    est: SQLTreeEstimator, names: list[str], i: int, decimals: int
) -> list[str]:
    """The condition of each branch of node ``i``."""
    t = est._flat
    name = names[t.feature[i]]
    if t.continuous[i]:
        thr = t.threshold[i]
        return [f"{name} <= {thr:.{decimals}f}", f"{name} >  {thr:.{decimals}f}"]
    domain = est._domains[est._feature_columns[t.feature[i]]]
    table = t.lookup[i][:-1]
    groups = [
        [_value_text(domain[c]) for c in np.flatnonzero(table == b)]
        for b in range(t.n_children[i])
    ]
    if t.n_children[i] == 2 and len(groups[0]) != 1:
        text = ", ".join(groups[0])
        return [f"{name} in {{{text}}}", f"{name} not in {{{text}}}"]
    return [
        f"{name} = {g[0]}" if len(g) == 1 else f"{name} in {{{', '.join(g)}}}" for g in groups
    ]


def _children(t: FlatTree, i: int) -> list[int]:
    return [int(c) for c in t.children[t.first_child[i] : t.first_child[i] + t.n_children[i]]]


def _depth_below(t: FlatTree, i: int) -> int:
    deepest, stack = 0, [(i, 0)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((c, d + 1) for c in _children(t, node))
    return deepest


def export_text(
    decision_tree: SQLTreeEstimator,
    *,
    feature_names: Any = None,
    class_names: Any = None,
    max_depth: int = 10,
    spacing: int = 3,
    decimals: int = 2,
    show_weights: bool = False,
) -> str:
    """The tree as indented rules, in the layout of ``sklearn.tree.export_text``.

    Examples
    --------
    >>> import numpy as np
    >>> from sqltree.estimator import DecisionTreeClassifier
    >>> clf = DecisionTreeClassifier().fit(np.array([[0.0], [1.0], [2.0]]), [0, 0, 1])
    >>> print(export_text(clf, feature_names=["x"]), end="")
    |--- x <= 1.50
    |   |--- class: 0
    |--- x >  1.50
    |   |--- class: 1
    """
    check_is_fitted(decision_tree)
    t = decision_tree._flat
    names = _names(decision_tree, feature_names)
    classes = _classes(decision_tree, class_names)
    bar = "|" + " " * spacing
    dash = "|" + "-" * spacing
    lines: list[str] = []
    stack: list[tuple[int, int, str | None]] = [(0, 0, None)]
    while stack:
        i, depth, heading = stack.pop()
        indent = bar * (depth - 1) if heading is not None else ""
        if heading is not None:
            lines.append(f"{indent}{dash} {heading}")
        inner = bar * depth
        if t.n_children[i] == 0 and t.values is not None:
            lines.append(f"{inner}{dash} value: [{t.values[i]:.{decimals}f}]")
        elif t.n_children[i] == 0:
            proba = t.proba[i]
            text = ""
            if show_weights:
                weights = proba * t.counts[i].sum()
                text = "weights: [" + ", ".join(f"{w:.{decimals}f}" for w in weights) + "] "
            lines.append(f"{inner}{dash} {text}class: {classes[int(np.argmax(proba))]}")
        elif depth >= max_depth:
            lines.append(f"{inner}{dash} truncated branch of depth {_depth_below(t, i)}")
        else:
            conditions = _conditions(decision_tree, names, i, decimals)
            stack.extend(
                (child, depth + 1, cond)
                for child, cond in reversed(list(zip(_children(t, i), conditions)))
            )
    return "\n".join(lines) + "\n"


def export_graphviz(
    decision_tree: SQLTreeEstimator,
    *,
    feature_names: Any = None,
    class_names: Any = None,
    precision: int = 3,
    filled: bool = False,
) -> str:
    """The tree in Graphviz DOT, with the node labels of ``sklearn.tree.export_graphviz``.

    With ``filled``, each node is filled with its majority class's colour, stronger the purer
    the node (as scikit-learn's ``filled=True``). A test of more than two branches (C4.5's
    nominal features) names its feature in the node and each branch's values on its edge.
    """
    check_is_fitted(decision_tree)
    t = decision_tree._flat
    names = _names(decision_tree, feature_names)
    classes = _classes(decision_tree, class_names)
    criterion = getattr(decision_tree, "criterion", decision_tree._criterion_name())
    imp = decision_tree._impurities
    samples = decision_tree._n_samples
    palette = class_colors(max(len(classes), 1)) if filled else []
    style = ', style="filled", color="black"' if filled else ""
    lines = [
        "digraph Tree {",
        f'node [shape=box{style}, fontname="helvetica"] ;',
        'edge [fontname="helvetica"] ;',
    ]
    for i in range(t.node_count):
        parts = []
        conditions = _conditions(decision_tree, names, i, precision) if t.n_children[i] else []
        if len(conditions) == 2:
            parts.append(conditions[0])
        elif conditions:
            parts.append(names[t.feature[i]])
        parts.append(f"{criterion} = {round(float(imp[i]), precision)}")
        parts.append(f"samples = {int(samples[i])}")
        if t.values is not None:
            parts.append(f"value = {round(float(t.values[i]), precision)}")
        else:
            value = [round(float(v), precision) for v in t.proba[i] * t.counts[i].sum()]
            parts.append(f"value = {value}")
            parts.append(f"class = {classes[int(np.argmax(t.proba[i]))]}")
        label = "\\n".join(parts).replace('"', '\\"')
        fill = f', fillcolor="{_fill(t, i, palette)}"' if filled else ""
        lines.append(f'{i} [label="{label}"{fill}] ;')
        for branch, child in enumerate(_children(t, i)):
            if len(conditions) == 2:
                extra = ""
                if i == 0:
                    head = "True" if branch == 0 else "False"
                    angle = 45 if branch == 0 else -45
                    extra = f' [labeldistance=2.5, labelangle={angle}, headlabel="{head}"]'
            else:
                text = conditions[branch][len(names[t.feature[i]]) + 1 :].replace('"', '\\"')
                extra = f' [label="{text}"]'
            lines.append(f"{i} -> {child}{extra} ;")
    lines.append("}")
    return "\n".join(lines) + "\n"
