"""The two entry points: ``train`` a tree and look at the root's ``split_scores``."""

from __future__ import annotations

import inspect
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import progress as reporting
from . import queries as q
from .algorithm_registry import ENSEMBLES, ID3, facts
from .algorithms import SCAN_REASON, SCAN_REFUSAL, SCAN_STRATEGIES, grow_and_prune
from .algorithms.c45.scores import C45ScoreRow, build_split_scores
from .algorithms.c45.strategy import score_options
from .algorithms.memory import (
    MEMORY,
    SCAN,
    check_train_plan,
    memory_reason,
    rows_held_by,
)
from .compiler import collector_paused
from .dataset import Dataset, describe, describe_source
from .engines import get_engine
from .engines.select_plan import AUTO, TABLES, check_plan
from .errors import OptionError, UnsupportedOptionError
from .grower import GrowOptions
from .model import Model, features_info
from .options import (
    CART_OPTIONS,
    TASKS,
    check_keywords,
    check_train_options,
    resolve_task,
)
from .progress import Callback
from .pruning import prune
from .version import __version__

if TYPE_CHECKING:
    import pandas

TREE_DEFAULTS: dict[str, Any] = {
    "min_cases": None, "min_gain": 0.0, "pruning": "default", "subtree_raising": True,
    "validation": None, "missing": "fractional", "cf": 0.25,
}
"""``train``'s single-tree options at their defaults (a forest refuses any other value)."""


def train(
    source: Any,
    target: str,
    *,
    algorithm: str | None = None,
    task: str | None = None,
    connection: Any = None,
    features: Sequence[str] | None = None,
    nominal: Sequence[str] = (),
    continuous: Sequence[str] = (),
    weight: str | None = None,
    min_cases: float | None = None,
    max_depth: int | None = None,
    min_samples_split: float = 0.0,
    min_gain: float = 0.0,
    missing: str = "fractional",
    max_bins: int | None = None,
    pruning: str | None = "default",
    cf: float = 0.25,
    subtree_raising: bool = True,
    validation: Any = None,
    progress: bool | Callback = False,
    plan: str = "auto",
    date_features: bool = False,
    **cart_options: Any,
) -> Model:
    """Train a classification or regression tree where the data lives.

    Parameters
    ----------
    source : str, pandas.DataFrame or sqlglot expression
        A table or view name, a ``SELECT`` query, a Parquet/CSV path or glob, or a DataFrame.
    target : str
        The class column, or a numeric column for a regression tree. Rows with a NULL target
        are left out (and counted in ``stats``).
    algorithm : {"c4.5", "id3", "cart"}, default: "c4.5" for classification, "cart" for
        regression
    task : {"classification", "regression"}, optional
        Default: regression when ``criterion`` is a regression criterion, else classification.
        Regression trees are CART's, as scikit-learn's: leaves predict the weighted mean.
    connection : optional
        A DuckDB connection, a psycopg connection or ``postgresql://`` URL, or a SparkSession;
        default: a new in-memory DuckDB database.
    features, nominal, continuous : optional
        The feature columns (default: all but target and weight) and role overrides (default:
        numbers are continuous, text and booleans nominal).
    weight : str, optional
        A column of non-negative row weights; every count is a sum of weights.
    min_cases : float, optional
        Least weight in at least two branches of a split (J48's ``-M``); default 2 for C4.5
        and 1 for ID3.
    max_depth, min_samples_split, min_gain : optional
        Pre-pruning: deepest test level, least weight to split a node, least gain of a split.
    missing : {"fractional", "majority", "drop"}, default="fractional"
        Unknown values: C4.5's fractional cases, the branch with most weight, or ignored.
    max_bins : int, optional
        Approximate mode: each continuous feature is cut into at most this many quantile bins
        (their edges are values of the data, so scoring stays exact). Default: exact.
    pruning : {"c4.5", "pessimistic", "reduced-error"} or None, default: "c4.5" for C4.5
        and None for ID3
        J48's error-based pruning (``cf``, ``subtree_raising``), Quinlan's pessimistic pruning,
        or reduced-error pruning on ``validation``. None: C4.5 only collapses subtrees that do
        not reduce training error (J48 ``-U``); ID3 keeps the grown tree.
    progress : bool or callable, default=False
        True shows the command line's display on standard error; a callable receives every
        ``sqltree.progress.Event`` (reading, growth per level with its plan, pruning per round),
        which also go to the ``logging`` logger ``"sqltree"``. What the callable raises stops
        training.
    plan : {"auto", "tables", "select", "scan", "memory"}, default="auto"
        Levels in temporary tables, only SELECTs (a connection that may not create tables),
        the level scan (binned CART classification: each level's histograms summed in the
        engine, the splits chosen in Python; ``docs/engines.md``), or level 0 read once and
        the tree grown in Python. ``"auto"``: memory for a small DataFrame or a file of
        sqltree's own DuckDB (``docs/memory-plan.md``), the scan where it applies, else asks
        the connection. The same tree; ``stats["plan"]`` and ``stats["plan_reason"]`` say
        which.
    date_features : bool, default=False
        Each DATE or TIMESTAMP feature column ``d`` becomes four continuous features computed
        in SQL, in training and in the scoring SQL alike: ``d.year``, ``d.month``, ``d.dow``
        (ISO day of the week, 1 = Monday to 7 = Sunday) and ``d.epoch_day`` (days since
        1970-01-01); see ``sqltree.dates``. Without it such columns are refused. Single trees
        only, on DuckDB, PostgreSQL and Spark.
    **cart_options
        ``algorithm="cart"`` only, with scikit-learn's names and meanings: ``criterion``,
        ``min_samples_leaf``, ``min_weight_fraction_leaf``, ``min_impurity_decrease``,
        ``max_leaf_nodes``, ``class_weight``, ``ccp_alpha`` (see ``sqltree.algorithms.cart``);
        a regression tree takes all but ``class_weight``, with ``criterion="squared_error"``.
    """
    task, algorithm = resolve_task(task, algorithm, cart_options)
    if algorithm in ENSEMBLES:
        from .ensembles import train_ensemble

        options = ensemble_options(algorithm, task, {
            "min_cases": min_cases, "min_gain": min_gain, "pruning": pruning,
            "subtree_raising": subtree_raising, "validation": validation, "missing": missing,
            "cf": cf, "date_features": date_features, "max_depth": max_depth,
            "max_bins": max_bins, "min_samples_split": min_samples_split, "plan": plan,
            **cart_options})
        return train_ensemble(  # type: ignore[return-value]
            algorithm, source, target, task=task, connection=connection, features=features,
            nominal=nominal, continuous=continuous, weight=weight, progress=progress,
            plan=plan, options=options)
    _check_date_features(date_features)
    check_keywords("train", cart_options, [*inspect.signature(train).parameters, *CART_OPTIONS])
    check_train_plan(plan)
    check_train_options(
        algorithm, target=target, features=features, nominal=nominal, continuous=continuous,
        weight=weight, min_cases=min_cases, max_depth=max_depth,
        min_samples_split=min_samples_split, min_gain=min_gain, missing=missing,
        max_bins=max_bins, pruning=pruning, cf=cf, subtree_raising=subtree_raising,
        validation=validation, cart_options=cart_options, task=task,
    )
    if task == "regression":
        cart_options = {"criterion": "squared_error", **cart_options}
    options = GrowOptions(
        task=task, algorithm=algorithm, max_depth=max_depth, min_samples_split=min_samples_split,
        min_gain=min_gain, missing=missing, max_bins=max_bins, **cart_options,
        min_cases=facts(algorithm).min_cases if min_cases is None else min_cases,
    )
    if plan == SCAN and not (options.strategy_name in SCAN_STRATEGIES and options.max_bins):
        raise UnsupportedOptionError(SCAN_REFUSAL)
    if pruning == "default":
        pruning = facts(algorithm).default_pruning
    roles = {"features": features, "nominal": nominal, "continuous": continuous, "weight": weight,
             "date_features": date_features}
    return _fit(source, target, connection, roles, options, progress,
                PruneOptions(pruning, cf, subtree_raising, validation), plan)


def ensemble_options(algorithm: str, task: str, keywords: Mapping[str, Any]) -> dict[str, Any]:
    """``train``'s keywords for a forest or boosting, checked before any query: a single
    tree's options refused, the others the learner's options (``train_ensemble``'s
    ``options``, returned), checked there.

    ``keywords``: ``train``'s keyword arguments by name, at least the single-tree options
    (``TREE_DEFAULTS``), ``date_features``, ``max_depth``, ``max_bins``, ``min_samples_split``
    and ``plan``, and those it gathers in ``**cart_options`` (``n_estimators``, ``max_iter``,
    ...). Cross-validation calls it before it deals the rows."""
    _check_date_features(keywords["date_features"])
    if keywords["date_features"]:
        raise UnsupportedOptionError(
            f"date_features applies to single trees, not to {algorithm}: compute the date "
            "parts in a query (such as EXTRACT(month FROM d) AS month)")
    tree_only = [name for name, default in TREE_DEFAULTS.items()  # validation: any source
                 if keywords[name] is not default and (default is None
                                                       or keywords[name] != default)]
    if tree_only:
        raise OptionError(f"{', '.join(sorted(tree_only))} apply to single trees, not to "
                          f"{algorithm}")
    named = inspect.signature(train).parameters
    options = {"max_depth": keywords["max_depth"], "max_bins": keywords["max_bins"],
               **{name: value for name, value in keywords.items() if name not in named}}
    if keywords["min_samples_split"]:
        options["min_samples_split"] = keywords["min_samples_split"]
    from .ensembles import check_ensemble_options

    check_ensemble_options(algorithm, task, options, keywords["plan"])
    return options


def _check_date_features(date_features: Any) -> None:
    if not isinstance(date_features, bool):
        raise OptionError(f"date_features must be True or False, not {date_features!r}")


@dataclass(frozen=True)
class PruneOptions:
    """How ``train`` prunes a grown tree (see ``sqltree.pruning.prune``)."""

    method: str | None
    cf: float
    subtree_raising: bool
    validation: Any


def _fit(
    source: Any,
    target: str,
    connection: Any,
    roles: dict[str, Any],
    options: GrowOptions,
    progress: bool | Callback,
    post: PruneOptions,
    plan: str = "auto",
) -> Model:
    """The fit pipeline: choose the training plan, describe the source, grow, prune, and
    the model; each phase is reported to ``sqltree.progress`` (and to what ``progress`` asks
    for)."""
    with reporting.reporting_to(progress):
        engine = get_engine(connection)
        started = time.perf_counter()
        try:
            engine.use_plan({MEMORY: AUTO, SCAN: TABLES}.get(plan, plan))
            data = _read(source, engine, target, roles, options.task)
            memory = memory_reason(plan, rows_held_by(source, engine), data.n_rows,
                                   len(data.features), options.strategy_name)
            # Growth and pruning each pause the cycle collector (a grown tree is millions of
            # objects); paused across both, its first full pass over the grown tree (1.5-1.9
            # s at 1M rows, between growth and pruning) comes after pruning freed most of it.
            with collector_paused():
                root, grow_stats, prune_stats, rows = grow_and_prune(data, options,
                                                                     memory=memory, plan=plan)
                if facts(options.algorithm).collapse_unpruned or post.method is not None:
                    prune_stats = prune(root, data, post.method, cf=post.cf,
                                        subtree_raising=post.subtree_raising,
                                        validation=post.validation, rows=rows)
        finally:
            engine.cleanup()
    stats = {
        "engine": engine.dialect,
        "source": data.relation.meta.get("sqltree_source"),
        "rows": data.n_rows,
        "rows_null_target": data.n_null_target,
        "training_weight": sum(data.class_weights),
        **grow_stats.to_dict(),
        "plan_reason": memory if grow_stats.plan == MEMORY else
        (("asked for" if plan == SCAN else SCAN_REASON) if grow_stats.plan == SCAN
         else _sql_reason(engine, memory)),
        "pruning": vars(prune_stats) if prune_stats is not None else None,
        "seconds": round(time.perf_counter() - started, 6),
        "sqltree_version": __version__,
    }
    return Model(
        root=root,
        classes=list(data.classes),
        target=target,
        task=options.task,
        features=features_info(data.features),
        options=vars(options) | {"weight": roles["weight"], "pruning": post.method,
                                 "cf": post.cf, "subtree_raising": post.subtree_raising},
        stats=stats,
    )


def _sql_reason(engine: Any, memory: str | None) -> str:
    """Why the tree grew on the engine's plan (an algorithm without an in-memory scorer
    asked for memory falls back to it)."""
    if memory is None:
        return str(engine.plan_reason)
    return f"no in-memory scorer for this algorithm or criterion; {engine.plan_reason}"


def _read(
    source: Any, engine: Any, target: str, roles: dict[str, Any], task: str = "classification"
) -> Dataset:
    """``describe`` the source, reported as the phase ``"read"``."""
    with reporting.phase("read", f"reading {describe_source(source)} on {engine.NAME}") as phase:
        data = describe(source, engine, target, **roles, task=task)
        phase.done(
            f"read {reporting.rows(data.n_rows)} rows, "
            f"{reporting.count(len(data.features), 'feature')}, "
            f"{reporting.count(len(data.classes), 'class', 'classes')}, {phase.seconds:.2f} s",
            rows=data.n_rows, features=len(data.features), classes=len(data.classes),
        )
    return data


def split_scores(
    source: Any,
    target: str,
    *,
    connection: Any = None,
    features: Sequence[str] | None = None,
    nominal: Sequence[str] = (),
    continuous: Sequence[str] = (),
    weight: str | None = None,
    plan: str = "auto",
    task: str = "classification",
    date_features: bool = False,
) -> pandas.DataFrame:
    """Every candidate split at the root, scored in the engine.

    One row per nominal feature (its multiway split; ``threshold`` is NULL) and one per
    candidate threshold of a continuous feature (the test ``feature <= threshold``), with
    ``gain`` (information gain in bits, times the known fraction), ``split_info`` and
    ``gain_ratio``, uncorrected. ``plan`` as in ``train``.

    ``task="regression"`` (a numeric target): every binary split a regression tree's root
    considers (``a <= threshold`` of a continuous feature, a nominal feature's values ``left``
    against the ``right`` ones, cut in the order of their mean target), scored as CART's
    squared error scores it: ``variance_decrease`` (the weighted variance of the target less
    the children's weighted variance, per unit weight: ``improvement`` at the root),
    ``variance_after``, ``unknown_left`` (the rows whose value is unknown go left), and each
    side's rows and weight. ``date_features`` as in ``train``.
    """
    if task not in TASKS:
        raise OptionError(f"task must be one of {TASKS}, not {task!r}")
    check_plan(plan)
    engine = get_engine(connection)
    if task == "regression":
        return _regression_split_scores(source, target, engine, plan, features=features,
                                        nominal=nominal, continuous=continuous, weight=weight,
                                        date_features=date_features)
    try:
        engine.use_plan(plan)
        data = describe(
            source, engine, target,
            features=features, nominal=nominal, continuous=continuous, weight=weight,
            date_features=date_features,
        )
        level = engine.materialize("level", q.build_level0(data))
        hist = engine.materialize(
            "hist", q.build_histogram(level, data.features, len(data.classes),
                                      one_pass=engine.ONE_PASS_HISTOGRAM)
        )
        opts = score_options(GrowOptions(algorithm=ID3, min_cases=1.0), all_thresholds=True)
        rows = engine.execute(build_split_scores(hist, data.features, len(data.classes), opts))
    finally:
        engine.cleanup()
    by_index = {f.index: f for f in data.features}
    records = []
    for r in map(C45ScoreRow._make, rows):
        f = by_index[int(r.attr)]
        records.append(
            {
                "attribute": f.name,
                "kind": f.kind,
                "threshold": r.threshold,
                "gain": r.gain,
                "split_info": r.split_info,
                "gain_ratio": r.gain_ratio,
                "known_weight": r.w_known,
                "weight": r.w_all,
            }
        )
    import pandas as pd

    return pd.DataFrame.from_records(
        records,
        columns=["attribute", "kind", "threshold", "gain", "split_info", "gain_ratio",
                 "known_weight", "weight"],
    )


REGRESSION_SCORE_COLUMNS = ("attribute", "kind", "threshold", "left", "right", "unknown_left",
                            "variance_decrease", "variance_after", "n_left", "n_right",
                            "w_left", "w_right")
"""``split_scores(task="regression")``'s columns."""


def _regression_split_scores(source: Any, target: str, engine: Any, plan: str,
                             **roles: Any) -> pandas.DataFrame:
    from .algorithms.cart.regression import regression_split_scores

    try:
        engine.use_plan(plan)
        data = describe(source, engine, target, task="regression", **roles)
        rows = regression_split_scores(data)
    finally:
        engine.cleanup()
    kinds = {f.name: f.kind for f in data.features}
    import pandas as pd

    return pd.DataFrame.from_records(
        [{"attribute": r["feature"], "kind": kinds[r["feature"]],
          "threshold": r.get("threshold"), "left": r.get("left"), "right": r.get("right"),
          "unknown_left": r["unknown_left"], "variance_decrease": r["gain"],
          "variance_after": r["impurity_after"], **{k: r[k] for k in REGRESSION_SCORE_COLUMNS[-4:]}}
         for r in rows],
        columns=list(REGRESSION_SCORE_COLUMNS),
    )
