"""``Model.evaluate``: one GROUP BY query whose figures equal scikit-learn's metrics computed
from the Python walk's predictions, the same on DuckDB, PostgreSQL and Spark."""

from __future__ import annotations

import json
import math

import duckdb
import numpy as np
import pandas as pd
import pytest
from sklearn import metrics

import sqltree
from sqltree.compiler import has_fractional
from sqltree.evaluation import EPS, weka_number
from tests.conftest import IN_CI
from tests.helpers import GOLF, _clean, assert_figures_are_scikit_learns, mixed_table, read_csv
from tests.weka import example, read_arff


def _weighted(rows: int = 1500) -> pd.DataFrame:
    frame = mixed_table(rows, seed=3)
    frame["w"] = [0.5 + (i * 7 % 5) / 2 for i in range(len(frame))]
    return frame


CASES = {
    "golf": (lambda: read_csv(GOLF), "play", {}),
    "iris": (lambda: read_arff(example("iris")).frame, "class", {}),
    "mixed, c4.5 with unknown values": (lambda: mixed_table(2000), "label", {"max_depth": 4}),
    "mixed, cart": (lambda: mixed_table(2000), "label", {"algorithm": "cart", "max_depth": 4}),
    "mixed, weighted": (_weighted, "label", {"weight": "w", "max_depth": 3}),
}


def _reference(model: sqltree.Model, frame: pd.DataFrame) -> tuple[list, list, np.ndarray]:
    """Actual classes, predictions and probabilities of the labelled rows, by the Python walk
    (no SQL)."""
    rows = [_clean(r) for r in frame.to_dict("records")]
    rows = [r for r in rows if r[model.target] is not None]
    return ([r[model.target] for r in rows], [model.predict_row(r) for r in rows],
            np.array([model.predict_proba_row(r) for r in rows]))


@pytest.mark.parametrize("name", CASES)
def test_figures_are_scikit_learns(name: str) -> None:
    load, target, options = CASES[name]
    frame = load()
    model = sqltree.train(frame, target=target, **options)
    evaluation = model.evaluate(frame)
    actual, predicted, proba = _reference(model, frame)
    weights = frame[options["weight"]].to_numpy() if "weight" in options else None
    labels = model.classes
    assert evaluation.classes == labels
    assert evaluation.weight == options.get("weight")
    assert_figures_are_scikit_learns(evaluation, actual, predicted, proba, weights)
    # Weka's relative errors, from the probabilities and the training prior (counts + 1)
    truth = np.array([[float(a == c) for c in labels] for a in actual])
    w = np.ones(len(actual)) if weights is None else weights
    prior = np.array(model.root.counts) + 1
    prior /= prior.sum()
    assert evaluation.relative_absolute_error == pytest.approx(
        100 * (w * np.abs(proba - truth).sum(axis=1)).sum()
        / (w * np.abs(prior - truth).sum(axis=1)).sum(), abs=1e-7)


def test_unknown_values_take_the_spread_path() -> None:
    """The mixed case above scores rows that stop at an unknown value (C4.5's spread)."""
    frame = mixed_table(2000)
    assert has_fractional(sqltree.train(frame, target="label", max_depth=4).root)


def test_rows_without_a_class_are_left_out_and_counted() -> None:
    frame = read_csv(GOLF)
    model = sqltree.train(frame, target="play")
    holes = frame.astype({"play": object})
    holes.loc[[1, 4, 6], "play"] = None
    evaluation = model.evaluate(holes)
    assert evaluation.rows == 11 and evaluation.rows_null_target == 3
    assert evaluation.total == 11
    assert "Rows with a NULL class (left out)         3" in str(evaluation)


def test_a_class_the_model_does_not_know_gets_probability_zero() -> None:
    frame = read_csv(GOLF)
    model = sqltree.train(frame, target="play")
    other = frame.copy()
    other.loc[[0, 3], "play"] = "maybe"
    with pytest.warns(UserWarning, match="2 rows hold classes the model was not trained on"):
        evaluation = model.evaluate(other)
    actual, predicted, proba = _reference(model, other)
    labels = ["maybe", *model.classes]
    assert evaluation.classes == labels
    assert np.allclose(evaluation.matrix, metrics.confusion_matrix(actual, predicted,
                                                                   labels=labels))
    padded = np.hstack([np.zeros((len(actual), 1)), proba])
    assert evaluation.log_loss == pytest.approx(
        metrics.log_loss(actual, padded, labels=labels), rel=1e-12)
    assert evaluation.log_loss == pytest.approx(-2 * math.log(EPS) / 14, rel=1e-12)


def test_weights_follow_the_model_unless_told_otherwise() -> None:
    frame = _weighted(400)
    model = sqltree.train(frame, target="label", weight="w", max_depth=2)
    weighted = model.evaluate(frame)
    assert weighted.weight == "w" and weighted.total == pytest.approx(frame["w"].sum())
    assert "\nWeights from column                    w\n" in str(weighted)
    counted = model.evaluate(frame, weight=False)
    assert counted.weight is None and counted.total == len(frame)
    frame["other"] = 2.0
    doubled = model.evaluate(frame, weight="other")
    assert doubled.total == 2 * len(frame) and doubled.accuracy == counted.accuracy


def test_json_holds_every_figure() -> None:
    frame = mixed_table(500)
    evaluation = sqltree.train(frame, target="label", max_depth=3).evaluate(frame)
    document = json.loads(evaluation.to_json())
    assert document["accuracy"] == pytest.approx(evaluation.accuracy)
    assert document["confusion_matrix"] == evaluation.matrix
    assert [c["class"] for c in document["per_class"]] == evaluation.classes
    assert set(document["weighted_avg"]) == {"tp_rate", "fp_rate", "precision", "recall",
                                             "f1", "support"}
    assert document["rows_null_target"] == 0 and document["weight_column"] is None


def test_report_reads_as_weka_prints_it() -> None:
    frame = read_csv(GOLF)
    model = sqltree.train(frame, target="play", max_depth=1, pruning=None)
    text = str(model.evaluate(frame, title="Evaluation on training set"))
    # outlook alone: overcast yes (4), rainy yes (3 of 5), sunny no (3 of 5)
    assert text == """\
=== Evaluation on training set ===

Correctly Classified Instances          10               71.4286 %
Incorrectly Classified Instances         4               28.5714 %
Kappa statistic                          0.3778
Mean absolute error                      0.3429
Root mean squared error                  0.414
Relative absolute error                 73.8462 %
Root relative squared error             86.3499 %
Log loss                                 0.4807
Matthews correlation                     0.3778
Balanced accuracy                        0.6889
ROC area                                 0.7778
PRC area                                 0.8466
Total Number of Instances               14

=== Detailed Accuracy By Class ===

               TP Rate  FP Rate  Precision  Recall  F1-score    Support  Class
                 0.600    0.222      0.600   0.600     0.600          5  no
                 0.778    0.400      0.778   0.778     0.778          9  yes
Weighted Avg.    0.714    0.337      0.714   0.714     0.714         14
Macro Avg.       0.689    0.311      0.689   0.689     0.689         14

=== Confusion Matrix ===

 a b   <-- classified as
 3 2 | a = no
 2 7 | b = yes"""


@pytest.mark.parametrize(("value", "width", "decimals", "text"), [
    (147, 12, 4, "    147     "),
    (0.97, 12, 4, "      0.97  "),
    (-0.04255, 12, 4, "     -0.0426"),
    (5.24815, 12, 4, "      5.2482"),
    (0.0, 12, 4, "      0     "),
    (50, 2, 0, "50"),
    (3, 3, 0, "  3"),
])
def test_numbers_are_written_as_weka_writes_them(value, width, decimals, text) -> None:
    assert weka_number(value, width, decimals) == text


# -- refusals --------------------------------------------------------------------------------------
def test_refusals_name_what_is_missing() -> None:
    frame = read_csv(GOLF)
    model = sqltree.train(frame, target="play")
    with pytest.raises(sqltree.DataError, match="the target 'play' is not in the source"):
        model.evaluate(frame.drop(columns="play"))
    with pytest.raises(sqltree.DataError, match=r"columns the tree tests .*'outlook'"):
        model.evaluate(frame.drop(columns="outlook"))
    with pytest.raises(sqltree.DataError, match="weight column 'w' is not in the source"):
        model.evaluate(frame, weight="w")
    frame["w"] = [1.0] * 13 + [-1.0]
    with pytest.raises(sqltree.DataError, match="1 rows have a NULL or negative weight"):
        model.evaluate(frame, weight="w")
    with pytest.raises(sqltree.DataError, match="no rows with a known class"):
        model.evaluate(frame.assign(play=None).astype({"play": object}))


def test_bad_options_are_refused_before_any_query() -> None:
    model = sqltree.train(read_csv(GOLF), target="play")
    closed = duckdb.connect()
    closed.close()  # any query on it would raise duckdb.ConnectionException
    for weight in ("", 3, None):
        with pytest.raises(ValueError, match="weight must be True, False or a column name"):
            model.evaluate(str(GOLF), connection=closed, weight=weight)


# -- every engine --------------------------------------------------------------------------------
def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            _same(a[key], b[key])
        elif isinstance(a[key], float):
            assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), key
        elif isinstance(a[key], list) and a[key] and isinstance(a[key][0], (list, dict)):
            assert len(a[key]) == len(b[key])
            for x, y in zip(a[key], b[key], strict=True):
                _same(x, y) if isinstance(x, dict) else np.testing.assert_allclose(x, y)
        else:
            assert a[key] == b[key], key


def test_evaluation_is_the_same_on_every_engine(engine_factory) -> None:
    frame = _weighted(300)
    frame.loc[[5, 17], "label"] = None
    model = sqltree.train(frame.dropna(subset=["label"]), target="label", weight="w",
                          max_depth=3)
    assert has_fractional(model.root)
    expected = model.evaluate(frame).to_dict()
    engine, source = engine_factory(frame)
    found = model.evaluate(source, connection=engine).to_dict()
    _same(found, expected)
    assert found["rows_null_target"] == 2 and found["weight_column"] == "w"


# -- Weka's J48 ----------------------------------------------------------------------------------
WEKA_SETS = ["weather.nominal", "iris", "labor", "breast-cancer", "diabetes"]


def _j48_training_block(path) -> tuple[list[str], str]:
    """The summary lines and the confusion matrix of J48's "Error on training data"."""
    from tests.weka import _java

    report = _java(["-t", str(path), "-no-cv"])
    block = report.split("=== Error on training data ===", 1)[1]
    summary, matrix = block.split("=== Confusion Matrix ===", 1)
    lines = [line.rstrip() for line in summary.strip().splitlines() if line.strip()]
    return lines, matrix.strip("\n").rstrip()


@pytest.mark.weka
@pytest.mark.parametrize("name", WEKA_SETS)
def test_training_evaluation_is_j48s(name: str, tmp_path) -> None:
    from tests.weka import have_weka, write_arff

    if not have_weka():
        if IN_CI:
            pytest.fail("CI needs java and weka.jar for the J48 comparison (see .ci/run)")
        pytest.skip("java or weka.jar is missing")
    arff = read_arff(example(name))
    path = tmp_path / f"{name}.arff"
    write_arff(arff.frame, path, arff.target)
    weka_summary, weka_matrix = _j48_training_block(path)
    evaluation = sqltree.train(arff.frame, target=arff.target).evaluate(arff.frame)
    text = str(evaluation)
    summary = text.split("\n\n")[1].splitlines()
    ours = ("Log loss", "Matthews correlation", "Balanced accuracy", "ROC area", "PRC area")
    assert [line for line in summary if not line.startswith(ours)] == weka_summary
    assert text.split("=== Confusion Matrix ===\n\n", 1)[1] == weka_matrix


def test_a_decision_threshold_and_the_threshold_curve_are_scikit_learns() -> None:
    frame = mixed_table(2000)
    frame = frame[frame["label"].isin(frame["label"].unique()[:2])]
    model = sqltree.train(frame, target="label", algorithm="cart", max_depth=4)
    actual, _, proba = _reference(model, frame)
    positive = model.classes[1]
    y = np.array([a == positive for a in actual])
    for threshold in (0.2, 0.5, 0.8):
        evaluation = model.evaluate(frame, threshold=threshold)
        predicted = np.where(proba[:, 1] >= threshold, positive, model.classes[0])
        assert np.allclose(evaluation.matrix, metrics.confusion_matrix(
            actual, predicted, labels=model.classes))
        assert evaluation.to_dict()["threshold"] == threshold
    curve = model.evaluate(frame).threshold_curve()
    fpr, tpr, thresholds = metrics.roc_curve(y, proba[:, 1], drop_intermediate=False)
    assert [r["threshold"] for r in curve] == pytest.approx(list(thresholds[1:]), abs=1e-12)
    assert [r["recall"] for r in curve] == pytest.approx(list(tpr[1:]), abs=1e-12)
    assert [r["fp_rate"] for r in curve] == pytest.approx(list(fpr[1:]), abs=1e-12)
    with pytest.raises(sqltree.OptionError, match="threshold= needs a model of two classes"):
        sqltree.train(read_arff(example("iris")).frame, target="class").evaluate(
            read_arff(example("iris")).frame, threshold=0.5)
