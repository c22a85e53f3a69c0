"""``Ensemble.evaluate`` is a tree's evaluation over the ensemble's scoring SQL: its figures
equal scikit-learn's metrics of ``predict_proba_frame`` and ``predict_frame`` on the same rows,
for a forest and boosting, two classes and three, on DuckDB, PostgreSQL and SQLite; regression
ensembles give a regression tree's figures."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn import metrics

import sqltree
from sqltree.errors import OptionError, UnsupportedError
from tests.helpers import assert_figures_are_scikit_learns, mixed_table, on_engines

EVERY_ENGINE = on_engines(exclude=("spark",), sqlite=True)

MODELS = {
    "forest": {"algorithm": "random-forest", "n_estimators": 5, "max_depth": 4,
               "random_state": 0},
    "boosting": {"algorithm": "gradient-boosting", "max_iter": 5, "max_leaf_nodes": 6,
                 "learning_rate": 0.3},
}


def _rows(classes: str) -> pd.DataFrame:
    """mixed_table's rows (NULLs in a continuous and a nominal feature, noisy labels), with
    its three classes or two of them."""
    frame = mixed_table(800, seed=5)
    if classes == "binary":
        frame["label"] = np.where(frame["label"] == "q", "yes", "no")
    return frame


@pytest.fixture(scope="module")
def trained() -> dict[tuple[str, str], tuple[pd.DataFrame, sqltree.Ensemble]]:
    out = {}
    for classes in ("binary", "multiclass"):
        frame = _rows(classes)
        for name, options in MODELS.items():
            out[name, classes] = frame, sqltree.train(frame, target="label", **options)
    return out


@EVERY_ENGINE
@pytest.mark.parametrize("classes", ["binary", "multiclass"])
@pytest.mark.parametrize("name", list(MODELS))
def test_figures_are_scikit_learns(engine_factory, trained, name, classes):
    frame, model = trained[name, classes]
    assert len(model.classes) == (2 if classes == "binary" else 3)
    engine, source = engine_factory(frame, "rows")
    evaluation = model.evaluate(source, connection=engine)
    assert evaluation.classes == evaluation.score_classes == model.classes
    actual = frame["label"].tolist()
    assert_figures_are_scikit_learns(evaluation, actual, list(model.predict_frame(frame)),
                                     model.predict_proba_frame(frame))
    # Weka's relative errors: against the training class distribution the model records
    # (here the same rows as evaluated), each class's weight plus one, as Weka's prior
    y = np.array([model.classes.index(c) for c in actual])
    onehot = np.eye(len(model.classes))[y]
    prior = np.asarray(model.stats["class_weights"]) + 1.0
    prior /= prior.sum()
    assert model.stats["class_weights"] == [float((y == k).sum())
                                            for k in range(len(model.classes))]
    p = model.predict_proba_frame(frame)
    assert evaluation.relative_absolute_error == pytest.approx(
        100 * np.abs(p - onehot).sum() / np.abs(prior - onehot).sum(), rel=1e-9)
    assert evaluation.root_relative_squared_error == pytest.approx(
        100 * np.sqrt(((p - onehot) ** 2).sum() / ((prior - onehot) ** 2).sum()), rel=1e-9)


def test_an_imported_ensembles_relative_errors_are_unknown(trained):
    # no training class distribution is recorded by scikit-learn's forest
    from sklearn.ensemble import RandomForestClassifier

    frame = pd.DataFrame({"a": np.arange(60.0), "target": ["x", "y", "z"] * 20})
    forest = RandomForestClassifier(3, max_depth=2, random_state=0).fit(frame[["a"]],
                                                                        frame["target"])
    evaluation = sqltree.from_sklearn(forest, feature_names=["a"]).evaluate(frame)
    assert evaluation.relative_absolute_error is None
    assert evaluation.root_relative_squared_error is None


def test_weighted_figures_are_scikit_learns(trained):
    frame, model = trained["forest", "multiclass"]
    frame = frame.assign(w=[0.5 + (i * 7 % 5) / 2 for i in range(len(frame))])
    evaluation = model.evaluate(frame, weight="w")
    assert evaluation.weight == "w" and evaluation.total == pytest.approx(frame["w"].sum())
    assert_figures_are_scikit_learns(evaluation, frame["label"].tolist(),
                                     list(model.predict_frame(frame)),
                                     model.predict_proba_frame(frame), frame["w"].to_numpy())


@pytest.mark.parametrize("name", list(MODELS))
def test_a_threshold_predicts_the_second_class_from_that_probability(trained, name):
    frame, model = trained[name, "binary"]
    evaluation = model.evaluate(frame, threshold=0.3)
    positive = model.predict_proba_frame(frame)[:, 1] >= 0.3
    predicted = np.where(positive, model.classes[1], model.classes[0])
    assert evaluation["threshold"] == 0.3
    assert evaluation.matrix == metrics.confusion_matrix(
        frame["label"], predicted, labels=model.classes).astype(float).tolist()
    assert evaluation.log_loss == model.evaluate(frame).log_loss  # the probabilities stay


def test_a_threshold_needs_two_classes(trained):
    frame, model = trained["boosting", "multiclass"]
    with pytest.raises(OptionError, match="two classes"):
        model.evaluate(frame, threshold=0.5)


def test_the_block_and_keys_are_a_trees(trained):
    frame, model = trained["boosting", "binary"]
    tree = sqltree.train(frame, target="label", max_depth=3)
    mine, theirs = model.evaluate(frame), tree.evaluate(frame)
    assert set(mine.to_dict()) == {*theirs.to_dict(), "trees"}
    assert mine["trees"] == model.n_trees

    def labels(text: str) -> list[str]:  # each line's words before its first number
        return [" ".join(w for w in line.split() if not w[0].isdigit() and w != "?")
                for line in text.splitlines()]

    assert labels(str(mine)) == labels(str(theirs))


def test_the_keys_an_ensemble_evaluation_had_are_kept(trained):
    frame, model = trained["forest", "binary"]
    evaluation = model.evaluate(frame)
    assert evaluation["rows"] == len(frame) == evaluation.rows
    assert evaluation["accuracy"] == evaluation.accuracy
    assert evaluation["log_loss"] == evaluation.log_loss


# -- regression ---------------------------------------------------------------------------------
REGRESSION = {
    "forest": {"algorithm": "random-forest", "n_estimators": 5, "max_depth": 4,
               "random_state": 0},
    "boosting": {"algorithm": "gradient-boosting", "max_iter": 5, "max_leaf_nodes": 6},
}


@pytest.fixture(scope="module")
def regressions() -> dict[str, tuple[pd.DataFrame, sqltree.Ensemble]]:
    frame = mixed_table(800, seed=6).assign(y=lambda f: f["b"] * 3.0 + 1e6)  # far from 0
    frame.loc[::50, "y"] = None  # rows without a target are counted, not evaluated
    features = ["a", "c", "d", "e"]
    return {name: (frame, sqltree.train(frame.dropna(subset=["y"]), target="y",
                                        task="regression", features=features, **options))
            for name, options in REGRESSION.items()}


@EVERY_ENGINE
@pytest.mark.parametrize("name", list(REGRESSION))
def test_regression_figures_are_scikit_learns(engine_factory, regressions, name):
    frame, model = regressions[name]
    engine, source = engine_factory(frame, "numbers")
    evaluation = model.evaluate(source, connection=engine)
    known = frame.dropna(subset=["y"])
    y, predicted = known["y"].to_numpy(), model.predict_frame(known)
    assert evaluation.count == len(known) and evaluation.rows_null_target == 16
    assert evaluation.mean_squared_error == pytest.approx(
        metrics.mean_squared_error(y, predicted), rel=1e-9)
    assert evaluation.root_mean_squared_error == pytest.approx(
        metrics.root_mean_squared_error(y, predicted), rel=1e-9)
    assert evaluation.mean_absolute_error == pytest.approx(
        metrics.mean_absolute_error(y, predicted), rel=1e-9)
    assert evaluation.r2 == pytest.approx(metrics.r2_score(y, predicted), abs=1e-9)


def test_regression_gives_a_regression_trees_figures(regressions):
    frame, model = regressions["boosting"]
    tree = sqltree.train(frame.dropna(subset=["y"]), target="y", task="regression",
                         features=["a", "c", "d", "e"], max_depth=3)
    mine, theirs = model.evaluate(frame), tree.evaluate(frame)
    assert type(mine) is type(theirs)
    assert set(mine.to_dict()) == {*theirs.to_dict(), "trees"}
    assert [line[:34] for line in str(mine).splitlines()] == [
        line[:34] for line in str(theirs).splitlines()]
    # the keys an ensemble's evaluation had
    assert (mine["rows"], mine["rmse"], mine["mae"], mine["r2"]) == (
        mine.count, mine.root_mean_squared_error, mine.mean_absolute_error, mine.r2)


def test_regression_refuses_a_threshold(regressions):
    frame, model = regressions["forest"]
    with pytest.raises(UnsupportedError, match="threshold"):
        model.evaluate(frame, threshold=0.5)
