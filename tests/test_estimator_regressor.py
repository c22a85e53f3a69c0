"""``sqltree.DecisionTreeRegressor`` against scikit-learn's: the same fitted tree through every
method and attribute scikit-learn users read, its exporters' output to the byte, and the SQL."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

pytest.importorskip("sklearn")
from sklearn import tree as sktree
from sklearn.datasets import load_diabetes
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

import sqltree
from sqltree import DecisionTreeRegressor
from sqltree.estimator import export_graphviz, export_text


@pytest.fixture(scope="module")
def diabetes() -> tuple[pd.DataFrame, np.ndarray]:
    X, y = load_diabetes(return_X_y=True, as_frame=True)
    # scikit-learn grows on float32 features: give both the values float32 holds
    return X.astype(np.float32).astype(np.float64), y.to_numpy()


PARAMS = [
    {"max_depth": 3},
    {"criterion": "poisson", "max_depth": 4, "min_samples_leaf": 3},
    {"max_leaf_nodes": 9},
]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
def test_fitted_tree_reads_as_sklearns(diabetes, params):
    X, y = diabetes
    ours = DecisionTreeRegressor(**params).fit(X, y)
    theirs = sktree.DecisionTreeRegressor(random_state=0, **params).fit(X, y)
    np.testing.assert_allclose(ours.predict(X), theirs.predict(X), rtol=1e-12)
    assert ours.score(X, y) == pytest.approx(theirs.score(X, y), rel=1e-12)
    np.testing.assert_array_equal(ours.apply(X), theirs.apply(X))
    assert (ours.decision_path(X) != theirs.decision_path(X)).nnz == 0
    assert (ours.get_depth(), ours.get_n_leaves()) == (theirs.get_depth(), theirs.get_n_leaves())
    np.testing.assert_allclose(ours.feature_importances_, theirs.feature_importances_,
                               rtol=1e-9, atol=1e-12)
    inner = theirs.tree_.children_left >= 0
    for name, array in ours.to_arrays().items():
        expected = getattr(theirs.tree_, name)
        if name == "missing_go_to_left":
            # a best-first builder leaves the side of a leaf it evaluated but never split
            array, expected = array[inner], expected[inner]
        np.testing.assert_allclose(array, expected, rtol=1e-9, atol=1e-9, err_msg=name)
    assert sktree.export_text(ours, feature_names=list(X.columns)) == sktree.export_text(
        theirs, feature_names=list(X.columns)
    )
    assert sktree.export_graphviz(ours) == sktree.export_graphviz(theirs)
    mine, path = ours.cost_complexity_pruning_path(X, y), theirs.cost_complexity_pruning_path(X, y)
    np.testing.assert_allclose(mine.ccp_alphas, path.ccp_alphas, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(mine.impurities, path.impurities, rtol=1e-9)


def test_plot_tree_draws_sklearns_boxes(diabetes):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, y = diabetes
    ours = DecisionTreeRegressor(max_depth=2).fit(X, y)
    theirs = sktree.DecisionTreeRegressor(max_depth=2, random_state=0).fit(X, y)
    texts = []
    for est in (ours, theirs):
        fig, ax = plt.subplots()
        texts.append([a.get_text() for a in sktree.plot_tree(est, ax=ax, filled=True)])
        plt.close(fig)
    assert texts[0] == texts[1] and "squared_error" in texts[0][0]


def test_sqltree_exporters_print_values_and_nominal_tests():
    rng = np.random.default_rng(3)
    colour = rng.choice(["red", "green", "blue"], 300)
    y = np.where(colour == "red", 5.0, 1.0) + rng.normal(0, 0.1, 300)
    X = pd.DataFrame({"colour": colour, "x": rng.random(300)})
    est = DecisionTreeRegressor(max_depth=1).fit(X, y)
    text = export_text(est)
    assert "colour in {red}" in text or "colour in {blue, green}" in text
    assert "value: [" in text and "class" not in text
    dot = export_graphviz(est, filled=True)
    assert "squared_error = " in dot and "fillcolor=" in dot and "class =" not in dot


def test_model_sql_and_evaluation(diabetes):
    X, y = diabetes
    est = DecisionTreeRegressor(max_depth=4).fit(X, pd.Series(y, name="progression"))
    assert est.model_.task == "regression" and est.model_.target == "progression"
    conn = duckdb.connect()
    conn.register("t", X)
    scored = conn.execute(est.to_sql(table="t")).fetchdf()["prediction"].to_numpy()
    np.testing.assert_allclose(scored, est.predict(X), rtol=1e-12)
    evaluation = est.evaluate(X, y)
    assert evaluation.r2 == pytest.approx(est.score(X, y), rel=1e-9)
    assert evaluation.count == len(y)


def test_in_a_pipeline_and_grid_search(diabetes):
    X, y = diabetes
    pipe = make_pipeline(FunctionTransformer(), DecisionTreeRegressor())
    search = GridSearchCV(pipe, {"decisiontreeregressor__max_depth": [2, 4]}, cv=2).fit(X, y)
    assert search.best_params_["decisiontreeregressor__max_depth"] in (2, 4)
    assert isinstance(sqltree.DecisionTreeRegressor(), DecisionTreeRegressor)


def test_refusals_name_the_parameter(diabetes):
    X, y = diabetes
    with pytest.raises(sqltree.UnsupportedError, match="median"):
        DecisionTreeRegressor(criterion="absolute_error").fit(X, y)
    with pytest.raises(sqltree.DataError, match="negative"):
        DecisionTreeRegressor(criterion="poisson").fit(X, y - 200)
    with pytest.raises(ValueError, match="splitter"):
        DecisionTreeRegressor(splitter="random").fit(X, y)
