"""Cross-validation and holdout of forests and boosting: each fold's ensemble is the one
``train`` gives on the other folds' rows (dealt by ``assign_folds``), its evaluation the one
``Ensemble.evaluate`` gives on the fold's rows, and the pooled figures scikit-learn's metrics
of all folds' predictions (as the engine scores them), on DuckDB, PostgreSQL and SQLite;
classification and regression."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn import metrics
from sqlglot import exp

import sqltree
from sqltree import crossval
from sqltree.engines import get_engine
from tests.helpers import assert_figures_are_scikit_learns, close, mixed_table, on_engines

EVERY_ENGINE = on_engines(exclude=("spark",), sqlite=True)

MODELS = {
    "forest": ("label", {"algorithm": "random-forest", "n_estimators": 3, "max_depth": 3,
                         "max_bins": 16, "random_state": 4}),
    "boosting": ("yes", {"algorithm": "gradient-boosting", "max_iter": 3, "max_leaf_nodes": 3,
                         "learning_rate": 0.3, "max_bins": 16}),
    "forest-regression": ("y", {"algorithm": "random-forest", "task": "regression",
                                "n_estimators": 3, "max_depth": 3, "max_bins": 16,
                                "max_features": 0.5, "random_state": 2}),
    "boosting-regression": ("y", {"algorithm": "gradient-boosting", "loss": "squared_error",
                                  "max_iter": 3, "max_leaf_nodes": 3, "max_bins": 16}),
}
"""Each case's target (three classes, two, or a number) and ``train`` options: few, small
trees (SQLite's select plan recomputes a boosting's scores in every statement)."""
FOLDS, SEED = 5, 3


def _rows(target: str) -> pd.DataFrame:
    """mixed_table's rows (NULLs in a continuous and a nominal feature, noisy labels) with
    one target: its three classes (``label``), two (``yes``), or a number (``y``); two rows
    have none."""
    frame = mixed_table(250, seed=2).astype({"label": object})
    if target == "yes":
        frame["label"] = np.where(frame["label"] == "q", "yes", "no").astype(object)
    elif target == "y":
        frame["label"] = frame["b"] * 0.5 + frame["c"] + np.where(frame["e"] == "z", 20.0, 0)
    frame = frame.rename(columns={"label": target})
    frame.loc[[7, 120], target] = None
    return frame


def _file(model: sqltree.Ensemble) -> str:
    """A model file's content that names neither its engine nor its source's types."""
    data = model.to_dict()
    data.pop("stats")
    for f in data["features"]:
        f.pop("sql_type")
    return json.dumps(data, sort_keys=True)


def _figures(evaluation: Any) -> dict[str, Any]:
    """An evaluation's figures, without its title and what ``extra`` says of the fold."""
    return replace(evaluation, title="", extra={}).to_dict()


def _part(table: exp.Table, columns: list[str], fold: int, *, inside: bool) -> exp.Select:
    test = exp.EQ if inside else exp.NEQ
    return exp.select(*[exp.column(c, quoted=True) for c in columns]).from_(table.copy()).where(
        test(this=exp.column("fold", quoted=True), expression=exp.Literal.number(fold)))


@EVERY_ENGINE
@pytest.mark.parametrize("name", list(MODELS))
def test_cross_validation_is_the_folds_trained_and_evaluated_one_by_one(engine_factory, name):
    target, options = MODELS[name]
    regression = target == "y"
    frame = _rows(target)
    engine, source = engine_factory(frame)
    cv = sqltree.cross_validate(source, target, folds=FOLDS, seed=SEED, connection=engine,
                                **options)
    # the same folds, dealt by hand into a table of their own on the same engine
    folds = sqltree.assign_folds(source, target, folds=FOLDS, seed=SEED, connection=engine,
                                 stratified=not regression)
    dealt_engine, dealt = engine_factory(folds, "dealt")
    columns = list(frame.columns)
    actual, predicted, proba = [], [], []
    for i in range(1, FOLDS + 1):
        model = sqltree.train(_part(dealt, columns, i, inside=False), target,
                              connection=dealt_engine, **options)
        assert isinstance(model, sqltree.Ensemble)
        assert _file(cv.models[i - 1]) == _file(model), f"fold {i}"
        expected = model.evaluate(_part(dealt, columns, i, inside=True),
                                  connection=dealt_engine)
        found = cv.folds[i - 1]
        assert close(_figures(found), _figures(expected)), (i, found, expected)
        assert found.extra["fold"] == i and found.extra["trees"] == model.n_trees
        assert found.extra["leaves"] == model.n_leaves
        assert found.extra["train_rows"] == model.stats["rows"] == len(folds) - found.rows
        # the fold's rows as the engine scores them, for the pooled figures
        scored = model.predict(_part(dealt, columns, i, inside=True), connection=dealt_engine,
                               proba=not regression)
        assert scored is not None
        actual += scored[target].tolist()
        predicted += scored["prediction"].tolist()
        if not regression:
            proba.append(scored[[f"proba_{c}" for c in model.classes]].to_numpy(dtype=float))
    pooled = cv.pooled
    assert pooled.rows == 248 and pooled.rows_null_target == 2
    if regression:
        assert pooled.title == "Cross-validation"
        assert pooled.root_mean_squared_error == pytest.approx(
            metrics.mean_squared_error(actual, predicted) ** 0.5, rel=1e-9)
        assert pooled.mean_absolute_error == pytest.approx(
            metrics.mean_absolute_error(actual, predicted), rel=1e-9)
        assert pooled.r2 == pytest.approx(metrics.r2_score(actual, predicted), rel=1e-9)
    else:
        assert pooled.title == "Stratified cross-validation"
        assert_figures_are_scikit_learns(pooled, actual, predicted, np.vstack(proba))
    assert cv.settings == {"folds": FOLDS, "stratified": not regression, "seed": SEED,
                           "key": None}


def _split(source: Any, target: str, connection: Any, stratified: bool) -> pd.DataFrame:
    """The rows and their part (1: held out) as ``holdout`` deals them."""
    with crossval.dealt(source, target, crossval.split_rule(0.3), connection=connection,
                        stratified=stratified, seed=1, key=None, least_rows=4) as parts:
        reader = get_engine(parts.connection)
        try:
            frame = reader.frame(exp.select("*").from_(parts.table))
        finally:
            reader.cleanup()
    return frame.rename(columns={parts.part_column: "held_out"})


@EVERY_ENGINE
@pytest.mark.parametrize("name", ["boosting", "forest-regression"])
def test_holdout_trains_on_the_rest_and_evaluates_on_the_held_out_rows(engine_factory, name):
    target, options = MODELS[name]
    frame = _rows(target)
    engine, source = engine_factory(frame)
    model, held_out = sqltree.holdout(source, target, test_fraction=0.3, connection=engine,
                                      **options)
    parts = _split(source, target, engine, stratified=target != "y")
    expected = sqltree.train(parts[parts["held_out"] == 0].drop(columns="held_out"), target,
                             **options)
    assert _file(model) == _file(expected)
    figures = expected.evaluate(parts[parts["held_out"] == 1].drop(columns="held_out"))
    assert held_out.title == "Evaluation on test split"
    assert held_out.rows == 74 and held_out.rows_null_target == 2  # FLOOR(248 * 0.3)
    assert held_out.extra["train_rows"] == 174 and held_out.extra["test_fraction"] == 0.3
    assert close(_figures(replace(held_out, rows_null_target=0)), _figures(figures))


def test_folds_of_a_dataframe_grow_in_memory_to_the_ensembles_of_the_tables_plan():
    # As train grows a DataFrame's ensemble in memory, cross-validation grows its folds
    # there: the same ensembles, the same figures.
    for name in ("forest", "boosting"):
        target, options = MODELS[name]
        frame = _rows(target)
        auto = sqltree.cross_validate(frame, target, folds=3, **options)
        tables = sqltree.cross_validate(frame, target, folds=3, plan="tables", **options)
        assert [m.stats["plan"] for m in auto.models] == ["memory"] * 3
        assert [m.stats["plan"] for m in tables.models] == ["tables"] * 3
        assert [_file(m) for m in auto.models] == [_file(m) for m in tables.models]
        assert close(_figures(auto.pooled), _figures(tables.pooled))


def test_an_ensembles_cross_validation_prints_as_a_trees():
    target, options = MODELS["forest"]
    cv = sqltree.cross_validate(_rows(target), target, folds=3, **options)
    text = str(cv)
    assert text.startswith("=== Stratified cross-validation ===\n")
    # each fold's forest records its training classes, the prior of Weka's relative errors
    assert re.search(r"\nRelative absolute error +\d+\.\d+ %\n", text)
    lines = cv.fold_table().splitlines()
    assert lines[0].split() == ["Fold", "Train", "rows", "Test", "rows", "Leaves", "Accuracy",
                                "Kappa", "Log", "loss"]
    assert [line.split()[3] for line in lines[1:4]] == [str(m.n_leaves) for m in cv.models]
