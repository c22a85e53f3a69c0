"""The command line end to end: train, predict and sql on a bundled example, and its help.

Bad input on the command line is tests/test_cli.py's concern.
"""

from __future__ import annotations

import io
import json
import shlex
import shutil
import subprocess
import sys

import pandas as pd
import pytest

import sqltree
from sqltree.cli import COMMAND_EXAMPLES, main
from tests.helpers import DATA, GOLF, GOLF_TREE, ROOT, close, mixed_table


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "sqltree.cli", *args], capture_output=True, text=True, cwd=cwd
    )


def test_cli_train_predict_sql_round_trip(tmp_path):
    model_path = tmp_path / "golf.json"
    out = run_cli("train", str(GOLF), "--target", "play", "-o", str(model_path))
    assert out.returncode == 0, out.stderr
    assert GOLF_TREE.rstrip("\n") in out.stdout
    assert "level 0" in out.stderr  # progress
    pred = run_cli("predict", str(model_path), str(GOLF))
    assert pred.returncode == 0, pred.stderr
    lines = pred.stdout.strip().splitlines()
    assert lines[0].endswith(",prediction") and len(lines) == 15
    assert all(line.split(",")[-1] == line.split(",")[-2] for line in lines[1:])
    sql = run_cli("sql", str(model_path), "--dialect", "snowflake")
    # the walk over known values, then C4.5's closed form for rows it leaves NULL
    assert sql.returncode == 0 and sql.stdout.startswith("COALESCE(CASE WHEN")
    bad = run_cli("train", str(GOLF), "--target", "nope")
    assert bad.returncode == 1 and "nope" in bad.stderr  # a data error (2: usage)
    help_text = run_cli("--help").stdout
    assert "train" in help_text and "predict" in help_text and "examples:" in help_text


@pytest.mark.parametrize(("flags", "plan"), [
    (["--plan", "select"], "select"),
    (["--plan", "tables"], "tables"),
    (["--plan", "tables", "--threshold-search", "bounded"], "tables"),
], ids=["select", "tables", "bounded"])
def test_train_flags_choose_the_plan_and_search_not_the_tree(flags, plan, tmp_path, capsys):
    """A small file on sqltree's own DuckDB grows in memory; the flags move it to a SQL plan
    or another threshold search, and the tree stays the same."""
    source = str(ROOT / "tests" / "data" / "iris.arff")
    paths = [tmp_path / "default.json", tmp_path / "flagged.json"]
    for path, extra in zip(paths, [[], flags], strict=True):
        status = main(["train", source, "-t", "class", "-a", "cart", "--max-depth", "4",
                       "-q", "-o", str(path), *extra])
        assert status == 0, capsys.readouterr().err
    default, flagged = (json.loads(p.read_text()) for p in paths)
    assert flagged["stats"]["plan"] == plan and default["stats"]["plan"] == "memory"
    assert flagged["tree"] == default["tree"]


# -- each command's examples ------------------------------------------------------------------
@pytest.mark.parametrize("command", sorted(COMMAND_EXAMPLES))
def test_every_command_help_ends_with_examples_that_run(command, tmp_path, monkeypatch,
                                                        capsys):
    status = main([command, "--help"])
    out = capsys.readouterr().out
    assert status == 0 and "\nexamples:\n" in out
    for line in COMMAND_EXAMPLES[command]:
        assert f"  {line}\n" in out
    monkeypatch.chdir(tmp_path)
    shutil.copytree(DATA, tmp_path / "examples" / "data")
    sqltree.train(str(GOLF), target="play").save(tmp_path / "golf.json")
    for line in COMMAND_EXAMPLES[command]:
        words = shlex.split(line)
        assert words[0] == "sqltree"
        assert main([*words[1:], "-q"] if command in QUIET else words[1:]) == 0, line
        out = capsys.readouterr().out
        assert out or "-o" in words, line


QUIET = {"predict", "sql"}
"""Commands whose progress display the examples leave on (quieted here, to keep stderr
clean; the flag changes nothing else)."""


# -- predict and evaluate score as the deployed SQL does --------------------------------------
@pytest.fixture(scope="module")
def with_unknowns(tmp_path_factory):
    """A C4.5 model whose tests spread unknown values, and a Parquet file of rows to score
    with NULLs and values no branch lists."""
    folder = tmp_path_factory.mktemp("unknowns")
    train = mixed_table(600, seed=7)
    train.loc[train.index % 4 == 0, "b"] = None
    model = sqltree.train(train, target="label", max_depth=4)
    assert any(not n.is_leaf and n.unknown_branch is None for n in model.root.walk())
    model.save(folder / "m.json")
    rows = mixed_table(200, seed=11)
    rows.loc[rows.index % 3 == 0, "b"] = None
    rows.loc[rows.index % 7 == 1, "d"] = "purple"
    rows.to_parquet(folder / "rows.parquet")
    return model, folder / "m.json", folder / "rows.parquet", rows


def python_rows(frame):
    return [{k: (None if pd.isna(v) else v) for k, v in r.items()}
            for r in frame.to_dict("records")]


@pytest.mark.parametrize("unknown", ["fractional", "majority"])
def test_predict_leaf_and_unknown(with_unknowns, unknown, capsys):
    model, model_path, rows_path, rows = with_unknowns
    expected = [model.leaf_row(r, unknown=unknown) for r in python_rows(rows)]
    assert (None in expected) == (unknown == "fractional")  # the exact form reaches no leaf
    model_path, rows_path = str(model_path), str(rows_path)
    assert main(["predict", model_path, rows_path, "--leaf", "--unknown", unknown, "-q"]) == 0
    scored = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(scored.columns) == [*rows.columns, "leaf"]
    assert [None if pd.isna(v) else int(v) for v in scored["leaf"]] == expected
    assert main(["predict", model_path, rows_path, "--unknown", unknown, "-q"]) == 0
    scored = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(scored["prediction"]) == [model.predict_row(r, unknown=unknown)
                                          for r in python_rows(rows)]


def test_evaluate_unknown_majority_scores_the_majority_sql(with_unknowns, capsys):
    model, model_path, rows_path, _ = with_unknowns
    assert main(["evaluate", str(model_path), str(rows_path), "--json",
                 "--unknown", "majority"]) == 0
    got = json.loads(capsys.readouterr().out)
    shown = str(rows_path)  # a path over 60 characters is shortened in the title
    title = f"Evaluation on {shown if len(shown) <= 60 else shown[:57] + '...'}"
    # The engine's parallel sums of probabilities may differ in the last bit run to run.
    assert close(got, json.loads(model.evaluate(str(rows_path), unknown="majority",
                                                title=title).to_json()), rel=1e-12)
    assert got != json.loads(model.evaluate(str(rows_path), title=title).to_json())
