"""Sources and options from an untrusted or careless caller: refused with a clear error, before
any statement reaches the engine, and nothing of the caller's is touched."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
from sqlglot import exp

import sqltree
from tests.conftest import EngineFactory

SMALL = pd.DataFrame({"x": [1, 2, 3, 4, 5, 6], "y": ["a", "a", "a", "b", "b", "b"]})


def _count(engine, table: exp.Table) -> int:
    return int(engine.execute(exp.select(exp.func("COUNT", exp.Star())).from_(table))[0][0])


@pytest.mark.parametrize(
    "query",
    [
        "(SELECT * FROM {t}); DROP TABLE {v}; SELECT * FROM {t}",
        "SELECT * FROM {t}; DROP TABLE {v}",
        "SELECT * FROM {t}; DELETE FROM {v}",
        "SELECT * FROM {t};; INSERT INTO {v} SELECT * FROM {v}",
    ],
)
def test_a_second_statement_is_refused_and_never_runs(
    engine_factory: EngineFactory, query: str
) -> None:
    engine, table = engine_factory(SMALL, "data")
    victim = table  # the statement smuggled in would empty or drop the source itself
    text = query.format(t=table.sql(engine.dialect), v=victim.sql(engine.dialect))
    before = engine.stats.queries
    with pytest.raises(sqltree.DataError, match="one query"):
        sqltree.train(text, target="y", connection=engine)
    assert engine.stats.queries == before
    assert _count(engine, victim) == len(SMALL)


@pytest.mark.parametrize(
    "query, clause",
    [
        ("WITH gone AS (DELETE FROM victim RETURNING *) SELECT * FROM t", "Delete"),
        ("SELECT * INTO copied FROM t", "Into"),
    ],
)
def test_a_query_that_writes_is_refused(query: str, clause: str) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM SMALL")
    con.execute("CREATE TABLE victim AS SELECT * FROM SMALL")
    with pytest.raises(sqltree.DataError, match=clause):
        sqltree.train(query, target="y", connection=con)
    assert con.execute("SELECT COUNT(*) FROM victim").fetchone() == (6,)
    assert con.execute("SELECT COUNT(*) FROM information_schema.tables "
                       "WHERE table_name = 'copied'").fetchone() == (0,)


def test_a_statement_expression_is_refused() -> None:
    with pytest.raises(sqltree.DataError, match="Drop"):
        sqltree.train(exp.Drop(this=exp.to_table("t"), kind="TABLE"), target="y")


def test_scoring_sources_are_checked_too() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM SMALL")
    model = sqltree.train("t", target="y", connection=con, min_cases=1)
    with pytest.raises(sqltree.DataError, match="one query"):
        model.predict("SELECT * FROM t; DROP TABLE t", connection=con)
    assert con.execute("SELECT COUNT(*) FROM t").fetchone() == (6,)


def test_queries_with_ctes_and_unions_still_train() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM SMALL")
    for query in ("WITH a AS (SELECT * FROM t) SELECT * FROM a",
                  "SELECT * FROM t UNION ALL SELECT * FROM t", "(SELECT * FROM t)"):
        assert sqltree.train(query, target="y", connection=con, min_cases=1).n_leaves == 2


def test_a_table_name_with_a_statement_in_it_is_only_a_name() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM SMALL")
    with pytest.raises(sqltree.SourceError, match="DuckDB cannot read table 't; DROP TABLE t'"):
        sqltree.train("t; DROP TABLE t", target="y", connection=con)
    assert con.execute("SELECT COUNT(*) FROM t").fetchone() == (6,)


def test_integers_beyond_2_53_are_refused_as_continuous_and_exact_as_nominal() -> None:
    big = 2**53
    frame = pd.DataFrame({"x": [big] * 3 + [big + 1] * 3 + [big + 4] * 6,
                          "y": ["a"] * 6 + ["b"] * 6})
    with pytest.raises(sqltree.DataError, match=r"beyond ±2\^53"):
        sqltree.train(frame, target="y", min_cases=1)
    model = sqltree.train(frame, target="y", min_cases=1, nominal=["x"])
    predicted = model.predict(frame)["prediction"].tolist()
    walked = [model.predict_row({"x": int(v)}) for v in frame["x"]]
    assert predicted == walked == frame["y"].tolist()


def test_integers_up_to_2_53_train_as_before() -> None:
    frame = pd.DataFrame({"x": [2**53 - 2, 2**53 - 1, 2**53] * 2, "y": ["a", "b", "b"] * 2})
    model = sqltree.train(frame, target="y", min_cases=1)
    assert model.predict(frame)["prediction"].tolist() == frame["y"].tolist()


@pytest.mark.parametrize(
    "weights, message",
    [
        # DuckDB reads a DataFrame's NaN as NULL
        ([1.0, float("nan"), 1.0, 1.0, 1.0, 1.0], "NULL or negative weight"),
        ([1.0, float("inf"), 1.0, 1.0, 1.0, 1.0], "NaN or infinite weight"),
        ([0.0] * 6, r"every weight .* is zero"),
        ([1.0, -1.0, 1.0, 1.0, 1.0, 1.0], "NULL or negative weight"),
    ],
)
def test_bad_weights(weights: list[float], message: str) -> None:
    frame = SMALL.assign(w=weights)
    with pytest.raises(sqltree.DataError, match=message):
        sqltree.train(frame, target="y", weight="w")


def test_a_nan_weight_in_a_table_is_refused() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT x, y, CASE WHEN x = 2 THEN 'NaN'::DOUBLE "
                "ELSE 1.0 END AS w FROM SMALL")
    with pytest.raises(sqltree.DataError, match="1 rows have a NaN or infinite weight"):
        sqltree.train("t", target="y", weight="w", connection=con)


def test_a_text_weight_column_is_refused() -> None:
    with pytest.raises(sqltree.DataError, match="weights must be numbers"):
        sqltree.train(SMALL.assign(w=["1"] * 6), target="y", weight="w")


@pytest.mark.parametrize(
    "columns, message",
    [(["x", "x", "y"], "twice"), (["x", "X", "y"], "'x' and 'X'"), (["", "x", "y"], "empty")],
)
def test_column_names_an_engine_would_rename(columns: list[str], message: str) -> None:
    frame = pd.DataFrame([[1, 2, "a"], [2, 1, "b"]], columns=columns)
    with pytest.raises(sqltree.DataError, match=message):
        sqltree.train(frame, target="y")


def test_a_query_naming_a_column_twice_is_refused() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM SMALL")
    with pytest.raises(sqltree.DataError, match="'x' and 'X'"):
        sqltree.train('SELECT x, x + 1 AS "X", y FROM t', target="y", connection=con)


def test_a_fractional_numeric_target_is_not_taken_for_classes() -> None:
    frame = pd.DataFrame({"x": range(40), "y": [i / 7 for i in range(40)]})
    with pytest.raises(sqltree.DataError, match="not class labels"):
        sqltree.train(frame, target="y")


def test_whole_numbers_in_a_float_target_are_classes() -> None:
    frame = pd.DataFrame({"x": range(6), "y": [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]})
    assert sqltree.train(frame, target="y", min_cases=1).classes == [0.0, 1.0]


def test_a_missing_table_is_a_clear_error() -> None:
    with pytest.raises(sqltree.SourceError, match="DuckDB cannot read table 'no_such_table'"):
        sqltree.train("no_such_table", target="y", connection=duckdb.connect())


# Each of these is refused before the source is read: the source does not exist, so an
# error about it would mean a statement ran first.
@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"algorithm": "cart", "missing": "majority"}, sqltree.UnsupportedError, "missing"),
        ({"algorithm": "cart", "missing": "bogus"}, ValueError, "missing must be one of"),
        ({"algorithm": "cart", "min_gain": 5}, sqltree.UnsupportedError, "min_gain"),
        ({"algorithm": "cart", "min_cases": 100}, sqltree.UnsupportedError, "min_cases"),
        ({"algorithm": "cart", "cf": 0.1}, sqltree.UnsupportedError, "cf"),
        ({"algorithm": "cart", "pruning": "c4.5"}, sqltree.UnsupportedError, "pruning"),
        ({"algorithm": "cart", "min_samples_leaf": 0}, ValueError, "min_samples_leaf"),
        ({"algorithm": "cart", "min_samples_leaf": 1.5}, ValueError, "min_samples_leaf"),
        ({"algorithm": "cart", "criterion": "bogus"}, ValueError, "criterion"),
        ({"algorithm": "cart", "max_leaf_nodes": 1}, ValueError, "max_leaf_nodes"),
        ({"algorithm": "cart", "ccp_alpha": -1.0}, ValueError, "ccp_alpha"),
        ({"algorithm": "cart", "class_weight": "heavy"}, ValueError, "class_weight"),
        ({"criterion": "gini"}, sqltree.UnsupportedError, "cart"),
        ({"max_bins": 1}, ValueError, "max_bins"),
        ({"max_bins": 0}, ValueError, "max_bins"),
        ({"max_depth": -1}, ValueError, "max_depth"),
        ({"max_depth": 2.5}, ValueError, "max_depth"),
        ({"min_cases": -1}, ValueError, "min_cases"),
        ({"cf": 0}, ValueError, "cf"),
        ({"cf": 1.5}, ValueError, "cf"),
        ({"cf": float("nan")}, ValueError, "cf"),
        ({"algorithm": "id3", "cf": 0.1}, sqltree.UnsupportedError, "cf"),
        ({"pruning": "pessimistic", "subtree_raising": False}, sqltree.UnsupportedError,
         "subtree_raising"),
        ({"pruning": "bogus"}, ValueError, "pruning"),
        ({"pruning": "reduced-error"}, ValueError, "validation"),
        ({"algorithm": "bogus"}, ValueError, "algorithm"),
        ({"weight": "y"}, ValueError, "also the target"),
        ({"features": ["x", "y"]}, ValueError, "target"),
        ({"features": "x"}, ValueError, "list"),
        ({"nominal": ["x", "x"]}, ValueError, "twice"),
    ],
)
def test_options_are_checked_before_any_query(
    options: dict, error: type[Exception], message: str
) -> None:
    con = duckdb.connect()
    with pytest.raises(error, match=message):
        sqltree.train("no_such_table", target="y", connection=con, **options)


def test_algorithm_names_are_forgiving() -> None:
    frame = SMALL.copy()
    for name in ("C4.5", "c45", "J48", " id3 ", "CART"):
        assert sqltree.train(frame, target="y", algorithm=name, min_samples_split=2).n_leaves == 2


def test_minus_infinity_in_a_feature_is_refused() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT CASE WHEN x = 1 THEN '-Infinity'::DOUBLE "
                "ELSE x::DOUBLE END AS x, y FROM SMALL")
    with pytest.raises(sqltree.DataError, match="-infinity"):
        sqltree.train("t", target="y", connection=con, min_cases=1)
