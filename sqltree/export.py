"""Exporters: a tree as J48-style text, as IF-THEN rules, and as Graphviz DOT.

All three are free functions over a trained model (anything with ``root`` and ``classes``) or a
bare root ``Node`` with the class labels passed separately. They read only the stored tree.
"""

from __future__ import annotations

import colorsys
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import OptionError
from .tree import Node, Split, Value

__all__ = [
    "Rule", "class_colors", "cut_mark", "distribution", "edge_label", "fill_color", "graphviz",
    "node_lines", "rule_list", "rules", "text", "weka_number",
]


def resolve_tree(model_or_root: Any, classes: Sequence[Value] | None) -> tuple[Node, list[Value]]:
    root = model_or_root if isinstance(model_or_root, Node) else model_or_root.root
    if classes is None:
        classes = getattr(model_or_root, "classes", None)
    if classes is None and root.value is not None:
        classes = []  # a regression tree: leaves show their values
    if classes is None:
        k = len(root.counts)
        classes = [str(i) for i in range(k)]
    return root, list(classes)


def _is_regression(node: Node, classes: list[Value]) -> bool:
    return not classes and node.value is not None


def _number(x: float, decimals: int | None) -> str:
    return weka_number(x, decimals) if decimals is not None else repr(float(x))


def _value_label(node: Node, decimals: int | None, sd: bool | str) -> str:
    """A regression leaf: ``value 96.31 (weight 171.0[, sd 55.2])``; with ``sd="deviance"``
    (a Poisson tree, whose impurity is its mean half deviance), ``deviance 0.31`` instead."""
    assert node.value is not None
    text = f"value {_number(node.value, decimals)} (weight {_java_double(_round2(node.weight))}"
    impurity = max(node.impurity if node.impurity is not None else 0.0, 0.0)
    if sd == "deviance":
        text += f", deviance {_number(impurity, decimals)}"
    elif sd:
        text += f", sd {_number(math.sqrt(impurity), decimals)}"
    return text + ")"


def weka_number(x: float, decimals: int = 6) -> str:
    """A number as Weka's ``Utils.doubleToString(x, decimals)`` prints it.

    Rounded half away from zero to ``decimals`` places, trailing zeros and a trailing point
    dropped: 75.0 -> ``75``, 0.6 -> ``0.6``, 0.12345678 -> ``0.123457``.
    """
    if math.isnan(x) or math.isinf(x):
        return str(x)
    scaled = abs(x) * 10**decimals
    if scaled >= 2**63:  # Weka falls back to Java's Double.toString here
        return repr(float(x))
    digits = math.floor(scaled + 0.5)
    if digits == 0:
        return "0"
    whole, frac = divmod(digits, 10**decimals)
    frac_text = f"{frac:0{decimals}d}".rstrip("0") if decimals else ""
    body = f"{whole}.{frac_text}" if frac_text else f"{whole}"
    return ("-" if x < 0 else "") + body


def _java_double(x: float) -> str:
    """Java's ``Double.toString`` for the rounded weights J48 prints (``2.0``, ``3.41``)."""
    if x == int(x) and abs(x) < 1e7:
        return f"{int(x)}.0"
    return repr(float(x))


def _round2(x: float) -> float:
    """Weka's ``Utils.roundDouble(x, 2)``: half up at two decimals."""
    return math.floor(x * 100 + 0.5) / 100


def _value_text(v: Value) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def condition(split: Split, branch: int, decimals: int | None = 6) -> str:
    """The test leading into ``branch``: ``humidity <= 75``, ``outlook = sunny``; thresholds
    as Weka prints them to ``decimals`` places (None: in full)."""

    def number(t: float) -> str:
        return weka_number(t, decimals) if decimals is not None else repr(float(t))

    return split.describe(branch, number, _value_text)


def _label(
    node: Node, classes: list[Value], decimals: int | None = 6, sd: bool | str = False
) -> str:
    if _is_regression(node, classes):
        return _value_label(node, decimals, sd)
    weight = node.weight
    text = f"{_value_text(classes[node.label])} ({_java_double(_round2(weight))}"
    errors = node.errors
    if errors > 1e-6:
        text += f"/{_java_double(_round2(errors))}"
    return text + ")"


def _count(root: Node) -> tuple[int, int]:
    nodes = list(root.walk())
    return sum(1 for n in nodes if n.is_leaf), len(nodes)


def check_depth(max_depth: int | None) -> int | None:
    if max_depth is not None and (isinstance(max_depth, bool) or not isinstance(max_depth, int)
                                  or max_depth < 0):
        raise OptionError(f"max_depth must be a whole number >= 0 or None, not {max_depth!r}")
    return max_depth


def shown_as_label(node: Node, depth: int, limit: int | None) -> bool:
    """Whether a node at ``depth`` prints as a label: a leaf, or a test cut at the limit."""
    return node.is_leaf or (limit is not None and depth >= limit)


def is_cut(node: Node, depth: int, limit: int | None) -> bool:
    return not node.is_leaf and limit is not None and depth >= limit


def cut_mark(node: Node, depth: int, limit: int | None) -> str:
    """`` [cut: N leaves]`` after a test whose subtree ``max_depth`` leaves out, else ``""``."""
    if not is_cut(node, depth, limit):
        return ""
    n = sum(1 for _ in node.leaves())
    return f" [cut: {n} leaves]"


def text(
    model_or_root: Any,
    classes: Sequence[Value] | None = None,
    *,
    decimals: int | None = 6,
    summary: bool = True,
    max_depth: int | None = None,
) -> str:
    r"""The tree printed as Weka's J48 prints it.

    One line per branch, ``|   `` per level of depth, a leaf's class with its training
    weight and, when some of it is misclassified, that weight: ``yes (3.0/1.0)``, both rounded
    to two decimals. Thresholds are the observed training values J48 also splits at, printed
    with up to ``decimals`` places (None prints the exact value). ``summary`` appends the
    ``Number of Leaves`` and ``Size of the tree`` lines (of the whole tree). With ``max_depth``
    only tests down to that depth are printed: a subtree cut there prints as its root's label
    followed by ``[cut: N leaves]`` (``cut_mark``).

    >>> from sqltree.tree import Node, Split
    >>> leaf = lambda c: Node(counts=c, proba=[x / sum(c) for x in c])
    >>> root = Node([9.0, 5.0], [9 / 14, 5 / 14], Split("humidity", "continuous", 75.0),
    ...             [leaf([4.0, 0.0]), leaf([5.0, 5.0])])
    >>> print(text(root, ["yes", "no"], summary=False))
    humidity <= 75: yes (4.0)
    humidity > 75: yes (10.0/5.0)
    >>> text(root, ["yes", "no"]).splitlines()[-3:]
    ['Number of Leaves  : \t2', '', 'Size of the tree : \t3']
    """
    root, labels = resolve_tree(model_or_root, classes)
    limit = check_depth(max_depth)
    lines: list[str] = []
    options = getattr(model_or_root, "options", None) or {}
    spread: bool | str = "deviance" if options.get("criterion") == "poisson" else True

    # An explicit stack of (test node, depth, next branch): trees of any depth print.
    stack: list[tuple[Node, int, int]] = [] if shown_as_label(root, 0, limit) else [(root, 0, 0)]
    while stack:
        node, depth, branch = stack.pop()
        if branch == len(node.children):
            continue
        assert node.split is not None
        stack.append((node, depth, branch + 1))
        child = node.children[branch]
        line = "|   " * depth + condition(node.split, branch, decimals)
        if shown_as_label(child, depth + 1, limit):
            lines.append(f"{line}: {_label(child, labels, decimals, sd=spread)}"
                         f"{cut_mark(child, depth + 1, limit)}")
        else:
            lines.append(line)
            stack.append((child, depth + 1, 0))

    if shown_as_label(root, 0, limit):
        body = f": {_label(root, labels, decimals, sd=spread)}{cut_mark(root, 0, limit)}"
    else:
        body = "\n".join(lines)
    if not summary:
        return body
    leaves, size = _count(root)
    return f"{body}\n\nNumber of Leaves  : \t{leaves}\n\nSize of the tree : \t{size}\n"


@dataclass
class Rule:
    """One leaf as a rule: the tests on its path, its class (a regression tree's: its
    value, with confidence None), and how much it covers.

    With ``max_depth``, a rule may end at a test whose subtree is cut: ``leaf`` is then that
    test's node and ``cut`` the number of leaves below it.
    """

    conditions: list[str]
    label: Value
    coverage: float  # training weight that reached the leaf
    confidence: float | None  # fraction of that weight in the predicted class
    leaf: Node
    cut: int = 0

    def __str__(self) -> str:
        lhs = " AND ".join(self.conditions) if self.conditions else "TRUE"
        cut = f" [cut: {self.cut} leaves]" if self.cut else ""
        if self.confidence is None:
            return (
                f"IF {lhs} THEN value {_number(float(self.label), 6)}"
                f"  (coverage {_java_double(_round2(self.coverage))}){cut}"
            )
        return (
            f"IF {lhs} THEN {_value_text(self.label)}"
            f"  (coverage {_java_double(_round2(self.coverage))},"
            f" confidence {self.confidence:.3f}){cut}"
        )


def rule_list(
    model_or_root: Any,
    classes: Sequence[Value] | None = None,
    *,
    decimals: int | None = 6,
    max_depth: int | None = None,
) -> list[Rule]:
    """Every leaf as a :class:`Rule`, in the order the leaves are printed; with
    ``max_depth``, paths end at that depth (``Rule.cut``)."""
    root, labels = resolve_tree(model_or_root, classes)
    limit = check_depth(max_depth)
    out: list[Rule] = []

    stack: list[tuple[Node, list[str]]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        if shown_as_label(node, len(path), limit):
            cut = sum(1 for _ in node.leaves()) if not node.is_leaf else 0
            if _is_regression(node, labels):
                assert node.value is not None
                out.append(Rule(path, node.value, node.weight, None, node, cut))
                continue
            weight = node.weight
            confidence = node.counts[node.label] / weight if weight > 0 else 0.0
            out.append(Rule(path, labels[node.label], weight, confidence, node, cut))
            continue
        assert node.split is not None
        split = node.split
        stack.extend(
            (child, [*path, condition(split, branch, decimals)])
            for branch, child in reversed(list(enumerate(node.children)))
        )
    return out


def rules(
    model_or_root: Any,
    classes: Sequence[Value] | None = None,
    *,
    decimals: int | None = 6,
    max_depth: int | None = None,
    ids: bool = False,
) -> str:
    """One ``IF ... THEN class`` line per leaf, with its coverage (weight) and confidence.

    Empty leaves (no training weight) are kept: they state the class a path predicts. With
    ``ids``, each line starts with the leaf's id (``leaf 4: IF ...``), the number
    ``to_sql(output="leaf")`` gives the rows that reach it (``node 2:`` for a test whose
    subtree ``max_depth`` cuts).
    """
    lines = []
    for r in rule_list(model_or_root, classes, decimals=decimals, max_depth=max_depth):
        prefix = f"{'node' if r.cut else 'leaf'} {r.leaf.node_id}: " if ids else ""
        lines.append(prefix + str(r))
    return "\n".join(lines) + "\n"


def _dot_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def distribution(node: Node, labels: Sequence[Value], per_line: int = 4) -> list[str]:
    """A node's class weights, ``no 5 | yes 9``, at most ``per_line`` classes a line."""
    parts = [f"{_value_text(c)} {weka_number(w, 2)}" for c, w in zip(labels, node.counts)]
    return [" | ".join(parts[i:i + per_line]) for i in range(0, len(parts), per_line)]


def node_lines(node: Node, labels: Sequence[Value], depth: int = 0,
               max_depth: int | None = None, decimals: int | None = 6) -> list[str]:
    """What a picture of the tree writes in a node: the tested feature (tests), the class with
    its weight and errors as J48 prints a leaf (a regression tree's value and weight), the
    class distribution, and for a test that ``max_depth`` cuts, how many leaves it hides."""
    lines = [] if node.is_leaf else [node.split.feature if node.split else ""]
    lines.append(_label(node, list(labels), decimals))
    lines += distribution(node, labels)
    if is_cut(node, depth, max_depth):
        lines.append(f"[cut: {sum(1 for _ in node.leaves())} leaves]")
    return lines


def edge_label(parent: Node, branch: int, decimals: int | None = 6) -> str:
    """The condition on the edge into ``branch``, without the feature: ``<= 75``, ``= sunny``."""
    assert parent.split is not None
    return condition(parent.split, branch, decimals)[len(parent.split.feature) + 1 :]


def class_colors(n_classes: int) -> list[tuple[int, int, int]]:
    """One colour per class: hues evenly spaced around the wheel from orange, equally
    saturated and bright (the palette scikit-learn's exporters use, so trees look alike)."""
    out = []
    for i in range(n_classes):
        r, g, b = colorsys.hsv_to_rgb((25 + 360 * i / n_classes) % 360 / 360, 0.75, 0.9)
        out.append((int(r * 255), int(g * 255), int(b * 255)))
    return out


def fill_color(proba: Sequence[float], palette: Sequence[tuple[int, int, int]]) -> str:
    """``#rrggbb`` of a node: its class's colour, faded towards white as the node is less
    pure (opacity ``(p1 - p2) / (1 - p2)`` for the two largest class shares, as
    scikit-learn's ``filled=True``): a pure node has the full colour, a tie is white."""
    best = max(range(len(proba)), key=lambda i: (proba[i], -i))
    ranked = sorted(proba, reverse=True)
    alpha = 0.0 if len(ranked) < 2 or ranked[1] >= 1 else (
        (ranked[0] - ranked[1]) / (1 - ranked[1])
    )
    rgb = [round(alpha * c + (1 - alpha) * 255) for c in palette[best]]
    return "#" + "".join(f"{c:02x}" for c in rgb)


def graphviz(
    model_or_root: Any,
    classes: Sequence[Value] | None = None,
    *,
    decimals: int | None = 6,
    name: str = "Tree",
    max_depth: int | None = None,
    filled: bool = False,
) -> str:
    """The tree as Graphviz DOT text: ellipses for tests, boxes for leaves, the conditions on
    the edges, and in every node its class, weight and class distribution (``node_lines``).

    With ``max_depth``, tests at that depth are drawn as dashed boxes that say how many leaves
    their cut subtree holds. With ``filled``, every node is filled with the colour of its
    predicted class, the stronger the purer the node (``fill_color``).
    """
    root, labels = resolve_tree(model_or_root, classes)
    limit = check_depth(max_depth)
    out = [f"digraph {_dot_quote(name)} {{", "  node [fontname=\"Helvetica\"];",
           "  edge [fontname=\"Helvetica\"];"]
    counter = iter(range(1 << 62))
    palette = class_colors(len(root.counts)) if filled else []

    def open_node(node: Node, depth: int) -> int:
        me = next(counter)
        label = _dot_quote("\n".join(node_lines(node, labels, depth, limit, decimals)))
        cut = is_cut(node, depth, limit)
        attributes = f"label={label}" + (" shape=box" if node.is_leaf or cut else "")
        styles = [s for s, on in (("filled", filled), ("dashed", cut)) if on]
        if styles:
            style = styles[0] if len(styles) == 1 else f'"{",".join(styles)}"'
            attributes += f" style={style}"
        if filled:
            attributes += f" fillcolor=\"{fill_color(node.proba, palette)}\""
        out.append(f"  N{me} [{attributes}];")
        return me

    def edge(parent: Node, parent_id: int, branch: int, child_id: int) -> None:
        label = _dot_quote(edge_label(parent, branch, decimals))
        out.append(f"  N{parent_id} -> N{child_id} [label={label}];")

    # Frames (node, its id, its depth, next branch, where it hangs): a child's edge follows
    # its subtree.
    Frame = tuple[Node, int, int, int, tuple[Node, int, int] | None]
    root_id = open_node(root, 0)
    stack: list[Frame] = [] if shown_as_label(root, 0, limit) else [(root, root_id, 0, 0, None)]
    while stack:
        node, me, depth, branch, parent = stack.pop()
        if branch == len(node.children):
            if parent is not None:
                edge(*parent, me)
            continue
        stack.append((node, me, depth, branch + 1, parent))
        child = node.children[branch]
        child_id = open_node(child, depth + 1)
        if shown_as_label(child, depth + 1, limit):
            edge(node, me, branch, child_id)
        else:
            stack.append((child, child_id, depth + 1, 0, (node, me, branch)))

    out.append("}")
    return "\n".join(out) + "\n"
