"""The level scan grows the tables and memory plans' binned CART tree on every engine.

Its histograms are summed in the engine over stored codes and narrow (row, node) pairs, the
larger child of a split derived as its parent less its sibling, and scored in numpy: the
trees must be the tables plan's node for node (``helpers.assert_same_model``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest

import sqltree
from sqltree.learner import backends
from tests.conftest import ENGINES, SQLITE
from tests.helpers import assert_same_model, comparable
from tests.test_engines import DATASETS, frame_of


def train(source: Any, target: str, plan: str, **options: Any) -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*NULL target")
        return sqltree.train(source, target, algorithm="cart", plan=plan, **options)


def messy(n: int = 400, seed: int = 5) -> pd.DataFrame:
    """Nominal features of few and many values with NULLs, continuous ones with NULLs and
    ties, a weight column, three classes with noise."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "colour": rng.choice([f"c{i}" for i in range(14)], n),
        "shape": rng.choice(["a", "b", "c", "d", None], n),
        "size": np.where(rng.random(n) < 0.1, np.nan, rng.normal(0, 1, n).round(2)),
        "age": rng.integers(0, 40, n).astype(float),
        "w": rng.uniform(0.2, 2.0, n),
    })
    frame["y"] = np.where(frame["colour"].isin(["c1", "c3", "c5"]), "setosa",
                          np.where(frame["size"] > 0.3, "virginica", "versicolor"))
    flip = rng.random(n) < 0.2
    frame.loc[flip, "y"] = rng.choice(["setosa", "virginica", "versicolor"], flip.sum())
    return frame


CASES = {
    "three-classes": {"max_bins": 16},
    "depth-limit": {"max_bins": 8, "max_depth": 3},
    "entropy-leaf": {"max_bins": 32, "criterion": "entropy", "min_samples_leaf": 5},
    "class-weight": {"max_bins": 16, "class_weight": "balanced", "max_depth": 5},
    "sample-weight": {"max_bins": 16, "weight": "w", "max_depth": 6},
    "best-first": {"max_bins": 16, "max_leaf_nodes": 9},
    "two-classes": {"max_bins": 10, "two_classes": True},
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_tables_plans_tree_on_duckdb(case: str) -> None:
    options = dict(CASES[case])
    frame = messy()
    if options.pop("two_classes", False):
        frame = frame[frame["y"] != "setosa"]
    import duckdb

    con = duckdb.connect()
    con.register("src", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM src")
    scan = train("t", "y", "scan", connection=con, **options)
    tables = train("t", "y", "tables", connection=con, **options)
    memory = train("t", "y", "memory", connection=con, **options)
    assert (scan.stats["plan"], tables.stats["plan"]) == ("scan", "tables")
    assert_same_model(scan, tables)
    assert_same_model(scan, memory)
    assert scan.predict(frame)["prediction"].tolist() == \
        tables.predict(frame)["prediction"].tolist()
    # nothing of the scan's is left in the connection
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchone() == (0,)


def test_auto_takes_the_scan_on_a_users_connection_for_binned_cart() -> None:
    import duckdb

    con = duckdb.connect()
    con.register("src", messy())
    con.execute("CREATE TABLE t AS SELECT * FROM src")
    model = sqltree.train("t", "y", algorithm="cart", max_bins=16, connection=con)
    assert model.stats["plan"] == "scan"
    assert "histograms summed in the engine" in model.stats["plan_reason"]
    # and binned C4.5; exact thresholds keep the tables plan
    assert sqltree.train("t", "y", connection=con, max_bins=16).stats["plan"] == "scan"
    assert sqltree.train("t", "y", algorithm="cart", connection=con).stats["plan"] == "tables"
    assert sqltree.train("t", "y", connection=con).stats["plan"] == "tables"


@pytest.mark.parametrize("options", [
    {"algorithm": "c4.5"},
    {"algorithm": "cart"},
    {"algorithm": "cart", "task": "regression", "target": "age"},
])
def test_scan_refuses_what_it_does_not_grow(options: dict[str, Any]) -> None:
    target = options.pop("target", "y")
    with pytest.raises(sqltree.SqlTreeError, match="plan='scan' grows binned trees"):
        sqltree.train(messy(), target, plan="scan", **options)


def numeric(n: int = 400, seed: int = 5) -> pd.DataFrame:
    """``messy`` with a numeric target ``t`` (and a non-negative ``p`` for Poisson)."""
    frame = messy(n, seed).drop(columns=["y"])
    rng = np.random.default_rng(seed + 1)
    frame["t"] = (np.nan_to_num(frame["size"].to_numpy()) * 3.1
                  + frame["colour"].isin(["c1", "c3"]) * 2.0 + rng.normal(0, 0.4, n)).round(3)
    frame["p"] = np.abs(frame["t"]).round(1)
    return frame


REGRESSION_CASES = {
    "squared-error": {"max_bins": 16},
    "sample-weight": {"max_bins": 16, "weight": "w", "max_depth": 6},
    "poisson": {"max_bins": 8, "criterion": "poisson", "target": "p"},
    "friedman-best-first": {"max_bins": 32, "criterion": "friedman_mse", "max_leaf_nodes": 12},
}


@pytest.mark.parametrize("case", list(REGRESSION_CASES))
def test_regression_trees_are_the_other_plans_to_the_bit(case: str) -> None:
    """The moments are fixed-point integers whose sums pass 2^53: read in two exact parts
    (``SqlBackend(wide=True)``), the larger child derived by subtraction, the tree and its
    leaf values are the memory and tables plans' to the last bit."""
    import duckdb

    options = dict(REGRESSION_CASES[case])
    target = options.pop("target", "t")
    con = duckdb.connect()
    con.register("src", numeric())
    con.execute("CREATE TABLE t AS SELECT * FROM src")
    models = {plan: sqltree.train("t", target, task="regression", plan=plan, connection=con,
                                  **options) for plan in ("scan", "tables", "memory")}
    assert models["scan"].stats["plan"] == "scan"
    assert models["scan"].n_leaves > 5
    files = {plan: comparable(model) for plan, model in models.items()}
    assert files["scan"] == files["tables"] == files["memory"]
    assert sqltree.train("t", target, task="regression", connection=con,
                         **options).stats["plan"] == "scan"


@pytest.mark.parametrize("engine_factory", [*ENGINES, SQLITE], indirect=True)
def test_every_engine_grows_the_same_regression_tree(engine_factory: Any) -> None:
    frame = numeric()
    engine, source = engine_factory(frame, "numeric")
    model = sqltree.train(source, "t", task="regression", connection=engine, max_bins=16,
                          weight="w", max_depth=5)
    assert model.stats["plan"] == ("select" if engine.dialect == "sqlite" else "scan")
    reference = sqltree.train(frame, "t", task="regression", plan="memory", max_bins=16,
                              weight="w", max_depth=5)
    assert comparable(model) == comparable(reference)


def test_scan_needs_tables() -> None:
    import sqlite3

    frame = messy().drop(columns=["w"])
    con = sqlite3.connect(":memory:")
    frame.to_sql("t", con, index=False)
    with pytest.raises(sqltree.SqlTreeError, match="cannot run here"):
        sqltree.train("t", "y", algorithm="cart", max_bins=16, connection=con, plan="scan")


@pytest.mark.parametrize("name", ["iris", "golf"])
def test_every_engine_grows_the_same_tree(engine_factory: Any, name: str) -> None:
    """PostgreSQL and Spark (a standalone cluster in CI) grow DuckDB's memory plan's tree;
    SQLite, which trains on the select plan, too."""
    target = DATASETS[name][1]
    engine, source = engine_factory(frame_of(name), name)
    model = train(source, target, "auto", connection=engine, max_bins=8)
    # SQLite stores no tables here: it trains on the select plan
    assert model.stats["plan"] == ("select" if engine.dialect == "sqlite" else "scan")
    reference = train(frame_of(name), target, "memory", max_bins=8)
    assert_same_model(model, reference)


def test_the_command_line_asks_for_the_scan(tmp_path: Any) -> None:
    import json

    from sqltree.cli import main
    from tests.helpers import GOLF

    out = tmp_path / "golf.json"
    assert main(["train", str(GOLF), "--target", "play", "-a", "cart", "--max-bins", "4",
                 "--plan", "scan", "-o", str(out), "-q"]) == 0
    saved = json.loads(out.read_text())
    assert saved["stats"]["plan"] == "scan"
    memory = train(str(GOLF), "play", "memory", max_bins=4)
    assert_same_model(sqltree.load(str(out)), memory)


def test_the_refusal_comes_before_any_query() -> None:
    """Asked of exact thresholds, the scan is refused before the source is read (here: a
    table that does not exist, which reading would have reported instead)."""
    import duckdb

    with pytest.raises(sqltree.SqlTreeError, match="plan='scan' grows binned trees"):
        sqltree.train("no_such_table", "y", connection=duckdb.connect(), plan="scan")


# -- C4.5 and ID3 ----------------------------------------------------------------------------
C45_CASES = {
    "c4.5": {"max_bins": 16},
    "c4.5-weights": {"max_bins": 8, "weight": "w"},
    "c4.5-no-unknown-values": {"max_bins": 16, "complete": True},
    "c4.5-majority": {"max_bins": 16, "missing": "majority"},
    "c4.5-drop": {"max_bins": 16, "missing": "drop", "max_depth": 4},
    "c4.5-unpruned": {"max_bins": 32, "pruning": None, "min_cases": 1},
    "id3": {"algorithm": "id3", "max_bins": 8},
}


def c45_frame(complete: bool = False) -> pd.DataFrame:
    frame = messy(600, seed=11)
    if complete:
        frame = frame.dropna().reset_index(drop=True)
    return frame


@pytest.mark.parametrize("case", list(C45_CASES))
def test_c45_on_the_scan_is_the_tables_plans_tree(case: str) -> None:
    """C4.5 and ID3 on the scan: the tables plan's level rows and partition (unknown values
    spread over branches), the histogram summed in the engine and scored by the memory
    plan's scorer: the same tree, node for node, as the tables and memory plans'."""
    options = dict(C45_CASES[case])
    options.setdefault("algorithm", "c4.5")
    frame = c45_frame(options.pop("complete", False))
    import duckdb

    con = duckdb.connect()
    con.register("src", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM src")
    models = {plan: sqltree.train("t", "y", connection=con, plan=plan, **options)
              for plan in ("scan", "tables", "memory")}
    assert models["scan"].stats["plan"] == "scan"
    assert_same_model(models["scan"], models["tables"])
    assert_same_model(models["scan"], models["memory"])
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchone() == (0,)


def test_c45_derives_a_split_s_largest_child_where_rows_go_whole(monkeypatch: Any) -> None:
    """Without unknown values every row goes whole to one branch: the largest child of a
    split is its parent's histogram less its siblings' (a multiway split's too)."""
    from sqltree.algorithms import level_scan

    derived: list[int] = []
    real = level_scan.with_derived

    def spy(hist: Any, kept: Any, children: Any) -> Any:
        derived.extend(children)
        return real(hist, kept, children)

    monkeypatch.setattr(level_scan, "with_derived", spy)
    frame = c45_frame(complete=True)
    model = sqltree.train(frame, "y", max_bins=16, plan="scan", connection=_duckdb(frame))
    assert derived
    assert_same_model(model, sqltree.train(frame, "y", max_bins=16, plan="memory"))


def _duckdb(frame: pd.DataFrame) -> Any:
    import duckdb

    con = duckdb.connect()
    con.register("src", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM src")
    return con


def test_c45_s_deep_levels_move_to_memory_once_histograms_outgrow_rows(monkeypatch: Any
                                                                        ) -> None:
    """Once a level's histogram holds about as many rows as the level, the next levels grow
    in memory, with the same tree (here from a small table, whose levels otherwise all
    stay in the engine)."""
    from sqltree.algorithms import level_scan

    monkeypatch.setattr(level_scan, "ENGINE_ONLY_MAX_CELLS", 0)
    frame = c45_frame()
    con = _duckdb(frame)
    model = sqltree.train("t", "y", max_bins=32, plan="scan", connection=con)
    assert model.stats["memory_from_level"] is not None
    assert_same_model(model, sqltree.train(frame, "y", max_bins=32, plan="memory"))


@pytest.mark.parametrize("engine_factory", [*ENGINES], indirect=True)
def test_every_engine_grows_the_same_c45_tree_on_the_scan(engine_factory: Any) -> None:
    frame = c45_frame()
    engine, source = engine_factory(frame, "messy")
    for algorithm in ("c4.5", "id3"):
        model = sqltree.train(source, "y", algorithm=algorithm, connection=engine, max_bins=8,
                              weight="w")
        assert model.stats["plan"] == "scan"
        reference = sqltree.train(frame, "y", algorithm=algorithm, plan="memory", max_bins=8,
                                  weight="w")
        assert_same_model(model, reference)


# -- routing: every row rewritten, or level 0's rows kept and each row's node computed --------
ROUTING_CASES = ["three-classes", "sample-weight", "best-first", "entropy-leaf"]
ROUTINGS = {"rewrite": backends.PATH_SPLITS, "path": backends.PATH_SPLITS,
            "path then rewrite": 6, "update": backends.PATH_SPLITS}
"""``Engine.SCAN_ROUTING`` and ``PATH_SPLITS``: by path until the tree has 6 splits, then
by rewriting (``SqlBackend._leave_path``). Spark updates no table: it takes the others."""


@pytest.mark.parametrize("case", ROUTING_CASES)
def test_both_routings_grow_the_tables_plans_tree(engine_factory: Any, case: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Routing by path (``Engine.SCAN_ROUTING``: level 0's rows never rewritten, each level
    storing only the rows its histogram reads, their node computed from the splits so far),
    rewriting every row, and the one after the other grow the memory plan's model file and
    the tables plan's tree
    (whose criteria, computed in the engine's SQL, may differ in their last bits: Spark's
    logarithms), and leave no working table behind."""
    from tests.test_engines import temp_objects

    options = dict(CASES[case])
    frame = messy(600)
    def fit(engine: Any, source: Any) -> Any:
        model = train(source, "y", "scan", connection=engine, **options)
        assert model.stats["plan"] == "scan"
        assert temp_objects(engine) == []
        return model

    models, engine, source = _by_each_routing(engine_factory, monkeypatch, frame, "t", fit)
    tables = train(source, "y", "tables", connection=engine, **options)
    memory = train(frame, "y", "memory", **options)
    assert models["path"].n_leaves > 5
    assert len({str(comparable(m)) for m in [*models.values(), memory]}) == 1
    assert_same_model(models["path"], tables)


@pytest.mark.parametrize("case", ["squared-error", "poisson"])
def test_both_routings_grow_the_same_regression_tree(engine_factory: Any, case: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Both routings give the same model file, and the memory plan's tree (a Poisson tree's
    impurities, whose logarithms Spark computes, to 1e-9)."""
    options = dict(REGRESSION_CASES[case])
    target = options.pop("target", "t")
    frame = numeric(600)
    models, _, _ = _by_each_routing(
        engine_factory, monkeypatch, frame, "numeric",
        lambda engine, source: sqltree.train(source, target, task="regression", plan="scan",
                                             connection=engine, **options))
    memory = sqltree.train(frame, target, task="regression", plan="memory", **options)
    assert models["path"].n_leaves > 5
    assert len({str(comparable(m)) for m in models.values()}) == 1
    assert_same_model(models["path"], memory)


def test_routing_by_update_rewrites_a_level_with_a_wide_nominal_split(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Routing by update holds a nominal split's left codes as the bits of one BIGINT: a level
    that splits a feature of more codes (``MASK_CODES``) rewrites its rows instead, and the
    levels after it update again. The tree is the memory plan's."""
    import duckdb

    from sqltree.engines.duckdb import DuckDBEngine

    rng = np.random.default_rng(8)
    n = 3000
    frame = pd.DataFrame({"city": rng.choice([f"city {i}" for i in range(90)], n),
                          "x": rng.normal(0, 1, n).round(3), "z": rng.integers(0, 9, n)})
    frame["y"] = np.where(frame["city"].str[-1].isin(["1", "4", "7"]), "a",
                          np.where(frame["x"] > 0.2, "b", "c"))
    statements: list[str] = []
    sent = DuckDBEngine._sending
    monkeypatch.setattr(DuckDBEngine, "_sending",
                        lambda self, sql: statements.append(sql) or sent(self, sql))
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    engine = DuckDBEngine(con)
    assert engine.SCAN_ROUTING == "update"
    model = sqltree.train("t", "y", algorithm="cart", plan="scan", connection=engine,
                          max_bins=16, max_depth=5)
    memory = sqltree.train(frame, "y", algorithm="cart", plan="memory", max_bins=16,
                           max_depth=5)
    assert_same_model(model, memory)
    assert any(f.get("feature") == "city" for f in _splits(model))
    updates = [i for i, sql in enumerate(statements) if sql.startswith("UPDATE")]
    rewrites = [i for i, sql in enumerate(statements)
                if "_pairs_" in sql.split(" AS ")[0] and sql.startswith("CREATE")]
    assert len(rewrites) >= 2 and updates  # level 0's pairs, then a level rewritten
    assert max(updates) > min(rewrites[1:])  # updating again after the rewrite


def _splits(model: Any) -> list[dict[str, Any]]:
    return [node["split"] for node in model.to_dict()["tree"] if node.get("split")]


def random_splits(seed: int, depth: int, features: Any) -> tuple[dict[int, Any], set[int]]:
    """A random tree of ``Route``s down to ``depth``, at most 32 splits a level (some children
    leaves, -1), and a random half of its open nodes as the nodes to read."""
    from sqltree.learner.backends import Route

    rng = np.random.default_rng(seed)
    splits: dict[int, Any] = {}
    open_nodes: list[int] = []
    ids = iter(range(1, 10**6))
    frontier = [0]
    for level in range(depth):
        following = []
        for at, node in enumerate(frontier):
            if at >= 32 or (level > 2 and rng.random() < 0.15):
                open_nodes.append(node)  # a leaf before the last level
                continue
            f = int(rng.integers(len(features)))
            n_codes = features[f].n_codes
            nominal = features[f].kind == "nominal"
            left_codes = tuple(int(k) for k in sorted(rng.choice(
                np.arange(1, n_codes), size=int(rng.integers(1, n_codes - 1)), replace=False))
            ) if nominal else ()
            left, right = next(ids), next(ids)
            if rng.random() < 0.1:
                left = -1
            splits[node] = Route(node=node, feature=f, missing_left=bool(rng.random() < 0.5),
                                 upto=0 if nominal else int(rng.integers(1, n_codes - 1)),
                                 left_codes=left_codes, nominal=nominal, left=left, right=right,
                                 scan_left=True, scan_right=True)
            following += [c for c in (left, right) if c >= 0]
        frontier = following
    open_nodes += frontier
    targets = {int(n) for n in rng.choice(open_nodes, size=len(open_nodes) // 2, replace=False)}
    return splits, targets


def walked(row: dict[str, int], splits: dict[int, Any], targets: set[int]) -> int:
    """A row's node by the splits, in Python (``SqlBackend.route``'s rule)."""
    node = 0
    while node in splits:
        r = splits[node]
        code = row[f"c{r.feature}"]
        if code == 0:
            left = r.missing_left
        else:
            left = code in r.left_codes if r.nominal else code <= r.upto
        node = r.left if left else r.right
    return node if node in targets else -1


@pytest.mark.parametrize("engine_factory", [*ENGINES, SQLITE], indirect=True)
def test_the_path_case_routes_as_the_rewrite_does(engine_factory: Any) -> None:
    """``path_case`` sends each row where the splits do, on every engine, for a tree 24
    levels deep: folded, its CASEs nest by log2 of the nodes read, within SQLite's parser's
    limit (about 18), which the tree's depth would pass."""
    from sqlglot import exp

    from sqltree.learner.backends import path_case
    from sqltree.learner.splitter import FeatureCodes, Layout

    kinds = ["continuous", "nominal"] * 3
    layout = Layout(tuple(FeatureCodes(i, kinds[i], n) for i, n in enumerate([17, 8, 33, 5, 9,
                                                                              12])))
    columns = [f"c{i}" for i in range(len(layout.features))]
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({c: rng.integers(0, f.n_codes, 4000)
                          for c, f in zip(columns, layout.features, strict=True)})
    splits, targets = random_splits(11, 24, layout.features)
    assert len(splits) > 300
    node = path_case(0, splits, targets, columns, layout)
    nesting = 1 + max(sum(isinstance(a, exp.Case) for a in _ancestors(c))
                      for c in node.find_all(exp.Case))
    assert nesting <= 1 + math.log2(len(targets)) < 18
    engine, source = engine_factory(frame, "codes")
    query = exp.select(exp.alias_(node, "node")).from_(exp.alias_(source, "a"))
    query = query.order_by(*[exp.column(c, "a") for c in columns])
    got = [int(r[0]) for r in engine.execute(query)]
    rows = frame.sort_values(columns).to_dict("records")
    assert got == [walked(r, splits, targets) for r in rows]
    assert len(set(got)) > 10


def _ancestors(node: Any) -> Any:
    while node.parent is not None:
        node = node.parent
        yield node


def _by_each_routing(engine_factory: Any, monkeypatch: pytest.MonkeyPatch, frame: pd.DataFrame,
                     name: str, fit: Any) -> tuple[dict[str, Any], Any, Any]:
    """``fit(engine, source)`` once per routing (``ROUTINGS``), each on a fresh table; the
    models by routing, and the last engine and source."""
    models = {}
    for routing, most_splits in ROUTINGS.items():
        engine, source = engine_factory(frame, name)
        if routing == "update" and engine.NAME == "Spark":
            continue
        monkeypatch.setattr(type(engine), "SCAN_ROUTING", routing.split()[0])
        monkeypatch.setattr(backends, "PATH_SPLITS", most_splits)
        models[routing] = fit(engine, source)
    return models, engine, source
