"""The level loop's query plan: binned mode, loaded split tables, finished children.

Nothing here is timed; the benchmarks in benchmarks/ measure speed.
"""

from __future__ import annotations

import pytest

import sqltree
from sqltree.dataset import describe
from sqltree.engines.base import Engine
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.grower import GrowOptions, grow
from tests.helpers import mixed_table

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


def test_binned_thresholds_are_observed_values(frame):
    model = sqltree.train(frame, target="label", max_depth=6, max_bins=8, pruning=None)
    observed = {c: set(frame[c].dropna().astype(float)) for c in CONTINUOUS}
    tests = [n.split for n in model.root.walk() if n.split and n.split.kind == "continuous"]
    assert tests
    for split in tests:
        assert split.threshold in observed[split.feature]


def test_binned_with_a_bin_per_value_grows_the_exact_tree(frame):
    # As many bins as distinct values: the same partitions, so the same tree (thresholds
    # may differ: exact mode takes the largest training value below the midpoint).
    exact = sqltree.train(frame, target="label", max_depth=6, pruning=None)
    binned = sqltree.train(frame, target="label", max_depth=6, pruning=None, max_bins=20_000)
    assert shape(binned.root) == shape(exact.root)
    rows = frame.head(500).to_dict("records")
    assert [binned.predict_row(r) for r in rows] == [exact.predict_row(r) for r in rows]


def test_binned_predictions_match_compiled_sql(frame):
    model = sqltree.train(frame, target="label", max_depth=5, max_bins=16)
    scored = model.predict(frame)
    rows = frame.to_dict("records")
    assert list(scored["prediction"]) == [model.predict_row(r) for r in rows]


def test_max_bins_below_two_is_refused(frame):
    with pytest.raises(ValueError, match="max_bins"):
        sqltree.train(frame, target="label", max_bins=1)


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
