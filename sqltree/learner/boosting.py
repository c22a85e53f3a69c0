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
from dataclasses import asdict, dataclass, field, replace
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
from ..parallel import cores, engine_workers, side_by_side
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
    read_ahead: bool = True
    """Whether a read should fetch the children of every leaf that may split next (a
    statement costs a pass over the rows) or only of the best leaf (arrays: no waste)."""

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


def _goes_left(code: np.ndarray, c: Condition, n_codes: int) -> np.ndarray:
    """Whether each code goes left at the test of ``c``: one lookup in a table of the
    feature's codes (a comparison, a membership test and the unknown code's side each
    took a pass of their own)."""
    table = np.zeros(n_codes, dtype=bool)
    if c.nominal:
        table[list(c.left_codes)] = True
    else:
        table[1:c.upto + 1] = True
    table[0] = c.missing_left
    return table[code]


@dataclass
class _Trie:
    """Requests' paths merged on their shared tests: ``test`` (its side ignored) sends a
    row to ``left`` or ``right``, each a deeper trie, a request's number, or None (no
    request holds the row)."""

    test: Condition
    left: _Trie | int | None = None
    right: _Trie | int | None = None


def _same_test(a: Condition, b: Condition) -> bool:
    return replace(a, left=True) == replace(b, left=True)


def _insert(trie: _Trie | int | None, path: Sequence[Condition], i: int
            ) -> _Trie | int | None:
    """``trie`` with request ``i``'s path added; None when the path's rows may overlap
    another request's (the paths then go to separate groups)."""
    if not path:
        return i if trie is None else None
    if isinstance(trie, int):
        return None
    head = path[0]
    node = _Trie(head) if trie is None else _Trie(trie.test, trie.left, trie.right)
    if not _same_test(node.test, head):
        return None
    below = _insert(node.left if head.left else node.right, path[1:], i)
    if below is None:
        return None
    if head.left:
        node.left = below
    else:
        node.right = below
    return node


def _disjoint_groups(requests: Sequence[tuple[int, Sequence[Condition]]]
                     ) -> list[tuple[int, _Trie | int]]:
    """The requests as groups of one output whose rows are disjoint (each one pass), in the
    order of their first request; a read of a tree's leaves is one group."""
    groups: list[tuple[int, _Trie | int]] = []
    for i, (output, path) in enumerate(requests):
        for g, (o, trie) in enumerate(groups):
            merged = _insert(trie, path, i) if o == output else None
            if merged is not None:
                groups[g] = (o, merged)
                break
        else:
            first = _insert(None, path, i)
            assert first is not None
            groups.append((output, first))
    return groups


def _trie_sql(trie: _Trie | int | None, table: str) -> exp.Expression:
    """The number of the request a row of ``table`` belongs to (NULL: none)."""
    if trie is None:
        return exp.null()
    if isinstance(trie, int):
        return num(trie)
    test = _goes_left_sql(exp.column(f"c{trie.test.feature}", table=table, quoted=True),
                          trie.test)
    return case((test, _trie_sql(trie.left, table)), default=_trie_sql(trie.right, table),
                copy=False)


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
        # the scores start at the base score; a row's validation flag is drawn once here
        c = exp.column
        flag: exp.Expression = num(0)
        if validation is not None:
            flag = case((exp.LT(this=_hash_sql(c("rid", table="c", quoted=True), validation),
                                expression=num(round(fraction * PRIME))), num(1)),
                        default=num(0))
        self.flag = flag
        # A connection that stores no tables (the select plan) keeps no scores: each
        # statement recomputes a row's scores from the trees so far, the base score plus
        # each tree's CASE over the row's codes added in the order the tables plan adds them
        # (the same doubles), and its validation flag from its hash. A statement then costs
        # a CASE per earlier tree and row, where a stored state would be one scan.
        self.recomputed: list[exp.Expression] | None = None
        if self.engine.plan == SELECT:
            self.recomputed = [num(float(b)) for b in base]
        self.state: exp.Table | None = None
        self.bits: list[tuple[int, int]] = []
        self.losses: dict[int, float] = {}
        # a round's requests each read the rows of one path: one pass per request, never a
        # pass per request and feature (PostgreSQL, 200,000 rows, 3 rounds: 60-70 s with
        # grouping sets, 209-219 s with a union of a GROUP BY per feature)
        form = self.engine.HISTOGRAM_FORM
        self.form = UNPIVOT if form == UNPIVOT else (
            GROUPING_SETS if self.engine.SUPPORTS_GROUPING_SETS else UNION)
        self._store_state(self.codes, [num(float(b)) for b in base], flag)

    def _store_state(self, source: exp.Expression, scores: Sequence[exp.Expression],
                     val: exp.Expression) -> None:
        """Store the rows' state for the next round, from ``source`` (aliased ``c``): each
        row's codes, target, weight, validation flag ``val``, raw ``scores`` and the
        gradients and hessians they give; then read its losses and gradient bounds.

        One ``CREATE TABLE AS`` a round (no ``UPDATE``): the next state is read from this
        one, so no statement joins the rows' codes to their scores."""
        c = exp.column
        carried = ["rid", "y", *(["v_w"] if self.weighted else []),
                   *[f"c{i}" for i in range(len(self.layout.features))]]
        inner = exp.select(
            *[alias(c(n, table="c", quoted=True), n) for n in carried], alias(val, "val"),
            *[alias(e, f"s{k}") for k, e in enumerate(scores)],
        ).from_(exp.alias_(source.copy(), "c"), copy=False)
        q = [c(f"s{k}", table="q", quoted=True) for k in range(self.k)]
        w = (c("v_w", table="q", quoted=True) * num(self.weight_scale)
             if self.weighted else None)
        terms: list[exp.Expression] = []
        for k, (g, h) in enumerate(self.loss.gradients_sql(c("y", table="q", quoted=True), q)):
            if w is not None:
                g, h = w.copy() * g, w.copy() * h
            terms += [alias(g, f"g{k}"), alias(h, f"h{k}")]
        # the scores are computed once a row and read by the gradients (computed_once: not
        # merged into the select around it, which would compute each CASE again)
        query = exp.select(
            exp.Column(this=exp.Star(), table=exp.to_identifier("q", quoted=True)), *terms,
        ).from_(computed_once(inner).subquery("q", copy=False), copy=False)
        old = self.state
        self.state = self.engine.materialize("state", query, statistics=False)
        if old is not None:
            self.engine.drop(old)
        # per flag: the rows, the mean loss, and (of the training rows) the gradients'
        # largest magnitudes, which fix the fixed point of the round's sums
        val_col = c("val", quoted=True)
        ys = [c(f"s{k}", quoted=True) for k in range(self.k)]
        rows = self.engine.execute(exp.select(
            alias(val_col.copy(), "val"), exp.func("COUNT", exp.Star()),
            exp.func("AVG", self.loss.loss_sql(c("y", quoted=True), ys)),
            *[exp.func("MAX", exp.Abs(this=c(f"{p}{k}", quoted=True)))
              for k in range(self.k) for p in ("g", "h")],
        ).from_(self.state.copy(), copy=False).group_by(val_col.copy(), copy=False))
        by = {int(r[0]): r for r in rows}
        self.losses = {v: float(r[2]) for v, r in by.items()}
        train = by.get(0)
        n = int(train[1]) if train is not None else 0
        self.bits = [(_bits(train[3 + 2 * k] if train else 0.0, n),
                      _bits(train[4 + 2 * k] if train else 0.0, n)) for k in range(self.k)]

    def begin_round(self) -> None:
        """The state stored by the last round (or the start) holds this round's gradients."""

    def _group_query(self, output: int, trie: _Trie | int) -> exp.Select:
        """The histograms of a group of requests of one output whose rows are disjoint, in
        one pass over the round's rows: a row's request is found by walking ``trie``."""
        assert self.state is not None
        gbits, hbits = self.bits[output]
        g = exp.column(f"g{output}", table="t", quoted=True)
        h = exp.column(f"h{output}", table="t", quoted=True)
        terms = [num(1), exp.func("FLOOR", h * num(float(2**hbits)) + num(0.5)),
                 exp.func("FLOOR", g * num(float(2**gbits)) + num(0.5))]
        names = [f"c{j}" for j in range(len(self.layout.features))]
        request = exp.column("request", quoted=True)
        codes = [exp.column(n, quoted=True) for n in names]
        # a row's request once, then its terms summed per (request, feature, code)
        inner = exp.select(
            alias(_trie_sql(trie, "t"), "request"),
            *[alias(exp.column(n, table="t", quoted=True), n) for n in names],
            *[alias(t, f"t{j}") for j, t in enumerate(terms)],
        ).from_(exp.alias_(self.state.copy(), "t"), copy=False).where(
            exp.EQ(this=exp.column("val", table="t", quoted=True), expression=num(0)),
            copy=False)
        # the builders below take their parts as they are (copy=False): a trie of many
        # requests is the largest part of the statement, and each copy would walk it again
        rows = exp.select().from_(inner.subquery("q", copy=False), copy=False)
        if not isinstance(trie, int):
            rows = rows.where(exp.Not(this=exp.Is(this=request.copy(), expression=exp.null())),
                              copy=False)
        sums = [alias(exp.func("SUM", exp.column(f"t{j}", quoted=True)), f"v{j}")
                for j in range(len(terms))]
        if self.form == UNPIVOT:
            exploded = rows.select(request.copy(), *[exp.column(f"t{j}", quoted=True)
                                                     for j in range(len(terms))], alias(
                exp.Explode(this=exp.Array(expressions=[
                    c.copy() + num(o) for c, o in zip(codes, self.layout.offsets)])), "code"),
                copy=False)
            code = exp.column("code", quoted=True)
            return exp.select(request.copy(), code, *sums).from_(
                exploded.subquery("u", copy=False), copy=False).group_by(
                request.copy(), code.copy(), copy=False)
        if self.form == GROUPING_SETS:
            code = exp.func("COALESCE", *[c.copy() + num(o)
                                          for c, o in zip(codes, self.layout.offsets)])
            select = rows.select(request.copy(), alias(code, "code"), *sums, copy=False)
            select.set("group", exp.Group(grouping_sets=[exp.GroupingSets(
                expressions=[exp.Tuple(expressions=[request.copy(), c.copy()])
                             for c in codes])]))
            return select
        parts = [rows.copy().select(request.copy(), alias(c.copy() + num(off), "code"),
                                    *[s.copy() for s in sums]).group_by(request.copy(),
                                                                        c.copy())
                 for c, off in zip(codes, self.layout.offsets)]
        query = parts[0]
        for p in parts[1:]:
            query = exp.union(query, p, distinct=False, copy=False)
        return query

    def histograms(self, requests: Sequence[tuple[int, Sequence[Condition]]]
                   ) -> list[np.ndarray]:
        parts = [self._group_query(output, trie) for output, trie in _disjoint_groups(requests)]
        query: exp.Expression = parts[0]
        for p in parts[1:]:
            query = exp.union(query, p, distinct=False, copy=False)
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
        assert self.state is not None
        if self.recomputed is not None:
            for output, tree in trees:
                self.recomputed[output] = exp.paren(
                    self.recomputed[output] + _tree_sql(tree, 0, "c"))
            self._store_state(self.codes, [e.copy() for e in self.recomputed], self.flag.copy())
        else:
            scores: list[exp.Expression] = [
                exp.column(f"s{k}", table="c", quoted=True) for k in range(self.k)]
            for output, tree in trees:
                scores[output] = exp.paren(scores[output] + _tree_sql(tree, 0, "c"))
            self._store_state(self.state, scores, exp.column("val", table="c", quoted=True))
        return self.losses.get(0, 0.0), self.losses.get(1)

    def close(self) -> None:
        if self.state is not None:
            self.engine.drop(self.state)
        self.state = None


class NumpyNewtonBackend(NewtonBackend):
    """The same over arrays read once from the engine."""

    read_ahead = False

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
        self.workers = engine_workers(encoded.data.engine)
        n = len(self.y)
        self.val = np.zeros(n, dtype=bool)
        if validation is not None:
            self.val = row_hash(backend.rid, np.asarray(validation)) < round(fraction * PRIME)
        self.scores = np.tile(np.asarray(base, dtype=np.float64), (n, 1))
        self.rows = np.flatnonzero(~self.val)
        # one contiguous array per feature, of every row and of the training rows: a leaf's
        # rows are gathered a feature at a time
        self.all_columns = np.ascontiguousarray(self.codes.T)
        self.columns = (self.all_columns if len(self.rows) == n
                        else np.ascontiguousarray(self.all_columns[:, self.rows]))

    def begin_round(self) -> None:
        train = self.rows
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
        self.members: dict[tuple[int, tuple[Condition, ...]], np.ndarray] = {}

    def histograms(self, requests: Sequence[tuple[int, Sequence[Condition]]]
                   ) -> list[np.ndarray]:
        return [self._histogram(output, path) for output, path in requests]

    def _rows(self, output: int, path: tuple[Condition, ...]) -> np.ndarray | None:
        """The positions of the training rows on ``path`` (None: every row), found from its
        parent's rows, which are kept for the round: a split reads only its leaf's rows."""
        if not path:
            return None
        key = (output, path)
        found = self.members.get(key)
        if found is None:
            parent = self._rows(output, path[:-1])
            c = path[-1]
            column = self.columns[c.feature]
            codes = column if parent is None else column[parent]
            left = _goes_left(codes, c, self.layout.features[c.feature].n_codes)
            side = left if c.left else ~left
            found = np.flatnonzero(side) if parent is None else parent[side]
            self.members[key] = found
        return found

    def _histogram(self, output: int, path: Sequence[Condition]) -> np.ndarray:
        rows = self._rows(output, tuple(path))
        h, g = self.grads[output]
        if rows is not None:
            h, g = h[rows], g[rows]
        out = np.empty((self.layout.width, 3))

        def count(positions: range) -> None:
            for position in positions:
                feature = self.layout.features[position]
                column = self.columns[position]
                # once as the index type: each bincount would convert the codes again
                codes = (column if rows is None else column[rows]).astype(np.intp)
                at = slice(self.layout.offsets[position],
                           self.layout.offsets[position] + feature.n_codes)
                out[at, 0] = np.bincount(codes, minlength=feature.n_codes)
                out[at, 1] = np.bincount(codes, weights=h, minlength=feature.n_codes)
                out[at, 2] = np.bincount(codes, weights=g, minlength=feature.n_codes)

        # the features in as many runs as threads: handing a thread each feature's few
        # hundred microseconds of work cost as much as the work at a leaf of 30,000 rows
        n = len(self.layout.features)
        parts = max(1, min(self.workers or cores(), n))
        side_by_side(count, [range(k, n, parts) for k in range(parts)], len(h), self.workers)
        return out

    def end_round(self, trees: Sequence[tuple[int, TreeOverCodes]]) -> tuple[float, float | None]:
        for output, tree in trees:
            self.scores[:, output] += _tree_numpy(tree, self.all_columns, self.layout)
        losses = self.loss.loss(self.y, self.scores)
        valid = float(losses[self.val].mean()) if self.val.any() else None
        return float(losses[~self.val].mean()) if (~self.val).any() else 0.0, valid


def _tree_numpy(tree: TreeOverCodes, columns: np.ndarray, layout: Layout) -> np.ndarray:
    """The leaf value each row reaches; ``columns``: the codes, a feature per row."""
    out = np.zeros(columns.shape[1])
    if tree.feature[0] < 0:
        out[:] = tree.value[0]
        return out
    stack: list[tuple[int, np.ndarray | None]] = [(0, None)]  # None: every row
    while stack:
        node, rows = stack.pop()
        if tree.feature[node] < 0:
            out[rows] = tree.value[node]
            continue
        feature = tree.feature[node]
        codes = columns[feature] if rows is None else columns[feature][rows]
        left = _goes_left(codes, _condition(tree, node, True), layout.features[feature].n_codes)
        if rows is None:
            stack.append((tree.left[node], np.flatnonzero(left)))
            stack.append((tree.right[node], np.flatnonzero(~left)))
        else:
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
    the older leaf), until ``max_leaf_nodes`` leaves or no split gains.

    A leaf's split needs its smaller child's histogram, read from the rows. Rather than one
    read per split, each read fetches the smaller children of every leaf that may split
    next (the best leaves, as many as the leaves still allowed), and the leaves then split
    in the exact best-first order for as long as their children are at hand: the tree is
    the one a read per split grows, in a few reads (a 31-leaf tree: about 6 instead of 30).
    A leaf read ahead that never splits costs only its rows' sums."""

    def __init__(self, output: int, layout: Layout, criterion: Newton, rules: Rules,
                 options: BoostingOptions, read_ahead: bool = True) -> None:
        self.output = output
        self.read_ahead = read_ahead
        self.layout = layout
        self.criterion = criterion
        self.rules = rules
        self.options = options
        self.limit = options.max_leaf_nodes or math.inf
        self.tree = TreeOverCodes()
        self.paths: dict[int, list[Condition]] = {}
        self.depth: dict[int, int] = {}
        self.hists: dict[int, np.ndarray] = {}
        self.heap: list[tuple[float, int, Choice]] = []
        self.leaves = 1
        # leaf -> its smaller child's histogram (None: its children cannot split)
        self.at_hand: dict[int, np.ndarray | None] = {}
        self.asked: list[int] = []

    def root(self, hist: np.ndarray) -> None:
        first = self.layout.features[0].n_codes
        node = self.tree.add(hist[:first].sum(axis=0))
        self.paths[node], self.depth[node], self.hists[node] = [], 0, hist
        self._consider(node)

    def _consider(self, *nodes: int) -> None:
        """Put the nodes that may split on the heap, with their best splits (scored
        together)."""
        options = self.options
        nodes = tuple(n for n in nodes
                      if (options.max_depth is None or self.depth[n] < options.max_depth)
                      and self.tree.stats[n][ROWS] >= 2 * options.min_samples_leaf)
        if not nodes:
            return
        hist = Histograms.of_dense(np.zeros(len(nodes)),
                                   np.stack([self.hists[n] for n in nodes]), self.layout)
        choices, _ = best_splits(hist, self.layout, self.criterion, self.rules)
        for node, choice in zip(nodes, choices):
            if choice is not None and choice.gain > 0:
                heapq.heappush(self.heap, (-choice.gain, node, choice))

    def requests(self) -> list[tuple[int, list[Condition]]]:
        """The (output, path) of the smaller child of each leaf that may split next and
        whose child is not read yet. A split whose children cannot split again (at
        ``max_depth``, or too few rows) needs no read: its children's sums are the split's."""
        while True:
            self._advance()
            budget = self.limit - self.leaves if self.read_ahead else min(
                self.limit - self.leaves, 1)
            self.asked = []
            requests = []
            needless = False
            for _, node, choice in heapq.nsmallest(int(min(budget, len(self.heap))),
                                                   self.heap):
                if node in self.at_hand:
                    continue
                if not self._children_may_split(node, choice):
                    self.at_hand[node] = None
                    needless = True
                    continue
                small_left = bool(choice.left[ROWS] <= choice.right[ROWS])
                test = Condition(choice.feature,
                                 self.layout.features[choice.feature].kind == "nominal",
                                 choice.upto, choice.left_codes, choice.missing_left,
                                 small_left)
                self.asked.append(node)
                requests.append((self.output, [*self.paths[node], test]))
            if requests or not needless:
                return requests

    def _children_may_split(self, node: int, choice: Choice) -> bool:
        options = self.options
        if options.max_depth is not None and self.depth[node] + 1 >= options.max_depth:
            return False
        least = 2 * options.min_samples_leaf
        return bool(choice.left[ROWS] >= least or choice.right[ROWS] >= least)

    def receive(self, hists: Sequence[np.ndarray]) -> None:
        """Take the histograms of ``requests``, then split leaves best-first while their
        smaller children are at hand."""
        self.at_hand.update(zip(self.asked, hists))
        self.asked = []
        self._advance()

    def _advance(self) -> None:
        if self.limit == math.inf:
            # No bound on the leaves: every leaf on the heap splits in the end, whatever the
            # order, so each splits as soon as its child is at hand (a read per level, not a
            # read per wave of better children); ``finish`` numbers the nodes in an order of
            # their own.
            while any(node in self.at_hand for _, node, _ in self.heap):
                ready = [e for e in self.heap if e[1] in self.at_hand]
                self.heap = [e for e in self.heap if e[1] not in self.at_hand]
                heapq.heapify(self.heap)
                for _, node, choice in sorted(ready, key=lambda e: (e[0], e[1])):
                    self._split(node, choice, self.at_hand.pop(node))
            return
        while self.heap and self.leaves < self.limit and self.heap[0][1] in self.at_hand:
            _, node, choice = heapq.heappop(self.heap)
            self._split(node, choice, self.at_hand.pop(node))

    def _split(self, node: int, choice: Choice, small_hist: np.ndarray | None) -> None:
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
        parent = self.hists.pop(node)
        if small_hist is None:  # neither child may split: no histogram is needed
            return
        small, large = (left, right) if choice.left[ROWS] <= choice.right[ROWS] else (right, left)
        self.hists[small] = small_hist
        self.hists[large] = parent - small_hist
        self._consider(left, right)

    def finish(self) -> TreeOverCodes:
        tree = self.tree if self.limit < math.inf else _preorder(self.tree)
        for node in range(len(tree.feature)):
            if tree.feature[node] < 0:
                step = float(self.criterion.value(tree.stats[node])[0])
                tree.value[node] = step * self.options.learning_rate
        return tree


def _preorder(tree: TreeOverCodes) -> TreeOverCodes:
    """``tree`` with its nodes numbered root first, then the left subtree, then the right:
    the same numbers whatever order the splits were made in."""
    order: list[int] = []
    stack = [0]
    while stack:
        node = stack.pop()
        order.append(node)
        if tree.feature[node] >= 0:
            stack += [tree.right[node], tree.left[node]]
    new = {old: i for i, old in enumerate(order)}
    out = TreeOverCodes()
    for name in ("feature", "nominal", "upto", "left_codes", "missing_left", "stats", "gain",
                 "value"):
        getattr(out, name).extend(getattr(tree, name)[old] for old in order)
    out.left.extend(new[tree.left[old]] if tree.left[old] >= 0 else -1 for old in order)
    out.right.extend(new[tree.right[old]] if tree.right[old] >= 0 else -1 for old in order)
    return out


def grow_round(backend: NewtonBackend, n_outputs: int, layout: Layout, criterion: Newton,
               rules: Rules, options: BoostingOptions) -> list[tuple[int, TreeOverCodes]]:
    """One tree per output, grown best-first side by side: each read serves every tree's
    requests (``BestFirst.requests``) in one statement."""
    growers = [BestFirst(k, layout, criterion, rules, options, backend.read_ahead)
               for k in range(n_outputs)]
    for grower, hist in zip(growers, backend.histograms([(k, []) for k in range(n_outputs)])):
        grower.root(hist)
    while True:
        asking = [(g, g.requests()) for g in growers]
        asking = [(g, r) for g, r in asking if r]
        if not asking:
            break
        hists = backend.histograms([r for _, rs in asking for r in rs])
        at = 0
        for g, rs in asking:
            g.receive(hists[at:at + len(rs)])
            at += len(rs)
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
