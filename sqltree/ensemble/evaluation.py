"""Evaluate a forest or boosting where the data lives, by the tree's evaluation.

The ensemble's scoring query (``compile.build_ensemble_query``) keeps the target (and the
weight column) and gives the predicted class and every class probability under the names
``evaluation.ScoredColumns`` chooses; the tree's aggregate over a scoring query
(``evaluation.build_groups_query``, or ``regression_evaluation.build_sums_query``) turns it
into the same few sums, and ``from_groups`` (``from_sums``) into the same ``Evaluation``
(``RegressionEvaluation``): Weka's block, kappa, the per-class table, MCC, balanced accuracy,
the ROC and precision-recall areas, ``threshold=`` and ``to_dict()``.

Weka's relative errors compare with the training class distribution: sqltree's forests and
boosting record it in their statistics (``training_classes``); an imported model has none,
and its relative errors are unknown (printed ``?``). A regression tree's training mean, the
centre of its target moments, has no record in an ensemble: its centre is its own mean
prediction, which serves the same purpose (keeping R²'s sums exact for a target far from
zero).

An ensemble gives nearly every row its own probability vector, so the aggregate returns about
one group per row; the ROC and precision-recall areas need each distinct score's weight.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compiler import collector_paused
from ..dataset import resolve_relation
from ..engines import get_engine
from ..errors import DataError, UnsupportedError
from ..evaluation import (
    Evaluation,
    ScoredColumns,
    build_groups_query,
    check_options,
    from_groups,
    model_weight,
)
from ..regression_evaluation import RegressionEvaluation, build_sums_query, from_sums
from .compile import build_ensemble_query

if TYPE_CHECKING:
    from .model import Ensemble


def evaluate_ensemble(
    model: Ensemble,
    source: Any,
    *,
    connection: Any = None,
    weight: str | bool = True,
    title: str = "Evaluation",
    threshold: float | None = None,
) -> Evaluation | RegressionEvaluation:
    """Evaluate ``model`` on ``source`` in the engine (see ``Ensemble.evaluate``)."""
    if model.is_regression and threshold is not None:
        raise UnsupportedError("a regression model predicts numbers: threshold= does not "
                               "apply")
    check_options(model.classes, title, threshold)
    weight_column = model_weight(model, weight)
    scored = ScoredColumns(model.target, weight_column,
                           0 if model.is_regression else len(model.classes))
    engine = get_engine(connection)
    try:
        relation = resolve_relation(source, engine)
        schema = engine.columns(relation)
        names = [n for n, _ in schema]
        if weight_column and weight_column not in names:
            raise DataError(f"the weight column {weight_column!r} is not in the source; "
                            f"columns: {names}")
        model._check_source(dict(schema), engine, target=True)
        query = build_ensemble_query(
            model, relation, scored.kept, column_name=scored.predicted,
            proba=not model.is_regression, proba_columns=scored.probas or None,
            dialect=engine.dialect,
        ).query
        middle = centre(model)
        aggregate = (build_sums_query(query, scored, middle) if model.is_regression
                     else build_groups_query(query, model.classes, scored))
        with collector_paused():
            rows = engine.execute(aggregate)
    finally:
        engine.cleanup()
    extra = {"trees": model.n_trees}
    if model.is_regression:
        return replace(from_sums(rows[0], weight_column, middle, title), extra=extra)
    found = replace(from_groups(rows, model.classes, model.stats.get(TRAINING_CLASSES),
                                weight_column, title), extra=extra)
    return found if threshold is None else found.at_threshold(threshold)


TRAINING_CLASSES = "class_weights"
"""The key of an ensemble's statistics that holds each class's training weight."""


def training_classes(data: Any) -> dict[str, list[float]]:
    """What a trained ensemble's statistics record of its classes: each one's training weight
    (in ``data.classes``' order, the model's), the prior of Weka's relative errors; nothing
    for a numeric target."""
    return {TRAINING_CLASSES: [float(w) for w in data.class_weights]} if data.classes else {}


def centre(model: Ensemble) -> float:
    """About the model's mean prediction, without reading rows: the link of the base score
    (boosting), or the mean over the trees of their leaves' values weighted by the leaves'
    training weights (a forest; equally weighted where a tree recorded none)."""
    if model.aggregation == "sum":
        base = float(model.base_score[0])
        return math.exp(min(base, 700.0)) if model.link == "exp" else base
    means = []
    for t in model.trees:
        leaves = t.is_leaf
        values, weights = t.value[leaves, 0], t.weight[leaves]
        total = float(weights.sum())
        means.append(float((values * weights).sum()) / total if total > 0
                     else float(values.mean()))
    return float(np.mean(means))
