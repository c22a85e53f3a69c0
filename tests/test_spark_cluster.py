"""Spark as a cluster runs it: the session of ``tests/conftest.py`` drives a standalone master
and two workers, whose executors are JVMs of their own (nothing the driver holds in its
process or temporary folder reaches them).

C4.5, binned CART and a regression tree train from a Parquet file in the cluster's shared
folder to DuckDB's tree and score as DuckDB does; training leaves no view, no stored block and
no changed setting behind; the small tables of a level are broadcast; jobs are counted per
level; a Ctrl-C stops the cluster's jobs and cleans up, and the session trains again
afterwards. Every other Spark test (ID3 and the rest of ``tests/test_engines.py``, the select
plan in ``tests/test_select_plan.py``, scoring, cleanup after errors) runs on the same
cluster session.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest

import sqltree
from sqltree.engines.spark import SHUFFLE_PARTITIONS, SparkEngine
from tests.helpers import mixed_table

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ALGORITHMS = [
    pytest.param("c4.5", {}, id="c4.5"),
    pytest.param("cart", {"max_bins": 16}, id="cart-binned"),
    pytest.param("cart", {"criterion": "squared_error", "target": "c"}, id="cart-regression"),
]


@pytest.fixture(scope="module")
def parquet(spark_shared_folder: Path) -> str:
    """A Parquet file of 2,000 rows, written where the driver and the executors read it."""
    path = spark_shared_folder / "mixed.parquet"
    con = duckdb.connect()
    con.register("frame", mixed_table(2000))
    con.execute(f"COPY frame TO '{path}' (FORMAT parquet)")
    con.close()
    return str(path)


def leftovers(spark: Any) -> dict[str, Any]:
    """sqltree's views and every stored block (cached or checkpointed RDDs) of the session."""
    return {
        "views": [t.name for t in spark.catalog.listTables() if t.name.startswith("sqltree_")],
        "stored": int(spark.sparkContext._jsc.getPersistentRDDs().size()),
    }


def settings(spark: Any) -> dict[str, Any]:
    """The session settings training changes (and gives back)."""
    return {SHUFFLE_PARTITIONS: spark.conf.get(SHUFFLE_PARTITIONS, None)}


@pytest.mark.parametrize(("algorithm", "options"), ALGORITHMS)
def test_trees_train_and_score_on_the_cluster(
    spark: Any, parquet: str, algorithm: str, options: dict[str, Any]
) -> None:
    options = {"max_depth": 3, **options}
    target = options.pop("target", "label")
    if target != "label":
        options["features"] = ["a", "b", "d", "e"]
    before = settings(spark)
    engine = SparkEngine(spark)
    engine.keep_sql = True
    model = sqltree.train(parquet, target=target, algorithm=algorithm, connection=engine,
                          plan="tables", **options)
    want = sqltree.train(parquet, target=target, algorithm=algorithm, plan="tables", **options)
    assert model.text() == want.text()
    assert leftovers(spark) == {"views": [], "stored": 0}
    assert settings(spark) == before
    # jobs: every level ran some, and growth's count is that of its statements
    levels = model.stats["levels"]
    assert all(level["jobs"] >= 1 for level in levels)
    assert model.stats["jobs"] >= sum(level["jobs"] for level in levels)
    # the level's tests and routes joined as broadcast tables
    assert any("/*+ BROADCAST(" in sql for sql in engine.stats.sql)

    scored = model.predict(parquet, connection=spark)
    expected = want.predict(parquet)
    pd.testing.assert_series_equal(scored["prediction"], expected["prediction"])
    assert leftovers(spark) == {"views": [], "stored": 0}


def test_shuffle_partitions_follow_the_rows(spark: Any) -> None:
    engine = SparkEngine(spark)
    cores = engine.shuffle_partitions(1)
    assert cores == max(1, spark.sparkContext.defaultParallelism)
    assert engine.shuffle_partitions(engine.ROWS_PER_SHUFFLE_PARTITION * cores) == cores
    assert engine.shuffle_partitions(engine.ROWS_PER_SHUFFLE_PARTITION * cores + 1) == 2 * cores
    engine.cleanup()


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handler (KeyboardInterrupt) for the test, whatever ran before."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_cancels_the_cluster_jobs_and_cleans_up(
    spark: Any, parquet: str, default_sigint: None
) -> None:
    """A Ctrl-C while a statement runs on the executors comes out as KeyboardInterrupt; its
    jobs are cancelled, sqltree's views and blocks are gone, the settings are back, and the
    session trains again."""
    before = settings(spark)
    engine = SparkEngine(spark)
    started = threading.Event()

    def progress(event: Any) -> None:
        if event.phase == "grow" and event.kind == "step":
            started.set()

    def send() -> None:
        if started.wait(120):
            for _ in range(20):
                signal.raise_signal(signal.SIGINT)
                if done.wait(0.5):
                    return

    done = threading.Event()
    sender = threading.Thread(target=send, daemon=True)
    with pytest.raises(KeyboardInterrupt):
        try:
            sender.start()
            sqltree.train(parquet, target="label", algorithm="c4.5", connection=engine,
                          plan="tables", progress=progress)
        finally:
            done.set()
            sender.join()
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 30
    while tracker.getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.1)  # a cancelled job ends when its running tasks have stopped
    assert tracker.getActiveJobsIds() == []
    assert leftovers(spark) == {"views": [], "stored": 0}
    assert settings(spark) == before
    model = sqltree.train(parquet, target="label", algorithm="cart", max_depth=1,
                          connection=spark, plan="tables")
    assert model.n_leaves >= 2
