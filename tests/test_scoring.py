"""Scoring: the compiled SQL gives the predictions and probabilities of the tree in Python.

The trees are trained once on DuckDB (growth on every engine is test_engines' and
test_c45's business); the compiled SQL then scores the same rows loaded into every engine.
"""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

import sqltree
from sqltree.compiler.walk import merge_uniform
from tests.helpers import (
    DATA,
    GOLF,
    mixed_table,
    python_predictions,
    read_csv,
)


def scoring_matches_python(model, source, connection=None):
    scored = model.predict(source, connection=connection)
    expected = python_predictions(model, scored.drop(columns=["prediction"]))
    assert list(scored["prediction"]) == expected
    return scored


@pytest.mark.parametrize("path", sorted(DATA.glob("*.csv")), ids=lambda p: p.stem)
@pytest.mark.parametrize("algorithm", ["id3", "c4.5"])
def test_scoring_sql_equals_python_on_examples(engine_factory, path, algorithm):
    frame = read_csv(path)
    target = frame.columns[-1]
    model = sqltree.train(str(path), target=target, algorithm=algorithm)
    engine, source = engine_factory(frame, path.stem)
    scored = scoring_matches_python(model, source, connection=engine)
    assert len(scored) == len(frame)


@pytest.mark.parametrize("missing", ["fractional", "majority", "drop"])
def test_scoring_sql_equals_python_on_10k_mixed_rows(engine_factory, missing):
    frame = mixed_table(10_000)
    model = sqltree.train(frame, target="label", missing=missing, max_depth=6)
    engine, source = engine_factory(frame, "mixed")
    assert model.n_leaves > 10
    scored = scoring_matches_python(model, source, connection=engine)
    accuracy = (scored.prediction == scored.label).mean()
    assert accuracy > 0.8
    proba = model.predict(source, proba=True, connection=engine)
    cols = model.proba_columns()
    assert proba[cols].sum(axis=1).round(9).eq(1.0).all()


def test_many_nulls_scoring_sql_equals_python(engine_factory):
    frame = mixed_table(4_000, seed=7)
    for i, name in enumerate(["a", "b", "c", "d", "e"]):
        frame.loc[frame.index % (3 + i) == 0, name] = None
    model = sqltree.train(frame, target="label", max_depth=5)
    engine, source = engine_factory(frame, "nulls")
    assert any(n.split is not None and n.unknown_branch is None for n in model.root.walk())
    scored = model.predict(source, proba=True, connection=engine)
    expected = python_predictions(model, frame)
    assert list(scored["prediction"]) == expected
    rows = frame.to_dict("records")
    for i in range(0, len(rows), 97):
        want = model.predict_proba_row({k: (None if pd.isna(v) else v) for k, v in rows[i].items()})
        got = scored.loc[i, model.proba_columns()].tolist()
        assert got == pytest.approx(want, abs=1e-12)


def test_scoring_a_table_in_place():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE golf AS SELECT * FROM read_csv(?, auto_type_candidates="
        "['BIGINT','DOUBLE','VARCHAR'])", [str(GOLF)],
    )
    model = sqltree.train("golf", target="play", connection=con)
    con.execute(model.to_sql("duckdb", table="golf", view="scored_golf"))
    from_view = con.execute("SELECT play, prediction FROM scored_golf").fetchall()
    assert all(play == prediction for play, prediction in from_view) and len(from_view) == 14
    assert model.predict("golf", connection=con, into="golf_scored") is None
    assert con.execute("SELECT count(*) FROM golf_scored WHERE play = prediction").fetchone() == (
        14,
    )
    with pytest.raises(sqltree.DataError, match="prediction"):
        model.predict("golf_scored", connection=con)


def test_label_sql_merges_subtrees_that_give_one_label(engine_factory):
    """A subtree whose leaves all predict one class, and whose tests send each row to one
    branch, is a single leaf of the label's CASE (an engine that evaluates a CASE a batch at a
    time pays for every branch some row takes); labels, probabilities and leaf ids stay those
    of the whole tree on every row."""
    frame = mixed_table(2_000, seed=3)
    model = sqltree.train(frame, target="label", algorithm="cart", max_depth=5)
    merged = merge_uniform(model.root, lambda n: n.label)
    assert sum(1 for _ in merged.leaves()) == 19 < model.n_leaves == 31
    assert model.to_sql().count(" WHEN ") < model.to_sql(output="leaf").count(" WHEN ")
    engine, source = engine_factory(frame, "merged")
    scored = model.predict(source, proba=True, connection=engine)
    assert list(scored["prediction"]) == python_predictions(model, frame)
    rows = frame.to_dict("records")
    for i in range(0, len(rows), 50):
        row = {k: (None if pd.isna(v) else v) for k, v in rows[i].items()}
        assert scored.loc[i, model.proba_columns()].tolist() == pytest.approx(
            model.predict_proba_row(row), abs=1e-12)
