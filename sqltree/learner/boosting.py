"""Gradient-boosted trees: Newton boosting over the learner's histograms, grown best-first.

Each round computes every row's gradient and hessian from its raw scores (one statement: a
narrow table of the training rows' codes, gradients and hessians), grows one tree per output
best-first to ``max_leaf_nodes`` (LightGBM's and scikit-learn's histogram boosting: the leaf
of largest gain splits next), and writes the next scores table (``CREATE TABLE AS``, no
``UPDATE``) by adding each tree's leaf value, found by a ``CASE`` over the codes. A leaf's
histogram is read with its path as a ``WHERE`` clause: only the smaller child of a split is
summed, the larger is its parent less it. Gradients and hessians are summed as whole numbers
(``rows.py``), so the numpy and SQL backends choose the same splits.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from sqlglot import exp

from ..algorithm_registry import GRADIENT_BOOSTING
from ..dataset import Dataset
from ..engines.base import GROUPING_SETS, UNION, UNPIVOT
from ..engines.select_plan import SELECT
from ..ensemble import Ensemble, TreeArrays
from ..ensemble.evaluation import training_classes
from ..errors import OptionError
from ..model import features_info
from ..sqlexpr import alias, case, computed_once, num
from .encode import Encoded, encode
from .gains import ROWS, Newton
from .losses import Loss, loss_for
from .rows import PRIME, row_hash, scale_bits, tree_constants
from .splitter import Choice, Histograms, Layout, Rules, best_splits

NEWTON_BITS = 24
"""Bits of fraction of a row's gradient and hessian (at most): sums stay exact doubles and a
last-digit difference of an engine's EXP almost never moves a rounded value."""


@dataclass(frozen=True)
class BoostingOptions:
    """Histogram gradient boosting's options, with scikit-learn's names and meanings."""

    loss: str = "auto"
    learning_rate: float = 0.1
    max_iter: int = 100
    max_leaf_nodes: int | None = 31
    max_depth: int | None = None
    min_samples_leaf: int = 20
    l2_regularization: float = 0.0
    min_hessian_to_split: float = 1e-3
    max_bins: int = 255
    early_stopping: Any = "auto"
    validation_fraction: float = 0.1
    n_iter_no_change: int = 10
    tol: float = 1e-7
    random_state: int = 0

    def check(self) -> None:
        if not isinstance(self.max_iter, int) or self.max_iter < 1:
            raise OptionError(f"max_iter must be a positive integer, not {self.max_iter!r}")
        if not (isinstance(self.learning_rate, (int, float)) and self.learning_rate > 0):
            raise OptionError(f"learning_rate must be positive, not {self.learning_rate!r}")
        if self.max_leaf_nodes is not None and (not isinstance(self.max_leaf_nodes, int)
                                                or self.max_leaf_nodes < 2):
            raise OptionError(f"max_leaf_nodes must be at least 2 or None, not "
                              f"{self.max_leaf_nodes!r}")
        if self.max_leaf_nodes is None and self.max_depth is None:
            raise OptionError("give max_leaf_nodes or max_depth: a tree needs a bound")
        if self.max_depth is not None and (not isinstance(self.max_depth, int)
                                           or self.max_depth < 1):
            raise OptionError(f"max_depth must be a positive integer or None, not "
                              f"{self.max_depth!r}")
        if not isinstance(self.max_bins, int) or not 2 <= self.max_bins <= 65_535:
            raise OptionError(f"max_bins must be an integer from 2 to 65535, not {self.max_bins!r}")
        if self.early_stopping not in ("auto", True, False):
            raise OptionError(f"early_stopping is 'auto', True or False, not "
                              f"{self.early_stopping!r}")
        if not 0 < self.validation_fraction < 1:
            raise OptionError(f"validation_fraction must be in (0, 1), not "
                              f"{self.validation_fraction!r}")
        if self.l2_regularization < 0 or self.min_samples_leaf < 1:
            raise OptionError("l2_regularization must be >= 0 and min_samples_leaf >= 1")

    def stops_early(self, n_rows: int) -> bool:
        return n_rows > 10_000 if self.early_stopping == "auto" else bool(self.early_stopping)


@dataclass(frozen=True)
class Condition:
    """One test on a path: the codes that go left at a node, and the side taken."""

    feature: int
    nominal: bool
    upto: int
    left_codes: tuple[int, ...]
    missing_left: bool
    left: bool


# -- backends --------------------------------------------------------------------------------
class NewtonBackend:
    """What best-first boosting asks of the rows: gradients for a round, a leaf's histogram
    by its path, the scores moved by the round's trees, the losses."""

    layout: Layout

    def begin_round(self) -> None:
        raise NotImplementedError

    def histograms(self, requests: Sequence[tuple[int, Sequence[Condition]]]
                   ) -> list[np.ndarray]:
        """Per request (output, path): (codes x [rows, hessian, gradient]) of the training
        rows on the path, with that output's gradients; all in one statement."""
        raise NotImplementedError

    def end_round(self, trees: Sequence[tuple[int, TreeOverCodes]]) -> tuple[float, float | None]:
        """Add each tree's leaf values to its output's scores; the mean training and
        validation losses after it."""
        raise NotImplementedError

    def close(self) -> None:
        pass


@dataclass
class TreeOverCodes:
    """A grown tree in terms of codes: the learner's nodes and leaf values."""

    feature: list[int] = field(default_factory=list)
    nominal: list[bool] = field(default_factory=list)
    upto: list[int] = field(default_factory=list)
    left_codes: list[tuple[int, ...]] = field(default_factory=list)
    missing_left: list[bool] = field(default_factory=list)
    left: list[int] = field(default_factory=list)
    right: list[int] = field(default_factory=list)
    stats: list[np.ndarray] = field(default_factory=list)
    gain: list[float] = field(default_factory=list)
    value: list[float] = field(default_factory=list)

    def add(self, stats: np.ndarray) -> int:
        for name, default in (("feature", -1), ("nominal", False), ("upto", 0),
                              ("left_codes", ()), ("missing_left", False), ("left", -1),
                              ("right", -1), ("gain", 0.0), ("value", 0.0)):
            getattr(self, name).append(default)
        self.stats.append(stats)
        return len(self.feature) - 1


def _goes_left_sql(code: exp.Expression, c: Condition) -> exp.Expression:
    """Whether a row's code goes left at the test of ``c`` (code 0: unknown)."""
    if c.nominal:
        members = exp.In(this=code.copy(), expressions=[num(v) for v in c.left_codes])
        if c.missing_left:
            return exp.paren(exp.or_(members, exp.EQ(this=code.copy(), expression=num(0))))
        return members
    if c.missing_left:
        return exp.LTE(this=code.copy(), expression=num(c.upto))
    return exp.Between(this=code.copy(), low=num(1), high=num(c.upto))


def _goes_left(code: np.ndarray, c: Condition) -> np.ndarray:
    left = np.isin(code, c.left_codes) if c.nominal else (code >= 1) & (code <= c.upto)
    return left | ((code == 0) & c.missing_left)


def _path_sql(path: Sequence[Condition], table: str) -> exp.Expression | None:
    parts = []
    for c in path:
        test = _goes_left_sql(exp.column(f"c{c.feature}", table=table, quoted=True), c)
        parts.append(test if c.left else exp.Not(this=exp.paren(test)))
    return exp.and_(*parts) if parts else None


def _tree_sql(tree: TreeOverCodes, node: int, table: str) -> exp.Expression:
    """The leaf value a row reaches, as nested CASEs over its codes."""
    if tree.feature[node] < 0:
        return num(float(tree.value[node]))
    test = _goes_left_sql(exp.column(f"c{tree.feature[node]}", table=table, quoted=True),
                          _condition(tree, node, True))
    return case((test, _tree_sql(tree, tree.left[node], table)),
                default=_tree_sql(tree, tree.right[node], table), copy=False)


def _condition(tree: TreeOverCodes, node: int, left: bool) -> Condition:
    return Condition(tree.feature[node], tree.nominal[node], tree.upto[node],
                     tree.left_codes[node], tree.missing_left[node], left)


class SqlNewtonBackend(NewtonBackend):
    """Scores, gradients and histograms in the engine (see the module's docstring)."""

    def __init__(self, encoded: Encoded, loss: Loss, base: list[float],
                 validation: tuple[int, int, int, int] | None, fraction: float) -> None:
        assert encoded.table is not None
        self.engine = encoded.data.engine
        self.codes = encoded.table
        self.layout = encoded.layout
        self.loss = loss
        self.weighted = encoded.weighted
        self.weight_scale = float(encoded.scale[1])
        self.k = loss.n_outputs
        names = [f"s{k}" for k in range(self.k)]
        # the scores start at the base score; a row's validation flag is drawn once here
        c = exp.column
        flag: exp.Expression = num(0)
        if validation is not None:
            flag = case((exp.LT(this=_hash_sql(c("rid", table="c", quoted=True), validation),
                                expression=num(round(fraction * PRIME))), num(1)),
                        default=num(0))
        # A connection that stores no tables (the select plan) keeps no scores table: each
        # statement recomputes a row's scores from the trees so far, the base score plus
        # each tree's CASE over the row's codes added in the order the tables plan adds them
        # (the same doubles), and its validation flag from its hash. A statement then costs
        # a CASE per earlier tree and row, where a scores table would be one join.
        self.recomputed: list[exp.Expression] | None = None
        self.flag = flag
        self.scores: exp.Table | None = None
        if self.engine.plan == SELECT:
            self.recomputed = [num(float(b)) for b in base]
        else:
            self.scores = self.engine.materialize("scores", exp.select(
                alias(c("rid", table="c", quoted=True), "rid"), alias(flag, "val"),
                *[alias(num(float(b)), n) for b, n in zip(base, names)],
            ).from_(exp.alias_(self.codes.copy(), "c")))
        self.round: exp.Table | None = None
        self.bits: list[tuple[int, int]] = []
        # a round's requests each read the rows of one path: one pass per request, never a
        # pass per request and feature (PostgreSQL, 200,000 rows, 3 rounds: 60-70 s with
        # grouping sets, 209-219 s with a union of a GROUP BY per feature)
        form = self.engine.HISTOGRAM_FORM
        self.form = UNPIVOT if form == UNPIVOT else (
            GROUPING_SETS if self.engine.SUPPORTS_GROUPING_SETS else UNION)

    @property
    def _scored(self) -> str:
        """The table of ``_joined`` that holds a row's scores and validation flag."""
        return "r" if self.recomputed is None else "c"

    def _score_columns(self) -> list[exp.Expression]:
        """Each output's raw score of a row of ``_joined``."""
        return [exp.column(f"s{k}", table=self._scored, quoted=True) for k in range(self.k)]

    def _validation(self) -> exp.Expression:
        """Whether a row of ``_joined`` is a validation row (1) or a training row (0)."""
        return exp.column("val", table=self._scored, quoted=True)

    def _joined(self) -> exp.Select:
        """The training rows, each with its codes (``c``) and its scores and flag."""
        codes = exp.alias_(self.codes.copy(), "c")
        if self.recomputed is not None:  # computed once a row, read by several columns
            scored = exp.select(
                exp.Column(this=exp.Star(), table=exp.to_identifier("c", quoted=True)),
                alias(self.flag.copy(), "val"),
                *[alias(e.copy(), f"s{k}") for k, e in enumerate(self.recomputed)],
            ).from_(codes)
            return exp.select().from_(computed_once(scored).subquery("c", copy=False))
        return exp.select().from_(codes).join(
            exp.alias_(self.scores.copy(), "r"),
            on=exp.EQ(this=exp.column("rid", table="c", quoted=True),
                      expression=exp.column("rid", table="r", quoted=True)))

    def begin_round(self) -> None:
        y = exp.column("y", table="c", quoted=True)
        w = (exp.column("v_w", table="c", quoted=True) * num(self.weight_scale)
             if self.weighted else None)
        grads = self.loss.gradients_sql(y, self._score_columns())
        columns: list[exp.Expression] = [exp.column("rid", table="c", quoted=True)] + [
            exp.column(f"c{i}", table="c", quoted=True) for i in range(len(self.layout.features))]
        for k, (g, h) in enumerate(grads):
            if w is not None:
                g, h = w.copy() * g, w.copy() * h
            columns += [alias(g, f"g{k}"), alias(h, f"h{k}")]
        query = self._joined().select(*columns, copy=False).where(
            exp.EQ(this=self._validation(), expression=num(0)))
        if self.round is not None:
            self.engine.drop(self.round)
        self.round = self.engine.materialize("round", query)
        bounds = self.engine.execute(exp.select(
            exp.func("COUNT", exp.Star()),
            *[exp.func("MAX", exp.Abs(this=exp.column(f"{p}{k}", quoted=True)))
              for k in range(self.k) for p in ("g", "h")]).from_(self.round.copy()))[0]
        n = int(bounds[0] or 0)
        self.bits = [(_bits(bounds[1 + 2 * k], n), _bits(bounds[2 + 2 * k], n))
                     for k in range(self.k)]

    def _request_query(self, i: int, output: int, path: Sequence[Condition]) -> exp.Select:
        assert self.round is not None
        gbits, hbits = self.bits[output]
        g = exp.column(f"g{output}", table="t", quoted=True)
        h = exp.column(f"h{output}", table="t", quoted=True)
        sums = [exp.func("COUNT", exp.Star()),
                exp.func("SUM", exp.func("FLOOR", h * num(float(2**hbits)) + num(0.5))),
                exp.func("SUM", exp.func("FLOOR", g * num(float(2**gbits)) + num(0.5)))]
        names = [f"c{j}" for j in range(len(self.layout.features))]
        where = _path_sql(path, "t")
        codes = [exp.column(n, table="t", quoted=True) for n in names]
        if self.form == UNPIVOT:
            # each row's three terms once, then a row per feature's code
            terms = [num(1), exp.func("FLOOR", h * num(float(2**hbits)) + num(0.5)),
                     exp.func("FLOOR", g * num(float(2**gbits)) + num(0.5))]
            inner = exp.select(*[alias(t, f"t{j}") for j, t in enumerate(terms)], alias(
                exp.Explode(this=exp.Array(expressions=[
                    c.copy() + num(o) for c, o in zip(codes, self.layout.offsets)])), "code")
            ).from_(exp.alias_(self.round.copy(), "t"))
            if where is not None:
                inner = inner.where(where)
            return exp.select(alias(num(i), "request"), exp.column("code", quoted=True), *[
                alias(exp.func("SUM", exp.column(f"t{j}", quoted=True)), f"v{j}")
                for j in range(len(terms))]).from_(inner.subquery("u")).group_by(
                exp.column("code", quoted=True))
        if self.form == GROUPING_SETS:
            code = exp.func("COALESCE", *[c.copy() + num(o)
                                          for c, o in zip(codes, self.layout.offsets)])
            select = exp.select(alias(num(i), "request"), alias(code, "code"),
                                *[alias(s, f"v{j}") for j, s in enumerate(sums)]).from_(
                exp.alias_(self.round.copy(), "t"))
            select.set("group", exp.Group(grouping_sets=[exp.GroupingSets(
                expressions=[exp.Tuple(expressions=[c.copy()]) for c in codes])]))
            return select.where(where) if where is not None else select
        parts = []
        for c, off in zip(codes, self.layout.offsets):
            part = exp.select(alias(num(i), "request"), alias(c.copy() + num(off), "code"),
                              *[alias(s.copy(), f"v{j}") for j, s in enumerate(sums)]).from_(
                exp.alias_(self.round.copy(), "t")).group_by(c.copy())
            parts.append(part.where(where.copy()) if where is not None else part)
        query = parts[0]
        for p in parts[1:]:
            query = exp.union(query, p, distinct=False)
        return query

    def histograms(self, requests: Sequence[tuple[int, Sequence[Condition]]]
                   ) -> list[np.ndarray]:
        parts = [self._request_query(i, output, path)
                 for i, (output, path) in enumerate(requests)]
        query: exp.Expression = parts[0]
        for p in parts[1:]:
            query = exp.union(query, p, distinct=False)
        out = [np.zeros((self.layout.width, 3)) for _ in requests]
        for batch in self.engine.float_batches(query):
            request = batch[0].astype(np.int64)
            code = batch[1].astype(np.int64)
            for i in np.unique(request):
                sel = request == i
                gbits, hbits = self.bits[requests[i][0]]
                out[i][code[sel], 0] = batch[2][sel]
                out[i][code[sel], 1] = batch[3][sel] * 2.0**-hbits
                out[i][code[sel], 2] = batch[4][sel] * 2.0**-gbits
        return out

    def end_round(self, trees: Sequence[tuple[int, TreeOverCodes]]) -> tuple[float, float | None]:
        if self.recomputed is not None:
            for output, tree in trees:
                self.recomputed[output] = exp.paren(
                    self.recomputed[output] + _tree_sql(tree, 0, "c"))
        else:
            scores = self._score_columns()
            for output, tree in trees:
                scores[output] = exp.paren(scores[output] + _tree_sql(tree, 0, "c"))
            query = self._joined().select(
                exp.column("rid", table="c", quoted=True), alias(self._validation(), "val"),
                *[alias(s, f"s{k}") for k, s in enumerate(scores)], copy=False)
            old = self.scores
            self.scores = self.engine.materialize("scores", query)
            self.engine.drop(old)
        y = exp.column("y", table="c", quoted=True)
        loss = self.loss.loss_sql(y, self._score_columns())
        val = self._validation()
        rows = self.engine.execute(self._joined().select(
            alias(val.copy(), "val"), exp.func("AVG", loss), copy=False).group_by(val.copy()))
        by = {int(v): float(m) for v, m in rows}
        return by.get(0, 0.0), by.get(1)

    def close(self) -> None:
        for t in (self.round, self.scores):
            if t is not None:
                self.engine.drop(t)
        self.round = None


class NumpyNewtonBackend(NewtonBackend):
    """The same over arrays read once from the engine."""

    def __init__(self, encoded: Encoded, loss: Loss, base: list[float],
                 validation: tuple[int, int, int, int] | None, fraction: float) -> None:
        backend = encoded.numpy_backend()
        self.layout = encoded.layout
        self.codes = backend.codes
        self.y = backend.y
        self.w = None
        if encoded.weighted:
            assert encoded.arrays is not None
            self.w = encoded.arrays[3][0] * float(encoded.scale[1])
        self.loss = loss
        self.k = loss.n_outputs
        n = len(self.y)
        self.val = np.zeros(n, dtype=bool)
        if validation is not None:
            self.val = row_hash(backend.rid, np.asarray(validation)) < round(fraction * PRIME)
        self.scores = np.tile(np.asarray(base, dtype=np.float64), (n, 1))
        self.offsets = np.asarray(self.layout.offsets, dtype=np.int64)

    def begin_round(self) -> None:
        train = ~self.val
        self.rows = np.flatnonzero(train)
        grads = self.loss.gradients(self.y[train], self.scores[train])
        self.grads = []
        n = len(self.rows)
        for g, h in grads:
            g = np.asarray(g, dtype=np.float64)
            h = np.asarray(h, dtype=np.float64)
            if self.w is not None:
                g, h = self.w[train] * g, self.w[train] * h
            gbits = _bits(float(np.abs(g).max()) if n else 0.0, n)
            hbits = _bits(float(np.abs(h).max()) if n else 0.0, n)
            self.grads.append((np.floor(h * 2.0**hbits + 0.5) * 2.0**-hbits,
                               np.floor(g * 2.0**gbits + 0.5) * 2.0**-gbits))
        self.train_codes = self.codes[self.rows]

    def histograms(self, requests: Sequence[tuple[int, Sequence[Condition]]]
                   ) -> list[np.ndarray]:
        return [self._histogram(output, path) for output, path in requests]

    def _histogram(self, output: int, path: Sequence[Condition]) -> np.ndarray:
        mask = np.ones(len(self.rows), dtype=bool)
        for c in path:
            left = _goes_left(self.train_codes[:, c.feature], c)
            mask &= left if c.left else ~left
        codes = self.train_codes[mask]
        h, g = self.grads[output]
        out = np.zeros((self.layout.width, 3))
        for j, off in enumerate(self.offsets):
            key = codes[:, j].astype(np.int64) + off
            out[:, 0] += np.bincount(key, minlength=self.layout.width)
            out[:, 1] += np.bincount(key, weights=h[mask], minlength=self.layout.width)
            out[:, 2] += np.bincount(key, weights=g[mask], minlength=self.layout.width)
        return out

    def end_round(self, trees: Sequence[tuple[int, TreeOverCodes]]) -> tuple[float, float | None]:
        for output, tree in trees:
            self.scores[:, output] += _tree_numpy(tree, self.codes)
        losses = self.loss.loss(self.y, self.scores)
        valid = float(losses[self.val].mean()) if self.val.any() else None
        return float(losses[~self.val].mean()) if (~self.val).any() else 0.0, valid


def _tree_numpy(tree: TreeOverCodes, codes: np.ndarray) -> np.ndarray:
    out = np.zeros(len(codes))
    stack = [(0, np.arange(len(codes)))]
    while stack:
        node, rows = stack.pop()
        if tree.feature[node] < 0:
            out[rows] = tree.value[node]
            continue
        left = _goes_left(codes[rows, tree.feature[node]], _condition(tree, node, True))
        stack.append((tree.left[node], rows[left]))
        stack.append((tree.right[node], rows[~left]))
    return out


def _bits(bound: Any, n_rows: int) -> int:
    return min(NEWTON_BITS, scale_bits(float(bound or 0.0), max(n_rows, 1)))


def _hash_sql(rid: exp.Expression, k: tuple[int, int, int, int]) -> exp.Expression:
    a, b, c, d = (num(int(x)) for x in k)
    # BIGINT before the first product: Spark numbers rows as INT, and ANSI mode refuses an
    # INT product past 2**31
    h = exp.Mod(this=exp.paren(exp.cast(rid, "BIGINT") * a + b), expression=num(PRIME))
    h = exp.Mod(this=exp.paren(h * h.copy()), expression=num(PRIME))
    return exp.Mod(this=exp.paren(h * c + d), expression=num(PRIME))


# -- growth ----------------------------------------------------------------------------------
class BestFirst:
    """One tree grown best-first: the leaf whose best split gains most splits next (ties:
    the older leaf), until ``max_leaf_nodes`` leaves or no split gains."""

    def __init__(self, output: int, layout: Layout, criterion: Newton, rules: Rules,
                 options: BoostingOptions) -> None:
        self.output = output
        self.layout = layout
        self.criterion = criterion
        self.rules = rules
        self.options = options
        self.tree = TreeOverCodes()
        self.paths: dict[int, list[Condition]] = {}
        self.depth: dict[int, int] = {}
        self.hists: dict[int, np.ndarray] = {}
        self.heap: list[tuple[float, int, Choice]] = []
        self.leaves = 1
        self.waiting: tuple[int, int, int] | None = None  # (node, small child, large child)

    def root(self, hist: np.ndarray) -> None:
        first = self.layout.features[0].n_codes
        node = self.tree.add(hist[:first].sum(axis=0))
        self.paths[node], self.depth[node], self.hists[node] = [], 0, hist
        self._consider(node)

    def _consider(self, node: int) -> None:
        options = self.options
        if options.max_depth is not None and self.depth[node] >= options.max_depth:
            return
        if self.tree.stats[node][ROWS] < 2 * options.min_samples_leaf:
            return
        hist = Histograms.of_dense(np.zeros(1), self.hists[node][None], self.layout)
        (choice,), _ = best_splits(hist, self.layout, self.criterion, self.rules)
        if choice is not None and choice.gain > 0:
            heapq.heappush(self.heap, (-choice.gain, node, choice))

    def next_request(self) -> tuple[int, list[Condition]] | None:
        """Split the best leaf and ask for its smaller child's histogram (None: done)."""
        limit = self.options.max_leaf_nodes or math.inf
        if not self.heap or self.leaves >= limit:
            return None
        _, node, choice = heapq.heappop(self.heap)
        tree = self.tree
        tree.feature[node] = choice.feature
        tree.nominal[node] = self.layout.features[choice.feature].kind == "nominal"
        tree.upto[node] = choice.upto
        tree.left_codes[node] = choice.left_codes
        tree.missing_left[node] = choice.missing_left
        tree.gain[node] = choice.gain
        left, right = tree.add(choice.left), tree.add(choice.right)
        tree.left[node], tree.right[node] = left, right
        self.leaves += 1
        for child, side in ((left, True), (right, False)):
            self.paths[child] = [*self.paths[node], _condition(tree, node, side)]
            self.depth[child] = self.depth[node] + 1
        small, large = (left, right) if choice.left[ROWS] <= choice.right[ROWS] else (right, left)
        self.waiting = (node, small, large)
        return self.output, self.paths[small]

    def receive(self, hist: np.ndarray) -> None:
        assert self.waiting is not None
        node, small, large = self.waiting
        self.waiting = None
        self.hists[small] = hist
        self.hists[large] = self.hists.pop(node) - hist
        left, right = self.tree.left[node], self.tree.right[node]
        self._consider(left)
        self._consider(right)

    def finish(self) -> TreeOverCodes:
        tree = self.tree
        for node in range(len(tree.feature)):
            if tree.feature[node] < 0:
                step = float(self.criterion.value(tree.stats[node])[0])
                tree.value[node] = step * self.options.learning_rate
        return tree


def grow_round(backend: NewtonBackend, n_outputs: int, layout: Layout, criterion: Newton,
               rules: Rules, options: BoostingOptions) -> list[tuple[int, TreeOverCodes]]:
    """One tree per output, grown best-first in lockstep: each step splits every tree's best
    leaf and reads all the new histograms in one request."""
    growers = [BestFirst(k, layout, criterion, rules, options) for k in range(n_outputs)]
    for grower, hist in zip(growers, backend.histograms([(k, []) for k in range(n_outputs)])):
        grower.root(hist)
    while True:
        asking = [(g, g.next_request()) for g in growers]
        asking = [(g, r) for g, r in asking if r is not None]
        if not asking:
            break
        for (g, _), hist in zip(asking, backend.histograms([r for _, r in asking])):
            g.receive(hist)
    return [(g.output, g.finish()) for g in growers]


# -- training --------------------------------------------------------------------------------
def train_boosting(
    data: Dataset,
    options: BoostingOptions,
    *,
    in_memory: bool = False,
    class_weight: list[float] | None = None,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> Ensemble:
    """Newton boosting on ``data`` in its engine (or in numpy, ``in_memory``); a row's
    gradient and hessian are multiplied by its weight and its class's ``class_weight``."""
    options.check()
    task = "regression" if not data.classes else "classification"
    loss = loss_for(options.loss, task=task, n_classes=len(data.classes))
    if data.infinite:
        raise OptionError(f"columns holding +infinity: {data.infinite}; boosting's bins need "
                          "finite values: filter or cap them first")
    started = time.perf_counter()
    encoded = encode(data, options.max_bins, in_memory=in_memory, centred=False,
                     class_weight=class_weight)
    stop_early = options.stops_early(data.n_rows)
    validation = None
    if stop_early:
        validation = tuple(int(v) for v in tree_constants(options.random_state + 1, 1)[0])
    # the base score of every row (the validation rows' too: no query, and a constant)
    if data.classes:
        summary = np.asarray(data.class_weights) * np.asarray(
            class_weight or [1.0] * len(data.classes))
        summary = summary / max(float(summary.sum()), 1e-300)
    else:
        summary = np.asarray([data.target_mean or 0.0])
    base = loss.base_score(summary)
    backend_type = NumpyNewtonBackend if in_memory else SqlNewtonBackend
    backend = backend_type(encoded, loss, base, validation, options.validation_fraction)
    criterion = Newton(l2=options.l2_regularization)
    rules = Rules(min_samples_leaf=float(options.min_samples_leaf),
                  min_weight_leaf=options.min_hessian_to_split)
    grown: list[tuple[int, TreeOverCodes]] = []
    history: list[dict[str, Any]] = []
    try:
        for iteration in range(options.max_iter):
            t0 = time.perf_counter()
            backend.begin_round()
            trees = grow_round(backend, loss.n_outputs, encoded.layout, criterion, rules,
                               options)
            train_loss, valid_loss = backend.end_round(trees)
            grown.extend(trees)
            record = {"iteration": iteration + 1, "train_loss": train_loss,
                      "validation_loss": valid_loss,
                      "leaves": sum(t.feature.count(-1) for _, t in trees),
                      "seconds": time.perf_counter() - t0}
            history.append(record)
            if on_round:
                on_round(record)
            if stop_early and _no_improvement(history, options):
                break
            if all(len(t.feature) == 1 for _, t in trees):
                break  # nothing left to learn: every tree is a single leaf
    finally:
        backend.close()
        if encoded.table is not None:
            data.engine.drop(encoded.table)
    ensemble = Ensemble(
        trees=[_arrays(t, k if loss.n_outputs > 1 else None, encoded) for k, t in grown],
        features=features_info(data.features), target=data.target, task=task,
        classes=list(data.classes), aggregation="sum", base_score=base, link=loss.link,
        options={"algorithm": GRADIENT_BOOSTING, **asdict(options), "weight": data.weight},
        stats={"engine": data.engine.dialect, "rows": data.n_rows,
               "rows_null_target": data.n_null_target, **training_classes(data),
               "plan": "memory" if in_memory else "tables", "n_iter": len(history),
               "rounds": history, "seconds": round(time.perf_counter() - started, 6)},
    )
    return ensemble


def _no_improvement(history: list[dict[str, Any]], options: BoostingOptions) -> bool:
    """scikit-learn's rule: stop when none of the last ``n_iter_no_change`` validation losses
    is better than the one before them by more than ``tol``."""
    n = options.n_iter_no_change
    losses = [h["validation_loss"] for h in history]
    if len(losses) <= n or losses[-1] is None:
        return False
    reference = losses[-n - 1]
    return not any(reference - v > options.tol for v in losses[-n:])


def _arrays(tree: TreeOverCodes, output: int | None, encoded: Encoded) -> TreeArrays:
    threshold, categories = encoded.tests(tree.feature, tree.upto, tree.left_codes)
    stats = np.stack(tree.stats)
    return TreeArrays(
        feature=np.asarray(tree.feature), threshold=threshold, left=np.asarray(tree.left),
        right=np.asarray(tree.right), missing_left=np.asarray(tree.missing_left),
        value=np.asarray(tree.value)[:, None], weight=stats[:, 1],
        gain=np.asarray(tree.gain, dtype=np.float64), categories=categories, output=output,
    )


__all__ = ["BoostingOptions", "train_boosting"]
