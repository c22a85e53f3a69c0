"""Permutation importance in the engine: a hash shuffles each feature among the rows, and the
model's score on the shuffled rows is counted by the evaluation query."""

from __future__ import annotations

import sqlite3
from collections import Counter

import duckdb
import pytest

import sqltree
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.permutation import _shuffled
from tests.helpers import mixed_table, python_predictions

FRAME = mixed_table(600)


@pytest.fixture(scope="module")
def model() -> sqltree.Model:
    return sqltree.train(FRAME, target="label", max_depth=4)


def test_a_shuffle_moves_one_column_and_keeps_its_values(model):
    con = duckdb.connect()
    con.register("frame", FRAME)
    con.execute("CREATE TABLE t AS SELECT *, row_number() OVER () AS n FROM frame")
    feature = model.root.split.feature
    engine = DuckDBEngine(con)
    query = _shuffled(sqlglot_table("t"), list(FRAME.columns), feature, "n", "1|0|x|")
    shuffled = con.execute(engine.render(query)).df()
    assert list(shuffled.columns) == list(FRAME.columns)
    assert Counter(shuffled[feature].dropna()) == Counter(FRAME[feature].dropna())
    assert shuffled[feature].isna().sum() == FRAME[feature].isna().sum()
    others = [c for c in FRAME.columns if c != feature]
    ordered = shuffled.sort_values(others).reset_index(drop=True)
    assert ordered[others].equals(FRAME.sort_values(others).reset_index(drop=True)[others])
    assert not shuffled[feature].equals(con.execute("SELECT * FROM t ORDER BY n").df()[feature])


def sqlglot_table(name):
    from sqlglot import exp

    return exp.to_table(name)


def test_importances_are_the_score_drops_of_the_shuffled_rows(model):
    result = sqltree.permutation_importance(model, FRAME, n_repeats=3, seed=7)
    assert result.baseline == pytest.approx(model.evaluate(FRAME).accuracy, abs=1e-12)
    tested = {n.split.feature for n in model.root.walk() if n.split}
    assert set(result.importances) == set(model.feature_names)
    for name, drops in result.importances.items():
        assert len(drops) == 3
        if name not in tested:
            assert drops == [0.0, 0.0, 0.0]
    assert result.mean[model.root.split.feature] > 0
    again = sqltree.permutation_importance(model, FRAME, n_repeats=3, seed=7)
    assert again.importances == result.importances  # a hash, not a random generator
    other = sqltree.permutation_importance(model, FRAME, n_repeats=3, seed=8)
    assert other.importances != result.importances


def test_one_repeat_equals_the_python_walk_on_the_same_rows(model):
    from sqlglot import exp

    from sqltree.compiler.blocks import column as quoted
    from sqltree.crossval import order_key, row_hash

    engine = DuckDBEngine()
    relation = engine.connection.register("frame", FRAME) and exp.to_table("frame")
    schema = engine.columns(relation)
    order = [row_hash(schema, 7, None)] + [
        k for k in (order_key(quoted(n), t) for n, t in schema) if k]
    numbered = exp.Select(expressions=[*[quoted(n) for n, _ in schema], exp.Alias(
        this=exp.Window(this=exp.RowNumber(), order=exp.Order(expressions=[
            exp.Ordered(this=o, nulls_first=True) for o in order])),
        alias=exp.to_identifier("__sqltree_row", quoted=True))]).from_(relation)
    engine.connection.execute(f"CREATE TABLE numbered AS {engine.render(numbered)}")
    feature = model.root.split.feature
    query = _shuffled(exp.to_table("numbered"), list(FRAME.columns), feature,
                      "__sqltree_row", f"7|0|{feature}|")
    rows = engine.connection.execute(engine.render(query)).df()
    predicted = python_predictions(model, rows)
    accuracy = sum(p == a for p, a in zip(predicted, rows["label"])) / len(rows)
    result = sqltree.permutation_importance(model, FRAME, n_repeats=1, seed=7)
    assert result.importances[feature][0] == pytest.approx(result.baseline - accuracy,
                                                           abs=1e-12)


def test_the_same_numbers_on_sqlite(model):
    lite = sqlite3.connect(":memory:")
    FRAME.to_sql("frame", lite, index=False)
    on_sqlite = sqltree.permutation_importance(model, "frame", connection=lite, n_repeats=2)
    on_duckdb = sqltree.permutation_importance(model, FRAME, n_repeats=2)
    assert on_sqlite.importances == pytest.approx(on_duckdb.importances, abs=1e-12)


def test_options_are_checked(model):
    with pytest.raises(sqltree.OptionError, match="n_repeats must be a whole number >= 1"):
        sqltree.permutation_importance(model, FRAME, n_repeats=0)


def test_cli_permutation_importances(tmp_path, capsys, model):
    from sqltree.cli import main

    path, data = tmp_path / "m.json", tmp_path / "rows.parquet"
    model.save(path)
    FRAME.to_parquet(data)
    assert main(["importances", str(path), "--kind", "permutation", "--source", str(data),
                 "--repeats", "2", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    expected = sqltree.permutation_importance(model, str(data), n_repeats=2, seed=7).mean
    top = max(expected, key=expected.get)
    assert out.startswith(f"{top} ") and f"{expected[top]:.6f}" in out
    assert main(["importances", str(path), "--kind", "permutation"]) == 2
    assert "--kind permutation and --source go together" in capsys.readouterr().err
