"""The command line end to end: train, predict and sql on a bundled example, and its help.

Bad input on the command line is tests/test_cli.py's concern.
"""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import GOLF, GOLF_TREE


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
