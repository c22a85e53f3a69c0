"""Random forests: many trees grown in the same level scans, bagged by a hash of each row.

Every tree of a batch is grown in the same requests (``growth.grow_level_wise``): the
statements per level do not depend on how many trees there are. A row's count in tree ``t``
is drawn from a hash of its number and the tree's constants (``rows.py``), computed the same
way in every engine and in numpy, so the same seed gives the same forest everywhere. The
features a node may split on (``max_features``) are drawn by the planner from the seed, the
tree's number and the node's place in its tree.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..algorithm_registry import RANDOM_FOREST
from ..dataset import Dataset
from ..ensemble import Ensemble, TreeArrays
from ..ensemble.evaluation import training_classes
from ..errors import OptionError, UnsupportedOptionError
from ..model import features_info
from .backends import Backend, Route, Start
from .encode import Encoded, encode
from .gains import ROWS, Criterion, criterion
from .growth import Grown, GrowthOptions, LevelStats, grow_level_wise
from .rows import Sampling, tree_constants
from .splitter import Layout, Rules

PAIRS_PER_BATCH = 40_000_000
"""(row, tree) pairs held at once, at most: the trees of a forest are grown in batches of
about this many rows (a 1M-row table: 40 trees a batch), which bounds the engine's working
table."""

BATCH_BYTES = 512 * 2**20
"""About the memory one batch of trees may take at its largest level (as Spark MLlib's
``maxMemoryInMB`` bounds its groups of nodes): the engine's aggregate and the sparse
histogram read from it hold about ``ENTRY_BYTES`` per histogram row, and a level has at most
a row per (drawn row, sampled feature), or per (node, feature, code, class) at the last
level. Batches change no tree (the trees of a batch share statements, nothing else)."""

ENTRY_BYTES = 80
"""Peak memory per histogram row, measured: 100 trees at 100,000 rows read 25M (drawn row,
feature) pairs at depth 9 into 11M rows in about 1.9 GB above the process's base."""

DEFAULT_MAX_BINS = 255


@dataclass(frozen=True)
class ForestOptions:
    """A random forest's options, with scikit-learn's names and meanings where it has them."""

    n_estimators: int = 100
    criterion: str = "gini"
    max_depth: int | None = None
    min_samples_split: float = 2
    min_samples_leaf: float = 1
    min_weight_fraction_leaf: float = 0.0
    max_features: Any = "sqrt"
    min_impurity_decrease: float = 0.0
    bootstrap: bool = True
    max_samples: float | int | None = None
    random_state: int = 0
    max_bins: int = DEFAULT_MAX_BINS
    oob_score: bool = False

    def check(self) -> None:
        if not isinstance(self.n_estimators, int) or self.n_estimators < 1:
            raise OptionError(f"n_estimators must be a positive integer, not {self.n_estimators!r}")
        if not isinstance(self.max_bins, int) or not 2 <= self.max_bins <= 65_535:
            raise OptionError(f"max_bins must be an integer from 2 to 65535, not {self.max_bins!r}")
        if self.max_depth is not None and (not isinstance(self.max_depth, int)
                                           or self.max_depth < 1):
            raise OptionError(f"max_depth must be a positive integer or None, not "
                              f"{self.max_depth!r}")
        if not isinstance(self.random_state, int) or isinstance(self.random_state, bool):
            raise OptionError(f"random_state must be an integer, not {self.random_state!r}")
        if self.max_samples is not None:
            m = self.max_samples
            if isinstance(m, bool) or not isinstance(m, (int, float)) or m <= 0 or (
                    isinstance(m, float) and m > 1):
                raise OptionError(f"max_samples must be None, a fraction in (0, 1] or a "
                                  f"positive number of rows, not {m!r}")
        if self.oob_score and not self.bootstrap:
            raise OptionError("oob_score needs bootstrap=True: without it no row is out of bag")
        for name in ("min_samples_split", "min_samples_leaf", "min_impurity_decrease",
                     "min_weight_fraction_leaf"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise OptionError(f"{name} must be a non-negative number, not {value!r}")
        self.n_features(1)  # the form of max_features

    def n_features(self, total: int) -> int:
        """How many features a node may choose from (scikit-learn's ``max_features``)."""
        m = self.max_features
        if m is None:
            return total
        if m == "sqrt":
            return max(1, int(math.sqrt(total)))
        if m == "log2":
            return max(1, int(math.log2(total)))
        if isinstance(m, bool):
            raise OptionError(f"max_features must be 'sqrt', 'log2', a number or None, not {m!r}")
        if isinstance(m, int):
            if m < 1:
                raise OptionError(f"max_features must be at least 1, not {m}")
            return min(m, total)
        if isinstance(m, float) and 0.0 < m <= 1.0:
            return max(1, int(m * total))
        raise OptionError(f"max_features must be 'sqrt', 'log2', an integer, a fraction in "
                          f"(0, 1] or None, not {m!r}")

    def sampling(self, n_rows: int) -> Sampling:
        m = self.max_samples
        fraction = 1.0 if m is None else float(m) if isinstance(m, float) else min(
            1.0, m / max(n_rows, 1))
        return Sampling(bootstrap=self.bootstrap, fraction=fraction)


@dataclass
class ForestProgress:
    """What a forest reports as it grows: its trees' batch and each level's request."""

    first_tree: int
    trees: int
    level: LevelStats


def train_forest(
    data: Dataset,
    options: ForestOptions,
    *,
    class_weight: list[float] | None = None,
    in_memory: bool = False,
    on_level: Callable[[ForestProgress], None] | None = None,
) -> Ensemble:
    """Grow a forest on ``data`` in its engine (or, ``in_memory``, with its rows read out once
    into numpy), in batches of trees that share every level's request."""
    options.check()
    task = "regression" if not data.classes else "classification"
    if data.infinite:
        raise UnsupportedOptionError(
            f"columns holding +infinity: {data.infinite}; a forest's bins (like scikit-learn) "
            "need finite values: filter or cap them first")
    crit = _criterion(options.criterion, task)
    started = time.perf_counter()
    # the Poisson deviance needs the target itself; the other criteria keep their sums of
    # squares precise with the target less its mean
    # partitioned by the row number: every level joins the drawn rows to their codes on it
    # (on Spark, 8 trees at 1M rows took 60.4 s instead of 75.7 s)
    encoded = encode(data, options.max_bins, class_weight=class_weight, in_memory=in_memory,
                     centred=crit.name != "poisson", partitioned=True)
    backend = encoded.numpy_backend() if in_memory else encoded.sql_backend()
    sampling = options.sampling(data.n_rows)
    n_features = options.n_features(len(data.features))
    total_weight = float(sum(data.class_weights))
    growth = GrowthOptions(
        max_depth=options.max_depth,
        min_samples_split=float(options.min_samples_split),
        rules=Rules(
            min_samples_leaf=float(options.min_samples_leaf),
            min_weight_leaf=options.min_weight_fraction_leaf * total_weight,
            min_gain=options.min_impurity_decrease * total_weight,
        ),
        max_features=n_features,
        seed=options.random_state,
    )
    constants = tree_constants(options.random_state, options.n_estimators)
    per_batch = trees_per_batch(options, data.n_rows, n_features, encoded.layout,
                                len(data.classes))
    trees: list[TreeArrays] = []
    levels: list[dict[str, Any]] = []
    try:
        for first in range(0, options.n_estimators, per_batch):
            count = min(per_batch, options.n_estimators - first)
            roots = [None if sampling.everything else tuple(int(k) for k in constants[t])
                     for t in range(first, first + count)]

            def report(level: LevelStats, first: int = first, count: int = count) -> None:
                levels.append({"trees": [first, first + count], **asdict(level)})
                if on_level:
                    on_level(ForestProgress(first, count, level))

            grown, _ = grow_level_wise(backend, encoded.layout, crit, growth, roots,  # type: ignore[arg-type]
                                       sampling, report, first_tree=first)
            trees.extend(to_arrays(g, encoded, crit) for g in grown)
            if options.oob_score:
                _vote_out_of_bag(backend, grown, roots, sampling, crit, encoded)
        _fill_empty_roots(trees)
        oob = _oob_summary(backend, len(data.classes)) if options.oob_score else None
    finally:
        backend.close()
        if encoded.table is not None:
            data.engine.drop(encoded.table)
    stats = {
        "engine": data.engine.dialect,
        "rows": data.n_rows,
        "rows_null_target": data.n_null_target,
        "plan": "memory" if in_memory else "tables",
        **training_classes(data),
        "batches": math.ceil(options.n_estimators / per_batch),
        "levels": levels,
        "seconds": round(time.perf_counter() - started, 6),
    }
    if oob is not None:
        stats["oob"] = oob
    return Ensemble(
        trees=trees,
        features=features_info(data.features),
        target=data.target,
        task=task,
        classes=list(data.classes),
        aggregation="mean",
        link="identity",
        options={"algorithm": RANDOM_FOREST, **asdict(options),
                 "weight": data.weight, "class_weight": class_weight},
        stats=stats,
    )


def trees_per_batch(options: ForestOptions, n_rows: int, n_features: int, layout: Layout,
                    n_classes: int) -> int:
    """How many trees grow in the same statements: as many as ``BATCH_BYTES`` holds
    (``tree_bytes``), and ``PAIRS_PER_BATCH`` rows."""
    by_memory = int(BATCH_BYTES // max(tree_bytes(options, n_rows, n_features, layout,
                                                  n_classes), 1.0))
    by_rows = PAIRS_PER_BATCH // max(n_rows, 1)
    return max(1, min(by_memory, by_rows, options.n_estimators))


def tree_bytes(options: ForestOptions, n_rows: int, n_features: int, layout: Layout,
               n_classes: int) -> float:
    """About the memory one tree adds to its batch's largest level: a histogram row per
    drawn row and feature its node samples, or, deep down, at most one per node, feature,
    code and class."""
    sampling = options.sampling(n_rows)
    drawn = n_rows * (1.0 if sampling.everything else sampling.fraction if not
                      sampling.bootstrap else 1.0 - math.exp(-sampling.fraction))
    rows = drawn * n_features
    if options.max_depth is not None and layout.features:
        widest = max(f.n_codes for f in layout.features)
        nodes = 2.0 ** min(options.max_depth - 1, 62)
        rows = min(rows, nodes * n_features * widest * max(n_classes, 1))
    return rows * ENTRY_BYTES


def _vote_out_of_bag(backend: Backend, grown: list[Grown], roots: list[Any],
                     sampling: Sampling, crit: Criterion, encoded: Encoded) -> None:
    """Route every tree's out-of-bag rows to its leaves, one statement per level for all the
    batch's trees, and add the leaves' values to each row's sums."""
    base = [0]
    for g in grown[:-1]:
        base.append(base[-1] + len(g.feature))
    backend.start([Start(base[t], roots[t]) for t in range(len(grown))], sampling,
                  out_of_bag=True)
    depth = max((max(g.depth) for g in grown if g.depth), default=0)
    layout = encoded.layout
    for level in range(depth):
        routes = [
            Route(node=base[t] + i, feature=g.feature[i], missing_left=g.missing_left[i],
                  upto=g.upto[i], left_codes=g.left_codes[i],
                  nominal=layout.features[g.feature[i]].kind == "nominal",
                  left=base[t] + g.left[i], right=base[t] + g.right[i],
                  scan_left=False, scan_right=False)
            for t, g in enumerate(grown) for i in range(len(g.feature))
            if g.depth[i] == level and g.feature[i] >= 0
        ]
        if routes:
            backend.route(routes, keep=True)
    leaves = {}
    for t, g in enumerate(grown):
        for i in range(len(g.feature)):
            if g.feature[i] < 0 and g.stats[i][ROWS] > 0:
                leaves[base[t] + i] = np.atleast_1d(crit.value(g.stats[i]))
    if leaves:
        backend.add_votes(leaves)


def _oob_summary(backend: Backend, n_classes: int) -> dict[str, Any]:
    """scikit-learn's ``oob_score_`` (accuracy, or R^2) over the rows some tree left out, and
    the confusion matrix (rows: true class, columns: predicted) or the regression sums."""
    summary = backend.votes_summary(n_classes)
    if n_classes:
        total = float(summary.sum())
        return {"score": float(np.trace(summary)) / total if total else 0.0,
                "rows": int(total), "confusion": summary.astype(int).tolist()}
    n, sy, syy, sse = (float(v) for v in summary)
    sst = syy - sy * sy / n if n else 0.0
    return {"score": 1.0 - sse / sst if sst > 0 else 0.0, "rows": int(n)}


def _fill_empty_roots(trees: list[TreeArrays]) -> None:
    """A tree whose bootstrap drew no row (possible on a few rows only) predicts the mean of
    the other trees' roots (the class shares or the mean of the rows they drew)."""
    drawn = [t for t in trees if t.weight[0] > 0]
    if not drawn or len(drawn) == len(trees):
        return
    mean = np.mean([t.value[0] for t in drawn], axis=0)
    for t in trees:
        if t.weight[0] <= 0:
            t.value[0] = mean


def _criterion(name: str, task: str) -> Criterion:
    if task == "regression" and name == "gini":
        name = "squared_error"
    return criterion(name, task=task)


def to_arrays(grown: Grown, encoded: Encoded, crit: Criterion) -> TreeArrays:
    """A grown tree as flat arrays: thresholds and categories read back from the codes,
    values and weights in the statistics' units."""
    n = len(grown.feature)
    stats = np.stack(grown.stats) if n else np.zeros((0, 1))
    value = crit.value(stats)
    if encoded.centre is not None:
        value = value + encoded.centre
    threshold, categories = encoded.tests(grown.feature, grown.upto, grown.left_codes)
    return TreeArrays(
        feature=np.asarray(grown.feature),
        threshold=threshold,
        left=np.asarray(grown.left),
        right=np.asarray(grown.right),
        missing_left=np.asarray(grown.missing_left),
        value=value,
        weight=crit.weight(stats) if n else np.zeros(0),
        gain=np.asarray(grown.gain, dtype=np.float64),
        categories=categories,
    )


__all__ = ["ROWS", "ForestOptions", "ForestProgress", "to_arrays", "train_forest"]
