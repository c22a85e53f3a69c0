"""Stage-level differential tests: every level's scored candidate rows, plan against plan.

Each algorithm's split scoring exists twice: as SQL over the level's histogram table
(``c45_scores.build_split_scores``, ``cart.scores.build_cart_scores``), run by the tables and
the select plans, and in numpy (``memory.c45_scores``, ``memory.cart_scores``), run by the
memory plan and the level scan. The other parity tests compare whole trees; here every row
``Strategy.score_rows`` returns at every level (one per (node, feature): the best cut of a
continuous feature, a nominal feature's split) is recorded on each plan and compared with the
tables plan's, key by key and column by column: integers and doubles exactly (the numpy
scorers reproduce the query's double arithmetic in its order), NULL and None alike.

Two documented differences are set aside, and nothing else:

- C4.5's and ID3's numpy scorer emits only the rows that ``c45.choose_split`` can choose
  (``memory.c45_scores._Scorer.emit``): the SQL rows it passes over are left out before
  comparing (and the numpy rows are checked to be choosable);
- CART's bound-pruned threshold search (``cart.bounded``; the tables and select plans on
  DuckDB, at levels of many values per node) scores only the bins that can reach the node's
  best cut: a continuous feature that can be neither chosen nor tied may report a lower best
  than the full scan's (or none). Its rows are only checked to be no better than the full
  scan's; the chosen and tied features' rows and every nominal row are compared exactly.

No column is compared to a tolerance (``APPROX`` is empty).

The spy wraps ``score_rows`` on the strategy class each plan trains with (as
``algorithms.grow_and_prune`` picks it), calls through and returns the real rows; it records
them as plain tuples (score rows may be tuples or named tuples).
"""

from __future__ import annotations

import functools
import math
import numbers
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest

import sqltree
from sqltree.algorithm_registry import facts
from sqltree.algorithms import DEEP_STRATEGIES, MEMORY_STRATEGIES, SCAN_STRATEGIES, STRATEGIES
from sqltree.algorithms.c45.scores import SCORE_COLUMNS as C45_COLUMNS
from sqltree.algorithms.cart.scores import SCORE_COLUMNS as CART_COLUMNS
from sqltree.algorithms.level_scan import ScanHistogram
from sqltree.algorithms.memory import c45 as memory_c45
from sqltree.algorithms.memory import stacked
from sqltree.algorithms.memory.level import Histogram
from sqltree.criteria import J48_SMALL, TIE_TOLERANCE
from sqltree.dataset import describe
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.grower import GrowOptions
from sqltree.tree import CONTINUOUS, NOMINAL

TABLES, SELECT, MEMORY, SCAN = "tables", "select", "memory", "scan"
DEEP = "tables, deep levels in memory"
"""The tables plan with C4.5's deep levels grown in memory (``memory.c45.DeepC45Strategy``)
from level 1 on: SQL and numpy levels in one training."""

CONTINUOUS_FEATURES = ("size", "age", "score", "close", "tiny")
NOMINAL_FEATURES = ("colour", "many", "flag", "shape")
FEATURES = (*CONTINUOUS_FEATURES, *NOMINAL_FEATURES)
"""Four features or more of each kind: the memory plan scores a small level's features of a
kind stacked as one (``memory.stacked``), so both of its paths are compared."""


# -- the data -----------------------------------------------------------------------------------
@functools.cache
def table(rows: int = 500, seed: int = 7) -> pd.DataFrame:
    """A deterministic table (do not change it in place): continuous features with NULLs,
    with ties, with distinct values, with values J48's 1e-5 gap apart and below CART's 1e-7;
    nominal features of 5 values and NULLs (CART's subsets), of 13 values (more than
    ``EXACT_SUBSETS_MAX``: ordered cuts only), of 2 and of 3 values with NULLs; a weight;
    and the targets: ``label`` (3 noisy classes), ``pair`` (2), ``amount`` (a regression
    target, negative too) and ``count`` (counts with zeros, for Poisson)."""
    rng = np.random.default_rng(seed)
    n = rows
    size = rng.normal(0.0, 1.0, n).round(2)
    frame = pd.DataFrame({
        "size": np.where(rng.random(n) < 0.12, np.nan, size),
        "age": rng.integers(0, 40, n).astype(float),
        "score": rng.uniform(-5.0, 5.0, n),
        "close": 1.0 + rng.integers(0, 12, n) * 1e-5,
        "tiny": rng.integers(0, 6, n) * 4e-8,
        "colour": rng.choice(["red", "green", "blue", "grey", "pink", None], n,
                             p=[0.25, 0.2, 0.2, 0.15, 0.1, 0.1]),
        "many": rng.choice([f"v{i:02d}" for i in range(13)], n),
        "flag": rng.choice(["yes", "no"], n),
        "shape": rng.choice(["a", "b", "c", None], n, p=[0.4, 0.3, 0.2, 0.1]),
        "w": rng.uniform(0.2, 3.0, n).round(3),
    })
    known_size = np.nan_to_num(frame["size"].to_numpy())
    label = np.where(frame["colour"].isin(["red", "grey"]), "p",
                     np.where(known_size > 0.2, "q",
                              np.where(frame["age"] < 15, "r", "p")))
    flip = rng.random(n) < 0.25
    label[flip] = rng.choice(["p", "q", "r"], int(flip.sum()))
    frame["label"] = label
    frame["pair"] = np.where(np.isin(label, ["p", "r"]), "left", "right")
    frame["amount"] = (0.3 * frame["age"] + 2.0 * frame["colour"].isin(["red", "blue"])
                       + known_size + frame["many"].str[1:].astype(int) * 0.2
                       + rng.normal(0.0, 1.5, n)).round(3)
    rate = np.exp(0.2 + 0.03 * frame["age"] + 0.6 * (frame["flag"] == "yes"))
    frame["count"] = rng.poisson(rate).astype(float)
    return frame


# -- the cases ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One (algorithm, criterion, options) case: trained on the tables plan (the reference)
    and on ``plans``; ``bounded``: the tables plan must search some level bound-pruned."""

    target: str
    options: dict[str, Any]
    plans: tuple[str, ...] = (MEMORY,)
    rows: int = 500
    bounded: bool = False
    depth: int = 3


C45 = {"algorithm": "c4.5", "pruning": None}
ID3 = {"algorithm": "id3"}
CART = {"algorithm": "cart"}
REGRESSION = {"task": "regression"}

CASES: dict[str, Case] = {
    # C4.5 (gain ratio) and ID3: fractional unknown values (NULLs in size, colour and shape
    # spread over the branches: fixed-point histograms from level 1 on)
    "c4.5": Case("label", C45, (MEMORY, SELECT)),
    "c4.5-weight": Case("label", {**C45, "weight": "w"}, (MEMORY, DEEP), depth=4),
    "c4.5-bins": Case("label", {**C45, "max_bins": 8}),
    "c4.5-missing-drop-min-cases": Case("label", {**C45, "missing": "drop", "min_cases": 5}),
    "c4.5-bounded": Case("label", {**C45, "threshold_search": "bounded"}, rows=3000,
                         bounded=True),
    "id3": Case("label", ID3, depth=4),
    "id3-weight-bins": Case("label", {**ID3, "weight": "w", "max_bins": 8}),
    # CART classification: subsets (3 classes, at most 10 values), ordered cuts, unknown side
    "gini": Case("label", CART, depth=4),
    "gini-two-classes": Case("pair", CART),
    "gini-weight": Case("label", {**CART, "weight": "w"}),
    "gini-bins": Case("label", {**CART, "max_bins": 16}, (MEMORY, SCAN, SELECT)),
    "gini-bounded": Case("label", CART, rows=3000, bounded=True),
    "gini-class-weight-leaf": Case("label", {**CART, "class_weight": "balanced",
                                             "min_samples_leaf": 5}),
    "entropy": Case("label", {**CART, "criterion": "entropy"}, depth=4),
    "log_loss-weight-bins": Case("label", {**CART, "criterion": "log_loss", "weight": "w",
                                           "max_bins": 16}, (MEMORY, SCAN)),
    "log_loss-two-classes-bins": Case("pair", {**CART, "criterion": "log_loss",
                                               "max_bins": 12}, (MEMORY, SCAN)),
    # CART regression
    "squared_error": Case("amount", REGRESSION, (MEMORY, SELECT)),
    "squared_error-weight-bins": Case("amount", {**REGRESSION, "weight": "w", "max_bins": 16},
                                      (MEMORY, SCAN)),
    "friedman_mse": Case("amount", {**REGRESSION, "criterion": "friedman_mse",
                                    "min_samples_leaf": 4}),
    "friedman_mse-bins": Case("amount", {**REGRESSION, "criterion": "friedman_mse",
                                         "max_bins": 16}, (MEMORY, SCAN)),
    "poisson": Case("count", {**REGRESSION, "criterion": "poisson"}),
    "poisson-weight-bins": Case("count", {**REGRESSION, "criterion": "poisson", "weight": "w",
                                          "max_bins": 16}, (MEMORY, SCAN)),
}

INTEGER_COLUMNS = {
    "c4.5": ("node", "attr", "candidates", "big_branches"),
    "cart": ("node", "attr", "kind", "o", "cut", "side", "n_unknown", "n_near"),
}
"""Columns that hold whole numbers on every plan (compared as integers, exactly)."""

APPROX: dict[str, dict[str, float]] = {"c4.5": {}, "cart": {}}
"""Columns compared to a relative tolerance instead of exactly, by scorer: none. (Every
column of every case matched to the last bit when this file was written; a column that
legitimately drifts would be listed here with the reason, the others staying exact.)"""


def scorer_of(options: dict[str, Any]) -> str:
    return "cart" if options.get("algorithm") == "cart" or "task" in options else "c4.5"


def columns_of(scorer: str) -> tuple[str, ...]:
    return tuple(C45_COLUMNS if scorer == "c4.5" else CART_COLUMNS)


# -- the spy ------------------------------------------------------------------------------------
@dataclass
class Level:
    """One call of ``score_rows``: the strategy's class, which scorer ran (``"sql"`` over a
    table, ``"numpy"`` over a ``Histogram``), the features' kinds by index, and the rows."""

    strategy: type
    scorer: str
    kinds: dict[int, str]
    rows: list[tuple[Any, ...]]
    search: str = "full"
    """How the level searched its continuous cuts (``LevelStats.search``)."""


def strategy_class(plan: str, name: str) -> type:
    """The class ``algorithms.grow_and_prune`` grows ``name`` (``GrowOptions.strategy_name``)
    with on ``plan``, for data as small as these tables."""
    if plan == MEMORY:
        return MEMORY_STRATEGIES[name]
    if plan == DEEP:
        return DEEP_STRATEGIES[name]
    if plan == SCAN:
        return SCAN_STRATEGIES[name]
    return DEEP_STRATEGIES.get(name, STRATEGIES[name])


@contextmanager
def recording(monkeypatch: pytest.MonkeyPatch, cls: type) -> Iterator[list[Level]]:
    """Record every level's ``score_rows`` of ``cls`` (called through, its rows returned)."""
    levels: list[Level] = []
    real = cls.score_rows

    def spy(self: Any, hist: Any, features: Sequence[Any]) -> Any:
        rows = real(self, hist, features)
        numpy_hist = isinstance(hist, (Histogram, ScanHistogram))
        levels.append(Level(type(self), "numpy" if numpy_hist else "sql",
                            {f.index: f.kind for f in features}, [tuple(r) for r in rows]))
        return rows

    with monkeypatch.context() as m:
        m.setattr(cls, "score_rows", spy)
        yield levels


def train(con: Any, case: Case, plan: str, monkeypatch: pytest.MonkeyPatch
          ) -> tuple[Any, list[Level]]:
    """Train ``case`` on ``plan``, recording every level's score rows."""
    options = {"max_depth": case.depth, **case.options}
    name = GrowOptions(algorithm=options.get("algorithm", "cart"),
                       task=options.get("task", "classification")).strategy_name
    with recording(monkeypatch, strategy_class(plan, name)) as levels, \
            monkeypatch.context() as m, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if plan == DEEP:  # any table is large, and any level's rows are few
            m.setattr(memory_c45, "ENGINE_ONLY_MAX_CELLS", 0)
            m.setattr(memory_c45, "DEEP_MEMORY_MAX_CELLS", 10**9)
        model = sqltree.train("data", case.target, connection=con,
                              plan=TABLES if plan == DEEP else plan,
                              features=list(FEATURES), **options)
    assert model.stats["plan"] == (TABLES if plan == DEEP else plan)
    assert model.stats["memory_from_level"] == (1 if plan == DEEP else None)
    # score_rows runs once per level that has a node to split, from the root down
    assert len(levels) <= len(model.stats["levels"])
    for level, stats in zip(levels, model.stats["levels"]):
        level.search = stats["search"]
    return model, levels


# -- the comparison -----------------------------------------------------------------------------
def choosable(row: dict[str, Any], kind: str) -> bool:
    """Whether ``c45.choose_split`` can choose a C4.5 score row: the rows the numpy scorer
    emits (``memory.c45_scores._Scorer.emit``)."""
    if kind == NOMINAL:
        return row["big_branches"] >= 2 and row["gain"] is not None
    return (row["threshold"] is not None and row["mdl_gain"] is not None
            and row["mdl_gain"] >= J48_SMALL)


def keyed(level: Level, columns: Sequence[str]) -> dict[tuple[int, int], dict[str, Any]]:
    """A level's rows by (node, feature), each a dict of its columns; one row per key."""
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for row in level.rows:
        assert len(row) == len(columns), (row, columns)
        record = dict(zip(columns, row, strict=True))
        key = (int(record["node"]), int(record["attr"]))
        assert key not in out, f"two rows of (node, feature) {key}"
        out[key] = record
    return out


def differences(a: dict[str, Any], b: dict[str, Any], scorer: str) -> list[str]:
    """What differs between two rows of one (node, feature), column by column."""
    out = []
    integers = INTEGER_COLUMNS[scorer]
    for column, x in a.items():
        y = b[column]
        if x is None or y is None:
            if not (x is None and y is None):
                out.append(f"{column}: {x!r} != {y!r}")
            continue
        if column in integers:
            for v in (x, y):
                if not isinstance(v, numbers.Integral) or isinstance(v, bool):
                    out.append(f"{column}: {v!r} is no integer")
            if x != y:
                out.append(f"{column}: {x} != {y}")
            continue
        fx, fy = float(x), float(y)
        if math.isnan(fx) or math.isnan(fy):  # the scorers give NULL, never NaN
            out.append(f"{column}: NaN ({x!r}, {y!r})")
        tolerance = APPROX[scorer].get(column)
        if tolerance is not None:
            if fx != pytest.approx(fy, rel=tolerance, abs=tolerance):
                out.append(f"{column}: {x!r} != {y!r} (rel. tolerance {tolerance})")
        elif fx != fy:
            out.append(f"{column}: {x!r} != {y!r} (difference {fx - fy:.3g}, relative "
                       f"{abs(fx - fy) / max(abs(fx), abs(fy)):.3g})")
    return out


def far_from_best(full: dict[tuple[int, int], dict[str, Any]], kinds: dict[int, str]
                  ) -> set[tuple[int, int]]:
    """The (node, continuous feature) rows of a full scan's CART level that ``choose`` can
    neither take nor count as a tie: their gain is below their node's best less the tie
    tolerance (``CARTStrategy.choose``)."""
    best: dict[int, float] = {}
    for (node, _), row in full.items():
        if row["gain"] is not None:
            best[node] = max(best.get(node, -math.inf), row["gain"])
    return {key for key, row in full.items()
            if kinds[key[1]] == CONTINUOUS
            and (row["gain"] is None or row["gain"] < best[key[0]] - TIE_TOLERANCE)}


def assert_same_rows(reference: list[Level], other: list[Level], scorer: str, plan: str
                     ) -> tuple[int, int]:
    """The levels' rows are the same sets, key by key and column by column; returns the
    number of rows compared exactly, and of those compared as a bound-pruned level's
    losing features (``cart.bounded``)."""
    columns = columns_of(scorer)
    assert len(other) == len(reference), \
        f"{plan}: {len(other)} levels scored, the tables plan {len(reference)}"
    problems: list[str] = []
    compared = relaxed = 0
    for depth, (ref, got) in enumerate(zip(reference, other, strict=True)):
        assert ref.kinds == got.kinds, f"level {depth}: other features scored"
        want, have = keyed(ref, columns), keyed(got, columns)
        if scorer == "c4.5" and got.scorer == "numpy":
            # documented: the numpy scorer leaves out the rows choose_split passes over
            # (memory.c45_scores._Scorer.emit); compare the rest, and check that it did
            # emit choosable rows only
            want = {k: r for k, r in want.items() if choosable(r, ref.kinds[k[1]])}
            unchoosable = [k for k, r in have.items() if not choosable(r, got.kinds[k[1]])]
            assert not unchoosable, f"level {depth}: rows no split can be chosen from"
        if scorer == "cart" and (ref.search == "bounded") != (got.search == "bounded"):
            # documented (cart.bounded): the bound-pruned search scans only the bins that
            # can reach the best cut of the node, so a continuous feature that can be
            # neither chosen nor tied may report a lower best than the full scan (or none):
            # those rows are only checked to be no better than the full scan's; every other
            # row (the chosen, the tied, every nominal one) is compared exactly
            full, pruned = (have, want) if ref.search == "bounded" else (want, have)
            for key in far_from_best(full, ref.kinds):
                scanned, lower = full.pop(key), pruned.pop(key, None)
                relaxed += 1
                if lower is not None and not (
                        scanned["gain"] is not None and lower["gain"] <= scanned["gain"]):
                    problems.append(f"level {depth}, (node, feature) {key}: the bounded "
                                    f"search's best {lower['gain']!r} is above the full "
                                    f"scan's {scanned['gain']!r}")
        if want.keys() != have.keys():
            problems.append(
                f"level {depth}: (node, feature) only on the tables plan "
                f"{sorted(want.keys() - have.keys())[:8]}, only on {plan} "
                f"{sorted(have.keys() - want.keys())[:8]}")
        for key in sorted(want.keys() & have.keys()):
            compared += 1
            for problem in differences(want[key], have[key], scorer):
                problems.append(f"level {depth}, (node, feature) {key}: {problem}")
    assert not problems, (
        f"{plan} scored differently from the tables plan ({len(problems)} differences):\n"
        + "\n".join(problems[:40]))
    return compared, relaxed


def unknown_rows(levels: list[Level], scorer: str) -> int:
    """The rows of (node, feature) pairs with unknown values."""
    columns = columns_of(scorer)
    rows = [dict(zip(columns, row, strict=True)) for level in levels for row in level.rows]
    if scorer == "cart":
        return sum(row["n_unknown"] > 0 for row in rows)
    return sum(row["w_known"] < row["w_all"] for row in rows)


@pytest.fixture(scope="module")
def connections() -> Iterator[dict[int, Any]]:
    """A DuckDB connection per table size, holding the table as ``data``."""
    made: dict[int, Any] = {}
    yield made
    for con in made.values():
        con.close()


def connection(made: dict[int, Any], rows: int) -> Any:
    if rows not in made:
        con = duckdb.connect()
        con.register("frame", table(rows))
        con.execute("CREATE TABLE data AS SELECT * FROM frame")
        con.unregister("frame")
        made[rows] = con
    return made[rows]


@pytest.mark.parametrize("name", list(CASES))
def test_every_levels_score_rows_are_the_same_on_every_plan(name, connections, monkeypatch):
    case = CASES[name]
    scorer = scorer_of(case.options)
    con = connection(connections, case.rows)
    model, reference = train(con, case, TABLES, monkeypatch)
    assert len(reference) >= 2, "too few levels to compare"
    assert {level.scorer for level in reference} == {"sql"}
    assert sum(len(level.rows) for level in reference) > 0
    assert unknown_rows(reference, scorer) > 0  # NULLs: C4.5's fractions, CART's sides
    if case.bounded:  # the bound-pruned search did run, at least at the first levels
        assert model.stats["levels"][0]["search"] == "bounded"
    for plan in case.plans:
        other_model, other = train(con, case, plan, monkeypatch)
        expected = {SELECT: ["sql"] * len(other), DEEP: ["sql"] + ["numpy"] * (len(other) - 1)
                    }.get(plan, ["numpy"] * len(other))
        assert [level.scorer for level in other] == expected, plan
        compared, relaxed = assert_same_rows(reference, other, scorer, plan)
        assert compared > 0
        if scorer == "cart":  # every row, not only the choosable ones
            assert compared + relaxed == sum(len(level.rows) for level in reference)
        assert other_model.text() == model.text()


# -- one histogram, both scorers ----------------------------------------------------------------
DIRECT_CASES = {
    "c4.5": ("label", {"algorithm": "c4.5"}),
    "id3-weight": ("label", {"algorithm": "id3", "weight": "w"}),
    "gini": ("label", {"algorithm": "cart"}),
    "entropy-weight": ("label", {"algorithm": "cart", "criterion": "entropy", "weight": "w"}),
    "squared_error": ("amount", {"task": "regression", "criterion": "squared_error"}),
    "poisson-weight": ("count", {"task": "regression", "criterion": "poisson",
                                 "weight": "w"}),
}


def root_scores(strategy: Any, engine: Any) -> tuple[Any, list[tuple[Any, ...]]]:
    """The root level's histogram and score rows, through the strategy's own stages as the
    grower runs them (``grower._LevelGrower.grow_level``)."""
    features = strategy.data.features
    level = strategy.materialize_level0()
    hist = strategy.materialize_histogram(level, features, 1)
    strategy.on_histogram(engine, hist, 0)
    strategy.read_counts(engine, hist)  # CART resolves its options against the root here
    return hist, [tuple(r) for r in strategy.score_rows(hist, features)]


@pytest.mark.parametrize("name", list(DIRECT_CASES))
def test_the_roots_histogram_scored_in_sql_and_in_numpy(name, monkeypatch):
    """The root level's rows, read once by the tables plan's stages (a histogram table,
    scored by the query) and once by the memory plan's (a ``Histogram``, scored in numpy,
    stacked and a feature at a time): the same rows. The strategies' stages are run by
    hand, as the grower runs them, on one data set description."""
    target, options = DIRECT_CASES[name]
    options = {"algorithm": "cart", **options}
    weight = options.pop("weight", None)
    task = options.get("task", "classification")
    grow = GrowOptions(**options, min_cases=facts(options["algorithm"]).min_cases,
                       threshold_search="full")
    scorer = scorer_of(options)
    engine = DuckDBEngine()
    try:
        data = describe(table(), engine, target, features=list(FEATURES), weight=weight,
                        task=task)
        sql = STRATEGIES[grow.strategy_name](data, grow)
        sql_hist, sql_rows = root_scores(sql, engine)
        memory = MEMORY_STRATEGIES[grow.strategy_name](data, grow)
        hist, stacked_rows = root_scores(memory, engine)
        kinds = {f.index: f.kind for f in data.features}
        if not hist.moments:  # the small level's features of a kind are scored stacked
            assert stacked.stacks(hist, data.features, "cart" if scorer == "cart" else "c4.5")
        with monkeypatch.context() as m:
            m.setattr(stacked, "STACK_CELLS", {})
            alone_rows = [tuple(r) for r in memory.score_rows(hist, data.features)]
        sql.drop(sql_hist)
        sql.close(engine)
    finally:
        engine.cleanup()
    assert sql_rows
    assert {kinds[int(r[1])] for r in sql_rows} == {CONTINUOUS, NOMINAL}
    reference = [Level(type(sql), "sql", kinds, sql_rows)]
    for rows in (stacked_rows, alone_rows):
        compared, relaxed = assert_same_rows(
            reference, [Level(type(memory), "numpy", kinds, rows)], scorer, MEMORY)
        assert compared > 0 and relaxed == 0
