"""C4.5's and ID3's criteria in SQL: gain, split info and the minimum-weight rule.

Both are taken over the totals of a (node, feature) group of the level's histogram
(``node_feature_totals``): a nominal feature's multiway split from sums over its values, a
continuous feature's cut from the class sums up to the cut (``cuts``). Entropies are in
nats here, divided by ln 2 once at the end. The formulas are ``sqltree.criteria``'s, which the
tests hold these against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from ...criteria import J48_SMALL, TIE_TOLERANCE
from ...dataset import Feature
from ...fixed_point import from_fixed, to_fixed, weight, weight_sum
from ...queries import attr_in, of_features
from ...sqlexpr import alias, case, col, num, paren, safe_div, total, xlogx
from ...tree import CONTINUOUS

LN2 = math.log(2.0)


@dataclass(frozen=True)
class ScoreOptions:
    """What the scoring query needs to know besides the histogram."""

    min_cases: float = 2.0  # J48's -M: weight needed in two branches
    j48_min_split: bool = True  # continuous: both sides hold max(M, min(25, 0.1 * known / k))
    mdl: bool = True  # subtract log2(candidates) / N from a continuous gain (C4.5 release 8)
    all_thresholds: bool = False  # return every candidate threshold (split_scores), not the best
    ordered_scan: bool = False  # running sums by one streaming scan in (attr, node, v) order
    fractional: bool = True  # weights may be fractional: ordered scans sum in fixed point
    # The histogram's class columns are BIGINT counts of 2**-bits (``build_histogram``), whose
    # sums are exact; None: DOUBLE weights.
    bits: int | None = None
    # Sums of entropy terms over nominal values in fixed point of this many fractional bits
    # (``fixed_point_bits`` of a bound of them), so that they do not depend on the order an
    # engine adds them in; None: in floating point.
    entropy_bits: int | None = None
    unknown: str = "fractional"  # "drop": unknown weight leaves the node's gain and split info
    cut_gap: float = 0.0  # J48: no cut between sorted values v, v' unless v + 1e-5 < v'
    threshold_tie: float = TIE_TOLERANCE  # cuts whose gains are this close: the lowest wins


def entropy_mass(counts: Sequence[exp.Expression], weight: exp.Expression) -> exp.Expression:
    """``W * H(counts)`` in nats: ``W ln W - sum c ln c``."""
    out = xlogx(weight)
    for c in counts:
        out = out - xlogx(c)
    return paren(out)


@dataclass(frozen=True)
class SplitCriteria:
    """Gain, split info and validity of a split as SQL over its (node, feature)'s totals.

    The totals are ``node_feature_totals``'s columns under the alias ``a`` (or ``table``).
    """

    n_classes: int
    options: ScoreOptions

    def weight(self, table: str = "a") -> exp.Expression:
        """The weight gain and split info are taken over: all of it, or (drop) the known part."""
        return col("w_known", table) if self.options.unknown == "drop" else col("w_all", table)

    def unknown_weight(self, table: str = "a") -> exp.Expression:
        """The unknown weight, a branch of its own in split info (none with drop)."""
        return num(0.0) if self.options.unknown == "drop" else col("w_unknown", table)

    def parent_entropy(self) -> exp.Expression:
        """The entropy mass of the node's known weight."""
        known = [col(f"k{i}", "a") for i in range(self.n_classes)]
        return entropy_mass(known, col("w_known", "a"))

    def split_info(self, lw: exp.Expression, table: str = "a") -> exp.Expression:
        """Split info of a cut whose left side weighs ``lw``, with the totals in ``table``."""
        d = self.weight(table)
        rw = paren(col("w_known", table) - lw.copy())
        return safe_div(
            xlogx(d.copy()) - xlogx(lw.copy()) - xlogx(rw) - xlogx(self.unknown_weight(table)),
            d.copy() * num(LN2),
        )

    def min_split(self) -> exp.Expression:
        """Least weight on each side of a cut: J48's ``max(M, min(25, 0.1 * known / k))``, or
        ``M``."""
        options = self.options
        if not options.j48_min_split:
            return num(float(options.min_cases))
        raw = num(0.1) * col("w_known", "a") / num(float(self.n_classes))
        return case(
            (exp.LTE(this=raw, expression=num(float(options.min_cases))),
             num(float(options.min_cases))),
            (exp.GT(this=raw.copy(), expression=num(25.0)), num(25.0)),
            default=raw.copy(),
        )

    def cut(
        self, left: list[exp.Expression], lw: exp.Expression, scan: str = "s"
    ) -> dict[str, exp.Expression]:
        """Gain, split info and validity of a cut whose left side holds ``left`` (``lw``).

        ``scan`` names the relation of the cut's value and next value.
        """
        right = [paren(col(f"k{i}", "a") - left[i].copy()) for i in range(self.n_classes)]
        rw = paren(col("w_known", "a") - lw.copy())
        min_split = self.min_split()
        valid = exp.and_(
            exp.GT(this=lw.copy(), expression=paren(min_split - num(J48_SMALL))),
            exp.GT(this=rw.copy(), expression=paren(min_split.copy() - num(J48_SMALL))),
        )
        if self.options.cut_gap > 0:
            # C45Split only cuts where the next sorted value exceeds this one by more than
            # 1e-5; closer values are neither candidates nor counted in the MDL correction.
            valid = exp.and_(
                valid,
                exp.LT(
                    this=paren(col("v", scan) + num(self.options.cut_gap)),
                    expression=col("next_value", scan),
                ),
            )
        gain = safe_div(
            self.parent_entropy()
            - entropy_mass([e.copy() for e in left], lw.copy())
            - entropy_mass(right, rw.copy()),
            self.weight() * num(LN2),
        )
        return {"gain": gain, "split_info": self.split_info(lw), "valid": valid}


def node_feature_totals(
    hist: exp.Table, features: Sequence[Feature], classes: Sequence[str], options: ScoreOptions
) -> exp.Select:
    """Per (node, feature): totals over known values, unknown weight, nominal branch terms.

    Columns: node, attr, w_all, w_known, w_unknown, k<i> (known weight per class), bags_ent
    and bags_xlogx (sums over known values of their entropy mass and of ``t ln t``),
    big_branches, n_values, and, for an ordered scan in fixed point, f<i>: the k<i> as
    fixed-point sums (``to_fixed``).
    """
    bits = options.bits
    zero = num(0.0) if bits is None else num(0)
    raw_total = total(classes)  # fixed point with ``bits``
    tot = weight(raw_total, bits)
    is_known = col("v").is_(exp.null()).not_()
    is_unknown = col("v").is_(exp.null())

    def known(e: exp.Expression) -> exp.Expression:
        return case((is_known, e), default=zero)

    def entropy_sum(e: exp.Expression) -> exp.Expression:
        """The sum over known values of a nominal feature's entropy term ``e``."""
        ebits = options.entropy_bits
        if ebits is None:
            return exp.func("SUM", case((is_known, e), default=num(0.0)))
        # Only nominal tests use these; continuous rows are spared the logarithms.
        nominal = exp.and_(is_known.copy(), attr_in([f.index for f in features
                                                      if f.kind != CONTINUOUS]))
        return from_fixed(
            exp.func("SUM", case((nominal, to_fixed(e, ebits)), default=num(0))), ebits
        )

    scan_fixed = options.ordered_scan and not options.all_thresholds and (
        options.fractional or bits is not None
    )
    return (
        exp.select(
            col("node"),
            col("attr"),
            alias(weight_sum(raw_total, bits), "w_all"),
            alias(weight_sum(known(raw_total.copy()), bits), "w_known"),
            alias(
                weight_sum(case((is_unknown, raw_total.copy()), default=zero.copy()), bits),
                "w_unknown",
            ),
            *[alias(weight_sum(known(col(c)), bits), f"k{i}") for i, c in enumerate(classes)],
            alias(
                entropy_sum(entropy_mass([weight(col(c), bits) for c in classes], tot.copy())),
                "bags_ent",
            ),
            alias(entropy_sum(xlogx(tot.copy())), "bags_xlogx"),
            alias(
                exp.func(
                    "SUM",
                    case(
                        (
                            exp.and_(
                                is_known.copy(),
                                exp.GT(
                                    this=tot.copy(),
                                    expression=num(options.min_cases - J48_SMALL),
                                ),
                            ),
                            num(1),
                        ),
                        default=num(0),
                    ),
                ),
                "big_branches",
            ),
            alias(exp.func("COUNT", col("v")), "n_values"),
            *[
                alias(
                    exp.func(
                        "SUM",
                        known(col(c)) if bits is not None
                        else to_fixed(case((is_known.copy(), col(c)), default=num(0.0))),
                    ),
                    f"f{i}",
                )
                for i, c in enumerate(classes)
                if scan_fixed
            ],
        )
        .from_(hist.copy(), copy=False)
        .where(of_features(features), copy=False)
        .group_by(col("node"), col("attr"), copy=False)
    )
