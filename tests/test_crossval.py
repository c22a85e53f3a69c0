"""Cross-validation and held-out splits dealt in SQL: the same parts on DuckDB, PostgreSQL,
Spark and SQLite, stratified, seeded, and pooled as scikit-learn would count the folds'
predictions."""

from __future__ import annotations

import math
from collections import Counter

import duckdb
import numpy as np
import pandas as pd
import pytest
from sklearn import metrics
from sqlglot import exp

import sqltree
from sqltree import crossval
from sqltree.engines import get_engine
from tests.helpers import GOLF_NUMERIC, _clean, close, mixed_table, on_engines, read_csv


def _odd_values() -> pd.DataFrame:
    """Every kind of hashed value: floats engines write differently as text (100.0, 1e20,
    1e-05), integers, text with quotes and accents, booleans, NULLs, and duplicate rows."""
    floats = [100.0, 1e20, 1e-05, 0.1, -2.5, 123456789.125, None, 3.0, -1e-300, 0.0]
    texts = ["a", "it's", "ü", "B", None, "a", "select", "x y", "", "Z"]
    rows = []
    for i in range(48):
        rows.append({
            "id": i,
            "f": floats[i % 10] if i % 7 else None,
            "t": texts[(i * 3) % 10],
            "b": None if i % 11 == 0 else bool(i % 3),
            "n": (i * 37) % 13 - 6,
            "label": None if i in (5, 30) else ["yes", "no", "maybe"][(i * 5) % 7 % 3],
        })
    rows += [dict(rows[4], id=4), dict(rows[4], id=4)]  # three identical rows
    frame = pd.DataFrame(rows)
    return frame.astype({"b": object, "t": object, "label": object})


def _canonical(frame: pd.DataFrame, booleans: tuple[str, ...] = ()) -> list[tuple]:
    """The rows, sorted; ``booleans``: columns read back as numbers (SQLite stores a boolean
    as 0 or 1), made booleans again."""
    rows = [_clean(r) for r in frame.to_dict("records")]
    for r in rows:
        r.update({b: bool(r[b]) for b in booleans if r[b] is not None})
    return sorted(tuple((k, repr(v)) for k, v in sorted(r.items())) for r in rows)


DEALINGS = [
    {"stratified": True, "seed": 7, "key": None},
    {"stratified": False, "seed": 7, "key": None},
    {"stratified": True, "seed": 3, "key": "id"},
]


@on_engines(sqlite=True)
def test_folds_are_the_same_on_every_engine(engine_factory) -> None:
    frame = _odd_values()
    engine, source = engine_factory(frame)
    # On Spark (seconds a statement) the first only: the others vary the same expressions.
    for dealing in DEALINGS[:1] if engine_factory.kind == "spark" else DEALINGS:
        expected = sqltree.assign_folds(frame, "label", folds=4, **dealing)
        found = sqltree.assign_folds(source, "label", folds=4, connection=engine, **dealing)
        assert _canonical(found, _read_as_numbers(engine_factory)) == _canonical(expected), (
            dealing)
        assert len(found) == 48  # the two rows with a NULL class are in no fold


def _read_as_numbers(engine_factory) -> tuple[str, ...]:
    return ("b",) if engine_factory.kind == "sqlite" else ()


def _split(source, connection) -> pd.DataFrame:
    """The rows and their part (1: held out) as ``holdout`` deals them."""
    with crossval.dealt(source, "label", crossval.split_rule(0.3), connection=connection,
                        stratified=True, seed=1, key=None, least_rows=4) as parts:
        reader = get_engine(parts.connection)
        try:
            return reader.frame(exp.select("*").from_(parts.table))
        finally:
            reader.cleanup()


@on_engines(sqlite=True)
def test_held_out_rows_are_the_same_on_every_engine(engine_factory) -> None:
    frame = _odd_values()
    engine, source = engine_factory(frame)
    expected, found = _split(frame, None), _split(source, engine)
    assert _canonical(found, _read_as_numbers(engine_factory)) == _canonical(expected)
    held = found[found.columns[-1]]
    assert held.sum() == math.floor(48 * 0.3)


def _sizes(frame: pd.DataFrame, by: list[str]) -> Counter:
    return Counter(frame.groupby(by).size().to_dict())


def test_folds_are_stratified_and_even() -> None:
    frame = mixed_table(1000)
    folds = sqltree.assign_folds(frame, "label", folds=7)
    per_fold = folds.groupby("fold").size()
    assert sorted(per_fold.index) == list(range(1, 8))
    assert per_fold.max() - per_fold.min() <= 1
    per_class = folds.groupby(["label", "fold"]).size().unstack()
    assert ((per_class.max(axis=1) - per_class.min(axis=1)) <= 1).all()
    plain = sqltree.assign_folds(frame, "label", folds=7, stratified=False)
    assert plain.groupby("fold").size().max() - plain.groupby("fold").size().min() <= 1


def test_the_seed_and_the_key_decide_the_folds() -> None:
    frame = _odd_values()

    def by_id(folds: pd.DataFrame) -> dict[int, int]:
        return dict(zip(folds["id"], folds["fold"]))

    first = by_id(sqltree.assign_folds(frame.iloc[:40], "label", folds=3, seed=1))
    assert by_id(sqltree.assign_folds(frame.iloc[:40], "label", folds=3, seed=1)) == first
    assert by_id(sqltree.assign_folds(frame.iloc[:40], "label", folds=3, seed=2)) != first
    keyed = by_id(sqltree.assign_folds(frame.iloc[:40], "label", folds=3, key="id"))
    changed = frame.iloc[:40].assign(n=frame["n"].iloc[:40] * 2)
    assert by_id(sqltree.assign_folds(changed, "label", folds=3, key="id")) == keyed
    assert by_id(sqltree.assign_folds(changed, "label", folds=3)) != first


def test_pooled_figures_are_the_folds_predictions_counted_together() -> None:
    """Rebuilt in pandas from ``assign_folds``: each fold's model trained on the other folds'
    rows, its test rows predicted by the Python walk, all counted by scikit-learn."""
    frame = mixed_table(600).astype({"label": object})
    frame.loc[[3, 99], "label"] = None
    cv = sqltree.cross_validate(frame, "label", folds=4, seed=5, max_depth=3)
    folds = sqltree.assign_folds(frame, "label", folds=4, seed=5)
    actual, predicted, proba = [], [], []
    for i in range(1, 5):
        model = sqltree.train(folds[folds.fold != i].drop(columns="fold"), "label",
                              max_depth=3)
        assert cv.folds[i - 1].extra["leaves"] == model.n_leaves
        rows = [_clean(r) for r in folds[folds.fold == i].to_dict("records")]
        fold_actual = [r["label"] for r in rows]
        fold_predicted = [model.predict_row(r) for r in rows]
        assert cv.folds[i - 1].accuracy == pytest.approx(
            metrics.accuracy_score(fold_actual, fold_predicted), abs=1e-12)
        actual += fold_actual
        predicted += fold_predicted
        proba += [model.predict_proba_row(r) for r in rows]
    labels = sorted(set(actual))
    pooled = cv.pooled
    assert pooled.title == "Stratified cross-validation"
    assert pooled.rows == 598 and pooled.rows_null_target == 2
    assert np.allclose(pooled.matrix, metrics.confusion_matrix(actual, predicted, labels=labels))
    assert pooled.kappa == pytest.approx(metrics.cohen_kappa_score(actual, predicted), abs=1e-12)
    assert pooled.log_loss == pytest.approx(
        metrics.log_loss(actual, np.array(proba), labels=labels), abs=1e-9)
    text = str(cv)
    assert "=== Stratified cross-validation ===" in text and "=== Per fold ===" in text
    assert cv.to_dict()["settings"] == {"folds": 4, "stratified": True, "seed": 5, "key": None}


def test_weighted_cross_validation_counts_weights() -> None:
    frame = mixed_table(300)
    frame["w"] = [1.0 + i % 3 for i in range(len(frame))]
    cv = sqltree.cross_validate(frame, "label", folds=3, weight="w", max_depth=2)
    assert cv.pooled.weight == "w"
    assert cv.pooled.total == pytest.approx(frame["w"].sum())


def test_folds_of_a_small_dataframe_grow_in_memory_to_the_same_trees() -> None:
    # A DataFrame's folds are queries of the dealt table, but their rows came from Python:
    # plan="auto" grows them in memory, as it would the DataFrame itself.
    frame = mixed_table(300)
    options = {"folds": 3, "algorithm": "cart", "max_depth": 4}
    auto = sqltree.cross_validate(frame, "label", **options)
    tables = sqltree.cross_validate(frame, "label", plan="tables", **options)
    assert [m.stats["plan"] for m in auto.models] == ["memory"] * 3
    assert [m.stats["plan"] for m in tables.models] == ["tables"] * 3
    trees = [[m.to_dict()["tree"] for m in cv.models] for cv in (auto, tables)]
    assert trees[0] == trees[1]
    assert _comparable(auto)["pooled"] == _comparable(tables)["pooled"]
    holdout_model, _ = sqltree.holdout(frame, "label", algorithm="cart", max_depth=2)
    assert holdout_model.stats["plan"] == "memory"


def test_folds_of_a_file_on_sqltrees_own_database_grow_in_memory(tmp_path) -> None:
    """A file that cross-validation's own DuckDB database deals into parts is the process's,
    as ``train`` on the file would treat it: C4.5's folds grow in memory, the trees the
    tables plan grows; on a user's connection they stay in the engine."""
    import duckdb

    path = tmp_path / "mixed.parquet"
    mixed_table(300).to_parquet(path)
    options = {"folds": 3, "algorithm": "c4.5"}
    auto = sqltree.cross_validate(str(path), "label", **options)
    tables = sqltree.cross_validate(str(path), "label", plan="tables", **options)
    assert [m.stats["plan"] for m in auto.models] == ["memory"] * 3
    assert all(m.stats["plan_reason"].startswith("a file read by sqltree's own DuckDB")
               for m in auto.models)
    trees = [[m.to_dict()["tree"] for m in cv.models] for cv in (auto, tables)]
    assert trees[0] == trees[1]
    with duckdb.connect() as con:
        users = sqltree.cross_validate(str(path), "label", connection=con, **options)
    assert [m.stats["plan"] for m in users.models] == ["tables"] * 3


def _comparable(cv: sqltree.CrossValidation) -> dict:
    document = cv.to_dict()
    for fold in document["folds"]:
        fold.pop("seconds")
    return document


@on_engines(sqlite=True)
def test_cross_validation_is_the_same_on_every_engine(engine_factory) -> None:
    # Few folds and a shallow ID3 tree: Spark takes seconds per statement.
    frame = read_csv(GOLF_NUMERIC)
    options = {"folds": 2, "algorithm": "id3", "max_depth": 1}
    expected = _comparable(sqltree.cross_validate(frame, "play", **options))
    engine, source = engine_factory(frame)
    found = _comparable(sqltree.cross_validate(source, "play", connection=engine, **options))
    assert close(found, expected), (found, expected)


@on_engines(exclude=("spark",), sqlite=True)  # Spark's split is compared above, and
def test_holdout_is_the_same_on_every_engine(engine_factory) -> None:
    frame = read_csv(GOLF_NUMERIC)
    model, expected = sqltree.holdout(frame, "play", test_fraction=0.3)
    engine, source = engine_factory(frame)
    found_model, found = sqltree.holdout(source, "play", test_fraction=0.3, connection=engine)
    assert found_model.root.to_dict() == model.root.to_dict()
    assert close(found.to_dict(), expected.to_dict())


def test_holdout_keeps_the_fraction_of_each_class() -> None:
    frame = mixed_table(1000)
    model, held_out = sqltree.holdout(frame, "label", test_fraction=0.25, max_depth=3)
    assert held_out.rows == 250 and model.stats["rows"] == 750
    assert held_out.title == "Evaluation on test split"
    classes = frame["label"].value_counts()
    for figures in held_out.per_class():
        assert abs(figures.support - classes[figures.label] * 0.25) <= 1


@pytest.mark.postgres
def test_a_postgresql_url_serves_every_fold(postgres_url) -> None:
    """The URL is opened once: the dealt table, the trainings and the evaluations share it."""
    frame = read_csv(GOLF_NUMERIC)
    options = {"folds": 2, "algorithm": "id3", "max_depth": 1}
    expected = _comparable(sqltree.cross_validate(frame, "play", **options))
    found = _comparable(sqltree.cross_validate(frame, "play", connection=postgres_url, **options))
    assert close(found, expected)


# -- refusals --------------------------------------------------------------------------------------
@pytest.fixture
def closed() -> duckdb.DuckDBPyConnection:
    """A connection any query on which would raise: a refusal must come first."""
    connection = duckdb.connect()
    connection.close()
    return connection


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda c: sqltree.cross_validate("t", "y", folds=1, connection=c), ValueError,
     "folds must be a whole number of at least 2"),
    (lambda c: sqltree.cross_validate("t", "y", folds=2.5, connection=c), ValueError, "folds"),
    (lambda c: sqltree.cross_validate("t", "y", folds=True, connection=c), ValueError, "folds"),
    (lambda c: sqltree.cross_validate("t", "y", seed="1", connection=c), ValueError, "seed"),
    (lambda c: sqltree.cross_validate("t", "y", key="", connection=c), ValueError, "key"),
    (lambda c: sqltree.cross_validate("t", "y", stratified="no", connection=c), ValueError,
     "stratified"),
    (lambda c: sqltree.cross_validate("t", "y", connection=c, depth=3), TypeError, "depth"),
    (lambda c: sqltree.cross_validate("t", "y", connection=c, max_depth=0), ValueError,
     "max_depth"),
    (lambda c: sqltree.cross_validate("t", "y", connection=c, criterion="gini"),
     sqltree.UnsupportedError, "criterion"),
    (lambda c: sqltree.holdout("t", "y", test_fraction=0, connection=c), ValueError,
     "test_fraction must be between 0 and 1"),
    (lambda c: sqltree.holdout("t", "y", test_fraction=1.0, connection=c), ValueError,
     "test_fraction"),
    (lambda c: sqltree.holdout("t", "y", test_fraction=True, connection=c), ValueError,
     "test_fraction"),
    (lambda c: sqltree.assign_folds("t", "y", folds=0, connection=c), ValueError, "folds"),
    # an ensemble's options, and a tree's, refused as train refuses them
    (lambda c: sqltree.cross_validate("t", "y", algorithm="random-forest", cf=0.1,
                                      connection=c), ValueError,
     "cf apply to single trees, not to random-forest"),
    (lambda c: sqltree.holdout("t", "y", algorithm="gradient-boosting", pruning=None,
                               min_cases=3, connection=c), ValueError,
     "min_cases, pruning apply to single trees, not to gradient-boosting"),
    (lambda c: sqltree.cross_validate("t", "y", algorithm="random-forest", date_features=True,
                                      connection=c), TypeError,
     "date_features applies to single trees"),
    (lambda c: sqltree.cross_validate("t", "y", algorithm="gradient-boosting",
                                      n_estimators=5, connection=c), TypeError,
     r"train\(\) got unexpected keyword arguments: 'n_estimators'"),
    (lambda c: sqltree.cross_validate("t", "y", n_estimators=5, connection=c), TypeError,
     r"train\(\) got unexpected keyword arguments: 'n_estimators'"),
    (lambda c: sqltree.holdout("t", "y", algorithm="cart", max_iter=5, connection=c),
     TypeError, "'max_iter'"),
    (lambda c: sqltree.cross_validate("t", "y", algorithm="random-forest", n_estimators=0,
                                      connection=c), ValueError, "n_estimators must be"),
    (lambda c: sqltree.holdout("t", "y", algorithm="gradient-boosting", learning_rate=-1,
                               connection=c), ValueError, "learning_rate"),
    (lambda c: sqltree.cross_validate("t", "y", algorithm="random-forest",
                                      criterion="squared_error", task="classification",
                                      connection=c), ValueError, "does not fit"),
    (lambda c: sqltree.cross_validate("t", "y", algorithm="gradient-boosting", loss="poisson",
                                      class_weight="balanced", connection=c), ValueError,
     "class_weight applies to classifiers"),
    (lambda c: sqltree.holdout("t", "y", algorithm="random-forest", plan="scan",
                               connection=c), ValueError, "plan must be one of"),
])
def test_bad_options_are_refused_before_any_query(closed, call, error, message) -> None:
    with pytest.raises(error, match=message):
        call(closed)


def test_more_folds_than_rows_is_a_data_error() -> None:
    with pytest.raises(sqltree.DataError, match=r"14 rows with a known class.*at least 20"):
        sqltree.cross_validate(read_csv(GOLF_NUMERIC), "play", folds=20)


def test_a_fold_that_cannot_train_names_the_fold() -> None:
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "y": ["a", "a", "a", "b"]})
    with pytest.raises(sqltree.DataError, match=r"^fold 2: .*single class"):
        sqltree.cross_validate(frame, "y", folds=2)
