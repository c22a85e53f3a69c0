"""One tree of an ensemble as flat arrays, laid out as scikit-learn's ``Tree``.

Node 0 is the root; ``left[i]``/``right[i]`` are -1 at a leaf. A numeric test sends a row left
when ``value <= threshold``; a categorical test (``categories[i]``) sends the listed values left
and every other value, seen in training or not, right. NULL (and NaN, which the importers read
as missing) goes left where ``missing_left[i]``. Each importer turns its library's comparison
(``<`` on float32, LightGBM's zero-as-missing) into this one rule, so the compiler and the numpy
walk know a single rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ModelFileError

TREE_LEAF = -1


@dataclass
class TreeArrays:
    """One binary tree as parallel arrays (see the module docstring for the routing rule).

    Attributes
    ----------
    feature : ndarray of int32, shape (n_nodes,)
        Index into ``Ensemble.features``; -1 at leaves.
    threshold : ndarray of float64
        A numeric test's threshold (a row goes left when ``value <= threshold``).
    left, right : ndarray of int32
        Children; -1 at leaves.
    missing_left : ndarray of bool
        Where NULL/NaN goes: left when True.
    value : ndarray of float64, shape (n_nodes, n_values)
        A leaf's output (internal nodes may hold their node value).
    weight : ndarray of float64
        Training weight (or hessian sum) reaching each node.
    gain : ndarray of float64
        The split's impurity decrease or gain; 0 at leaves.
    categories : dict of int to tuple
        Categorical tests: node -> the values that go left.
    output : int or None
        The output column this tree adds to (multiclass boosting: ``value`` has one column);
        None: ``value`` has a column per output.
    """

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    missing_left: np.ndarray
    value: np.ndarray
    weight: np.ndarray
    gain: np.ndarray
    categories: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    output: int | None = None

    def __post_init__(self) -> None:
        self.feature = np.asarray(self.feature, dtype=np.int32)
        self.threshold = np.asarray(self.threshold, dtype=np.float64)
        self.left = np.asarray(self.left, dtype=np.int32)
        self.right = np.asarray(self.right, dtype=np.int32)
        self.missing_left = np.asarray(self.missing_left, dtype=bool)
        value = np.asarray(self.value, dtype=np.float64)
        self.value = value.reshape(-1, 1) if value.ndim == 1 else value
        self.weight = np.asarray(self.weight, dtype=np.float64)
        self.gain = np.asarray(self.gain, dtype=np.float64)
        self.categories = {int(k): tuple(v) for k, v in self.categories.items()}

    @property
    def n_nodes(self) -> int:
        return int(self.feature.shape[0])

    @property
    def is_leaf(self) -> np.ndarray:
        return self.left == TREE_LEAF

    @property
    def n_leaves(self) -> int:
        return int(self.is_leaf.sum())

    @property
    def depth(self) -> int:
        deepest = 0
        stack = [(0, 0)]
        while stack:
            node, d = stack.pop()
            deepest = max(deepest, d)
            if self.left[node] != TREE_LEAF:
                stack += [(int(self.left[node]), d + 1), (int(self.right[node]), d + 1)]
        return deepest

    def validate(self, n_features: int | None = None, n_values: int | None = None) -> None:
        """Raise ``ModelFileError`` unless the arrays make one binary tree rooted at node 0.

        Checked: equal lengths; leaves are leaves in every array; children in range, and
        each node but the root the child of exactly one node and reached from the root (so a
        walk ends); features in range; finite thresholds and values;
        categorical tests only at internal nodes; ``output`` with a one-column ``value``.
        """
        n = self.n_nodes
        if n == 0:
            raise ModelFileError("a tree has at least a root")
        for name in ("threshold", "left", "right", "missing_left", "weight", "gain"):
            if getattr(self, name).shape != (n,):
                raise ModelFileError(f"{name} has shape {getattr(self, name).shape}; "
                                     f"expected ({n},)")
        if self.value.ndim != 2 or self.value.shape[0] != n or self.value.shape[1] == 0:
            raise ModelFileError(f"value has shape {self.value.shape}; expected ({n}, k)")
        if n_values is not None and self.value.shape[1] != n_values:
            raise ModelFileError(f"value has {self.value.shape[1]} columns; expected {n_values}")
        if self.output is not None and self.value.shape[1] != 1:
            raise ModelFileError("a tree that adds to one output has one value column")
        leaf = self.is_leaf
        if not np.array_equal(leaf, self.right == TREE_LEAF):
            raise ModelFileError("left and right disagree on which nodes are leaves")
        if np.any(self.feature[leaf] != TREE_LEAF):
            raise ModelFileError("a leaf has a feature")
        inner = np.flatnonzero(~leaf)
        if n_features is not None and np.any(
                (self.feature[inner] < 0) | (self.feature[inner] >= n_features)):
            raise ModelFileError(f"a test's feature is out of range (0..{n_features - 1})")
        children = np.concatenate([self.left[inner], self.right[inner]])
        if np.any((children <= 0) | (children >= n)):
            raise ModelFileError(f"a child is out of range (1..{n - 1})")
        if np.unique(children).size != children.size or children.size != n - 1:
            raise ModelFileError("every node but the root is the child of exactly one node")
        reached = np.zeros(n, dtype=bool)
        stack = [0]
        while stack:  # n - 1 distinct children and no parent twice: a cycle is unreached
            i = stack.pop()
            reached[i] = True
            if not leaf[i]:
                stack += [int(self.left[i]), int(self.right[i])]
        if not reached.all():
            raise ModelFileError(f"node {int(np.argmin(reached))} is not reached from the root")
        if not np.all(np.isfinite(self.threshold[inner])):
            raise ModelFileError("a threshold is not a finite number")
        if not np.all(np.isfinite(self.value[leaf])):
            raise ModelFileError("a leaf value is not a finite number")
        for node, values in self.categories.items():
            if not 0 <= node < n or leaf[node]:
                raise ModelFileError(f"categorical test at node {node}, which is not a test")
            if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                       for v in values):
                raise ModelFileError(f"node {node}: categories are numbers or text")

    # -- files -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        inner = ~self.is_leaf
        return {
            "feature": self.feature.tolist(),
            # a leaf's threshold means nothing, and libraries store -2 or NaN there
            "threshold": np.where(inner, self.threshold, 0.0).tolist(),
            "left": self.left.tolist(),
            "right": self.right.tolist(),
            "missing_left": self.missing_left.tolist(),
            "value": [[_finite(v) for v in row] for row in self.value.tolist()],
            "weight": [_finite(v) for v in self.weight.tolist()],
            "gain": [_finite(v) for v in self.gain.tolist()],
            "categories": {str(k): list(v) for k, v in sorted(self.categories.items())},
            "output": self.output,
        }

    @classmethod
    def from_dict(cls, data: Any) -> TreeArrays:
        if not isinstance(data, dict):
            raise ModelFileError("a tree is an object of arrays")
        missing = [k for k in ("feature", "threshold", "left", "right", "missing_left",
                               "value") if k not in data]
        if missing:
            raise ModelFileError(f"a tree is missing {missing}")
        n = len(data["feature"]) if isinstance(data["feature"], list) else 0
        cats = data.get("categories", {})
        output = data.get("output")
        if not isinstance(cats, dict) or not (output is None or (
                isinstance(output, int) and not isinstance(output, bool) and output >= 0)):
            raise ModelFileError("categories is an object and output a whole number or null")
        try:
            return cls(
                feature=data["feature"], threshold=data["threshold"], left=data["left"],
                right=data["right"], missing_left=data["missing_left"], value=data["value"],
                weight=data.get("weight", [0.0] * n), gain=data.get("gain", [0.0] * n),
                categories={int(k): tuple(v) for k, v in cats.items()}, output=output,
            )
        except (TypeError, ValueError) as e:
            raise ModelFileError(f"a tree's arrays are not arrays of numbers: {e}") from None

    # -- prediction in numpy -----------------------------------------------------------------
    def apply(self, columns: list[np.ndarray], missing: list[np.ndarray]) -> np.ndarray:
        """The leaf each row reaches: ``columns[f]`` holds feature ``f``'s values (float64 for
        numeric features, objects for categorical ones) and ``missing[f]`` their NULL mask."""
        n_rows = len(columns[0]) if columns else 0
        node = np.zeros(n_rows, dtype=np.int32)
        active = np.flatnonzero(~self.is_leaf[node])
        while active.size:
            at = node[active]
            go_left = np.empty(active.size, dtype=bool)
            for f in np.unique(self.feature[at]):
                sel = self.feature[at] == f
                rows = active[sel]
                nodes = at[sel]
                miss = missing[f][rows]
                vals = columns[f][rows]
                left = np.empty(rows.size, dtype=bool)
                cat_nodes = np.array([n in self.categories for n in nodes], dtype=bool)
                num = ~cat_nodes & ~miss
                if num.any():
                    left[num] = vals[num].astype(np.float64) <= self.threshold[nodes[num]]
                for j in np.flatnonzero(cat_nodes & ~miss):
                    left[j] = vals[j] in self.categories[int(nodes[j])]
                left[miss] = self.missing_left[nodes[miss]]
                go_left[sel] = left
            node[active] = np.where(go_left, self.left[at], self.right[at])
            active = active[~self.is_leaf[node[active]]]
        return node


def _finite(x: float) -> float:
    if not math.isfinite(x):
        raise ModelFileError(f"{x} cannot be written to a model file")
    return x
