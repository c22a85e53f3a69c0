"""The same data gives the same tree on DuckDB, PostgreSQL and Spark.

DuckDB (the reference) trains on each data set once; every engine of ``engine_factory``
loads the same DataFrame and must grow the same tree, counts and thresholds within 1e-9.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest
from sqlglot import exp

import sqltree
from sqltree.algorithms import grow
from sqltree.dataset import describe, sort_key
from sqltree.engines.base import Engine
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.errors import DataError, UnsupportedError
from sqltree.grower import GrowOptions, GrowStats
from sqltree.sqlexpr import computed_once, fenced
from sqltree.tree import NOMINAL, Node

from .conftest import DATA, ENGINES, SQLITE, EngineFactory

TOLERANCE = 1e-9


# -- data sets -------------------------------------------------------------------------------
def golf() -> pd.DataFrame:
    return pd.read_csv(DATA / "golf.csv")


def golf_numeric() -> pd.DataFrame:
    return pd.read_csv(DATA / "golf_numeric_humidity.csv")


def iris() -> pd.DataFrame:
    from sklearn.datasets import load_iris

    bunch = load_iris(as_frame=True)
    frame = bunch.frame.rename(columns={"target": "species"})
    frame["species"] = [str(bunch.target_names[i]) for i in bunch.target]
    return frame


def with_nulls() -> pd.DataFrame:
    """NULLs in continuous, nominal and boolean features and in the target."""
    rng = np.random.default_rng(11)
    n = 400
    a = rng.normal(size=n).round(2)
    b = rng.choice(["x", "y", "z", "B", "a"], size=n).astype(object)
    c = (rng.random(n) < 0.4).astype(object)
    d = rng.integers(0, 8, size=n).astype(float)
    y = np.where(
        a + (b == "x") * 0.7 - (c == True) * 0.4 + rng.normal(0, 0.4, n) > 0.1,  # noqa: E712
        "yes",
        "no",
    ).astype(object)
    a[rng.random(n) < 0.15] = np.nan
    b[rng.random(n) < 0.1] = None
    c[rng.random(n) < 0.1] = None
    d[rng.random(n) < 0.2] = np.nan
    y[rng.random(n) < 0.03] = None
    return pd.DataFrame({"a": a, "b": b, "c": c, "d": d, "y": y})


def mixed_100k() -> pd.DataFrame:
    """100,000 rows: doubles, integers, text, booleans, NULLs in most columns, 3 classes."""
    rng = np.random.default_rng(2026)
    n = 100_000
    x = rng.normal(size=n).round(3)
    k = rng.integers(0, 60, size=n)
    colour = rng.choice(["red", "green", "blue", "Black", "white", "ünï"], size=n).astype(object)
    flag = rng.random(n) < 0.3
    z = rng.exponential(size=n).round(2)
    score = (
        x + (colour == "red") * 1.1 - (k > 35) * 0.8 + flag * 0.5 - 0.3 * z + rng.normal(0, 0.5, n)
    )
    label = np.where(score < -0.6, "low", np.where(score < 0.7, "mid", "high")).astype(object)
    x[rng.random(n) < 0.05] = np.nan
    z[rng.random(n) < 0.1] = np.nan
    colour[rng.random(n) < 0.03] = None
    flag_values = flag.astype(object)
    flag_values[rng.random(n) < 0.02] = None
    return pd.DataFrame(
        {"x": x, "k": k, "colour": colour, "flag": flag_values, "z": z, "label": label}
    )


def odd_names() -> pd.DataFrame:
    """Identifiers with spaces, quotes, unicode and SQL keywords; values that sort by case."""
    rng = np.random.default_rng(5)
    n = 60
    group = rng.choice(["B", "a", "O'Brien", 'say "hi"', "ß", "_z"], size=n)
    num = rng.integers(0, 20, size=n).astype(float)
    target = np.where((group == "B") | (group == "ß") | (num > 14), "Yes", "no")
    return pd.DataFrame(
        {
            "select": group,
            'it\'s a "col"': num,
            "Größe ü": rng.choice(["lo", "hi"], size=n),
            "class": target,
        }
    )


DATASETS: dict[str, tuple[Any, str, dict[str, Any]]] = {
    "golf": (golf, "play", {}),
    "golf_numeric_humidity": (golf_numeric, "play", {}),
    "iris": (iris, "species", {}),
    "nulls": (with_nulls, "y", {}),
    "odd_names": (odd_names, "class", {}),
    "mixed_100k": (mixed_100k, "label", {"max_depth": 4}),
}


@functools.cache
def frame_of(name: str) -> pd.DataFrame:
    return DATASETS[name][0]()


# -- helpers -----------------------------------------------------------------------------------
def train(engine: Engine, source: Any, target: str, **options: Any) -> tuple[Node, GrowStats]:
    """describe + grow, dropping every temporary object afterwards (as ``train`` does)."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*NULL target")
            data = describe(source, engine, target)
        return grow(data, GrowOptions(algorithm="c4.5", **options))
    finally:
        engine.cleanup()


@functools.cache
def reference(name: str) -> dict[str, Any]:
    """The tree DuckDB grows from the DataFrame itself (not a loaded copy)."""
    _, target, options = DATASETS[name]
    engine = DuckDBEngine()
    root, _ = train(engine, frame_of(name), target, **options)
    return root.to_dict()


def assert_same_tree(got: Any, want: Any, path: str = "root") -> None:
    """Equal structure and values; floats equal within ``TOLERANCE`` (relative or absolute)."""
    if isinstance(want, dict):
        assert isinstance(got, dict), path
        assert sorted(got) == sorted(want), f"{path}: keys {sorted(got)} != {sorted(want)}"
        for key in want:
            assert_same_tree(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: {got} != {want}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same_tree(g, w, f"{path}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert isinstance(got, (int, float)), f"{path}: {got!r} != {want!r}"
        assert math.isclose(got, want, rel_tol=TOLERANCE, abs_tol=TOLERANCE), (
            f"{path}: {got!r} != {want!r}"
        )
    else:
        assert got == want and type(got) is type(want), f"{path}: {got!r} != {want!r}"


# -- same tree everywhere ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["golf", "golf_numeric_humidity", "iris", "nulls"])
def test_same_tree_on_every_engine(engine_factory: EngineFactory, name: str) -> None:
    _, target, options = DATASETS[name]
    engine, source = engine_factory(frame_of(name), name)
    root, _ = train(engine, source, target, **options)
    assert_same_tree(root.to_dict(), reference(name))


@pytest.mark.slow
def test_same_tree_on_100k_rows(engine_factory: EngineFactory) -> None:
    frame = frame_of("mixed_100k")
    assert len(frame) == 100_000
    engine, source = engine_factory(frame, "mixed 100k")
    root, stats = train(engine, source, "label", max_depth=4)
    assert_same_tree(root.to_dict(), reference("mixed_100k"))
    # Levels 0-3 split; the leaves at depth 4 are counted from their parents' histograms.
    assert len(stats.levels) == 4
    assert sum(1 for n in root.walk() if n.split is not None) >= 5


def test_odd_identifiers_survive(engine_factory: EngineFactory) -> None:
    engine, source = engine_factory(frame_of("odd_names"), 'my "table"; drop it')
    root, _ = train(engine, source, "class")
    assert_same_tree(root.to_dict(), reference("odd_names"))
    features = {n.split.feature for n in root.walk() if n.split is not None}
    assert features <= {"select", 'it\'s a "col"', "Größe ü"}
    assert "select" in features
    # Nominal values are ordered by code point on every engine, whatever the collation.
    select_split = next(n.split for n in root.walk() if n.split and n.split.feature == "select")
    assert select_split.groups == [["B"], ["O'Brien"], ["_z"], ["a"], ['say "hi"'], ["ß"]]


@pytest.mark.parametrize("engine_factory", [*ENGINES, SQLITE], indirect=True)
def test_nominal_domains_are_read_in_one_statement(engine_factory: EngineFactory) -> None:
    """Each nominal feature's domain is the values it holds, sorted as Python sorts them; all
    of them come from one statement where the engine has grouping sets (one each on SQLite)."""
    frame = pd.DataFrame({
        "colour": ["red", "it's", None, "red", "Blue", "ß"],
        "flag": [True, False, None, True, True, False],
        "select": ["a", "b", "a", "b", "a", "b"],
        "x": [0.5, 1.5, 2.5, None, 4.5, 5.5],
        "y": ["p", "q", "p", "q", "p", "q"],
    })
    statements = {}
    for columns in (["colour", "x", "y"], list(frame.columns)):
        engine, source = engine_factory(frame[columns], f"domains {len(columns)}")
        before = engine.stats.queries
        data = describe(source, engine, "y")
        statements[len(columns)] = engine.stats.queries - before
        nominal = [f for f in data.features if f.kind == NOMINAL]
        assert [f.name for f in nominal] == [c for c in ("colour", "flag", "select")
                                             if c in columns]
        for f in nominal:
            assert f.values == sorted(set(frame[f.name].dropna()), key=sort_key)
    assert statements[5] - statements[3] == (0 if engine.SUPPORTS_GROUPING_SETS else 2)


@pytest.mark.parametrize("engine_factory", [*ENGINES, SQLITE], indirect=True)
def test_float_batches_are_doubles_with_nan_for_null(engine_factory: EngineFactory) -> None:
    """The memory plan reads its rows with ``float_batches``: every column float64, NaN where
    the engine has NULL, rows in the query's order."""
    frame = pd.DataFrame({
        "k": [1, 2, 3, 4],
        "i": pd.array([7, None, -2, 0], dtype="Int64"),
        "x": [0.5, None, 2.5, 1e300],
    })
    engine, source = engine_factory(frame, "floats")
    query = exp.select("k", "i", "x").from_(source).order_by("k")
    batches = list(engine.float_batches(query))
    columns = [np.concatenate([b[j] for b in batches]) for j in range(3)]
    assert all(c.dtype == np.float64 for c in columns)
    np.testing.assert_array_equal(columns[0], [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(columns[1], [7.0, np.nan, -2.0, 0.0])
    np.testing.assert_array_equal(columns[2], [0.5, np.nan, 2.5, 1e300])


def test_duckdb_float_batches_read_as_the_frames_do() -> None:
    """DuckDB's ``float_batches`` (numpy arrays from ``fetchnumpy``, no pandas) give the
    numbers of the DataFrame path every other engine takes, for each numeric type."""
    engine = DuckDBEngine()
    types = ["DECIMAL(10,2)", "BIGINT", "DOUBLE", "BOOLEAN", "INTEGER", "HUGEINT", "SMALLINT",
             "FLOAT", "UBIGINT"]
    rows = [("1.5", "2", "3.5", "true", "4", "5", "6", "7.25", "8"),
            (None,) * 9,
            ("-2.25", "-9", "1e300", "false", "-1", "170141183460469231731687303715884105727",
             "1", "0.1", "18446744073709551615")]
    values = exp.Values(expressions=[
        exp.tuple_(*[exp.cast(exp.Literal.string(v) if v is not None else exp.null(),
                              exp.DataType.build(t, dialect="duckdb"))
                     for v, t in zip(row, types, strict=True)])
        for row in rows
    ], alias=exp.TableAlias(this=exp.to_identifier("t")))
    query = exp.select("*").from_(values)
    ours = list(engine.float_batches(query))
    theirs = list(Engine.float_batches(engine, query))
    assert len(ours) == len(theirs) == 1
    for a, b in zip(ours[0], theirs[0], strict=True):
        assert a.dtype == b.dtype == np.float64
        np.testing.assert_array_equal(a, b)


# -- temporary objects -------------------------------------------------------------------------
def temp_objects(engine: Engine) -> list[str]:
    """Names of the temporary tables or views sqltree left in the engine's session."""
    kind = type(engine).__name__
    if kind == "DuckDBEngine":
        rows = engine._run("SELECT table_name FROM duckdb_tables() WHERE temporary")
        rows += engine._run("SELECT view_name FROM duckdb_views() WHERE temporary")
        return [r[0] for r in rows if r[0].startswith("sqltree_")]
    if kind == "PostgresEngine":
        rows = engine._run(
            "SELECT relname FROM pg_class WHERE relpersistence IN ('t', 'u') "
            "AND relname LIKE 'sqltree%'"
        )
        return [r[0] for r in rows]
    spark = engine.spark  # type: ignore[attr-defined]
    views = [t.name for t in spark.catalog.listTables() if t.name.startswith("sqltree_")]
    cached = [name for name in engine._stored]  # type: ignore[attr-defined]
    return views + cached


def test_temp_objects_dropped_after_training(engine_factory: EngineFactory) -> None:
    engine, source = engine_factory(frame_of("golf_numeric_humidity"), "golf")
    train(engine, source, "play")
    assert temp_objects(engine) == []
    assert engine._temp == []


class Boom(Exception):
    pass


@pytest.mark.parametrize("failure", [Boom, KeyboardInterrupt])
def test_temp_objects_dropped_after_error(
    engine_factory: EngineFactory, monkeypatch: pytest.MonkeyPatch, failure: type[BaseException]
) -> None:
    engine, source = engine_factory(frame_of("golf_numeric_humidity"), "golf")
    data = describe(source, engine, "play")
    calls = {"n": 0}
    real = engine.execute

    def failing(query: exp.Expression) -> list[tuple[Any, ...]]:
        calls["n"] += 1
        if calls["n"] == 4:  # in the middle of the second level
            raise failure("stop")
        return real(query)

    monkeypatch.setattr(engine, "execute", failing)
    with pytest.raises(failure):
        try:
            grow(data, GrowOptions())
        finally:
            engine.cleanup()
    assert engine._temp == []
    assert temp_objects(engine) == []


# -- engine specifics --------------------------------------------------------------------------
@pytest.mark.postgres
def test_postgres_cannot_read_files(postgres_url: str) -> None:
    from sqltree.engines.postgres import PostgresEngine

    engine = PostgresEngine.connect(postgres_url)
    try:
        with pytest.raises(UnsupportedError, match="cannot read the local file"):
            describe(str(DATA / "golf.csv"), engine, "play")
    finally:
        engine.close()


@pytest.mark.postgres
def test_postgres_read_only_role(postgres_admin: Any, postgres_url: str) -> None:
    """SELECT on the source and TEMP on the database are all a training role needs."""
    import psycopg

    from sqltree.engines.postgres import PostgresEngine

    admin = PostgresEngine(postgres_admin)
    source = exp.Table(
        this=exp.to_identifier("golf", quoted=True), db=exp.to_identifier("ro_data", quoted=True)
    )
    statements = [
        "DROP SCHEMA IF EXISTS ro_data CASCADE",
        "DROP ROLE IF EXISTS sqltree_reader",
        "CREATE SCHEMA ro_data",
        "CREATE ROLE sqltree_reader LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE",
        "REVOKE ALL ON DATABASE postgres FROM PUBLIC",
        "GRANT CONNECT, TEMPORARY ON DATABASE postgres TO sqltree_reader",
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
    ]
    for sql in statements:
        postgres_admin.execute(sql)
    admin.load_dataframe(golf_numeric(), source)
    for sql in [
        "GRANT USAGE ON SCHEMA ro_data TO sqltree_reader",
        "GRANT SELECT ON ro_data.golf TO sqltree_reader",
    ]:
        postgres_admin.execute(sql)
    count_user_relations = (
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relpersistence <> 't' AND n.nspname NOT LIKE 'pg\\_%' "
        "AND n.nspname <> 'information_schema'"
    )
    before = postgres_admin.execute(count_user_relations).fetchone()
    conninfo = psycopg.conninfo.conninfo_to_dict(postgres_url)
    conninfo["user"] = "sqltree_reader"
    engine = PostgresEngine.connect(psycopg.conninfo.make_conninfo(**conninfo))
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            engine.connection.execute("CREATE TABLE public.nope (x int)")
        root, _ = train(engine, source, "play")
        assert_same_tree(root.to_dict(), reference("golf_numeric_humidity"))
        assert temp_objects(engine) == []
        assert postgres_admin.execute(count_user_relations).fetchone() == before
    finally:
        engine.close()
        for sql in [
            "DROP SCHEMA ro_data CASCADE",
            "REVOKE ALL ON DATABASE postgres FROM sqltree_reader",
            "DROP ROLE sqltree_reader",
            "GRANT CONNECT, TEMPORARY ON DATABASE postgres TO PUBLIC",
        ]:
            postgres_admin.execute(sql)


@pytest.mark.postgres
@pytest.mark.parametrize(("parallel", "persistence"), [(None, "u"), (False, "t")])
def test_postgres_working_tables_are_readable_by_parallel_workers(
    postgres_url: str, parallel: bool | None, persistence: str
) -> None:
    """Where the role may create tables in its schema (the test role may), working tables are
    UNLOGGED tables there, which parallel workers scan; TEMP tables with ``parallel=False``.
    Either way none is left."""
    from sqltree.engines.postgres import PostgresEngine

    engine = PostgresEngine.connect(postgres_url, parallel=parallel)
    where = ("SELECT c.relpersistence, n.nspname = current_schema() FROM pg_class c "
             "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relname = %s")
    try:
        table = engine.materialize("probe", exp.select(exp.alias_(exp.Literal.number(1), "x")))
        kind, in_schema = engine.connection.execute(where, (table.name,)).fetchone()
        assert kind == persistence
        assert in_schema == (persistence == "u")
        assert engine.execute(exp.select("x").from_(table)) == [(1,)]
        engine.cleanup()
        assert engine.connection.execute(where, (table.name,)).fetchall() == []
    finally:
        engine.close()


@pytest.mark.postgres
def test_postgres_inside_callers_transaction(postgres_url: str) -> None:
    """On a non-autocommit connection a failed query leaves the caller's transaction usable."""
    import psycopg

    from sqltree.engines.postgres import PostgresEngine

    conn = psycopg.connect(postgres_url)  # autocommit off: sqltree runs inside a transaction
    try:
        conn.execute("CREATE TEMP TABLE callers_work (x int)")
        conn.execute("INSERT INTO callers_work VALUES (1)")
        engine = PostgresEngine(conn)
        with pytest.raises(psycopg.errors.UndefinedTable):
            engine._run("SELECT * FROM no_such_table")
        root, _ = train(engine, golf_numeric(), "play")
        assert_same_tree(root.to_dict(), reference("golf_numeric_humidity"))
        assert conn.execute("SELECT x FROM callers_work").fetchall() == [(1,)]
        assert temp_objects(engine) == []
    finally:
        conn.close()


@pytest.mark.postgres
def test_postgres_statements_run_without_jit(postgres_url: str) -> None:
    """sqltree's statements run with JIT off; the connection's own setting is left as it was."""
    from sqltree.engines.postgres import PostgresEngine

    engine = PostgresEngine.connect(postgres_url)
    try:
        before = engine.connection.execute("SHOW jit").fetchone()
        (row,) = engine.execute(exp.select(exp.func("CURRENT_SETTING", exp.Literal.string("jit"))))
        assert row == ("off",)
        assert engine.connection.execute("SHOW jit").fetchone() == before
    finally:
        engine.close()


@pytest.mark.postgres
def test_postgres_statements_name_their_tables_and_compute_in_double(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each stored table is analyzed by name (a bare ``ANALYZE`` analyzes the whole
    database); weights are DOUBLE, not NUMERIC (PostgreSQL's type for ``1.0e0``, whose sums
    and logarithms cost 20 times as much); the derived tables marked ``computed_once`` are kept
    apart by ``OFFSET 0``, and only on PostgreSQL."""
    from sqltree.engines.postgres import PostgresEngine
    from sqltree.queries import build_level0

    sent: list[str] = []
    real = PostgresEngine._execute

    def recorded(self: Any, sql: str, *, fetch: bool) -> list[tuple[Any, ...]]:
        sent.append(sql)
        return real(self, sql, fetch=fetch)

    monkeypatch.setattr(PostgresEngine, "_execute", recorded)
    data = pd.DataFrame({"odd name": [1.0, 2.0, 3.0, 4.0] * 5, "y": ["a", "b"] * 10})
    engine = PostgresEngine.connect(postgres_url)
    try:
        level = engine.materialize("level", build_level0(describe(data, engine, "y")))
        (w_type,) = engine.execute(
            exp.select(exp.cast(exp.func("PG_TYPEOF", exp.column("w")), "TEXT"))
            .from_(level).limit(1))
        assert w_type == ("double precision",)
        model = sqltree.train(data, "y", connection=engine.connection, algorithm="cart",
                              max_depth=2, plan="tables")
        assert model.root.children
    finally:
        engine.close()
    analyzed = [s for s in sent if s.startswith("ANALYZE")]
    assert analyzed and all(s.startswith('ANALYZE "sqltree_') for s in analyzed), analyzed
    assert any("OFFSET 0" in s for s in sent)
    marked = exp.select("*").from_(computed_once(exp.select("a").from_("t")).subquery("x"))
    assert "OFFSET 0" in fenced(marked).sql("postgres")
    assert "OFFSET" not in DuckDBEngine(duckdb.connect()).render(marked)


@pytest.mark.postgres
def test_postgres_rows_are_python_numbers(postgres_url: str) -> None:
    from sqltree.engines.postgres import PostgresEngine

    engine = PostgresEngine.connect(postgres_url)
    try:
        query = exp.select(
            exp.func("SUM", exp.cast(exp.Literal.number(3), "BIGINT")),
            exp.func("AVG", exp.cast(exp.Literal.number(3), "INT")),
            exp.Literal.number("1.5"),
        )
        (row,) = engine.execute(query)
        assert row == (3, 3.0, 1.5)
        assert [type(v) for v in row] == [float, float, float]
        columns = engine.columns(exp.select(exp.cast(exp.Literal.string("a"), "CHAR(3)").as_("c")))
        assert columns[0][1].is_type(exp.DataType.Type.CHAR)
    finally:
        engine.close()


@pytest.mark.spark
def test_spark_reads_csv_like_duckdb_and_counts_jobs(spark: Any) -> None:
    """Header, inferred numbers, and true/false kept as text, as DuckDB's reader does."""
    from sqltree.engines.spark import SparkEngine

    engine = SparkEngine(spark)
    path = str(DATA / "golf.csv")
    root, stats = train(engine, path, "play")
    want, _ = train(DuckDBEngine(), path, "play")
    assert_same_tree(root.to_dict(), want.to_dict())
    windy = next(n.split for n in root.walk() if n.split and n.split.feature == "windy")
    assert windy.groups == [["false"], ["true"]]
    assert temp_objects(engine) == []
    per_statement = engine.stats.jobs_per_statement
    assert per_statement is not None and len(per_statement) == engine.stats.queries
    assert all(jobs >= 1 for jobs in per_statement)
    assert engine.stats.jobs is not None and engine.stats.jobs >= len(stats.levels)


@pytest.mark.spark
def test_spark_runs_large_statements_without_whole_stage_codegen(spark: Any) -> None:
    """A large statement (a big tree's scoring query) runs interpreted; the setting returns."""
    from sqltree.engines.spark import SparkEngine

    key = "spark.sql.codegen.wholeStage"
    engine = SparkEngine(spark)
    before = spark.conf.get(key, None)
    seen = []
    probe = exp.select(exp.Literal.number(1).as_("one"))
    original = engine.spark.sql

    def spy(sql: str) -> Any:
        seen.append(spark.conf.get(key, None))
        return original(sql)

    engine.spark = type("Session", (), {"sql": staticmethod(spy), "conf": spark.conf})()
    engine.LARGE_STATEMENT = 10**9
    assert engine.execute(probe) == [(1,)]
    engine.LARGE_STATEMENT = 1
    assert engine.execute(probe) == [(1,)]
    assert seen == [before, "false"]
    assert spark.conf.get(key, None) == before
    engine.spark = spark
    engine.cleanup()


# -- the public API on every engine --------------------------------------------------------------
API_CASES = {
    "c4.5-pruned-nulls": ("nulls", {"algorithm": "c4.5"}),
    "id3-golf": ("golf", {"algorithm": "id3"}),
    "cart-iris": ("iris", {"algorithm": "cart"}),
    "cart-nulls": ("nulls", {"algorithm": "cart", "max_depth": 4}),
}


@functools.cache
def reference_model(case: str) -> Any:
    import sqltree

    name, options = API_CASES[case]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*NULL target")
        return sqltree.train(frame_of(name), DATASETS[name][1], **options)


@pytest.mark.parametrize("case", list(API_CASES))
def test_train_same_model_on_every_engine(engine_factory: EngineFactory, case: str) -> None:
    """``sqltree.train`` (growth, pruning, every algorithm) through each engine."""
    import sqltree

    name, options = API_CASES[case]
    engine, source = engine_factory(frame_of(name), name)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*NULL target")
        model = sqltree.train(source, DATASETS[name][1], connection=engine, **options)
    assert_same_tree(model.root.to_dict(), reference_model(case).root.to_dict())
    assert temp_objects(engine) == []


def test_scoring_same_on_every_engine(engine_factory: EngineFactory) -> None:
    """The compiled SQL (C4.5 fractional routing of NULLs included) scores alike everywhere."""
    model = reference_model("c4.5-pruned-nulls")
    frame = frame_of("nulls").assign(rid=range(len(frame_of("nulls"))))
    engine, source = engine_factory(frame, "to score")
    got = model.predict(source, connection=engine, proba=True).sort_values("rid")
    want = model.predict(frame, proba=True).sort_values("rid")
    assert list(got["prediction"]) == list(want["prediction"])
    for column in model.proba_columns():
        assert np.allclose(got[column].astype(float), want[column].astype(float), atol=1e-12)


@pytest.mark.postgres
def test_postgres_url_trains_a_dataframe_and_closes(postgres_admin: Any, postgres_url: str) -> None:
    """``connection=<url>``: the DataFrame is copied to a temp table, the connection closed."""
    import sqltree

    # the training's own backends, by name: other tests' connections come and go meanwhile
    name = "sqltree-url-test"
    url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}application_name={name}"
    clients = ("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
               f"AND application_name = '{name}'")
    model = sqltree.train(golf_numeric(), "play", connection=url)
    assert_same_tree(model.root.to_dict(), sqltree.train(golf_numeric(), "play").root.to_dict())
    # a backend leaves pg_stat_activity a moment after its client disconnects
    deadline = time.monotonic() + 10
    while postgres_admin.execute(clients).fetchone() != (0,) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert postgres_admin.execute(clients).fetchone() == (0,)


SPECIAL_VALUES = (
    "SELECT CAST(x AS DOUBLE) AS x, CAST(y AS DOUBLE) AS y, label FROM (VALUES "
    "('1', '1', 'a'), ('2', 'NaN', 'b'), ('3', 'Infinity', 'a'), ('4', '4', 'b')) AS t(x, y, label)"
)


def _assert_nan_scores_above_every_number(source: str, engine: Engine) -> None:
    """The compiled SQL sends the special values' NaN (row 2) down ``>``, as it does +inf."""
    from .test_bad_input import nan_model

    model = nan_model()
    got = model.predict(source, connection=engine)
    assert list(got["x"]) == [1.0, 2.0, 3.0, 4.0]  # the source's order
    expected = [model.predict_row({"y": v}) for v in (1.0, math.inf, math.inf, 4.0)]
    assert list(got["prediction"]) == expected == ["b", "a", "a", "b"]


@pytest.mark.postgres
def test_postgres_refuses_nan_and_reports_infinity(postgres_admin: Any, postgres_url: str) -> None:
    from sqltree.engines.postgres import PostgresEngine

    postgres_admin.execute("DROP TABLE IF EXISTS sqltree_special")
    query = exp.maybe_parse(SPECIAL_VALUES, dialect="duckdb").sql("postgres")
    postgres_admin.execute(f"CREATE TABLE sqltree_special AS {query}")
    engine = PostgresEngine.connect(postgres_url)
    try:
        with pytest.raises(DataError, match=r"columns holding NaN: \['y'\]"):
            describe("sqltree_special", engine, "label")
        data = describe("SELECT x, label FROM sqltree_special", engine, "label")
        assert data.infinite == []
        data = describe("SELECT NULLIF(y, 'NaN') AS y, label FROM sqltree_special", engine, "label")
        assert data.infinite == ["y"]
        _assert_nan_scores_above_every_number("sqltree_special", engine)
    finally:
        engine.close()
        postgres_admin.execute("DROP TABLE sqltree_special")


@pytest.mark.spark
def test_spark_refuses_nan_and_reports_infinity(spark: Any) -> None:
    from sqltree.engines.spark import SparkEngine

    query = exp.maybe_parse(SPECIAL_VALUES, dialect="duckdb").sql("spark")
    spark.sql(query).createOrReplaceTempView("sqltree_special")
    engine = SparkEngine(spark)
    try:
        with pytest.raises(DataError, match=r"columns holding NaN: \['y'\]"):
            describe("sqltree_special", engine, "label")
        nullif = "SELECT NULLIF(y, CAST('NaN' AS DOUBLE)) AS y, label FROM sqltree_special"
        data = describe(nullif, engine, "label")
        assert data.infinite == ["y"]
        _assert_nan_scores_above_every_number("sqltree_special", engine)
    finally:
        engine.cleanup()
        spark.catalog.dropTempView("sqltree_special")
