"""Gradient boosting: the same model in SQL and in numpy and on every engine, Newton leaf
values checked by hand, early stopping, and the quality of scikit-learn's histogram boosting
on the same data."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pandas as pd
import pytest

import sqltree
from sqltree.dataset import describe
from sqltree.engines import get_engine
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.errors import OptionError
from sqltree.learner.boosting import (
    BoostingOptions,
    Condition,
    SqlNewtonBackend,
    _disjoint_groups,
    train_boosting,
)

from .helpers import mixed_table, on_engines


def _regression_table(rows: int = 3000, seed: int = 3, counts: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=rows)
    b = rng.integers(0, 30, size=rows).astype(float)
    c = rng.choice(["u", "v", "w", "x"], size=rows)
    mean = 3 * (a > 0.2) + 0.1 * b + (c == "w") * 2
    y = rng.poisson(np.exp(mean / 3)).astype(float) if counts else mean + rng.normal(
        scale=0.5, size=rows)
    frame = pd.DataFrame({"a": a, "b": b, "c": c, "y": y})
    frame.loc[rng.random(rows) < 0.05, "a"] = np.nan
    frame.loc[rng.random(rows) < 0.05, "c"] = None
    return frame


def _file(ensemble) -> str:
    data = ensemble.to_dict()
    data.pop("stats")
    for f in data["features"]:
        f.pop("sql_type")
    return json.dumps(data, sort_keys=True)


def _boost(frame, target, *, engine=None, source=None, in_memory=False, **options):
    engine = engine or get_engine(None)
    data = describe(frame if source is None else source, engine, target,
                    task="regression" if target == "y" else "classification")
    try:
        return train_boosting(data, BoostingOptions(**options), in_memory=in_memory)
    finally:
        engine.cleanup()


CASES = [
    ("binary", {"max_iter": 4, "max_leaf_nodes": 6, "min_samples_leaf": 5}),
    ("multiclass", {"max_iter": 3, "max_leaf_nodes": 5, "l2_regularization": 1.0}),
    ("squared_error", {"max_iter": 4, "loss": "squared_error", "max_depth": 3,
                       "max_leaf_nodes": None}),
    ("poisson", {"max_iter": 4, "loss": "poisson", "learning_rate": 0.3}),
    ("early", {"max_iter": 6, "early_stopping": True, "max_leaf_nodes": 4}),
]


def _table(case: str) -> tuple[pd.DataFrame, str]:
    if case == "binary":
        frame = mixed_table(2000)
        return frame.assign(label=np.where(frame["label"] == "p", "p", "other")), "label"
    if case in ("multiclass", "early"):
        return mixed_table(2000), "label"
    return _regression_table(2000, counts=case == "poisson"), "y"


@pytest.mark.parametrize(("case", "options"), CASES, ids=[c for c, _ in CASES])
def test_boosting_is_the_same_in_sql_and_in_memory(case, options):
    frame, target = _table(case)
    sql = _boost(frame, target, **options)
    memory = _boost(frame, target, in_memory=True, **options)
    assert _file(sql) == _file(memory)
    assert [r["train_loss"] for r in sql.stats["rounds"]] == pytest.approx(
        [r["train_loss"] for r in memory.stats["rounds"]], rel=1e-12)
    losses = [r["train_loss"] for r in sql.stats["rounds"]]
    assert losses == sorted(losses, reverse=True)  # every round lowers the training loss



@pytest.fixture
def reads(monkeypatch) -> list[int]:
    """The requests of each histogram read of the SQL backend, as they are made."""
    made: list[int] = []
    histograms = SqlNewtonBackend.histograms

    def counted(self, requests):
        made.append(len(requests))
        return histograms(self, requests)

    monkeypatch.setattr(SqlNewtonBackend, "histograms", counted)
    return made


@pytest.mark.parametrize("case", ["binary", "multiclass"])
def test_reading_ahead_grows_the_same_trees_in_fewer_reads(case, reads, monkeypatch):
    # A read fetches the smaller children of every leaf that may split next; the leaves then
    # split in best-first order while their children are at hand, so the trees are those of
    # a read per split.
    frame, target = _table(case)
    options = {"max_iter": 3, "max_leaf_nodes": 12, "min_samples_leaf": 5}
    ahead = _boost(frame, target, **options)
    ahead_reads, reads[:] = len(reads), []
    monkeypatch.setattr(SqlNewtonBackend, "read_ahead", False)
    one_by_one = _boost(frame, target, **options)
    assert _file(ahead) == _file(one_by_one)
    per_round = len(one_by_one.trees) // len(one_by_one.stats["rounds"])
    leaves = [int((t.feature < 0).sum()) for t in one_by_one.trees]
    # one by one: a read of the roots, then a read per split of the round's largest tree
    assert len(reads) == sum(max(leaves[i:i + per_round])
                             for i in range(0, len(leaves), per_round))
    assert max(leaves) == 12
    assert ahead_reads < len(reads)  # 23-25 against 36 here



def test_splits_whose_children_cannot_split_are_not_read(reads):
    # at max_depth 2 a round reads its root and the root's smaller child; the children of
    # depth 1 splits are at max_depth, and their sums are the split's own
    frame, target = _table("binary")
    options = {"max_iter": 3, "max_depth": 2, "max_leaf_nodes": None, "min_samples_leaf": 5}
    model = _boost(frame, target, **options)
    assert [int((t.feature < 0).sum()) for t in model.trees] == [4, 4, 4]
    assert reads == [1, 1] * 3
    assert _file(model) == _file(_boost(frame, target, in_memory=True, **options))


def test_trees_bounded_by_depth_alone_take_a_read_per_level(reads):
    # with no bound on the leaves every leaf that gains splits in the end, so each splits
    # as soon as its child is read and a level is one read; the nodes are numbered in
    # preorder, so the one-by-one numpy backend writes the same file
    frame, target = _table("multiclass")
    options = {"max_iter": 2, "max_depth": 4, "max_leaf_nodes": None, "min_samples_leaf": 5}
    model = _boost(frame, target, **options)
    assert len(reads) == 2 * 4  # the roots, then depths 1-3 (depth 4 cannot split)
    assert _file(model) == _file(_boost(frame, target, in_memory=True, **options))
    for tree in model.trees:  # preorder: a node's left child is the next node
        internal = np.flatnonzero(tree.feature >= 0)
        assert (tree.left[internal] == internal + 1).all()

def test_requests_whose_rows_may_overlap_are_read_in_separate_passes():
    def test(feature, upto, left):
        return Condition(feature, False, upto, (), False, left)

    a, b = test(0, 3, True), test(1, 5, False)
    requests = [(0, [a, b]), (0, [test(0, 3, False)]), (0, [a, test(1, 5, True)]),
                (0, [a]), (1, [a, b]), (0, [])]
    groups = _disjoint_groups(requests)
    # one output's disjoint leaves share a pass; a leaf's ancestor and another output's
    # requests do not
    assert [(o, sorted(_numbers(t))) for o, t in groups] == [
        (0, [0, 1, 2]), (0, [3]), (1, [4]), (0, [5])]


def _numbers(trie) -> list[int]:
    if trie is None:
        return []
    if isinstance(trie, int):
        return [trie]
    return _numbers(trie.left) + _numbers(trie.right)

@pytest.mark.parametrize(("case", "options"), CASES[1:], ids=[c for c, _ in CASES[1:]])
def test_boosting_on_the_select_plan_recomputes_scores_from_the_trees(case, options):
    # A connection that stores no tables keeps no scores: each statement adds the trees so
    # far to the base score in the order the tables plan stores them, so the doubles and the
    # model are the same.
    frame, target = _table(case)
    engine = DuckDBEngine()
    engine.keep_sql = True
    engine.use_plan("select")
    select = _boost(frame, target, engine=engine, **options)
    assert _file(select) == _file(_boost(frame, target, **options))
    statements = [s for s in engine.stats.sql if s]
    assert all(s.lstrip().upper().startswith(("SELECT", "WITH")) for s in statements)


@on_engines(exclude=("duckdb",), sqlite=True)
def test_boosting_is_the_same_on_every_engine(engine_factory):
    frame = mixed_table(1000)
    # validation rows dealt by the row hash in the engine (Spark numbers rows as INT)
    options = {"max_iter": 2, "max_leaf_nodes": 4, "early_stopping": True}
    engine, source = engine_factory(frame)
    there = _boost(frame, "label", engine=engine, source=source, **options)
    assert _file(there) == _file(_boost(frame, "label", **options))


def test_one_round_of_squared_error_is_a_tree_of_mean_residuals():
    """With learning rate 1 and no regularisation a leaf's Newton step -G/H is the mean of
    its rows' residuals y - base (the hessian of squared error is 1 per row)."""
    frame = _regression_table(1500)
    model = _boost(frame, "y", max_iter=1, learning_rate=1.0, loss="squared_error",
                   max_leaf_nodes=4, min_samples_leaf=10, early_stopping=False)
    (tree,) = model.trees
    base = model.base_score[0]
    assert base == pytest.approx(frame["y"].mean(), rel=1e-12)
    columns, missing = model._columns(frame)
    leaf = tree.apply(columns, missing)
    for node in np.unique(leaf):
        rows = frame["y"].to_numpy()[leaf == node]
        assert tree.value[node, 0] == pytest.approx((rows - base).mean(), rel=1e-6)
        assert tree.weight[node] == len(rows)  # the hessian's sum
    assert tree.n_leaves == 4
    np.testing.assert_allclose(model.predict_frame(frame), base + tree.value[leaf, 0])


def test_early_stopping_stops_on_the_validation_rows():
    frame = mixed_table(12_000)  # over 10,000 rows: "auto" stops early
    model = _boost(frame, "label", max_iter=200, max_leaf_nodes=31, learning_rate=0.5,
                   in_memory=True)
    rounds = model.stats["rounds"]
    assert len(rounds) < 200
    valid = [r["validation_loss"] for r in rounds]
    # scikit-learn's rule: none of the last 10 losses beats the one before them by 1e-7
    assert all(valid[-11] - v <= 1e-7 for v in valid[-10:])
    assert all(r["validation_loss"] is not None for r in rounds)


def test_quality_near_scikit_learns_histogram_boosting():
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.metrics import log_loss

    frame = mixed_table(3000, seed=2)
    test = mixed_table(4000, seed=9)
    model = _boost(frame, "label", max_iter=30, max_leaf_nodes=8, early_stopping=False,
                   in_memory=True)
    proba = model.predict_proba_frame(test)
    ours = log_loss(test["label"], proba, labels=model.classes)
    encode = {c: pd.Categorical(frame[c]).categories for c in ("d", "e")}

    def matrix(f):
        x = f.drop(columns="label").copy()
        for c, cats in encode.items():
            x[c] = pd.Categorical(x[c], categories=cats)
        return x

    theirs_model = HistGradientBoostingClassifier(
        max_iter=30, max_leaf_nodes=8, early_stopping=False, categorical_features="from_dtype",
        random_state=0).fit(matrix(frame), frame["label"])
    theirs = log_loss(test["label"], theirs_model.predict_proba(matrix(test)))
    assert ours == pytest.approx(theirs, rel=0.05)


def test_train_names_boosting_and_refuses_tree_options():
    frame = mixed_table(500)
    model = sqltree.train(frame, "label", algorithm="gradient-boosting", max_iter=2)
    assert model.options["algorithm"] == "gradient-boosting"
    assert model.stats["n_iter"] == 2
    with pytest.raises(OptionError, match="cf"):
        sqltree.train(frame, "label", algorithm="gradient-boosting", cf=0.1)
    with pytest.raises(OptionError, match="max_iter"):
        sqltree.train(frame, "label", algorithm="gradient-boosting", max_iter=0)
    with pytest.raises(OptionError, match="n_estimators"):
        sqltree.train(frame, "label", algorithm="gradient-boosting", n_estimators=3)


def test_auto_boosts_a_local_file_in_memory_and_a_users_table_in_its_engine(tmp_path):
    # the same model either way; the plan follows where the rows are
    frame = mixed_table(800)
    path = tmp_path / "rows.parquet"
    frame.to_parquet(path)
    options = {"algorithm": "gradient-boosting", "max_iter": 2, "max_leaf_nodes": 4}
    from_file = sqltree.train(str(path), "label", **options)
    assert from_file.stats["plan"] == "memory"
    assert "file read by sqltree's own DuckDB" in from_file.stats["plan_reason"]
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM read_parquet(?)", [str(path)])
    from_table = sqltree.train("t", "label", connection=con, **options)
    assert from_table.stats["plan"] == "tables"
    assert _file(from_file) == _file(from_table)
