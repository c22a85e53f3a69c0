"""Ensembles compiled to SQL agree with ``Ensemble.predict_frame`` on every engine.

Random forests and boosting models (every link, float32 sums, categorical tests, NULLs going
either way) are scored by ``Ensemble.predict`` on DuckDB, PostgreSQL, Spark and SQLite and
compared row by row with the numpy walk; 2,000 trees of depth 8 run on each engine; every
sqlglot dialect writes the SQL. A forest's tree is walked once per row where arrays are indexed
and adds the same numbers as a walk per class.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest
import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialects

from sqltree.ensemble import Ensemble, TreeArrays
from sqltree.ensemble.compile import (
    MAX_TREES_PER_STEP,
    SORT_MIN_TREES,
    SORTED_ROWS,
)
from sqltree.errors import OptionError
from sqltree.model import FeatureInfo

from .conftest import ENGINES, SQLITE

ALL_ENGINES = [*ENGINES, SQLITE]
CATS = ("a", "b", "it's", "D")


def random_tree(rng, n_features, depth, n_values, *, nominal=(), p_split=0.8, output=None,
                grid=None):
    feature, threshold, left, right, ml, value, cats = [], [], [], [], [], [], {}

    def new():
        feature.append(-1)
        threshold.append(0.0)
        left.append(-1)
        right.append(-1)
        ml.append(False)
        value.append(rng.normal(size=n_values).tolist())
        return len(feature) - 1

    stack = [(new(), 0)]
    while stack:
        node, d = stack.pop()
        if d < depth and (d < 1 or rng.random() < p_split):
            f = int(rng.integers(n_features))
            feature[node] = f
            if f in nominal:
                k = int(rng.integers(1, len(CATS)))
                cats[node] = tuple(rng.choice(CATS, k, replace=False).tolist())
            elif grid is not None:
                threshold[node] = float(rng.choice(grid))
            else:
                threshold[node] = float(np.round(rng.normal(), int(rng.integers(1, 4))))
            ml[node] = bool(rng.random() < 0.5)
            a, b = new(), new()
            left[node], right[node] = a, b
            stack += [(a, d + 1), (b, d + 1)]
    n = len(feature)
    return TreeArrays(feature=feature, threshold=threshold, left=left, right=right,
                      missing_left=ml, value=value, weight=np.ones(n), gain=np.zeros(n),
                      categories=cats, output=output)


def features(n, nominal=()):
    return [FeatureInfo(name=f"c'{i}" if i in nominal else f"x {i}",
                        kind="nominal" if i in nominal else "continuous",
                        sql_type="VARCHAR" if i in nominal else "DOUBLE") for i in range(n)]


def frame(rng, n_rows, n_features, nominal=()):
    data = {"rid": np.arange(n_rows)}
    for i in range(n_features):
        if i in nominal:
            v = pd.Series(rng.choice([*CATS, "unseen"], n_rows), dtype=object)
            v[rng.random(n_rows) < 0.1] = None
            data[f"c'{i}"] = v
        else:
            # values on the thresholds' grid too, so that ties with a threshold are tested
            v = pd.Series(np.round(rng.normal(size=n_rows), int(rng.integers(1, 4))))
            v[rng.random(n_rows) < 0.1] = np.nan
            data[f"x {i}"] = v
    return pd.DataFrame(data)


def ensemble(kind: str, rng, n_trees: int = 12, depth: int = 5) -> Ensemble:
    nominal = (2,)
    n = 4
    if kind == "forest":
        trees = [random_tree(rng, n, depth, 3, nominal=nominal) for _ in range(n_trees)]
        for t in trees:
            v = np.abs(t.value)
            t.value = v / v.sum(axis=1, keepdims=True)
        return Ensemble(trees=trees, features=features(n, nominal), target="y",
                        classes=["no", "yes", "it's"], aggregation="mean")
    if kind == "forest_regression":
        trees = [random_tree(rng, n, depth, 1, nominal=nominal) for _ in range(n_trees)]
        return Ensemble(trees=trees, features=features(n, nominal), target="y",
                        task="regression", aggregation="mean")
    if kind in ("sigmoid", "sigmoid32"):
        trees = [random_tree(rng, n, depth, 1, nominal=nominal) for _ in range(n_trees)]
        f32 = kind == "sigmoid32"
        if f32:
            for t in trees:
                t.value = t.value.astype(np.float32).astype(np.float64)
        return Ensemble(trees=trees, features=features(n, nominal), target="y",
                        classes=[0, 1], aggregation="sum", base_score=[0.25], link="sigmoid",
                        precision="float32" if f32 else "double")
    if kind in ("softmax", "softmax32"):
        trees = [random_tree(rng, n, depth, 1, nominal=nominal, output=i % 3)
                 for i in range(n_trees)]
        return Ensemble(trees=trees, features=features(n, nominal), target="y",
                        classes=["a", "b", "c"], aggregation="sum",
                        base_score=[0.1, -0.2, 0.0], link="softmax",
                        precision="float32" if kind == "softmax32" else "double")
    if kind == "exp":
        trees = [random_tree(rng, n, depth, 1, nominal=nominal) for _ in range(n_trees)]
        for t in trees:
            t.value *= 0.1
        return Ensemble(trees=trees, features=features(n, nominal), target="y",
                        task="regression", aggregation="sum", base_score=[0.5], link="exp")
    raise AssertionError(kind)


KINDS = ["forest", "forest_regression", "sigmoid", "sigmoid32", "softmax", "softmax32", "exp"]


def check_scores(model: Ensemble, got: pd.DataFrame, data: pd.DataFrame, *,
                 rtol: float = 1e-12) -> None:
    got = got.sort_values("rid").reset_index(drop=True)
    if model.is_regression:
        np.testing.assert_allclose(got["prediction"].to_numpy(dtype=float),
                                   model.predict_frame(data), rtol=rtol, atol=0)
        return
    names = [f"proba_{c}" for c in model.classes]
    np.testing.assert_allclose(got[names].to_numpy(dtype=float),
                               model.predict_proba_frame(data), rtol=rtol, atol=1e-300)
    want = model.predict_frame(data)
    assert [str(v) for v in got["prediction"]] == [str(v) for v in want]


@pytest.mark.parametrize("engine_factory", ALL_ENGINES, indirect=True)
@pytest.mark.parametrize("kind", KINDS)
def test_every_row_as_numpy(engine_factory, kind):
    rng = np.random.default_rng(KINDS.index(kind))
    model = ensemble(kind, rng)
    model.validate()
    data = frame(rng, 400, 4, nominal=(2,))
    engine, source = engine_factory(data, "scored")
    got = model.predict(source, connection=engine, proba=not model.is_regression)
    check_scores(model, got, data)


@pytest.mark.parametrize("engine_factory", ALL_ENGINES, indirect=True)
def test_two_thousand_trees_of_depth_eight(engine_factory):
    rng = np.random.default_rng(8)
    grid = np.round(np.linspace(-2, 2, 64), 3)  # shared thresholds, as histogram learners make
    trees = [random_tree(rng, 4, 8, 1, p_split=0.45, grid=grid, output=i % 2)
             for i in range(2000)]
    for t in trees:
        t.value *= 0.05
    assert max(t.depth for t in trees) == 8
    model = Ensemble(trees=trees, features=features(4), target="y", classes=["a", "b"],
                     aggregation="sum", base_score=[0.0, 0.0], link="softmax")
    data = frame(rng, 200, 4)
    engine, source = engine_factory(data, "many")
    got = model.predict(source, connection=engine, proba=True)
    check_scores(model, got, data)


def test_steps_hold_a_bounded_number_of_trees():
    rng = np.random.default_rng(3)
    model = ensemble("sigmoid", rng, n_trees=3 * MAX_TREES_PER_STEP + 1, depth=3)
    sql = model.to_sql("duckdb", table="t")
    assert sql.count('"__sqltree_sum') >= 4


def test_each_threshold_compared_once():
    rng = np.random.default_rng(4)
    grid = [-1.0, 0.5, 2.25]
    trees = [random_tree(rng, 2, 4, 1, grid=grid) for _ in range(30)]
    model = Ensemble(trees=trees, features=features(2), target="y", task="regression",
                     aggregation="mean")
    sql = model.to_sql("duckdb", table="t")
    for name in ("x 0", "x 1"):
        for t in grid:  # once, in the bins; the trees compare bin numbers
            assert sql.count(f'"{name}" <= {t!r}') == 1


@pytest.mark.parametrize("dialect", [d.value for d in Dialects if d.value])
def test_every_dialect_writes_it(dialect):
    rng = np.random.default_rng(5)
    model = ensemble("softmax", rng, n_trees=6, depth=3)
    try:
        sql = model.to_sql(dialect, table="events", proba=True)
    except sqlglot.errors.UnsupportedError as e:  # pragma: no cover - reported, not hidden
        pytest.fail(f"{dialect}: {e}")
    assert "__sqltree_bins" in sql


def test_report_gives_form_reason_and_length():
    rng = np.random.default_rng(6)
    model = ensemble("forest", rng)
    report: dict = {}
    sql = model.to_sql("duckdb", table="t", report=report)
    assert report["form"] == "expression"
    assert report["characters"] == len(sql)
    assert report["bytes_per_leaf"] == round(len(sql.encode()) / model.n_leaves, 2)
    assert "leaves" in report["reason"]


def numeric_only(model: Ensemble) -> Ensemble:
    """The model with its categorical tests made numeric (the table form holds only those)."""
    for t in model.trees:
        t.categories.clear()
        t.feature[t.feature == 2] = 1
        t.threshold[(t.feature == 1) & (t.threshold == 0)] = 0.5
    return model


@pytest.mark.parametrize("engine_factory", [pytest.param("duckdb", id="duckdb"), SQLITE],
                         indirect=True)
@pytest.mark.parametrize("kind", ["forest_regression", "sigmoid", "softmax"])
def test_table_form_agrees(engine_factory, kind):
    rng = np.random.default_rng(7)
    model = numeric_only(ensemble(kind, rng))
    data = frame(rng, 300, 4, nominal=(2,))
    engine, source = engine_factory(data, "boxes")
    got = model.predict(source, connection=engine, proba=not model.is_regression,
                        form="table")
    # the engine adds the leaves in its own order
    check_scores(model, got, data, rtol=1e-12)


@pytest.mark.parametrize("engine_factory", [pytest.param("duckdb", id="duckdb"), SQLITE],
                         indirect=True)
@pytest.mark.parametrize("form", ["table", "expression"])
@pytest.mark.parametrize(("kind", "proba"), [
    ("forest", False), ("forest", True), ("forest_regression", False), ("sigmoid", True),
    ("softmax", False), ("softmax", True),
])
def test_predict_returns_the_rows_in_the_source_order(engine_factory, form, kind, proba):
    rng = np.random.default_rng(11)
    model = numeric_only(ensemble(kind, rng))
    # enough rows that DuckDB's threads return the table form's join out of order unsorted
    data = frame(rng, 5000, 4, nominal=(2,)).sample(frac=1.0, random_state=1)
    engine, source = engine_factory(data.reset_index(drop=True), "ordered")
    report: dict = {}
    model.to_sql("duckdb", form=form, report=report)
    assert report["form"] == form
    got = model.predict(source, connection=engine, proba=proba, form=form)
    assert got is not None
    assert got["rid"].tolist() == data["rid"].tolist()
    if model.is_regression:
        np.testing.assert_allclose(got["prediction"].to_numpy(dtype=float),
                                   model.predict_frame(data), rtol=1e-12, atol=0)
        return
    assert [str(v) for v in got["prediction"]] == [str(v) for v in model.predict_frame(data)]
    if proba:
        names = [f"proba_{c}" for c in model.classes]
        np.testing.assert_allclose(got[names].to_numpy(dtype=float),
                                   model.predict_proba_frame(data), rtol=1e-12, atol=1e-300)


def test_table_form_refuses_categorical_tests():
    model = ensemble("forest", np.random.default_rng(1))
    with pytest.raises(OptionError, match="numeric tests only"):
        model.to_sql("duckdb", table="t", form="table")


def test_output_names_that_clash_are_refused():
    model = ensemble("forest", np.random.default_rng(2))
    with pytest.raises(Exception, match="already has columns"):
        model.to_sql("duckdb", table="t", columns=["prediction"])


def forest_of_distinct_tests(rng, n_trees: int = 12) -> Ensemble:
    """A 3-class forest whose roots test a number and whose thresholds are all distinct (a
    random forest's: no bins, each test written where the tree makes it)."""
    model = ensemble("forest", rng, n_trees=n_trees)
    for t in model.trees:
        if t.feature[0] == 2:
            t.categories.pop(0)
            t.feature[0] = 0
        numeric = ~t.is_leaf & ~np.isin(np.arange(t.n_nodes), list(t.categories))
        t.threshold[numeric] = rng.normal(size=int(numeric.sum()))
    model.validate()
    return model


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "spark"])
def test_a_forest_walks_each_tree_once(dialect):
    model = forest_of_distinct_tests(np.random.default_rng(12))
    sql = model.to_sql(dialect, table="t", proba=True)
    for t in model.trees:
        assert sql.count(repr(abs(float(t.threshold[0])))) == 1


def test_a_forest_walks_each_tree_per_class_without_arrays():
    model = forest_of_distinct_tests(np.random.default_rng(12))
    query = model.scoring_query(exp.Table(this=exp.to_identifier("t")), proba=True)
    sql = query.sql("duckdb")  # built without a dialect: no arrays
    for t in model.trees:
        assert sql.count(repr(abs(float(t.threshold[0])))) == len(model.classes)


@pytest.mark.parametrize("engine_factory", ALL_ENGINES, indirect=True)
def test_a_forest_walked_once_scores_as_numpy(engine_factory):
    rng = np.random.default_rng(13)
    model = forest_of_distinct_tests(rng)
    data = frame(rng, 500, 4, nominal=(2,))
    assert data.drop(columns="rid").isna().any().all()  # NULLs in every feature
    engine, source = engine_factory(data, "walked")
    got = model.predict(source, connection=engine, proba=True, raw=True)
    check_scores(model, got, data)
    # the same numbers as a walk per class, on the engine
    per_class = engine.frame(model.scoring_query(source, [*data.columns], proba=True, raw=True))
    names = [*(f"proba_{c}" for c in model.classes), "raw_0", "raw_1", "raw_2"]
    got, per_class = (f.sort_values("rid").reset_index(drop=True) for f in (got, per_class))
    np.testing.assert_array_equal(got[names].to_numpy(dtype=float),
                                  per_class[names].to_numpy(dtype=float))
    # doubles, bit for bit (PostgreSQL's NUMERIC literals are cast to DOUBLE once a tree)
    np.testing.assert_array_equal(got[["raw_0", "raw_1", "raw_2"]].to_numpy(dtype=float),
                                  model.raw_frame(data))


@pytest.mark.parametrize("kind", ["softmax", "softmax32", "forest"])
def test_rows_sorted_by_the_first_trees_leaves_score_the_same(kind):
    rng = np.random.default_rng(15)
    model = ensemble(kind, rng, n_trees=SORT_MIN_TREES)
    data = frame(rng, 600, 4, nominal=(2,)).sample(frac=1.0, random_state=0)
    sql = model.to_sql("duckdb", table="t", columns=["rid"], proba=True, raw=True)
    assert "ORDER BY" in sql and '"__sqltree_sorted"' in sql
    fewer = Ensemble(**{**vars(model), "trees": model.trees[:SORT_MIN_TREES - 1]})
    assert "ORDER BY" not in fewer.to_sql("duckdb", table="t")  # too few trees to pay
    con = duckdb.connect()
    con.register("t", data)
    sorted_rows = con.execute(sql).df().sort_values("rid").reset_index(drop=True)
    # a query built without a dialect neither sorts nor reads arrays: the same doubles
    plain = con.execute(model.scoring_query(exp.to_table("t"), ["rid"], proba=True, raw=True)
                        .sql("duckdb")).df().sort_values("rid").reset_index(drop=True)
    pd.testing.assert_frame_equal(sorted_rows, plain)
    check_scores(model, sorted_rows, data.sort_values("rid"))
    # predict gives the source's order back
    got = model.predict(data, proba=True)
    assert got["rid"].tolist() == data["rid"].tolist()


@pytest.mark.parametrize("engine_factory", ENGINES, indirect=True)
@pytest.mark.parametrize("precision", ["double", "float32"])
def test_a_forest_walked_once_adds_as_a_walk_per_class(engine_factory, precision):
    rng = np.random.default_rng(14)
    model = forest_of_distinct_tests(rng, n_trees=MAX_TREES_PER_STEP + 6)  # two batches
    model.trees[3] = TreeArrays(feature=[-1], threshold=[0.0], left=[-1], right=[-1],
                                missing_left=[False], value=[[0.2, 0.3, 0.5]],
                                weight=[1.0], gain=[0.0])
    model.trees[4].value[:] = [0.1, 0.1, 0.8]  # every leaf the same
    model.precision = precision
    data = frame(rng, 300, 4, nominal=(2,))
    engine, source = engine_factory(data, "walked")
    sql = model.to_sql(engine.dialect, table="t", proba=True)
    q = "`" if engine.dialect == "spark" else '"'  # the dialect's quote of an identifier
    # trees 3 and 4 are constants (no walk); tree 5 is walked once and read per class (and,
    # where rows are sorted by the first trees' leaves, sorts them)
    assert sql.count(f"{q}__sqltree_leaf3{q}") == sql.count(f"{q}__sqltree_leaf4{q}") == 0
    assert sql.count(f"{q}__sqltree_leaf5{q}") == 1 + len(model.classes) + (
        engine.dialect in SORTED_ROWS)
    assert f"{q}__sqltree_walk1{q}" in sql
    names = [*(f"proba_{c}" for c in model.classes), "raw_0", "raw_1", "raw_2"]
    got, per_class = (
        f.sort_values("rid").reset_index(drop=True)[names].to_numpy(dtype=float)
        for f in (model.predict(source, connection=engine, proba=True, raw=True),
                  engine.frame(model.scoring_query(source, [*data.columns], proba=True,
                                                   raw=True))))
    np.testing.assert_array_equal(got, per_class)
