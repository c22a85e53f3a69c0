"""Failures the property tests (tests/test_properties.py) found, shrunk, kept as plain tests.

Tests marked ``xfail(strict=True)`` fail today: each reason names the fix that will make it
pass (and then the mark must go, which strict mode enforces).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Any

import duckdb
import pandas as pd
import pytest

import sqltree
from tests.conftest import EngineFactory
from tests.strategies import Table, make_table
from tests.test_properties import check_agreement, check_engine, duckdb_with, engine_rows, train

INF = math.inf


def agree(table: Table, **options: Any) -> sqltree.Model:
    """Train on DuckDB, then check SQL on DuckDB and SQLite, predict and Python agree."""
    with contextlib.closing(duckdb_with(table)) as con:
        model = train(table, options, con)
        check_agreement(model, table, con)
    return model


# -- compiled SQL --------------------------------------------------------------------------
def test_sqlite_reads_false_as_a_literal_next_to_a_column_named_false():
    # SQLite read FALSE as the column "false" (fixed: booleans are CAST(0 AS BOOLEAN)).
    agree(make_table([
        ("false", "bool", [True, False, False, False, False]),
        ("a", "int", [0, 0, 0, 0, 0]),
    ], target="false"))


HELPER_NAMED = [
    ("__sqltree_entry", "int", [0] * 12),
    ("0", "text", ["yes", "no", "no", "no", "yes", "yes", "no", "no", "yes", "yes", "yes", "no"]),
    ("__sqltree_row", "bool", [False] * 12),
]


@pytest.mark.parametrize("name", ["__sqltree_fast", "__sqltree_at"])
def test_columns_named_like_scoring_helpers_are_not_captured(name):
    # predict on DuckDB gave P(no) = 0.75 instead of 2/3 and the wrong label (__sqltree_fast),
    # or failed on a duplicate column (__sqltree_at); fixed by a prefix no column starts with.
    table = make_table([*HELPER_NAMED, (name, "int", [1, 0, -1, 1, -1, 0, 1, -1, 0, 0, 0, -1])],
                       target="0")
    agree(table, algorithm="c4.5", subtree_raising=False, nominal=["__sqltree_entry", name])


def chain_table(levels: int) -> Table:
    """Alternating labels along x (a chain of cuts, one level each), every 7th x unknown."""
    xs = [None if i % 7 == 0 else i % levels for i in range(4 * levels)]
    ys = ["ab"[0 if x is None else x % 2] for x in xs]
    return make_table([("x", "int", xs), ("y", "text", ys)], target="y")


def test_a_deep_chain_with_unknown_values_scores_on_sqlite():
    # The closed form nested once per level: SQLite's parser overflowed (fixed: log2 nesting).
    model = agree(chain_table(30), algorithm="id3")
    assert model.depth > 20


@pytest.mark.postgres
def test_a_branch_with_no_values_compiles_for_postgres(request):
    # CART's branch for unknown values only compiled to IN (), a syntax error on PostgreSQL.
    table = make_table([
        ("a", "bool", [False] * 6 + [None]),
        ("y", "text", ["yes", "no", "yes", "yes", "no", "yes", "yes"]),
    ], target="y")
    with contextlib.closing(duckdb_with(table)) as con:
        model = train(table, {"algorithm": "cart"}, con)
    assert any(g == [] for n in model.root.walk() if n.split for g in n.split.groups or [])
    frame, rid = engine_rows(table)
    factory = EngineFactory("postgres", request)
    try:
        engine, source = factory(frame, "t")
        check_engine(model, table, engine, source, rid)
    finally:
        factory.close()


TINY = 7.23740739980726e-296
"""SQLite 3.40 reads this text one unit in the last place low."""


def test_sqlite_reads_every_float_literal_as_the_double_it_stands_for():
    # to_sql on SQLite sent a row with a = TINY down the unknown-value branches (P('no') 0.40
    # against 0.46 in Python): its test `a = 7.23740739980726e-296` read one ulp off. Fixed by
    # writing floats in texts SQLite reads exactly (engines.sqlite_numbers).
    values = [-91.903, TINY, 0.9, TINY, -2.8, 5e-324, TINY, 17.0, -72.0, 5e-324, TINY, 0.9]
    labels = ["no", "yes", "yes", "no", "no", "yes", "yes", "yes", "no", "yes", "yes", "no"]
    agree(make_table([("a", "float", values), ("x y", "text", labels)], target="x y"),
          algorithm="c4.5", nominal=["a"], pruning=None)
    # J48's threshold is a training value: the rows equal to it go left on SQLite too
    values = [-1.0, TINY, TINY, TINY, -1.0, 1.0, 1.0, 1.0, 1.0, -1.0]
    model = agree(make_table([("a", "float", values), ("y", "text", list("aaaaabbbba"))],
                             target="y"), min_cases=1)
    assert model.root.split.threshold == TINY


def test_sqlite_float_texts_are_exact_over_the_whole_range():
    import random
    import sqlite3
    import struct

    from sqlglot import exp

    from sqltree.engines.sqlite_numbers import exact_numbers

    draw = random.Random(5)
    values = [TINY, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308]
    while len(values) < 1500:
        (x,) = struct.unpack(">d", draw.getrandbits(64).to_bytes(8, "big"))
        if math.isfinite(x):
            values.append(x)
    query = exact_numbers(exp.select(*[exp.Literal.number(repr(x)) if x >= 0 else
                                       exp.Neg(this=exp.Literal.number(repr(-x)))
                                       for x in values]))
    (row,) = sqlite3.connect(":memory:").execute(query.sql("sqlite")).fetchall()
    assert [v for v, x in zip(row, values, strict=True) if v != x] == []


# -- infinity and NaN ----------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["c4.5", "cart"])
def test_minus_infinity_is_refused_before_training(algorithm):
    # A cut just above -infinity had no SQL literal: a plain ValueError from training (CART)
    # or compiling (C4.5). Fixed by refusing -infinity with a DataError.
    table = make_table([
        ("x", "float", [-INF, -INF, 1.0, 2.0, 3.0, 4.0]),
        ("y", "text", ["a", "a", "b", "b", "b", "b"]),
    ], target="y")
    with contextlib.closing(duckdb_with(table)) as con, pytest.raises(sqltree.DataError):
        train(table, {"algorithm": algorithm}, con)


@pytest.mark.parametrize(("value", "message"), [
    (math.nan, r"columns holding NaN: \['x'\]"),
    # a category is a SQL literal in the scoring SQL, and infinity has none in most dialects
    (INF, r"nominal columns holding infinity: \['x'\]"),
    (-INF, r"columns holding -infinity: \['x'\]"),
], ids=["nan", "inf", "-inf"])
def test_nan_and_infinity_in_a_nominal_column_are_refused(value, message):
    table = make_table([
        ("x", "float", [1.0, value, 1.0, 2.0]),
        ("y", "text", ["a", "a", "b", "b"]),
    ], target="y")
    with contextlib.closing(duckdb_with(table)) as con, pytest.raises(
        sqltree.DataError, match=message
    ):
        train(table, {"nominal": ["x"], "min_cases": 1}, con)


@pytest.mark.parametrize("values", [
    [INF, 0.0, 1.0, 2.0],
    [1.7976931348623157e308, -1.7976931348623157e308, 1.0, 2.0],
    [INF, INF, INF, 0.0],  # infinite quantile edges too
], ids=["infinity", "widest-finite", "infinite-edges"])
def test_bins_over_the_whole_double_range(values):
    # the lookup grid's width overflows: binning falls back to comparisons
    agree(make_table([
        ("x", "float", values),
        ("y", "text", ["a", "a", "b", "b"]),
    ], target="y"), max_bins=4, min_cases=1)


# -- refusals ------------------------------------------------------------------------------
SMALL = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "y": list("aaabbb")})


@pytest.mark.parametrize("options", [
    {"max_depth": 0},
    {"algorithm": "c5.0"},
    {"missing": "mean"},
    {"pruning": "best"},
    {"algorithm": "cart", "criterion": "mse"},
    {"algorithm": "cart", "min_weight_fraction_leaf": -0.1},
    {"max_dept": 3},
    {"pruning": "reduced-error"},
    {"features": ["y"]},
    {"weight": "y"},
], ids=repr)
def test_invalid_options_raise_sqltree_errors(options):
    # They raised plain ValueError/TypeError (fixed: OptionError, UnsupportedOptionError).
    with warnings.catch_warnings(), pytest.raises(sqltree.OptionError):
        warnings.simplefilter("ignore")
        sqltree.train(SMALL, target="y", **options)


@pytest.mark.parametrize("source", ["no_such_table", "SELECT * FROM nope"])
def test_predict_on_a_missing_table_is_refused(source):
    # DuckDB's CatalogException went through (fixed: a SourceError naming source and engine).
    model = sqltree.train(SMALL, target="y")
    with pytest.raises(sqltree.SourceError, match="DuckDB cannot read"):
        model.predict(source)


def test_a_dataframe_trains_on_a_connection_that_already_disables_the_swap():
    # The engine reads a setting with fetchall: fetchone left the result unfinished, and
    # registering the DataFrame (no SET in between) failed.
    con = duckdb.connect()
    con.execute("SET disabled_optimizers = 'build_side_probe_side'")
    model = sqltree.train(SMALL, target="y", connection=con, min_cases=1)
    assert model.n_leaves == 2
    assert con.execute("SELECT current_setting('disabled_optimizers')").fetchone() == (
        "build_side_probe_side",)


@pytest.mark.parametrize("query", ["SELECT * FROM t AS a, t AS b", "SELECT *, x FROM t"])
def test_a_query_that_repeats_column_names_is_refused(query):
    table = make_table([
        ("x", "float", [1.0, 2.0, None, 4.0, 5.0, 6.0]),
        ("c", "text", ["p", "q", "p", "q", "p", "q"]),
        ("y", "text", ["a", "a", "b", "b", "a", "b"]),
    ], target="y")
    # a subquery of it would rename the repeats (DuckDB's x_1), making the target's copy a
    # feature
    with contextlib.closing(duckdb_with(table)) as con, pytest.raises(
        sqltree.DataError, match=r"repeats column names \(.*'x'"
    ):
        sqltree.train(query, target="y", connection=con, min_cases=1)


def test_predict_refuses_text_where_the_tree_compares_numbers():
    # The engine's BinderException went through (fixed: predict checks the source's types).
    model = sqltree.train(SMALL, target="y", min_cases=1)
    with pytest.raises(sqltree.DataError, match="compares it with numbers"):
        model.predict(pd.DataFrame({"x": ["abc", "1"]}))


@pytest.mark.parametrize("call", [
    lambda m: m.to_sql(proba=True),
    lambda m: m.to_sql(output="weird"),
    lambda m: m.to_sql(view="v"),
    lambda m: m.to_sql("no such dialect"),
    lambda m: m.predict(SMALL, proba=True, column="proba_a"),
], ids=["proba-without-table", "unknown-output", "view-without-table", "unknown-dialect",
        "column-named-like-a-probability"])
def test_bad_scoring_arguments_raise_sqltree_errors(call):
    # They raised plain ValueError (fixed: OptionError, still a ValueError).
    model = sqltree.train(SMALL, target="y", min_cases=1)
    with pytest.raises(sqltree.OptionError):
        call(model)
