"""The ensemble learners against the trees they follow, tree by tree: a forest's trees
against scikit-learn's and against sqltree's own CART tree, boosting's first tree against
LightGBM's.

Against the libraries every feature holds the integers 0..20: float32 represents them exactly
(scikit-learn and LightGBM convert to float32), and with fewer values than bins each bin is one
value on both sides, so binning decides nothing and the trees must agree split for split.
Thresholds differ in value (scikit-learn and LightGBM cut halfway between two values, sqltree
at the lower value, a bin's top edge), so a split is compared by the rows it sends left, not
by its number. Against CART the data is binned for real: both grow over the same bins.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sqltree
from sqltree.ensemble import TreeArrays

FEATURES = ["p", "q", "r", "s"]
VALUES = 21  # each feature takes the values 0..20


def _integers(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Features of the integers 0..20 (float32) and a noisy score of them."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, VALUES, size=(rows, len(FEATURES))).astype(np.float32)
    score = (0.6 * x[:, 0] - 0.4 * x[:, 1] + 0.25 * x[:, 2] * (x[:, 3] > 10)
             + rng.normal(scale=3.0, size=rows))
    return x, score


def _frame(x: np.ndarray, **columns: np.ndarray) -> pd.DataFrame:
    frame = pd.DataFrame(x.astype(np.float64), columns=FEATURES)
    for name, values in columns.items():
        frame[name] = values
    return frame


# -- trees as partitions of rows -------------------------------------------------------------
def _rows_at(tree: TreeArrays, x: np.ndarray, rows: np.ndarray) -> dict[int, np.ndarray]:
    """The rows of ``rows`` that reach each node (the tree's own rule: ``value <= threshold``
    goes left; the data has no NULLs)."""
    out = {0: rows}
    for node in _preorder(tree):
        if tree.left[node] < 0:
            continue
        here = out[node]
        left = x[here, tree.feature[node]].astype(np.float64) <= tree.threshold[node]
        out[int(tree.left[node])] = here[left]
        out[int(tree.right[node])] = here[~left]
    return out


def _preorder(tree: TreeArrays) -> list[int]:
    order, stack = [], [0]
    while stack:
        node = stack.pop()
        order.append(node)
        if tree.left[node] >= 0:
            stack += [int(tree.right[node]), int(tree.left[node])]
    return order


def _path(tree: TreeArrays, target: int) -> str:
    """A node's place as the sides taken from the root (``LRL``), for messages."""
    parent = {int(c): (n, side) for n in range(tree.n_nodes) if tree.left[n] >= 0
              for c, side in ((tree.left[n], "L"), (tree.right[n], "R"))}
    sides = ""
    while target in parent:
        target, side = parent[target]
        sides = side + sides
    return sides or "root"


def _splits(tree: TreeArrays, x: np.ndarray, rows: np.ndarray, nodes: list[int]
            ) -> list[tuple[int, tuple[int, ...], tuple[int, ...]]]:
    """Each internal node of ``nodes`` as (feature, its rows, the rows it sends left)."""
    at = _rows_at(tree, x, rows)
    return [(int(tree.feature[n]), tuple(at[n]), tuple(at[int(tree.left[n])]))
            for n in nodes if tree.left[n] >= 0]


def assert_same_partitions(ours: TreeArrays, theirs: TreeArrays, x: np.ndarray,
                           rows: np.ndarray) -> list[tuple[int, int]]:
    """Walk both trees from the root together: at every node the same feature sends the same
    rows (of ``rows``) left, and a leaf is a leaf on both sides. The pairs of leaves, ours
    first."""
    at_ours, at_theirs = _rows_at(ours, x, rows), _rows_at(theirs, x, rows)
    leaves = []
    stack = [(0, 0)]
    while stack:
        a, b = stack.pop()
        where = _path(ours, a)
        assert (ours.left[a] < 0) == (theirs.left[b] < 0), (
            f"{where}: {'ours' if ours.left[a] < 0 else 'theirs'} is a leaf, the other "
            f"splits ({len(at_ours[a])} rows)")
        if ours.left[a] < 0:
            leaves.append((a, b))
            continue
        assert ours.feature[a] == theirs.feature[b], (
            f"{where}: ours splits {FEATURES[ours.feature[a]]} <= {ours.threshold[a]}, "
            f"theirs {FEATURES[theirs.feature[b]]} <= {theirs.threshold[b]} "
            f"({len(at_ours[a])} rows)")
        la, lb = int(ours.left[a]), int(theirs.left[b])
        assert at_ours[la].tolist() == at_theirs[lb].tolist(), (
            f"{where}: {FEATURES[ours.feature[a]]} <= {ours.threshold[a]} against "
            f"<= {theirs.threshold[b]} send different rows left")
        stack += [(int(ours.right[a]), int(theirs.right[b])), (la, lb)]
    return leaves


# -- 1. random forest against scikit-learn ---------------------------------------------------
def _classes(score: np.ndarray, seed: int) -> np.ndarray:
    """Three classes: two by the score's median, a tenth of the rows a third at random."""
    rng = np.random.default_rng(seed + 100)
    label = np.where(score > np.median(score), "b", "a")
    label[rng.random(len(score)) < 0.1] = "c"
    return label


@pytest.mark.parametrize("plan", ["memory", "tables"])
def test_each_forest_tree_is_scikit_learns_tree_for_its_bootstrap_counts(plan):
    """scikit-learn's forest draws each tree's rows with replacement and fits the tree with
    the draw counts as sample weights (``_parallel_build_trees``); ``estimators_samples_``
    gives the same draws. Given those counts as a weight column, sqltree's one-tree forest
    without bagging, every feature at every node, grows tree ``t`` of scikit-learn's forest
    (``max_features=None``: only the bootstrap differs between its trees).

    Compared on the drawn rows: a row of count 0 is in no node of scikit-learn's tree, and
    where it goes depends on where the threshold sits between two drawn values. With
    ``min_samples_leaf`` both count the drawn rows of a child, not their counts.

    Ties: scikit-learn visits the features in a random order and keeps the first strictly
    better split, sqltree takes the first feature; the trees part where two features' best
    splits score exactly the same, which happens in nodes of a few tens of rows (two features
    cutting off the same rows, say). On this data, trees of depth 6 grown with other seeds
    part so in about one tree of three, at nodes of 20 to 40 rows, each time at a tie (checked
    with exact fractions when the data was chosen); the three trees of ``random_state=7`` have
    none.
    """
    from sklearn.ensemble import RandomForestClassifier

    x, score = _integers(2000, seed=0)
    label = _classes(score, seed=0)
    options = {"max_depth": 6, "min_samples_leaf": 10}
    forest = RandomForestClassifier(n_estimators=3, max_features=None, random_state=7,
                                    **options).fit(x, label)
    theirs = sqltree.from_sklearn(forest, feature_names=FEATURES)
    for t, drawn in enumerate(forest.estimators_samples_):
        counts = np.bincount(drawn, minlength=len(x))
        model = sqltree.train(_frame(x, label=label, n=counts.astype(np.float64)), "label",
                              algorithm="random-forest", weight="n", n_estimators=1,
                              bootstrap=False, max_features=None, max_bins=255, plan=plan,
                              **options)
        assert model.classes == theirs.classes
        ours = model.trees[0]
        assert ours.n_leaves > 20
        leaves = assert_same_partitions(ours, theirs.trees[t], x, np.flatnonzero(counts))
        for a, b in leaves:  # the class shares of the leaf's drawn rows, counts included
            np.testing.assert_allclose(ours.value[a], theirs.trees[t].value[b], rtol=1e-12)


# -- 2. a forest without bagging against sqltree's CART tree ---------------------------------
def _binned_table(rows: int, seed: int, nulls: bool) -> pd.DataFrame:
    """Four continuous features to be cut into bins (values of three decimals), a few NULLs
    in two of them, three noisy classes, a regression target, counts and whole-number
    weights."""
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=(rows, len(FEATURES))), 3)
    score = x[:, 0] - 0.7 * x[:, 1] + 0.5 * x[:, 2] * (x[:, 3] > 0) + rng.normal(size=rows)
    frame = _frame(x, label=_classes(score, seed), y=np.round(score, 2),
                   count=rng.poisson(np.exp(score / 2)).astype(np.float64),
                   w=rng.poisson(1.0, rows).astype(np.float64))
    if nulls:
        frame.loc[rng.random(rows) < 0.05, "p"] = np.nan
        frame.loc[rng.random(rows) < 0.05, "r"] = np.nan
    return frame


def _assert_cart_tree(node, tree: TreeArrays, names: list[str], at: int = 0,
                      path: str = "root") -> None:
    """A single tree's ``Node`` and a forest's tree are the same tree: the same tests (the
    same thresholds: both are bins' top edges), unknown values sent the same way, the same
    leaf values."""
    assert node.is_leaf == (tree.left[at] < 0), f"{path}: a leaf on one side only"
    if node.is_leaf:
        # a mean target: each rounds the weighted targets to its own fixed point
        expected = node.proba if node.value is None else [node.value]
        np.testing.assert_allclose(tree.value[at], expected, rtol=1e-9, atol=1e-9,
                                   err_msg=path)
        return
    split = node.split
    assert (split.feature, split.threshold) == (names[tree.feature[at]], tree.threshold[at]), (
        f"{path}: CART splits {split.feature} <= {split.threshold}, the forest "
        f"{names[tree.feature[at]]} <= {tree.threshold[at]}")
    if node.unknown_branch is not None:
        assert (node.unknown_branch == 0) == tree.missing_left[at], path
    _assert_cart_tree(node.children[0], tree, names, int(tree.left[at]), path + "L")
    _assert_cart_tree(node.children[1], tree, names, int(tree.right[at]), path + "R")


FOREST_AS_CART = {
    "gini": {"target": "label", "criterion": "gini"},
    "entropy": {"target": "label", "criterion": "entropy"},
    "weighted": {"target": "label", "criterion": "gini", "weight": "w"},
    "nulls": {"target": "label", "criterion": "gini", "nulls": True},
    "regression": {"target": "y", "criterion": "squared_error", "weight": "w"},
    "poisson": {"target": "count", "criterion": "poisson"},
}


@pytest.mark.parametrize("case", FOREST_AS_CART.values(), ids=FOREST_AS_CART.keys())
def test_a_forest_without_bagging_grows_carts_tree_of_the_same_bins(case):
    """Without bagging and with every feature at every node, each tree of a forest is the
    CART tree ``train(algorithm="cart", max_bins=...)`` grows over the same quantile bins:
    the same greedy choice, the same stopping rules, the same leaf values, the same ties.

    Grown to leaves of two rows, a quarter of the splits tie here, equal in exact arithmetic
    and some of them apart in their last bits: both take the first feature in column order
    among the splits within ``criteria.TIE_TOLERANCE`` per unit weight (of the root's
    impurity for a regression), then unknown values right before left, then the lowest
    threshold. Unknown values at a node that saw none go to the child of more rows, the right
    one when both hold as many; a split of the known values from the unknown ones sends
    every known value left (threshold the largest double).
    """
    frame = _binned_table(1500, seed=3, nulls=case.get("nulls", False))
    frame = frame.drop(columns=[c for c in ("label", "y", "count", "w")
                                if c not in (case["target"], case.get("weight"))])
    options = {"max_bins": 32, "min_samples_leaf": 2, "criterion": case["criterion"],
               "weight": case.get("weight")}
    forest = sqltree.train(frame, case["target"], algorithm="random-forest", n_estimators=2,
                           bootstrap=False, max_features=None, **options)
    cart = sqltree.train(frame, case["target"], algorithm="cart", **options)
    assert cart.n_leaves > 100
    for tree in forest.trees:
        _assert_cart_tree(cart.root, tree, forest.feature_names)


# -- 3. gradient boosting's first round against LightGBM -------------------------------------
def _split_order(tree: TreeArrays) -> list[int]:
    """sqltree's internal nodes in the order they were split: a split appends its two
    children, so the order of their numbers."""
    return sorted((n for n in range(tree.n_nodes) if tree.left[n] >= 0),
                  key=lambda n: int(tree.left[n]))


def _lightgbm_split_order(structure: dict) -> list[int]:
    """LightGBM's internal nodes (numbered as ``from_lightgbm`` numbers them, in preorder)
    in the order they were split (the dump's ``split_index``)."""
    order: dict[int, int] = {}

    def walk(node: dict, at: int) -> int:
        if "split_index" not in node:
            return at + 1
        order[int(node["split_index"])] = at
        return walk(node["right_child"], walk(node["left_child"], at + 1))

    walk(structure, 0)
    return [order[k] for k in sorted(order)]


def _lightgbm_gradients(y: np.ndarray, init: float) -> tuple[np.ndarray, np.ndarray]:
    """LightGBM's binary log loss gradients and hessians at the first round's score
    (``BinaryLogloss::GetGradients``): computed in double, stored as float32 (``score_t``)."""
    label = np.where(y == 1, 1.0, -1.0)
    response = -label / (1.0 + np.exp(label * init))
    g = response.astype(np.float32).astype(np.float64)
    h = (np.abs(response) * (1.0 - np.abs(response))).astype(np.float32).astype(np.float64)
    return g, h


BOOSTING_CASES = {
    # balanced classes: the base score is 0, every gradient +-1/2 and hessian 1/4, exact in
    # float32 and in sqltree's fixed point, so the leaf values are the same doubles
    "balanced": {"share": 0.5, "leaves": 31, "min_leaf": 5, "l2": 0.0, "min_hessian": 1e-3,
                 "rate": 1.0},
    "l2": {"share": 0.3, "leaves": 12, "min_leaf": 5, "l2": 1.0, "min_hessian": 6.0,
           "rate": 0.3},
    "min-leaf": {"share": 0.2, "leaves": 16, "min_leaf": 20, "l2": 0.5, "min_hessian": 1e-3,
                 "rate": 1.0},
    "min-hessian": {"share": 0.4, "leaves": 24, "min_leaf": 5, "l2": 0.0, "min_hessian": 11.9,
                    "rate": 0.1},
}


@pytest.mark.parametrize("case", BOOSTING_CASES.values(), ids=BOOSTING_CASES.keys())
def test_boostings_first_tree_is_lightgbms_first_tree(case):
    """One round of binary log loss boosting grows LightGBM's first tree: the same base
    score (``boost_from_average``: the log-odds of the positive share), the same splits in
    the same best-first order (each leaf's best split by the Newton gain with ``lambda_l2``,
    the leaf of largest gain next), the same leaves.

    Options matched: ``num_leaves`` is ``max_leaf_nodes``, ``min_data_in_leaf``
    ``min_samples_leaf``, ``lambda_l2`` ``l2_regularization``, ``min_sum_hessian_in_leaf``
    ``min_hessian_to_split`` (both: a child's hessian sum at least this), ``max_bin`` (with
    ``min_data_in_bin=1``) gives each value its bin, as sqltree's ``max_bins``.

    Leaf values: LightGBM stores each row's gradient and hessian as float32, sqltree rounds
    them to 24 bits of fraction (``boosting.NEWTON_BITS``); each side's sums are within
    ``n 2**-25`` of the exact ones, and the leaf values agree to about 1e-6, relatively. So
    LightGBM's leaves are checked against its own arithmetic on float32 gradients (to 1e-9)
    and sqltree's against the exact value within what its rounding allows; where no
    rounding happens (balanced classes) the two are the same to 1e-12.

    A least hessian equal to a multiple of the common hessian is a boundary that the two
    roundings cross differently: at a positive share of 0.4 every hessian is 0.24 and a child
    of 50 rows holds 12 in exact arithmetic, 11.9999997 in float32 sums and 12.0000005 in
    sqltree's, so ``min_hessian=12`` refuses in LightGBM splits that sqltree makes. The case
    here uses 11.9.
    """
    lgb = pytest.importorskip("lightgbm")
    x, score = _integers(2000, seed=1)
    y = (score > np.quantile(score, 1.0 - case["share"])).astype(np.int64)
    rate, l2 = case["rate"], case["l2"]
    model = sqltree.train(
        _frame(x, label=y), "label", algorithm="gradient-boosting", max_iter=1,
        learning_rate=rate, max_leaf_nodes=case["leaves"], min_samples_leaf=case["min_leaf"],
        l2_regularization=l2, min_hessian_to_split=case["min_hessian"], max_bins=255,
        early_stopping=False)
    booster = lgb.train(
        {"objective": "binary", "num_leaves": case["leaves"],
         "min_data_in_leaf": case["min_leaf"], "lambda_l2": l2,
         "min_sum_hessian_in_leaf": case["min_hessian"], "learning_rate": rate,
         "max_bin": 255, "min_data_in_bin": 1, "boost_from_average": True,
         "num_threads": 1, "deterministic": True, "force_row_wise": True, "verbose": -1},
        lgb.Dataset(x, y), num_boost_round=1)
    theirs = sqltree.from_lightgbm(booster, feature_names=FEATURES).trees[0]
    ours = model.trees[0]

    share = y.mean()
    init = float(np.log(share / (1.0 - share)))
    assert model.base_score[0] == pytest.approx(init, rel=1e-12, abs=1e-15)
    # a value per bin on both sides: LightGBM cuts halfway between two integers (its bin
    # bounds are a few ulps above the midpoint)
    inner = theirs.left >= 0
    np.testing.assert_allclose(theirs.threshold[inner] % 1.0, 0.5, atol=1e-12)

    rows = np.arange(len(x))
    ours_order = _split_order(ours)
    theirs_order = _lightgbm_split_order(booster.dump_model()["tree_info"][0]["tree_structure"])
    assert len(ours_order) == case["leaves"] - 1
    ours_splits = _splits(ours, x, rows, ours_order)
    theirs_splits = _splits(theirs, x, rows, theirs_order)
    for k, (a, b) in enumerate(zip(ours_splits, theirs_splits, strict=True)):
        assert a == b, (f"split {k} (best-first): ours {FEATURES[a[0]]} on {len(a[1])} rows, "
                        f"LightGBM's {FEATURES[b[0]]} on {len(b[1])} rows")

    at = _rows_at(ours, x, rows)
    g32, h32 = _lightgbm_gradients(y, init)
    p = 1.0 / (1.0 + np.exp(-model.base_score[0]))
    g, h = p - y, np.full(len(y), p * (1.0 - p))
    for a, b in assert_same_partitions(ours, theirs, x, rows):
        here = at[a]
        lightgbm = init - rate * g32[here].sum() / (h32[here].sum() + l2)
        assert theirs.value[b, 0] == pytest.approx(lightgbm, rel=1e-9)
        exact = -g[here].sum() / (h[here].sum() + l2)
        rounding = len(here) * 2.0**-25 * (1.0 + abs(exact)) / (h[here].sum() + l2)
        assert abs(ours.value[a, 0] / rate - exact) <= rounding
        if case["share"] == 0.5:
            assert model.base_score[0] + ours.value[a, 0] == pytest.approx(
                theirs.value[b, 0], rel=1e-12, abs=1e-15)
