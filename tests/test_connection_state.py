"""The caller's connection comes back as it was found.

Every setting sqltree changes is given back after training and scoring, also when training
fails or is interrupted; two threads training on one connection both succeed (their statements
take turns); a Ctrl-C during training comes out as KeyboardInterrupt, with sqltree's tables
gone; on Spark, statements stay bounded however large the tree.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest
from sqlglot import exp

import sqltree
from sqltree.engines.duckdb import DuckDBEngine
from tests.helpers import mixed_table


class Boom(Exception):
    pass


def fail_at_level(level: int) -> Callable[[Any], None]:
    """A progress callback that fails training in the middle of growth."""
    seen = {"levels": 0}

    def progress(event: Any) -> None:
        if event.phase != "grow" or event.kind != "step":
            return
        seen["levels"] += 1
        if seen["levels"] == level:
            raise Boom("stop")

    return progress


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handler (KeyboardInterrupt) for the test, whatever ran before."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def interrupted(train: Callable[[], Any], after: float) -> None:
    """Run ``train`` with a SIGINT delivered to the process ``after`` seconds in; it must end
    in KeyboardInterrupt (a training that finished first fails the test).

    A KeyboardInterrupt raised while a garbage-collection callback runs (hypothesis installs
    one in the test process) is reported as unraisable and lost, as a user's Ctrl-C would be
    then; so while the training still runs, the signal is sent again each second."""
    done = threading.Event()

    def send() -> None:
        if done.wait(after):
            return
        for _ in range(10):
            signal.raise_signal(signal.SIGINT)
            if done.wait(1.0):
                return

    sender = threading.Thread(target=send, daemon=True)
    with pytest.raises(KeyboardInterrupt):
        try:
            sender.start()
            train()
        finally:
            # A signal already sent is handled here, still inside pytest.raises.
            done.set()
            sender.join()


def run_in_threads(work: Callable[[], Any], n: int = 2) -> tuple[list[Any], list[BaseException]]:
    """Run ``work`` in ``n`` threads released at the same moment; results and errors."""
    barrier = threading.Barrier(n)
    results: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            results.append(work())
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


# -- DuckDB ------------------------------------------------------------------------------------
def duckdb_settings(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    return dict(con.execute("SELECT name, value FROM duckdb_settings()").fetchall())


def duckdb_leftovers(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE temporary "
        "UNION ALL SELECT view_name FROM duckdb_views() WHERE temporary"
    ).fetchall()
    return [r[0] for r in rows if r[0].startswith("sqltree_")]


def duckdb_with(frame: pd.DataFrame, *settings: str) -> duckdb.DuckDBPyConnection:
    """A connection holding ``frame`` as table ``data``, with the caller's own settings."""
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE data AS SELECT * FROM frame")
    con.unregister("frame")
    for statement in settings:
        con.execute(statement)
    return con


CALLER_SETTINGS = (
    "SET threads = 2",
    "SET perfect_ht_threshold = 5",
    "SET disabled_optimizers = 'top_n'",
    "SET preserve_insertion_order = false",
)


@pytest.mark.parametrize("outcome", ["success", "failure"])
def test_duckdb_engine_options_and_settings_are_given_back(outcome: str) -> None:
    con = duckdb_with(mixed_table(2000), *CALLER_SETTINGS)
    before = duckdb_settings(con)
    engine = DuckDBEngine(con, threads=1, memory_limit="500MB")
    during = duckdb_settings(con)
    assert (during["threads"], during["perfect_ht_threshold"]) == ("1", "20")
    if outcome == "success":
        sqltree.train("data", target="label", connection=engine)
    else:
        with pytest.raises(Boom):
            sqltree.train("data", target="label", connection=engine, progress=fail_at_level(2))
    assert duckdb_settings(con) == before
    assert duckdb_leftovers(con) == []
    # The same engine used again applies its options again, and gives them back again.
    model = sqltree.train("data", target="label", connection=engine)
    assert duckdb_settings(con) == before
    model.predict("data", connection=engine)
    assert duckdb_settings(con) == before
    assert duckdb_leftovers(con) == []


def test_duckdb_settings_are_given_back_after_scoring_a_connection() -> None:
    frame = mixed_table(2000)
    model = sqltree.train(frame, target="label")
    con = duckdb_with(frame, *CALLER_SETTINGS)
    before = duckdb_settings(con)
    scored = model.predict("data", connection=con)
    assert len(scored) == len(frame)
    model.predict("data", connection=con, into="scored")
    assert duckdb_settings(con) == before
    assert duckdb_leftovers(con) == []


def test_sqltrees_own_duckdb_spills_into_the_temporary_folder(tmp_path, monkeypatch) -> None:
    """A database sqltree opens for itself never spills into the working directory."""
    import tempfile

    monkeypatch.chdir(tmp_path)
    for connection in (DuckDBEngine().connection, DuckDBEngine.private_connection()):
        ((folder,),) = connection.execute("SELECT current_setting('temp_directory')").fetchall()
        assert os.path.dirname(folder) == tempfile.gettempdir(), folder
    model = sqltree.train(pd.DataFrame({"x": range(40), "y": ["a", "b"] * 20}), "y",
                          plan="tables", connection=DuckDBEngine(memory_limit="50MB"))
    assert model.n_leaves >= 1 and not any(tmp_path.iterdir())


def test_sqltrees_own_duckdb_gives_free_memory_back() -> None:
    """sqltree's own databases free what a statement allocated as it ends; a user's
    connection keeps DuckDB's allocator settings (``test_connection_state``'s settings)."""
    from sqltree.engines.duckdb import OWN_DATABASE_ALLOCATOR

    for connection in (DuckDBEngine().connection, DuckDBEngine.private_connection()):
        for name, value in OWN_DATABASE_ALLOCATOR.items():
            ((got,),) = connection.execute(f"SELECT current_setting('{name}')").fetchall()
            assert got == value, name
    con = duckdb_with(mixed_table(200), *CALLER_SETTINGS)
    ((background,),) = con.execute(
        "SELECT current_setting('allocator_background_threads')").fetchall()
    sqltree.train("data", target="label", connection=con)
    assert con.execute("SELECT current_setting('allocator_background_threads')").fetchall() == [
        (background,)]


def test_two_threads_train_on_one_duckdb_connection() -> None:
    con = duckdb_with(mixed_table(5000), *CALLER_SETTINGS)
    want = sqltree.train(mixed_table(5000), target="label").text()
    before = duckdb_settings(con)
    results, errors = run_in_threads(
        lambda: sqltree.train("data", target="label", connection=con).text()
    )
    assert errors == []
    assert results == [want, want]
    assert duckdb_settings(con) == before
    assert duckdb_leftovers(con) == []


def test_two_threads_with_engine_options_on_one_duckdb_connection() -> None:
    con = duckdb_with(mixed_table(5000), *CALLER_SETTINGS)
    before = duckdb_settings(con)

    def work() -> str:
        engine = DuckDBEngine(con, threads=1, memory_limit="500MB")
        return sqltree.train("data", target="label", connection=engine).text()

    results, errors = run_in_threads(work)
    assert errors == []
    assert len(set(results)) == 1 and len(results) == 2
    assert duckdb_settings(con) == before
    assert duckdb_leftovers(con) == []


@pytest.mark.usefixtures("default_sigint")
@pytest.mark.parametrize("after", [0.3, 1.2])
def test_ctrl_c_during_duckdb_training(after: float) -> None:
    con = duckdb.connect()
    # A million rows labelled in 500 noisy stripes of ``a``: the tree is a chain hundreds of
    # levels deep, whose growth takes minutes, far longer than the interrupt's delay.
    con.execute(
        "CREATE TABLE big AS SELECT (hash(i) % 100000) / 100.0 AS a, "
        "(hash(i * 3) % 10007) / 7.0 AS b, CAST(hash(i * 5) % 997 AS INTEGER) AS c, "
        "CASE WHEN floor((hash(i) % 100000) / 200.0) % 2 = 0 AND hash(i * 7) % 10 > 0 "
        "THEN 'yes' ELSE 'no' END AS label FROM range(1000000) t(i)"
    )
    for statement in CALLER_SETTINGS:
        con.execute(statement)
    before = duckdb_settings(con)
    engine = DuckDBEngine(con, threads=1, memory_limit="1GB")
    interrupted(lambda: sqltree.train("big", target="label", connection=engine), after)
    assert duckdb_leftovers(con) == []
    assert duckdb_settings(con) == before
    assert con.execute("SELECT count(*) FROM big").fetchone() == (1_000_000,)


# -- PostgreSQL --------------------------------------------------------------------------------
def pg_state(conn: Any) -> tuple[Any, dict[str, str]]:
    """The transaction status and every setting, read without changing the status."""
    status = conn.info.transaction_status
    settings = dict(conn.execute("SELECT name, setting FROM pg_settings").fetchall())
    if status != conn.info.transaction_status:  # that read began a transaction: undo it
        conn.rollback()
    return status, settings


def pg_leftovers(conn: Any) -> list[str]:
    rows = conn.execute(
        "SELECT relname FROM pg_class WHERE relpersistence = 't' AND relname LIKE 'sqltree%'"
    ).fetchall()
    return [r[0] for r in rows]


def pg_connection(url: str, mode: str) -> Any:
    """A connection in autocommit mode, idle without autocommit, or inside the caller's own
    open transaction (with uncommitted work that must survive)."""
    import psycopg

    conn = psycopg.connect(url, autocommit=mode == "autocommit")
    conn.execute("SET work_mem = '3MB'")
    conn.execute("SET statement_timeout = '10min'")
    if mode == "idle":
        conn.commit()
    if mode == "transaction":
        conn.commit()
        conn.execute("CREATE TEMP TABLE callers_work (x int)")
        conn.execute("INSERT INTO callers_work VALUES (1)")
        conn.execute("SET LOCAL jit = on")
    return conn


@pytest.mark.postgres
@pytest.mark.parametrize("outcome", ["success", "failure"])
@pytest.mark.parametrize("mode", ["autocommit", "idle", "transaction"])
def test_postgres_session_is_given_back(postgres_url: str, mode: str, outcome: str) -> None:
    conn = pg_connection(postgres_url, mode)
    try:
        before = pg_state(conn)
        frame = mixed_table(2000)
        if outcome == "success":
            model = sqltree.train(frame, target="label", connection=conn, max_depth=3,
                                  plan="tables")
            assert pg_state(conn) == before
            model.predict(frame, connection=conn)
        else:
            with pytest.raises(Boom):
                sqltree.train(
                    frame, target="label", connection=conn, max_depth=3,
                    progress=fail_at_level(2), plan="tables",
                )
        assert pg_state(conn) == before
        assert pg_leftovers(conn) == []
        if mode == "transaction":
            assert conn.execute("SELECT x FROM callers_work").fetchall() == [(1,)]
    finally:
        conn.close()


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["autocommit", "transaction"])
def test_a_postgres_connection_that_makes_dict_rows(postgres_url: str, mode: str) -> None:
    """A caller's connection whose rows are dicts (``row_factory=dict_row``) trains, prunes
    (subtree raising reads the rows) and scores as any other, and keeps its row factory."""
    from psycopg.rows import dict_row

    frame = mixed_table(2000)
    want = sqltree.train(frame, target="label")
    conn = pg_connection(postgres_url, mode)
    conn.row_factory = dict_row
    try:
        model = sqltree.train(frame, target="label", connection=conn, plan="tables")
        assert model.text() == want.text()
        scored = model.predict(frame, connection=conn)
        assert list(scored["prediction"]) == list(want.predict(frame)["prediction"])
        assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
    finally:
        conn.close()


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["autocommit", "idle"])
def test_two_threads_train_on_one_postgres_connection(postgres_url: str, mode: str) -> None:
    frame = mixed_table(2000)
    want = sqltree.train(frame, target="label", max_depth=3).text()
    conn = pg_connection(postgres_url, mode)
    try:
        before = pg_state(conn)
        results, errors = run_in_threads(
            lambda: sqltree.train(frame, target="label", connection=conn, max_depth=3,
                                  plan="tables").text()
        )
        assert errors == []
        assert results == [want, want]
        assert pg_state(conn) == before
        assert pg_leftovers(conn) == []
    finally:
        conn.close()


@pytest.mark.postgres
@pytest.mark.usefixtures("default_sigint")
@pytest.mark.parametrize("mode", ["autocommit", "transaction"])
def test_ctrl_c_during_postgres_training(postgres_url: str, mode: str) -> None:
    conn = pg_connection(postgres_url, mode)
    # labelled in noisy stripes as for DuckDB: a chain-like tree whose growth takes minutes
    try:
        conn.execute(
            "CREATE TEMP TABLE big AS SELECT (i * 7919 % 100000) / 100.0 AS a, "
            "(i * 104729 % 10007) / 7.0 AS b, "
            "CASE WHEN floor((i * 7919 % 100000) / 200.0)::int % 2 = 0 AND i * 31 % 10 > 0 "
            "THEN 'yes' ELSE 'no' END AS label FROM generate_series(1::bigint, 300000) AS t(i)"
        )
        before = pg_state(conn)
        interrupted(lambda: sqltree.train("big", target="label", connection=conn), 0.5)
        assert pg_state(conn) == before
        assert pg_leftovers(conn) == []
        assert conn.execute("SELECT count(*) FROM big").fetchone() == (300_000,)
        if mode == "transaction":
            assert conn.execute("SELECT x FROM callers_work").fetchall() == [(1,)]
    finally:
        conn.close()


# -- Spark -------------------------------------------------------------------------------------
def spark_state(spark: Any) -> dict[str, Any]:
    """Session conf, log levels and the thread's job properties."""
    context = spark.sparkContext
    log_manager = context._jvm.org.apache.logging.log4j.LogManager
    return {
        "conf": dict(spark.conf.getAll),
        "root level": str(log_manager.getRootLogger().getLevel()),
        "rdd level": str(log_manager.getLogger("org.apache.spark.rdd.MapPartitionsRDD").getLevel()),
        "job properties": {
            key: context.getLocalProperty(key)
            for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
        },
    }


@contextmanager
def spark_warnings(spark: Any, path: Path) -> Iterator[Path]:
    """Copy the JVM's log records of level WARN and above to ``path`` while the block runs (its
    console output is the JVM's own standard error, which pytest cannot capture)."""
    jvm = spark.sparkContext._jvm
    core = jvm.org.apache.logging.log4j.core
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    appender = (
        core.appender.FileAppender.newBuilder()
        .withFileName(str(path))
        .setName("sqltree-test-warnings")
        .setLayout(core.layout.PatternLayout.createDefaultLayout())
        .build()
    )
    appender.start()
    root = context.getConfiguration().getRootLogger()
    root.addAppender(appender, jvm.org.apache.logging.log4j.Level.WARN, None)
    context.updateLoggers()
    try:
        yield path
    finally:
        root.removeAppender("sqltree-test-warnings")
        context.updateLoggers()
        appender.stop()


@pytest.mark.spark
@pytest.mark.parametrize("outcome", ["success", "failure"])
def test_spark_session_is_given_back_and_quiet(spark: Any, outcome: str, tmp_path: Path) -> None:
    from sqltree.engines.spark import SparkEngine

    context = spark.sparkContext
    context.setJobGroup("callers-group", "the caller's job")
    context.setLogLevel("WARN")  # the fixture's ERROR would hide the warnings checked below
    try:
        before = spark_state(spark)
        frame = mixed_table(500)
        engine = SparkEngine(spark)
        with spark_warnings(spark, tmp_path / "warnings.log") as log:
            if outcome == "success":
                model = sqltree.train(frame, target="label", connection=engine, max_depth=3,
                                      plan="tables")
                model.predict(frame, connection=engine)
            else:
                with pytest.raises(Boom):
                    sqltree.train(
                        frame, target="label", connection=engine, max_depth=3,
                        progress=fail_at_level(2), plan="tables",
                    )
        assert spark_state(spark) == before
        assert [t.name for t in spark.catalog.listTables() if t.name.startswith("sqltree_")] == []
        assert log.read_text() == ""
    finally:
        context.setLogLevel("ERROR")
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            context.setLocalProperty(key, None)


def wide_tree_frame(rows: int = 6000, groups: int = 600) -> pd.DataFrame:
    """A class that depends on a many-valued nominal and a threshold, with 20% noise: the
    unpruned tree has over a thousand leaves, about 1,200 nodes on its widest level."""
    rng = np.random.default_rng(7)
    x = rng.uniform(0, 100, rows)
    g = rng.integers(0, groups, rows)
    y = np.where(rng.uniform(size=rows) < 0.2, rng.integers(0, 2, rows), (g * 7 + (x > 50)) % 2)
    return pd.DataFrame(
        {"g": [f"g{v:04d}" for v in g], "x": x.round(1), "y": [f"c{v}" for v in y]}
    )


@pytest.mark.spark
@pytest.mark.slow
def test_spark_statements_do_not_grow_with_the_tree(spark: Any) -> None:
    """Tests, routes and cut tables have a row per node: they reach Spark as data, and the
    longest statement of the whole training (pruning with subtree raising included) is no
    longer than that of growing the root alone. As VALUES lists they took 33 KB here."""
    from sqltree.engines.spark import SparkEngine

    frame = wide_tree_frame()
    root_only = SparkEngine(spark)
    # plan="tables": a DataFrame this small would otherwise grow in memory
    sqltree.train(frame, target="y", min_cases=1, max_depth=1, connection=root_only,
                  plan="tables")
    engine = SparkEngine(spark)
    model = sqltree.train(frame, target="y", min_cases=1, connection=engine, plan="tables")
    assert model.n_leaves > 1000
    assert model.stats["pruning"]["queries"] > 0  # subtree raising recounted in the engine
    assert engine.stats.max_statement_chars <= root_only.stats.max_statement_chars
    assert model.text() == sqltree.train(frame, target="y", min_cases=1).text()


def test_ctrl_c_on_a_cleanup_statement_is_an_interrupt(monkeypatch) -> None:
    """A Ctrl-C that DuckDB catches while cleanup gives the settings back (its ``Query
    interrupted``) ends the call as the KeyboardInterrupt it was, after every step ran."""
    con = duckdb.connect()
    engine = DuckDBEngine(con, threads=1)
    engine.materialize("scratch", exp.select(exp.Literal.number(1).as_("x")))

    def caught(saved: dict[str, Any]) -> None:
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(engine, "_restore_settings", caught)
    with pytest.raises(KeyboardInterrupt) as raised:
        engine.cleanup()
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert duckdb_leftovers(con) == []
