"""The command line's forests and boosting: ``sqltree train --forest N`` and ``--boost N``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

import sqltree
from sqltree.cli import main
from tests.helpers import GOLF, GOLF_NUMERIC, read_csv


def run(capsys, *args) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_train_a_forest_with_its_out_of_bag_score_and_save_it(capsys, tmp_path):
    path = tmp_path / "forest.json"
    status, out, err = run(capsys, "train", GOLF, "-t", "play", "--forest", "7", "--oob",
                           "--max-features", "2", "--random-state", "3", "-o", path)
    assert status == 0
    assert "Ensemble of 7 trees" in out
    assert "out-of-bag score" in out
    assert "trees 1-7, level 0" in err  # progress per batch of trees and level
    saved = json.loads(path.read_text())
    assert saved["options"]["algorithm"] == "random-forest"
    assert saved["options"]["max_features"] == 2
    assert saved["options"]["random_state"] == 3


def test_train_boosted_trees_reports_each_round(capsys):
    status, out, err = run(capsys, "train", GOLF, "-t", "play", "--boost", "3",
                           "--min-samples-leaf", "1", "--learning-rate", "0.5")
    assert status == 0
    assert "3 rounds; training loss" in out
    assert "round 1: training loss" in err


@pytest.mark.parametrize(("args", "message"), [
    (["--oob"], "--oob apply to --forest or --boost"),
    (["--forest", "3", "--algorithm", "cart"], "--algorithm"),
    (["--forest", "3", "--folds", "1"], "folds must be a whole number of at least 2"),
    (["--boost", "3", "--folds", "3", "--cf", "0.1"], "cf apply to single trees"),
    (["--forest", "3", "--max-features", "most"], "--max-features"),
    (["--boost", "3", "--cf", "0.1"], "cf"),
    (["--forest", "3", "--learning-rate", "0.2", "--no-early-stopping"],
     "--learning-rate, --no-early-stopping apply to --boost, not --forest"),
    (["--boost", "3", "--oob", "--max-features", "2"],
     "--max-features, --oob apply to --forest, not --boost"),
])
def test_ensemble_flags_are_checked_before_training(capsys, args, message):
    status, _, err = run(capsys, "train", GOLF, "-t", "play", *args)
    assert status == 2
    assert message in err


@pytest.mark.parametrize(("flags", "source", "options"), [
    (["--forest", "3", "--random-state", "1", "-t", "play"], GOLF,
     {"target": "play", "algorithm": "random-forest", "n_estimators": 3, "random_state": 1}),
    (["--boost", "3", "--min-samples-leaf", "1", "-t", "humidity", "--task", "regression"],
     GOLF_NUMERIC, {"target": "humidity", "task": "regression",
                    "algorithm": "gradient-boosting", "max_iter": 3, "min_samples_leaf": 1}),
], ids=["forest", "boost-regression"])
def test_folds_print_an_ensembles_cross_validation(capsys, flags, source, options):
    status, out, err = run(capsys, "train", source, *flags, "--folds", "3", "--seed", "4")
    assert status == 0, err
    expected = sqltree.cross_validate(str(source), folds=3, seed=4, **options)
    assert all(isinstance(m, sqltree.Ensemble) for m in expected.models)
    summary, block = out.split("\n\n", 1)
    task = options.get("task", "classification")
    assert summary.startswith(f"Ensemble of 3 trees from sqltree: {task}")
    assert block == f"{expected}\n\n"  # the block a tree's cross-validation prints
    assert [line.split(":")[0] for line in err.splitlines() if line.startswith("fold")] == [
        "fold 1", "fold 2", "fold 3"]
    # --quiet prints the block alone
    status, out, err = run(capsys, "train", source, *flags, "--folds", "3", "--seed", "4", "-q")
    assert (status, out, err) == (0, f"{expected}\n\n", "")


def test_a_boostings_test_fraction_and_test_source_print_their_evaluations(capsys):
    flags = ["--boost", "3", "--min-samples-leaf", "1", "--learning-rate", "0.5"]
    options = {"algorithm": "gradient-boosting", "max_iter": 3, "min_samples_leaf": 1,
               "learning_rate": 0.5}
    status, out, err = run(capsys, "train", GOLF, "-t", "play", *flags, "--test-fraction",
                           "0.3")
    assert status == 0, err
    model, held_out = sqltree.holdout(str(GOLF), "play", test_fraction=0.3, **options)
    assert out.endswith(f"\n\n{held_out}\n\n")
    assert f"Ensemble of {model.n_trees} trees" in out
    status, out, err = run(capsys, "train", GOLF, "-t", "play", *flags, "--test", GOLF, "-q")
    assert status == 0, err
    trained = sqltree.train(str(GOLF), "play", **options)
    assert out == f"{trained.evaluate(str(GOLF), title='Evaluation on test set')}\n\n"


# -- predict and evaluate a saved forest or boosting ---------------------------------------------
TRAINED = {
    "forest": ["--forest", "5", "--max-features", "2", "--random-state", "1"],
    "boost": ["--boost", "3", "--min-samples-leaf", "1", "--learning-rate", "0.5"],
}


@pytest.fixture(scope="module")
def ensembles(tmp_path_factory) -> dict[str, Path]:
    """A forest and a boosting of golf's classes, and a boosting of golf's humidity (a
    regression), each trained by the command line and saved."""
    folder = tmp_path_factory.mktemp("ensembles")
    paths = {}
    for name, flags in TRAINED.items():
        paths[name] = folder / f"{name}.json"
        assert main(["train", str(GOLF), "-t", "play", *flags, "-q", "-o",
                     str(paths[name])]) == 0
    paths["regression"] = folder / "regression.json"
    assert main(["train", str(GOLF_NUMERIC), "-t", "humidity", "--task", "regression",
                 "--features", "outlook,temperature", "--features", "wind,play",
                 "--boost", "4", "--min-samples-leaf", "1", "--learning-rate", "0.5", "-q",
                 "-o", str(paths["regression"])]) == 0
    return paths


@pytest.mark.parametrize("name", list(TRAINED))
def test_predict_an_ensemble_gives_the_library_rows(capsys, ensembles, name):
    model = sqltree.load(ensembles[name])
    assert isinstance(model, sqltree.Ensemble)
    expected = model.predict(str(GOLF), proba=True)
    assert expected is not None
    status, out, err = run(capsys, "predict", ensembles[name], GOLF, "--proba")
    assert status == 0, err
    assert out == expected.to_csv(index=False)  # every row, every digit
    # and the library's numpy scoring of the same rows agrees
    scored = pd.read_csv(io.StringIO(out))
    assert list(scored["prediction"]) == list(model.predict_frame(expected))
    assert np.allclose(scored[["proba_no", "proba_yes"]].to_numpy(),
                       model.predict_proba_frame(expected), rtol=1e-12, atol=0)
    status, out, err = run(capsys, "predict", ensembles[name], GOLF)
    assert status == 0, err
    assert out == model.predict(str(GOLF)).to_csv(index=False)  # type: ignore[union-attr]


@pytest.mark.parametrize("name", list(TRAINED))
def test_evaluate_an_ensemble_gives_the_library_figures(capsys, ensembles, name, tmp_path):
    model = sqltree.load(ensembles[name])
    expected = model.evaluate(str(GOLF), title=f"Evaluation on {GOLF}")
    status, out, err = run(capsys, "evaluate", ensembles[name], GOLF, "--json")
    assert status == 0, err
    document = json.loads(out)
    assert document == json.loads(expected.to_json())  # every figure, as a tree's are given
    assert document["title"] == f"Evaluation on {GOLF}"
    assert document["rows"] == expected["rows"] == 14
    assert document["trees"] == model.n_trees and document["classes"] == ["no", "yes"]
    # the accuracy counts the rows `sqltree predict` gets right
    scored_path = tmp_path / "scored.csv"
    assert main(["predict", str(ensembles[name]), str(GOLF), "-o", str(scored_path)]) == 0
    scored = pd.read_csv(scored_path)
    right = int((scored["prediction"] == scored["play"]).sum())
    assert document["correct"] == right and document["accuracy"] == right / 14

    status, out, err = run(capsys, "evaluate", ensembles[name], GOLF)
    assert status == 0, err
    assert out == f"{expected}\n"  # the block a tree's evaluation prints
    lines = out.splitlines()
    assert lines[:2] == [f"=== Evaluation on {GOLF} ===", ""]
    assert lines[2].split()[:4] == ["Correctly", "Classified", "Instances", str(right)]
    assert "=== Detailed Accuracy By Class ===" in lines
    assert "=== Confusion Matrix ===" in lines
    # the model was trained without a weight column: --unweighted changes nothing
    assert run(capsys, "evaluate", ensembles[name], GOLF, "--unweighted")[1] == out


def test_evaluate_a_boosting_at_a_threshold(capsys, ensembles):
    model = sqltree.load(ensembles["boost"])
    proba = model.predict_proba_frame(read_csv(GOLF))[:, 1]
    assert proba.max() < 0.95  # no row's probability of "yes" reaches the threshold
    status, out, err = run(capsys, "evaluate", ensembles["boost"], GOLF, "--threshold", "0.95",
                           "--json")
    assert status == 0, err
    document = json.loads(out)
    assert document["threshold"] == 0.95
    assert document["confusion_matrix"] == [[5, 0], [9, 0]]  # every row predicted "no"
    assert document["roc_auc"] == model.evaluate(str(GOLF))["roc_auc"]  # the scores stay


def test_evaluate_an_ensemble_by_a_weight_column(capsys, ensembles, weighted_golf):
    status, out, err = run(capsys, "evaluate", ensembles["forest"], weighted_golf,
                           "--weight", "w", "--json")
    assert status == 0, err
    document = json.loads(out)
    assert document["weight_column"] == "w"
    assert document["total_weight"] == float(pd.read_csv(weighted_golf)["w"].sum())


def test_a_regression_ensemble_predicts_and_evaluates_as_the_library(capsys, ensembles):
    path = ensembles["regression"]
    model = sqltree.load(path)
    assert model.is_regression
    status, out, err = run(capsys, "predict", path, GOLF_NUMERIC)
    assert status == 0, err
    expected = model.predict(str(GOLF_NUMERIC))
    assert out == expected.to_csv(index=False)  # type: ignore[union-attr]
    scored = pd.read_csv(io.StringIO(out))
    assert np.allclose(scored["prediction"], model.predict_frame(expected), rtol=1e-12, atol=0)

    figures = model.evaluate(str(GOLF_NUMERIC), title=f"Evaluation on {GOLF_NUMERIC}")
    status, out, err = run(capsys, "evaluate", path, GOLF_NUMERIC, "--json")
    assert status == 0, err
    document = json.loads(out)
    assert document == json.loads(figures.to_json())
    assert document["count"] == figures["rows"] == 14
    assert document["root_mean_squared_error"] == figures["rmse"]
    assert document["mean_absolute_error"] == figures["mae"]
    assert document["r2"] == figures["r2"]
    errors = scored["prediction"] - scored["humidity"]
    assert figures["rmse"] == pytest.approx(float(np.sqrt((errors ** 2).mean())), rel=1e-12)
    status, out, err = run(capsys, "evaluate", path, GOLF_NUMERIC)
    assert status == 0, err
    assert out == f"{figures}\n"  # the block a regression tree's evaluation prints
    assert f"R squared                         {figures['r2']:14.6f}" in out
    assert out.rstrip().splitlines()[-1].split() == ["Total", "Number", "of", "Instances", "14"]
    # a threshold cuts class probabilities, which a regression has none of
    status, out, err = run(capsys, "evaluate", path, GOLF_NUMERIC, "--threshold", "0.5")
    assert (status, out) == (1, "") and "threshold= does not apply" in err


def test_predict_and_evaluate_an_ensemble_in_a_database(capsys, ensembles, tmp_path):
    database = tmp_path / "shop.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute(f"CREATE TABLE golf AS SELECT * FROM read_csv('{GOLF}', "
                    "auto_type_candidates=['BIGINT','DOUBLE','VARCHAR'])")
    model = sqltree.load(ensembles["forest"])
    status, out, err = run(capsys, "predict", ensembles["forest"], "golf", "--connect",
                           database, "--into", "scored", "--proba")
    assert status == 0 and out == "", err
    with duckdb.connect(str(database)) as con:
        got = con.execute("SELECT * FROM scored").df()
        expected = model.predict("golf", connection=con, proba=True)
    columns = list(expected.columns)  # type: ignore[union-attr]
    assert list(got.columns) == columns
    assert (got.sort_values(columns).reset_index(drop=True)
            .equals(expected.sort_values(columns).reset_index(drop=True)))  # type: ignore[union-attr]
    status, out, err = run(capsys, "evaluate", ensembles["forest"], "golf", "--connect",
                           database, "--json")
    assert status == 0, err
    with duckdb.connect(str(database)) as con:
        assert json.loads(out)["accuracy"] == model.evaluate("golf", connection=con)["accuracy"]


def test_an_imported_ensemble_file_is_predicted_and_evaluated(capsys, tmp_path):
    ensemble = pytest.importorskip("sklearn.ensemble")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=80), "b": rng.uniform(size=80)})
    frame["y"] = np.where(frame["a"] + frame["b"] > 0.5, "up", "down")
    estimator = ensemble.RandomForestClassifier(n_estimators=4, max_depth=3, random_state=0)
    estimator.fit(frame[["a", "b"]], frame["y"])
    model = sqltree.from_sklearn(estimator, feature_names=["a", "b"])
    model.target = "y"
    path, rows = tmp_path / "imported.json", tmp_path / "rows.parquet"
    model.save(path)
    frame.to_parquet(rows)
    status, out, err = run(capsys, "predict", path, rows)
    assert status == 0, err
    assert list(pd.read_csv(io.StringIO(out))["prediction"]) == list(
        estimator.predict(frame[["a", "b"]]))
    status, out, err = run(capsys, "evaluate", path, rows, "--json")
    assert status == 0, err
    assert json.loads(out)["accuracy"] == sqltree.load(path).evaluate(str(rows))["accuracy"]


@pytest.mark.parametrize(("name", "args", "message"), [
    ("forest", ["predict", "--leaf"], "--leaf is for a single tree, not an ensemble"),
    ("boost", ["predict", "--unknown", "majority"], "--unknown is for a single tree"),
    ("forest", ["predict", "--unknown", "fractional"], "--unknown is for a single tree"),
    ("regression", ["predict", "--proba"], "holds a regression ensemble, which predicts a number"),
    ("forest", ["evaluate", "--unknown", "majority"], "--unknown is for a single tree"),
])
def test_flags_of_single_trees_are_refused_for_ensembles_before_any_query(
        capsys, ensembles, name, args, message):
    # the source does not exist: reading it would fail with status 1, not this refusal
    command, *flags = args
    status, out, err = run(capsys, command, ensembles[name], "no_such_table", *flags)
    assert (status, out) == (2, "")
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_trees_still_take_the_single_tree_flags(capsys, tmp_path):
    path = tmp_path / "tree.json"
    sqltree.train(str(GOLF), target="play").save(path)
    status, out, err = run(capsys, "predict", path, GOLF, "--leaf", "--unknown", "majority")
    assert status == 0, err
    assert out.splitlines()[0].endswith(",leaf")
    status, out, err = run(capsys, "evaluate", path, GOLF, "--threshold", "0.5", "--json")
    assert status == 0 and json.loads(out)["accuracy"] == 1.0, err


# -- scores --features and --weight -------------------------------------------------------------
@pytest.fixture(scope="module")
def weighted_golf(tmp_path_factory) -> Path:
    """golf with a weight column and a column whose name holds a comma."""
    frame = pd.read_csv(GOLF)
    frame["w"] = [1.0 + (i % 3) for i in range(len(frame))]
    frame["gust,kmh"] = [10 + 7 * (i % 5) for i in range(len(frame))]
    path = tmp_path_factory.mktemp("scores") / "golf_weighted.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize(("flags", "options"), [
    (["--features", "outlook,humidity"], {"features": ["outlook", "humidity"]}),
    (["--features", "outlook", "--features", "gust\\,kmh,windy"],
     {"features": ["outlook", "gust,kmh", "windy"]}),
    (["--weight", "w"], {"weight": "w"}),
    (["--weight", "w", "--features", "temperature, gust\\,kmh"],
     {"weight": "w", "features": ["temperature", "gust,kmh"]}),
], ids=["features", "escaped-comma", "weight", "both"])
def test_scores_features_and_weight_are_split_scores_options(capsys, weighted_golf, flags,
                                                             options):
    status, out, err = run(capsys, "scores", weighted_golf, "-t", "play", *flags)
    assert status == 0, err
    expected = sqltree.split_scores(str(weighted_golf), target="play", **options)
    assert out == expected.to_string(index=False) + "\n"
    shown = set(expected["attribute"])
    assert shown <= set(options.get("features", shown))
    if "weight" in options:  # the weights change the scores, and are no feature
        assert "w" not in shown
        unweighted = sqltree.split_scores(str(weighted_golf), target="play",
                                          features=options.get("features"))
        assert not expected.equals(unweighted)


def test_regression_scores_take_features_and_weight(capsys, tmp_path):
    frame = pd.read_csv(GOLF_NUMERIC)
    frame["w"] = [1.0 + (i % 4) for i in range(len(frame))]
    path = tmp_path / "humidity_weighted.csv"
    frame.to_csv(path, index=False)
    status, out, err = run(capsys, "scores", path, "-t", "humidity", "--task", "regression",
                           "--features", "outlook,wind", "--weight", "w")
    assert status == 0, err
    expected = sqltree.split_scores(str(path), target="humidity", task="regression",
                                    features=["outlook", "wind"], weight="w")
    assert out == expected.to_string(index=False) + "\n"
    assert set(expected["attribute"]) == {"outlook", "wind"}
