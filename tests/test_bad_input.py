"""Bad input gets a clear error, and odd identifiers are just names, on every engine."""

from __future__ import annotations

import math

import duckdb
import pandas as pd
import pytest

import sqltree
from tests.helpers import GOLF, on_engines, python_predictions, read_csv


def test_missing_target_column(engine_factory):
    engine, source = engine_factory(read_csv(GOLF), "golf")
    with pytest.raises(sqltree.DataError, match="target column 'nope' is not in the source"):
        sqltree.train(source, target="nope", connection=engine)


def test_missing_feature_column(engine_factory):
    engine, source = engine_factory(read_csv(GOLF), "golf")
    with pytest.raises(sqltree.DataError, match="not in the source"):
        sqltree.train(source, target="play", features=["outlook", "nope"], connection=engine)


def test_one_class(engine_factory):
    engine, source = engine_factory(pd.DataFrame({"a": [1.0, 2.0, 3.0], "y": ["x", "x", "x"]}))
    with pytest.raises(sqltree.DataError, match="single class"):
        sqltree.train(source, target="y", connection=engine)


def test_a_fractional_target_points_at_regression():
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "y": [0.5, 1.5, 2.25, 3.0]})
    with pytest.raises(sqltree.DataError, match=r'measurement.*task="regression"'):
        sqltree.train(frame, target="y")
    assert sqltree.train(frame, target="y", task="regression", min_samples_leaf=2).n_leaves == 2


def test_empty_table(engine_factory):
    frame = pd.DataFrame({"a": pd.Series([], dtype="float64"), "y": pd.Series([], dtype="str")})
    engine, source = engine_factory(frame)
    with pytest.raises(sqltree.DataError, match="no rows"):
        sqltree.train(source, target="y", connection=engine)


def test_all_null_target(engine_factory):
    frame = pd.DataFrame({"a": [1.0, 2.0], "y": pd.Series([None, None], dtype="str")})
    engine, source = engine_factory(frame)
    with pytest.raises(sqltree.DataError, match="NULL"):
        sqltree.train(source, target="y", connection=engine)


def test_all_null_feature_column(engine_factory):
    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": [None] * 4, "y": list("xyxy")})
    frame["b"] = frame["b"].astype("float64")
    engine, source = engine_factory(frame)
    with pytest.raises(sqltree.DataError, match=r"all NULL.*\['b'\]"):
        sqltree.train(source, target="y", connection=engine)


def test_null_targets_are_left_out_and_counted(engine_factory):
    frame = read_csv(GOLF)
    frame.loc[[0, 5], "play"] = None
    engine, source = engine_factory(frame, "golf")
    with pytest.warns(UserWarning, match="2 rows with a NULL target"):
        model = sqltree.train(source, target="play", connection=engine)
    assert model.stats["rows_null_target"] == 2
    assert model.root.weight == 12


@on_engines(
    xfail={
        "postgres": (
            pytest.fail.Exception,
            "engine_factory writes Arrow lists to PostgreSQL as text, so the column is nominal",
        )
    }
)
def test_unsupported_column_type(engine_factory):
    frame = pd.DataFrame({"l": [[1, 2], [3]], "a": [1.0, 2.0], "y": ["x", "z"]})
    engine, source = engine_factory(frame)
    with pytest.raises(sqltree.UnsupportedError, match="'l'"):
        sqltree.train(source, target="y", connection=engine)
    model = sqltree.train(source, target="y", connection=engine, features=["a"], min_cases=1)
    assert model.feature_names == ["a"]


def test_negative_weights(engine_factory):
    frame = pd.DataFrame({"a": [1.0, 2.0], "w": [1.0, -1.0], "y": ["x", "z"]})
    engine, source = engine_factory(frame)
    with pytest.raises(sqltree.DataError, match="negative weight"):
        sqltree.train(source, target="y", weight="w", connection=engine)


def test_unknown_source_kind():
    with pytest.raises(sqltree.UnsupportedError):
        sqltree.train(42, target="y")


def test_missing_file():
    with pytest.raises(sqltree.DataError, match="no file matches"):
        sqltree.train("nope/*.parquet", target="y")


def test_predict_needs_tested_columns(engine_factory):
    model = sqltree.train(str(GOLF), target="play")
    engine, source = engine_factory(pd.DataFrame({"x": [1]}))
    with pytest.raises(sqltree.DataError, match="outlook"):
        model.predict(source, connection=engine)


ODD = {
    "outlook": 'out "look"',
    "temperature": "select",
    "humidity": "it's humid ü",
    "windy": "wind`y ]",
    "play": "pl ay",
}


def test_odd_identifiers_train_score_and_compile(engine_factory):
    # Training with odd names on every engine: test_engines.test_odd_identifiers_survive.
    frame = read_csv(GOLF).rename(columns=ODD)
    model = sqltree.train(frame, target="pl ay")
    engine, source = engine_factory(frame, "golf")
    plain = sqltree.train(str(GOLF), target="play")
    assert model.n_leaves == plain.n_leaves and model.root.split.feature == 'out "look"'
    scored = model.predict(source, connection=engine)
    assert list(scored["prediction"]) == python_predictions(model, frame)
    for dialect in ["duckdb", "postgres", "spark", "tsql", "bigquery", "mysql", "sqlite"]:
        assert "wind" in model.to_sql(dialect)


def test_odd_values_are_literals(engine_factory):
    frame = pd.DataFrame({
        "a": ["it's", "x'); DROP TABLE t; --", "it's", "x'); DROP TABLE t; --"] * 3,
        "y": ["p", "q", "p", "q"] * 3,
    })
    engine, source = engine_factory(frame)
    model = sqltree.train(source, target="y", connection=engine)
    scored = model.predict(source, connection=engine)
    assert list(scored["prediction"]) == list(frame["y"])


# engine_factory gives Spark's temporary views a suffix, so the keyword would not reach Spark.
@on_engines(exclude=("spark",))
def test_sql_keyword_table_name(engine_factory):
    engine, source = engine_factory(read_csv(GOLF), "order")
    name = source.sql(engine.dialect)  # '"order"', schema-qualified on PostgreSQL
    assert name.endswith('"order"')
    model = sqltree.train(name, target="play", connection=engine)
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


@pytest.mark.parametrize("weight, message", [
    (1e-200, r"the weights in 'w' add up to 6e-200, outside \[1e-150, 1e\+150\]"),
    (1e308, r"the weights in 'w' add up to inf, outside \[1e-150, 1e\+150\]"),
], ids=["underflow", "overflow"])
def test_weights_beyond_what_a_float_can_square_are_a_data_error(weight, message):
    frame = pd.DataFrame({"x": [1.0, 2, 3, 4, 5, 6], "y": list("aabbab"), "w": [weight] * 6})
    with pytest.raises(sqltree.DataError, match=message):
        sqltree.train(frame, target="y", algorithm="cart", weight="w")


def test_small_weights_within_range_train_on_every_plan():
    frame = pd.DataFrame({"x": [1.0, 2, 3, 4, 5, 6], "y": list("aabbab"), "w": [1e-100] * 6})
    texts = {sqltree.train(frame, target="y", algorithm="cart", weight="w", plan=plan).text()
             for plan in ("memory", "tables")}
    assert len(texts) == 1


def test_a_regression_target_whose_variance_overflows_is_a_data_error():
    frame = pd.DataFrame({"x": [1.0, 2, 3, 4], "t": [1e200, 2e200, 3e200, 6e200]})
    with pytest.raises(sqltree.DataError, match="the target 't' reaches 6e\\+200: its variance"):
        sqltree.train(frame, target="t", task="regression")
    model = sqltree.train(frame.assign(t=frame["t"] / 1e100), target="t", task="regression")
    assert sqltree.Model.from_dict(model.to_dict()).n_leaves == model.n_leaves


def test_dates_are_refused_alike_from_every_source(tmp_path):
    frame = pd.DataFrame({"d": pd.date_range("2024-01-01", periods=60).date,
                          "x": [i % 7 for i in range(60)], "y": ["a", "b"] * 30})
    frame.to_csv(tmp_path / "d.csv", index=False)
    frame.to_parquet(tmp_path / "d.parquet")
    for source in (str(tmp_path / "d.csv"), str(tmp_path / "d.parquet"), frame):
        with pytest.raises(sqltree.UnsupportedError,
                           match=r"column 'd' holds dates or times \(DATE\).*EXTRACT\(year"):
            sqltree.train(source, target="y")
    model = sqltree.train(str(tmp_path / "d.csv"), target="y", features=["x"])
    assert model.feature_names == ["x"]
