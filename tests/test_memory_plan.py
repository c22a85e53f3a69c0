"""The memory plan grows the tree the SQL plans grow: same tests, thresholds and weights.

Every parity case of CART's tests (``test_cart``, ``test_regression``, the CART cases of
``test_engines``) is trained twice on DuckDB, on the tables plan and on the memory plan, and
the two trees must be the same node for node (tests and thresholds exactly; counts, shares,
impurities and improvements to 1e-9) and predict the same; so must random hostile tables.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings

import sqltree
from sqltree import progress
from sqltree.algorithms.memory import MEMORY_MAX_CELLS, NO_MEMORY_CRITERIA
from tests import test_cart, test_regression
from tests.helpers import assert_same_model, assert_same_tree
from tests.strategies import TableSpec, trained_cases
from tests.test_engines import API_CASES, DATASETS, frame_of
from tests.test_properties import duckdb_with, free_name, same_tree

TOL = 1e-9


def both_plans(source: Any, target: str, **options: Any) -> tuple[Any, Any]:
    """The model of the tables plan and that of the memory plan, checked to be the same."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*NULL target")
        sql = sqltree.train(source, target, plan="tables", **options)
        memory = sqltree.train(source, target, plan="memory", **options)
    assert sql.stats["plan"] == "tables"
    assert memory.stats["plan"] == "memory"
    assert_same_model(memory, sql, TOL)
    return sql, memory


def same_predictions(a: Any, b: Any, frame: pd.DataFrame) -> None:
    pa, pb = a.predict(frame)["prediction"], b.predict(frame)["prediction"]
    assert pa.tolist() == pb.tolist()


@pytest.mark.parametrize(("name", "params"), test_cart.CASES,
                         ids=[f"{n}-{p}" for n, p in test_cart.CASES])
def test_cart_cases(name, params):
    X_train, X_test, y_train, _ = test_cart.split(name)
    frame = pd.DataFrame(X_train).rename(columns=str).assign(y=y_train)
    sql, memory = both_plans(frame, "y", algorithm="cart", **params)
    same_predictions(sql, memory, pd.DataFrame(X_test).rename(columns=str))


REGRESSION_CASES = [(n, p) for n, p in test_regression.CASES
                    if p.get("criterion") not in NO_MEMORY_CRITERIA]


@pytest.mark.parametrize(("name", "params"), REGRESSION_CASES,
                         ids=[f"{n}-{p}" for n, p in REGRESSION_CASES])
def test_regression_cases(name, params):
    X, y = test_regression.DATA[name]()
    sql, memory = both_plans(X.assign(target=y), "target", task="regression", **params)
    np.testing.assert_allclose(test_regression.predictions(memory, X),
                               test_regression.predictions(sql, X), rtol=TOL)


def test_regression_sample_weight():
    X, y = test_regression.diabetes()
    weight = np.random.default_rng(3).uniform(0.1, 3.0, len(y))
    both_plans(X.assign(target=y, w=weight), "target", task="regression", weight="w",
               max_depth=5)


@pytest.mark.parametrize("case", [c for c, (_, o) in API_CASES.items()
                                  if o["algorithm"] == "cart"])
def test_engine_cases(case):
    name, options = API_CASES[case]
    sql, memory = both_plans(frame_of(name), DATASETS[name][1], **options)
    same_predictions(sql, memory, frame_of(name))


def test_level0_read_once_from_every_engine(engine_factory):
    """On any engine the memory plan reads level 0 with one statement and grows the tables
    plan's tree (SQLite's select plan reads it as well: the same query)."""
    name, options = API_CASES["cart-nulls"]
    engine, source = engine_factory(frame_of(name), name)
    target = DATASETS[name][1]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*NULL target")
        model = sqltree.train(source, target, connection=engine, plan="memory", **options)
        sql = sqltree.train(frame_of(name), target, plan="tables", **options)
    assert model.stats["plan"] == "memory"
    assert sum(level["queries"] for level in model.stats["levels"]) == 0
    assert_same_tree(model.root.to_dict(), sql.root.to_dict())


@pytest.mark.parametrize("options", [
    {"class_weight": {"setosa": 3.0}, "criterion": "entropy"},
    {"max_bins": 4},
    {"max_leaf_nodes": 5, "min_samples_leaf": 3},
])
def test_nominal_and_weighted_cases(options):
    """Nominal features of many values (subsets and ordered cuts), weights, bins."""
    rng = np.random.default_rng(11)
    n = 200
    frame = pd.DataFrame({
        "colour": rng.choice([f"c{i}" for i in range(14)], n),
        "shape": rng.choice(["a", "b", "c", "d", None], n),
        "size": np.where(rng.random(n) < 0.1, np.nan, rng.normal(0, 1, n).round(2)),
        "w": rng.uniform(0.2, 2.0, n),
    })
    frame["y"] = np.where(frame["colour"].isin(["c1", "c3", "c5"]), "setosa",
                          np.where(frame["size"] > 0.3, "virginica", "versicolor"))
    flip = rng.random(n) < 0.2
    frame.loc[flip, "y"] = rng.choice(["setosa", "virginica", "versicolor"], flip.sum())
    both_plans(frame, "y", algorithm="cart", weight="w", max_depth=4, **options)
    if isinstance(options.get("class_weight"), dict):  # weights of the classes still there
        options = {**options, "class_weight": {"virginica": 2.0}}
    both_plans(frame[frame["y"] != "setosa"], "y", algorithm="cart", max_depth=4, **options)


@given(case=trained_cases(TableSpec(infinities=(), max_rows=60), algorithm="cart"))
@settings(max_examples=8, deadline=None)
def test_random_tables(case):
    table, opts = case
    opts = {k: v for k, v in opts.items() if k != "algorithm"}
    with contextlib.closing(duckdb_with(table)) as con:
        source = "SELECT * FROM t"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                sql = sqltree.train(source, table.target, weight=table.weight, connection=con,
                                    algorithm="cart", plan="tables", **opts)
            except sqltree.SqlTreeError:
                return  # a table training refuses: the refusal tests cover it
            memory = sqltree.train(source, table.target, weight=table.weight, connection=con,
                                   algorithm="cart", plan="memory", **opts)
        same_tree(sql, memory)
        frame, column = table.frame(), free_name(table, "prediction")
        assert sql.predict(frame, column=column)[column].tolist() == \
            memory.predict(frame, column=column)[column].tolist()


# -- choosing the plan -------------------------------------------------------------------------
def _iris() -> pd.DataFrame:
    return frame_of("iris")


def test_auto_grows_a_small_dataframe_in_memory_and_says_why():
    events: list[progress.Event] = []
    model = sqltree.train(_iris(), DATASETS["iris"][1], algorithm="cart",
                          progress=events.append)
    assert model.stats["plan"] == "memory"
    assert "data in Python memory" in model.stats["plan_reason"]
    assert model.stats["levels"] and all(lv["queries"] == 0 for lv in model.stats["levels"])
    grow = [e.message for e in events if e.phase == "grow" and e.kind == "start"]
    assert grow and "memory plan: data in Python memory" in grow[0]


def test_auto_keeps_a_users_table_query_or_file_in_sql(tmp_path):
    """On a user's connection the rows stay in the engine; a file that sqltree's own DuckDB
    database reads is this process's, as a DataFrame is, and small: it grows in memory."""
    import duckdb

    con = duckdb.connect()
    con.register("src", _iris())
    con.execute("CREATE TABLE iris AS SELECT * FROM src")
    target = DATASETS["iris"][1]
    path = tmp_path / "iris.parquet"
    _iris().to_parquet(path)
    for source in ("iris", "SELECT * FROM iris", str(path)):
        model = sqltree.train(source, target, algorithm="cart", connection=con)
        assert model.stats["plan"] == "tables"
    own = sqltree.train(str(path), target, algorithm="cart")
    assert own.stats["plan"] == "memory"
    assert own.stats["plan_reason"].startswith(
        "a file read by sqltree's own DuckDB database, 150 rows x 4 features")
    same_tree(own, sqltree.train(str(path), target, algorithm="cart", plan="tables"))
    memory = sqltree.train("iris", target, algorithm="cart", connection=con, plan="memory")
    assert memory.stats["plan"] == "memory"


def test_a_fit_on_a_file_leaves_pandas_unloaded(tmp_path):
    """``import sqltree`` and a fit on a file, in memory and pruned, load neither pandas nor
    pyarrow (about 90 MB of a process and a quarter of a second), in a fresh interpreter."""
    import subprocess
    import sys

    path = tmp_path / "iris.parquet"
    _iris().to_parquet(path)
    script = (
        "import sys, sqltree\n"
        f"model = sqltree.train({str(path)!r}, {DATASETS['iris'][1]!r})\n"
        "assert model.stats['plan'] == 'memory', model.stats['plan']\n"
        "print(model.n_leaves, sorted(m for m in ('pandas', 'pyarrow') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    leaves, loaded = done.stdout.split(" ", 1)
    assert int(leaves) > 1
    assert loaded.strip() == "[]"


def test_auto_keeps_a_large_dataframe_in_sql(monkeypatch):
    monkeypatch.setattr("sqltree.algorithms.memory.MEMORY_MAX_CELLS", 100)
    model = sqltree.train(_iris(), DATASETS["iris"][1], algorithm="cart")
    assert model.stats["plan"] == "tables"
    assert MEMORY_MAX_CELLS > 100


def test_auto_bound_of_regression(monkeypatch):
    """Regression trees have a bound of their own, below CART classification's: their
    moments are summed in row order, not counted."""
    X, y = test_regression.diabetes()
    frame = X.assign(target=y)
    cells = len(frame) * X.shape[1]
    monkeypatch.setattr("sqltree.algorithms.memory.MEMORY_MAX_CELLS", cells)
    monkeypatch.setattr("sqltree.algorithms.memory.MEMORY_MAX_CELLS_REGRESSION", cells - 1)
    regression = sqltree.train(frame, "target", task="regression", max_depth=2)
    assert regression.stats["plan"] == "tables"
    monkeypatch.setattr("sqltree.algorithms.memory.MEMORY_MAX_CELLS_REGRESSION", cells)
    regression = sqltree.train(frame, "target", task="regression", max_depth=2)
    assert regression.stats["plan"] == "memory"
    assert f"at most {cells:,} cells" in regression.stats["plan_reason"]


def test_entropy_screened_with_numpy_log_gives_the_same_tree():
    """CART's entropy candidates are screened with numpy's logarithm, and only those within
    reach of their (node, feature)'s best are scored with the C library's: the tables plan's
    tree, its ties counted alike, on a table of thousands of cuts per node."""
    from tests.test_memory_plan_c45 import _many_cuts

    frame = _many_cuts()
    both_plans(frame, "y", algorithm="cart", criterion="entropy")
    both_plans(frame, "y", algorithm="cart", criterion="entropy", max_depth=3)


def test_friedman_mse_in_memory():
    X, y = test_regression.diabetes()
    both_plans(X.assign(target=y), "target", criterion="friedman_mse", max_depth=4)


def test_unknown_plan_is_refused():
    with pytest.raises(sqltree.OptionError, match="plan must be one of"):
        sqltree.train(_iris(), DATASETS["iris"][1], plan="ram")


def test_features_scored_in_threads_give_the_same_model(monkeypatch):
    """Every level's features scored by four threads at once: the model file of the memory
    plan scored one feature after another, to the last bit, for C4.5, CART (Gini and
    entropy, whose nominal features' partitions are enumerated) and regression; and the
    threads did run."""
    from sqltree import parallel
    from tests.test_memory_plan_c45 import _many_cuts, same_model

    pools: list[int] = []

    def counted(workers: int, **kwargs: Any) -> Any:
        pools.append(workers)
        return real(workers, **kwargs)

    real = parallel.ThreadPoolExecutor
    frame = _many_cuts()
    X, y = test_regression.diabetes()
    cases = [(frame, "y", {"algorithm": "c4.5"}), (frame, "y", {"algorithm": "cart"}),
             (frame, "y", {"algorithm": "cart", "criterion": "entropy", "max_depth": 4}),
             (X.assign(target=y), "target", {"task": "regression", "max_depth": 4})]
    for source, target, options in cases:
        one = sqltree.train(source, target, plan="memory", **options)
        with monkeypatch.context() as m:
            m.setattr(parallel, "PARALLEL_MIN_ROWS", 0)
            m.setattr(parallel, "cores", lambda: 4)
            m.setattr(parallel, "ThreadPoolExecutor", counted)
            m.setattr(parallel, "_pools", {})
            pools.clear()
            threaded = sqltree.train(source, target, plan="memory", **options)
            for pool in parallel._pools.values():
                pool.shutdown()
        assert pools == [4], options  # one pool, kept for every level and pruning round
        same_model(one, threaded)


@pytest.mark.parametrize(("rows", "batch"), [(1, 1), (50, 7), (700, 100)])
def test_cart_scored_a_batch_at_a_time_gives_the_same_model(monkeypatch, rows, batch):
    """CART's scorer takes a level's nodes a part at a time (``Histogram.node_chunks``) and
    their candidates ``CANDIDATE_CHUNK`` at a time, keeping each batch's near-best only: the
    model file of the whole level at once, to the last bit, for Gini, entropy (screened with
    numpy's logarithm; a nominal feature's partitions enumerated), class weights (fixed-point
    sums) and regression (batches of candidates, no parts); and the parts and batches were
    made. The whole levels are scored stacked (``algorithms.memory.stacked``), the parts
    and batches a feature at a time."""
    from sqltree.algorithms.memory import cart_scores
    from tests.test_memory_plan_c45 import (
        _many_cuts,
        counted_node_chunks,
        feature_at_a_time,
        same_model,
    )

    made: list[int] = []
    frame = _many_cuts()
    X, y = test_regression.diabetes()
    cases = [(frame, "y", {"algorithm": "cart"}),
             (frame, "y", {"algorithm": "cart", "criterion": "entropy", "max_depth": 5}),
             (frame, "y", {"algorithm": "cart", "class_weight": "balanced", "max_depth": 6}),
             (X.assign(target=y), "target", {"task": "regression", "max_depth": 4})]
    for source, target, options in cases:
        whole = sqltree.train(source, target, plan="memory", **options)
        with monkeypatch.context() as m:
            parts = counted_node_chunks(m, rows)
            m.setattr(cart_scores, "CANDIDATE_CHUNK", batch)
            feature_at_a_time(m)
            batched = sqltree.train(source, target, plan="memory", **options)
        made += parts
        same_model(whole, batched)
    assert max(made) > 1


def test_a_pruning_rounds_subtrees_recounted_in_threads_give_the_same_model(monkeypatch):
    """Subtree raising's bounds and recounts of a round's nodes, dealt to four threads in
    parts: the model file of one thread, to the last bit (a table with unknown values in
    two features, so that raised branches spread rows by recomputed shares); and the parts
    did run side by side."""
    from sqltree import parallel
    from tests.test_memory_plan_c45 import _many_cuts, same_model

    frame = _many_cuts()
    one = sqltree.train(frame, "y", plan="memory", algorithm="c4.5")
    parts: list[int] = []
    real = parallel.side_by_side

    def spy(work: Any, items: Any, rows: int, workers: int | None = None) -> Any:
        if items and isinstance(items[0], list):  # a pruning round's parts of entries
            parts.append(len(items))
        return real(work, items, rows, workers)

    with monkeypatch.context() as m:
        m.setattr(parallel, "PARALLEL_MIN_ROWS", 0)
        m.setattr(parallel, "cores", lambda: 4)
        m.setattr(parallel, "side_by_side", spy)
        m.setattr(parallel, "_pools", {})
        threaded = sqltree.train(frame, "y", plan="memory", algorithm="c4.5")
        for pool in parallel._pools.values():
            pool.shutdown()
    assert one.stats["pruning"]["raised"] > 0
    assert parts and max(parts) > 1
    same_model(one, threaded)


def test_logarithms_of_threads_growing_the_table_at_once_are_the_c_librarys(monkeypatch):
    """Threads that score features at once may grow the table of whole numbers' logarithms
    at once: every logarithm is still the C library's (a table grown by two threads without
    a lock misplaced one's entries)."""
    import threading

    from sqltree.algorithms.memory import level

    sizes = (3_000, 50_000, 200_000, 400_000)
    expected = {n: np.fromiter(map(math.log, range(1, n)), dtype=np.float64) for n in sizes}
    for _ in range(20):
        monkeypatch.setattr(level, "_whole_logs", np.zeros(1))
        start = threading.Barrier(len(sizes))
        wrong: list[int] = []

        def work(n: int, start: threading.Barrier, wrong: list[int]) -> None:
            x = np.arange(1, n, dtype=np.float64)
            start.wait()
            if not np.array_equal(level.ln(x), expected[n]):
                wrong.append(n)

        threads = [threading.Thread(target=work, args=(n, start, wrong)) for n in sizes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not wrong


def test_a_forked_child_scores_in_threads_of_its_own(monkeypatch):
    """The pools of threads are the process's: a child forked after a threaded fit (as
    ``multiprocessing`` forks on Linux) fits with threads of its own instead of waiting on
    its parent's, which it does not have."""
    import multiprocessing

    from sqltree import parallel

    monkeypatch.setattr(parallel, "PARALLEL_MIN_ROWS", 0)
    frame = _iris()
    target = DATASETS["iris"][1]
    parent = sqltree.train(frame, target, plan="memory", algorithm="c4.5").text()
    with multiprocessing.get_context("fork").Pool(1) as pool:
        child = pool.apply_async(_fit_text, (frame, target)).get(timeout=120)
    assert child == parent


def _fit_text(frame: pd.DataFrame, target: str) -> str:
    from sqltree import parallel

    parallel.PARALLEL_MIN_ROWS = 0
    return sqltree.train(frame, target, plan="memory", algorithm="c4.5").text()


def test_threads_follow_duckdbs_setting(monkeypatch):
    """A DuckDB engine given ``threads`` scores a level's features with that many threads."""
    from sqltree import parallel
    from sqltree.engines.duckdb import DuckDBEngine

    seen: list[int | None] = []
    real = parallel.side_by_side

    def spy(work: Any, features: Any, rows: int, workers: int | None = None) -> Any:
        seen.append(workers)
        return real(work, features, rows, workers)

    monkeypatch.setattr("sqltree.algorithms.memory.c45_scores.side_by_side", spy)
    frame = _iris()
    sqltree.train(frame, DATASETS["iris"][1], plan="memory", algorithm="c4.5",
                  connection=DuckDBEngine(threads=1))
    sqltree.train(frame, DATASETS["iris"][1], plan="memory", algorithm="c4.5")
    assert seen and seen[0] == 1 and seen[-1] is None
