"""CART regression trees: scikit-learn's ``DecisionTreeRegressor`` on the shared level loop.

The same plug-in as CART's classifier (``strategy.CARTStrategy``: stopping rules, choice,
best-first selection, plans), over another histogram. Level 0 holds the target as
``y' = (y - c) * 2**-k`` (``target_scale``: ``c`` the midpoint of its range, ``k`` so that
``|y'| < 1``), and the histogram keeps, per (node, feature, value), ``SUM(w)``, ``SUM(w*y')``
and ``SUM(w*y'*y')`` in the class columns' place (``queries.MOMENTS``), each row's term
rounded to an integer count of ``2**-hist_bits`` (``fixed_point.to_fixed``), as
classification's fractional weights are. Every sum after that is exact in any order, so
the tree, its impurities and its leaf values are the same to the last bit on every plan and
engine; the unit is about ``2**-60`` of the target's half-range per unit of the training
weight. Every candidate's sums come from the same stages as the classifier's (running sums
over the values, unknown values on either side); ``scores._regression_gains`` turns them
into the weighted variance decrease (of ``y'``, which is ``y``'s times ``4**-k``: a power of
two, so exact). A node's impurity is its weighted variance, its value the weighted mean of
the target.

Centring keeps the variance of a target far from zero exact: ``SUM(w*y*y) - SUM(w*y)^2 / SUM(w)``
of raw values near 1e9 would lose every digit of a spread near 1. The midpoint, unlike the
mean, is the same on every engine (a mean summed in parallel is not).

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
from ...fixed_point import fixed_point_bits, to_fixed
from ...grower import GrowOptions, Strategy
from ...quantiles import bin_edges
from ...sqlexpr import case, col, num, paren
from ...tree import CONTINUOUS, Node
from .scores import FEATURE_THRESHOLD, POISSON_EPSILON, REGRESSION, CARTScoreRow, build_cart_scores
from .strategy import EPSILON, CARTStrategy, NodeInfo, candidates_of, resolve_options
from .subsets import MEAN_ORDER, read_nominal_ranks


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


def target_scale(data: Dataset, poisson: bool) -> tuple[float, int]:
    """The centre ``c`` and scale ``k`` of a regression tree's level target
    ``y' = (y - c) * 2**-k``: the midpoint of the target's range, and the power of two above
    its half-width, so that ``|y'| < 1``. Poisson's target stays as it is (its deviance
    needs ``y`` itself, and is not centred): (0, 0).

    The least and greatest values are the same on every engine (a mean summed in parallel is
    not), so the level rows, and every sum of them after, are too.
    """
    if poisson:
        return 0.0, 0
    assert data.target_min is not None and data.target_max is not None
    centre = 0.5 * data.target_min + 0.5 * data.target_max
    half_width = max(data.target_max - centre, centre - data.target_min)
    return centre, math.frexp(half_width)[1] if half_width > 0 else 0


def moment_bound(data: Dataset, poisson: bool, scale: int) -> float:
    """A bound of every sum of a level's moment terms (``w``, ``w*y'``, ``w*y'*y'``, or
    Poisson's ``w*y*LN(y)``) in magnitude: the training weight times the largest term per
    unit weight (1 where ``|y'| < 1``), doubled for the roundings of ``y'``."""
    weight = float(sum(data.class_weights))
    if not poisson:
        return 2.0 * weight
    assert data.target_max is not None
    top = max(data.target_max, 0.0)
    per_weight = max(1.0, top, top * abs(math.log(top)) if top > 0 else 0.0)
    return 2.0 * weight * per_weight


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
        self.centre, self.scale = target_scale(data, self.poisson)
        # impurities and gains of y' = (y - centre) * 2**-scale, as powers of two of y's
        self.impurity_scale = self.scale if self.poisson else 2 * self.scale
        self.n_classes = q.MOMENTS
        self.criterion = options.criterion
        self.info: dict[int, NodeInfo] = {}
        self.values: dict[int, float] = {}
        self.resolved = None
        self.root_weight = 0.0
        self._class_weight = None
        self.hist_bits = fixed_point_bits(moment_bound(data, self.poisson, self.scale))
        self.tie_tolerance = TIE_TOLERANCE
        self.nominal_orders = [MEAN_ORDER]

    def prior(self) -> list[float]:
        return [1.0]

    def build_level0(self) -> exp.Expression:
        if self.options.max_bins:
            self.bins = bin_edges(self.data, self.options.max_bins, FEATURE_THRESHOLD)
        return q.build_level0(
            self.data, self.bins, lookup=self.data.engine.VECTORIZED, centre=self.centre,
            scale=self.scale,
        )

    def moment_terms(self) -> list[exp.Expression]:
        """A level row's terms of the histogram's sums, in fixed point (``to_fixed``)."""
        terms = poisson_terms() if self.poisson else q.moment_terms()
        return [to_fixed(t, self.hist_bits) for t in terms]

    def build_histogram(
        self, level: exp.Table, features: list[Feature], nodes: int = 1
    ) -> exp.Expression:
        return q.build_histogram(
            level, features, q.MOMENTS, (), self.rowwise(features), self.hist_bits,
            counts=True, moments=self.moment_terms(), one_pass=self.data.engine.ONE_PASS_HISTOGRAM,
        )

    def read_counts(self, engine: Any, hist: exp.Table) -> dict[int, list[float]]:
        return self.take_counts(
            engine.execute(q.build_node_counts(hist, q.MOMENTS, self.hist_bits, counts=True)))

    def take_counts(self, rows: Any) -> dict[int, list[float]]:
        """Each node's weight as its one count, from rows ``(node, n, w, w*y', c2)``; its
        impurity and mean (of ``y``, not ``y'``) kept aside."""
        impurity = half_poisson_deviance if self.poisson else variance
        out: dict[int, list[float]] = {}
        root_impurity = 0.0
        for node_id, n, w, s1, s2 in rows:
            w, s1, s2 = float(w), float(s1), float(s2)
            out[int(node_id)] = [w]
            info = self.info.setdefault(int(node_id), NodeInfo())
            info.n_samples = int(n)
            scaled = impurity(w, s1, s2)
            if scaled <= self._rounding(int(n), w, s1):
                scaled = 0.0  # a constant target, within the fixed point's rounding
            root_impurity = max(root_impurity, scaled)
            info.impurity = math.ldexp(scaled, self.impurity_scale)
            self.values[int(node_id)] = (
                math.ldexp(s1 / w, self.scale) + self.centre if w > 0 else 0.0)
        if self.resolved is None:
            n_root = sum(self.info[i].n_samples for i in out)
            self.root_weight = sum(c[0] for c in out.values())
            self.resolved = resolve_options(self.options, n_root, self.root_weight)
            # Gains are impurities (of y'): ties are judged relative to the root's.
            self.tie_tolerance = TIE_TOLERANCE * max(root_impurity, 1e-300)
        return out

    def _rounding(self, n: int, w: float, s1: float) -> float:
        """A bound of the impurity (of ``y'``) that rounding alone gives a node of ``n`` rows
        of weight ``w`` whose target is one value.

        Each row's three terms are rounded to a unit ``u = 2**-hist_bits``; for the
        variance the errors add up to at most ``n u (1 + |y'|)^2 / (2 w)`` (``|y'| < 1``),
        and its arithmetic a few roundings of ``y'^2 < 1``. The deviance's errors carry
        ``LN`` of the mean as well.
        """
        if w <= 0:
            return 0.0
        unit = math.ldexp(float(n), -self.hist_bits) / w
        if self.poisson:
            mean = s1 / w
            log = abs(math.log(mean)) if mean > 0 else 0.0
            return (2.0 * unit + 8.0 * EPSILON) * (2.0 + log) * max(mean, 1.0)
        return 2.0 * unit + 4.0 * EPSILON

    def improvement_of(self, weight: float, gain: float) -> float:
        gain = math.ldexp(gain, self.impurity_scale)
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
            bits=self.hist_bits,
            tie_tolerance=self.tie_tolerance,
        )

    def finish(self, root: Node) -> Node:
        """CART's numbers on every node, and each node's weighted mean target."""
        root = super().finish(root)
        for node in root.walk():
            if node.node_id in self.values:
                node.value = self.values[node.node_id]
        return root



def regression_split_scores(data: Dataset, *, criterion: str = "squared_error"
                            ) -> list[dict[str, Any]]:
    """Every valid binary split of the whole data set of a regression target, scored in SQL
    as a regression tree's root scores them: ``strategy.split_scores``' dicts, whose ``gain``
    is the impurity decrease per unit weight (the weighted variance decrease for squared
    error) and ``impurity_after`` the children's weighted impurity. Nominal values are cut in
    the order of their mean target (``MEAN_ORDER``), as growth cuts them.

    Examples
    --------
    >>> from sqltree.engines.duckdb import DuckDBEngine
    >>> from sqltree.dataset import describe
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "y": [1.0, 1.0, 3.0, 3.0]})
    >>> rows = regression_split_scores(describe(frame, DuckDBEngine(), "y", task="regression"))
    >>> [(r["threshold"], r["gain"]) for r in rows]
    [(1.5, 0.3333333333333333), (2.5, 1.0), (3.5, 0.3333333333333333)]
    """
    engine = data.engine
    options = GrowOptions(algorithm="cart", task="regression", criterion=criterion)
    strategy = RegressionStrategy(data, options)  # refuses what growth refuses
    level = engine.materialize("level", strategy.build_level0())
    hist = engine.materialize("hist", strategy.build_histogram(level, data.features))
    try:
        strategy.read_counts(engine, hist)  # the root's impurity: the tie tolerance's scale
        scores = build_cart_scores(hist, data.features, q.MOMENTS, criterion=criterion,
                                   all_candidates=True, bits=strategy.hist_bits)
        rows = [CARTScoreRow._make(r) for r in engine.execute(scores)]
        nominal = [(0, f.index) for f in data.features if f.kind != CONTINUOUS]
        ranks = read_nominal_ranks(engine, hist, nominal, q.MOMENTS, strategy.hist_bits,
                                   by=[MEAN_ORDER])
    finally:
        engine.drop(hist)
        engine.drop(level)
    scale = strategy.impurity_scale
    impurities = ("gain", "impurity_left", "impurity_right", "impurity_after")
    rows = [  # impurities of y' as impurities of y
        row._replace(**{key: math.ldexp(float(value), scale) for key in impurities
                        if (value := getattr(row, key)) is not None})
        for row in rows
    ]
    return candidates_of(rows, ranks, data)


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
