"""Errors a person can act on, from the Python API: each says what is wrong with which source
on which engine, options are refused before any query, and a source name is never guessed."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
from sqlglot import exp

import sqltree
from sqltree.dataset import describe_source
from sqltree.engines.duckdb import DuckDBEngine
from tests.conftest import EngineFactory
from tests.helpers import GOLF, read_csv

SMALL = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "y": list("aaabbb")})


# -- what the engine cannot read ---------------------------------------------------------------
def test_a_missing_table_names_the_source_and_the_engine(engine_factory):
    engine, _ = engine_factory(SMALL)
    with pytest.raises(sqltree.SourceError) as raised:
        sqltree.train("no_such_table", target="y", connection=engine)
    error = raised.value
    assert (error.source, error.engine) == ("table 'no_such_table'", engine.NAME)
    assert str(error).startswith(f"{engine.NAME} cannot read table 'no_such_table': ")
    assert "no_such_table" in str(error).split(": ", 1)[1]  # the engine's own words follow
    assert "\n" not in str(error)


def test_predict_on_a_missing_table(engine_factory):
    engine, _ = engine_factory(SMALL)
    model = sqltree.train(SMALL, target="y", min_cases=1)
    with pytest.raises(sqltree.SourceError, match=f"{engine.NAME} cannot read table 'nope'"):
        model.predict("nope", connection=engine)


def test_a_missing_column_in_a_query(engine_factory):
    engine, source = engine_factory(SMALL)
    query = exp.select("x", "no_such_column", "y").from_(source)
    with pytest.raises(sqltree.SourceError) as raised:
        sqltree.train(query, target="y", connection=engine)
    assert str(raised.value).startswith(f"{engine.NAME} cannot read the query 'SELECT x, ")
    assert "no_such_column" in str(raised.value)


def test_predict_on_text_where_the_tree_compares_numbers(engine_factory):
    model = sqltree.train(SMALL, target="y", min_cases=1)
    engine, source = engine_factory(pd.DataFrame({"x": ["abc", "1"]}))
    with pytest.raises(sqltree.DataError, match=r"column 'x' is \w+ in the source, but the tree "
                       r"compares it with numbers \(x <= 3\.0\)"):
        model.predict(source, connection=engine)


@pytest.mark.postgres
def test_a_table_the_role_may_not_read(request, postgres_admin, postgres_url):
    # Only PostgreSQL has roles: DuckDB and Spark read what the process may read, and the
    # tests run as root, whom file permissions do not stop.
    factory = EngineFactory("postgres", request)
    _, source = factory(SMALL, "secret")
    postgres_admin.execute("DROP ROLE IF EXISTS sqltree_reader")
    postgres_admin.execute("CREATE ROLE sqltree_reader LOGIN")
    try:
        url = postgres_url.replace("postgres@", "sqltree_reader@", 1)
        with pytest.raises(sqltree.SourceError) as raised:
            sqltree.train(source, target="y", connection=url)
        assert raised.value.engine == "PostgreSQL"
        assert str(raised.value).startswith(
            f"PostgreSQL cannot read table '{source.db}.secret': permission denied for schema"
        )
        assert str(raised.value).endswith("(SQLSTATE 42501)")
    finally:
        factory.close()
        postgres_admin.execute("DROP ROLE sqltree_reader")


def test_a_server_that_refuses_the_connection():
    pytest.importorskip("psycopg")
    # Port 1 on this machine: nothing listens there, so the connection is refused at once.
    with pytest.raises(sqltree.EngineConnectionError) as raised:
        sqltree.train(SMALL, target="y", connection="postgresql://me:secret@127.0.0.1:1/db")
    message = str(raised.value)
    assert message.startswith("PostgreSQL: cannot connect to postgresql://me@127.0.0.1:1/db: ")
    assert "refused" in message and "secret" not in message and "\n" not in message


# -- options, before any query --------------------------------------------------------------------
class NoQueries(DuckDBEngine):
    """An engine that fails the test if anything reaches the database."""

    def _run(self, sql):
        raise AssertionError(f"a query ran: {sql}")

    def _run_columns(self, sql):
        raise AssertionError(f"a query ran: {sql}")


@pytest.mark.parametrize("options, error, message", [
    ({"max_depth": -1}, sqltree.OptionError, "max_depth must be at least 1, not -1"),
    ({"max_bins": 0}, sqltree.OptionError, "max_bins must be at least 2, not 0"),
    ({"cf": 0}, sqltree.OptionError, r"cf must be in \(0, 0.5\], not 0"),
    ({"criterion": "gini"}, sqltree.UnsupportedOptionError, "apply to algorithm='cart' only"),
    ({"max_dept": 3}, sqltree.UnsupportedOptionError,
     r"train\(\) got unexpected keyword arguments: 'max_dept' \(did you mean 'max_depth'\?\)"),
    ({"progress": "yes"}, sqltree.OptionError, "progress must be True, False or a callable"),
], ids=lambda v: repr(v) if isinstance(v, dict) else "")
def test_options_are_refused_before_any_query(options, error, message):
    engine = NoQueries()
    with pytest.raises(error, match=message):
        sqltree.train("t", target="y", connection=engine, **options)
    assert engine.stats.queries == 0


def test_option_errors_are_value_errors_and_unused_ones_type_errors():
    assert issubclass(sqltree.OptionError, ValueError)
    assert issubclass(sqltree.UnsupportedOptionError, sqltree.OptionError)
    assert issubclass(sqltree.UnsupportedOptionError, sqltree.UnsupportedError)
    assert issubclass(sqltree.UnsupportedOptionError, TypeError)
    assert issubclass(sqltree.SourceError, sqltree.DataError)


@pytest.mark.parametrize("settings, message", [
    ({"threads": 0}, "threads must be a whole number of at least 1, not 0"),
    ({"memory_limit": "lots"}, "memory_limit 'lots' is not a size DuckDB reads"),
])
def test_duckdb_settings_are_options(settings, message):
    con = duckdb.connect()
    before = con.execute("SELECT current_setting('threads'), "
                         "current_setting('memory_limit')").fetchone()
    with pytest.raises(sqltree.OptionError, match=message):
        DuckDBEngine(con, **settings)
    assert con.execute("SELECT current_setting('threads'), "
                       "current_setting('memory_limit')").fetchone() == before


def test_an_unknown_dialect_names_the_nearest():
    model = sqltree.train(SMALL, target="y", min_cases=1)
    with pytest.raises(sqltree.OptionError, match="Did you mean postgres"):
        model.to_sql("postgress")


# -- sources are never guessed ---------------------------------------------------------------------
@pytest.mark.parametrize("text, said", [
    ("sales", "table 'sales'"),
    ("analytics.sales", "table 'analytics.sales'"),
    ("table:sales.csv", "table 'sales.csv'"),
    ("sales.csv", "file 'sales.csv'"),
    ("sales.PARQUET", "file 'sales.PARQUET'"),
    ("events/*.parquet", "file 'events/*.parquet'"),
    ("part-?.json", "file 'part-?.json'"),
    ("data/", "file 'data/'"),
    ("s3a://bucket/sales", "file 's3a://bucket/sales'"),
    ("file:sales", "file 'sales'"),
    ("SELECT * FROM sales", "the query 'SELECT * FROM sales'"),
    ("  with a as (select 1) select * from a", "the query 'with a as (select 1) select * from a'"),
])
def test_what_a_source_name_means(text, said):
    assert describe_source(text) == said


@pytest.fixture
def wine(tmp_path, monkeypatch):
    """A working directory holding a folder ``wine/`` of Parquet (golf's rows), and a DuckDB
    connection holding a table ``wine`` (golf's first 10 rows): the case the folder was read
    for the table."""
    monkeypatch.chdir(tmp_path)
    frame = read_csv(GOLF)
    (tmp_path / "wine").mkdir()
    frame.to_parquet(tmp_path / "wine" / "part-0.parquet")
    con = duckdb.connect()
    con.register("golf_rows", frame.head(10))
    con.execute("CREATE TABLE wine AS SELECT * FROM golf_rows")
    yield con
    con.close()


def test_a_table_name_that_is_also_a_folder_is_refused(wine):
    with pytest.raises(sqltree.OptionError, match=(
        r"'wine' could be the table 'wine' or the folder 'wine' in the working directory: "
        r"write table:wine for the table or file:wine for the folder \(in Python, "
        r"sqltree.source\(table='wine'\) or sqltree.source\(file='wine'\)\)"
    )):
        sqltree.train("wine", target="play", connection=wine)


@pytest.mark.parametrize("source, rows", [
    ("table:wine", 10),
    (lambda: sqltree.source(table="wine"), 10),
    ("file:wine", 14),
    ("wine/", 14),
    (lambda: sqltree.source(file="wine"), 14),
], ids=["table:", "source(table=)", "file:", "separator", "source(file=)"])
def test_saying_which_one(wine, source, rows):
    source = source() if callable(source) else source
    model = sqltree.train(source, target="play", connection=wine, min_cases=1)
    assert model.stats["rows"] == rows


def test_a_name_no_file_shares_is_a_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    con = duckdb.connect()
    con.register("small", SMALL)
    con.execute("CREATE TABLE wine AS SELECT * FROM small")
    assert sqltree.train("wine", target="y", connection=con, min_cases=1).stats["rows"] == 6


@pytest.mark.parametrize("kwargs", [{}, {"table": "a", "file": "b"}, {"query": ""}])
def test_source_takes_exactly_one_kind(kwargs):
    with pytest.raises(sqltree.OptionError):
        sqltree.source(**kwargs)


def test_a_source_query_is_checked_as_any_query():
    with pytest.raises(sqltree.DataError, match="one query"):
        sqltree.train(sqltree.source(query="SELECT 1; SELECT 2"), target="y")
