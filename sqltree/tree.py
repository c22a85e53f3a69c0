"""The tree: typed nodes holding tests and weighted class distributions.

A node tests one feature. A continuous test has two branches, ``feature <= threshold`` and
``feature > threshold``. A nominal test has one branch per group of values: a single value per
branch for ID3 and C4.5 (multiway), a subset of values per branch for CART (binary).

A value is *unknown* at a node when it is NULL, or, for a nominal test, a value that no branch
lists. Unknown values follow the node's routing: every branch with weight ``shares[i]``
(C4.5's fractional cases) when ``unknown_branch`` is None, else the branch ``unknown_branch``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .criteria import predicted_class
from .errors import OptionError

Value = Any  # a nominal value as the engine returns it: str, bool, int or float

CONTINUOUS = "continuous"
NOMINAL = "nominal"


@dataclass
class Split:
    """The test a node applies.

    Attributes
    ----------
    feature : str
        Column name in the source.
    kind : {"continuous", "nominal"}
    threshold : float, optional
        Continuous tests: branch 0 holds ``feature <= threshold``, branch 1 ``feature > threshold``.
    groups : list of list, optional
        Nominal tests: the values each branch holds.
    """

    feature: str
    kind: Literal["continuous", "nominal"]
    threshold: float | None = None
    groups: list[list[Value]] | None = None

    def __post_init__(self) -> None:
        # -0.0 and 0.0 are one threshold; which of them an engine returns differs by plan.
        if self.threshold == 0.0:
            self.threshold = 0.0

    def branch_of(self, value: Value) -> int | None:
        """The branch a known value takes, or None when the value is unknown at this test."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return None
        if self.kind == CONTINUOUS:
            assert self.threshold is not None
            return 0 if float(value) <= self.threshold else 1
        assert self.groups is not None
        for i, group in enumerate(self.groups):
            if value in group:
                return i
        return None

    def describe(
        self,
        branch: int,
        number: Callable[[float], str] | None = None,
        value: Callable[[Value], str] | None = None,
    ) -> str:
        """Text of the condition that leads into ``branch``, e.g. ``humidity <= 75``, with
        the threshold written by ``number`` and nominal values by ``value`` (by default
        ``format_number`` and ``format_value``)."""
        number = number or format_number
        value = value or format_value
        if self.kind == CONTINUOUS:
            assert self.threshold is not None
            op = "<=" if branch == 0 else ">"
            return f"{self.feature} {op} {number(self.threshold)}"
        assert self.groups is not None
        group = self.groups[branch]
        if len(group) == 1:
            return f"{self.feature} = {value(group[0])}"
        return f"{self.feature} in {{{', '.join(value(v) for v in group)}}}"


class _NoBranches(list):  # type: ignore[type-arg]
    """The ``children`` and the ``shares`` of every leaf: one empty list, shared, that refuses
    to grow. A grown tree is mostly leaves (the 1M benchmark file's no-option tree: 709,560
    of about 800,000 nodes), and two empty lists of their own took 144 bytes a leaf, about
    100 MB; a node that gets a test gets lists of its own."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a leaf's branches are shared: give the node lists of its own")

    append = extend = insert = __setitem__ = __iadd__ = __imul__ = _refuse  # type: ignore


NO_BRANCHES: list[Any] = _NoBranches()


def _no_branches() -> list[Any]:
    return NO_BRANCHES


@dataclass(slots=True)
class Node:
    """A node of the tree: its class distribution and, unless it is a leaf, its test.

    Attributes
    ----------
    counts : list of float
        Weighted class counts of the training rows that reached the node (fractional rows
        included), in the order of the model's ``classes``.
    proba : list of float
        Class probabilities the node predicts: ``counts`` normalised, or the parent's
        ``proba`` when no training weight reached the node.
    split : Split, optional
        The test; None for a leaf.
    children : list of Node
        One child per branch of the test.
    shares : list of float
        Fraction of the known training weight that went down each branch.
    unknown_branch : int, optional
        Branch that unknown values take; None means all branches, weighted by ``shares``.
    node_id : int
        The node's number in the order growth made it.
    n_samples : int, optional
        Training rows (not weight) that reached the node (CART: scikit-learn's
        ``n_node_samples``; its ``weighted_n_node_samples`` is ``weight``).
    impurity : float, optional
        Impurity of ``counts`` by the criterion the tree was grown with (CART).
    improvement : float, optional
        A split node's impurity decrease, weighted by its share of the root's weight (CART:
        the priority of best-first growth).
    value : float, optional
        A regression tree's prediction: the weighted mean target of the node's training rows
        (``impurity`` is then their weighted variance).
    tied : bool
        The split chosen here, or the node's turn in best-first growth, tied with another
        within the tie tolerance: sqltree chose deterministically where scikit-learn, for one,
        breaks ties at random.
    """

    counts: list[float]
    proba: list[float]
    split: Split | None = None
    children: list[Node] = field(default_factory=_no_branches)
    shares: list[float] = field(default_factory=_no_branches)
    unknown_branch: int | None = None
    node_id: int = 0
    n_samples: int | None = None
    impurity: float | None = None
    improvement: float | None = None
    tied: bool = False
    value: float | None = None

    @property
    def is_leaf(self) -> bool:
        return self.split is None

    @property
    def weight(self) -> float:
        return float(sum(self.counts))

    @property
    def label(self) -> int:
        """Index of the predicted class (``criteria.predicted_class``: the most probable, near
        ties to the lowest index)."""
        return predicted_class(self.proba)

    @property
    def errors(self) -> float:
        """Training weight that this node, as a leaf, would misclassify."""
        return self.weight - self.counts[self.label] if self.weight > 0 else 0.0

    @property
    def heaviest_branch(self) -> int:
        """The branch that took the largest share of the known training weight (the first on
        ties): where ``unknown="majority"`` scoring sends an unknown value."""
        return max(range(len(self.shares)), key=lambda i: (self.shares[i], -i), default=0)

    def unknown_route(self) -> int | None:
        """The branch an unknown value takes here under majority routing: the node's own
        ``unknown_branch``, else its heaviest branch."""
        return self.heaviest_branch if self.unknown_branch is None else self.unknown_branch

    def routed_to_majority(self) -> Node:
        """A copy of the subtree in which every test that spreads unknown values over its
        branches (C4.5's fractional cases) sends them down its heaviest branch instead.

        Counts, probabilities and tests are shared with this tree, not copied; the copy is
        made without recursion, so trees of any depth can be copied.
        """
        copies: dict[int, Node] = {}
        nodes = list(self.walk())
        for n in nodes:
            copies[id(n)] = dataclasses.replace(
                n, children=NO_BRANCHES,
                unknown_branch=None if n.is_leaf else n.unknown_route()
            )
        for n in nodes:
            if n.children:
                copies[id(n)].children = [copies[id(c)] for c in n.children]
        return copies[id(self)]

    def walk(self) -> Iterator[Node]:
        """All nodes of the subtree, depth first, parent before children (no recursion, so
        trees of any depth can be walked)."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def leaves(self) -> Iterator[Node]:
        return (n for n in self.walk() if n.is_leaf)

    def make_leaf(self) -> None:
        """Drop the node's test, children and what described its split."""
        self.split = None
        self.children = NO_BRANCHES
        self.shares = NO_BRANCHES
        self.unknown_branch = None
        self.improvement = None
        self.tied = False

    def predict_proba(self, row: Mapping[str, Value]) -> list[float]:
        """Class probabilities for one row, routing unknown values as C4.5 does."""
        node = self
        while node.split is not None:  # follow single routes without recursion
            branch = node.split.branch_of(row.get(node.split.feature))
            if branch is None:
                branch = node.unknown_branch
            if branch is None:
                break
            node = node.children[branch]
        if node.split is None:
            return list(node.proba)
        return node._spread_unknown(row)

    def _spread_unknown(self, row: Mapping[str, Value]) -> list[float]:
        total = [0.0] * len(self.proba)
        for share, child in zip(self.shares, self.children):
            if share > 0:
                for i, p in enumerate(child.predict_proba(row)):
                    total[i] += share * p
        return total

    # -- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> list[dict[str, Any]]:
        """The subtree as a flat list of nodes in depth-first order, children by position.

        Flat, so that trees of any depth serialise without recursion limits.
        """
        nodes = list(self.walk())
        position = {id(n): i for i, n in enumerate(nodes)}
        out = []
        for n in nodes:
            item: dict[str, Any] = {"id": n.node_id, "counts": n.counts, "proba": n.proba}
            for key in GROWTH_FIELDS:  # optional: only trees grown by CART have them
                if getattr(n, key) is not None:
                    item[key] = getattr(n, key)
            if n.tied:
                item["tied"] = True
            if n.split is not None:
                split: dict[str, Any] = {"feature": n.split.feature, "kind": n.split.kind}
                if n.split.kind == CONTINUOUS:
                    split["threshold"] = n.split.threshold
                else:
                    split["groups"] = n.split.groups
                item["split"] = split
                item["shares"] = n.shares
                item["unknown_branch"] = n.unknown_branch
                item["children"] = [position[id(c)] for c in n.children]
            out.append(item)
        return out

    @classmethod
    def from_dict(cls, data: list[dict[str, Any]]) -> Node:
        nodes = []
        for place, item in enumerate(data):
            split = None
            if "split" in item:
                s = item["split"]
                split = Split(
                    feature=s["feature"],
                    kind=s["kind"],
                    threshold=s.get("threshold"),
                    groups=s.get("groups"),
                )
            nodes.append(
                cls(
                    counts=[float(c) for c in item["counts"]],
                    proba=[float(p) for p in item["proba"]],
                    split=split,
                    shares=[float(x) for x in item["shares"]] if item.get("shares")
                    else NO_BRANCHES,
                    unknown_branch=item.get("unknown_branch"),
                    node_id=int(item.get("id", place)),
                    n_samples=_optional(int, item.get("n_samples")),
                    impurity=_optional(float, item.get("impurity")),
                    improvement=_optional(float, item.get("improvement")),
                    value=_optional(float, item.get("value")),
                    tied=bool(item.get("tied", False)),
                )
            )
        for node, item in zip(nodes, data):
            if item.get("children"):
                node.children = [nodes[i] for i in item["children"]]
        return nodes[0]


UNKNOWN_ROUTES = ("fractional", "majority")
"""How scoring treats an unknown value at a test that spreads it over every branch (C4.5's
fractional cases): exactly, as a weighted sum over the branches, or down the heaviest branch."""


def check_unknown(unknown: str) -> str:
    """``unknown`` if it is one of ``UNKNOWN_ROUTES``, else OptionError."""
    if unknown not in UNKNOWN_ROUTES:
        raise OptionError(f"unknown must be one of {list(UNKNOWN_ROUTES)}, not {unknown!r}")
    return unknown


def scoring_tree(root: Node, unknown: str) -> Node:
    """The tree that scores as ``unknown`` says: ``root`` itself, or for "majority" its copy
    whose fractional tests send unknown values down their heaviest branch."""
    return root.routed_to_majority() if check_unknown(unknown) == "majority" else root


GROWTH_FIELDS = ("n_samples", "impurity", "improvement", "value")
"""Optional numbers a node keeps from growth (``Node``)."""


def _optional(convert: Callable[[Any], Any], value: Any) -> Any:
    return None if value is None else convert(value)


def argmax(values: list[float]) -> int:
    """Index of the largest value; ties go to the lowest index."""
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


SHARED_WHOLE_MAX = 1024
_WHOLE = {float(i): float(i) for i in range(SHARED_WHOLE_MAX + 1)}


def share_whole(values: list[float]) -> list[float]:
    """``values`` with each whole number from 0 to ``SHARED_WHOLE_MAX`` as one float object
    that every node shares (counts are weights, never negative: a zero is 0.0). A grown tree
    is mostly small leaves, whose counts and probabilities are mostly 0, 1 and small whole
    numbers, and a float of its own takes 32 bytes: the no-option tree of the 1M-row
    benchmark file, grown and collapsed (664,652 nodes), holds 4.0 million of them, 1.9
    million whole."""
    get = _WHOLE.get
    # a comprehension, not list(map(...)): that reserves eight places, 64 bytes a list
    return [get(v, v) for v in values]


def normalise(counts: list[float], fallback: list[float]) -> list[float]:
    total = sum(counts)
    if total <= 0:
        return list(fallback)
    return [c / total for c in counts]


def format_number(x: float | None) -> str:
    """A threshold as the observed value it is: ``75`` for 75.0, else the shortest repr."""
    if x is None:
        return "?"
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(float(x))


def format_value(v: Value) -> str:
    if isinstance(v, float):
        return format_number(v)
    return str(v)
