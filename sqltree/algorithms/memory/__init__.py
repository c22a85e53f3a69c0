"""The memory plan: the level's rows read once into numpy, the tree grown there.

For data already in Python memory and small, a plan that sends SQL per level pays a statement's
fixed cost (parsing, planning, a temporary table) many times over for a few hundred rows. The
memory plan runs the level-0 query once, the same query the SQL plans store as their first
level table (so input checks, class weights, NULL handling and encodings are theirs), and
then runs the shared stages, histogram, scoring and partition, in numpy, with the strategy's
own choices: the same level loop (``grower.grow_with``), the same ``choose``, ``select`` and
``plan``, the same pruning after growth. Only the stages move: a plug-in overrides the
strategy's ``materialize_*`` and ``score_rows`` hooks, and its scorer computes the scoring
query's rows with the query's arithmetic (``cart_scores``).

``MEMORY_STRATEGIES`` lists the algorithms that have an in-memory scorer; any other trains
on the SQL plan (``memory_strategy`` returns None).
"""

from __future__ import annotations

from typing import Any

from ...dataset import Dataset, Feature
from ...engines.select_plan import PLANS as SQL_PLANS
from ...errors import OptionError
from ...grower import GrowOptions, RouteRow, Strategy, TestRow
from ..cart import CARTStrategy
from ..cart.regression import RegressionStrategy
from ..cart.subsets import orders
from .cart_scores import Rules, nominal_ranks, score
from .level import Histogram, Level, as_weight, partition, read_level0

MEMORY = "memory"
PLANS = (*SQL_PLANS, MEMORY)
"""The values of ``train(plan=...)``: the SQL plans and memory."""


def check_train_plan(plan: str) -> str:
    """``plan`` if ``train`` takes it, else an ``OptionError`` listing the plans."""
    if plan not in PLANS:
        raise OptionError(f"plan must be one of {PLANS}, not {plan!r}")
    return plan


MEMORY_MAX_CELLS = 500_000
"""``plan="auto"`` grows in memory data held in Python (a DataFrame, an estimator's arrays)
of at most this many rows x features (see ``memory_reason``).

Measured on the benchmark table (16 features, CART, ``max_depth=10``; the same run, the
machine shared): the memory plan took 0.40 of the tables plan's time at 10,000 rows (160,000
cells), 0.86 at 30,000 (480,000) and 1.3 at 100,000 (1.6M), where numpy's passes over every
candidate of a level cost more than the engine's parallel scan.
"""


def memory_reason(plan: str, in_python: bool, rows: int, features: int) -> str | None:
    """Why a fit asked for ``plan`` grows on the memory plan, or None if it stays in SQL.

    ``"memory"`` always (where the algorithm has an in-memory scorer); ``"auto"`` only for
    data already in Python memory and small: a table, file or query stays in its engine.
    """
    if plan == MEMORY:
        return "asked for"
    if plan != "auto" or not in_python:
        return None
    cells = rows * max(features, 1)
    if cells > MEMORY_MAX_CELLS:
        return None
    return (f"data in Python memory, {rows:,} rows x {features:,} features "
            f"(at most {MEMORY_MAX_CELLS:,} cells)")


class _InMemory(CARTStrategy):
    """CART's stages of the level loop over numpy arrays (the regression strategy takes
    them too: it is CART's with moments in the class columns' place)."""

    plan_name = MEMORY
    plan_reason = "asked for"
    moments = False

    def materialize_level0(self) -> Level:
        return read_level0(self.data, self.build_level0(), self.moments)

    def materialize_histogram(self, level: Level, features: list[Feature], nodes: int
                              ) -> Histogram:
        return Histogram(level, features, self.n_classes, self.hist_bits, self.moments,
                         self.criterion == "poisson")

    def materialize_partition(self, level: Level, tests: list[TestRow],
                              routes: list[RouteRow], ordered: bool) -> Level:
        return partition(level, tests, routes)

    def drop(self, table: Any) -> None:
        """Nothing to drop: the arrays go with the last reference."""

    def _measure_density(self, engine: Any, hist: Any) -> None:
        """No density probe: it chooses how SQL histograms group rows."""

    def read_counts(self, engine: Any, hist: Histogram) -> dict[int, list[float]]:
        nodes, n, sums = hist.totals()
        weights = as_weight(sums, self.hist_bits)
        return self.take_counts(
            (int(i), int(c), *row) for i, c, row in zip(nodes.tolist(), n.tolist(),
                                                        weights.tolist(), strict=True)
        )

    def score_rows(self, hist: Histogram, features: list[Feature]) -> list[Any]:
        r = self.resolved
        assert r is not None
        rules = Rules(self.criterion, r.min_samples_leaf, r.min_weight_leaf, self.tie_tolerance)
        return score(hist, features, hist.totals(), rules)

    def nominal_ranks(self, engine: Any, hist: Histogram, pairs: list[tuple[int, int]]
                      ) -> dict[tuple[int, int], list[tuple[int, int, int, int]]]:
        by = self.nominal_orders
        features = {f.index: f for f in self.data.features}
        return nominal_ranks(hist, features, pairs, orders(self.n_classes) if by is None else by)


class MemoryCARTStrategy(_InMemory, CARTStrategy):
    """CART classification on the memory plan."""


class MemoryRegressionStrategy(_InMemory, RegressionStrategy):
    """CART regression on the memory plan."""

    moments = True


MEMORY_STRATEGIES: dict[str, type[Strategy]] = {
    "cart": MemoryCARTStrategy,
    "cart-regression": MemoryRegressionStrategy,
}
"""Algorithm name (``GrowOptions.strategy_name``) -> its strategy on the memory plan."""

NO_MEMORY_CRITERIA: tuple[str, ...] = ()
"""Criteria whose histogram and gains the in-memory scorer does not compute: they train on
the SQL plan (none now; CART's and the regression criteria all have one)."""


def memory_strategy(data: Dataset, options: GrowOptions, reason: str) -> Strategy | None:
    """The strategy that grows ``options.algorithm`` in memory, or None if there is none."""
    found = MEMORY_STRATEGIES.get(options.strategy_name)
    if found is None or options.criterion in NO_MEMORY_CRITERIA:
        return None
    strategy = found(data, options)
    strategy.plan_reason = reason
    return strategy
