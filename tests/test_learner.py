"""The learner over additive statistics: every backend sums the same histograms, the splitter
scores every candidate as a brute-force scan does, and a forest is the same on every engine
and plan."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from sqltree.dataset import describe
from sqltree.engines import get_engine
from sqltree.learner.backends import Allowed, Packing, Start
from sqltree.learner.encode import encode
from sqltree.learner.forest import ForestOptions, train_forest
from sqltree.learner.gains import Entropy, Gini, Newton, Poisson, SquaredError
from sqltree.learner.rows import PRIME, Sampling, row_hash, tree_constants
from sqltree.learner.splitter import (
    FeatureCodes,
    Histograms,
    Layout,
    Rules,
    Sparse,
    best_splits,
)

from .helpers import mixed_table, on_engines


def _regression_table(rows: int = 3000, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=rows)
    b = rng.integers(0, 30, size=rows).astype(float)
    c = rng.choice(["u", "v", "w", "x"], size=rows)
    y = 3 * (a > 0.2) + 0.1 * b + (c == "w") * 2 + rng.normal(scale=0.5, size=rows)
    frame = pd.DataFrame({"a": a, "b": b, "c": c, "y": y})
    frame.loc[rng.random(rows) < 0.05, "a"] = np.nan
    frame.loc[rng.random(rows) < 0.05, "c"] = None
    return frame


def _histograms(backend, sampling: Sampling, n_trees: int, allowed: bool):
    constants = tree_constants(7, n_trees)
    roots = [Start(t, None if sampling.everything else tuple(int(k) for k in constants[t]))
             for t in range(n_trees)]
    backend.start(roots, sampling)
    if not allowed:
        return backend.histograms()
    rng = np.random.default_rng(0)
    mask = rng.random((n_trees, len(backend.layout.features))) < 0.5
    mask[:, 0] = True
    return backend.histograms(Allowed(np.arange(n_trees), mask))


def _dense_block(block, n_codes: int):
    """A block as (slots, nodes x codes x statistics), whether it came dense or sparse."""
    return block.to_dense(n_codes) if isinstance(block, Sparse) else block


def _same_histograms(a: Histograms, b: Histograms, layout: Layout) -> None:
    assert a.nodes.tolist() == b.nodes.tolist()
    for x, y, f in zip(a.blocks, b.blocks, layout.features, strict=True):
        assert (x is None) == (y is None)
        if x is not None and y is not None:
            x, y = _dense_block(x, f.n_codes), _dense_block(y, f.n_codes)
            assert x[0].tolist() == y[0].tolist()
            np.testing.assert_array_equal(x[1], y[1])  # exact: whole-number sums


@pytest.mark.parametrize("task", ["classification", "regression"])
@pytest.mark.parametrize("sampling", [Sampling(False, 1.0), Sampling(True, 1.0),
                                      Sampling(False, 0.5)], ids=["all", "bootstrap", "half"])
@pytest.mark.parametrize("allowed", [False, True], ids=["dense", "allowed"])
def test_sql_and_numpy_histograms_are_equal(task, sampling, allowed):
    frame = mixed_table(2000) if task == "classification" else _regression_table(2000)
    target = "label" if task == "classification" else "y"
    engine = get_engine(None)
    data = describe(frame, engine, target, task=task)
    encoded = encode(data, 16)
    try:
        sql = _histograms(encoded.sql_backend(), sampling, 3, allowed)
        mem = _histograms(encoded.numpy_backend(), sampling, 3, allowed)
        _same_histograms(sql, mem, encoded.layout)
        # every tree's root holds its drawn rows: the row column sums the counts
        totals = _dense_block(sql.blocks[0], encoded.layout.features[0].n_codes)[1].sum(axis=1)
        if sampling.everything:
            assert totals[:, 0].tolist() == [2000.0] * 3
        else:
            assert 0 < totals[0, 0] < 2 * 2000
    finally:
        engine.cleanup()


def test_bootstrap_counts_are_poisson_and_the_same_in_sql():
    rid = np.arange(1, 200_001)
    counts = Sampling(True, 1.0).counts(row_hash(rid, tree_constants(0, 1)[0]))
    # Poisson(1): P(0) = 0.3679, P(1) = 0.3679, P(2) = 0.1839
    shares = np.bincount(counts.astype(int), minlength=4)[:3] / len(rid)
    np.testing.assert_allclose(shares, [0.3679, 0.3679, 0.1839], atol=0.005)
    assert abs(counts.mean() - 1.0) < 0.01
    # the SQL expression draws the same counts (DuckDB's BIGINT arithmetic)
    import duckdb

    a, b, c, d = (int(x) for x in tree_constants(0, 1)[0])
    sql = duckdb.sql(
        f"SELECT (((((i * {a} + {b}) % {PRIME}) * ((i * {a} + {b}) % {PRIME})) % {PRIME}) "
        f"* {c} + {d}) % {PRIME} AS h FROM range(1, 200001) t(i) ORDER BY i").fetchnumpy()["h"]
    np.testing.assert_array_equal(sql, row_hash(rid, tree_constants(0, 1)[0]))


# -- the splitter against a brute-force scan -----------------------------------------------------
def _brute_force(sums: np.ndarray, kinds: list[str], criterion, rules: Rules):
    """Every candidate split of one node, scored one by one: (gain, feature, left codes,
    unknown values left)."""
    best = None
    offset = 0
    for pos, kind in enumerate(kinds):
        width = FEATURE_CODES[pos]
        block = sums[offset : offset + width]
        offset += width
        total = block.sum(axis=0)
        parent = float(criterion.score(total))
        missing = block[0]
        if kind == "continuous":
            candidates = [tuple(range(1, t + 1)) for t in range(1, width - 1 + 1)]
        else:
            present = [c for c in range(1, width) if block[c, 0] > 0]
            key = {c: float(criterion.order_key(block[None, c : c + 1], total[None])[0, 0])
                   for c in present}
            order = sorted(present, key=lambda c: (key[c], c))
            candidates = [tuple(sorted(order[: t + 1])) for t in range(len(order))]
        for codes in candidates:
            for side in (False, True):
                if side and missing[0] == 0:
                    continue
                left = block[list(codes)].sum(axis=0) + (missing if side else 0)
                right = total - left
                if min(left[0], right[0]) < max(rules.min_samples_leaf, 1e-300):
                    continue
                if min(float(criterion.weight(left)), float(criterion.weight(right))) <= 0:
                    continue
                gain = float(criterion.score(left) + criterion.score(right)) - parent
                if best is None or gain > best[0]:
                    best = (gain, pos, codes, side)
    return best


FEATURE_CODES = [6, 5, 4]


@pytest.mark.parametrize("criterion", [Gini(), Entropy(), SquaredError(), Poisson(),
                                       Newton(l2=1.0)], ids=lambda c: c.name)
@pytest.mark.parametrize("seed", range(6))
def test_best_split_is_the_brute_force_best(criterion, seed):
    rng = np.random.default_rng(seed)
    kinds = ["continuous", "nominal", "continuous"]
    layout = Layout(tuple(FeatureCodes(i, k, n) for i, (k, n)
                          in enumerate(zip(kinds, FEATURE_CODES))))
    n_nodes, n_rows = 5, 40
    # rows with a code per feature and their statistics, summed per node as a backend sums them
    node = rng.integers(0, n_nodes, n_rows)
    codes = np.stack([rng.integers(0, w, n_rows) for w in FEATURE_CODES], axis=1)
    if criterion.name in ("gini", "entropy"):
        label = rng.integers(0, 3, n_rows)
        row_stats = np.stack([np.ones(n_rows)] + [(label == k) * 1.0 for k in range(3)], axis=1)
    elif criterion.name == "newton":
        h = rng.integers(1, 5, n_rows) * 0.25
        row_stats = np.stack([np.ones(n_rows), h, rng.normal(size=n_rows)], axis=1)
    else:
        y = rng.integers(0, 8, n_rows) * 1.0
        row_stats = np.stack([np.ones(n_rows), np.ones(n_rows), y, y * y], axis=1)
    stats = np.zeros((n_nodes, sum(FEATURE_CODES), row_stats.shape[1]))
    for pos, off in enumerate(layout.offsets):
        np.add.at(stats, (node, off + codes[:, pos]), row_stats)
    hist = Histograms.of_dense(np.arange(n_nodes), stats, layout)
    rules = Rules(min_samples_leaf=1.0)
    choices, _ = best_splits(hist, layout, criterion, rules)
    for node in range(n_nodes):
        expected = _brute_force(stats[node], kinds, criterion, rules)
        choice = choices[node]
        if expected is None or not np.isfinite(expected[0]):
            assert choice is None or not np.isfinite(choice.gain)
            continue
        assert choice is not None
        assert choice.gain == pytest.approx(expected[0], rel=1e-12, abs=1e-12)


def assert_same_choices(got: list, want: list) -> None:
    """Each node's choice the same to the last bit (or None on both sides)."""
    for a, b in zip(got, want, strict=True):
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert (a.feature, a.gain, a.missing_left, a.upto, a.left_codes,
                    a.saw_missing) == (b.feature, b.gain, b.missing_left, b.upto,
                                       b.left_codes, b.saw_missing)
            np.testing.assert_array_equal(a.left, b.left)
            np.testing.assert_array_equal(a.right, b.right)


@pytest.mark.parametrize("criterion", [Gini(), Entropy(), SquaredError(), Poisson(),
                                       Newton(l2=1.0)], ids=lambda c: c.name)
@pytest.mark.parametrize("seed", range(4))
def test_sparse_blocks_choose_what_dense_blocks_choose(criterion, seed):
    # a deep level: few rows a node, most codes empty, code 1 and unknown values often absent,
    # many ties (small whole numbers); each node may split on a sample of the features
    rng = np.random.default_rng(seed)
    widths, kinds = [12, 7, 30, 3], ["continuous", "nominal", "continuous", "nominal"]
    layout = Layout(tuple(FeatureCodes(i, k, n) for i, (k, n) in enumerate(zip(kinds, widths))))
    n_nodes = 60
    classes = criterion.name in ("gini", "entropy")
    scale = np.array([1.0] + [2.0**-3] * 3)
    blocks_dense, blocks_sparse = [], []
    rows_of = [rng.integers(0, 2 * n_nodes, rng.integers(1, 14)) for _ in range(n_nodes)]
    units_of = []
    for rows in rows_of:
        n = len(rows)
        cnt = rng.integers(1, 3, n)
        if classes:
            label = rng.integers(0, 3, n)
            u = np.stack([cnt] + [(label == k) * cnt * 8 for k in range(3)], axis=1)
        else:
            y = rng.integers(0 if criterion.name != "poisson" else 1, 6, n)
            w = rng.integers(1, 3, n) * 8
            u = np.stack([cnt, cnt * w, cnt * w * y, cnt * w * y * y], axis=1)
        units_of.append(u.astype(np.int64))
    roots = np.stack([u.sum(axis=0) * scale for u in units_of])
    allowed = rng.random((n_nodes, len(widths))) < 0.6
    allowed[:, 0] |= ~allowed.any(axis=1)
    for pos, width in enumerate(widths):
        slots = np.flatnonzero(allowed[:, pos])
        dense = np.zeros((len(slots), width, 4))
        entries = []
        for k, slot in enumerate(slots.tolist()):
            u = units_of[slot]
            unknown = rng.random(len(u)) < 0.15
            if rng.random() < 0.3:
                # the unknown values alone against every known one (no row at code 1): the
                # candidate that a sparse block adds at c = 0
                unknown = u[:, 1] > u[:, 2] if classes else u[:, 2] >= 3 * u[:, 1]
            code = np.where(unknown, 0, rng.integers(2 if rng.random() < 0.5 else 1, width,
                                                     len(u)))
            units = np.zeros((width, 4), dtype=np.int64)
            np.add.at(units, code, units_of[slot])
            dense[k] = units * scale
            held = np.flatnonzero(units[:, 0] > 0)
            entries += [(slot, c, units[c]) for c in held.tolist()]
        blocks_dense.append((slots, dense))
        blocks_sparse.append(Sparse(np.array([e[0] for e in entries]),
                                    np.array([e[1] for e in entries]),
                                    np.stack([e[2] for e in entries]), scale))
    nodes = np.arange(n_nodes)
    for rules in (Rules(), Rules(min_samples_leaf=3.0, min_gain=0.01)):
        for tie_roots in (None, roots):
            want, want_totals = best_splits(Histograms(nodes, blocks_dense), layout, criterion,
                                            rules, tie_roots)
            got, got_totals = best_splits(Histograms(nodes, blocks_sparse), layout, criterion,
                                          rules, tie_roots)
            np.testing.assert_array_equal(got_totals, want_totals)
            assert sum(c is not None for c in want) > n_nodes // 3
            assert_same_choices(got, want)


@pytest.mark.parametrize("criterion", [Gini(), Entropy(), SquaredError(), Poisson(),
                                       Newton(l2=1.0)], ids=lambda c: c.name)
@pytest.mark.parametrize("seed", range(3))
def test_features_scored_side_by_side_choose_what_one_at_a_time_choose(criterion, seed):
    """A dense histogram (every feature at every node) is scored with a kind's features
    side by side, each padded to the widest (``splitter._scan_stacked``); the same blocks
    without the dense array are scored a feature at a time. Every choice and total is the
    same to the last bit: features of 2 to 40 codes, nominal and continuous, unknown values
    often absent, many ties."""
    rng = np.random.default_rng(seed)
    widths = [12, 7, 40, 3, 2, 9, 2]
    kinds = ["continuous", "nominal", "continuous", "nominal", "continuous", "nominal",
             "continuous"]
    layout = Layout(tuple(FeatureCodes(i, k, n) for i, (k, n) in enumerate(zip(kinds, widths))))
    n_nodes = 700  # more than a chunk of nodes (``NODE_CHUNK`` over the features)
    classes = criterion.name in ("gini", "entropy")
    dense = np.zeros((n_nodes, layout.width, 4))
    for node in range(n_nodes):
        n = int(rng.integers(1, 30))
        cnt = rng.integers(1, 3, n)
        if classes:
            label = rng.integers(0, 3, n)
            u = np.stack([cnt] + [(label == k) * cnt for k in range(3)], axis=1)
        else:
            y = rng.integers(0 if criterion.name != "poisson" else 1, 6, n)
            w = rng.integers(1, 3, n)
            u = np.stack([cnt, cnt * w, cnt * w * y, cnt * w * y * y], axis=1)
        for f, offset in zip(layout.features, layout.offsets, strict=True):
            unknown = rng.random(n) < (0.2 if rng.random() < 0.5 else 0.0)
            code = np.where(unknown, 0, rng.integers(min(1, f.n_codes - 1), f.n_codes, n))
            np.add.at(dense[node], offset + code, u * np.array([1.0, 0.125, 0.125, 0.125]))
    nodes = np.arange(n_nodes)
    side_by_side = Histograms.of_dense(nodes, dense, layout)
    one_at_a_time = Histograms(nodes, side_by_side.blocks)
    roots = dense[:, : widths[0]].sum(axis=1)
    for rules in (Rules(), Rules(min_samples_leaf=3.0, min_gain=0.01)):
        for tie_roots in (None, roots):
            want, want_totals = best_splits(one_at_a_time, layout, criterion, rules, tie_roots)
            got, got_totals = best_splits(side_by_side, layout, criterion, rules, tie_roots)
            np.testing.assert_array_equal(got_totals, want_totals)
            assert sum(c is not None for c in want) > n_nodes // 3
            assert len({c.feature for c in want if c is not None}) > 3
            assert_same_choices(got, want)


@pytest.mark.parametrize("bits", [1, 8, 9, 16])
def test_packed_codes_read_back_as_stored_on_each_engine(bits):
    """Codes packed into words and read back by a shift and a mask give every code, the
    largest included, over several words (DuckDB and SQLite, the ways the engines render
    shifts)."""
    import sqlite3

    import duckdb
    from sqlglot import exp

    packing = Packing(n_features=15, bits=bits)
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 2**bits, 15)
    codes[0] = 2**bits - 1
    words = packing.packed([exp.Literal.number(int(c)) for c in codes])
    assert len(words) == -(-15 // (62 // bits))

    reads = []
    for f in range(15):
        word, shift = packing.place(f)
        code = packing.read([exp.column(w, table="c") for w in packing.words],
                            exp.Literal.number(word), exp.Literal.number(shift))
        reads.append(exp.select(code).from_(exp.select(*words).subquery("c")))
    for dialect, run in (("duckdb", lambda q: duckdb.sql(q).fetchall()),
                         ("sqlite", lambda q: sqlite3.connect(":memory:").execute(q).fetchall())):
        got = [run(q.sql(dialect))[0][0] for q in reads]
        assert got == codes.tolist(), dialect


# -- whole forests -------------------------------------------------------------------------------
def _forest_file(ensemble) -> str:
    data = ensemble.to_dict()
    data.pop("stats", None)
    for f in data["features"]:
        f.pop("sql_type")  # the engine's own name of the type
    return json.dumps(data, sort_keys=True)


def _train(frame, target, *, engine=None, source=None, in_memory=False, **options):
    engine = engine or get_engine(None)
    data = describe(frame if source is None else source, engine, target,
                    task="regression" if target == "y" else "classification")
    try:
        return train_forest(data, ForestOptions(**options), in_memory=in_memory)
    finally:
        engine.cleanup()


@pytest.mark.parametrize("options", [
    {"n_estimators": 5, "max_depth": 6},
    {"n_estimators": 3, "max_features": None, "bootstrap": False, "max_samples": 0.7},
    {"n_estimators": 4, "criterion": "entropy", "min_samples_leaf": 5, "max_bins": 8},
], ids=["bootstrap-sqrt", "subsample-all", "entropy"])
def test_a_forest_is_the_same_in_sql_and_in_memory(options):
    frame = mixed_table(3000)
    sql = _train(frame, "label", **options)
    memory = _train(frame, "label", in_memory=True, **options)
    assert _forest_file(sql) == _forest_file(memory)
    assert sql.n_trees == options["n_estimators"]
    assert all(t.n_leaves > 1 for t in sql.trees)


def test_a_regression_forest_is_the_same_in_sql_and_in_memory():
    frame = _regression_table()
    options = {"n_estimators": 4, "max_depth": 5, "max_features": 1.0}
    sql = _train(frame, "y", **options)
    memory = _train(frame, "y", in_memory=True, **options)
    assert _forest_file(sql) == _forest_file(memory)
    predicted = sql.predict_frame(frame)
    assert np.corrcoef(predicted, frame["y"])[0, 1] > 0.8


@on_engines(exclude=("duckdb",), sqlite=True)
def test_a_forest_is_the_same_on_every_engine(engine_factory):
    frame = mixed_table(1500)
    options = {"n_estimators": 3, "max_depth": 5}
    engine, source = engine_factory(frame)
    there = _train(frame, "label", engine=engine, source=source, **options)
    assert _forest_file(there) == _forest_file(_train(frame, "label", **options))


def test_the_same_seed_gives_the_same_forest_and_another_seed_another():
    frame = mixed_table(2000)
    a = _train(frame, "label", n_estimators=3, max_depth=4, random_state=5)
    b = _train(frame.sample(frac=1.0, random_state=1), "label", n_estimators=3, max_depth=4,
               random_state=5)
    c = _train(frame, "label", n_estimators=3, max_depth=4, random_state=6)
    assert _forest_file(a) == _forest_file(b)  # row order does not matter
    assert _forest_file(a) != _forest_file(c)


def test_trees_of_one_batch_equal_trees_grown_alone(monkeypatch):
    frame = mixed_table(2000)
    together = _train(frame, "label", n_estimators=4, max_depth=5)
    import sqltree.learner.forest as forest

    monkeypatch.setattr(forest, "PAIRS_PER_BATCH", 1)  # one tree per batch
    alone = _train(frame, "label", n_estimators=4, max_depth=5)
    assert _forest_file(together) == _forest_file(alone)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_a_memory_bound_that_splits_the_trees_into_batches_changes_no_tree(monkeypatch, task):
    frame = mixed_table(2000) if task == "classification" else _regression_table(2000)
    target = "label" if task == "classification" else "y"
    import sqltree.learner.forest as forest

    one = _train(frame, target, n_estimators=5, max_depth=5, oob_score=True)
    assert one.stats["batches"] == 1
    monkeypatch.setattr(forest, "tree_bytes", lambda *_: forest.BATCH_BYTES / 2)
    several = _train(frame, target, n_estimators=5, max_depth=5, oob_score=True)
    assert several.stats["batches"] == 3  # 2, 2 and 1 trees
    assert {tuple(lv["trees"]) for lv in several.stats["levels"]} == {(0, 2), (2, 4), (4, 5)}
    assert _forest_file(one) == _forest_file(several)
    # the out-of-bag votes of each batch are summed apart: the same up to their rounding
    assert several.stats["oob"]["rows"] == one.stats["oob"]["rows"]
    assert several.stats["oob"]["score"] == pytest.approx(one.stats["oob"]["score"], rel=1e-12)


def test_batches_are_bounded_by_memory_and_rows():
    from sqltree.learner.forest import BATCH_BYTES, ENTRY_BYTES, tree_bytes, trees_per_batch

    layout = Layout(tuple(FeatureCodes(i, "continuous", 256) for i in range(16)))
    options = ForestOptions(n_estimators=100, max_depth=10)
    assert trees_per_batch(options, 3000, 4, layout, 3) == 100
    # a 1M-row tree's deepest level: 632,000 drawn rows x 4 features, or at most 512 nodes
    # x 4 features x 256 codes x 3 classes
    assert tree_bytes(options, 1_000_000, 4, layout, 3) == 512 * 4 * 256 * 3 * ENTRY_BYTES
    large = trees_per_batch(options, 1_000_000, 4, layout, 3)
    assert large == BATCH_BYTES // (512 * 4 * 256 * 3 * ENTRY_BYTES)
    deeper = trees_per_batch(ForestOptions(n_estimators=100), 1_000_000, 4, layout, 3)
    assert 1 <= deeper < large
    assert tree_bytes(ForestOptions(n_estimators=100), 100_000, 4, layout, 3) == pytest.approx(
        100_000 * (1 - np.exp(-1)) * 4 * ENTRY_BYTES)


def test_every_feature_and_row_once_is_a_greedy_tree_of_the_bins():
    """With neither bagging nor feature sampling each tree is the same greedy Gini tree,
    whose every split is the best of all candidates over the bins."""
    frame = mixed_table(2000)
    forest = _train(frame, "label", n_estimators=2, max_features=None, bootstrap=False,
                    max_depth=3, max_bins=32)
    a, b = forest.trees
    for name in ("feature", "threshold", "left", "right", "value"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    # the training accuracy of a depth-3 tree on this table (its rule reaches about 0.8)
    accuracy = (forest.predict_frame(frame) == frame["label"].to_numpy()).mean()
    assert accuracy > 0.7


def test_options_are_checked_before_any_query():
    for bad in ({"n_estimators": 0}, {"max_features": "all"}, {"max_samples": 1.5},
                {"max_bins": 1}, {"bootstrap": False, "oob_score": True}):
        with pytest.raises(Exception, match=r"n_estimators|max_features|max_samples|max_bins|oob"):
            _train(mixed_table(50), "label", **bad)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_out_of_bag_score_is_the_same_in_sql_and_in_memory_and_checks_by_hand(task):
    frame = mixed_table(1500) if task == "classification" else _regression_table(1500)
    target = "label" if task == "classification" else "y"
    options = {"n_estimators": 6, "max_depth": 4, "oob_score": True, "max_features": None}
    sql = _train(frame, target, **options)
    memory = _train(frame, target, in_memory=True, **options)
    assert sql.stats["oob"] == pytest.approx(memory.stats["oob"])
    # by hand: each row's trees that did not draw it, by the same hash of its number
    engine = get_engine(None)
    data = describe(frame, engine, target, task=task)
    backend = encode(data, 255, in_memory=True).numpy_backend()
    engine.cleanup()
    constants = tree_constants(0, 6)
    sums = np.zeros((len(frame), len(sql.classes) or 1))
    votes = np.zeros(len(frame))
    columns = sql._columns(pd.DataFrame(frame))
    for t, tree in enumerate(sql.trees):
        counts = Sampling(True, 1.0).counts(row_hash(backend.rid, constants[t]))
        # the backend's rows are the frame's, in order; their numbers are the codes' order
        out = counts == 0
        leaf = tree.apply(*columns)
        sums[out] += tree.value[leaf[out]]
        votes[out] += 1
    voted = votes > 0
    if task == "classification":
        truth = frame[target].to_numpy()[voted]
        predicted = np.asarray(sql.classes)[np.argmax(sums[voted], axis=1)]
        assert sql.stats["oob"]["score"] == pytest.approx((truth == predicted).mean())
    else:
        truth = frame[target].to_numpy()[voted]
        predicted = sums[voted, 0] / votes[voted]
        sse = ((truth - predicted) ** 2).sum()
        sst = ((truth - truth.mean()) ** 2).sum()
        assert sql.stats["oob"]["score"] == pytest.approx(1 - sse / sst, rel=1e-9)
