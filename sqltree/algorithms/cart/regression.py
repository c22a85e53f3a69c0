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
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from ... import queries as q
from ...criteria import TIE_TOLERANCE
from ...dataset import Dataset, Feature
from ...errors import DataError
from ...grower import GrowOptions, Strategy, bin_edges
from ...tree import Node
from .scores import FEATURE_THRESHOLD, REGRESSION, SCORE_COLUMNS, build_cart_scores
from .strategy import CARTStrategy, NodeInfo, resolve_options
from .subsets import MEAN_ORDER


def variance(w: float, s1: float, s2: float) -> float:
    """Weighted variance from the sums of ``w``, ``w*y`` and ``w*y*y`` (never below 0)."""
    if w <= 0:
        return 0.0
    mean = s1 / w
    return max(s2 / w - mean * mean, 0.0)


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
            self.data, self.bins, lookup=self.data.engine.VECTORIZED,
            centre=self.data.target_mean,
        )

    def rowwise(self, features: list[Feature]) -> list[int]:
        # Only the ordered scan reads a histogram of rows, and regression scores by windows.
        return []

    def build_histogram(
        self, level: exp.Table, features: list[Feature], nodes: int = 1
    ) -> exp.Expression:
        return q.build_histogram(level, features, q.MOMENTS, counts=True, moments=True)

    def read_counts(self, engine: Any, hist: exp.Table) -> dict[int, list[float]]:
        return self.take_counts(engine.execute(q.build_node_counts(hist, q.MOMENTS, counts=True)))

    def take_counts(self, rows: Any) -> dict[int, list[float]]:
        """Each node's weight as its one count, from rows ``(node, n, w, w*y, w*y*y)``; its
        variance and mean kept aside."""
        out: dict[int, list[float]] = {}
        for node_id, n, w, s1, s2 in rows:
            w, s1, s2 = float(w), float(s1), float(s2)
            out[int(node_id)] = [w]
            info = self.info.setdefault(int(node_id), NodeInfo())
            info.n_samples = int(n)
            info.impurity = variance(w, s1, s2)
            assert self.data.target_mean is not None
            self.values[int(node_id)] = s1 / w + self.data.target_mean if w > 0 else 0.0
        if self.resolved is None:
            n_root = sum(self.info[i].n_samples for i in out)
            self.root_weight = sum(c[0] for c in out.values())
            self.resolved = resolve_options(self.options, n_root, self.root_weight)
            # Gains are variances: ties are judged relative to the root's.
            root_variance = max((self.info[i].impurity for i in out), default=0.0)
            self.tie_tolerance = TIE_TOLERANCE * max(root_variance, 1e-300)
        return out

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
            ordered_scan=False,
            fractional=False,
            tie_tolerance=self.tie_tolerance,
        )

    def finish(self, root: Node) -> Node:
        """CART's numbers on every node, and each node's weighted mean target."""
        root = super().finish(root)
        for node in root.walk():
            if node.node_id in self.values:
                node.value = self.values[node.node_id]
        return root

