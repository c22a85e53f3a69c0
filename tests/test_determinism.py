"""The same data and options give byte-identical model files, run after run and engine to engine.

DuckDB adds a group's doubles in an order that changes from run to run when it aggregates in
parallel, so sums of fractional weights (C4.5's unknown values spread over branches, a weight
column, CART's class weights) came out different in the last bits, and saved models with them.
Counts are now exact sums in fixed point. The data is large enough that DuckDB splits every
level over several tasks (more than two of its 122,880-row row groups), with NULLs in
continuous and nominal features and a fractional weight column.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sqlglot import exp

import sqltree
from sqltree import fixed_point as fx
from sqltree import queries as q
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.model import Model

from .conftest import EngineFactory
from .helpers import comparable

ROWS = 300_000
RUNS = 3


def frame(n: int = ROWS, seed: int = 19) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n).round(2)
    b = rng.exponential(size=n).round(3)
    c = rng.integers(0, 40, size=n).astype(float)
    colour = rng.choice(["red", "green", "blue", "grey"], size=n).astype(object)
    size = rng.choice(["s", "m", "l"], size=n).astype(object)
    score = a + (colour == "red") * 0.8 - 0.4 * b + (c > 20) * 0.5 + rng.normal(0, 0.7, n)
    y = np.where(score > 0.6, "hi", np.where(score > -0.4, "mid", "lo")).astype(object)
    a[rng.random(n) < 0.1] = np.nan
    b[rng.random(n) < 0.05] = np.nan
    c[rng.random(n) < 0.08] = np.nan
    colour[rng.random(n) < 0.07] = None
    w = rng.random(n) * 2 + 0.1
    return pd.DataFrame({"a": a, "b": b, "c": c, "colour": colour, "size": size, "w": w, "y": y})


@pytest.fixture(scope="module")
def data() -> dict[str, pd.DataFrame]:
    return {"classes": frame(), "regression": regression_frame()}


def regression_frame(n: int = ROWS, seed: int = 19) -> pd.DataFrame:
    """``frame`` with a numeric target: its sums of ``w*y`` and ``w*y*y`` are fractional."""
    rows = frame(n, seed)
    rng = np.random.default_rng(seed + 1)
    score = np.nan_to_num(rows["a"].to_numpy()) * 3.7 - np.nan_to_num(rows["b"].to_numpy())
    rows["y"] = np.round(score + (rows["colour"] == "red") * 2.1 + rng.normal(0, 0.3, n), 3)
    return rows


CASES = {
    # unknown values make weights fractional from the first split on
    "c4.5 unknown values": {"max_depth": 5},
    "c4.5 weight column": {"weight": "w", "max_depth": 5},
    "cart class and sample weights": {
        "algorithm": "cart", "weight": "w", "class_weight": "balanced", "max_depth": 5,
    },
    # the moments of a regression tree are summed in fixed point too
    "regression": {"task": "regression", "max_depth": 6},
    "regression weight column": {"task": "regression", "weight": "w", "max_depth": 6},
}


def rows_of(case: str, n: int = ROWS, seed: int = 19) -> pd.DataFrame:
    return regression_frame(n, seed) if "regression" in case else frame(n, seed)


def _untimed(stats: Any) -> Any:
    """Training statistics without wall-clock times, which no two runs share."""
    if isinstance(stats, dict):
        return {k: 0.0 if k == "seconds" else _untimed(v) for k, v in stats.items()}
    if isinstance(stats, list):
        return [_untimed(v) for v in stats]
    return stats


def saved(model: Model, path: Path, options: dict[str, Any]) -> bytes:
    model.stats = _untimed(model.stats)
    if "weight" in options:
        # The source's total weight is summed as it is described (sqltree/dataset.py), in
        # floating point; it is a statistic only: the tree's counts are summed exactly.
        model.stats["training_weight"] = 0.0
    model.save(path)
    return path.read_bytes()


@pytest.mark.parametrize("case", CASES)
def test_model_files_are_identical_run_after_run(data, tmp_path, case):
    options = CASES[case]
    rows = data["regression" if "regression" in case else "classes"]
    files = []
    for run in range(RUNS):
        model = sqltree.train(rows, target="y", connection=DuckDBEngine(threads=2), **options)
        files.append(saved(model, tmp_path / f"model{run}.json", options))
    assert model.n_leaves > 20
    for run, text in enumerate(files[1:], start=1):
        assert text == files[0], f"run {run} saved another model file"


ENGINE_MARKS = {"postgres": [pytest.mark.postgres], "spark": [pytest.mark.spark, pytest.mark.slow]}
SPARK_CASES = ("c4.5 weight column", "cart class and sample weights", "regression weight column")
"""Spark's cases: a weight column makes every sum fractional (fixed point) from level 0, for
each kind of tree; unweighted C4.5 and regression trees meet Spark in test_engines and
test_regression (a job costs Spark far more than rows do)."""


@pytest.mark.parametrize(("engine_factory", "case"), [
    pytest.param(engine, case, id=f"{case}-{engine}", marks=ENGINE_MARKS[engine])
    for case in CASES for engine in ENGINE_MARKS
    if engine == "postgres" or case in SPARK_CASES
], indirect=["engine_factory"])
def test_other_engines_give_duckdbs_model(engine_factory: EngineFactory, case):
    # Fewer rows and levels: the counts are exact sums, whatever the size.
    options = {**CASES[case], "max_depth": 4}
    rows = rows_of(case, 40_000, seed=7)
    duck = sqltree.train(rows, target="y", connection=DuckDBEngine(threads=2), **options)
    engine, source = engine_factory(rows)
    other = sqltree.train(source, target="y", connection=engine, **options)
    assert duck.n_leaves > 10
    assert comparable(other) == comparable(duck)


def test_fixed_point_bits_keep_every_sum_in_a_bigint():
    assert fx.fixed_point_bits(1_000_000.0) == 41  # 1e6 < 2^20
    assert fx.fixed_point_bits(2.0**20) == 40  # a power of two is itself the bound's top bit
    assert fx.fixed_point_bits(0.75) == 61
    assert fx.fixed_point_bits(0.0) == fx.fixed_point_bits(1.0)
    for bound in (1e-300, 3e-5, 1.0, 12345.678, 2.0**52, 1e30, 1e300):
        bits = fx.fixed_point_bits(bound)
        assert math.isfinite(2.0**bits) and 2.0**-bits > 0
        if abs(bits) < fx.FIXED_POINT_MAX_BITS:
            assert 2.0**60 <= bound * 2.0**bits < 2.0**61


def test_fixed_point_rounds_and_converts_alike_on_every_engine(engine_factory):
    # Rounding to the nearest unit with ties up (casts round ties differently per engine), and
    # sums above 2^53 units converted to DOUBLE correctly rounded (as Python's float(int)).
    bits = 41
    unit = 2.0**-bits
    weights = [0.1, 1 / 3, 2.5 * unit, 3.5 * unit, 0.5 * unit, 1.0, 123456.789, 1.7]
    sums = [2**53 + 1, 2**61 + 12345, 2**62 - 1, 3, 2**60 + 2**7 + 1, 0, 5, 2**55 - 3]
    frame = pd.DataFrame({"k": range(len(weights)), "w": weights, "s": sums})
    engine, source = engine_factory(frame)
    query = (
        exp.select(
            exp.column("k"),
            exp.alias_(fx.to_fixed(exp.column("w"), bits), "f"),
            exp.alias_(fx.from_fixed(exp.func("SUM", exp.column("s")), bits), "d"),
        )
        .from_(source)
        .group_by(exp.column("k"), exp.column("w"))
        .order_by(exp.column("k"))
    )
    got = [(int(f), float(d)) for _, f, d in engine.execute(query)]
    expected = [(math.floor(w * 2.0**bits + 0.5), float(s) * unit) for w, s in zip(weights, sums)]
    assert got == expected
    assert got[2][0] == 3 and got[3][0] == 4 and got[4][0] == 1


def test_recounted_weights_are_exact_sums_in_every_engine(engine_factory):
    # Pruning recounts class weights per (node, key) of rows it routes: fixed-point sums at the
    # training data's one scale (``fixed_point.training_weight_bits``), in (node, key) order.
    from sqltree.dataset import describe

    rng = np.random.default_rng(3)
    n = 5_000
    x = rng.normal(size=n).round(2)
    x[rng.random(n) < 0.1] = np.nan
    rows = pd.DataFrame({
        "x": x,
        "w": rng.random(n) * 3 + 0.01,
        "y": rng.choice(["a", "b", "c"], size=n).astype(object),
    })
    engine, source = engine_factory(rows)
    data = describe(source, engine, "y", weight="w")
    level = engine.materialize("level", q.build_level0(data))
    got = engine.execute(q.build_keyed_counts(level, data.features, [(0, 0, 0.25)], 3,
                                              fx.training_weight_bits(data)))

    unit = 2.0 ** fx.fixed_point_bits(rows["w"].sum())
    keys = np.where(np.isnan(x), -1.0, np.where(x <= 0.25, 0.0, 1.0))
    expected = []
    for key in (-1.0, 0.0, 1.0):
        fixed = [
            sum(math.floor(w * unit + 0.5) for w in rows["w"][(keys == key) & (rows["y"] == c)])
            for c in ("a", "b", "c")
        ]
        expected.append((0, key, *[s / unit for s in fixed]))
    assert [(int(r[0]), float(r[1]), *map(float, r[2:])) for r in got] == expected


def test_a_zero_threshold_is_zero_on_every_plan():
    frame = pd.DataFrame({"x": [-0.0, 0.0, -0.0, 0.0, 1.0, 1.0, 2.0, 2.0],
                          "t": list("aaaabbbb")})
    files = set()
    for plan in ("memory", "tables", "select"):
        model = sqltree.train(frame, target="t", plan=plan, min_cases=1)
        assert model.stats["plan"] == plan
        threshold = model.root.split.threshold
        assert threshold == 0.0 and math.copysign(1.0, threshold) == 1.0, plan
        files.add(json.dumps(model.to_dict()["tree"]))
    assert len(files) == 1


def _tree_file(model: Model) -> str:
    return json.dumps(comparable(model), sort_keys=True)


REGRESSION_FOUND = {
    # tiny fractional weights: the memory plan's child sums came out 0.5000000000005, and it
    # chose b for the second split where the SQL plans chose a (a tie)
    "weights": (pd.DataFrame({"a": [4.0, 2, 5, 3], "b": [8.0, 9, 5, 4], "t": [1.0, 5, 3, 5],
                              "w": [1e-6, 1e-6, 1e-6, 0.1]}), {"weight": "w"}),
    # DuckDB's leaf 0.3 against SQLite's 0.30000000000000004
    "leaf values": (pd.DataFrame({"x": [0.0, 1, 0, 1, 0], "t": [0.1, 0.4, 0.2, 1.0, 0.6]}),
                    {"max_depth": 1}),
}


@pytest.mark.parametrize("case", list(REGRESSION_FOUND))
def test_regression_trees_are_identical_on_every_plan_and_engine(case):
    import sqlite3

    rows, options = REGRESSION_FOUND[case]
    files = {}
    for plan in ("memory", "tables", "select"):
        model = sqltree.train(rows, target="t", task="regression", plan=plan, **options)
        files[plan] = _tree_file(model)
    lite = sqlite3.connect(":memory:")
    rows.to_sql("rows", lite, index=False)
    files["sqlite"] = _tree_file(sqltree.train("rows", target="t", task="regression",
                                               connection=lite, **options))
    assert len(set(files.values())) == 1, files


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("criterion", ["squared_error", "poisson"])
def test_random_regression_tables_give_one_model_on_every_plan(seed, criterion):
    # Fractional weights and targets of every magnitude: the plans and SQLite agree to the bit.
    import sqlite3

    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 400))
    magnitude = 10.0 ** rng.integers(-6, 7)
    rows = pd.DataFrame({
        "x": rng.normal(size=n).round(int(rng.integers(0, 3))),
        "z": rng.choice(["p", "q", "r", None], size=n).astype(object),
        "w": rng.random(n) * 10.0 ** rng.integers(-6, 3),
        "t": np.abs(rng.normal(size=n)).round(int(rng.integers(0, 4))) * magnitude + 0.01,
    })
    options = {"weight": "w", "criterion": criterion, "min_samples_leaf": 2, "max_depth": 6}
    files = {plan: _tree_file(sqltree.train(rows, target="t", task="regression", plan=plan,
                                            **options))
             for plan in ("memory", "tables", "select")}
    lite = sqlite3.connect(":memory:")
    rows.to_sql("rows", lite, index=False)
    files["sqlite"] = _tree_file(sqltree.train("rows", target="t", task="regression",
                                               connection=lite, **options))
    assert len(set(files.values())) == 1, {k: v[:300] for k, v in files.items()}


def test_a_constant_target_is_one_leaf_of_impurity_zero():
    # The fixed point rounds each row's terms: a node whose target is one value must not look
    # impure to the rounding (and be split on nothing).
    rows = pd.DataFrame({"x": np.arange(50.0), "t": [0.1] * 25 + [1234.567] * 25})
    for plan in ("memory", "tables"):
        model = sqltree.train(rows, target="t", task="regression", plan=plan)
        assert model.n_leaves == 2, plan
        assert [leaf.impurity for leaf in model.root.children] == [0.0, 0.0]
        # the fixed point's unit is the range's 2^-60 per unit of training weight
        values = [leaf.value for leaf in model.root.children]
        assert values == pytest.approx([0.1, 1234.567], rel=0, abs=1234.567 * 50 * 2.0**-58)
