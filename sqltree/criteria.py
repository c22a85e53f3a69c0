"""Split criteria in plain Python over weighted counts.

The engine computes these in SQL during training; this module states the same formulas once
more for tests, pruning and explanation. Logarithms are base 2.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from statistics import NormalDist

TIE_TOLERANCE = 1e-9
"""Scores closer than this are ties; ties go to the earlier feature, then the lower threshold."""

J48_SMALL = 1e-6
"""Weka's ``Utils.SMALL``: the tolerance of J48's weight comparisons, used for minimum counts."""

PROBA_TIE = 1e-9
"""Class probabilities closer than this tie (``predicted_class``)."""


def predicted_class(proba: Sequence[float]) -> int:
    """The index of the class that class probabilities predict: the first class whose
    probability is within ``PROBA_TIE`` of the largest.

    The one rule for a leaf's class and a row's prediction: ``Node.label`` (and so the
    exporters and pruning's error counts) and ``Model.predict_row`` call it, and the compiled
    SQL states it as a CASE over the same comparisons (``compiler.closed_form.build_argmax``).
    A tolerance rather than exact ties: probabilities that are equal in exact arithmetic (a
    fractional row spread over branches) may differ in their last bits, by summation order.

    Examples
    --------
    >>> predicted_class([0.25, 0.75])
    1
    >>> predicted_class([0.5, 0.5 + 1e-12])
    0
    """
    best = max(proba)
    return next(i for i, p in enumerate(proba) if p >= best - PROBA_TIE)


def entropy(counts: Sequence[float]) -> float:
    """Entropy in bits of a class distribution given as weights."""
    total = sum(counts)
    if total <= 0:
        return 0.0
    return -sum(c / total * math.log2(c / total) for c in counts if c > 0)


def information_gain(
    branches: Sequence[Sequence[float]], unknown: Sequence[float] | None = None
) -> float:
    """Gain of a split with branch class weights; unknown weight scales it down (C4.5)."""
    known = [sum(col) for col in zip(*branches)]
    w_known = sum(known)
    w_unknown = sum(unknown) if unknown else 0.0
    if w_known <= 0:
        return 0.0
    after = sum(sum(b) / w_known * entropy(b) for b in branches)
    return w_known / (w_known + w_unknown) * (entropy(known) - after)


def split_info(
    branches: Sequence[Sequence[float]], unknown: Sequence[float] | None = None
) -> float:
    """Entropy of the branch weights, the unknown weight counted as one more branch."""
    weights = [sum(b) for b in branches] + ([sum(unknown)] if unknown else [])
    return entropy(weights)


def gain_ratio(
    branches: Sequence[Sequence[float]], unknown: Sequence[float] | None = None
) -> float:
    si = split_info(branches, unknown)
    return information_gain(branches, unknown) / si if si > 0 else 0.0


def impurity(counts: Sequence[float], criterion: str = "gini") -> float:
    """Gini or entropy (bits) of weighted class counts, computed as scikit-learn does."""
    w = sum(counts)
    if w <= 0:
        return 0.0
    if criterion == "gini":
        sq = 0.0
        for c in counts:
            sq += c * c
        return 1.0 - sq / (w * w)
    out = 0.0
    for c in counts:
        if c > 0:
            p = c / w
            out -= p * (math.log(p) / math.log(2.0))
    return out


# -- C4.5's pessimistic error: J48's pruning and C4.5rules' rule generalisation --------------
def add_errs(n: float, e: float, cf: float = 0.25) -> float:
    """Extra errors C4.5 adds to ``e`` observed errors among ``n`` cases (J48's Stats.addErrs).

    The upper limit of the binomial confidence interval at confidence ``cf``: exact for
    ``e == 0`` (``n * (1 - cf ** (1 / n))``), interpolated linearly for ``0 < e < 1``, the
    normal approximation with continuity correction above, and ``n - e`` once ``e + 0.5 >= n``.
    """
    if cf > 0.5:
        return 0.0  # J48 refuses to modify the estimate for a confidence this high
    if e < 1:
        base = n * (1 - cf ** (1 / n))
        if e == 0:
            return base
        return base + e * (add_errs(n, 1, cf) - base)
    if e + 0.5 >= n:
        return max(n - e, 0.0)
    z = _z(cf)
    f = (e + 0.5) / n
    r = (f + z * z / (2 * n) + z * math.sqrt(f / n - f * f / n + z * z / (4 * n * n))) / (
        1 + z * z / n
    )
    return r * n - e


@functools.lru_cache(maxsize=8)
def _z(cf: float) -> float:
    """The normal quantile of ``1 - cf`` (once per confidence: a grown tree has a million
    leaves to estimate)."""
    return NormalDist().inv_cdf(1 - cf)
