"""Ensembles from scikit-learn, LightGBM and XGBoost, exact to their own predictions.

Each importer turns its library's test into the one rule of ``TreeArrays`` (a row goes left
when ``value <= threshold``, compared in double; NULL goes left where ``missing_left``):

- scikit-learn's trees, forests and ``GradientBoosting*`` compare ``float32(x) <= t``: the
  threshold becomes the largest double ``d`` with ``x <= d`` exactly when
  ``float32(x) <= t`` (``float32_le``); ``HistGradientBoosting*`` compares doubles.
- XGBoost compares ``float32(x) < s`` (``s`` a float32): the same, below ``s``.
- LightGBM compares doubles with ``<=``; a missing value goes the default way, or, where the
  feature had no missing values in training (``missing_type`` None), is read as 0; with
  ``zero_as_missing`` (``missing_type`` Zero) NULL and every value within ``1e-35`` of 0 go
  the default way (``_zero_as_missing``).

Leaf values are stored as the library adds them (scikit-learn's gradient boosting adds
``learning_rate * value``, computed in double, here stored as that product), so that the
compiled sums add the same numbers in the same order. XGBoost adds in float32
(``precision="float32"``).

The libraries are optional extras, imported only when an importer runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..errors import UnsupportedError
from ..model import FeatureInfo
from ..tree import CONTINUOUS, NOMINAL
from .model import Ensemble
from .trees import TreeArrays

MAX32 = float(np.finfo(np.float32).max)


def _require(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UnsupportedError(
            f"this needs {module}, an optional extra: pip install -e '.[{extra}]' in a "
            f"checkout of sqltree (or pip install {module})") from None


# -- float32 comparisons -----------------------------------------------------------------------
def float32_le(t: float) -> float:
    """The largest double ``d`` such that, for every double ``x``, ``x <= d`` exactly when
    ``float32(x) <= t`` (rounding to nearest, ties to even)."""
    f = np.float32(t)
    if float(f) > t:
        f = np.nextafter(f, np.float32(-np.inf))
    if np.isinf(f):
        return -MAX32 if f < 0 else math.inf
    if float(f) == MAX32:
        return math.inf
    up = np.nextafter(f, np.float32(np.inf))
    mid = (float(f) + float(up)) / 2  # exact in double
    even = int(np.array(f, dtype=np.float32).view(np.uint32)) & 1 == 0
    return mid if even else math.nextafter(mid, -math.inf)


def float32_lt(s: float) -> float:
    """As ``float32_le``, for ``float32(x) < s`` with ``s`` a float32."""
    f = np.float32(s)
    return float32_le(float(np.nextafter(f, np.float32(-np.inf))))


def _clip(t: float) -> float:
    # a threshold above every double: the test sends every number left
    return min(t, float(np.finfo(np.float64).max))


# -- scikit-learn ------------------------------------------------------------------------------
def _sk_tree(tree: Any, leaf_values: np.ndarray, *, float32: bool = True,
             output: int | None = None) -> TreeArrays:
    left = tree.children_left.astype(np.int32)
    right = tree.children_right.astype(np.int32)
    inner = left >= 0
    threshold = np.where(inner, tree.threshold, 0.0)
    if float32:
        threshold = np.array([_clip(float32_le(t)) if i else 0.0
                              for t, i in zip(threshold, inner)])
    missing = getattr(tree, "missing_go_to_left", None)
    missing_left = (np.asarray(missing, dtype=bool) if missing is not None
                    else np.zeros(len(left), dtype=bool))
    return TreeArrays(
        feature=np.where(inner, tree.feature, -1), threshold=threshold, left=left, right=right,
        missing_left=missing_left & inner, value=leaf_values,
        weight=tree.weighted_n_node_samples, gain=_sk_gain(tree), output=output)


def _sk_gain(tree: Any) -> np.ndarray:
    gain = np.zeros(tree.node_count)
    w = tree.weighted_n_node_samples
    for i in range(tree.node_count):
        lc, rc = tree.children_left[i], tree.children_right[i]
        if lc >= 0:
            gain[i] = (w[i] * tree.impurity[i] - w[lc] * tree.impurity[lc]
                       - w[rc] * tree.impurity[rc])
    return gain


def _renamed(names: list[str], given: list[str] | None) -> list[str]:
    if given is None:
        return names
    if len(given) != len(names):
        raise UnsupportedError(f"{len(given)} feature names for a model of {len(names)}")
    return [str(g) for g in given]


def _names(estimator: Any, feature_names: list[str] | None) -> list[str]:
    n = int(estimator.n_features_in_)
    if feature_names is not None:
        if len(feature_names) != n:
            raise UnsupportedError(f"{len(feature_names)} feature names for {n} features")
        return list(feature_names)
    names = getattr(estimator, "feature_names_in_", None)
    return [str(x) for x in names] if names is not None else [f"x{i}" for i in range(n)]


def _continuous(names: list[str], nominal: set[int] = frozenset()) -> list[FeatureInfo]:  # type: ignore[assignment]
    return [FeatureInfo(name=n, kind=NOMINAL if i in nominal else CONTINUOUS,
                        sql_type="BIGINT" if i in nominal else "DOUBLE")
            for i, n in enumerate(names)]


def _classes(estimator: Any) -> list[Any]:
    return [c.item() if hasattr(c, "item") else c for c in estimator.classes_]


def from_sklearn(estimator: Any, feature_names: list[str] | None = None) -> Ensemble:
    """An ``Ensemble`` equal to a fitted scikit-learn tree model.

    ``DecisionTreeClassifier/Regressor``, ``RandomForest*``, ``ExtraTrees*``,
    ``GradientBoosting*`` and ``HistGradientBoosting*`` (single output). Feature names are
    the estimator's ``feature_names_in_``, or ``feature_names``, or ``x0``, ``x1``, ...
    """
    _require("sklearn", "sklearn")
    kind = type(estimator).__name__
    names = _names(estimator, feature_names)
    options = {"source": f"scikit-learn {kind}"}
    if kind.startswith("HistGradientBoosting"):
        return _from_hist(estimator, names, options)
    if kind.startswith("GradientBoosting"):
        return _from_gb(estimator, names, options)
    classifier = hasattr(estimator, "classes_")
    trees = (list(estimator.estimators_) if hasattr(estimator, "estimators_")
             else [estimator])
    if not all(hasattr(t, "tree_") for t in trees):
        raise UnsupportedError(f"{kind} is not a scikit-learn tree, forest or boosting model")
    if getattr(trees[0].tree_, "n_outputs", 1) != 1:
        raise UnsupportedError("models of several outputs are not supported")
    out = []
    for t in trees:
        value = t.tree_.value[:, 0, :]
        if classifier:
            norm = value.sum(axis=1, keepdims=True)
            norm[norm == 0.0] = 1.0
            value = value / norm
        out.append(_sk_tree(t.tree_, value))
    return Ensemble(
        trees=out, features=_continuous(names), target="target",
        task="classification" if classifier else "regression",
        classes=_classes(estimator) if classifier else [], aggregation="mean",
        options=options)


def _from_gb(est: Any, names: list[str], options: dict[str, Any]) -> Ensemble:
    classifier = hasattr(est, "classes_")
    if est.init not in (None, "zero"):
        raise UnsupportedError("a GradientBoosting model with an init estimator: its start "
                               "differs by row; only the default (a constant) is supported")
    one = np.zeros((1, est.n_features_in_), dtype=np.float32)
    base = np.asarray(est._raw_predict_init(one), dtype=np.float64)[0]
    k = est.estimators_.shape[1]
    trees = []
    for stage in est.estimators_:
        for c, t in enumerate(stage):
            value = est.learning_rate * t.tree_.value[:, 0, :1]
            trees.append(_sk_tree(t.tree_, value, output=c if k > 1 or classifier else None))
    if classifier:
        link = "sigmoid" if len(est.classes_) == 2 else "softmax"
        if est.loss != "log_loss":
            raise UnsupportedError(f"loss {est.loss!r}: only log_loss has a link here")
    else:
        link = "identity"
    if not classifier:
        for t in trees:
            t.output = None
    return Ensemble(trees=trees, features=_continuous(names), target="target",
                    task="classification" if classifier else "regression",
                    classes=_classes(est) if classifier else [], aggregation="sum",
                    base_score=[float(b) for b in base], link=link, options=options)


HIST_LINKS = {"log_loss": None, "squared_error": "identity", "absolute_error": "identity",
              "quantile": "identity", "poisson": "exp", "gamma": "exp"}


def _from_hist(est: Any, names: list[str], options: dict[str, Any]) -> Ensemble:
    classifier = hasattr(est, "classes_")
    loss = est.loss if isinstance(est.loss, str) else type(est._loss).__name__
    if classifier:
        link = "sigmoid" if len(est.classes_) == 2 else "softmax"
    elif loss in HIST_LINKS:
        link = HIST_LINKS[loss] or "identity"
    else:
        raise UnsupportedError(f"HistGradientBoosting loss {loss!r} is not supported")
    is_cat = getattr(est, "is_categorical_", None)
    nominal = set(np.flatnonzero(is_cat).tolist()) if is_cat is not None else set()
    column_of, seen = _hist_columns(est)
    base = np.asarray(est._baseline_prediction, dtype=np.float64).ravel()
    multi = classifier and len(est.classes_) > 2
    trees = []
    for iteration in est._predictors:
        for c, pred in enumerate(iteration):
            nodes = pred.nodes
            leaf = nodes["is_leaf"].astype(bool)
            left = np.where(leaf, -1, nodes["left"].astype(np.int64))
            right = np.where(leaf, -1, nodes["right"].astype(np.int64))
            feature = np.where(leaf, -1, column_of[nodes["feature_idx"]])
            missing_left = nodes["missing_go_to_left"].astype(bool) & ~leaf
            cats = {}
            for i in np.flatnonzero(nodes["is_categorical"].astype(bool) & ~leaf):
                # the bitset holds the encoder's codes; a category it never saw is read as
                # missing: where those go left, list the known ones going right and swap
                words = pred.raw_left_cat_bitsets[nodes["bitset_idx"][i]]
                known = seen[int(feature[i])]
                going_left = [known[b] for b in range(min(32 * len(words), len(known)))
                              if (int(words[b // 32]) >> (b % 32)) & 1]
                if missing_left[i]:
                    left[i], right[i] = right[i], left[i]
                    going_left = [v for v in known if v not in going_left]
                    missing_left[i] = False
                cats[int(i)] = tuple(_plain(v) for v in going_left)
            trees.append(TreeArrays(
                feature=feature,
                threshold=np.where(leaf, 0.0, nodes["num_threshold"]),
                left=left, right=right,
                missing_left=missing_left,
                value=nodes["value"].reshape(-1, 1), weight=nodes["count"].astype(float),
                gain=np.where(leaf, 0.0, nodes["gain"]), categories=cats,
                output=c if multi else None))
    return Ensemble(trees=trees, features=_continuous(names, nominal), target="target",
                    task="classification" if classifier else "regression",
                    classes=_classes(est) if classifier else [], aggregation="sum",
                    base_score=[float(b) for b in base], link=link, options=options)


def _hist_columns(est: Any) -> tuple[np.ndarray, dict[int, list[Any]]]:
    """The input column of each column the trees see (categorical ones come first once
    encoded), and each categorical column's categories in code order."""
    n = int(est.n_features_in_)
    pre = getattr(est, "_preprocessor", None)
    if pre is None:
        return np.arange(n), {}
    order: list[int] = []
    seen: dict[int, list[Any]] = {}
    for name, transformer, cols in pre.transformers_:
        if name == "remainder" and transformer == "drop":
            continue
        idx = np.arange(n)[cols] if np.asarray(cols).dtype == bool else np.asarray(cols)
        if name == "encoder":
            for j, cats in zip(idx, transformer.categories_):
                seen[int(j)] = [v for v in cats.tolist() if not _is_nan(v)]
        order += [int(j) for j in idx]
    return np.asarray(order), seen


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _plain(v: Any) -> Any:
    v = v.item() if hasattr(v, "item") else v
    return int(v) if isinstance(v, float) and v.is_integer() else v


# -- LightGBM ----------------------------------------------------------------------------------
def from_lightgbm(booster_or_model: Any, feature_names: list[str] | None = None) -> Ensemble:
    """An ``Ensemble`` equal to a LightGBM model: a ``Booster``, an ``LGBMModel``, or a model
    file's text (``Booster.model_to_string``).

    LightGBM stores column names with spaces and some punctuation replaced (``b b`` becomes
    ``b_b``); ``feature_names`` gives the table's names, in the model's order.
    """
    lgb = _require("lightgbm", "lightgbm")
    model = booster_or_model
    classes: list[Any] | None = None
    if isinstance(model, str):
        model = lgb.Booster(model_str=model)
    elif hasattr(model, "booster_"):
        classes = _classes(model) if hasattr(model, "classes_") else None
        model = model.booster_
    dump = model.dump_model()
    objective = str(dump.get("objective", "regression")).split()
    name = objective[0]
    params = dict(p.split(":", 1) for p in objective[1:] if ":" in p)
    k = int(dump.get("num_tree_per_iteration", 1))
    if name in ("binary", "cross_entropy"):
        if float(params.get("sigmoid", 1)) != 1.0:
            raise UnsupportedError("a binary LightGBM model with sigmoid != 1 is not supported")
        link, task, n_classes = "sigmoid", "classification", 2
    elif name in ("multiclass", "softmax"):
        link, task, n_classes = "softmax", "classification", k
    elif name in ("poisson", "gamma", "tweedie"):
        link, task, n_classes = "exp", "regression", 0
    elif name in ("regression", "regression_l1", "huber", "fair", "quantile", "mape"):
        link, task, n_classes = "identity", "regression", 0
    else:
        raise UnsupportedError(f"LightGBM objective {name!r} is not supported")
    if classes is None:
        classes = list(range(n_classes)) if task == "classification" else []
    names = _renamed(list(dump["feature_names"]), feature_names)
    nominal: set[int] = set()
    trees = []
    for i, info in enumerate(dump["tree_info"]):
        trees.append(_lgb_tree(info["tree_structure"], nominal,
                               output=i % k if k > 1 else None))
    return Ensemble(trees=trees, features=_continuous(names, nominal), target="target",
                    task=task, classes=classes, aggregation="sum",
                    base_score=[0.0] * (k if k > 1 else 1), link=link,
                    options={"source": "LightGBM", "objective": " ".join(objective)})


def _lgb_tree(root: dict[str, Any], nominal: set[int], output: int | None) -> TreeArrays:
    rows: list[dict[str, Any]] = []
    cats: dict[int, tuple[Any, ...]] = {}

    def test(f: int, t: float, miss: bool, left: Callable[[], int], right: Callable[[], int],
             w: float = 0.0, g: float = 0.0) -> int:
        i = len(rows)
        rows.append({})
        lo, hi = left(), right()
        rows[i] = {"f": f, "t": t, "l": lo, "r": hi, "m": miss, "v": 0.0, "w": w, "g": g}
        return i

    def add(node: dict[str, Any]) -> int:
        if "leaf_value" in node and "split_feature" not in node:
            rows.append({"f": -1, "t": 0.0, "l": -1, "r": -1, "m": False,
                         "v": float(node["leaf_value"]), "w": float(node.get("leaf_count", 0)),
                         "g": 0.0})
            return len(rows) - 1
        f = int(node["split_feature"])
        kind = node.get("missing_type", "None")
        w, g = float(node.get("internal_count", 0)), float(node.get("split_gain", 0))
        # each child's subtree, added where a test takes it (zero_as_missing may take it twice)
        left, right = partial(add, node["left_child"]), partial(add, node["right_child"])
        if node["decision_type"] == "==":
            nominal.add(f)
            i = test(f, 0.0, False, left, right, w, g)  # NaN and negative values go right
            cats[i] = tuple(int(c) for c in str(node["threshold"]).split("||"))
            return i
        t = float(node["threshold"])
        if kind == "NaN":
            return test(f, t, bool(node["default_left"]), left, right, w, g)
        if kind == "None":
            return test(f, t, t >= 0.0, left, right, w, g)
        return _zero_as_missing(f, t, bool(node["default_left"]), test, left, right, w, g)

    add(root)
    return TreeArrays(
        feature=[r["f"] for r in rows], threshold=[r["t"] for r in rows],
        left=[r["l"] for r in rows], right=[r["r"] for r in rows],
        missing_left=[r["m"] for r in rows], value=[r["v"] for r in rows],
        weight=[r["w"] for r in rows], gain=[r["g"] for r in rows], categories=cats,
        output=output)


ZERO_THRESHOLD = float(np.float32(1e-35))
"""LightGBM's ``kZeroThreshold`` (a float literal ``1e-35f`` read as a double): with
``zero_as_missing`` a value within it of 0, or NULL (read as 0), is missing."""


def _zero_as_missing(f: int, t: float, default_left: bool, test: Any,
                     left: Callable[[], int], right: Callable[[], int], w: float, g: float
                     ) -> int:
    """LightGBM's test of ``missing_type`` Zero as ``value <= threshold`` tests: a value in
    [-z, z] (z = ``ZERO_THRESHOLD``) or NULL goes the default way, any other ``x <= t`` left.
    Where the band and NULL go the way ``x <= t`` sends them it is one test; else the band is
    cut out by two more, and a subtree is written twice."""
    z = ZERO_THRESHOLD
    below = float(np.nextafter(-z, -np.inf))  # x <= below: x < -z
    if default_left:
        if t >= z:
            return test(f, t, True, left, right, w, g)
        if t >= -z:  # x <= t or in the band: x <= z
            return test(f, z, True, left, right, w, g)
        return test(f, t, True, left, lambda: test(  # t < -z: the band is right of t
            f, below, False, right, lambda: test(f, z, True, left, right, w), w), w, g)
    if t < -z:
        return test(f, t, False, left, right, w, g)
    if t < z:  # x <= t and not in the band: x < -z
        return test(f, below, False, left, right, w, g)
    return test(f, below, False, left, lambda: test(  # t >= z: the band is left of t
        f, z, True, right, lambda: test(f, t, False, left, right, w), w), w, g)


# -- XGBoost -----------------------------------------------------------------------------------
def from_xgboost(booster_or_model: Any, feature_names: list[str] | None = None) -> Ensemble:
    """An ``Ensemble`` equal to an XGBoost model (gbtree): a ``Booster``, an ``XGBModel``, or
    the text of a JSON model file (``Booster.save_model("model.json")``); ``feature_names``
    replaces the model's own (``f0``, ``f1``, ... when it was trained without names)."""
    classes: list[Any] | None = None
    model = booster_or_model
    if isinstance(model, (str, bytes, bytearray)):
        data = json.loads(model)
    else:
        _require("xgboost", "xgboost")
        if hasattr(model, "get_booster"):
            if hasattr(model, "classes_"):
                classes = _classes(model)
            model = model.get_booster()
        data = json.loads(bytes(model.save_raw(raw_format="json")))
    learner = data["learner"]
    name = learner["objective"]["name"]
    booster = learner["gradient_booster"]
    if booster.get("name") != "gbtree":
        raise UnsupportedError(f"XGBoost booster {booster.get('name')!r}: only gbtree")
    gbm = booster["model"]
    base = _xgb_floats(learner["learner_model_param"]["base_score"])
    k = max(int(learner["learner_model_param"].get("num_class", "0")), 1)
    if name in ("binary:logistic", "binary:logitraw"):
        link = "sigmoid" if name == "binary:logistic" else "identity"
        task, n_classes = "classification", 2
        margin = [_logit32(b) for b in base[:1]]
        if name == "binary:logitraw":
            margin = base[:1]
    elif name in ("multi:softprob", "multi:softmax"):
        link, task, n_classes = "softmax", "classification", k
        margin = base if len(base) == k else base * k
    elif name.startswith("reg:") and name not in ("reg:logistic",):
        link, task, n_classes = "identity", "regression", 0
        margin = base[:1]
    elif name in ("count:poisson", "reg:gamma", "reg:tweedie"):
        link, task, n_classes = "exp", "regression", 0
        margin = [float(np.float32(np.log(np.float32(b)))) for b in base[:1]]
    else:
        raise UnsupportedError(f"XGBoost objective {name!r} is not supported")
    if name in ("count:poisson", "reg:gamma", "reg:tweedie"):
        pass
    elif task == "regression" and name != "reg:squarederror" and not name.startswith("reg:"):
        raise UnsupportedError(f"XGBoost objective {name!r} is not supported")
    if name == "binary:logitraw":
        task, link = "classification", "sigmoid"
        raise UnsupportedError("binary:logitraw gives margins, not probabilities")
    if classes is None:
        classes = list(range(n_classes)) if task == "classification" else []
    names = learner.get("feature_names") or [
        f"f{i}" for i in range(int(learner["learner_model_param"]["num_feature"]))]
    names = _renamed(list(names), feature_names)
    types = learner.get("feature_types") or []
    nominal = {i for i, t in enumerate(types) if t == "c"}
    info = gbm["tree_info"]
    trees = [_xgb_tree(t, output=int(info[i]) if k > 1 else None)
             for i, t in enumerate(gbm["trees"])]
    n_out = k if task == "classification" and n_classes > 2 else 1
    return Ensemble(trees=trees, features=_continuous(list(names), nominal), target="target",
                    task=task, classes=classes, aggregation="sum",
                    base_score=[float(m) for m in margin[:n_out]], link=link,
                    precision="float32", options={"source": "XGBoost", "objective": name})


def _xgb_floats(text: Any) -> list[float]:
    s = str(text).strip()
    if s.startswith("["):
        return [float(np.float32(float(x))) for x in s.strip("[]").split(",") if x.strip()]
    return [float(np.float32(float(s)))]


def _logit32(p: float) -> float:
    """XGBoost's ProbToMargin for the logistic objective, in float32."""
    f = np.float32
    x = f(f(1.0) / f(p)) - f(1.0)
    return float(f(-np.float32(np.log(np.float64(x)))))


def _xgb_tree(t: dict[str, Any], output: int | None) -> TreeArrays:
    left = np.asarray(t["left_children"], dtype=np.int32)
    right = np.asarray(t["right_children"], dtype=np.int32)
    leaf = left < 0
    cond = np.asarray(t["split_conditions"], dtype=np.float32).astype(np.float64)
    feature = np.where(leaf, -1, np.asarray(t["split_indices"], dtype=np.int64))
    threshold = np.array([0.0 if lf else _clip(float32_lt(c)) for c, lf in zip(cond, leaf)])
    cats: dict[int, tuple[Any, ...]] = {}
    nodes = t.get("categories_nodes", [])
    if nodes:
        segments, sizes, values = (t["categories_segments"], t["categories_sizes"],
                                   t["categories"])
        for node, seg, size in zip(nodes, segments, sizes):
            chosen = {int(v) for v in values[seg:seg + size]}
            # XGBoost sends the listed categories right: the others (seen in training) go left
            cats[int(node)] = tuple(sorted(chosen))
    tree = TreeArrays(
        feature=feature, threshold=threshold, left=np.where(leaf, -1, left),
        right=np.where(leaf, -1, right),
        missing_left=np.asarray(t["default_left"], dtype=bool) & ~leaf,
        value=np.where(leaf, cond, 0.0), weight=np.asarray(t.get("sum_hessian", [0.0] * len(left))),
        gain=np.where(leaf, 0.0, np.asarray(t.get("loss_changes", [0.0] * len(left)))),
        output=output)
    if cats:
        _xgb_categories(tree, cats)
    return tree


def _xgb_categories(tree: TreeArrays, listed: dict[int, tuple[int, ...]]) -> None:
    """XGBoost's categorical test sends the listed categories right and every other value
    left (NULL by the default direction): swap the children so the listed ones go left."""
    for node, values in listed.items():
        tree.left[node], tree.right[node] = tree.right[node], tree.left[node]
        tree.missing_left[node] = not tree.missing_left[node]
        tree.categories[node] = values
