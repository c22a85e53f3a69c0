"""The command line's forests and boosting: ``sqltree train --forest N`` and ``--boost N``."""

from __future__ import annotations

import json

import pytest

from sqltree.cli import main
from tests.helpers import GOLF


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
    (["--forest", "3", "--folds", "3"], "sqltree evaluate"),
    (["--forest", "3", "--max-features", "most"], "--max-features"),
    (["--boost", "3", "--cf", "0.1"], "cf"),
])
def test_ensemble_flags_are_checked_before_training(capsys, args, message):
    status, _, err = run(capsys, "train", GOLF, "-t", "play", *args)
    assert status == 2
    assert message in err
