"""The fitted tree in arrays: a walk for prediction, and scikit-learn's ``tree_`` layout.

``FlatTree`` holds any sqltree tree (multiway C4.5 tests included) in parallel arrays and
predicts a whole matrix at once with the model's own rules: a known value follows its branch;
an unknown one (NaN, or a nominal value no branch lists) follows the node's unknown branch
(CART) or is spread over every branch by the training shares (C4.5), exactly as
``Model.predict_proba_row`` and the compiled SQL do.

``TreeArrays`` is the same tree in scikit-learn's ``Tree`` layout (``tree_``), read by
``sklearn.tree.export_text``, ``export_graphviz`` and ``plot_tree``. It exists only for binary
trees: scikit-learn's arrays give every test two children.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..criteria import PROBA_TIE
from ..pruning.cost_complexity import impurity as node_impurity
from ..tree import CONTINUOUS, Node

TREE_LEAF = -1
TREE_UNDEFINED = -2
INFINITE_THRESHOLD = np.finfo(np.float64).max
"""CART's "known values left" test compares with the largest double; scikit-learn writes inf."""


@dataclass
class FlatTree:
    """A tree as arrays, nodes numbered in ``order``.

    ``lookup[i]`` maps a nominal feature's value code to node ``i``'s branch (-1: no branch
    lists it); ``unknown[i]`` is the branch unknown values take, -1 to spread them by
    ``shares``.
    """

    feature: np.ndarray
    continuous: np.ndarray
    threshold: np.ndarray
    first_child: np.ndarray
    n_children: np.ndarray
    children: np.ndarray
    shares: np.ndarray  # aligned with ``children``
    unknown: np.ndarray
    proba: np.ndarray
    counts: np.ndarray
    lookup: dict[int, np.ndarray] = field(default_factory=dict)
    values: np.ndarray | None = None
    """A regression tree's prediction per node (``Node.value``); None for classes."""

    @property
    def node_count(self) -> int:
        return len(self.feature)

    @property
    def is_leaf(self) -> np.ndarray:
        return self.n_children == 0


def flatten(
    order: list[Node], columns: list[str], domains: dict[str, list[Any]]
) -> FlatTree:
    """Arrays of the tree whose nodes are listed in ``order`` (the root first)."""
    index = {id(n): i for i, n in enumerate(order)}
    position = {name: j for j, name in enumerate(columns)}
    m = len(order)
    k = len(order[0].counts)
    feature = np.full(m, TREE_UNDEFINED, dtype=np.intp)
    continuous = np.zeros(m, dtype=bool)
    threshold = np.full(m, float(TREE_UNDEFINED))
    first = np.zeros(m, dtype=np.intp)
    n_children = np.zeros(m, dtype=np.intp)
    unknown = np.full(m, -1, dtype=np.intp)
    children: list[int] = []
    shares: list[float] = []
    lookup: dict[int, np.ndarray] = {}
    for i, node in enumerate(order):
        first[i] = len(children)
        if node.split is None:
            continue
        split = node.split
        feature[i] = position[split.feature]
        n_children[i] = len(node.children)
        children.extend(index[id(c)] for c in node.children)
        node_shares = list(node.shares) + [0.0] * (len(node.children) - len(node.shares))
        shares.extend(node_shares[: len(node.children)])
        if node.unknown_branch is not None:
            unknown[i] = node.unknown_branch
        if split.kind == CONTINUOUS:
            continuous[i] = True
            assert split.threshold is not None
            threshold[i] = split.threshold
            continue
        assert split.groups is not None
        code = {v: c for c, v in enumerate(domains[split.feature])}
        table = np.full(len(code) + 1, -1, dtype=np.intp)  # the last slot: an unknown code
        for branch, group in enumerate(split.groups):
            for v in group:
                if v in code:
                    table[code[v]] = branch
        lookup[i] = table
    return FlatTree(
        feature=feature,
        continuous=continuous,
        threshold=threshold,
        first_child=first,
        n_children=n_children,
        children=np.asarray(children, dtype=np.intp),
        shares=np.asarray(shares, dtype=np.float64),
        unknown=unknown,
        proba=np.asarray([n.proba for n in order], dtype=np.float64).reshape(m, k),
        counts=np.asarray([n.counts for n in order], dtype=np.float64).reshape(m, k),
        lookup=lookup,
        values=(
            np.asarray([n.value for n in order], dtype=np.float64)
            if all(n.value is not None for n in order) else None
        ),
    )


def _branches(t: FlatTree, x: np.ndarray, rows: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """The branch each (row, node) pair takes, -1 where the row's value is unknown there."""
    values = x[rows, t.feature[nodes]]
    branch = np.full(len(rows), -1, dtype=np.intp)
    cont = t.continuous[nodes]
    v = values[cont]
    known = ~np.isnan(v)
    b = np.where(v <= t.threshold[nodes[cont]], 0, 1)
    branch[cont] = np.where(known, b, -1)
    if t.lookup:
        nominal = np.flatnonzero(~cont)
        for node in np.unique(nodes[nominal]):
            at = nominal[nodes[nominal] == node]
            codes = values[at]
            table = t.lookup[int(node)]
            slot = np.where(np.isnan(codes), len(table) - 1, codes).astype(np.intp)
            slot[(slot < 0) | (slot >= len(table))] = len(table) - 1
            branch[at] = table[slot]
    return branch


def _descend(
    t: FlatTree, x: np.ndarray, spread: bool
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The (rows, nodes, weights) at each step down the tree, from the root.

    A row whose value is unknown at a test without an unknown branch goes down every branch
    with a positive share, its weight times the share (``spread``), or only down the branch
    of the largest share.
    """
    rows = np.arange(len(x))
    nodes = np.zeros(len(x), dtype=np.intp)
    weights = np.ones(len(x))
    while len(rows):
        yield rows, nodes, weights
        inner = t.n_children[nodes] > 0
        rows, nodes, weights = rows[inner], nodes[inner], weights[inner]
        if not len(rows):
            return
        branch = _branches(t, x, rows, nodes)
        missing = branch < 0
        branch[missing] = t.unknown[nodes[missing]]
        loose = np.flatnonzero(branch < 0)
        if not spread:
            for j in loose:
                start = t.first_child[nodes[j]]
                branch[j] = int(np.argmax(t.shares[start : start + t.n_children[nodes[j]]]))
            loose = loose[:0]
        fixed = branch >= 0
        next_rows = [rows[fixed]]
        next_nodes = [t.children[t.first_child[nodes[fixed]] + branch[fixed]]]
        next_weights = [weights[fixed]]
        for j in loose:
            start = t.first_child[nodes[j]]
            for b in range(start, start + t.n_children[nodes[j]]):
                if t.shares[b] > 0:
                    next_rows.append(rows[j : j + 1])
                    next_nodes.append(t.children[b : b + 1])
                    next_weights.append(weights[j : j + 1] * t.shares[b])
        rows = np.concatenate(next_rows)
        nodes = np.concatenate(next_nodes)
        weights = np.concatenate(next_weights)


def walk(
    t: FlatTree, x: np.ndarray, spread: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (row, leaf, weight) a matrix of encoded rows reaches (see ``_descend``)."""
    found = []
    for rows, nodes, weights in _descend(t, x, spread):
        leaf = t.n_children[nodes] == 0
        found.append((rows[leaf], nodes[leaf], weights[leaf]))
    return tuple(np.concatenate(parts) for parts in zip(*found))  # type: ignore[return-value]


def predict_proba(t: FlatTree, x: np.ndarray) -> np.ndarray:
    """Class probabilities per row, as ``Model.predict_proba_row`` gives them."""
    rows, nodes, weights = walk(t, x)
    k = t.proba.shape[1]
    out = np.zeros((len(x), k))
    for c in range(k):
        out[:, c] = np.bincount(rows, weights=weights * t.proba[nodes, c], minlength=len(x))
    return out


def predict_value(t: FlatTree, x: np.ndarray) -> np.ndarray:
    """A regression tree's prediction per row: the value of the leaf it reaches (of the
    leaves it reaches, weighted by their shares, where a test spreads it)."""
    assert t.values is not None
    rows, nodes, weights = walk(t, x)
    return np.bincount(rows, weights=weights * t.values[nodes], minlength=len(x))


def decision_path(t: FlatTree, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (row, node) pairs of every node each row passes through on its way to the leaf
    ``walk(..., spread=False)`` takes it to, rows in order."""
    rows, nodes = [], []
    for r, n, _ in _descend(t, x, spread=False):
        rows.append(r)
        nodes.append(n)
    all_rows, all_nodes = np.concatenate(rows), np.concatenate(nodes)
    order = np.lexsort((all_nodes, all_rows))
    return all_rows[order], all_nodes[order]


def best_class(proba: np.ndarray) -> np.ndarray:
    """The first class within ``PROBA_TIE`` of the most probable, as the compiled SQL picks."""
    return np.argmax(proba >= proba.max(axis=1, keepdims=True) - PROBA_TIE, axis=1)


def samples_per_node(t: FlatTree, x: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
    """Training rows (of positive weight) reaching each node; a row spread over branches
    counts in each of them."""
    if weight is not None:
        x = x[weight > 0]
    counts = np.zeros(t.node_count, dtype=np.intp)
    for _, nodes, _ in _descend(t, x, spread=True):
        counts += np.bincount(nodes, minlength=t.node_count)
    return counts


def impurities(t: FlatTree, criterion: str) -> np.ndarray:
    return np.asarray([node_impurity(list(c), criterion) for c in t.counts])


def feature_importances(t: FlatTree, imp: np.ndarray, n_features: int) -> np.ndarray:
    """Normalised total weighted impurity decrease per feature (scikit-learn's definition),
    for tests with any number of branches."""
    w = t.counts.sum(axis=1)
    out = np.zeros(n_features)
    for i in np.flatnonzero(t.n_children > 0):
        kids = t.children[t.first_child[i] : t.first_child[i] + t.n_children[i]]
        out[t.feature[i]] += w[i] * imp[i] - float(np.sum(w[kids] * imp[kids]))
    total = out.sum()
    return out / total if total > 0 else out


@dataclass
class TreeArrays:
    """scikit-learn's ``Tree`` layout: node ``i`` is entry ``i`` of each array.

    ``value`` holds class proportions, shaped ``(node_count, n_outputs, n_classes)`` as in
    scikit-learn >= 1.4. A nominal test (which scikit-learn's arrays cannot state: they test
    ``feature <= threshold`` only) has ``threshold`` NaN and the value codes that go left in
    ``left_codes``; scikit-learn's exporters print it as ``<= nan``, sqltree's own exporters
    print the values.
    """

    children_left: np.ndarray
    children_right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    value: np.ndarray
    impurity: np.ndarray
    n_node_samples: np.ndarray
    weighted_n_node_samples: np.ndarray
    missing_go_to_left: np.ndarray
    n_features: int
    left_codes: dict[int, set[int]] = field(default_factory=dict)
    tied: np.ndarray | None = None
    """Nodes whose split tied with another candidate (CART; for comparisons with
    scikit-learn, which breaks such ties at random)."""

    n_outputs: int = 1

    @property
    def n_classes(self) -> np.ndarray:
        return np.asarray([self.value.shape[2]], dtype=np.intp)

    @property
    def max_n_classes(self) -> int:
        return int(self.value.shape[2])

    @property
    def node_count(self) -> int:
        return len(self.children_left)

    @property
    def capacity(self) -> int:
        return self.node_count

    @property
    def n_leaves(self) -> int:
        return int(np.sum(self.children_left == TREE_LEAF))

    @property
    def max_depth(self) -> int:
        depth = np.zeros(self.node_count, dtype=int)
        for i in range(self.node_count):  # parents come before their children
            for c in (self.children_left[i], self.children_right[i]):
                if c != TREE_LEAF:
                    depth[c] = depth[i] + 1
        return int(depth.max())


def tree_arrays(
    t: FlatTree, imp: np.ndarray, n_samples: np.ndarray, n_features: int,
    tied: np.ndarray | None = None,
) -> TreeArrays | None:
    """``tree_`` for a binary tree; None when some test has more than two branches.
    ``value`` holds class proportions, or a regression tree's node values (one "class")."""
    if np.any(t.n_children > 2):
        return None
    m = t.node_count
    inner = t.n_children == 2
    left = np.full(m, TREE_LEAF, dtype=np.intp)
    right = np.full(m, TREE_LEAF, dtype=np.intp)
    left[inner] = t.children[t.first_child[inner]]
    right[inner] = t.children[t.first_child[inner] + 1]
    threshold = np.where(inner, t.threshold, float(TREE_UNDEFINED))
    threshold[inner & t.continuous & (threshold >= INFINITE_THRESHOLD)] = math.inf
    left_codes: dict[int, set[int]] = {}
    for i, table in t.lookup.items():
        left_codes[i] = {int(c) for c in np.flatnonzero(table[:-1] == 0)}
        threshold[i] = math.nan
    # Unknown values take one branch in scikit-learn; a C4.5 spread is shown as its largest.
    missing_left = np.zeros(m, dtype=np.uint8)
    for i in np.flatnonzero(inner):
        branch = t.unknown[i]
        if branch < 0:
            start = t.first_child[i]
            branch = int(np.argmax(t.shares[start : start + 2]))
        missing_left[i] = 1 if branch == 0 else 0
    return TreeArrays(
        children_left=left,
        children_right=right,
        feature=np.where(inner, t.feature, TREE_UNDEFINED).astype(np.intp),
        threshold=threshold,
        value=(t.proba if t.values is None else t.values).reshape(m, 1, -1).copy(),
        impurity=imp,
        n_node_samples=n_samples.astype(np.intp),
        weighted_n_node_samples=t.counts.sum(axis=1),
        missing_go_to_left=missing_left,
        n_features=n_features,
        left_codes=left_codes,
        tied=tied if tied is not None else np.zeros(m, dtype=bool),
    )
