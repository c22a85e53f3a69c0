"""Regression trees: CART with squared error, grown in SQL, against scikit-learn's
``DecisionTreeRegressor``; scoring, export and model files of a numeric prediction."""

from __future__ import annotations

import itertools

import duckdb
import numpy as np
import pandas as pd
import pytest

import sqltree
from sqltree.errors import DataError, ModelFileError, UnsupportedError
from sqltree.model import Model
from tests.helpers import on_engines

pytest.importorskip("sklearn")
from sklearn.datasets import load_diabetes, make_friedman1
from sklearn.tree import DecisionTreeRegressor

ATOL = 1e-9


def _float32(frame: pd.DataFrame) -> pd.DataFrame:
    """scikit-learn grows on float32 features: give both the values float32 holds."""
    return frame.astype(np.float32).astype(np.float64)


def diabetes() -> tuple[pd.DataFrame, np.ndarray]:
    X, y = load_diabetes(return_X_y=True, as_frame=True)
    return _float32(X), y.to_numpy()


def friedman() -> tuple[pd.DataFrame, np.ndarray]:
    X, y = make_friedman1(n_samples=600, n_features=6, noise=1.0, random_state=3)
    return _float32(pd.DataFrame(X, columns=[f"x{i}" for i in range(6)])), y


def with_nulls() -> tuple[pd.DataFrame, np.ndarray]:
    X, y = friedman()
    rng = np.random.default_rng(5)
    return X.mask(rng.random(X.shape) < 0.15), y


def indicators() -> tuple[pd.DataFrame, np.ndarray]:
    """Nominal features one-hot encoded (scikit-learn's way to take them) beside numbers."""
    rng = np.random.default_rng(8)
    n = 500
    colour = rng.choice(["red", "green", "blue", "grey"], n)
    size = rng.choice(["s", "m", "l"], n)
    x = rng.normal(size=n).round(3)
    effect = {"red": 2.0, "green": -1.0, "blue": 0.5, "grey": 0.0}
    y = np.array([effect[c] for c in colour]) + (size == "l") * 1.5 + x + rng.normal(0, 0.3, n)
    frame = pd.get_dummies(pd.DataFrame({"colour": colour, "size": size}), dtype=float)
    return _float32(frame.assign(x=x)), y


def counts() -> tuple[pd.DataFrame, np.ndarray]:
    """A count target, more than half zeros: Poisson's rule against sides that sum to zero."""
    rng = np.random.default_rng(7)
    X = _float32(pd.DataFrame(rng.random((500, 4)), columns=list("abcd")))
    return X, rng.poisson(np.exp(3 * X.a - 2.5 + (X.b > 0.7))).astype(float)


DATA = {"diabetes": diabetes, "friedman1": friedman, "nulls": with_nulls,
        "indicators": indicators, "counts": counts}


def same_tree(
    sk: DecisionTreeRegressor, model: Model, columns: list[str], offset: float = 0.0
) -> str | None:
    """The first difference between scikit-learn's tree and ours (grown on the target plus
    ``offset``), or None."""
    t = sk.tree_
    index = {c: i for i, c in enumerate(columns)}
    stack = [(0, model.root)]
    seen = 0
    skipped = False
    while stack:
        i, node = stack.pop()
        seen += 1
        if t.n_node_samples[i] != node.n_samples:
            return f"node {i}: {t.n_node_samples[i]} rows, ours {node.n_samples}"
        if not np.isclose(t.weighted_n_node_samples[i], node.weight, rtol=1e-12):
            return f"node {i}: weight"
        if abs(t.value[i][0][0] + offset - node.value) > ATOL * max(1.0, abs(node.value)):
            return f"node {i}: value {t.value[i][0][0]!r}, ours {node.value!r}"
        if not np.isclose(t.impurity[i], node.impurity, rtol=1e-7, atol=1e-9):
            return f"node {i}: impurity {t.impurity[i]!r}, ours {node.impurity!r}"
        sk_leaf = t.children_left[i] == -1
        if sk_leaf != node.is_leaf:
            return f"node {i}: leaf in {'sklearn' if sk_leaf else 'sqltree'} only"
        if sk_leaf:
            continue
        split = node.split
        differs = t.feature[i] != index[split.feature] or (
            np.isinf(t.threshold[i]) != (split.threshold >= 1.7e308)
            or (not np.isinf(t.threshold[i]) and abs(t.threshold[i] - split.threshold) > ATOL)
        )
        if differs and node.tied and np.isclose(
            _decrease(t, i), _our_decrease(node), rtol=1e-9, atol=1e-9
        ):
            skipped = True  # a tie scikit-learn broke at random: either subtree is right
            continue
        if differs:
            return (f"node {i}: sklearn {columns[t.feature[i]]} <= {t.threshold[i]!r}, "
                    f"ours {split.feature} <= {split.threshold!r}")
        if bool(t.missing_go_to_left[i]) != (node.unknown_branch == 0):
            return f"node {i}: unknown values' side"
        stack += [(t.children_right[i], node.children[1]), (t.children_left[i], node.children[0])]
    if seen != t.node_count and not skipped:
        return f"{t.node_count} nodes, ours {seen}"
    return None


def _decrease(t, i: int) -> float:
    w = t.weighted_n_node_samples
    return float(t.impurity[i] - sum(
        w[c] / w[i] * t.impurity[c] for c in (t.children_left[i], t.children_right[i])
    ))


def _our_decrease(node) -> float:
    return node.impurity - sum(c.weight / node.weight * c.impurity for c in node.children)


def sklearn_tree(**params) -> DecisionTreeRegressor:
    """scikit-learn's regressor; ``friedman_mse`` as the ``squared_error`` it maps to since
    1.9 (the same splits; sqltree's improvement stays Friedman's, ``test_friedman_*``)."""
    if params.get("criterion") == "friedman_mse":
        params["criterion"] = "squared_error"
    return DecisionTreeRegressor(**params)


def fit_both(X: pd.DataFrame, y: np.ndarray, connection=None, source=None, **params):
    """Our tree and scikit-learn's; where our tree records a tie, scikit-learn's with the
    first ``random_state`` whose random tie-breaking grows the same tree, if any."""
    weight = params.pop("sample_weight", None)
    frame = X.assign(target=y)
    if weight is not None:
        frame = frame.assign(w=weight)
    ours = sqltree.train(
        frame if source is None else source, "target", task="regression",
        connection=connection, weight="w" if weight is not None else None, **params,
    )
    columns = list(X.columns)
    first = None
    for seed in range(20 if any(n.tied for n in ours.root.walk()) else 1):
        theirs = sklearn_tree(random_state=seed, **params).fit(
            X, y, sample_weight=weight
        )
        first = first or theirs
        if exact_tree(theirs, ours, columns):
            return ours, theirs
    return ours, first


def exact_tree(sk: DecisionTreeRegressor, model: Model, columns: list[str]) -> bool:
    """Whether the trees are the same without allowing for ties."""
    tied = [n for n in model.root.walk() if n.tied]
    for n in tied:
        n.tied = False
    try:
        return same_tree(sk, model, columns) is None
    finally:
        for n in tied:
            n.tied = True


def predictions(model: Model, X: pd.DataFrame) -> np.ndarray:
    return model.predict(X)["prediction"].to_numpy(dtype=float)


CASES = [
    ("diabetes", {"max_depth": 4}),
    ("diabetes", {"min_samples_leaf": 5}),
    ("diabetes", {"min_samples_split": 30, "max_depth": 6}),
    ("diabetes", {"max_leaf_nodes": 12}),
    ("diabetes", {"ccp_alpha": 40.0, "min_samples_leaf": 3}),
    ("diabetes", {"min_impurity_decrease": 5.0}),
    ("diabetes", {"min_weight_fraction_leaf": 0.02, "min_samples_leaf": 0.01}),
    ("friedman1", {}),
    ("friedman1", {"max_leaf_nodes": 20, "min_samples_leaf": 4}),
    ("friedman1", {"max_depth": 5, "ccp_alpha": 0.2}),
    ("nulls", {"max_depth": 5}),
    ("nulls", {"min_samples_leaf": 10}),
    ("nulls", {"max_leaf_nodes": 15}),
    ("indicators", {"max_depth": 6}),
    ("indicators", {"min_samples_leaf": 4, "ccp_alpha": 0.01}),
    ("diabetes", {"criterion": "friedman_mse", "max_depth": 5}),
    ("nulls", {"criterion": "friedman_mse", "max_leaf_nodes": 12}),
    ("diabetes", {"criterion": "poisson", "max_depth": 5}),
    ("diabetes", {"criterion": "poisson", "max_leaf_nodes": 10, "min_samples_leaf": 3}),
    ("friedman1", {"criterion": "poisson", "ccp_alpha": 0.01}),
    ("nulls", {"criterion": "poisson", "min_samples_leaf": 5}),
    ("counts", {"criterion": "poisson"}),
    ("counts", {"criterion": "poisson", "max_depth": 4, "min_weight_fraction_leaf": 0.01}),
]


@pytest.mark.parametrize(("name", "params"), CASES, ids=[f"{n}-{p}" for n, p in CASES])
def test_same_tree_as_sklearn(name, params):
    X, y = DATA[name]()
    ours, theirs = fit_both(X, y, **params)
    assert same_tree(theirs, ours, list(X.columns)) is None
    if exact_tree(theirs, ours, list(X.columns)):
        np.testing.assert_allclose(
            predictions(ours, X), theirs.predict(X), rtol=1e-12, atol=1e-9
        )


def test_sample_weight_as_sklearn():
    X, y = diabetes()
    weight = np.random.default_rng(2).integers(0, 4, len(y)).astype(float)
    ours, theirs = fit_both(X, y, max_depth=5, min_samples_leaf=3, sample_weight=weight)
    assert same_tree(theirs, ours, list(X.columns)) is None


@pytest.mark.parametrize("criterion", ["squared_error", "poisson"])
def test_pruning_path_as_sklearn(criterion):
    X, y = diabetes()
    ours, theirs = fit_both(X, y, min_samples_leaf=5, criterion=criterion)
    path = theirs.cost_complexity_pruning_path(X, y)
    from sqltree.pruning import cost_complexity_pruning_path

    mine = cost_complexity_pruning_path(ours.root, criterion)
    np.testing.assert_allclose(mine["ccp_alphas"], path.ccp_alphas, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(mine["impurities"], path.impurities, rtol=1e-9)


def test_target_offset_by_1e9_grows_the_same_tree():
    X, y = diabetes()
    near, theirs = fit_both(X, y, max_depth=6)
    far = sqltree.train(X.assign(target=y + 1e9), "target", task="regression", max_depth=6)
    assert same_tree(theirs, near, list(X.columns)) is None
    # scikit-learn's tree of the unshifted target is the right one: its own sums of y*y near
    # 1e18 keep no digit of a spread near 100
    assert same_tree(theirs, far, list(X.columns), offset=1e9) is None
    a, b = list(near.root.walk()), list(far.root.walk())
    assert [n.split for n in a] == [n.split for n in b]
    assert [n.n_samples for n in a] == [n.n_samples for n in b]
    for m, n in zip(a, b, strict=True):
        assert abs((n.value - 1e9) - m.value) < 1e-5
        assert n.impurity == pytest.approx(m.impurity, rel=1e-6, abs=1e-6)


def test_ordered_scan_is_exact_at_any_target_scale():
    """The moments are fixed-point counts of a target centred and scaled below 1 by a power
    of two (``regression.target_scale``): a target times 2**-20 or 2**300 (exact in floating
    point), with fractional weights and unknown values, grows the same tree, its values and
    impurities scaled by the same powers of two, to the bit (a fixed scale of 2**-40 would
    round the small target's squares to a few units, and overflow on the large one). Smaller
    targets stop at scikit-learn's absolute impurity floor, ``EPSILON``, as scikit-learn's
    trees do."""
    X, y = with_nulls()
    X, y = X.head(300).reset_index(drop=True), y[:300]
    weight = np.random.default_rng(3).uniform(0.5, 2.0, len(y))

    def grown(scale: float) -> Model:
        frame = X.assign(target=y * scale, w=weight)
        return sqltree.train(frame, "target", task="regression", weight="w", plan="tables",
                             max_depth=5, min_samples_leaf=3)

    base = list(grown(1.0).root.walk())
    for k in (-20, 300):
        nodes = list(grown(2.0**k).root.walk())
        assert [n.split for n in nodes] == [n.split for n in base]
        for a, b in zip(base, nodes, strict=True):
            assert (a.n_samples, a.weight, a.unknown_branch) == (
                b.n_samples, b.weight, b.unknown_branch)
            assert b.value == a.value * 2.0**k
            assert b.impurity == a.impurity * 4.0**k


def test_friedman_improvement_is_friedmans_score():
    """Friedman's improvement ``wl wr (mean_l - mean_r)^2 / (wl + wr)``, which
    ``min_impurity_decrease`` compares with: the same splits as squared error, and a threshold
    that stops them where Friedman's score falls below it."""
    X, y = diabetes()
    model = sqltree.train(X.assign(target=y), "target", criterion="friedman_mse", max_depth=3)
    plain = sqltree.train(X.assign(target=y), "target", criterion="squared_error", max_depth=3)
    assert model.text() == plain.text()
    scores = []
    for node in model.root.walk():
        if node.is_leaf:
            continue
        left, right = node.children
        gap = left.value - right.value
        score = left.weight * right.weight * gap * gap / node.weight
        assert node.improvement == pytest.approx(score, rel=1e-9)
        scores.append(score)
    threshold = float(np.median(scores))
    cut = sqltree.train(X.assign(target=y), "target", criterion="friedman_mse", max_depth=3,
                        min_impurity_decrease=threshold)
    kept = [n.improvement for n in cut.root.walk() if not n.is_leaf]
    assert kept and min(kept) >= threshold and len(kept) < len(scores)


def test_binned_tree_cuts_where_sklearn_cuts():
    """With fewer distinct values than ``max_bins``, each bin is a value: the binned tree is
    scikit-learn's (the exact one), cut at bin edges (training values) that part each node's
    rows as its midpoints do."""
    X, y = friedman()
    X = _float32(X.round(1))
    exact, theirs = fit_both(X, y, max_depth=5)
    assert same_tree(theirs, exact, list(X.columns)) is None
    binned = sqltree.train(X.assign(target=y), "target", task="regression", max_depth=5,
                           max_bins=32)
    stack = [(exact.root, binned.root, np.ones(len(X), dtype=bool))]
    while stack:
        a, b, rows = stack.pop()
        assert a.n_samples == b.n_samples == rows.sum()
        assert a.value == pytest.approx(b.value, rel=1e-12)
        assert a.is_leaf == b.is_leaf
        if a.is_leaf:
            continue
        assert a.split.feature == b.split.feature
        values = X[a.split.feature].to_numpy()
        left = rows & (values <= a.split.threshold)
        assert b.split.threshold in set(values)
        assert (left == (rows & (values <= b.split.threshold))).all()
        stack += [(a.children[0], b.children[0], left),
                  (a.children[1], b.children[1], rows & ~left)]
    np.testing.assert_allclose(predictions(binned, X), predictions(exact, X), rtol=1e-12)


@pytest.mark.parametrize(
    ("target", "match"),
    [(np.r_[-1.0, np.ones(99)], "negative"), (np.zeros(100), "positive sum")],
)
def test_poisson_refuses_what_sklearn_refuses(target, match):
    frame = pd.DataFrame({"x": np.arange(100.0), "target": target})
    with pytest.raises(DataError, match=match):
        sqltree.train(frame, "target", criterion="poisson")
    with pytest.raises(ValueError, match="Poisson"):
        DecisionTreeRegressor(criterion="poisson").fit(frame[["x"]], target)


def test_nominal_values_ordered_by_mean_target():
    """Breiman: the best two-way partition of a nominal feature under squared error is a cut
    of its values in order of mean target; every partition is checked by brute force."""
    rng = np.random.default_rng(11)
    cats = np.array(list("abcdef"))
    c = rng.choice(cats, 400)
    effect = dict(zip(cats, [3.0, -1.0, 0.5, 2.0, -2.5, 0.0], strict=True))
    y = np.array([effect[v] for v in c]) + rng.normal(0, 1.0, 400)
    frame = pd.DataFrame({"c": c, "target": y})
    model = sqltree.train(frame, "target", task="regression", max_depth=1)
    left = set(model.root.split.groups[0])

    def sse(mask: np.ndarray) -> float:
        return float(((y[mask] - y[mask].mean()) ** 2).sum())

    best = min(
        sse(np.isin(c, list(s))) + sse(~np.isin(c, list(s)))
        for r in range(1, 6)
        for s in itertools.combinations(cats, r)
    )
    mask = np.isin(c, list(left))
    assert sse(mask) + sse(~mask) == pytest.approx(best, rel=1e-12)


def test_compiled_sql_equals_predict_on_every_row():
    X, y = with_nulls()
    model, _ = fit_both(X, y, max_depth=6)
    frame = X.assign(target=y)
    conn = duckdb.connect()
    conn.register("t", frame)
    sql = model.to_sql("duckdb", table="t")
    compiled = conn.execute(sql).fetchdf()["prediction"].to_numpy()
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
    walked = np.array([model.predict_row(r) for r in rows])
    np.testing.assert_array_equal(compiled, walked)
    np.testing.assert_array_equal(predictions(model, X), walked)
    for dialect in ("postgres", "spark", "sqlite", "bigquery", "tsql"):
        assert "CASE" in model.to_sql(dialect)


def test_text_rules_and_dot_show_value_weight_and_sd():
    X, y = diabetes()
    model, _ = fit_both(X, y, max_depth=2)
    leaf = next(model.root.leaves())
    text = model.text()
    assert f"weight {leaf.weight:.1f}" in text and ", sd " in text
    assert "value " in model.rules() and "coverage" in model.rules()
    assert "value " in model.graphviz()
    assert "task='regression'" in repr(model)
    # a Poisson tree's impurity is a deviance, not a variance: it prints as one
    poisson = sqltree.train(X.assign(target=y), "target", criterion="poisson", max_depth=1)
    leaf = poisson.root.children[0]
    assert f"deviance {leaf.impurity:.6f}" in poisson.text() and ", sd " not in poisson.text()


def test_model_file_round_trip(tmp_path):
    X, y = with_nulls()
    model, _ = fit_both(X, y, max_depth=4)
    path = tmp_path / "m.json"
    model.save(path)
    loaded = sqltree.load(path)
    assert loaded.task == "regression"
    assert loaded.to_sql() == model.to_sql()
    data = model.to_dict()
    del data["tree"][1]["value"]
    with pytest.raises(ModelFileError, match="value"):
        Model.from_dict(data)
    data = model.to_dict()
    data["classes"] = [1, 2]
    with pytest.raises(ModelFileError, match="classes"):
        Model.from_dict(data)


def test_criterion_alone_means_regression():
    X, y = diabetes()
    model = sqltree.train(X.assign(target=y), "target", algorithm="cart",
                          criterion="squared_error", max_depth=2)
    assert model.task == "regression" and model.root.value == pytest.approx(y.mean())


class _NoQueries:
    """A connection that fails on any use: options must be refused before a query."""


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"criterion": "absolute_error"}, UnsupportedError, "median"),
        ({"criterion": "gini"}, ValueError, "criterion"),
        ({"class_weight": "balanced"}, UnsupportedError, "class_weight"),
        ({"algorithm": "c4.5"}, UnsupportedError, "CART"),
        ({"min_cases": 3}, UnsupportedError, "min_cases"),
        ({"task": "clustering"}, ValueError, "task"),
        ({"max_leaf_nodes": 1}, ValueError, "max_leaf_nodes"),
    ],
)
def test_options_refused_before_any_query(kwargs, error, match):
    kwargs = {"task": "regression", **kwargs}
    with pytest.raises(error, match=match):
        sqltree.train("no_such_table", "y", connection=_NoQueries(), **kwargs)


def test_text_target_refused():
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0], "target": ["a", "b", "c"]})
    with pytest.raises(DataError, match="numeric"):
        sqltree.train(frame, "target", task="regression")


def test_nan_target_refused():
    conn = duckdb.connect()
    conn.execute("CREATE TABLE t AS SELECT x, CASE WHEN x = 2 THEN 'NaN'::DOUBLE "
                 "ELSE x END AS target FROM (VALUES (1.0), (2.0), (3.0)) v(x)")
    with pytest.raises(DataError, match="NaN"):
        sqltree.train("t", "target", task="regression", connection=conn)


def test_probabilities_refused():
    X, y = diabetes()
    model, _ = fit_both(X, y, max_depth=1)
    with pytest.raises(UnsupportedError):
        model.predict(X.head(), proba=True)


# -- engines -----------------------------------------------------------------------------------
def _small() -> tuple[pd.DataFrame, np.ndarray]:
    X, y = with_nulls()
    return X.head(200).reset_index(drop=True), y[:200]


def test_same_tree_on_every_engine(engine_factory):
    X, y = _small()
    frame = X.assign(target=y)
    engine, source = engine_factory(frame, "reg")
    ours, theirs = fit_both(X, y, connection=engine, source=source, max_depth=4,
                            min_samples_leaf=3)
    assert same_tree(theirs, ours, list(X.columns)) is None
    scored = ours.predict(source, connection=engine)
    by_row = scored.sort_values(list(X.columns)).reset_index(drop=True)
    expected = frame.assign(prediction=theirs.predict(X)).sort_values(list(X.columns))
    np.testing.assert_allclose(
        by_row["prediction"].to_numpy(dtype=float),
        expected["prediction"].to_numpy(), rtol=1e-12,
    )
    evaluation = ours.evaluate(source, connection=engine)
    assert evaluation.r2 == pytest.approx(theirs.score(X, y), rel=1e-9)
    assert evaluation.count == len(y)


def test_poisson_tree_on_every_engine(engine_factory):
    """The Poisson histogram's ``w*y*LN(y)`` (0 for y = 0) and the zero-sum rule in each
    engine's SQL: a count target with many zeros."""
    X, y = counts()
    X, y = X.head(200).reset_index(drop=True), y[:200]
    engine, source = engine_factory(X.assign(target=y), "poisson_reg")
    ours, theirs = fit_both(X, y, connection=engine, source=source, criterion="poisson",
                            max_depth=3, min_samples_leaf=2)
    assert same_tree(theirs, ours, list(X.columns)) is None


def test_nominal_tree_on_every_engine(engine_factory):
    rng = np.random.default_rng(4)
    c = rng.choice(list("pqrst"), 150)
    y = np.array([{"p": 1.0, "q": 4.0, "r": 2.0, "s": 4.5, "t": 0.0}[v] for v in c])
    frame = pd.DataFrame({"c": c, "x": rng.normal(size=150).round(2),
                          "target": y + rng.normal(0, 0.5, 150)})
    engine, source = engine_factory(frame, "nominal_reg")
    model = sqltree.train(source, "target", task="regression", connection=engine, max_depth=3)
    reference = sqltree.train(frame, "target", task="regression", max_depth=3)
    assert model.text() == reference.text()


# -- split_scores(task="regression") -----------------------------------------------------------
def _variance_decrease(y: np.ndarray, left: np.ndarray) -> float:
    """The variance decrease of sending ``left`` rows left, in numpy."""
    n = len(y)
    return float(np.var(y) - left.sum() / n * np.var(y[left])
                 - (~left).sum() / n * np.var(y[~left]))


def test_regression_split_scores_are_the_variance_decrease():
    X, y = diabetes()
    X = X[["bmi", "bp", "s5"]].head(120)
    y = y[:120]
    rng = np.random.default_rng(2)
    frame = X.assign(group=rng.choice(["a", "b", "c", "d"], len(y)), target=y)
    scores = sqltree.split_scores(frame, target="target", task="regression")
    assert set(scores["attribute"]) == {"bmi", "bp", "s5", "group"}
    for row in scores.itertuples():
        if row.kind == "continuous":
            left = frame[row.attribute].to_numpy() <= row.threshold
        else:
            left = frame[row.attribute].isin(row.left).to_numpy()
            assert sorted([*row.left, *row.right]) == ["a", "b", "c", "d"]
        assert row.variance_decrease == pytest.approx(_variance_decrease(y, left), rel=1e-9,
                                                       abs=1e-9)
        assert row.w_left == left.sum() and row.w_right == (~left).sum()
    # every cut between adjacent values of a continuous feature, each side in mean order
    assert (scores["attribute"] == "bmi").sum() == frame["bmi"].nunique() - 1
    assert (scores["attribute"] == "group").sum() == 3
    # the best is the root's split of a regression tree, as scikit-learn grows it
    best = scores.loc[scores["variance_decrease"].idxmax()]
    stump = DecisionTreeRegressor(max_depth=1).fit(X, y)
    assert best["attribute"] == X.columns[stump.tree_.feature[0]]
    assert best["threshold"] == pytest.approx(stump.tree_.threshold[0], abs=1e-6)
    improvement = stump.tree_.impurity[0] - sum(
        stump.tree_.weighted_n_node_samples[c] / len(y) * stump.tree_.impurity[c] for c in (1, 2))
    assert best["variance_decrease"] == pytest.approx(improvement, rel=1e-9)


def test_regression_split_scores_with_weights_and_unknown_values():
    frame = pd.DataFrame({"x": [1.0, 2.0, None, 4.0, 5.0, 6.0],
                          "w": [1.0, 2.0, 1.0, 1.0, 3.0, 1.0],
                          "t": [1.0, 1.5, 3.0, 4.0, 5.0, 5.5]})
    scores = sqltree.split_scores(frame, target="t", task="regression", weight="w")
    y, w = frame["t"].to_numpy(), frame["w"].to_numpy()

    def weighted_var(mask: np.ndarray) -> float:
        return float(np.average((y[mask] - np.average(y[mask], weights=w[mask])) ** 2,
                                weights=w[mask]))

    everything = np.ones(len(y), dtype=bool)
    for row in scores.itertuples():
        x = frame["x"].to_numpy()
        left = (x <= row.threshold) | (np.isnan(x) & row.unknown_left)
        share = w[left].sum() / w.sum()
        expected = weighted_var(everything) - share * weighted_var(left) - (
            1 - share) * weighted_var(~left)
        assert row.variance_decrease == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert set(scores["unknown_left"]) == {True, False}


@on_engines(sqlite=True)
def test_regression_split_scores_on_every_engine(engine_factory):
    rng = np.random.default_rng(6)
    frame = pd.DataFrame({"x": rng.integers(0, 8, 40).astype(float),
                          "c": rng.choice(["p", "q", "r"], 40),
                          "t": rng.normal(size=40).round(3)})
    engine, source = engine_factory(frame, "scores_reg")
    got = sqltree.split_scores(source, target="t", task="regression", connection=engine)
    expected = sqltree.split_scores(frame, target="t", task="regression")
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-12, atol=1e-12)
