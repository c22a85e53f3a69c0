"""Date features (``date_features=True``, ``--date-features``): a DATE or TIMESTAMP column
becomes its year, month, ISO day of the week and days since 1970, computed by the same SQL in
training (every plan, every engine) and in the scoring SQL, which reads the raw column."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from typing import Any

import duckdb
import pandas as pd
import pytest
import sqlglot
from sqlglot import exp

import sqltree
from sqltree import dates
from sqltree.cli import main
from tests.helpers import assert_same_tree, on_engines, python_predictions

PARTS = ["year", "month", "dow", "epoch_day"]
FEATURES = [f"{c}.{p}" for c in ("d", "ts") for p in PARTS] + ["x"]


def frame(n: int = 240) -> pd.DataFrame:
    """Dates and timestamps as ISO text (NULLs included): the class is "weekend" where the
    timestamp falls on a Saturday or Sunday, else "h1" or "h2" by the half-year of the date."""
    rows = []
    for i in range(n):
        d = dt.date(2023, 1, 1) + dt.timedelta(days=(i * 37) % 730)
        ts = (dt.datetime(2022, 12, 26, (i * 5) % 24, (i * 7) % 60)
              + dt.timedelta(days=(i * 53) % 730))
        y = "weekend" if ts.isoweekday() >= 6 else ("h1" if d.month <= 6 else "h2")
        rows.append({"d": None if i % 11 == 3 else d.isoformat(),
                     "ts": None if i % 13 == 5 else ts.isoformat(sep=" "),
                     "x": float(i % 10), "y": y})
    return pd.DataFrame(rows)


def typed(table: exp.Expression) -> exp.Select:
    """The rows of ``table`` (the frame's text) with ``d`` a DATE and ``ts`` a TIMESTAMP."""
    return exp.select(
        exp.alias_(exp.cast(exp.column("d", quoted=True), "DATE"), "d", quoted=True),
        exp.alias_(exp.cast(exp.column("ts", quoted=True), "TIMESTAMP"), "ts", quoted=True),
        exp.column("x", quoted=True), exp.column("y", quoted=True),
    ).from_(table.copy())


def duckdb_table(con: duckdb.DuckDBPyConnection, name: str = "t") -> None:
    """The frame as a DuckDB table ``name`` with DATE and TIMESTAMP columns."""
    con.register("raw_frame", frame())
    query = typed(exp.to_table("raw_frame"))
    con.execute(exp.Create(this=exp.to_table(name), kind="TABLE", expression=query).sql("duckdb"))
    con.unregister("raw_frame")


@pytest.fixture(scope="module")
def con() -> Any:
    con = duckdb.connect()
    duckdb_table(con)
    yield con
    con.close()


@pytest.fixture(scope="module")
def model(con: Any) -> sqltree.Model:
    return sqltree.train("t", target="y", connection=con, date_features=True)


def expected(d: dt.date | None) -> list[int | None]:
    if d is None:
        return [None] * 4
    return [d.year, d.month, d.isoweekday(), (d - dt.date(1970, 1, 1)).days]


# -- training ------------------------------------------------------------------------------------
def test_each_date_column_becomes_four_numeric_features(model: sqltree.Model) -> None:
    assert model.feature_names == FEATURES
    for f in model.features[:8]:
        assert f.kind == "continuous" and f.sql_type == "BIGINT"
        assert f.name == f"{f.date_column}.{f.date_part}"
    assert model.features[8].date_column is None and model.features[8].date_part is None


def test_the_tree_splits_on_the_weekday_and_the_month(model: sqltree.Model) -> None:
    root = model.root
    assert (root.split.feature, root.split.threshold) == ("ts.dow", 5)
    weekday = root.children[0]
    assert (weekday.split.feature, weekday.split.threshold) == ("d.month", 6)
    assert [model.classes[c.label] for c in weekday.children] == ["h1", "h2"]
    assert model.classes[root.children[1].label] == "weekend"
    assert model.text().startswith("ts.dow <= 5\n|   d.month <= 6: h1")


@pytest.mark.parametrize("plan", ["memory", "tables", "select"])
def test_every_plan_grows_the_same_tree(con: Any, model: sqltree.Model, plan: str) -> None:
    other = sqltree.train("t", target="y", connection=con, date_features=True, plan=plan)
    assert other.stats["plan"] == plan
    assert other.feature_names == FEATURES
    assert_same_tree(other.root.to_dict(), model.root.to_dict(), what=plan)


def test_the_scan_plan_grows_cart_s_tree(con: Any) -> None:
    options = dict(target="y", connection=con, date_features=True, algorithm="cart",
                   max_bins=32, max_depth=2)
    trees = {plan: sqltree.train("t", plan=plan, **options) for plan in ("scan", "tables")}
    assert trees["scan"].stats["plan"] == "scan"
    assert trees["scan"].root.split.feature == "ts.dow"
    assert_same_tree(trees["scan"].root.to_dict(), trees["tables"].root.to_dict())


def test_a_dataframe_and_a_query_train_the_same_tree(model: sqltree.Model) -> None:
    raw = frame()
    typed_frame = raw.assign(d=pd.to_datetime(raw["d"]).dt.date, ts=pd.to_datetime(raw["ts"]))
    from_frame = sqltree.train(typed_frame, target="y", date_features=True)
    assert from_frame.stats["plan"] == "memory"
    assert_same_tree(from_frame.root.to_dict(), model.root.to_dict())


def test_the_parts_are_those_python_computes(con: Any) -> None:
    """Every part of every date, from 1969 to 2100, NULL included, is the Python value."""
    days = [None, dt.date(1969, 12, 28), dt.date(1969, 12, 31), dt.date(1970, 1, 1),
            dt.date(2000, 2, 29), dt.date(2024, 3, 4), dt.date(2100, 12, 31)]
    days += [dt.date(1968, 1, 1) + dt.timedelta(days=i) for i in range(0, 800, 3)]
    rows = exp.Values(expressions=[
        exp.Tuple(expressions=[exp.cast(exp.Literal.string(d.isoformat()) if d else exp.null(),
                                        "DATE")]) for d in days],
        alias=exp.TableAlias(this=exp.to_identifier("v"), columns=[exp.to_identifier("d")]))
    select = exp.select(*[dates.part_expression(exp.column("d"), p) for p in PARTS]).from_(rows)
    got = con.execute(select.sql("duckdb")).fetchall()
    assert [list(r) for r in got] == [expected(d) for d in days]
    assert [[dates.value_of(d, p) for p in PARTS] for d in days] == [expected(d) for d in days]


def test_timestamptz_columns_are_dates_too() -> None:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    duckdb_table(con)
    query = exp.select(
        exp.alias_(exp.cast(exp.column("ts"), "TIMESTAMPTZ"), "ts"), "y").from_("t")
    model = sqltree.train(query, target="y", connection=con, date_features=True)
    assert model.feature_names == [f"ts.{p}" for p in PARTS]
    assert model.root.split.feature == "ts.dow"


def test_roles_and_feature_lists_name_the_date_column_or_its_parts(con: Any) -> None:
    only = sqltree.train("t", target="y", connection=con, date_features=True,
                         features=["d", "x"])
    assert only.feature_names == [f"d.{p}" for p in PARTS] + ["x"]
    month = sqltree.train("t", target="y", connection=con, date_features=True,
                          features=["ts.dow", "d.month"], nominal=["d.month"])
    assert month.feature_names == ["ts.dow", "d.month"]
    assert month.features[1].kind == "nominal" and month.features[1].values == list(range(1, 13))
    assert month.features[1].date_column == "d"
    assert con.execute(month.check_sql("t")).fetchall() == []  # every month was seen
    # A date column declared nominal keeps its values as categories.
    kept = sqltree.train("t", target="y", connection=con, date_features=True,
                         features=["d", "ts"], nominal=["d"])
    assert kept.feature_names == ["d"] + [f"ts.{p}" for p in PARTS]


# -- refusals ------------------------------------------------------------------------------------
def test_without_the_option_a_date_column_is_refused_with_the_option_named(con: Any) -> None:
    with pytest.raises(sqltree.UnsupportedError,
                       match=r"holds dates or times.*date_features=True \(--date-features\)"):
        sqltree.train("t", target="y", connection=con)


def test_a_column_with_a_part_s_name_is_refused(con: Any) -> None:
    query = exp.select("*", exp.alias_(exp.Literal.number(1), "d.month", quoted=True)).from_("t")
    with pytest.raises(sqltree.DataError, match=r"names the month of the date column 'd' "
                                                r"'d.month', but the source already has"):
        sqltree.train(query, target="y", connection=con, date_features=True)


def test_sqlite_refuses_to_train_with_date_features() -> None:
    lite = sqlite3.connect(":memory:")
    frame().to_sql("t", lite, index=False)
    with pytest.raises(sqltree.UnsupportedOptionError, match="SQLite has none"):
        sqltree.train("t", target="y", connection=lite, date_features=True)


def test_forests_refuse_date_features(con: Any) -> None:
    with pytest.raises(sqltree.UnsupportedOptionError, match="single trees"):
        sqltree.train("t", target="y", connection=con, date_features=True,
                      algorithm="random-forest")


def test_scoring_needs_the_date_column_as_a_date(con: Any, model: sqltree.Model) -> None:
    with pytest.raises(sqltree.DataError, match="from the date column 'd', which is not in"):
        model.predict(exp.select("ts", "x").from_("t"), connection=con)
    as_text = exp.select(exp.alias_(exp.cast(exp.column("d"), "VARCHAR"), "d"), "ts", "x",
                         "y").from_("t")
    with pytest.raises(sqltree.DataError, match=r"'d', which is TEXT in the source: cast"):
        model.evaluate(as_text, connection=con)
    clash = exp.select("*", exp.alias_(exp.Literal.number(1), "ts.dow", quoted=True)).from_("t")
    with pytest.raises(sqltree.DataError, match=r"already has a column 'ts\.dow'"):
        model.predict(clash, connection=con)


# -- scoring -------------------------------------------------------------------------------------
def test_to_sql_on_the_raw_table_is_predict(con: Any, model: sqltree.Model) -> None:
    scored = model.predict("t", connection=con, proba=True)
    assert list(scored.columns) == ["d", "ts", "x", "y", "prediction", "proba_h1", "proba_h2",
                                    "proba_weekend"]
    by_sql = con.execute(model.to_sql(table="t", proba=True)).df()
    pd.testing.assert_frame_equal(by_sql, scored, check_dtype=False)
    expression = sqlglot.parse_one(model.to_sql(), read="duckdb")
    alone = con.execute(exp.select(expression).from_("t").sql("duckdb")).fetchall()
    assert [r[0] for r in alone] == list(scored["prediction"])
    assert python_predictions(model, con.execute("SELECT * FROM t").df()) == list(
        scored["prediction"])
    leaves = model.predict("t", connection=con, output="leaf", column="leaf")
    by_leaf_sql = con.execute(model.to_sql(table="t", output="leaf")).df()
    assert list(by_leaf_sql["prediction"].astype("Int64")) == list(
        leaves["leaf"].astype("Int64"))
    assert "d.month" not in model.to_sql() and 'MONTH("d")' in model.to_sql()


def test_evaluate_and_the_dbt_model_read_the_raw_column(con: Any, model: sqltree.Model) -> None:
    evaluation = model.evaluate("t", connection=con)
    scored = model.predict("t", connection=con)
    assert evaluation.rows == len(scored)
    assert evaluation.accuracy == pytest.approx((scored["prediction"] == scored["y"]).mean())
    text = model.to_dbt("orders", dialect="duckdb")
    assert "{{ ref('orders') }}" in text and 'MONTH("d")' in text and "d.month" not in text


def test_a_regression_tree_scores_the_raw_column(con: Any) -> None:
    query = exp.select("d", "ts", exp.alias_(
        exp.cast(exp.func("MONTH", exp.column("d")), "DOUBLE") * 10 + exp.column("x"),
        "target")).from_("t").where(exp.column("d").is_(exp.null()).not_())
    model = sqltree.train(query, target="target", connection=con, date_features=True,
                          features=["d"], task="regression", max_depth=3)
    assert model.root.split.feature == "d.month"
    scored = model.predict(query, connection=con)
    expression = sqlglot.parse_one(model.to_sql(), read="duckdb")
    by_sql = con.execute(exp.select(expression).from_(query.subquery("q")).sql("duckdb"))
    assert [r[0] for r in by_sql.fetchall()] == list(scored["prediction"])
    assert model.evaluate(query, connection=con).r2 > 0.9


def test_sqlite_scores_iso_text_dates(model: sqltree.Model, con: Any) -> None:
    """SQLite keeps dates as text: a model with date features scores them there, by SQLite's
    date functions, as DuckDB scores the dates."""
    lite = sqlite3.connect(":memory:")
    frame().to_sql("t", lite, index=False)
    scored = model.predict("t", connection=lite)
    assert list(scored["prediction"]) == list(model.predict("t", connection=con)["prediction"])
    sql = model.to_sql(dialect="sqlite", table="t")
    assert "STRFTIME('%m', \"d\")" in sql
    assert [r[-1] for r in lite.execute(sql).fetchall()] == list(scored["prediction"])


def test_reduced_error_pruning_reads_the_validation_rows_parts(con: Any) -> None:
    pruned = sqltree.train("t", target="y", connection=con, date_features=True,
                           pruning="reduced-error", validation="t")
    assert pruned.root.split.feature == "ts.dow"


def test_cross_validation_trains_each_fold_with_date_features(con: Any) -> None:
    result = sqltree.cross_validate("t", target="y", connection=con, folds=3,
                                    date_features=True)
    assert result.pooled.accuracy > 0.85
    assert all(m.feature_names == FEATURES for m in result.models)


# -- model files -----------------------------------------------------------------------------------
def test_the_model_file_records_each_part_and_round_trips(model: sqltree.Model,
                                                          tmp_path: Any, con: Any) -> None:
    path = tmp_path / "dates.json"
    model.save(path)
    document = json.loads(path.read_text())
    assert document["version"] == 3
    assert document["features"][1] == {"name": "d.month", "kind": "continuous",
                                       "sql_type": "BIGINT", "values": [],
                                       "date_column": "d", "date_part": "month"}
    assert set(document["features"][8]) == {"name", "kind", "sql_type", "values"}
    loaded = sqltree.load(path)
    assert loaded.to_sql() == model.to_sql()
    assert list(loaded.predict("t", connection=con)["prediction"]) == list(
        model.predict("t", connection=con)["prediction"])


def test_models_without_dates_keep_their_version() -> None:
    plain = sqltree.train(pd.DataFrame({"a": [1, 2, 3, 4], "y": ["p", "p", "q", "q"]}),
                          target="y")
    assert plain.to_dict()["version"] == 1
    assert "date_part" not in plain.to_dict()["features"][0]


@pytest.mark.parametrize(("change", "message"), [
    ({"date_part": "week"}, "date_part is \"week\"; expected one of 'year'"),
    ({"date_column": ""}, "date_column is the text \"\"; expected a column name"),
    ({"date_column": None, "date_part": None}, "date_column is null"),
])
def test_a_model_file_with_a_bad_date_feature_is_refused(model: sqltree.Model,
                                                         change: dict[str, Any],
                                                         message: str) -> None:
    document = model.to_dict()
    document["features"][1].update(change)
    with pytest.raises(sqltree.ModelFileError, match=message):
        sqltree.Model.from_dict(document)
    older = model.to_dict()
    older["version"] = 2
    with pytest.raises(sqltree.ModelFileError, match="fields of version 3 files"):
        sqltree.Model.from_dict(older)


# -- the command line ------------------------------------------------------------------------------
def test_the_command_line_flag(tmp_path: Any, capsys: Any, model: sqltree.Model) -> None:
    database = tmp_path / "shop.duckdb"
    with duckdb.connect(str(database)) as shop:
        duckdb_table(shop)
    out = tmp_path / "m.json"
    assert main(["train", "t", "--target", "y", "--date-features", "-o", str(out),
                 "--connect", str(database)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("ts.dow <= 5\n|   d.month <= 6: h1")
    assert_same_tree(sqltree.load(out).root.to_dict(), model.root.to_dict())
    assert main(["predict", str(out), "t", "--connect", str(database)]) == 0
    scored = capsys.readouterr().out.splitlines()
    assert scored[0] == "d,ts,x,y,prediction" and len(scored) == 241
    assert main(["sql", str(out), "-d", "postgres"]) == 0
    assert 'EXTRACT(MONTH FROM "d")' in capsys.readouterr().out
    assert main(["train", "t", "--target", "y", "-q", "-o", str(out),
                 "--connect", str(database)]) == 1
    assert "--date-features" in capsys.readouterr().err
    assert main(["scores", "t", "--target", "y", "--date-features",
                 "--connect", str(database)]) == 0
    assert "ts.dow" in capsys.readouterr().out


# -- the same tree on every engine ---------------------------------------------------------------
@on_engines()
def test_the_same_tree_and_scores_on_every_engine(engine_factory: Any,
                                                  model: sqltree.Model) -> None:
    engine, table = engine_factory(frame(), "dated")
    source = typed(table)
    trained = sqltree.train(source, target="y", connection=engine, date_features=True)
    assert trained.feature_names == FEATURES
    assert_same_tree(trained.root.to_dict(), model.root.to_dict(), what=engine.dialect)
    scored = trained.predict(source, connection=engine)
    assert list(scored["prediction"]) == python_predictions(model, frame())
    # The compiled expression, in the engine's dialect, over the raw typed rows.
    expression = sqlglot.parse_one(trained.to_sql(dialect=engine.dialect), read=engine.dialect)
    rows = engine.execute(exp.select(
        exp.column("x"), exp.alias_(expression, "p")).from_(source.subquery("s")))
    by_x: dict[float, list[Any]] = {}
    for x, p in rows:
        by_x.setdefault(float(x), []).append(p)
    want: dict[float, list[Any]] = {}
    for x, p in zip(scored["x"], scored["prediction"], strict=True):
        want.setdefault(float(x), []).append(p)
    assert {k: sorted(v) for k, v in by_x.items()} == {k: sorted(v) for k, v in want.items()}
    evaluation = trained.evaluate(source, connection=engine)
    assert evaluation.rows == 240
