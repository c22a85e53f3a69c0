"""Bad input gets a clear error, and odd identifiers are just names."""

from __future__ import annotations

import math

import duckdb
import pandas as pd
import pytest

import sqltree
from tests.helpers import GOLF, python_predictions, read_csv


def test_missing_target_column():
    with pytest.raises(sqltree.DataError, match="target column 'nope' is not in the source"):
        sqltree.train(str(GOLF), target="nope")


def test_missing_feature_column():
    with pytest.raises(sqltree.DataError, match="not in the source"):
        sqltree.train(str(GOLF), target="play", features=["outlook", "nope"])


def test_one_class():
    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0], "y": ["x", "x", "x"]})
    with pytest.raises(sqltree.DataError, match="single class"):
        sqltree.train(frame, target="y")


def test_empty_table():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (a DOUBLE, y VARCHAR)")
    with pytest.raises(sqltree.DataError, match="no rows"):
        sqltree.train("t", target="y", connection=con)


def test_all_null_target():
    frame = pd.DataFrame({"a": [1.0, 2.0], "y": pd.Series([None, None], dtype="object")})
    with pytest.raises(sqltree.DataError, match="NULL"):
        sqltree.train(frame, target="y")


def test_all_null_feature_column():
    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": [None] * 4, "y": list("xyxy")})
    frame["b"] = frame["b"].astype("float64")
    with pytest.raises(sqltree.DataError, match=r"all NULL.*\['b'\]"):
        sqltree.train(frame, target="y")


def test_null_targets_are_left_out_and_counted():
    frame = read_csv(GOLF)
    frame.loc[[0, 5], "play"] = None
    with pytest.warns(UserWarning, match="2 rows with a NULL target"):
        model = sqltree.train(frame, target="play")
    assert model.stats["rows_null_target"] == 2
    assert model.root.weight == 12


def test_unsupported_column_type():
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT [1, 2] AS l, 1.0 AS a, 'x' AS y UNION ALL "
                "SELECT [3], 2.0, 'z'")
    with pytest.raises(sqltree.UnsupportedError, match="'l'"):
        sqltree.train("t", target="y", connection=con)
    model = sqltree.train("t", target="y", connection=con, features=["a"], min_cases=1)
    assert model.feature_names == ["a"]


def test_negative_weights():
    frame = pd.DataFrame({"a": [1.0, 2.0], "w": [1.0, -1.0], "y": ["x", "z"]})
    with pytest.raises(sqltree.DataError, match="negative weight"):
        sqltree.train(frame, target="y", weight="w")


def test_unknown_source_kind():
    with pytest.raises(sqltree.UnsupportedError):
        sqltree.train(42, target="y")


def test_missing_file():
    with pytest.raises(sqltree.DataError, match="no file matches"):
        sqltree.train("nope/*.parquet", target="y")


def test_predict_needs_tested_columns():
    model = sqltree.train(str(GOLF), target="play")
    with pytest.raises(sqltree.DataError, match="outlook"):
        model.predict(pd.DataFrame({"x": [1]}))


ODD = {
    "outlook": 'out "look"',
    "temperature": "select",
    "humidity": "it's humid ü",
    "windy": "wind`y ]",
    "play": "pl ay",
}


def test_odd_identifiers_train_score_and_compile():
    frame = read_csv(GOLF).rename(columns=ODD)
    model = sqltree.train(frame, target="pl ay")
    plain = sqltree.train(str(GOLF), target="play")
    assert model.n_leaves == plain.n_leaves and model.root.split.feature == 'out "look"'
    scored = model.predict(frame)
    assert list(scored["prediction"]) == python_predictions(model, frame)
    for dialect in ["duckdb", "postgres", "spark", "tsql", "bigquery", "mysql", "sqlite"]:
        assert "wind" in model.to_sql(dialect)


def test_odd_values_are_literals():
    frame = pd.DataFrame({
        "a": ["it's", "x'); DROP TABLE t; --", "it's", "x'); DROP TABLE t; --"] * 3,
        "y": ["p", "q", "p", "q"] * 3,
    })
    model = sqltree.train(frame, target="y")
    scored = model.predict(frame)
    assert list(scored["prediction"]) == list(frame["y"])


def test_sql_keyword_table_name():
    con = duckdb.connect()
    con.execute('CREATE TABLE "order" AS SELECT * FROM read_csv(?, auto_type_candidates='
                "['BIGINT','DOUBLE','VARCHAR'])", [str(GOLF)])
    model = sqltree.train('"order"', target="play", connection=con)
    assert model.n_leaves == 5


def _special_values_table(con, special: str) -> None:
    con.execute(
        f"""CREATE TABLE t AS SELECT
              CASE WHEN i % 10 = 0 THEN '{special}'::DOUBLE
                   WHEN i % 10 = 1 THEN NULL ELSE (i * 37 % 100)::DOUBLE END AS x,
              CASE WHEN i % 10 = 0 OR i * 37 % 100 > 50 THEN 'a' ELSE 'b' END AS y
            FROM range(300) r(i)"""
    )


def test_nan_values_are_refused_and_nullif_reads_them_as_missing():
    # NaN sorts above every number and equals itself in the engines: not a missing value.
    con = duckdb.connect()
    _special_values_table(con, "NaN")
    with pytest.raises(sqltree.DataError, match=r"columns holding NaN: \['x'\].*NULLIF"):
        sqltree.train("t", target="y", connection=con)
    con.execute("CREATE VIEW v AS SELECT NULLIF(x, 'NaN') AS x, y FROM t")
    model = sqltree.train("v", target="y", connection=con)
    assert model.n_leaves >= 2


def nan_model() -> sqltree.Model:
    """A tree whose one test is ``y <= 50``."""
    rows = [float(i % 100) for i in range(400)]
    frame = pd.DataFrame({"y": rows, "label": ["a" if v > 50 else "b" for v in rows]})
    return sqltree.train(frame, target="label")


def test_scoring_sql_sends_nan_above_every_number_and_python_reads_it_as_missing():
    model = nan_model()
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE s AS SELECT * FROM (VALUES (1.0), ('NaN'::DOUBLE), ('Infinity'::DOUBLE), "
        "(NULL)) v(y)"
    )
    got = list(model.predict("s", connection=con)["prediction"])
    expected = [model.predict_row({"y": v}) for v in (1.0, math.inf, math.inf, None)]
    assert got == expected
    assert expected[:3] == ["b", "a", "a"]
    assert model.predict_row({"y": math.nan}) == model.predict_row({"y": None})


def test_infinity_is_a_value_for_c45_and_refused_by_cart():
    con = duckdb.connect()
    _special_values_table(con, "Infinity")
    con.execute("INSERT INTO t VALUES ('-Infinity'::DOUBLE, 'b'), ('-Infinity'::DOUBLE, 'b')")
    model = sqltree.train("t", target="y", connection=con, pruning=None)
    scored = model.predict("t", connection=con)
    rows = con.execute("SELECT * FROM t").df()
    rows = rows.astype(object).where(rows.notna(), None).to_dict("records")
    assert list(scored["prediction"]) == [model.predict_row(r) for r in rows]
    with pytest.raises(sqltree.DataError, match=r"\+infinity: \['x'\]"):
        sqltree.train("t", target="y", connection=con, algorithm="cart")


def test_nan_target_is_refused():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT i::DOUBLE AS x, "
        "CASE WHEN i % 7 = 0 THEN 'NaN'::DOUBLE ELSE (i % 2)::DOUBLE END AS y FROM range(50) r(i)"
    )
    with pytest.raises(sqltree.DataError, match="target 'y' holds NaN"):
        sqltree.train("t", target="y", connection=con)
