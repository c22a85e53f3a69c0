"""Fixed-point weights: sums of weights that are exact whatever order an engine adds them in.

A weight is written as an integer count of ``2**-bits`` (``to_fixed``), summed as integers,
and read back as a DOUBLE (``from_fixed``); ``fixed_point_bits`` chooses the scale from a bound
of the sums. The histogram, the running sums of a threshold scan and the criteria use these.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sqlglot import exp

from .sqlexpr import num, paren

if TYPE_CHECKING:
    from .dataset import Dataset

FIXED_POINT_BITS = 40
"""Fractional bits of the fixed-point sums an ordered scan takes of a DOUBLE histogram."""

FIXED_POINT_HEADROOM = 61
"""A bound on every sum of weights is scaled to below ``2**FIXED_POINT_HEADROOM``.

The per-row roundings then add at most half a unit per row, so a sum of a level's fixed-point
weights stays below 2^62: it fits a BIGINT (Spark sums BIGINT into BIGINT, and ANSI mode fails
on overflow), and it converts to DOUBLE correctly rounded on DuckDB (whose 128-bit integers
convert correctly rounded only below 2^64), PostgreSQL and Spark alike.
"""


def fixed_point_bits(bound: float) -> int:
    """Fractional bits for weights whose every sum (a node, a level) is at most ``bound``.

    The largest scale, a power of two, that keeps ``bound`` below ``2**FIXED_POINT_HEADROOM``:
    at a million unit weights 41 bits (a unit of 4.5e-13). A power of two keeps whole-number
    weights exact, and the conversion back to DOUBLE is then exact scaling of a correctly
    rounded integer, the same on every engine.
    """
    if not math.isfinite(bound):
        raise ValueError(f"a bound of the weights must be finite, not {bound}")
    _, exponent = math.frexp(bound if bound > 0 else 1.0)  # bound < 2**exponent
    return max(-FIXED_POINT_MAX_BITS, min(FIXED_POINT_MAX_BITS, FIXED_POINT_HEADROOM - exponent))


FIXED_POINT_MAX_BITS = 960
"""Limit of the fixed-point scale either way, so that ``2**bits`` and ``2**-bits`` are finite,
normal doubles."""


def training_weight_bits(data: Dataset) -> int:
    """Fractional bits of the fixed point that sums a level's weights: every such sum is at
    most the training weight (unknown values are spread by shares that add up to one), so one
    scale serves every level, whatever rows a statement sums."""
    return fixed_point_bits(sum(data.class_weights))


def entropy_bound(total_weight: float, n_classes: int, n_rows: int) -> float:
    """A bound of the entropy sums over a node's values (``c45.criteria.node_feature_totals``).

    A value of weight ``t`` adds ``t H`` (at most ``t ln k``) and ``t ln t`` (at least
    ``-1/e``, at most ``t ln W``), and a node has at most ``n_rows`` values.
    """
    w = total_weight if total_weight > 0 else 1.0
    return w * (abs(math.log(w)) + math.log(max(n_classes, 2)) + 1.0) + n_rows


def to_fixed(e: exp.Expression, bits: int | None = None) -> exp.Expression:
    """A non-negative weight as an integer count of ``2**-bits``, rounded to the nearest.

    Sums of such integers are exact whatever order an engine adds them in (DuckDB and Spark
    add a group's doubles in an order that changes from run to run, so sums of fractional
    weights differ in their last bits). ``FLOOR(x + 1/2)`` rounds the same way on every engine
    (casts do not: Spark truncates, PostgreSQL rounds half to even), and ``x`` is a product
    with a power of two, so exact. With ``bits`` the result is a BIGINT (``fixed_point_bits``
    keeps it in range); without, a 128-bit count of 2^-40ths (``FIXED_POINT_BITS``, DuckDB
    only), for an ordered scan over a DOUBLE histogram, whose sums run across every group of
    a level: in floating point, a group's own sums would be differences of two large running
    totals, which lost about 1e-6 at a million rows, enough to move a cut across the
    minimum-weight rule or a tie.
    """
    if bits is None:
        return exp.cast(paren(e * num(float(2**FIXED_POINT_BITS))), "HUGEINT")
    scaled = exp.func("FLOOR", paren(e) * num(2.0**bits) + num(0.5))
    return exp.cast(scaled, "BIGINT")


def from_fixed(e: exp.Expression, bits: int | None = None) -> exp.Expression:
    """An integer count of ``2**-bits`` (``to_fixed``) as a DOUBLE weight."""
    scale = 2.0 ** -(FIXED_POINT_BITS if bits is None else bits)
    return paren(exp.cast(paren(e), "DOUBLE") * num(scale))


def weight(e: exp.Expression, bits: int | None) -> exp.Expression:
    """A histogram weight as a DOUBLE: ``e`` itself, or ``from_fixed`` of it with ``bits``."""
    return e if bits is None else from_fixed(e, bits)


def weight_sum(e: exp.Expression, bits: int | None) -> exp.Expression:
    """``SUM(e)`` of histogram weights as a DOUBLE, exact with ``bits`` (fixed-point ``e``)."""
    return weight(exp.func("SUM", e), bits)
