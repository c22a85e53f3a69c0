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
    C45Classifier,
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


# -- one import, a Model underneath ----------------------------------------------------------
def test_top_level_names():
    import sqltree
    import sqltree.estimator as est

    assert sqltree.DecisionTreeClassifier is est.DecisionTreeClassifier
    assert sqltree.C45Classifier is est.C45Classifier
    assert {"DecisionTreeClassifier", "C45Classifier"} <= set(sqltree.__all__)


def test_fitted_estimator_is_a_model(iris, tmp_path):
    import sqltree

    X, y = iris
    clf = DecisionTreeClassifier(max_depth=3).fit(X, y)
    assert isinstance(clf.model_, sqltree.Model)
    assert clf.model_.n_leaves == clf.get_n_leaves() and clf.model_.depth == clf.get_depth()
    assert clf.to_sql() == clf.model_.to_sql()
    query = clf.to_sql("postgres", table="flowers", view="scored")
    assert query.startswith("CREATE VIEW scored AS SELECT *, CASE WHEN")
    assert query.endswith("FROM flowers")
    path = tmp_path / "iris.json"
    clf.save(path)
    loaded = sqltree.load(path)
    assert loaded.text() == clf.model_.text() and loaded.rules() == clf.model_.rules()
    assert "digraph" in loaded.graphviz()


def test_compiled_sql_predicts_as_the_estimator(iris):
    X, y = iris
    X = X.copy()
    X.iloc[::9, 1] = np.nan
    for clf in (DecisionTreeClassifier(max_depth=4), C45Classifier()):
        clf.fit(X, y)
        scored = clf.model_.predict(X)
        np.testing.assert_array_equal(scored["prediction"].to_numpy(), clf.predict(X))


def test_c45_unknown_values_spread_as_the_model(iris):
    X, y = iris
    X = X.copy()
    X.iloc[::5, 3] = np.nan
    clf = C45Classifier().fit(X, y)
    test = X.copy()
    test.iloc[::2, 3] = np.nan
    proba = clf.predict_proba(test)
    rows = test.to_dict("records")
    expected = [clf.model_.predict_proba_row({k: (None if pd.isna(v) else v)
                                              for k, v in r.items()}) for r in rows]
    np.testing.assert_allclose(proba, expected, atol=1e-12)
    assert (proba.max(axis=1) < 1).any()  # some rows were spread over branches


def test_c45_is_sqltree_train(tmp_path):
    import sqltree

    golf = pd.read_csv("examples/data/golf.csv", dtype={"windy": str})
    X, y = golf.drop(columns="play"), golf["play"]
    for params, options in [
        ({}, {}),
        ({"unpruned": True}, {"pruning": None}),
        ({"min_cases": 1, "cf": 0.5, "subtree_raising": False},
         {"min_cases": 1, "cf": 0.5, "subtree_raising": False}),
    ]:
        clf = C45Classifier(**params).fit(X, y)
        model = sqltree.train("examples/data/golf.csv", target="play", **options)
        assert clf.model_.text() == model.text()
        assert clf.model_.to_sql() == model.to_sql() and clf.model_.target == "play"
    np.testing.assert_array_equal(clf.classes_, ["no", "yes"])
    assert clf.score(X, y) == 1.0


def test_c45_takes_train_s_option_names_and_the_old_ones_with_a_warning():
    golf = pd.read_csv("examples/data/golf.csv", dtype={"windy": str})
    X, y = golf.drop(columns="play"), golf["play"]
    new = C45Classifier(cf=0.5, min_cases=1).fit(X, y)
    with pytest.warns(FutureWarning, match="is deprecated") as caught:
        old = C45Classifier(confidence_factor=0.5, min_objects=1).fit(X, y)
    assert sorted(str(w.message).split(":")[0] for w in caught) == [
        "C45Classifier(confidence_factor=) is deprecated",
        "C45Classifier(min_objects=) is deprecated",
    ]
    assert old.model_.text() == new.model_.text()
    assert {"cf", "min_cases"} <= set(new.get_params())


def test_classifier_refuses_a_regression_criterion(iris):
    X, y = iris
    with pytest.raises(ValueError, match="criterion must be one of"):
        DecisionTreeClassifier(criterion="squared_error").fit(X, y)


def test_cart_nodes_keep_growth_facts(iris):
    X, y = iris
    clf = DecisionTreeClassifier(max_leaf_nodes=6).fit(X, y)
    order = clf.strategy_nodes()
    np.testing.assert_array_equal(clf.tree_.n_node_samples, [n.n_samples for n in order])
    np.testing.assert_allclose(clf.tree_.impurity, [n.impurity for n in order], atol=1e-12)
    assert clf.tree_.node_count == clf.model_.n_nodes == 11


def test_c45_options_checked():
    X, y = np.array([[0.0], [1.0], [2.0], [3.0]]), [0, 0, 1, 1]
    with pytest.raises(ValueError, match="cf must be in"):
        C45Classifier(cf=0.9).fit(X, y)
    with pytest.raises(ValueError, match="pruning"):
        C45Classifier(pruning="cost-complexity").fit(X, y)
    with pytest.raises(ValueError, match="missing"):
        C45Classifier(missing="mean").fit(X, y)


def test_grid_search(iris):
    from sklearn.model_selection import GridSearchCV

    X, y = iris
    search = GridSearchCV(
        DecisionTreeClassifier(), {"max_depth": [1, 3], "criterion": ["gini", "entropy"]}, cv=3
    ).fit(X, y)
    assert search.best_params_["max_depth"] == 3
    assert search.best_estimator_.model_.depth == 3


def test_evaluate_in_the_engine(iris):
    X, y = iris
    clf = DecisionTreeClassifier(max_depth=2).fit(X, y)
    report = clf.evaluate(X, y)
    assert report.accuracy == pytest.approx(clf.score(X, y))
    assert report.classes == [0, 1, 2] and report.total == len(X)
    source = X.assign(target=y)  # a source holding the target column, as a table would
    assert clf.evaluate(source).matrix == report.matrix
    w = np.where(y.to_numpy() == 2, 2.0, 1.0)
    weighted = clf.evaluate(X, y, sample_weight=w)
    assert weighted.total == pytest.approx(w.sum())
    assert weighted.accuracy == pytest.approx(clf.score(X, y, sample_weight=w))
    c45 = C45Classifier().fit(X.to_numpy(), y.to_numpy())
    assert c45.evaluate(X.to_numpy(), y).accuracy == pytest.approx(c45.score(X.to_numpy(), y))


def test_refused_feature_values():
    y = ["a", "b", "a", "b"]
    with pytest.raises(TypeError, match="holds a dict"):
        DecisionTreeClassifier().fit(pd.DataFrame({"c": [{"k": 1}, "x", "y", "z"]}), y)
    with pytest.raises(TypeError, match="mixes text with numbers"):
        DecisionTreeClassifier().fit(pd.DataFrame({"c": ["x", 1, "y", 2]}), y)
    with pytest.raises(ValueError, match="infinity"):
        DecisionTreeClassifier().fit(pd.DataFrame({"c": [1.0, np.inf, 2.0, 3.0]}), y)
    with pytest.raises(ValueError, match="one class"):
        DecisionTreeClassifier().fit(np.zeros((3, 1)), ["a", "a", "a"])


def test_messages_scikit_learn_users_know(iris):
    X, y = iris
    clf = DecisionTreeClassifier(max_depth=1).fit(X.to_numpy(), y)
    with pytest.raises(ValueError, match="X has 3 features, but DecisionTreeClassifier is "
                                         "expecting 4 features as input"):
        clf.predict(X.to_numpy()[:, :3])
    with pytest.raises(ValueError, match="Reshape your data"):
        clf.predict(X.to_numpy()[0])
    with pytest.raises(ValueError, match="requires y to be passed"):
        DecisionTreeClassifier().fit(X, None)
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        DecisionTreeClassifier().fit(X, np.linspace(0, 1, len(X)))
    with pytest.raises(ValueError, match="at least one non-zero"):
        DecisionTreeClassifier().fit(X, y, sample_weight=np.zeros(len(X)))
    from scipy import sparse

    with pytest.raises(TypeError, match=r"[Ss]parse"):
        DecisionTreeClassifier().fit(sparse.csr_matrix(X.to_numpy()), y)
    with pytest.raises(ValueError, match="Complex data not supported"):
        DecisionTreeClassifier().fit(X.to_numpy() + 1j, y)
    with pytest.warns(Warning, match="column-vector y"):
        DecisionTreeClassifier(max_depth=1).fit(X, y.to_numpy().reshape(-1, 1))


def test_fits_in_threads_use_their_own_database(iris):
    from concurrent.futures import ThreadPoolExecutor

    X, y = iris
    with ThreadPoolExecutor(2) as pool:
        fitted = list(pool.map(lambda d: DecisionTreeClassifier(max_depth=d).fit(X, y),
                               [1, 2, 3, 1, 2, 3]))
    assert [f.get_depth() for f in fitted] == [1, 2, 3, 1, 2, 3]
    assert fitted[0].to_sql() == fitted[3].to_sql()


def test_private_connection_keeps_the_training_settings():
    import sqltree
    from sqltree.engines.duckdb import DuckDBEngine

    con = DuckDBEngine.private_connection()

    def settings():
        return con.execute(
            "SELECT current_setting('perfect_ht_threshold'), "
            "current_setting('disabled_optimizers')"
        ).fetchall()[0]

    kept = settings()
    assert int(kept[0]) >= 20 and "build_side_probe_side" in kept[1]
    engine = DuckDBEngine(con)
    sqltree.train(pd.read_csv("examples/data/golf.csv"), target="play", connection=engine)
    assert settings() == kept  # nothing changed, nothing given back
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchall() == [
        (0,)
    ]


def test_target_named_after_y(iris):
    X, y = iris
    assert DecisionTreeClassifier(max_depth=1).fit(X, y).model_.target == "target"
    assert DecisionTreeClassifier(max_depth=1).fit(X, y.to_numpy()).model_.target == "y"
    clash = y.rename("petal width (cm)")
    assert DecisionTreeClassifier(max_depth=1).fit(X, clash).model_.target == (
        "petal width (cm)_1"
    )
