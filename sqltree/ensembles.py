"""Training an ensemble from a source: the options checked first, the source read, the plan
chosen, the trees grown by the learner (``sqltree.learner``), progress reported per level or
round.

``train(..., algorithm="random-forest")`` and ``algorithm="gradient-boosting"`` come here
(``api.train``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from . import progress as reporting
from .algorithm_registry import RANDOM_FOREST
from .algorithms.cart.strategy import class_weights
from .algorithms.memory import LOCAL_FILE, MEMORY_MAX_CELLS, PYTHON_MEMORY, rows_held_by
from .dataset import describe, describe_source
from .engines import get_engine
from .engines.select_plan import AUTO, check_plan
from .ensemble import Ensemble
from .errors import OptionError
from .learner.boosting import BoostingOptions, train_boosting
from .learner.forest import ForestOptions, ForestProgress, train_forest
from .options import check_keywords
from .progress import Callback
from .version import __version__

FOREST_OPTIONS = (
    "n_estimators", "criterion", "max_depth", "min_samples_split", "min_samples_leaf",
    "min_weight_fraction_leaf", "max_features", "min_impurity_decrease", "bootstrap",
    "max_samples", "random_state", "max_bins", "oob_score", "class_weight",
)
"""``train``'s options for ``algorithm="random-forest"``, with scikit-learn's names."""

BOOSTING_OPTIONS = (
    "loss", "learning_rate", "max_iter", "max_leaf_nodes", "max_depth", "min_samples_leaf",
    "l2_regularization", "min_hessian_to_split", "max_bins", "early_stopping",
    "validation_fraction", "n_iter_no_change", "tol", "random_state", "class_weight",
)
"""``train``'s options for ``algorithm="gradient-boosting"``, with the names of
scikit-learn's ``HistGradientBoostingClassifier``."""

MEMORY_PLAN = "memory"
PLANS = ("auto", "tables", "select", MEMORY_PLAN)


def forest_options(task: str, options: Mapping[str, Any]) -> tuple[ForestOptions, Any]:
    """The forest's options from ``train``'s keywords (checked, before any query), and its
    ``class_weight``."""
    check_keywords("train", options, [*FOREST_OPTIONS, "task"])
    chosen = {k: v for k, v in options.items() if v is not None or k in (
        "max_depth", "max_features", "max_samples")}
    class_weight = chosen.pop("class_weight", None)
    if task == "regression":
        if class_weight is not None:
            raise OptionError("class_weight applies to classification forests; a regression "
                              "forest weighs rows with weight=")
        chosen.setdefault("criterion", "squared_error")
        # scikit-learn's RandomForestRegressor considers every feature at every node
        chosen.setdefault("max_features", 1.0)
    if "max_bins" in chosen and chosen["max_bins"] is None:
        chosen.pop("max_bins")
    forest = ForestOptions(**chosen)
    forest.check()
    regression_criteria = ("squared_error", "poisson")
    if (task == "regression") != (forest.criterion in regression_criteria):
        fits = "squared_error or poisson" if task == "regression" else "gini or entropy"
        raise OptionError(f"criterion {forest.criterion!r} does not fit a {task} forest: "
                          f"use {fits}")
    if class_weight is not None and class_weight != "balanced" and not isinstance(
            class_weight, Mapping):
        raise OptionError(f"class_weight must be None, 'balanced' or a dict, not {class_weight!r}")
    return forest, class_weight


def boosting_options(task: str, options: Mapping[str, Any]) -> tuple[BoostingOptions, Any]:
    """Boosting's options from ``train``'s keywords (checked, before any query), and its
    ``class_weight``."""
    check_keywords("train", options, [*BOOSTING_OPTIONS, "task"])
    chosen = dict(options)
    if chosen.get("max_bins") is None:
        chosen.pop("max_bins", None)
    class_weight = chosen.pop("class_weight", None)
    _check_class_weight(task, class_weight)
    boosting = BoostingOptions(**chosen)
    boosting.check()
    return boosting, class_weight


def _check_class_weight(task: str, class_weight: Any) -> None:
    if class_weight is None:
        return
    if task == "regression":
        raise OptionError("class_weight applies to classifiers; a regressor weighs rows with "
                          "weight=")
    if class_weight != "balanced" and not isinstance(class_weight, Mapping):
        raise OptionError(f"class_weight must be None, 'balanced' or a dict, not {class_weight!r}")


def check_ensemble_options(
    algorithm: str, task: str, options: Mapping[str, Any], plan: str
) -> tuple[ForestOptions | None, BoostingOptions | None, Any]:
    """The forest's or boosting's options (the other None) and ``class_weight``, checked
    before any query, as ``train_ensemble`` and cross-validation check them."""
    forest: ForestOptions | None = None
    boosting: BoostingOptions | None = None
    if algorithm == RANDOM_FOREST:
        forest, class_weight = forest_options(task, options)
    else:
        boosting, class_weight = boosting_options(task, options)
    if plan not in PLANS:
        raise OptionError(f"plan must be one of {PLANS}, not {plan!r}")
    return forest, boosting, class_weight


def train_ensemble(
    algorithm: str,
    source: Any,
    target: str,
    *,
    task: str,
    connection: Any = None,
    features: Sequence[str] | None = None,
    nominal: Sequence[str] = (),
    continuous: Sequence[str] = (),
    weight: str | None = None,
    progress: bool | Callback = False,
    plan: str = "auto",
    options: Mapping[str, Any],
) -> Ensemble:
    """A random forest or boosted trees of ``source`` (see ``api.train``)."""
    forest, boosting, class_weight = check_ensemble_options(algorithm, task, options, plan)
    with reporting.reporting_to(progress):
        engine = get_engine(connection)
        started = time.perf_counter()
        try:
            reason = engine.use_plan(AUTO if plan == MEMORY_PLAN else check_plan(plan))
            with reporting.phase("read", f"reading {describe_source(source)} on "
                                 f"{engine.NAME}") as phase:
                data = describe(source, engine, target, features=features, nominal=nominal,
                                continuous=continuous, weight=weight, task=task)
                phase.done(f"read {reporting.rows(data.n_rows)} rows, "
                           f"{len(data.features)} features", rows=data.n_rows)
            in_memory, reason = _plan(plan, rows_held_by(source, engine), reason,
                                      boosting=boosting is not None,
                                      cells=data.n_rows * max(len(data.features), 1))
            if boosting is not None:
                ensemble = _boost(data, boosting, class_weight, in_memory, engine.plan)
            else:
                assert forest is not None
                ensemble = _forest(data, forest, class_weight, in_memory, engine.plan)
        finally:
            engine.cleanup()
    ensemble.options.update({"class_weight": class_weight, "target": target})
    ensemble.stats.update({
        "source": data.relation.meta.get("sqltree_source"),
        "plan_reason": reason,
        "seconds": round(time.perf_counter() - started, 6),
        "sqltree_version": __version__,
    })
    return ensemble


def _boost(data: Any, options: BoostingOptions, class_weight: Any, in_memory: bool,
           plan: str) -> Ensemble:
    def on_round(record: dict[str, Any]) -> None:
        valid = record["validation_loss"]
        reporting.step(
            "grow",
            f"round {record['iteration']}: training loss {record['train_loss']:.6f}"
            + (f", validation loss {valid:.6f}" if valid is not None else "")
            + f", {reporting.count(record['leaves'], 'leaf', 'leaves')}, "
            f"{record['seconds']:.2f} s",
            **record,
        )

    with reporting.phase(
        "grow", f"boosting up to {reporting.count(options.max_iter, 'round')} on "
        f"{reporting.rows(data.n_rows)} rows ({'memory' if in_memory else plan})",
        total=options.max_iter,
    ) as phase:
        cw = class_weights(data, class_weight) if data.classes else None
        ensemble = train_boosting(data, options, in_memory=in_memory, class_weight=cw,
                                  on_round=on_round)
        phase.done(f"grown: {reporting.count(ensemble.stats['n_iter'], 'round')}, "
                   f"{reporting.count(ensemble.n_trees, 'tree')}, "
                   f"{reporting.count(ensemble.n_leaves, 'leaf', 'leaves')}, "
                   f"{phase.seconds:.2f} s")
    return ensemble


def _forest(data: Any, forest: ForestOptions, class_weight: Any, in_memory: bool,
            plan: str) -> Ensemble:
    cw = class_weights(data, class_weight) if data.classes else None


    def on_level(event: ForestProgress) -> None:
        level = event.level
        reporting.step(
            "grow",
            f"trees {event.first_tree + 1}-{event.first_tree + event.trees}, level "
            f"{level.level}: {reporting.count(level.nodes, 'node')}, {level.seconds:.2f} s",
            trees=[event.first_tree, event.first_tree + event.trees],
            level=level.level, nodes=level.nodes, seconds=level.seconds,
        )

    with reporting.phase(
        "grow", f"growing {reporting.count(forest.n_estimators, 'tree')} on "
        f"{reporting.rows(data.n_rows)} rows ({'memory' if in_memory else plan})",
    ) as phase:
        ensemble = train_forest(data, forest, class_weight=cw, in_memory=in_memory,
                                on_level=on_level)
        phase.done(f"grown: {reporting.count(ensemble.n_trees, 'tree')}, "
                   f"{reporting.count(ensemble.n_leaves, 'leaf', 'leaves')}, "
                   f"{phase.seconds:.2f} s")
    return ensemble


def _plan(plan: str, held_by: str | None, engine_reason: str, *, boosting: bool = False,
          cells: int = 0) -> tuple[bool, str]:
    """Whether the ensemble grows in memory, and why. ``plan="auto"``: a DataFrame's rows,
    and cross-validation's folds of one, are in Python already; boosting also reads a file
    of sqltree's own DuckDB database into memory when its cells are within the memory plan's
    bound, since its rounds there take less than half their time in SQL
    (benchmarks/README.md); any other source's rows stay in its engine."""
    if plan == MEMORY_PLAN:
        return True, "asked for"
    if plan == "auto" and held_by == PYTHON_MEMORY:
        return True, PYTHON_MEMORY
    if plan == "auto" and boosting and held_by == LOCAL_FILE and cells <= MEMORY_MAX_CELLS:
        return True, f"{LOCAL_FILE}, {cells:,} cells (at most {MEMORY_MAX_CELLS:,})"
    return False, engine_reason
