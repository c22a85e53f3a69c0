"""Split criteria in plain Python over weighted counts.

The engine computes these in SQL during training; this module states the same formulas once
more for tests, pruning and explanation. Logarithms are base 2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

TIE_TOLERANCE = 1e-9
"""Scores closer than this are ties; ties go to the earlier feature, then the lower threshold."""

J48_SMALL = 1e-6
"""Weka's ``Utils.SMALL``: the tolerance of J48's weight comparisons, used for minimum counts."""


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
