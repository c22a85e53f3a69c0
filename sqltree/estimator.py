"""A scikit-learn style CART classifier that trains through DuckDB.

``DecisionTreeClassifier`` follows scikit-learn's estimator contract: parameters are stored by
``__init__``, all work happens in ``fit``, fitted state ends in ``_``. With scikit-learn
installed it subclasses ``BaseEstimator`` and ``ClassifierMixin`` (so ``get_params``,
``set_params``, ``clone``, ``Pipeline``, ``cross_val_score`` and ``score`` work); without it a
small stand-in gives the same methods. The training data is registered with DuckDB as a frame
and the tree is grown by SQL (``sqltree.cart``); prediction walks the fitted arrays in numpy.

scikit-learn converts inputs to float32 before growing and predicting; sqltree keeps float64.
The two give identical trees on data that float32 represents exactly.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .algorithms import cart, grow_and_prune
from .dataset import describe
from .engines.duckdb import DuckDBEngine
from .grower import GrowOptions
from .tree import CONTINUOUS, Node

TREE_LEAF = -1
TREE_UNDEFINED = -2

_TARGET = "__sqltree_target__"
_WEIGHT = "__sqltree_weight__"

try:  # scikit-learn is an optional extra
    from sklearn.base import BaseEstimator as _Base
    from sklearn.base import ClassifierMixin as _Mixin

    HAVE_SKLEARN = True
except ImportError:  # pragma: no cover - exercised only without the extra
    HAVE_SKLEARN = False

    class _Base:  # type: ignore[no-redef]
        """``get_params``/``set_params`` for estimators when scikit-learn is absent."""

        @classmethod
        def _get_param_names(cls) -> list[str]:
            sig = inspect.signature(cls.__init__)
            return sorted(p for p in sig.parameters if p != "self")

        def get_params(self, deep: bool = True) -> dict[str, Any]:
            return {name: getattr(self, name) for name in self._get_param_names()}

        def set_params(self, **params: Any) -> Any:
            for name, value in params.items():
                if name not in self._get_param_names():
                    raise ValueError(f"invalid parameter {name!r}")
                setattr(self, name, value)
            return self

    class _Mixin:  # type: ignore[no-redef]
        _estimator_type = "classifier"

        def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
            pred = self.predict(X)  # type: ignore[attr-defined]
            ok = np.asarray(pred) == np.asarray(y)
            return float(np.average(ok, weights=sample_weight))


@dataclass
class TreeArrays:
    """scikit-learn's parallel-array tree (``tree_``): node ``i`` is column ``i`` of each array.

    ``value`` holds class proportions (scikit-learn >= 1.4). Nominal subset tests, which
    scikit-learn has no array form for, are kept in ``left_codes`` (node -> value codes that go
    left) with ``threshold`` set to NaN.
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
    left_codes: dict[int, set[int]]
    tied: np.ndarray

    @property
    def node_count(self) -> int:
        return len(self.children_left)

    @property
    def n_leaves(self) -> int:
        return int(np.sum(self.children_left == TREE_LEAF))

    @property
    def max_depth(self) -> int:
        depth = np.zeros(self.node_count, dtype=int)
        for i in range(self.node_count):
            for c in (self.children_left[i], self.children_right[i]):
                if c != TREE_LEAF:
                    depth[c] = depth[i] + 1
        return int(depth.max())


def to_arrays(
    root: Node,
    nodes: list[Node],
    feature_names: list[str],
    domains: dict[str, list[Any]] | None = None,
) -> TreeArrays:
    """Parallel arrays of a binary tree, in the numbering given by ``nodes``.

    Row counts, impurities and ties are those the nodes keep from growth (``Node``); a test
    that sends every finite value left has scikit-learn's infinite threshold.
    """
    index = {id(n): i for i, n in enumerate(nodes)}
    m = len(nodes)
    k = len(root.counts)
    left = np.full(m, TREE_LEAF, dtype=np.intp)
    right = np.full(m, TREE_LEAF, dtype=np.intp)
    feature = np.full(m, TREE_UNDEFINED, dtype=np.intp)
    threshold = np.full(m, float(TREE_UNDEFINED))
    value = np.zeros((m, 1, k))
    imp = np.zeros(m)
    n_samples = np.zeros(m, dtype=np.intp)
    weighted = np.zeros(m)
    missing_left = np.zeros(m, dtype=np.uint8)
    tied = np.zeros(m, dtype=bool)
    left_codes: dict[int, set[int]] = {}
    names = {name: i for i, name in enumerate(feature_names)}
    for i, node in enumerate(nodes):
        w = sum(node.counts)
        weighted[i] = w
        value[i, 0, :] = node.proba
        imp[i] = node.impurity or 0.0
        n_samples[i] = node.n_samples or 0
        tied[i] = node.tied
        if node.split is None:
            continue
        if len(node.children) != 2:
            raise ValueError("to_arrays needs a binary tree (CART)")
        left[i] = index[id(node.children[0])]
        right[i] = index[id(node.children[1])]
        feature[i] = names[node.split.feature]
        missing_left[i] = 1 if node.unknown_branch == 0 else 0
        if node.split.kind == CONTINUOUS:
            assert node.split.threshold is not None
            infinite = node.split.threshold >= cart.INFINITE_THRESHOLD
            threshold[i] = math.inf if infinite else node.split.threshold
        else:
            assert node.split.groups is not None
            domain = (domains or {}).get(node.split.feature, [])
            codes = {domain.index(v) for v in node.split.groups[0] if v in domain}
            left_codes[i] = codes
            threshold[i] = math.nan
    return TreeArrays(
        left,
        right,
        feature,
        threshold,
        value,
        imp,
        n_samples,
        weighted,
        missing_left,
        left_codes,
        tied,
    )


class DecisionTreeClassifier(_Mixin, _Base):  # type: ignore[misc,valid-type]
    """CART classifier with scikit-learn's parameters, trained by SQL on DuckDB.

    Parameters
    ----------
    criterion : {"gini", "entropy", "log_loss"}, default="gini"
    splitter : {"best"}, default="best"
        Only the exhaustive splitter exists.
    max_depth, min_samples_split, min_samples_leaf, min_weight_fraction_leaf, max_leaf_nodes,
    min_impurity_decrease, class_weight, ccp_alpha
        As in ``sklearn.tree.DecisionTreeClassifier``.
    max_features : None, default=None
        Every feature is considered at every node.
    random_state : ignored
        sqltree breaks ties deterministically (see ``sqltree.cart``).
    nominal : list of str, optional
        Columns to treat as nominal (binary subset splits); object, string, categorical and
        boolean columns of a DataFrame are nominal anyway.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> clf = DecisionTreeClassifier().fit(X, ["a", "a", "b", "b"])
    >>> clf.predict([[0.5], [2.5]]).tolist()
    ['a', 'b']
    """

    def __init__(
        self,
        *,
        criterion: str = "gini",
        splitter: str = "best",
        max_depth: int | None = None,
        min_samples_split: int | float = 2,
        min_samples_leaf: int | float = 1,
        min_weight_fraction_leaf: float = 0.0,
        max_features: Any = None,
        random_state: Any = None,
        max_leaf_nodes: int | None = None,
        min_impurity_decrease: float = 0.0,
        class_weight: Any = None,
        ccp_alpha: float = 0.0,
        nominal: list[str] | None = None,
    ) -> None:
        self.criterion = criterion
        self.splitter = splitter
        self.max_depth = max_depth
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_weight_fraction_leaf = min_weight_fraction_leaf
        self.max_features = max_features
        self.random_state = random_state
        self.max_leaf_nodes = max_leaf_nodes
        self.min_impurity_decrease = min_impurity_decrease
        self.class_weight = class_weight
        self.ccp_alpha = ccp_alpha
        self.nominal = nominal

    # -- fitting -------------------------------------------------------------------------------
    def _frame(self, X: Any, fitting: bool) -> Any:
        import pandas as pd

        if isinstance(X, pd.DataFrame):
            frame = X.copy()
            frame.columns = [str(c) for c in frame.columns]
            if fitting and all(isinstance(c, str) for c in X.columns):
                self.feature_names_in_ = np.asarray(frame.columns, dtype=object)
        else:
            arr = np.asarray(X)
            if arr.ndim != 2:
                raise ValueError(f"expected a 2-d array, got shape {arr.shape}")
            if arr.dtype.kind not in "biuf":
                arr = arr.astype(object)
            frame = pd.DataFrame(arr, columns=[f"x{i}" for i in range(arr.shape[1])])
            if arr.dtype.kind in "biu":
                frame = frame.astype(float)
        if fitting:
            self.n_features_in_ = frame.shape[1]
            if not isinstance(X, pd.DataFrame) and hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            self._columns = list(frame.columns)
        elif frame.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {frame.shape[1]} features, but the tree was fitted with "
                f"{self.n_features_in_}"
            )
        else:
            frame.columns = self._columns
        return frame

    def _nominal_columns(self, frame: Any) -> list[str]:
        out = [str(c) for c in (self.nominal or [])]
        for c in frame.columns:
            kind = frame[c].dtype.kind
            textual = kind in "OSUb" or str(frame[c].dtype) in ("category", "string", "str")
            if textual and c not in out:
                out.append(c)
        return out

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> DecisionTreeClassifier:
        """Grow the tree on (X, y) in DuckDB; returns the fitted estimator."""
        if self.splitter != "best":
            raise ValueError("only splitter='best' is supported")
        if self.max_features is not None:
            raise ValueError("only max_features=None is supported")
        frame = self._frame(X, fitting=True)
        y_arr = np.asarray(y)
        if y_arr.ndim != 1:
            y_arr = y_arr.ravel()
        if len(y_arr) != len(frame):
            raise ValueError(f"X has {len(frame)} rows but y has {len(y_arr)}")
        self.classes_, encoded = np.unique(y_arr, return_inverse=True)
        self.n_classes_ = len(self.classes_)
        if self.n_classes_ < 2:
            raise ValueError("y needs at least two classes")
        frame[_TARGET] = encoded.astype(np.int64)
        weight = None
        if sample_weight is not None:
            frame[_WEIGHT] = np.asarray(sample_weight, dtype=float)
            weight = _WEIGHT
        class_weight = self.class_weight
        if isinstance(class_weight, dict):
            lookup = {c: i for i, c in enumerate(self.classes_.tolist())}
            class_weight = {lookup[c]: w for c, w in class_weight.items() if c in lookup}
        nominal = self._nominal_columns(frame)
        features = list(self._columns)
        engine = DuckDBEngine()
        try:
            data = describe(
                frame,
                engine,
                _TARGET,
                features=features,
                nominal=nominal,
                weight=weight,
                continuous=[c for c in features if c not in nominal],
            )
            if len(data.classes) != self.n_classes_:
                raise ValueError("every class needs a positive weight")
            options = GrowOptions(
                algorithm="cart",
                criterion=self.criterion,
                max_depth=self.max_depth,
                min_samples_split=self.min_samples_split,
                min_samples_leaf=self.min_samples_leaf,
                min_weight_fraction_leaf=self.min_weight_fraction_leaf,
                min_impurity_decrease=self.min_impurity_decrease,
                max_leaf_nodes=self.max_leaf_nodes,
                class_weight=class_weight,
                ccp_alpha=self.ccp_alpha,
            )
            root, stats = grow_and_prune(data, options)
        finally:
            engine.cleanup()
            engine.connection.close()
        self.root_ = root
        self.grow_stats_ = stats
        self._nodes = cart.node_numbering(root, self.max_leaf_nodes, self.ccp_alpha)
        self._criterion = cart.criterion_of(self.criterion)
        self._domains = {f.name: list(f.values) for f in data.features if f.values}
        self.tree_ = to_arrays(root, self._nodes, list(self._columns), self._domains)
        return self

    def cost_complexity_pruning_path(
        self, X: Any, y: Any, sample_weight: Any = None
    ) -> dict[str, np.ndarray]:
        """Effective alphas and total leaf impurities, as scikit-learn's method returns them."""
        est = self._clone_params(ccp_alpha=0.0)
        est.fit(X, y, sample_weight=sample_weight)
        path = cart.cost_complexity_pruning_path(est.root_, est.criterion, est._nodes)
        return _bunch({k: np.asarray(v) for k, v in path.items()})

    def strategy_nodes(self, root: Node | None = None) -> list[Node]:
        """The fitted tree's nodes (or ``root``'s, grown by this fit) in scikit-learn's
        numbering, as ``cart.cost_complexity_pruning_path`` and ``cart.prune_ccp`` take them."""
        self._check_fitted()
        if root is None:
            return list(self._nodes)
        return cart.node_numbering(root, self.max_leaf_nodes, self.ccp_alpha)

    def _clone_params(self, **override: Any) -> DecisionTreeClassifier:
        params = self.get_params()
        params.update(override)
        return type(self)(**params)

    # -- prediction ----------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "tree_"):
            try:
                from sklearn.exceptions import NotFittedError
            except ImportError:  # pragma: no cover
                raise AttributeError("this DecisionTreeClassifier is not fitted yet") from None
            raise NotFittedError("this DecisionTreeClassifier is not fitted yet")

    def _matrix(self, X: Any) -> np.ndarray:
        """Features as float64: continuous values, nominal codes (NaN for unknown values)."""
        frame = self._frame(X, fitting=False)
        out = np.empty((len(frame), len(self._columns)))
        for j, c in enumerate(self._columns):
            domain = self._domains.get(c)
            if domain is not None:
                lookup = {v: i for i, v in enumerate(domain)}
                out[:, j] = [lookup.get(v, math.nan) for v in frame[c].tolist()]
            else:
                out[:, j] = np.asarray(frame[c], dtype=float)
        return out

    def apply(self, X: Any) -> np.ndarray:
        """Index of the leaf each row reaches."""
        self._check_fitted()
        t = self.tree_
        x = self._matrix(X)
        node = np.zeros(len(x), dtype=np.intp)
        rows = np.arange(len(x))
        while True:
            active = t.children_left[node] != TREE_LEAF
            if not active.any():
                return node
            r = rows[active]
            n = node[active]
            v = x[r, t.feature[n]]
            go_left = v <= t.threshold[n]
            for i, codes in t.left_codes.items():
                at = n == i
                if at.any():
                    go_left[at] = np.isin(v[at], list(codes))
            missing = np.isnan(v)
            go_left[missing] = t.missing_go_to_left[n[missing]] == 1
            node[active] = np.where(go_left, t.children_left[n], t.children_right[n])

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class proportions of the leaf each row reaches, columns in ``classes_`` order."""
        self._check_fitted()
        return self.tree_.value[self.apply(X), 0, :]

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class (ties to the first in ``classes_``)."""
        self._check_fitted()
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    @property
    def feature_importances_(self) -> np.ndarray:
        """Normalised total impurity decrease per feature (scikit-learn's Gini importance)."""
        self._check_fitted()
        t = self.tree_
        out = np.zeros(self.n_features_in_)
        w = t.weighted_n_node_samples
        for i in range(t.node_count):
            left, right = t.children_left[i], t.children_right[i]
            if left == TREE_LEAF:
                continue
            out[t.feature[i]] += (
                w[i] * t.impurity[i] - w[left] * t.impurity[left] - w[right] * t.impurity[right]
            )
        total = out.sum()
        return out / total if total > 0 else out

    def get_depth(self) -> int:
        self._check_fitted()
        return self.tree_.max_depth

    def get_n_leaves(self) -> int:
        self._check_fitted()
        return self.tree_.n_leaves

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The fitted tree as scikit-learn-style parallel arrays."""
        self._check_fitted()
        t = self.tree_
        return {
            "children_left": t.children_left,
            "children_right": t.children_right,
            "feature": t.feature,
            "threshold": t.threshold,
            "value": t.value,
            "impurity": t.impurity,
            "n_node_samples": t.n_node_samples,
            "weighted_n_node_samples": t.weighted_n_node_samples,
            "missing_go_to_left": t.missing_go_to_left,
        }

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags


def _bunch(d: dict[str, Any]) -> Any:
    try:
        from sklearn.utils import Bunch

        return Bunch(**d)
    except ImportError:  # pragma: no cover
        return d


# -- export ----------------------------------------------------------------------------------
def _names(clf: DecisionTreeClassifier, feature_names: Any) -> list[str]:
    if feature_names is not None:
        return [str(n) for n in feature_names]
    return [str(c) for c in clf._columns]


def _condition(
    clf: DecisionTreeClassifier, names: list[str], i: int, decimals: int
) -> tuple[str, str]:
    t = clf.tree_
    name = names[t.feature[i]]
    if i in t.left_codes:
        domain = clf._domains[clf._columns[t.feature[i]]]
        left = sorted(domain[c] for c in t.left_codes[i])
        text = ", ".join(str(v) for v in left)
        return f"{name} in {{{text}}}", f"{name} not in {{{text}}}"
    thr = t.threshold[i]
    return f"{name} <= {thr:.{decimals}f}", f"{name} >  {thr:.{decimals}f}"


def export_text(
    decision_tree: DecisionTreeClassifier,
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
    >>> clf = DecisionTreeClassifier().fit(np.array([[0.0], [1.0], [2.0]]), [0, 0, 1])
    >>> print(export_text(clf, feature_names=["x"]), end="")
    |--- x <= 1.50
    |   |--- class: 0
    |--- x >  1.50
    |   |--- class: 1
    """
    decision_tree._check_fitted()
    t = decision_tree.tree_
    names = _names(decision_tree, feature_names)
    classes = list(class_names) if class_names is not None else list(decision_tree.classes_)
    bar = "|" + " " * spacing
    right_lines: list[str] = []

    def leaf(i: int, indent: str) -> None:
        val = t.value[i, 0, :]
        text = ""
        if show_weights:
            weights = val * t.weighted_n_node_samples[i]
            text = "weights: [" + ", ".join(f"{w:.{decimals}f}" for w in weights) + "] "
        right_lines.append(f"{indent}|{'-' * spacing} {text}class: {classes[int(np.argmax(val))]}")

    def walk(i: int, depth: int) -> None:
        indent = bar * depth
        if t.children_left[i] == TREE_LEAF:
            leaf(i, indent)
            return
        if depth >= max_depth:
            sub = _subtree_depth(t, i)
            right_lines.append(f"{indent}|{'-' * spacing} truncated branch of depth {sub}")
            return
        yes, no = _condition(decision_tree, names, i, decimals)
        right_lines.append(f"{indent}|{'-' * spacing} {yes}")
        walk(int(t.children_left[i]), depth + 1)
        right_lines.append(f"{indent}|{'-' * spacing} {no}")
        walk(int(t.children_right[i]), depth + 1)

    walk(0, 0)
    return "\n".join(right_lines) + "\n"


def _subtree_depth(t: TreeArrays, i: int) -> int:
    if t.children_left[i] == TREE_LEAF:
        return 0
    return 1 + max(
        _subtree_depth(t, int(t.children_left[i])), _subtree_depth(t, int(t.children_right[i]))
    )


def export_graphviz(
    decision_tree: DecisionTreeClassifier,
    *,
    feature_names: Any = None,
    class_names: Any = None,
    precision: int = 3,
) -> str:
    """The tree in Graphviz DOT, with the node labels of ``sklearn.tree.export_graphviz``."""
    decision_tree._check_fitted()
    t = decision_tree.tree_
    names = _names(decision_tree, feature_names)
    classes = list(class_names) if class_names is not None else list(decision_tree.classes_)
    crit = decision_tree._criterion
    lines = [
        "digraph Tree {",
        'node [shape=box, fontname="helvetica"] ;',
        'edge [fontname="helvetica"] ;',
    ]
    for i in range(t.node_count):
        parts = []
        if t.children_left[i] != TREE_LEAF:
            parts.append(_condition(decision_tree, names, i, precision)[0])
        parts.append(f"{crit} = {round(float(t.impurity[i]), precision)}")
        parts.append(f"samples = {int(t.n_node_samples[i])}")
        value = [round(float(v), precision) for v in t.value[i, 0, :]]
        parts.append(f"value = {value}")
        parts.append(f"class = {classes[int(np.argmax(t.value[i, 0, :]))]}")
        label = "\\n".join(parts).replace('"', '\\"')
        lines.append(f'{i} [label="{label}"] ;')
        for child, head in ((t.children_left[i], "True"), (t.children_right[i], "False")):
            if child == TREE_LEAF:
                continue
            extra = ""
            if i == 0:
                angle = 45 if head == "True" else -45
                extra = f' [labeldistance=2.5, labelangle={angle}, headlabel="{head}"]'
            lines.append(f"{i} -> {int(child)}{extra} ;")
    lines.append("}")
    return "\n".join(lines) + "\n"
