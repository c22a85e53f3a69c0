"""The level loop's query plan: binned mode, loaded split tables, finished children.

Nothing here is timed; the benchmarks in benchmarks/ measure speed.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import sqltree
from sqltree import queries as q
from sqltree.algorithms import grow
from sqltree.dataset import describe
from sqltree.engines.base import Engine
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.grower import GrowOptions
from tests.helpers import WITHOUT_SPARK, mixed_table, on_engines

CONTINUOUS = ("a", "b", "c")


def shape(node):
    """The tree without thresholds: features, groups, counts (rounded), children."""
    return (
        None if node.split is None else (node.split.feature, node.split.groups),
        tuple(round(c, 9) for c in node.counts),
        tuple(shape(c) for c in node.children),
    )


@pytest.fixture(scope="module")
def frame():
    return mixed_table(4_000)


@WITHOUT_SPARK
def test_binned_thresholds_are_observed_values(engine_factory, frame):
    engine, source = engine_factory(frame, "mixed")
    model = sqltree.train(
        source, target="label", max_depth=6, max_bins=8, pruning=None, connection=engine
    )
    observed = {c: set(frame[c].dropna().astype(float)) for c in CONTINUOUS}
    tests = [n.split for n in model.root.walk() if n.split and n.split.kind == "continuous"]
    assert tests
    for split in tests:
        assert split.threshold in observed[split.feature]


@WITHOUT_SPARK
def test_binned_with_a_bin_per_value_grows_the_exact_tree(engine_factory, frame):
    # As many bins as distinct values: the same partitions, so the same tree (thresholds
    # may differ: exact mode takes the largest training value below the midpoint).
    engine, source = engine_factory(frame, "mixed")
    options = {"target": "label", "max_depth": 6, "pruning": None, "connection": engine}
    exact = sqltree.train(source, **options)
    binned = sqltree.train(source, max_bins=20_000, **options)
    assert shape(binned.root) == shape(exact.root)
    rows = frame.head(500).to_dict("records")
    assert [binned.predict_row(r) for r in rows] == [exact.predict_row(r) for r in rows]


@WITHOUT_SPARK
def test_binned_predictions_match_compiled_sql(engine_factory, frame):
    engine, source = engine_factory(frame, "mixed")
    model = sqltree.train(source, target="label", max_depth=5, max_bins=16, connection=engine)
    scored = model.predict(source, connection=engine)
    rows = frame.to_dict("records")
    assert list(scored["prediction"]) == [model.predict_row(r) for r in rows]


@pytest.mark.parametrize(
    "edges",
    [
        [-3.5, -1.0, 0.0, 0.25, 2.0, 7.0, 7.5, 100.0],  # spread out: one edge per cell
        [0.0, 1e-9, 2e-9, 3e-9, 0.5, 1.0],  # crowded at the bottom: the grid declines
        [float(i) for i in range(10)] + [100.0],  # 3 edges in a cell of the coarsest grid
    ],
)
def test_bins_by_lookup_equal_bins_by_case(edges):
    import math

    import duckdb
    import numpy as np
    from sqlglot import exp


    rng = np.random.default_rng(7)
    values = np.concatenate([
        rng.uniform(edges[0] - 5, edges[-1] + 1, 5_000), rng.choice(edges, 2_000),
        np.nextafter(np.array(edges), np.inf), np.nextafter(np.array(edges), -np.inf),
        [np.nan, np.inf, -np.inf, 0.0, -0.0],
    ])
    connection = duckdb.connect()
    connection.execute("CREATE TABLE t (x DOUBLE)")
    connection.executemany("INSERT INTO t VALUES (?)", [[float(v)] for v in values] + [[None]])
    x = q.as_double(exp.column("x"))
    lookup = q.bin_by_lookup(x, edges)
    crowded = edges[1] - edges[0] < 1e-6
    assert (lookup is None) == crowded
    if lookup is None:
        return
    by_case = q.bin_value(x, edges).sql("duckdb")
    rows = connection.execute(
        f"SELECT x, {by_case}, {lookup.sql('duckdb')} FROM t"
    ).fetchall()
    differ = [r for r in rows if r[1] != r[2]]
    assert not differ, differ[:5]
    expected = [None if x is None else min(sum(e < x for e in edges), len(edges) - 1)
                for x, _, _ in rows if x is None or not math.isnan(x)]
    assert [r[2] for r in rows if r[0] is None or not math.isnan(r[0])] == expected


@WITHOUT_SPARK
def test_cart_binned_with_a_bin_per_value_grows_the_exact_tree(engine_factory, frame):
    engine, source = engine_factory(frame, "mixed")
    options = {"algorithm": "cart", "max_depth": 5, "pruning": None, "connection": engine}
    exact = sqltree.train(source, target="label", **options)
    binned = sqltree.train(source, target="label", max_bins=20_000, **options)
    assert shape(binned.root) == shape(exact.root)
    rows = frame.to_dict("records")
    assert [binned.predict_row(r) for r in rows] == [exact.predict_row(r) for r in rows]


@WITHOUT_SPARK
def test_cart_binned_thresholds_are_observed_values_and_sql_agrees(engine_factory, frame):
    engine, source = engine_factory(frame, "mixed")
    model = sqltree.train(
        source, target="label", algorithm="cart", max_depth=6, max_bins=8, connection=engine
    )
    observed = {c: set(frame[c].dropna().astype(float)) for c in CONTINUOUS}
    tests = [n.split for n in model.root.walk() if n.split and n.split.kind == "continuous"]
    assert tests
    for split in tests:
        assert split.threshold in observed[split.feature]
    scored = model.predict(source, connection=engine)
    assert list(scored["prediction"]) == [model.predict_row(r) for r in frame.to_dict("records")]


def test_cli_trains_binned_with_duckdb_settings(tmp_path, frame):
    from sqltree.cli import main

    source = tmp_path / "mixed.parquet"
    frame.to_parquet(source)
    model_path = tmp_path / "model.json"
    status = main([
        "train", str(source), "--target", "label", "--max-bins", "8", "--threads", "1",
        "--memory-limit", "512MB", "--max-depth", "4", "-q", "-o", str(model_path),
    ])
    assert status == 0
    model = sqltree.load(model_path)
    direct = sqltree.train(frame, target="label", max_bins=8, max_depth=4)
    assert model.root.to_dict() == direct.root.to_dict()


def test_histogram_summed_by_class_first_is_the_same(frame):

    engine = DuckDBEngine()
    data = describe(frame, engine, "label")
    level = engine.materialize("level", q.build_level0(data))
    k = len(data.classes)
    every = [f.index for f in data.features]

    def rows(by_class):
        query = q.build_histogram(level, data.features, k, by_class)
        return sorted(
            (r[0], r[1], -1e300 if r[2] is None else r[2], *(round(c, 9) for c in r[3:]))
            for r in engine.execute(query)
        )

    assert rows(every) == rows(())
    engine.cleanup()


@pytest.mark.parametrize("variant", ["plain", "counts", "fixed point", "moments", "bins",
                                     "bins by lookup", "summed by class"])
def test_histogram_in_one_pass_is_the_same(frame, variant):
    """The one-aggregate histogram (Spark's) has the UNION's rows, sums and bins exactly."""
    from sqltree.quantiles import bin_edges

    engine = DuckDBEngine()
    data = describe(frame, engine, "label")
    level = engine.materialize("level", q.build_level0(data))
    k = len(data.classes)
    options = {
        "plain": {}, "counts": {"counts": True}, "fixed point": {"bits": 20},
        "moments": {"counts": True, "moments": q.moment_terms()},
        "bins": {"search_bins": bin_edges(data, 8)},
        "bins by lookup": {"search_bins": bin_edges(data, 8), "lookup": True, "counts": True},
        "summed by class": {"by_class": [f.index for f in data.features if f.kind == "nominal"]},
    }[variant]
    n = q.MOMENTS if "moments" in options else k

    def rows(one_pass):
        query = q.build_histogram(level, data.features, n, one_pass=one_pass, **options)
        return sorted(tuple(-1e300 if v is None else v for v in r)
                      for r in engine.execute(query))

    one_pass, union = rows(True), rows(False)
    assert len(union) > 4 * len(data.features)
    assert one_pass == union
    engine.cleanup()


@pytest.mark.parametrize("options", [
    {"algorithm": "c4.5"}, {"algorithm": "cart", "threshold_search": "bounded"},
    {"algorithm": "cart", "criterion": "squared_error", "target": "c"}])
def test_one_pass_histograms_grow_the_same_tree(frame, monkeypatch, options):
    options = {"target": "label", "max_depth": 6, "plan": "tables", **options}
    union = sqltree.train(frame, **options)
    monkeypatch.setattr(DuckDBEngine, "ONE_PASS_HISTOGRAM", True)
    one_pass = sqltree.train(frame, **options)
    assert one_pass.text() == union.text()


@on_engines()
def test_max_bins_below_two_is_refused(engine_factory, frame):
    engine, source = engine_factory(frame.head(10), "mixed")
    with pytest.raises(ValueError, match="max_bins"):
        sqltree.train(source, target="label", max_bins=1, connection=engine)


def test_loaded_rows_equal_a_values_table():
    engine = DuckDBEngine()
    rows = [(1, 2, 0.5), (3, -1, None), (2**40, 0, -1e-300)]
    columns, types = ["node", "attr", "thr"], ["BIGINT", "INT", "DOUBLE"]
    loaded = engine.load_rows("t", columns, types, rows)
    literal = Engine.load_rows(engine, "u", columns, types, rows)
    read = [engine.execute(_select_all(t)) for t in (loaded, literal)]
    assert read[0] == read[1] == sorted(rows)
    assert engine.columns(loaded) == engine.columns(literal)
    empty = Engine.load_rows(engine, "e", columns, types, [])
    assert engine.execute(_select_all(empty)) == []
    engine.cleanup()


def _select_all(table):
    from sqlglot import exp

    return exp.select("*").from_(table.copy()).order_by("node")


def test_levels_keep_two_scans_and_few_queries(frame):
    data = describe(frame, DuckDBEngine(), "label")
    _, stats = grow(data, GrowOptions(max_depth=8))
    assert stats.levels
    for level in stats.levels:
        assert level.scans <= 2
        assert level.queries <= 7
    # Leaves at max_depth are counted from their parent's histogram: no level is read for them.
    assert all(level.depth < 8 for level in stats.levels)


@pytest.mark.parametrize("fractional", [True, False])
@pytest.mark.parametrize("options", [{}, {"algorithm": "id3"}, {"missing": "drop"}])
def test_ordered_scan_scores_equal_windowed_scores(frame, options, fractional):
    # DuckDB scores continuous cuts with one ordered streaming scan; the portable query uses
    # windows per (node, attribute). Both must give the same best cut and scores everywhere,
    # in fixed point or (whole-number weights, as at the root) in floating point.
    from sqltree.algorithms.c45.scores import build_split_scores
    from sqltree.algorithms.c45.strategy import score_options

    engine = DuckDBEngine()
    data = describe(frame, engine, "label")
    grow_options = GrowOptions(max_depth=3, **options)
    level = engine.materialize("level", q.build_level0(data))
    hist = engine.materialize("hist", q.build_histogram(level, data.features, 3))
    base = replace(score_options(grow_options), fractional=fractional)
    read = [
        engine.execute(
            build_split_scores(hist, data.features, 3, replace(base, ordered_scan=ordered))
        )
        for ordered in (False, True)
    ]
    assert len(read[0]) == len(read[1]) > 0
    for windowed, ordered in zip(read[0], read[1]):
        assert windowed[:4] == ordered[:4]  # node, attribute, threshold, next value
        assert windowed[4:] == pytest.approx(ordered[4:], rel=1e-9, abs=1e-12)
    engine.cleanup()


def _heavy_then_fractional_hist(engine):
    """A histogram whose first group weighs 6e11 and whose second holds fractional weights.

    An ordered scan's sums run across groups, so the second group's counts are differences
    of sums near 6e11, where a double's spacing is 1e-4.
    """
    rows = [(0, 0, 1.0, 3e11, 0.0), (0, 0, 2.0, 0.0, 3e11)]
    weights = [(0.7, 0.1), (1.3, 0.2), (0.25, 0.9), (0.05, 1.45), (0.6, 0.3), (0.15, 0.85)]
    rows += [(1, 0, float(v), c0, c1) for v, (c0, c1) in enumerate(weights, start=1)]
    columns = ["node", "attr", "v", "c0", "c1"]
    return engine.load_rows("hist", columns, ["BIGINT", "INT", "DOUBLE", "DOUBLE", "DOUBLE"], rows)


def test_ordered_running_sums_are_exact_after_heavy_groups():
    from sqlglot import exp

    from sqltree.running_sums import ordered_running_sums

    engine = DuckDBEngine()
    hist = _heavy_then_fractional_hist(engine)
    got = engine.execute(
        exp.select("*")
        .from_(ordered_running_sums(hist, ["c0", "c1"], exp.true()).subquery("r"))
        .where("node = 1")
        .order_by("v")
    )
    weights = [(0.7, 0.1), (1.3, 0.2), (0.25, 0.9), (0.05, 1.45), (0.6, 0.3), (0.15, 0.85)]
    left0 = left1 = 0.0
    for (node, attr, _, _, l0, l1), (c0, c1) in zip(got, weights, strict=True):
        left0, left1 = left0 + c0, left1 + c1
        assert (node, attr) == (1, 0)
        assert (l0, l1) == pytest.approx((left0, left1), rel=0, abs=1e-11)
    engine.cleanup()


def test_ordered_scan_scores_are_exact_after_heavy_groups():
    # The cut after the second value leaves exactly 2.0 on the left, J48's minimum: the
    # ordered scan must see it as the windowed one does.
    import pandas as pd

    from sqltree.algorithms.c45.scores import build_split_scores
    from sqltree.algorithms.c45.strategy import score_options

    engine = DuckDBEngine()
    frame = pd.DataFrame({"a": [1.0, 2.0], "label": ["x", "y"]})
    data = describe(frame, engine, "label")
    hist = _heavy_then_fractional_hist(engine)
    base = score_options(GrowOptions())
    windowed, ordered = (
        engine.execute(
            build_split_scores(hist, data.features, 2, replace(base, ordered_scan=flag))
        )
        for flag in (False, True)
    )
    assert [r[:4] for r in ordered] == [r[:4] for r in windowed]
    assert windowed[1][:3] == (1, 0, 2.0)  # node 1: the cut after the second value
    for w, o in zip(windowed, ordered, strict=True):
        assert o[4:] == pytest.approx(w[4:], rel=1e-9, abs=1e-12)
    engine.cleanup()


def _grouped_and_ungrouped(frame, monkeypatch, module, **options):
    """The tree grown with no histogram ungrouped and with every dense one ungrouped, and the
    features each level ungrouped in the second run."""
    from sqltree import grower

    seen: list[list[int]] = []
    rowwise = grower.Strategy.rowwise

    def spy(self, features):
        seen.append(rowwise(self, features))
        return seen[-1]

    monkeypatch.setattr(grower.Strategy, "rowwise", spy)
    trees = []
    for dense in (float("inf"), 0.0):
        monkeypatch.setattr(module, "DENSE_VALUES", dense)
        seen.clear()
        # the SQL plan's histograms (a small DataFrame grows in memory by default)
        trees.append(sqltree.train(frame, target="label", max_depth=6, plan="tables",
                                   **options).text())
    return trees, seen


@pytest.mark.parametrize("options", [{}, {"algorithm": "id3"}, {"missing": "drop"}])
def test_ungrouped_histograms_grow_the_grouped_tree(frame, monkeypatch, options):
    # Features whose (node, value) pairs are nearly all distinct get a histogram row per
    # level row; "b" (1,000 values over 4,000 rows) repeats values within nodes.
    from sqltree.algorithms.c45 import strategy as c45

    trees, seen = _grouped_and_ungrouped(frame, monkeypatch, c45, pruning=None, **options)
    assert any(seen), "no level read an ungrouped histogram"
    assert {1} <= set().union(*seen)  # "b"
    assert trees[0] == trees[1]


@pytest.mark.parametrize("options", [{}, {"class_weight": "balanced"}])
def test_ungrouped_cart_histograms_grow_the_grouped_tree(frame, monkeypatch, options):
    from sqltree.algorithms.cart import strategy

    trees, seen = _grouped_and_ungrouped(frame, monkeypatch, strategy, algorithm="cart", **options)
    assert {0, 1, 2} <= set().union(*seen)  # every continuous feature, below the root
    assert trees[0] == trees[1]


@pytest.mark.parametrize("algorithm", ["c4.5", "cart"])
def test_ordered_scan_grows_the_windowed_tree(frame, monkeypatch, algorithm):
    options = {"target": "label", "max_depth": 6, "algorithm": algorithm, "plan": "tables"}
    ordered = sqltree.train(frame, **options)
    monkeypatch.setattr(DuckDBEngine, "SUPPORTS_ORDERED_SCAN", False)
    windowed = sqltree.train(frame, **options)
    assert ordered.text() == windowed.text()


def test_bin_edges_closer_than_the_cut_gap_merge():
    import pandas as pd

    from sqltree.quantiles import bin_edges

    values = [0.0, 1.0, 1.000004, 1.000008, 2.0, 3.0, 3.000001]
    frame = pd.DataFrame({"x": values * 3, "label": ["a", "b", "a"] * len(values)})
    data = describe(frame, DuckDBEngine(), "label")
    assert bin_edges(data, 64)[0] == sorted(values)
    # J48's 1e-5: 1.0 and 1.000004 go (1.000008 closes their bin); 3.0 goes, the maximum stays
    assert bin_edges(data, 64, 1e-5)[0] == [0.0, 1.000008, 2.0, 3.000001]


def test_binned_level_table_holds_small_integers(frame):
    engine = DuckDBEngine()
    data = describe(frame, engine, "label")
    from sqltree.algorithms.c45.strategy import C45Strategy

    strategy = C45Strategy(data, GrowOptions(max_bins=16))
    level = engine.materialize("level", strategy.build_level0())
    types = {name: dtype.sql("duckdb") for name, dtype in engine.columns(level)}
    assert types["node"] == "INT" and types["y"] == "SMALLINT"
    assert all(types[f.column] == "SMALLINT" for f in data.features)
    engine.cleanup()


def test_duckdb_settings_are_restored():
    import duckdb

    connection = duckdb.connect()
    connection.execute("SET disabled_optimizers = 'top_n'")
    settings = (
        "SELECT current_setting('perfect_ht_threshold'), current_setting('disabled_optimizers')"
    )
    before = connection.execute(settings).fetchone()
    engine = DuckDBEngine(connection)
    during = connection.execute(settings).fetchone()
    assert during[0] >= 20 and set(during[1].split(",")) == {"top_n", "build_side_probe_side"}
    engine.cleanup()
    after = connection.execute(settings).fetchone()
    assert after == before


def test_read_only_duckdb_connection_trains(tmp_path, frame):
    import duckdb

    path = str(tmp_path / "data.duckdb")
    with duckdb.connect(path) as writer:
        writer.register("frame", frame)
        writer.execute("CREATE TABLE rows AS SELECT * FROM frame")
    connection = duckdb.connect(path, read_only=True)
    model = sqltree.train("rows", target="label", max_depth=4, connection=connection)
    assert model.text() == sqltree.train(frame, target="label", max_depth=4).text()
