"""CART regression trees: scikit-learn's ``DecisionTreeRegressor`` on the shared level loop.

The same plug-in as CART's classifier (``strategy.CARTStrategy``: stopping rules, choice,
best-first selection, plans), over another histogram. Level 0 holds the target less its
weighted mean (computed once, in SQL, by ``dataset.describe``), and the histogram keeps, per
(node, feature, value), ``SUM(w)``, ``SUM(w*y)`` and ``SUM(w*y*y)`` in the class columns' place
(``queries.MOMENTS``). Every candidate's sums come from the same stages as the classifier's
(running sums over the values, unknown values on either side); ``scores._regression_gains``
turns them into the weighted variance decrease. A node's impurity is its weighted variance, its
value the weighted mean of the target.

Centring keeps the variance of a target far from zero exact: ``SUM(w*y*y) - SUM(w*y)^2 / SUM(w)``
of raw values near 1e9 would lose every digit of a spread near 1.

``friedman_mse`` grows the same splits (Friedman's score ``wl wr (mean_l - mean_r)^2 / w`` is
the variance decrease times the node's weight, constant within a node) and reports the same
impurities; its improvement, which ``min_impurity_decrease`` and best-first growth compare, is
Friedman's score itself, as scikit-learn defined it up to 1.8. ``poisson`` keeps the target
uncentred (its histogram sums ``w*y*LN(y)``, ``poisson_terms``): a node's impurity is its half
Poisson deviance, and a target with a negative value or a sum that is not positive is refused
before growth, as scikit-learn refuses it.
"""

from __future__ import annotations

import math
from typing import Any

from sqlglot import exp

from ... import queries as q
from ...criteria import TIE_TOLERANCE
from ...dataset import Dataset, Feature
from ...errors import DataError
from ...grower import GrowOptions, Strategy
from ...quantiles import bin_edges
from ...running_sums import wide_fixed_bits
from ...sqlexpr import case, col, num, paren
from ...tree import CONTINUOUS, Node
from .scores import FEATURE_THRESHOLD, POISSON_EPSILON, REGRESSION, SCORE_COLUMNS, build_cart_scores
from .strategy import CARTStrategy, NodeInfo, resolve_options
from .subsets import MEAN_ORDER


def variance(w: float, s1: float, s2: float) -> float:
    """Weighted variance from the sums of ``w``, ``w*y`` and ``w*y*y`` (never below 0)."""
    if w <= 0:
        return 0.0
    mean = s1 / w
    return max(s2 / w - mean * mean, 0.0)


def half_poisson_deviance(w: float, s1: float, s2: float) -> float:
    """Mean half Poisson deviance from the sums of ``w``, ``w*y`` and ``w*y*LN(y)``:
    ``(s2 - s1 LN(s1/w)) / w``; infinite for a target sum of at most ``POISSON_EPSILON``
    (scikit-learn's ``poisson_loss``)."""
    if w <= 0:
        return 0.0
    if s1 <= POISSON_EPSILON:
        return math.inf
    return max((s2 - s1 * math.log(s1 / w)) / w, 0.0)


class RegressionStrategy(CARTStrategy):
    """CART as scikit-learn's ``DecisionTreeRegressor(splitter="best")`` grows it."""

    def __init__(self, data: Dataset, options: GrowOptions) -> None:
        Strategy.__init__(self, data, options)
        if options.criterion not in REGRESSION:
            raise ValueError(
                f"a regression tree's criterion must be one of {REGRESSION}, "
                f"not {options.criterion!r}"
            )
        if data.target_mean is None:
            raise ValueError("a regression tree needs a dataset described for regression")
        if data.infinite:
            raise DataError(
                f"columns holding +infinity: {data.infinite}; CART (like scikit-learn) needs "
                "finite values: replace them"
            )
        if options.criterion == "poisson":
            _check_poisson_target(data)
        self.poisson = options.criterion == "poisson"
        self.centre = 0.0 if self.poisson else data.target_mean
        self.n_classes = q.MOMENTS
        self.criterion = options.criterion
        self.info: dict[int, NodeInfo] = {}
        self.values: dict[int, float] = {}
        self.resolved = None
        self.root_weight = 0.0
        self._class_weight = None
        self.score_columns = SCORE_COLUMNS
        self.hist_bits = None
        self.tie_tolerance = TIE_TOLERANCE
        self.nominal_orders = [MEAN_ORDER]

    def prior(self) -> list[float]:
        return [1.0]

    def build_level0(self) -> exp.Expression:
        if self.options.max_bins:
            self.bins = bin_edges(self.data, self.options.max_bins, FEATURE_THRESHOLD)
        return q.build_level0(
            self.data, self.bins, lookup=self.data.engine.VECTORIZED, centre=self.centre,
        )

    def rowwise(self, features: list[Feature]) -> list[int]:
        # Only the ordered scan reads a histogram of rows.
        return super().rowwise(features) if self.moment_bits() is not None else []

    def moment_bits(self) -> list[int | None] | None:
        """The fixed-point scale of each moment in the ordered scan (``running_sums.
        to_wide_fixed``), or None where the engine has no such scan (windows per (node,
        feature) instead) or the target's range is unknown or too wide for one.

        The scan's sums run across every continuous feature's groups of a level, each
        feature's adding up to the level's total: so a moment's partial sums are at most
        the number of continuous features times the root's sum of ``|term|``, bounded by its
        weight times the largest ``|y|``, ``y*y`` or ``|y LN y|`` (at most ``1/e`` below 1).
        A factor of 2 covers the rounding of the centred ``y``. Unit weights' sums are whole
        numbers, exact in DOUBLE: their scale is None (summed as they are, as classification's).
        """
        data = self.data
        if not data.engine.SUPPORTS_ORDERED_SCAN or data.target_max is None:
            return None
        assert data.target_min is not None and data.target_mean is not None
        if self.poisson:
            top = max(data.target_max, 0.0)
            spread = [top, max(1 / math.e, top * abs(math.log(top)) if top > 0 else 0.0)]
        else:
            top = max(data.target_max - data.target_mean, data.target_mean - data.target_min)
            spread = [top, top * top]
        scanned = 2.0 * max(sum(f.kind == CONTINUOUS for f in data.features), 1)
        weight = float(sum(data.class_weights))
        bounds = [scanned * weight * factor for factor in (1.0, *spread)]
        if not all(math.isfinite(b) for b in bounds):
            return None
        bits: list[int | None] = [wide_fixed_bits(b) for b in bounds]
        if data.weight is None:
            bits[0] = None
        return bits

    def build_histogram(
        self, level: exp.Table, features: list[Feature], nodes: int = 1
    ) -> exp.Expression:
        moments = poisson_terms() if self.poisson else q.moment_terms()
        return q.build_histogram(
            level, features, q.MOMENTS, rowwise=self.rowwise(features), counts=True,
            moments=moments, one_pass=self.data.engine.ONE_PASS_HISTOGRAM,
        )

    def read_counts(self, engine: Any, hist: exp.Table) -> dict[int, list[float]]:
        return self.take_counts(engine.execute(q.build_node_counts(hist, q.MOMENTS, counts=True)))

    def take_counts(self, rows: Any) -> dict[int, list[float]]:
        """Each node's weight as its one count, from rows ``(node, n, w, w*y, c2)``; its
        impurity and mean kept aside."""
        impurity = half_poisson_deviance if self.poisson else variance
        assert self.centre is not None
        out: dict[int, list[float]] = {}
        for node_id, n, w, s1, s2 in rows:
            w, s1, s2 = float(w), float(s1), float(s2)
            out[int(node_id)] = [w]
            info = self.info.setdefault(int(node_id), NodeInfo())
            info.n_samples = int(n)
            info.impurity = impurity(w, s1, s2)
            self.values[int(node_id)] = s1 / w + self.centre if w > 0 else 0.0
        if self.resolved is None:
            n_root = sum(self.info[i].n_samples for i in out)
            self.root_weight = sum(c[0] for c in out.values())
            self.resolved = resolve_options(self.options, n_root, self.root_weight)
            # Gains are impurities: ties are judged relative to the root's.
            root_impurity = max((self.info[i].impurity for i in out), default=0.0)
            self.tie_tolerance = TIE_TOLERANCE * max(root_impurity, 1e-300)
        return out

    def improvement_of(self, weight: float, gain: float) -> float:
        if self.criterion == "friedman_mse":
            # Friedman's improvement: the variance decrease times the node's weight
            return weight * gain
        return super().improvement_of(weight, gain)

    def build_scores(self, hist: exp.Table, features: list[Feature]) -> exp.Expression:
        r = self.resolved
        assert r is not None
        return build_cart_scores(
            hist,
            features,
            q.MOMENTS,
            criterion=self.criterion,
            min_samples_leaf=r.min_samples_leaf,
            min_weight_leaf=r.min_weight_leaf,
            ordered_scan=self.data.engine.SUPPORTS_ORDERED_SCAN,
            fractional=False,
            tie_tolerance=self.tie_tolerance,
            moment_bits=self.moment_bits(),
        )

    def finish(self, root: Node) -> Node:
        """CART's numbers on every node, and each node's weighted mean target."""
        root = super().finish(root)
        for node in root.walk():
            if node.node_id in self.values:
                node.value = self.values[node.node_id]
        return root



def poisson_terms() -> list[exp.Expression]:
    """A level row's terms of a Poisson histogram: ``w``, ``w*y`` and ``w*y*LN(y)`` of the
    uncentred target (0 for y = 0, the limit scipy's ``xlogy`` takes; ``LN(0)`` is an error
    on PostgreSQL and Spark)."""
    w, y = col("w"), col("y")
    y_log_y = case(
        (exp.GT(this=y.copy(), expression=num(0.0)),
         paren(w.copy() * y.copy() * exp.func("LN", y.copy()))),
        default=num(0.0),
    )
    return [w, paren(w.copy() * y), y_log_y]


def _check_poisson_target(data: Dataset) -> None:
    """scikit-learn's refusals: the Poisson deviance needs y >= 0 and a positive sum."""
    if data.target_min is not None and data.target_min < 0:
        raise DataError(
            f"the target {data.target!r} holds negative values (the least is "
            f"{data.target_min!r}), which criterion='poisson' cannot fit: the Poisson "
            "deviance needs y >= 0"
        )
    if data.target_sum is not None and data.target_sum <= 0:
        raise DataError(
            f"the target {data.target!r} sums to {data.target_sum!r}; criterion='poisson' "
            "needs a positive sum (a mean of zero predicts no count)"
        )
