"""The scikit-learn style estimator: contract, pipelines, inputs, arrays and exporters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

sklearn = pytest.importorskip("sklearn")
from sklearn import datasets  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import FunctionTransformer  # noqa: E402
from sklearn.tree import DecisionTreeClassifier as SKTree  # noqa: E402
from sklearn.tree import export_text as sk_export_text  # noqa: E402

from sqltree.estimator import (  # noqa: E402
    DecisionTreeClassifier,
    export_graphviz,
    export_text,
)
from tests.cart_oracle import sklearn_match  # noqa: E402


@pytest.fixture(scope="module")
def iris():
    X, y = datasets.load_iris(return_X_y=True, as_frame=True)
    X = X.astype(np.float32).astype(np.float64)
    return X, y


def test_params_round_trip():
    clf = DecisionTreeClassifier(max_depth=3, criterion="entropy")
    params = clf.get_params()
    assert params["max_depth"] == 3 and params["criterion"] == "entropy"
    assert params["ccp_alpha"] == 0.0 and params["class_weight"] is None
    clf.set_params(max_depth=5)
    assert clf.max_depth == 5
    copy = clone(clf)
    assert copy.get_params() == clf.get_params()
    assert not hasattr(copy, "tree_")


def test_fitted_attributes_from_frame(iris):
    X, y = iris
    clf = DecisionTreeClassifier(max_depth=2).fit(X, y)
    assert list(clf.feature_names_in_) == list(X.columns)
    assert clf.n_features_in_ == 4
    np.testing.assert_array_equal(clf.classes_, [0, 1, 2])
    proba = clf.predict_proba(X)
    assert proba.shape == (150, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert clf.get_depth() == 2 and clf.get_n_leaves() == 3


def test_ndarray_and_string_labels(iris):
    X, y = iris
    names = np.array(["setosa", "versicolor", "virginica"])[y.to_numpy()]
    clf = DecisionTreeClassifier(max_depth=3).fit(X.to_numpy(), names)
    assert not hasattr(clf, "feature_names_in_")
    assert set(clf.predict(X.to_numpy())) <= set(names)
    assert clf.score(X.to_numpy(), names) > 0.95


def test_pipeline_and_cross_validation(iris):
    X, y = iris
    pipe = make_pipeline(FunctionTransformer(), DecisionTreeClassifier(max_depth=3))
    scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.shape == (3,)
    assert scores.min() > 0.85


def test_to_arrays_matches_sklearn(iris):
    X, y = iris
    clf = DecisionTreeClassifier(max_depth=3).fit(X, y)
    verdict, seed = sklearn_match(lambda s: SKTree(random_state=s, max_depth=3), X, y, clf)
    assert verdict == "identical"
    theirs = SKTree(random_state=seed, max_depth=3).fit(X, y).tree_
    arrays = clf.to_arrays()
    for name in ("children_left", "children_right", "feature", "n_node_samples"):
        np.testing.assert_array_equal(arrays[name], getattr(theirs, name))
    for name in ("threshold", "impurity", "weighted_n_node_samples", "value"):
        np.testing.assert_allclose(arrays[name], getattr(theirs, name), atol=1e-9)
    np.testing.assert_array_equal(arrays["missing_go_to_left"], theirs.missing_go_to_left)


def test_feature_importances_as_sklearn(iris):
    X, y = iris
    clf = DecisionTreeClassifier(max_depth=3).fit(X, y)
    _, seed = sklearn_match(lambda s: SKTree(random_state=s, max_depth=3), X, y, clf)
    theirs = SKTree(random_state=seed, max_depth=3).fit(X, y)
    np.testing.assert_allclose(clf.feature_importances_, theirs.feature_importances_, atol=1e-12)


def test_export_text_as_sklearn(iris):
    X, y = iris
    clf = DecisionTreeClassifier(max_depth=3).fit(X, y)
    _, seed = sklearn_match(lambda s: SKTree(random_state=s, max_depth=3), X, y, clf)
    theirs = SKTree(random_state=seed, max_depth=3).fit(X, y)
    names = list(X.columns)
    assert export_text(clf, feature_names=names) == sk_export_text(theirs, feature_names=names)
    assert export_text(clf, feature_names=names, show_weights=True) == sk_export_text(
        theirs, feature_names=names, show_weights=True
    )
    assert "truncated branch" in export_text(clf, max_depth=1)


def test_export_graphviz(iris):
    X, y = iris
    clf = DecisionTreeClassifier(max_depth=2).fit(X, y)
    dot = export_graphviz(clf, class_names=["setosa", "versicolor", "virginica"])
    assert dot.startswith("digraph Tree {") and dot.rstrip().endswith("}")
    assert dot.count("->") == clf.tree_.node_count - 1
    assert "gini = 0.667" in dot and "samples = 150" in dot and "class = setosa" in dot


def test_nominal_columns_and_unseen_values():
    rng = np.random.default_rng(0)
    color = rng.choice(["red", "green", "blue", "black"], 400)
    size = rng.normal(0, 1, 400).round(2)
    y = np.where(np.isin(color, ["red", "black"]), "hot", "cold")
    X = pd.DataFrame({"color": color, "size": size})
    clf = DecisionTreeClassifier(max_depth=2).fit(X, y)
    assert clf.tree_.left_codes  # a subset split on color
    assert clf.score(X, y) == 1.0
    new = pd.DataFrame({"color": ["red", "purple", None], "size": [0.0, 0.0, 0.0]})
    pred = clf.predict(new)
    assert pred[0] == "hot" and set(pred) <= {"hot", "cold"}
    text = export_text(clf)
    assert "color in {" in text


def test_unknown_values_in_frame(iris):
    X, y = iris
    X = X.copy()
    X.iloc[::7, 2] = np.nan
    clf = DecisionTreeClassifier(max_depth=3).fit(X, y)
    verdict, _ = sklearn_match(lambda s: SKTree(random_state=s, max_depth=3), X, y, clf)
    assert verdict in ("identical", "identical up to ties")
    assert np.isfinite(clf.predict_proba(X)).all()


def test_wrong_number_of_features(iris):
    X, y = iris
    clf = DecisionTreeClassifier(max_depth=1).fit(X, y)
    with pytest.raises(ValueError):
        clf.predict(X.iloc[:, :3].to_numpy())


def test_not_fitted():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        DecisionTreeClassifier().predict([[1.0]])


def test_unsupported_settings(iris):
    X, y = iris
    with pytest.raises(ValueError):
        DecisionTreeClassifier(splitter="random").fit(X, y)
    with pytest.raises(ValueError):
        DecisionTreeClassifier(max_features=2).fit(X, y)


def test_pruning_path_bunch(iris):
    X, y = iris
    path = DecisionTreeClassifier().cost_complexity_pruning_path(X, y)
    assert path.ccp_alphas[0] == 0.0
    assert np.all(np.diff(path.ccp_alphas) >= 0)
    assert np.all(np.diff(path.impurities) >= -1e-12)
