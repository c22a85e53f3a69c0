"""CART: SQL criteria, subset splits, unknown values, pruning, and scikit-learn equivalence.

The equivalence tests grow the same tree as ``sklearn.tree.DecisionTreeClassifier`` on data
that float32 represents exactly (scikit-learn works in float32). Where two candidate splits
tie, scikit-learn picks one at random and sqltree the first feature; the oracle then looks for
a ``random_state`` whose choice matches, and otherwise accepts a difference below a tie only.
"""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np
import pandas as pd
import pytest
import sqlglot
from sqlglot import exp

import sqltree
from sqltree import fixed_point as fx
from sqltree import queries as q
from sqltree.algorithms import cart, grow
from sqltree.dataset import describe
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.grower import GrowOptions
from sqltree.pruning import best_first_numbering, cut_back, prune
from sqltree.tree import Node, Split
from tests.helpers import BUYS, DATA, WITHOUT_SPARK, read_csv
from tests.report import record

sklearn = pytest.importorskip("sklearn")
from sklearn import datasets  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.tree import DecisionTreeClassifier as SKTree  # noqa: E402

from sqltree.estimator import DecisionTreeClassifier  # noqa: E402
from tests.cart_oracle import compare_trees, same_arrays, sklearn_match  # noqa: E402

COMPARISON = "CART against scikit-learn's DecisionTreeClassifier"
COMPARISON_COLUMNS = ("data set", "settings", "tree", "held-out predictions")


def generated(n: int = 24000, seed: int = 7) -> tuple[pd.DataFrame, np.ndarray]:
    """A synthetic table; its nominal columns (color, shape) arrive as 0/1 indicators."""
    rng = np.random.default_rng(seed)
    a = np.round(rng.normal(0, 1, n), 3)
    b = np.round(rng.uniform(0, 100, n), 1)
    c = rng.integers(0, 50, n).astype(float)
    color = rng.choice(["red", "green", "blue"], n)
    shape = rng.choice(["circle", "square", "star", "moon"], n)
    score = (
        a + (b / 30) * (color == "red") - 1.5 * (shape == "star") + c / 25
        + rng.normal(0, 0.7, n)
    )
    y = np.digitize(score, [0.5, 2.0])
    X = pd.DataFrame({"a": a, "b": b, "c": c})
    for v in ("red", "green", "blue"):
        X[f"color_{v}"] = (color == v).astype(float)
    for v in ("circle", "square", "star", "moon"):
        X[f"shape_{v}"] = (shape == v).astype(float)
    return X.astype(np.float32).astype(np.float64), y


def bundled(name: str) -> tuple[np.ndarray, np.ndarray]:
    X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    return X.astype(np.float32).astype(np.float64), y


COMMON = [
    {"max_depth": 3},
    {"min_samples_leaf": 5},
    {"criterion": "entropy"},
    {"ccp_alpha": 0.01},
    {"max_leaf_nodes": 8},
    {"class_weight": "balanced", "max_depth": 4},
    {"min_weight_fraction_leaf": 0.02, "min_impurity_decrease": 0.005},
]
DIGITS = [
    {"max_depth": 3},
    {"criterion": "entropy", "min_samples_leaf": 5, "max_depth": 4},
    {"ccp_alpha": 0.02, "max_depth": 5},
    {"max_leaf_nodes": 8},
]
GENERATED = [
    {"max_depth": 4},
    {"max_depth": 8, "min_samples_leaf": 20},
    {"max_depth": 6, "criterion": "entropy"},
    {"ccp_alpha": 0.002, "max_depth": 10},
    {"max_leaf_nodes": 20},
]
CASES = (
    [(name, kw) for name in ("iris", "wine", "breast_cancer") for kw in COMMON]
    + [("digits", kw) for kw in DIGITS]
    + [("generated", kw) for kw in GENERATED]
)
_cache: dict[str, tuple] = {}


def split(name: str):
    if name not in _cache:
        X, y = generated() if name == "generated" else bundled(name)
        if name == "generated":
            _cache[name] = (X.iloc[:16000], X.iloc[16000:], y[:16000], y[16000:])
        else:
            _cache[name] = tuple(train_test_split(X, y, test_size=0.3, random_state=0))
    return _cache[name]


@pytest.mark.parametrize(("name", "params"), CASES, ids=[f"{n}-{p}" for n, p in CASES])
def test_same_tree_as_sklearn(name, params):
    X_train, X_test, y_train, _ = split(name)
    ours = DecisionTreeClassifier(**params).fit(X_train, y_train)
    verdict, seed = sklearn_match(
        lambda s: SKTree(random_state=s, **params), X_train, y_train, ours
    )
    theirs = SKTree(random_state=seed or 0, **params).fit(X_train, y_train)
    same_pred = bool(np.array_equal(theirs.predict(X_test), ours.predict(X_test)))
    row = (name, str(params), verdict, "yes" if same_pred else "no")
    record(COMPARISON, COMPARISON_COLUMNS, row)
    assert verdict in ("identical", "identical up to ties"), verdict
    if verdict == "identical":
        assert same_pred
        np.testing.assert_allclose(ours.predict_proba(X_test), theirs.predict_proba(X_test))


# -- criteria in SQL ---------------------------------------------------------------------------
def test_worked_example_income_gini(engine_factory):
    engine, source = engine_factory(read_csv(BUYS), "buys_computer")
    data = describe(source, engine, _last_column("buys_computer"))
    rows = [r for r in cart.split_scores(data, exhaustive=True) if r["feature"] == "income"]
    after = {frozenset(r["left"]) | frozenset(["|"]): r["impurity_after"] for r in rows}
    by_side = {}
    for r in rows:
        one = min(r["left"], r["right"], key=len)
        by_side[frozenset(one)] = r["impurity_after"]
    assert len(after) == 3
    assert by_side[frozenset(["high"])] == pytest.approx(0.442857142857, abs=1e-9)
    assert by_side[frozenset(["medium"])] == pytest.approx(0.458333333333, abs=1e-9)
    assert by_side[frozenset(["low"])] == pytest.approx(0.45, abs=1e-9)
    # The ordered scan (two classes, exact) finds the best one without enumerating.
    ordered = [r for r in cart.split_scores(data) if r["feature"] == "income"]
    best = min(ordered, key=lambda r: r["impurity_after"])
    assert sorted(best["left"] + best["right"]) == ["high", "low", "medium"]
    assert min(best["left"], best["right"], key=len) == ["high"]
    assert best["impurity_after"] == pytest.approx(0.442857142857, abs=1e-9)


def test_root_gini_of_buys_computer():
    assert cart.impurity([5.0, 9.0]) == pytest.approx(0.459184, abs=1e-6)


def _last_column(stem: str) -> str:
    with open(DATA / f"{stem}.csv") as fh:
        return fh.readline().strip().split(",")[-1]


def _brute_force(frame: pd.DataFrame, feature: str, target: str, classes, criterion: str):
    """Best two-way partition of one nominal feature by enumeration, in Python."""
    values = sorted(frame[feature].dropna().unique())
    counts = {
        v: [float(((frame[feature] == v) & (frame[target] == c)).sum()) for c in classes]
        for v in values
    }
    total = [sum(counts[v][i] for v in values) for i in range(len(classes))]
    w = sum(total)
    parent = cart.impurity(total, criterion)
    best = -math.inf
    for r in range(1, len(values)):
        for left in itertools.combinations(values, r):
            lc = [sum(counts[v][i] for v in left) for i in range(len(classes))]
            rc = [t - x for t, x in zip(total, lc, strict=True)]
            gain = (
                parent
                - sum(rc) / w * cart.impurity(rc, criterion)
                - sum(lc) / w * cart.impurity(lc, criterion)
            )
            best = max(best, gain)
    return best


@WITHOUT_SPARK
@pytest.mark.parametrize("n_classes", [2, 3, 4])
@pytest.mark.parametrize("n_values", [3, 6, 9])
@pytest.mark.parametrize("criterion", ["gini", "entropy"])
def test_subset_splits_match_exhaustive_search(engine_factory, n_classes, n_values, criterion):
    rng = np.random.default_rng(n_classes * 100 + n_values)
    n = 300
    x = rng.integers(0, n_values, n)
    bias = rng.random((n_values, n_classes)) ** 3
    y = np.array([rng.choice(n_classes, p=bias[v] / bias[v].sum()) for v in x])
    frame = pd.DataFrame({"x": [f"v{i}" for i in x], "y": y})
    engine, source = engine_factory(frame)
    data = describe(source, engine, "y")
    rows = cart.split_scores(data, criterion=criterion)
    expected = _brute_force(frame, "x", "y", sorted(set(y)), criterion)
    assert max(r["gain"] for r in rows) == pytest.approx(expected, abs=1e-12)


def test_subset_masks_are_stored_once_per_training():
    """Every level's subsets read one stored table of partitions, sized for the largest domain
    (4 values: 7 masks, 12 rows of a mask and a bit), not a literal table written into each
    statement; the table is dropped with the training's others."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 4, 400)
    frame = pd.DataFrame({"x": [f"v{i}" for i in x], "z": rng.normal(size=400),
                          "y": (x + rng.integers(0, 2, 400)) % 3})
    engine = DuckDBEngine()
    engine.keep_sql = True
    model = sqltree.train(frame, "y", algorithm="cart", connection=engine, plan="tables",
                          max_depth=4)
    stored = [s for s in engine.stats.sql if s.startswith("-- ") and "_masks_" in s[:60]]
    assert len(stored) == 1
    header, body = stored[0].split("\n", 1)
    values = sqlglot.parse_one(body, read="duckdb").find(exp.Values)
    assert values is not None and len(values.expressions) == 12
    name = header.removeprefix("-- ").removesuffix(" :=")
    scoring = [s for s in engine.stats.sql if s.startswith("WITH feature_totals")]
    assert len(scoring) >= model.depth >= 3
    assert all(name in s and "bt_raw" not in s for s in scoring)
    assert not any(t.startswith(name) for t in engine.connection.execute(
        "SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall())


@WITHOUT_SPARK
def test_many_valued_nominal_heuristic_is_valid(engine_factory):
    # More classes than two and more than EXACT_SUBSETS_MAX values: one-vs-rest orderings.
    rng = np.random.default_rng(3)
    x = rng.integers(0, 14, 500)
    y = (x % 3 + rng.integers(0, 2, 500)) % 3
    frame = pd.DataFrame({"x": [f"v{i:02d}" for i in x], "y": y})
    engine, source = engine_factory(frame)
    data = describe(source, engine, "y")
    rows = cart.split_scores(data)
    best = max(r["gain"] for r in rows)
    exact = _brute_force(frame, "x", "y", [0, 1, 2], "gini")
    assert 0 < best <= exact + 1e-12
    assert all(r["left"] and r["right"] for r in rows)


@WITHOUT_SPARK
def test_nominal_tree_through_grower(engine_factory):
    engine, source = engine_factory(read_csv(BUYS), "buys_computer")
    data = describe(source, engine, _last_column("buys_computer"))
    root, _ = grow(data, GrowOptions(algorithm="cart"))
    assert root.split is not None and len(root.children) == 2
    assert all(len(n.children) in (0, 2) for n in root.walk())
    rows = pd.read_csv(BUYS).to_dict("records")
    target = _last_column("buys_computer")
    labels = [data.classes[int(np.argmax(root.predict_proba(r)))] for r in rows]
    assert labels == [r[target] for r in rows]


def test_thresholds_are_midpoints():
    assert cart.midpoint(1.0, 2.0) == 1.5
    big = 1.7976931348623157e308
    assert cart.midpoint(big, math.inf) == big
    a = 1.0
    b = np.nextafter(1.0, 2.0)
    assert cart.midpoint(a, b) == a  # no double strictly between: scikit-learn keeps a


# -- unknown values ---------------------------------------------------------------------------
@pytest.mark.parametrize("params", [{"max_depth": 3}, {"min_samples_leaf": 3}, {}])
def test_unknown_values_as_sklearn(params):
    X, y = bundled("wine")
    rng = np.random.default_rng(0)
    X = X.copy()
    X[rng.random(X.shape) < 0.1] = np.nan
    ours = DecisionTreeClassifier(**params).fit(X, y)
    verdict, seed = sklearn_match(lambda s: SKTree(random_state=s, **params), X, y, ours)
    assert verdict in ("identical", "identical up to ties")
    if verdict == "identical":
        theirs = SKTree(random_state=seed, **params).fit(X, y)
        X_test = bundled("wine")[0]
        X_test[rng.random(X_test.shape) < 0.3] = np.nan
        np.testing.assert_array_equal(ours.predict(X_test), theirs.predict(X_test))


def test_unknown_at_prediction_only_follow_the_bigger_child():
    X, y = bundled("iris")
    ours = DecisionTreeClassifier(max_depth=2).fit(X, y)
    t = ours.tree_
    for i in range(t.node_count):
        if t.children_left[i] != -1:
            left, right = t.children_left[i], t.children_right[i]
            bigger_left = t.n_node_samples[left] > t.n_node_samples[right]
            assert t.missing_go_to_left[i] == int(bigger_left)


def test_all_known_left_split_uses_infinite_threshold():
    # The only informative thing is whether x is known.
    x = np.array([1.0] * 20 + [np.nan] * 20)
    y = np.array([0] * 20 + [1] * 20)
    ours = DecisionTreeClassifier().fit(x.reshape(-1, 1), y)
    theirs = SKTree(random_state=0).fit(x.reshape(-1, 1), y)
    assert same_arrays(theirs, ours)
    assert math.isinf(ours.tree_.threshold[0])
    np.testing.assert_array_equal(ours.predict([[np.nan], [5.0]]), [1, 0])


# -- pruning ----------------------------------------------------------------------------------
PATH_CASES = [
    ("iris", {}),
    ("wine", {"max_depth": 3}),
    ("breast_cancer", {"max_depth": 3}),
    ("breast_cancer", {"max_leaf_nodes": 8}),
    ("generated", {"max_leaf_nodes": 20}),
]


@pytest.mark.parametrize(("name", "params"), PATH_CASES)
def test_pruning_path_as_sklearn(name, params):
    X, _, y, _ = split(name)
    ours = DecisionTreeClassifier(**params).fit(X, y)
    path = cart.cost_complexity_pruning_path(ours.root_, ours.criterion, ours.strategy_nodes())
    verdict, seed = sklearn_match(
        lambda s: SKTree(random_state=s, **params), X, y, ours, seeds=60
    )
    assert verdict in ("identical", "identical up to ties")
    if verdict != "identical":
        return  # the trees differ below a genuine tie, so their pruning paths are not comparable
    theirs = SKTree(random_state=seed, **params).cost_complexity_pruning_path(X, y)
    np.testing.assert_allclose(path["ccp_alphas"], theirs.ccp_alphas, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(path["impurities"], theirs.impurities, rtol=1e-9, atol=1e-12)
    # and pruning at an alpha between two steps gives scikit-learn's pruned tree
    if len(path["ccp_alphas"]) > 2 and name in ("iris", "generated"):
        alpha = float(path["ccp_alphas"][-2] + path["ccp_alphas"][-3]) / 2
        pruned = DecisionTreeClassifier(ccp_alpha=alpha, **params).fit(X, y)
        reference = SKTree(random_state=seed, ccp_alpha=alpha, **params).fit(X, y)
        assert same_arrays(reference, pruned)
        stats = pruned.model_.stats["pruning"]
        assert stats["method"] == "cost-complexity"
        assert stats["leaves_after"] == pruned.get_n_leaves() < stats["leaves_before"]


def test_pruning_never_adds_leaves_and_alpha_orders_trees():
    X, y = bundled("breast_cancer")
    full = DecisionTreeClassifier().fit(X, y)
    leaves = []
    for alpha in (0.0, 0.002, 0.01, 0.05, 1.0):
        root = copy.deepcopy(full.root_)
        cart.prune_ccp(root, alpha, "gini", full.strategy_nodes(root))
        leaves.append(sum(1 for _ in root.leaves()))
    assert leaves == sorted(leaves, reverse=True)
    assert leaves[0] == full.get_n_leaves() and leaves[-1] == 1


def test_pruning_path_on_grown_tree_object():
    data = describe(str(BUYS), DuckDBEngine(), _last_column("buys_computer"))
    root, _ = grow(data, GrowOptions(algorithm="cart"))
    path = cart.cost_complexity_pruning_path(root, "gini")
    assert path["ccp_alphas"][0] == 0.0
    assert path["ccp_alphas"] == sorted(path["ccp_alphas"])
    assert path["impurities"][-1] == pytest.approx(cart.impurity(root.counts))


@pytest.mark.parametrize(
    "params", [{"max_leaf_nodes": 6}, {"ccp_alpha": 0.01}, {"max_leaf_nodes": 9, "ccp_alpha": 0.01}]
)
def test_pruning_comes_after_growth(params):
    # Growth alone keeps every split; sqltree.pruning then cuts the tree back and prunes it to
    # the tree train() returns, as scikit-learn's fit builds and then calls _prune_tree.
    frame = _engine_frame()
    data = describe(frame, DuckDBEngine(), "label")
    grown, _ = grow(data, GrowOptions(algorithm="cart", max_depth=6, **params))
    leaves = sum(1 for _ in grown.leaves())
    stats = prune(grown, data, "cost-complexity", **params)
    trained = sqltree.train(frame, target="label", algorithm="cart", max_depth=6, **params)
    assert grown.to_dict() == trained.root.to_dict()
    assert stats.leaves_before == leaves > stats.leaves_after == trained.n_leaves
    assert stats.pruned >= 1
    if "max_leaf_nodes" in params:
        assert trained.n_leaves <= params["max_leaf_nodes"]


def test_nodes_keep_row_counts_impurity_and_improvement():
    # What scikit-learn's tree arrays hold is on the tree's nodes, and in its model file.
    frame = _engine_frame()
    model = sqltree.train(frame, target="label", algorithm="cart", max_depth=4)
    root = model.root
    assert root.n_samples == len(frame)
    for node in root.walk():
        assert node.impurity == pytest.approx(cart.impurity(node.counts), abs=1e-12)
        if node.is_leaf:
            assert node.improvement is None
            continue
        # unknown values go down one branch: the children hold the parent's rows
        assert sum(c.n_samples for c in node.children) == node.n_samples
        children = sum(c.weight * c.impurity for c in node.children)
        expected = (node.weight * node.impurity - children) / root.weight
        assert node.improvement == pytest.approx(expected, abs=1e-12)
    loaded = sqltree.Model.from_dict(model.to_dict())
    assert loaded.root.to_dict() == root.to_dict()


def _hand_tree(improvements):
    """A root whose two children split into leaves, numbered as growth numbers them (level by
    level); the improvements of root, left and right child."""

    def node(node_id, improvement=None, children=()):
        split = Split("x", "continuous", threshold=float(node_id)) if children else None
        return Node([1.0, 1.0], [0.5, 0.5], split=split, children=list(children),
                    improvement=improvement, node_id=node_id)

    a = node(1, improvements[1], [node(3), node(4)])
    b = node(2, improvements[2], [node(5), node(6)])
    return node(0, improvements[0], [a, b]), a, b


def test_cut_back_keeps_the_best_first_splits_and_marks_tied_turns():
    root, a, b = _hand_tree([0.3, 0.1, 0.2])
    assert cut_back(root, 3) == 1  # root and b (the higher improvement) stay split
    assert a.is_leaf and not b.is_leaf and not (root.tied or a.tied or b.tied)
    root, a, b = _hand_tree([0.3, 0.1, 0.1])
    assert cut_back(root, 3) == 1
    # equal improvements across the budget's edge: scikit-learn's heap may take either
    assert not a.is_leaf and b.is_leaf and a.tied and b.tied and not root.tied
    assert [n.node_id for n in best_first_numbering(root)] == [0, 1, 2, 3, 4]


# -- options ----------------------------------------------------------------------------------
def test_sample_weight_as_sklearn():
    X, y = bundled("iris")
    w = np.random.default_rng(1).integers(1, 4, len(y)).astype(float)
    ours = DecisionTreeClassifier(max_depth=3).fit(X, y, sample_weight=w)
    verdict, _ = sklearn_match(
        lambda s: SKTree(random_state=s, max_depth=3), X, y, ours, sample_weight=w
    )
    assert verdict == "identical"


def test_zero_sample_weights_are_left_out_as_in_sklearn():
    X, y = bundled("wine")
    w = np.random.default_rng(2).integers(0, 3, len(y)).astype(float)
    params = {"max_depth": 3, "min_samples_leaf": 4}
    ours = DecisionTreeClassifier(**params).fit(X, y, sample_weight=w)
    verdict, _ = sklearn_match(
        lambda s: SKTree(random_state=s, **params), X, y, ours, sample_weight=w
    )
    assert verdict == "identical"
    assert ours.tree_.n_node_samples[0] == np.count_nonzero(w)


def test_class_weight_dict_as_sklearn():
    X, y = bundled("wine")
    cw = {0: 1.0, 1: 2.5, 2: 0.5}
    ours = DecisionTreeClassifier(max_depth=3, class_weight=cw).fit(X, y)
    verdict, _ = sklearn_match(
        lambda s: SKTree(random_state=s, max_depth=3, class_weight=cw), X, y, ours
    )
    assert verdict == "identical"


def test_class_weight_naming_an_unknown_class_is_refused():
    with pytest.raises(sqltree.errors.DataError,
                       match=r"class_weight names classes the target does not hold: \['nope'\]"):
        sqltree.train(str(DATA / "golf.csv"), target="play", algorithm="cart",
                      class_weight={"yes": 1.0, "nope": 2.0})
    with pytest.raises(ValueError, match="does not hold"):  # as scikit-learn's estimator
        DecisionTreeClassifier(class_weight={0: 1.0, 7: 2.0}).fit(*bundled("iris"))


def test_fractional_min_samples():
    X, y = bundled("iris")
    ours = DecisionTreeClassifier(min_samples_leaf=0.05, min_samples_split=0.2).fit(X, y)
    verdict, _ = sklearn_match(
        lambda s: SKTree(random_state=s, min_samples_leaf=0.05, min_samples_split=0.2),
        X, y, ours,
    )
    assert verdict == "identical"


def test_train_through_grow_options():
    data = describe(str(DATA / "golf.csv"), DuckDBEngine(), "play")
    root, stats = grow(data, GrowOptions(algorithm="cart", criterion="entropy", max_depth=2))
    assert stats.scans >= 2
    assert max(_depth(root, n) for n in root.walk()) <= 2


def _depth(root, node, d=0):
    if root is node:
        return d
    for c in root.children:
        found = _depth(c, node, d + 1)
        if found is not None:
            return found
    return None


def test_bad_options():
    data = describe(str(DATA / "golf.csv"), DuckDBEngine(), "play")
    with pytest.raises(ValueError):
        grow(data, GrowOptions(algorithm="cart", criterion="mse"))
    with pytest.raises(ValueError):
        grow(data, GrowOptions(algorithm="cart", max_leaf_nodes=1))


def test_compare_trees_reports_differences():
    X, y = bundled("iris")
    a = SKTree(max_depth=1, random_state=0).fit(X, y)
    b = DecisionTreeClassifier(max_depth=2).fit(X, y)
    assert compare_trees(a, b) != "identical"


# -- every engine -----------------------------------------------------------------------------
def _engine_frame() -> pd.DataFrame:
    rng = np.random.default_rng(11)
    n = 600
    a = np.round(rng.normal(0, 1, n), 2)
    a[rng.random(n) < 0.1] = np.nan
    color = rng.choice(["red", "green", "blue", "black", "white"], n).astype(object)
    color[rng.random(n) < 0.05] = None
    b = rng.integers(0, 20, n).astype(float)
    score = np.nan_to_num(a) + np.isin(color, ["red", "black"]) * 1.5 + b / 10
    y = np.array(["lo", "mid", "hi"])[np.digitize(score + rng.normal(0, 0.5, n), [1.0, 2.5])]
    return pd.DataFrame({"a": a, "color": color, "b": b, "label": y})


def _shape(node):
    if node.split is None:
        return ("leaf", [round(c, 9) for c in node.counts])
    s = node.split
    test = round(s.threshold, 9) if s.threshold is not None else s.groups
    return (s.feature, test, node.unknown_branch, [_shape(c) for c in node.children])


def test_histogram_rows_summed_by_class_first_are_the_same(engine_factory):
    # CART reads the shared histogram with row counts, class weights in fixed point: summed
    # per (node, value, class) first, it holds the same rows, exactly.
    engine, source = engine_factory(_engine_frame())
    data = describe(source, engine, "label")
    k = len(data.classes)
    level = engine.materialize("level", q.build_level0(data, class_weight=[0.5, 1.25, 3.0]))
    bits = fx.fixed_point_bits(4.0 * len(_engine_frame()))
    every = [f.index for f in data.features]

    def rows(by_class):
        query = q.build_histogram(level, data.features, k, by_class, bits=bits, counts=True)
        return sorted(
            tuple(-1e300 if v is None else float(v) for v in r) for r in engine.execute(query)
        )

    plain = rows(())
    assert plain == rows(every)
    assert {r[1] for r in plain} == {-1, *every}
    totals = [r for r in plain if r[1] == -1]
    assert sum(r[3] for r in totals) == len(_engine_frame())  # n, the row count


@pytest.mark.parametrize("options", [{}, {"class_weight": "balanced"}, {"max_bins": 8}])
def test_tree_grown_from_histograms_summed_by_class_is_the_same(monkeypatch, options):
    # On DuckDB a feature with a known domain (nominal, or binned) is summed per class first
    # where its (node, value, class) groups are few against the rows; forcing it for every
    # such feature, and for none, grows the same tree.
    from sqltree import grower

    seen: list[list[int]] = []
    summed_by_class = grower.Strategy.summed_by_class

    def spy(self, features, nodes):
        seen.append(summed_by_class(self, features, nodes))
        return seen[-1]

    monkeypatch.setattr(grower.Strategy, "summed_by_class", spy)
    trees = []
    for rows_per_group in (10**12, 0):
        monkeypatch.setattr(grower, "ROWS_PER_CLASS_GROUP", rows_per_group)
        seen.clear()
        # the histograms are the SQL plans' (a small DataFrame grows in memory by default)
        model = sqltree.train(
            _engine_frame(), target="label", algorithm="cart", max_depth=5, plan="tables",
            **options,
        )
        trees.append(model.root.to_dict())
    assert 1 in set().union(*seen)  # "color", summed per class on the second run
    assert trees[0] == trees[1]


@pytest.mark.parametrize("criterion", ["gini", "entropy"])
def test_same_cart_tree_on_every_engine(engine_factory, criterion):
    frame = _engine_frame()
    engine, source = engine_factory(frame)
    options = GrowOptions(algorithm="cart", criterion=criterion, max_depth=3, min_samples_leaf=3)
    root, _ = grow(describe(source, engine, "label"), options)
    reference, _ = grow(describe(frame, DuckDBEngine(), "label"), options)
    assert _shape(root) == _shape(reference)
    assert root.split is not None
