"""Training an ensemble from a source: the options checked first, the source read, the plan
chosen, the trees grown by the learner (``sqltree.learner``), progress reported per level.

``train(..., algorithm="random-forest")`` comes here (``api.train``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from . import progress as reporting
from .algorithms.cart.strategy import class_weights
from .dataset import describe, describe_source, is_pandas_frame
from .engines import get_engine
from .engines.select_plan import AUTO, check_plan
from .ensemble import Ensemble
from .errors import OptionError
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


def train_random_forest(
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
    """A random forest of ``source`` (see ``api.train``)."""
    forest, class_weight = forest_options(task, options)
    if plan not in PLANS:
        raise OptionError(f"plan must be one of {PLANS}, not {plan!r}")
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
            in_memory, reason = _plan(plan, source, reason)
            cw = class_weights(data, class_weight) if data.classes else None
            batch_size = [0]

            def on_level(event: ForestProgress) -> None:
                level = event.level
                batch_size[0] = event.trees
                reporting.step(
                    "grow",
                    f"trees {event.first_tree + 1}-{event.first_tree + event.trees}, level "
                    f"{level.level}: {reporting.count(level.nodes, 'node')}, "
                    f"{level.seconds:.2f} s",
                    trees=[event.first_tree, event.first_tree + event.trees],
                    level=level.level, nodes=level.nodes, seconds=level.seconds,
                )

            with reporting.phase(
                "grow", f"growing {reporting.count(forest.n_estimators, 'tree')} on "
                f"{reporting.rows(data.n_rows)} rows ({'memory' if in_memory else engine.plan})",
            ) as phase:
                ensemble = train_forest(data, forest, class_weight=cw, in_memory=in_memory,
                                        on_level=on_level)
                phase.done(f"grown: {reporting.count(ensemble.n_trees, 'tree')}, "
                           f"{reporting.count(ensemble.n_leaves, 'leaf', 'leaves')}, "
                           f"{phase.seconds:.2f} s")
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


def _plan(plan: str, source: Any, engine_reason: str) -> tuple[bool, str]:
    """Whether the forest grows in memory, and why (``plan="auto"``: a DataFrame's rows are
    in Python already; any other source's stay in its engine)."""
    if plan == MEMORY_PLAN:
        return True, "asked for"
    if plan == "auto" and is_pandas_frame(source):
        return True, "data in Python memory"
    return False, engine_reason
