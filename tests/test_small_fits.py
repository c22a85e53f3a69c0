"""Small fits without their fixed costs, and the same trees: a DataFrame's reads made in numpy
(``dataset.frame_facts``, ``frame_level0``, ``quantiles.bin_edges``) and a small level's
features scored stacked (``algorithms.memory.stacked``), each against what it replaces."""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn import datasets

import sqltree
from sqltree import dataset, queries
from sqltree.algorithms import memory
from sqltree.algorithms.memory import c45 as memory_c45
from sqltree.algorithms.memory import stacked
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.quantiles import bin_edges


def _mixed(seed: int = 2) -> pd.DataFrame:
    """Wine's first columns with unknown values, and nominal columns of every kind the
    numpy reads take (text objects with None and NaN, pandas strings, categories, integers,
    booleans), a float32 column, three text classes and two weight columns."""
    rng = np.random.default_rng(seed)
    X, y = datasets.load_wine(return_X_y=True)
    frame = pd.DataFrame(X[:, :6], columns=[f"c{i}" for i in range(6)])
    frame.loc[rng.random(len(frame)) < 0.1, "c1"] = np.nan
    frame["n1"] = rng.choice(["a", "b", "c", "d"], len(frame)).astype(object)
    frame["n2"] = pd.Series(rng.choice(["x", "y", "z", None], len(frame)), dtype=object)
    frame.loc[5, "n2"] = np.nan
    frame["cat"] = pd.Categorical(rng.choice(["k", "l"], len(frame)))
    frame["s"] = pd.array(rng.choice(["m", "n", None], len(frame)), dtype="string")
    frame["i"] = rng.integers(-3, 3, len(frame))
    frame["b"] = rng.random(len(frame)) < 0.5
    frame["f32"] = rng.normal(size=len(frame)).astype(np.float32)
    frame["y"] = np.array(["p", "q", "r"], dtype=object)[y]
    frame["w"] = rng.integers(0, 4, len(frame)).astype(float)
    frame["wf"] = rng.random(len(frame))
    return frame


def _described(frame: pd.DataFrame, target: str, numpy: bool, **roles: Any) -> Any:
    """``describe``'s Dataset (as comparable fields) or its error, with the frame read in
    numpy or by the engine only."""
    engine = DuckDBEngine()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if numpy:
                data = dataset.describe(frame, engine, target, **roles)
            else:
                with pytest.MonkeyPatch.context() as m:
                    m.setattr(dataset, "FRAME_MAX_CELLS", 0)
                    data = dataset.describe(frame, engine, target, **roles)
    except Exception as error:  # the error is what is compared
        return type(error).__name__, str(error)
    finally:
        engine.cleanup()
    fields = {k: v for k, v in vars(data).items() if k not in ("engine", "relation", "frame")}
    fields["features"] = [(f.name, f.kind, f.index, f.sql_type, [(type(v), v) for v in f.values])
                          for f in data.features]
    fields["classes"] = [(type(c), c) for c in data.classes]
    return fields, [str(w.message) for w in caught]


def _changed(frame: pd.DataFrame, **columns: Any) -> pd.DataFrame:
    out = frame.copy()
    for name, change in columns.items():
        out[name] = change(out[name].copy())
    return out


def _at(i: int, value: Any) -> Any:
    def change(column: pd.Series) -> pd.Series:
        column.iloc[i] = value
        return column
    return change


DESCRIBED = [
    ("text classes", lambda f: f, "y", {}),
    ("integer classes", lambda f: f.assign(k=np.arange(len(f)) % 3), "k", {}),
    ("whole-number float classes", lambda f: f.assign(k=(np.arange(len(f)) % 2) * 1.0), "k",
     {}),
    ("boolean classes", lambda f: f.assign(k=np.arange(len(f)) % 3 == 0), "k", {}),
    ("whole-number weights", lambda f: f, "y", {"weight": "w"}),
    ("fractional weights", lambda f: f, "y", {"weight": "wf"}),
    ("integers as categories", lambda f: f, "y", {"nominal": ["i"]}),
    ("numbers as categories", lambda f: f, "y", {"nominal": ["c0"]}),
    ("roles", lambda f: f, "y", {"features": ["c0", "n1", "b"], "continuous": ["i"]}),
    ("+infinity", lambda f: _changed(f, c0=_at(3, np.inf), f32=_at(4, np.inf)), "y", {}),
    ("-infinity", lambda f: _changed(f, c0=_at(3, -np.inf)), "y", {}),
    ("a NULL target", lambda f: _changed(f, y=_at(3, None)), "y", {}),
    ("a NULL weight", lambda f: _changed(f, w=_at(3, np.nan)), "y", {"weight": "w"}),
    ("a negative weight", lambda f: _changed(f, w=_at(3, -1.0)), "y", {"weight": "w"}),
    ("an empty column", lambda f: f.assign(c2=np.nan), "y", {}),
    ("fractional classes", lambda f: f.assign(k=np.arange(len(f)) * 0.5), "k", {}),
    ("one class", lambda f: f.assign(y="p"), "y", {}),
    ("integers beyond 2**53", lambda f: f.assign(i=f["i"] * 2**60), "y", {}),
    ("mixed objects", lambda f: f.assign(n1=[1, "a"] * (len(f) // 2)), "y", {}),
    ("no rows", lambda f: f.iloc[:0], "y", {}),
]


@pytest.mark.parametrize(("name", "make", "target", "roles"), DESCRIBED,
                         ids=[c[0] for c in DESCRIBED])
def test_a_frame_described_in_numpy_as_by_the_engine(name, make, target, roles):
    """``describe`` of a DataFrame that DuckDB reads in place finds in numpy what its
    statements find (types, roles, domains, classes and their weights, rows, infinities,
    ranges), and where the data gets a message or a warning the statements run and give
    it: the same Dataset, or the same error, either way."""
    frame = make(_mixed())
    assert _described(frame, target, True, **roles) == _described(frame, target, False,
                                                                   **roles)


def test_frame_facts_are_read_where_they_can_be():
    """The numpy reads answer for plain data (so that a small fit has no statement but the
    frame's registration and schema), and leave to the engine what they do not cover."""
    frame = _mixed()
    engine = DuckDBEngine()
    try:
        relation = dataset.resolve_relation(frame, engine)
        types = dict(engine.columns(relation))
    finally:
        engine.cleanup()
    feats = [dataset.Feature(n, dataset.NOMINAL if n in ("n1", "cat", "s", "b") else
                             dataset.CONTINUOUS, i, "") for i, n in
             enumerate(["c0", "c1", "n1", "cat", "s", "b", "f32"])]
    columns = dataset.FrameColumns(frame, relation)
    assert dataset.frame_facts(columns, feats, types, "y", None) is not None
    assert dataset.frame_facts(columns, feats, types, "y", "w") is not None
    assert dataset.frame_facts(columns, feats, types, "y", "wf") is None  # fractional sums


def test_a_copy_with_another_relation_reads_its_engine():
    """A Dataset copied with another relation (pruning's validation source) keeps its
    ``frame`` field, but not as its rows: level 0 and the bin edges are the engine's."""
    frame = _mixed()
    engine = DuckDBEngine()
    try:
        data = dataset.describe(frame, engine, "y")
        other = dataclasses.replace(data, relation=dataset.resolve_relation(
            frame.head(50), engine))
        assert data.in_numpy is not None and other.in_numpy is None
        assert dataset.frame_level0(other, queries.build_level0(other)) is None
        assert dataset.frame_level0(data, queries.build_level0(data)) is not None
    finally:
        engine.cleanup()


LEVEL0_CASES = [
    ("mixed", "y", {"nominal": ["i"]}),
    ("weights", "y", {"weight": "w",
                      "features": ["c0", "c1", "n1", "n2", "cat", "s", "i", "b", "f32"]}),
    ("fractional weights", "y", {"weight": "wf", "features": ["c0", "c1", "n1", "f32"]}),
]


@pytest.mark.parametrize(("name", "target", "roles"), LEVEL0_CASES,
                         ids=[c[0] for c in LEVEL0_CASES])
def test_level0_rows_made_in_numpy_are_the_engines(name, target, roles):
    """The level-0 rows of a DataFrame made in numpy (``frame_level0``) are the rows the
    level-0 query returns, to the last bit (NaN where NULL, the sign of zeros): with bins
    (two ways of cutting), class weights, zero weights left out, each kind of nominal
    column."""
    frame = _mixed()
    engine = DuckDBEngine()
    try:
        data = dataset.describe(frame, engine, target, **roles)
        assert data.frame is not None
        k = len(data.classes)
        for bins in (None, bin_edges(data, 8), bin_edges(data, 64, 1e-7)):
            for class_weight in (None, [0.5 + i for i in range(k)]):
                query = queries.build_level0(data, bins, lookup=True, class_weight=class_weight)
                made = dataset.frame_level0(data, query)
                (ran,) = list(engine.float_batches(query))
                assert made is not None and len(made) == len(ran)
                for a, b in zip(made, ran, strict=True):
                    assert a.dtype == b.dtype and a.shape == b.shape
                    assert np.array_equal(a, b, equal_nan=True)
                    assert np.array_equal(np.signbit(a), np.signbit(b))
    finally:
        engine.cleanup()


def _edges_frames() -> list[tuple[str, pd.DataFrame]]:
    rng = np.random.default_rng(3)
    X, y = datasets.load_breast_cancer(return_X_y=True)
    cancer = pd.DataFrame(X[:, :10], columns=[f"x{i}" for i in range(10)]).assign(y=y)
    n = 3000
    mixed = pd.DataFrame({
        "a": np.round(rng.normal(size=n), 2), "b": rng.integers(-50, 50, n),
        "c": rng.normal(size=n).astype(np.float32), "e": rng.exponential(size=n) * 1e-300,
        "g": np.where(rng.random(n) < 0.3, np.nan, rng.normal(size=n)),
        "y": rng.integers(0, 3, n).astype(float)})
    mixed.loc[rng.random(n) < 0.05, "y"] = np.nan
    infinite = mixed.assign(y=mixed["y"].fillna(0))
    infinite.loc[rng.random(n) < 0.02, "a"] = np.inf
    few = pd.DataFrame({"z": [1.0] * 50 + [2.0] * 3, "y": [0, 1] * 26 + [0]})
    return [("cancer", cancer), ("NULL targets", mixed), ("+infinity", infinite),
            ("few values", few)]


EDGES_FRAMES = _edges_frames()


@pytest.mark.parametrize(("name", "frame"), EDGES_FRAMES, ids=[n for n, _ in EDGES_FRAMES])
def test_bin_edges_of_a_frame_sorted_in_numpy_are_the_engines(name, frame):
    """A DataFrame's quantile bin edges found by sorting its columns in numpy are the ones
    the engine's counting scans find: exact quantiles of the rows with a target, +infinity,
    few values, edges merged within a gap, more bins than values."""
    engine = DuckDBEngine()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = dataset.describe(frame, engine, "y")
        assert data.frame is not None
        by_engine = dataclasses.replace(data, frame=None)
        for max_bins, gap in ((2, 0.0), (5, 0.0), (32, 1e-7), (255, 0.0), (1000, 0.0)):
            assert bin_edges(data, max_bins, gap) == bin_edges(by_engine, max_bins, gap)
    finally:
        engine.cleanup()


def _same_rows(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    def same(x: Any, y: Any) -> bool:
        if isinstance(x, float) and math.isnan(x):
            return isinstance(y, float) and math.isnan(y)
        return type(x) is type(y) and x == y
    return len(a) == len(b) and all(
        len(r) == len(s) and all(same(x, y) for x, y in zip(r, s, strict=True))
        for r, s in zip(a, b, strict=True))


def test_stacked_features_score_the_rows_of_one_feature_at_a_time(monkeypatch):
    """A small level's features scored stacked give the scoring rows of each feature scored
    on its own, to the last bit: CART (Gini, entropy, class weights, fractional sample
    weights in a 52-bit fixed point, whose stacked running sums pass int64's range, a
    nominal feature's partitions) and C4.5 (fractional rows of unknown values); and levels
    were stacked."""
    compared = []

    def checked(hist: Any, features: Any, score: Any, scorer: str) -> Any:
        rows = stacked.score_stacked(hist, features, score, scorer)
        assert _same_rows(rows, list(score(hist, features)))
        compared.append(bool(stacked.stacks(hist, features, scorer)))
        return rows

    monkeypatch.setattr(memory, "score_stacked", checked)
    monkeypatch.setattr(memory_c45, "score_stacked", checked)
    X, y = datasets.load_breast_cancer(return_X_y=True)
    X = X[:, :12]
    weight = np.random.default_rng(0).integers(1, 4, len(y)) * 0.37
    for options in ({}, {"criterion": "entropy", "max_depth": 4},
                    {"class_weight": "balanced", "max_depth": 4}):
        sqltree.DecisionTreeClassifier(**options).fit(X, y)
    sqltree.DecisionTreeClassifier(max_depth=5).fit(X, y, sample_weight=weight)
    frame = _mixed()
    features = frame[["c0", "c1", "c2", "n1", "n2", "cat", "b"]]
    sqltree.DecisionTreeClassifier(max_depth=4).fit(features, frame["y"])
    sqltree.C45Classifier().fit(features, frame["y"])
    sqltree.C45Classifier(min_cases=1).fit(X, y, sample_weight=weight)
    assert sum(compared) > 10


def _fits(make: Any, X: Any, y: Any) -> list[Any]:
    """What a fitted estimator shows of its tree: the model file (but its statistics) and
    the tree's arrays."""
    est = make().fit(X, y)
    model = est.model_.to_dict()
    model.pop("stats")
    arrays = [] if getattr(est, "_tree_arrays", None) is None else [
        np.where(np.isnan(a), None, a).tolist() if a.dtype.kind == "f" else a.tolist()
        for a in est.to_arrays().values()]  # a nominal test's threshold is NaN
    return [model, arrays]


@pytest.mark.parametrize("make", [
    lambda: sqltree.DecisionTreeClassifier(),
    lambda: sqltree.DecisionTreeClassifier(criterion="entropy", min_samples_leaf=5),
    lambda: sqltree.DecisionTreeClassifier(max_bins=16, class_weight="balanced"),
    lambda: sqltree.C45Classifier(),
    lambda: sqltree.C45Classifier(max_bins=8, unpruned=True),
], ids=["cart", "cart-entropy", "cart-binned", "c45", "c45-binned"])
def test_estimator_trees_without_the_small_fit_paths_are_the_same(monkeypatch, make):
    """The estimators' trees with every small-fit path (the numpy reads of the DataFrame, the
    stacked scoring) and without any: the same model file and tree arrays, on arrays and on
    a DataFrame of mixed columns with unknown values."""
    X, y = datasets.load_breast_cancer(return_X_y=True)
    frame = _mixed()
    inputs = [(X[:, :10], y), (frame.drop(columns=["y", "w", "wf"]), frame["y"])]
    fast = [_fits(make, *xy) for xy in inputs]
    monkeypatch.setattr(dataset, "FRAME_MAX_CELLS", 0)
    monkeypatch.setattr(stacked, "STACK_CELLS", {})
    assert fast == [_fits(make, *xy) for xy in inputs]


def test_forest_without_the_small_fit_paths_is_the_same(monkeypatch):
    """A random forest on a DataFrame read in numpy (bin edges, level 0) and read by the
    engine: the same trees (their predictions, to the last bit)."""
    X, y = datasets.load_breast_cancer(return_X_y=True)
    make = lambda: sqltree.RandomForestClassifier(n_estimators=5, random_state=3)  # noqa: E731
    fast = make().fit(X, y).predict_proba(X)
    monkeypatch.setattr(dataset, "FRAME_MAX_CELLS", 0)
    assert np.array_equal(fast, make().fit(X, y).predict_proba(X))
