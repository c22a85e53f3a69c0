"""The bound-pruned threshold search (``threshold_search="bounded"``) grows the full scan's
trees, to the last bit, on every engine and on hostile tables."""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from sqlglot import exp

import sqltree
from sqltree.bounded_search import MAX_BOUND_CLASSES
from sqltree.errors import OptionError
from tests.strategies import trained_cases
from tests.test_properties import SPEC, duckdb_with, examples, train


def frame(n_classes: int = 3, rows: int = 900, seed: int = 5) -> pd.DataFrame:
    """Continuous features with many values (so bins hold many cuts), ties, NULLs, a
    nominal feature, and a label that depends on the features with noise."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=rows)
    b = rng.integers(0, 40, rows).astype(float)
    c = np.round(rng.exponential(size=rows), 2)
    d = rng.choice(["p", "q", "r"], rows)
    score = a + b / 15 - c + (d == "q") + rng.normal(scale=0.7, size=rows)
    cuts = np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1])
    out = pd.DataFrame({"a": a, "b b": b, "c": c, "d": d,
                        "label": [f"k{i}" for i in np.searchsorted(cuts, score)]})
    out.loc[rng.random(rows) < 0.04, "a"] = np.nan
    out.loc[rng.random(rows) < 0.02, "c"] = np.nan
    return out


def both(source: Any, searched: str = "bounded",
         **options: Any) -> tuple[sqltree.Model, sqltree.Model]:
    """The full scan's and the bounded search's trees, in the engine (a small DataFrame would
    grow on the memory plan, which searches in numpy); ``searched``: how the bounded side's
    levels must say they searched."""
    options.setdefault("plan", "tables")
    full = sqltree.train(source, "label", algorithm="cart", threshold_search="full", **options)
    bounded = sqltree.train(source, "label", algorithm="cart", threshold_search="bounded",
                            **options)
    assert {level["search"] for level in bounded.stats["levels"]} == {searched}
    return full, bounded


def assert_identical(full: sqltree.Model, bounded: sqltree.Model) -> None:
    """Every field of every node alike: tests, thresholds, counts, impurities, improvements."""
    assert bounded.to_dict()["tree"] == full.to_dict()["tree"], (
        f"{full.text()}\n---\n{bounded.text()}")


@pytest.mark.parametrize(
    "options",
    [
        {"max_depth": 4},
        {"max_depth": 4, "criterion": "entropy", "min_samples_leaf": 7},
        {"max_depth": 4, "class_weight": "balanced"},
        {"max_depth": 4, "max_leaf_nodes": 9, "min_weight_fraction_leaf": 0.01},
    ],
    ids=["gini", "entropy-leaf", "class-weight", "best-first"],
)
def test_same_tree_as_full_scan(options: dict[str, Any]) -> None:
    full, bounded = both(frame(), **options)
    assert_identical(full, bounded)


@pytest.mark.parametrize("n_classes", [2, MAX_BOUND_CLASSES, MAX_BOUND_CLASSES + 1])
def test_same_tree_for_each_class_count(n_classes: int) -> None:
    """Two classes, the most the bound takes, and one more (the full scan's own path)."""
    searched = "bounded" if n_classes <= MAX_BOUND_CLASSES else "full"
    full, bounded = both(frame(n_classes, rows=800), searched, max_depth=3)
    assert_identical(full, bounded)


def test_sample_weights_in_fixed_point() -> None:
    data = frame()
    data["w"] = np.random.default_rng(3).choice([0.5, 1.0, 2.25], len(data))
    full, bounded = both(data, weight="w", max_depth=4)
    assert_identical(full, bounded)


def test_auto_bounds_large_levels_only() -> None:
    """The default search bounds CART's levels on DuckDB while their nodes hold enough values
    to pay, then scans fully for good: the same tree as the full scan either way."""
    full = sqltree.train(frame(rows=3000), "label", algorithm="cart", max_depth=5,
                         plan="tables", threshold_search="full")
    auto = sqltree.train(frame(rows=3000), "label", algorithm="cart", max_depth=5,
                         plan="tables")
    assert_identical(full, auto)
    searched = [level["search"] for level in auto.stats["levels"]]
    assert searched[0] == "bounded" and searched[-1] == "full", searched
    assert searched == sorted(searched), searched  # "bounded" levels, then "full" ones
    in_memory = sqltree.train(frame(rows=3000), "label", algorithm="cart", max_depth=5)
    assert in_memory.stats["plan"] == "memory"
    assert {level["search"] for level in in_memory.stats["levels"]} == {"full"}


def test_select_plan() -> None:
    import duckdb

    con = duckdb.connect()
    con.register("frame_view", frame())
    con.execute("CREATE TABLE t AS SELECT * FROM frame_view")
    options = {"connection": con, "algorithm": "cart", "max_depth": 4}
    full = sqltree.train("t", "label", threshold_search="full", plan="tables", **options)
    bounded = sqltree.train("t", "label", threshold_search="bounded", plan="select", **options)
    assert_identical(full, bounded)


def test_on_every_engine(engine_factory: Any) -> None:
    """The bounded search in each engine grows the full scan's tree, to the last bit. The
    full scan runs in DuckDB only: every engine grows DuckDB's model, counts, impurities and
    improvements alike (tests/test_determinism.py), so one full scan serves every engine."""
    engine, source = engine_factory(frame(rows=600), "bounded")
    bounded = sqltree.train(source.copy(), "label", connection=engine, algorithm="cart",
                            max_depth=2, threshold_search="bounded")
    full = sqltree.train(frame(rows=600), "label", algorithm="cart", max_depth=2,
                         plan="tables", threshold_search="full")
    assert_identical(full, bounded)


def binned_histogram(counts: bool) -> tuple[Any, Any, Any, Any, Any]:
    """A 3,000-row ``frame`` in DuckDB: its engine, description, 64 quantile edges per
    continuous feature, level 0 and its histogram with bins."""
    import duckdb

    from sqltree.dataset import describe
    from sqltree.engines.duckdb import DuckDBEngine
    from sqltree.quantiles import bin_edges
    from sqltree.queries import build_histogram, build_level0

    con = duckdb.connect()
    con.register("frame_view", frame(rows=3000))
    con.execute("CREATE TABLE t AS SELECT * FROM frame_view")
    engine = DuckDBEngine(con)
    data = describe("t", engine, "label")
    edges = bin_edges(data, 64)
    assert edges is not None
    level = engine.materialize("level", build_level0(data))
    hist = engine.materialize("hist", build_histogram(
        level, data.features, 3, counts=counts, search_bins=edges, lookup=True))
    return engine, data, edges, level, hist


def test_fewer_candidates_same_best() -> None:
    """The bounded search scores far fewer continuous cuts than there are, and the scoring
    query's best candidate is the full scan's."""
    from sqltree.algorithms.cart import scores
    from sqltree.sqlexpr import with_materialized

    engine, data, edges, _level, hist = binned_histogram(counts=True)

    def count(candidates: Any, ctes: list[Any]) -> int:
        query = exp.select(exp.func("COUNT", exp.Star())).from_(candidates.subquery("c"))
        (n,), = engine.execute(with_materialized(query, ctes))
        return int(n)

    captured: list[tuple[Any, list[Any]]] = []

    def capture(build: Any, ctes_at: int) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = build(*args, **kwargs)
            ctes = kwargs["ctes"] if "ctes" in kwargs else args[ctes_at]
            captured.append((out.copy(), list(ctes)))
            return out
        return wrapped

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scores, "_continuous_candidates", capture(scores._continuous_candidates, 9))
        patch.setattr(scores, "bounded_continuous", capture(scores.bounded_continuous, 99))
        for edges_or_none in (None, edges):
            scores.build_cart_scores(hist, data.features, 3, search_edges=edges_or_none)
    every, bounded = (count(candidates, ctes) for candidates, ctes in captured)
    assert bounded < every / 2, (bounded, every)
    rows = [[scores.CARTScoreRow._make(r) for r in engine.execute(
        scores.build_cart_scores(hist, data.features, 3, ordered_scan=True, search_edges=e))]
        for e in (None, edges)]
    assert max(rows[1], key=lambda r: r.gain) == max(rows[0], key=lambda r: r.gain)


@pytest.mark.parametrize("value", ["fast", None, 1])
def test_bad_option(value: Any) -> None:
    with pytest.raises(OptionError, match="threshold_search"):
        sqltree.train(frame(rows=50), "label", algorithm="cart", threshold_search=value)


def full_and_bounded(table: Any, opts: dict[str, Any]) -> tuple[Any, Any]:
    """A hostile table's exact trees by the full scan and by the bounded search, in DuckDB."""
    opts = {k: v for k, v in opts.items() if k != "max_bins"}
    with contextlib.closing(duckdb_with(table)) as con, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = train(table, {**opts, "threshold_search": "full"}, con)
        bounded = train(table, {**opts, "threshold_search": "bounded"}, con)
    return full, bounded


@given(case=trained_cases(dataclasses.replace(SPEC, max_rows=150), algorithm="cart"))
@settings(max_examples=examples(5),
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_hostile_tables(case: tuple[Any, dict[str, Any]]) -> None:
    assert_identical(*full_and_bounded(*case))


# -- C4.5 and ID3 ---------------------------------------------------------------------------------
@pytest.fixture
def bound_every_level(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bound every level, however few values its nodes hold (small tables would scan fully);
    the list holds, per bounded scoring query built, its number of close features."""
    from sqltree.algorithms.c45 import scores as c45_scores

    monkeypatch.setattr("sqltree.algorithms.c45.strategy.MIN_GROUP_VALUES", 0)
    built: list[int] = []
    real = c45_scores.bounded_best_cuts

    def counted(*args: Any, **kwargs: Any) -> Any:
        close = args[6] if len(args) > 6 else kwargs.get("close")
        built.append(len(close.attrs) if close else 0)
        return real(*args, **kwargs)

    monkeypatch.setattr(c45_scores, "bounded_best_cuts", counted)
    return built


def assert_same_model(full: sqltree.Model, bounded: sqltree.Model) -> None:
    """The whole model file alike but for the option asked and the run's own statistics."""
    def comparable(model: sqltree.Model) -> dict[str, Any]:
        out = model.to_dict()
        out["options"] = {k: v for k, v in out["options"].items() if k != "threshold_search"}
        out["stats"] = {"pruning": out["stats"].get("pruning")}
        return out
    assert comparable(bounded) == comparable(full), f"{full.text()}\n---\n{bounded.text()}"


def both_c45(source: Any, **options: Any) -> tuple[sqltree.Model, sqltree.Model]:
    options.setdefault("plan", "tables")  # a small DataFrame would otherwise grow in memory
    full = sqltree.train(source, "label", threshold_search="full", **options)
    bounded = sqltree.train(source, "label", threshold_search="bounded", **options)
    return full, bounded


def close_values(rows: int = 400, seed: int = 2) -> pd.DataFrame:
    """``frame`` with a feature whose values lie in clusters of up to four, 1e-6 apart (J48
    cuts not between them), more values than bins: bins hold close values."""
    data = frame(rows=rows, seed=seed)
    rng = np.random.default_rng(seed)
    data["e"] = rng.integers(0, 60, rows) + rng.integers(0, 4, rows) * 1e-6
    return data


@pytest.mark.parametrize(
    "options",
    [
        {"max_depth": 3, "weight": "w"},
        {"max_depth": 3, "algorithm": "id3", "min_cases": 9, "missing": "drop"},
    ],
    ids=["j48-weights", "id3-min-cases-drop"],
)
def test_c45_same_model_as_full_scan(options: dict[str, Any],
                                     bound_every_level: list[int]) -> None:
    """J48's rules: fractional unknowns (the frame's NULLs) and weights in fixed point, its
    minimum split weight, MDL; features with values closer than 1e-5 (J48's, not ID3's) are
    bounded too."""
    data = close_values()
    data["w"] = np.random.default_rng(4).choice([0.5, 1.0, 2.25], len(data))
    full, bounded = both_c45(data, **options)
    assert_same_model(full, bounded)
    assert bound_every_level
    assert set(bound_every_level) == ({0} if options.get("algorithm") == "id3" else {2})


def test_c45_most_classes(bound_every_level: list[int]) -> None:
    """The most classes the bound takes (2 and 3 are the other tests')."""
    full, bounded = both_c45(frame(MAX_BOUND_CLASSES, rows=300), max_depth=2)
    assert_same_model(full, bounded)
    assert bound_every_level


def test_c45_scoring_rows_are_the_full_scans() -> None:
    """The scoring rows, MDL counts of valid cuts included, are the full scan's; the normal
    feature's values closer than 1e-5 are taken off the count of the bins left unscanned."""
    from sqltree.algorithms.c45 import scores as c45_scores
    from sqltree.algorithms.c45.bounded import CloseValues, build_close_values, close_features
    from sqltree.algorithms.c45.cuts import build_distinct_values
    from sqltree.algorithms.c45.strategy import score_options
    from sqltree.grower import GrowOptions

    engine, data, edges, _level, hist = binned_histogram(counts=False)
    values = engine.materialize("values", build_distinct_values(hist, data.features))
    table = engine.materialize("close", build_close_values(values, sorted(edges), 1e-5))
    close = CloseValues(table, tuple(a for a, in engine.execute(close_features(table))))
    assert close.attrs == (0,)  # the normal feature has values closer than 1e-5
    options = dataclasses.replace(score_options(GrowOptions()), ordered_scan=True,
                                  fractional=False)
    rows = [sorted(engine.execute(c45_scores.build_split_scores(
        hist, data.features, 3, options, e, c))) for e, c in
        ((None, None), (edges, close), (edges, None))]
    assert rows[1] == rows[0]
    assert next(r[8] for r in rows[1] if r[1] == 2) > 100  # feature c: many valid cuts
    # without the close pairs, bins left unscanned would count cuts J48 does not make
    assert [r[8] for r in rows[2] if r[1] == 0] > [r[8] for r in rows[0] if r[1] == 0]


def test_c45_close_values_scored_as_the_full_scan(bound_every_level: list[int]) -> None:
    """Clusters of values that are close only in double rounding, at the largest magnitudes
    where J48's 1e-5 still separates doubles (2**36: 1.5e-5 apart, below 2**36: 7.6e-6),
    across zero and with negative values: every level's scoring rows, valid cuts counted, are
    the full scan's."""
    from sqltree.algorithms.c45.strategy import C45Strategy

    rng = np.random.default_rng(7)
    data = close_values(rows=400, seed=7)
    base = rng.choice([-(2.0**36), 2.0**36 - 2**-14, 0.0, 5.0, 2.0**37], len(data))
    data["e"] = base + rng.integers(0, 40, len(data)) * 1e-3 + rng.integers(0, 3, len(data)) * (
        np.spacing(np.abs(base)) + 1e-7 * (base == 0))
    scored: dict[str, list[Any]] = {"full": [], "bounded": []}
    real = C45Strategy.score_rows

    def recorded(self: Any, hist: Any, features: Any) -> Any:
        rows = real(self, hist, features)
        scored[self.options.threshold_search].append(sorted(map(tuple, rows)))
        return rows

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(C45Strategy, "score_rows", recorded)
        full, bounded = both_c45(data, max_depth=3)
    assert scored["bounded"] == scored["full"]
    assert_same_model(full, bounded)
    assert bound_every_level and all(bound_every_level)


def test_c45_on_every_engine(engine_factory: Any, bound_every_level: list[int]) -> None:
    engine, source = engine_factory(close_values(rows=300), "bounded45")
    bounded = sqltree.train(source.copy(), "label", connection=engine, max_depth=2,
                            threshold_search="bounded")
    reference = sqltree.train(close_values(rows=300), "label", max_depth=2)
    assert bounded.to_dict()["tree"] == reference.to_dict()["tree"]
    # engines without MATERIALIZED CTEs (Spark) would compute the query's CTEs at each use,
    # and keep the full scan
    assert bool(bound_every_level) == engine.SUPPORTS_MATERIALIZED_CTE
    assert all(bound_every_level)  # with the close-valued feature
    if engine.SUPPORTS_MATERIALIZED_CTE:
        full = sqltree.train(source.copy(), "label", connection=engine, max_depth=2,
                             threshold_search="full")
        assert_same_model(full, bounded)


@given(case=trained_cases(dataclasses.replace(SPEC, max_rows=150), algorithm="c4.5"))
@settings(max_examples=examples(3),
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_c45_hostile_tables(case: tuple[Any, dict[str, Any]], bound_every_level: list[int]) -> None:
    assert_same_model(*full_and_bounded(*case))


def test_estimators_take_threshold_search() -> None:
    from sqltree.estimator import C45Classifier, DecisionTreeClassifier

    data = frame(rows=120)
    fitted = C45Classifier(max_depth=2, threshold_search="bounded").fit(
        data[["a", "c"]].fillna(0.0), data["label"])
    assert fitted.model_.to_dict()["options"]["threshold_search"] == "bounded"
    cart = DecisionTreeClassifier(threshold_search="bounded")
    assert cart._cart_options()["threshold_search"] == "bounded"


@pytest.mark.parametrize(("algorithm", "full_marked"), [("cart", True), ("c4.5", False)])
def test_the_bounded_statements_are_marked_to_run_without_nested_loops(
    algorithm: str, full_marked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bounded search's scoring statements carry the mark that keeps PostgreSQL from
    nested loops over their misjudged joins, and so do CART's full-scan ones, whose candidates
    meet their nodes' totals in the same join; C4.5's full scan is planned well unmarked."""
    from sqltree.engines.duckdb import DuckDBEngine
    from sqltree.sqlexpr import WITHOUT_NESTED_LOOPS

    marked: dict[str, int] = {}
    execute = DuckDBEngine.execute

    def spy(self: Any, query: exp.Expression) -> Any:
        if query.meta.get(WITHOUT_NESTED_LOOPS):
            marked[search] += 1
        return execute(self, query)

    monkeypatch.setattr(DuckDBEngine, "execute", spy)
    for search in ("bounded", "full"):
        marked[search] = 0
        sqltree.train(frame(rows=3000), "label", algorithm=algorithm, max_depth=2,
                      plan="tables", threshold_search=search)
    assert marked["bounded"] >= 1
    assert (marked["full"] > 0) == full_marked


@pytest.mark.postgres
def test_postgres_runs_a_marked_statement_without_nested_loops(postgres_url: str) -> None:
    """Left to its estimates, PostgreSQL re-read the histogram once per bounded candidate in
    nested loops: a C4.5 level of 30,000 rows took 84.6 s instead of 3.1 s
    (benchmarks/README.md). A marked statement runs with ``enable_nestloop`` off, for that
    statement only."""
    from sqltree.engines.postgres import PostgresEngine
    from sqltree.sqlexpr import without_nested_loops

    engine = PostgresEngine.connect(postgres_url)
    try:
        def setting() -> exp.Select:
            return exp.select(exp.func("current_setting", exp.Literal.string("enable_nestloop")))

        assert engine.execute(without_nested_loops(setting())) == [("off",)]
        assert engine.execute(setting()) == [("on",)]
    finally:
        engine.close()
