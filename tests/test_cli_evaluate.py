"""The command line's evaluations: ``sqltree evaluate``, and ``sqltree train`` ending with the
training-set evaluation (as J48 does), ``--test``, ``--test-fraction`` and ``--folds``."""

from __future__ import annotations

import json
import subprocess
import sys

import duckdb
import pytest

import sqltree
from sqltree.cli import main
from tests.helpers import GOLF, GOLF_NUMERIC, GOLF_TREE


def run(capsys, *args) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "golf.json"
    sqltree.train(str(GOLF), target="play").save(path)
    return path


def test_train_ends_with_the_training_set_evaluation(capsys, tmp_path) -> None:
    status, out, err = run(capsys, "train", GOLF, "-t", "play", "-o", tmp_path / "m.json")
    assert status == 0, err
    tree, evaluation = out.split("\n\n=== Evaluation on training set ===\n\n")
    assert tree + "\n" == GOLF_TREE
    assert evaluation.startswith(
        "Correctly Classified Instances          14              100      %\n")
    assert "\n 5 0 | a = no\n 0 9 | b = yes\n" in evaluation


def test_quiet_train_prints_nothing(capsys, tmp_path) -> None:
    status, out, err = run(capsys, "train", GOLF, "-t", "play", "-q", "-o", tmp_path / "m.json")
    assert status == 0 and out == "", err
    assert (tmp_path / "m.json").exists()


def test_evaluate_prints_weka_block_or_json(capsys, model_file) -> None:
    status, out, err = run(capsys, "evaluate", model_file, GOLF)
    assert status == 0, err
    assert out.startswith(f"=== Evaluation on {GOLF} ===\n\nCorrectly Classified Instances")
    assert out == f"{sqltree.load(model_file).evaluate(str(GOLF), title=f'Evaluation on {GOLF}')}\n"
    status, out, err = run(capsys, "evaluate", model_file, GOLF, "--json")
    assert status == 0, err
    document = json.loads(out)
    assert document["accuracy"] == 1.0 and document["confusion_matrix"] == [[5, 0], [0, 9]]


def test_evaluate_reads_tables_of_a_database(capsys, model_file, tmp_path) -> None:
    database = tmp_path / "shop.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute(f"CREATE TABLE rows AS SELECT *, 2.0 AS w FROM read_csv('{GOLF}', "
                    "auto_type_candidates=['BIGINT','DOUBLE','VARCHAR'])")
    status, out, err = run(capsys, "evaluate", model_file, "rows", "--connect", database,
                           "--weight", "w", "--json")
    assert status == 0, err
    document = json.loads(out)
    assert document["weight_column"] == "w" and document["total_weight"] == 28.0
    status, out, err = run(capsys, "evaluate", model_file, "rows", "--connect", database,
                           "--unweighted", "--json")
    assert json.loads(out)["total_weight"] == 14.0


def test_test_source_is_evaluated_after_the_training_set(capsys) -> None:
    status, out, err = run(capsys, "train", GOLF, "-t", "play", "--test", GOLF)
    assert status == 0, err
    assert out.index("=== Evaluation on training set ===") < out.index(
        "=== Evaluation on test set ===")


def test_test_fraction_trains_on_the_rest(capsys, tmp_path) -> None:
    path = tmp_path / "m.json"
    status, out, err = run(capsys, "train", GOLF_NUMERIC, "-t", "play", "--test-fraction", "0.3",
                           "-o", path)
    assert status == 0, err
    assert "=== Evaluation on training set ===" not in out
    assert "=== Evaluation on test split ===" in out
    assert "Total Number of Instances                4\n" in out  # FLOOR(14 * 0.3) rows
    assert sqltree.load(path).stats["rows"] == 10
    _, expected = sqltree.holdout(str(GOLF_NUMERIC), "play", test_fraction=0.3)
    assert str(expected) in out


def test_folds_print_the_cross_validation(capsys) -> None:
    status, out, err = run(capsys, "train", GOLF_NUMERIC, "-t", "play", "--folds", "3",
                           "--seed", "4")
    assert status == 0, err
    expected = sqltree.cross_validate(str(GOLF_NUMERIC), "play", folds=3, seed=4)
    assert str(expected.pooled) in out and expected.fold_table() in out
    assert [line.split(":")[0] for line in err.splitlines() if line.startswith("fold")] == [
        "fold 1", "fold 2", "fold 3"]


@pytest.mark.parametrize(("flags", "message"), [
    (["--folds", "1"], "folds must be a whole number of at least 2"),
    (["--test-fraction", "1.5"], "test_fraction must be between 0 and 1"),
    (["--test-fraction", "0.3", "--folds", "3"], "does not go with --folds or --test"),
    (["--seed", "3"], "--seed applies to --folds and --test-fraction only"),
    (["--no-stratify"], "--no-stratify applies to --folds and --test-fraction only"),
])
def test_evaluation_flags_are_checked_before_training(capsys, tmp_path, flags, message):
    output = tmp_path / "m.json"
    status, out, err = run(capsys, "train", GOLF, "-t", "play", "-o", output, *flags)
    assert status == 2 and out == ""
    assert message in err and "Traceback" not in err
    assert "level 0" not in err and not output.exists()


def test_evaluate_end_to_end(tmp_path) -> None:
    """``python -m sqltree.cli``: train with cross-validation, save, evaluate the file."""
    model = tmp_path / "golf.json"
    done = subprocess.run(
        [sys.executable, "-m", "sqltree.cli", "train", str(GOLF), "-t", "play", "--folds", "2",
         "-o", str(model)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "=== Stratified cross-validation ===" in done.stdout
    assert "=== Per fold ===" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "sqltree.cli", "evaluate", str(model), str(GOLF), "--json"],
        capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["correct"] == 14.0


def test_evaluate_at_a_threshold(capsys, model_file) -> None:
    status, out, err = run(capsys, "evaluate", model_file, GOLF, "--threshold", "0.0", "--json")
    assert status == 0, err
    document = json.loads(out)  # every row predicted "yes", the second class
    assert document["threshold"] == 0.0 and document["confusion_matrix"] == [[0, 5], [0, 9]]
