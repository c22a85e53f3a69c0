"""A regression tree's evaluation (one aggregate query over the scoring SQL) against
scikit-learn's metrics; cross-validation and hold-out of regression trees; the command line's
``--task regression``."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("sklearn")
from sklearn.datasets import load_diabetes
from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score

import sqltree
from sqltree.cli import main
from sqltree.regression_evaluation import RegressionEvaluation


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    X, y = load_diabetes(return_X_y=True, as_frame=True)
    return X.assign(target=y)


def figures(truth, predicted, weight=None) -> dict[str, float]:
    return {
        "rmse": mean_squared_error(truth, predicted, sample_weight=weight) ** 0.5,
        "mae": mean_absolute_error(truth, predicted, sample_weight=weight),
        "r2": r2_score(truth, predicted, sample_weight=weight),
    }


def assert_figures(evaluation: RegressionEvaluation, expected: dict[str, float]) -> None:
    assert evaluation.root_mean_squared_error == pytest.approx(expected["rmse"], rel=1e-9)
    assert evaluation.mean_absolute_error == pytest.approx(expected["mae"], rel=1e-9)
    assert evaluation.r2 == pytest.approx(expected["r2"], rel=1e-9)


def test_figures_are_sklearns_with_weights_and_null_targets(frame):
    rng = np.random.default_rng(1)
    weighted = frame.assign(w=rng.integers(1, 4, len(frame)).astype(float))
    model = sqltree.train(weighted, "target", task="regression", weight="w", max_depth=4)
    test = weighted.assign(target=weighted.target.mask(rng.random(len(frame)) < 0.1))
    evaluation = model.evaluate(test)
    known = test.target.notna().to_numpy()
    predicted = model.predict(test)["prediction"].to_numpy()[known]
    assert_figures(evaluation, figures(test.target[known], predicted, test.w[known]))
    assert evaluation.count == known.sum()
    assert evaluation.rows_null_target == (~known).sum()
    text = str(model.evaluate(test, weight=False, title="Held out"))
    assert text.startswith("=== Held out ===\n\nRoot mean squared error")
    assert "R squared" in text and "Ignored Class Unknown Instances" in text
    as_dict = json.loads(evaluation.to_json())
    assert as_dict["count"] == evaluation.count and as_dict["r2"] == evaluation.r2


def test_r2_of_a_target_offset_by_1e9_keeps_its_digits(frame):
    """R²'s total sum of squares is taken about the training mean: raw sums of y*y near
    1e18 would keep no digit of a spread near 100."""
    shifted = frame.assign(target=frame.target + 1e9)
    model = sqltree.train(frame, "target", task="regression", max_depth=4)
    far = sqltree.train(shifted, "target", task="regression", max_depth=4)
    near_r2 = model.evaluate(frame).r2
    assert far.evaluate(shifted).r2 == pytest.approx(near_r2, abs=1e-6)


def test_cross_validation_pools_the_folds(frame):
    cv = sqltree.cross_validate(frame, "target", folds=4, task="regression", max_depth=3,
                                criterion="poisson")
    assert isinstance(cv.pooled, RegressionEvaluation)
    assert cv.settings["stratified"] is False  # a number has no classes to deal by
    folds = sqltree.assign_folds(frame, "target", folds=4, stratified=False)
    truth, predicted = [], []
    for i, model in enumerate(cv.models):
        rows = folds[folds.fold == i + 1].drop(columns="fold")
        truth.append(rows.target.to_numpy())
        predicted.append(model.predict(rows)["prediction"].to_numpy())
    assert_figures(cv.pooled, figures(np.concatenate(truth), np.concatenate(predicted)))
    assert cv.pooled.count == len(frame)
    assert "R2" in cv.fold_table() and "Cross-validation" in str(cv)
    model, held_out = sqltree.holdout(frame, "target", task="regression", max_depth=3)
    assert held_out.count == int(len(frame) * 0.3) and held_out.extra["train_rows"] > 0


def run(capsys, *args) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def test_command_line_trains_predicts_and_evaluates(capsys, tmp_path, frame):
    data = tmp_path / "diabetes.csv"
    frame.to_csv(data, index=False)
    model = tmp_path / "m.json"
    status, out, err = run(capsys, "train", data, "-t", "target", "--task", "regression",
                           "--criterion", "friedman_mse", "--max-depth", "3", "-o", model)
    assert status == 0, err
    assert ": value " in out and "=== Evaluation on training set ===" in out
    status, out, err = run(capsys, "predict", model, data, "-o", tmp_path / "scored.csv")
    assert status == 0, err
    scored = pd.read_csv(tmp_path / "scored.csv")
    expected = sqltree.load(model).predict(frame)["prediction"]
    np.testing.assert_allclose(scored.prediction, expected, rtol=1e-12)
    status, out, err = run(capsys, "evaluate", model, data, "--json")
    evaluation = json.loads(out)
    assert_figures(sqltree.load(model).evaluate(frame), {
        "rmse": evaluation["root_mean_squared_error"], "mae": evaluation["mean_absolute_error"],
        "r2": evaluation["r2"]})
    status, out, err = run(capsys, "train", data, "-t", "target", "--criterion", "poisson",
                           "--max-depth", "2", "-q", "--folds", "3")
    assert status == 0 and "=== Cross-validation ===" in out, err
    # absolute_error never trains, so the command line does not offer it (train() explains why)
    status, out, err = run(capsys, "train", data, "-t", "target", "--task", "regression",
                           "--criterion", "absolute_error")
    assert status == 2 and "absolute_error" in err and "invalid choice" in err
