"""Backends: where a level's histograms are summed and its rows moved to their children.

The learner asks a backend for two things and nothing else: the histograms of the nodes it
names (sums of each statistic per node, feature and code), and to move the rows of the nodes
that split to their children. :class:`SqlBackend` keeps the rows in the engine:

- ``codes``: one row per training row (its number, class or target statistics, one small
  integer code per feature), written once;
- ``rows``: the narrow (row, node, count, scan) pairs of the open nodes of every tree; it is
  rewritten per level by joining the level's splits (no feature column is rewritten);
- per level one aggregate ``GROUP BY GROUPING SETS ((node, c0), (node, c1), ...)`` over the
  pairs flagged ``scan``: a node whose sibling is scanned is its parent's histogram less its
  sibling's (LightGBM's subtraction), so only the smaller child of each split is read.

Wide, the pairs carry the codes themselves (one tree, the level scan). They move down as the
engine runs best (``Engine.SCAN_ROUTING``): rewritten whole each level by the join above;
kept as level 0 stored them, each level storing apart only the rows of the nodes its
histogram reads, each row's node computed by ``path_case`` from its codes; or kept in place,
each level updating only their node and scan flag.

:class:`NumpyBackend` does the same with arrays, for data already in Python. Both sum the same
whole-number statistics (``rows.py``), so their histograms are equal to the last bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlglot import exp

from ..engines.base import GROUPING_SETS, PATH, UNPIVOT, UPDATE
from ..errors import UnsupportedOptionError
from ..parallel import side_by_side
from ..sqlexpr import alias, case, computed_once, num, paren
from .rows import Sampling, row_hash
from .splitter import Block, Histograms, Layout, Sparse

INT = "BIGINT"
SHIFT = "INT"
"""A shift's type (PostgreSQL shifts a BIGINT by an INTEGER only)."""
MASK_CODES = 63
"""Codes of a nominal feature whose left codes routing by update can hold as bits of one
BIGINT (a wider feature's split moves its level's rows by rewriting them)."""
UPDATES_IN_A_ROW = 6
"""Levels routed by update before one is routed by rewriting. DuckDB keeps a row's updated
versions beside it, and a histogram over rows updated level after level took more memory:
1M rows, a regression tree of depth 10, a peak of 835 MB updating every level against 615 MB
rewriting every level and 593 MB rewriting after six updates (3.37 s against 3.94 s)."""

PATH_SPLITS = 2048
"""Routing by path: the most splits a level's ``path_case`` holds; a tree grown past it is
routed by rewriting from then on (``SqlBackend._leave_path``). The ``CASE`` holds every split
so far, and building and rendering it grows faster than the splits (Python's collector walks
the larger tree): at about 4,000 splits it costs what rewriting a million rows costs, and
several times more at 8,000 (benchmarks/README.md, "PostgreSQL's level scan routed by
path")."""

LIMB_BITS = 26
"""A wide statistic's sum is read as its quotient by ``2**LIMB_BITS``, below 2^53 for any sum
below 2^79 (a fixed point keeps its sums below 2^62), and the remainder, below 2^26: whole
numbers that a DOUBLE result holds exactly."""



@dataclass(frozen=True)
class Packing:
    """Codes packed into whole-number words: feature ``i``'s code is bits ``shift`` to
    ``shift + bits`` of word ``i // per_word``, the same ``bits`` for every feature, below
    2^62 in a word (a BIGINT in every engine)."""

    n_features: int
    bits: int

    @property
    def per_word(self) -> int:
        return 62 // self.bits

    @property
    def words(self) -> list[str]:
        return [f"p{w}" for w in range(-(-self.n_features // self.per_word))]

    @property
    def mask(self) -> int:
        return 2**self.bits - 1

    def place(self, feature: int) -> tuple[int, int]:
        """Feature ``feature``'s word and shift."""
        return feature // self.per_word, feature % self.per_word * self.bits

    def packed(self, codes: Sequence[exp.Expression]) -> list[exp.Expression]:
        """The words' SQL from each feature's code (non-negative, below 2^bits)."""
        words: list[exp.Expression] = []
        for i, code in enumerate(codes):
            word, shift = self.place(i)
            part: exp.Expression = exp.cast(code, "BIGINT")
            if shift:
                part = exp.BitwiseLeftShift(this=part, expression=num(shift))
            if word == len(words):
                words.append(part)
            else:
                words[word] = exp.Add(this=words[word], expression=exp.paren(part))
        return [alias(w, name) for w, name in zip(words, self.words)]

    def read(self, words: Sequence[exp.Expression], word: exp.Expression,
             shift: exp.Expression) -> exp.Expression:
        """One code from the words (``words``, as ``packed`` names them): the word numbered
        ``word`` shifted right by ``shift`` and masked."""
        chosen = words[0]
        if len(words) > 1:
            chosen = case(*[(exp.EQ(this=word.copy(), expression=num(i)), w)
                            for i, w in enumerate(words[:-1])], default=words[-1])
        shifted = exp.BitwiseRightShift(this=chosen, expression=shift)
        # bracketed: & binds more loosely than + and * in SQL
        return exp.paren(exp.BitwiseAnd(this=exp.paren(shifted), expression=num(self.mask)))


@dataclass(frozen=True)
class Route:
    """Where the rows of one split node go: ``left``/``right`` the children's node ids (-1:
    the child is a leaf, its rows are dropped), ``scan_*``: whether the next level reads the
    child's rows (else it is its parent's histogram less its sibling's)."""

    node: int
    feature: int  # position in the layout
    missing_left: bool
    upto: int
    left_codes: tuple[int, ...]
    nominal: bool
    left: int
    right: int
    scan_left: bool
    scan_right: bool


@dataclass(frozen=True)
class Start:
    """The root of one tree, with its bootstrap hash constants (None: every row once)."""

    node: int
    constants: tuple[int, int, int, int] | None


@dataclass(frozen=True)
class Allowed:
    """The features each scanned node may split on: ``mask[i]`` for node ``nodes[i]``."""

    nodes: np.ndarray
    mask: np.ndarray


class Backend:
    """The contract: ``start``, ``histograms``, ``route``, ``close``."""

    layout: Layout
    n_stats: int

    def start(self, roots: Sequence[Start], sampling: Sampling,
              out_of_bag: bool = False) -> None:
        """Put each tree's drawn rows at its root (``out_of_bag``: the rows it did not draw,
        each once, to be routed to their leaves by ``route(..., keep=True)``)."""
        raise NotImplementedError

    def histograms(self, allowed: Allowed | None = None) -> Histograms:
        """The histograms of the nodes flagged ``scan``: of every feature (dense, for
        subtraction) or, with ``allowed``, of each node's own features only."""
        raise NotImplementedError

    def route(self, routes: Sequence[Route], keep: bool = False) -> None:
        """Move the rows of each routed node to its children (a child -1 drops them); rows
        of nodes not routed are dropped, or with ``keep`` stay where they are."""
        raise NotImplementedError

    def add_votes(self, leaves: dict[int, np.ndarray]) -> None:
        """Add each row's leaf values (``leaves``: node -> value vector) to its out-of-bag
        sums."""
        raise NotImplementedError

    def votes_summary(self, n_classes: int) -> np.ndarray:
        """What the out-of-bag sums say: for classes, the (true class x predicted class)
        count matrix (the prediction the largest sum, ties to the first); for a target, the
        row count and the sums of ``y``, ``y*y`` and ``(y - mean of the votes)**2``."""
        raise NotImplementedError

    def statements(self) -> tuple[int, int] | None:
        """The statements run so far and those that read the training rows (None: no engine
        runs statements)."""
        return None

    def close(self) -> None:
        pass


def _dense(nodes: np.ndarray, codes: np.ndarray, sums: np.ndarray, layout: Layout
           ) -> Histograms:
    """Grouped (node, code) rows and their sums as a dense (nodes x codes x statistics)
    array."""
    ids = np.unique(nodes)
    hist = np.zeros((len(ids), layout.width, sums.shape[1]))
    hist[np.searchsorted(ids, nodes), codes] = sums
    return Histograms.of_dense(ids, hist, layout)


# -- SQL -------------------------------------------------------------------------------------
def limbs(total: exp.Expression, name: str) -> list[exp.Expression]:
    """A wide sum as two result columns ``{name}h`` and ``{name}l``: ``total DIV
    2**LIMB_BITS`` and the rest, each below 2^53 (``joined_limbs`` adds them back)."""
    high = exp.IntDiv(this=total, expression=num(2**LIMB_BITS))
    low = total.copy() - paren(high.copy() * num(2**LIMB_BITS))
    return [alias(high, f"{name}h"), alias(low, f"{name}l")]


def joined_limbs(parts: np.ndarray) -> np.ndarray:
    """The row count, then each wide statistic's two parts (``SqlBackend._summed``) added
    back into one int64 column."""
    high, low = parts[:, 1::2], parts[:, 2::2]
    return np.concatenate([parts[:, :1], (high << LIMB_BITS) + low], axis=1)


def _c(name: str, table: str | None = None) -> exp.Column:
    return exp.column(name, table=table, quoted=True)


class SqlBackend(Backend):
    """Histograms and routing as SQL statements on an engine (see the module's docstring).

    ``codes``: a stored table of ``rid, y, v1.. , c0..``; ``stats``: the SQL of each summed
    column of a row (in terms of the codes table ``c`` and the pairs' count ``a.cnt``);
    ``scale``: the factor that turns each statistic back into its units. With ``n_classes``
    the class ``c.y`` is one more key of the grouping and ``stats`` are the row count and
    (when rows are weighted) the weight: a class's weight is its group's sum, which needs
    no expression per class. ``wide``: the statistics after the row count are integers
    whose sums may pass 2^53 (a tree's fixed point, ``fixed_point.to_fixed``), which a
    DOUBLE result would round: each sum is read as two parts, each exact (``long_histograms``
    only).
    """

    def __init__(self, engine: Any, codes: exp.Table | exp.Select, layout: Layout,
                 stats: list[exp.Expression], scale: np.ndarray, n_classes: int = 0,
                 carried: Sequence[str] = (), row_ids: bool = True, wide: bool = False,
                 routing: str | None = None, packing: Packing | None = None) -> None:
        self.engine = engine
        self.codes = codes
        # a wide backend whose rows are never joined back nor hashed needs no row number
        self.ids = ["rid"] if row_ids else []
        self.layout = layout
        self.carried = list(carried)
        # wide: the pairs carry the codes table's columns (``carried``) and are rewritten
        # whole each level, so no statement joins the codes again
        self.cv = "a" if self.carried else "c"
        self.summed = [s.transform(self._in_pairs) for s in stats] if self.carried else stats
        self.n_classes = n_classes
        self.n_stats = 1 + n_classes if n_classes else len(stats)
        self.scale = scale
        self.pairs: exp.Table | None = None
        self.votes: list[exp.Table] = []
        self.form = engine.HISTOGRAM_FORM
        self.wide = wide
        self.stale: list[exp.Table] = []
        """Earlier pairs that the current ones, not yet computed, still come from: dropped
        once a statement has read (and so stored) the current ones."""
        self.scans = 0
        """Statements that read the pairs (a histogram, storing the scanned ones apart, routing
        them down)."""
        self.packing = packing
        """The codes table's codes packed into words (``Packing``), or None: read one code by
        the feature's column."""
        self.routing = routing or engine.SCAN_ROUTING
        """``Engine.SCAN_ROUTING``, or the caller's choice."""
        self.base: exp.Table | None = None
        """Routing by path: level 0's rows, never rewritten (``pairs`` then holds only the
        rows the next histogram reads); None when each level rewrites the pairs."""
        self.root = 0
        self.splits: dict[int, Route] = {}
        """Routing by path: every split so far, by node."""
        self.updating = False
        """Routing by update: the pairs stay where they are, their node and scan updated."""
        self.open: set[int] = set()
        """Routing by update: the nodes that hold rows (every other row's node is -1)."""
        self.updates = 0
        """Routing by update: levels updated since the pairs were last written whole."""

    def statements(self) -> tuple[int, int] | None:
        return self.engine.stats.queries, self.scans

    @staticmethod
    def _in_pairs(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.table == "c":
            return _c(node.name, "a")
        return node

    def _code_columns(self) -> list[str]:
        return [f"c{i}" for i in range(len(self.layout.features))]

    def start(self, roots: Sequence[Start], sampling: Sampling,
              out_of_bag: bool = False) -> None:
        if sampling.everything or all(r.constants is None for r in roots):
            trees = [(r.node, 0, 0, 0, 0) for r in roots]
        else:
            trees = [(r.node, *r.constants) for r in roots]  # type: ignore[misc]
        self._drop_pairs()
        table = self.engine.load_rows("trees", ["root", "a", "b", "k", "d"], [INT] * 5, trees)
        rid = _c("rid", "c")
        h: exp.Expression = num(0)
        bounds: list[int] = []
        if not sampling.everything:
            h = exp.Mod(this=exp.paren(rid * _c("a", "t") + _c("b", "t")),
                        expression=num(2_147_483_647))
            h = exp.Mod(this=exp.paren(h * h.copy()), expression=num(2_147_483_647))
            h = exp.Mod(this=exp.paren(h * _c("k", "t") + _c("d", "t")),
                        expression=num(2_147_483_647))
            bounds = sampling.thresholds()
        # the codes' query is large (level 0's binning): built on, never copied
        codes = (self.codes.subquery("c", copy=False) if isinstance(self.codes, exp.Select)
                 else exp.alias_(self.codes.copy(), "c"))
        drawn = exp.select(
            *[alias(rid.copy(), "rid")][: len(self.ids)], alias(_c("root", "t"), "node"),
            alias(h, "h"), *[_c(n, "c") for n in self.carried],
        ).from_(codes, copy=False).join(exp.alias_(table, "t"), join_type="CROSS", copy=False)
        # narrow columns: the pairs are many (a row per drawn row and tree)
        count: exp.Expression = num(1)
        kept: exp.Expression | None = None
        if not sampling.everything:
            hashed = _c("h")
            count = case(*[(exp.LT(this=hashed.copy(), expression=num(b)), num(k))
                           for k, b in enumerate(bounds)], default=num(len(bounds)))
            drew = exp.GTE(this=hashed.copy(), expression=num(bounds[0]))
            kept = exp.Not(this=exp.paren(drew)) if out_of_bag else drew
        query = exp.select(
            *[_c(n) for n in self.ids], alias(exp.cast(_c("node"), "INT"), "node"),
            alias(exp.cast(num(1) if out_of_bag else count, "SMALLINT"), "cnt"),
            alias(exp.cast(num(1), "SMALLINT"), "scan"), *[_c(n) for n in self.carried],
        ).from_(drawn.subquery("d", copy=False), copy=False)
        if kept is not None:
            query = query.where(kept)
        elif out_of_bag:
            query = query.where(exp.false())
        self.pairs = self.engine.materialize("pairs", query)
        self.engine.drop(table)
        # by path: one tree whose rows carry their codes (the level scan); a forest's pairs
        # are a row per tree, which a node computed from one tree's splits cannot tell apart
        if self.routing == PATH and self.carried and len(roots) == 1 and not out_of_bag:
            self.base, self.root, self.splits = self.pairs, roots[0].node, {}
        self.updating = (self.routing == UPDATE and bool(self.carried) and len(roots) == 1
                         and not out_of_bag)
        self.open = {roots[0].node} if self.updating else set()
        self.updates = 0

    def _drop_pairs(self) -> None:
        if self.base is not None and self.base is not self.pairs:
            self.engine.drop(self.base)
        self.base = None
        if self.pairs is not None:
            self.engine.drop(self.pairs)
            self.pairs = None
        self._drop_stale()

    def _sums(self) -> list[exp.Expression]:
        return [part for i, s in enumerate(self.summed)
                for part in self._summed(exp.func("SUM", s.copy()), f"s{i}", i > 0)]

    def _summed(self, total: exp.Expression, name: str, statistic: bool
                ) -> list[exp.Expression]:
        """A sum as one result column, or a wide statistic's as two parts: ``total DIV
        2**LIMB_BITS`` and the rest, each below 2^53 (``joined_limbs`` adds them back)."""
        if not (self.wide and statistic):
            return [alias(total, name)]
        return limbs(total, name)

    def _joined(self, scanned: exp.Table | None = None) -> exp.Select:
        """The pairs a histogram reads (``scan = 1``), each with its codes; ``scanned``: those
        pairs stored apart already (``_scanned_apart``)."""
        assert self.pairs is not None
        query = exp.select().from_(exp.alias_((scanned or self.pairs).copy(), "a"))
        if not self.carried:
            query = query.join(exp.alias_(self.codes.copy(), "c"),
                               on=exp.EQ(this=_c("rid", "a"), expression=_c("rid", "c")))
        if scanned is not None or self.base is not None:  # holding only the rows to read
            return query
        return query.where(exp.EQ(this=_c("scan", "a"), expression=num(1)))

    def _scanned_apart(self) -> exp.Table:
        """The pairs to scan stored apart, for a histogram that reads them once per feature
        (``UNION``): each ``GROUP BY`` then reads only them (a third to a half of the level
        on the benchmark file), not the whole level and a filter; on PostgreSQL the
        histograms took about a quarter less, copies included (benchmarks/README.md).
        Dropped once the histogram is read (``stale``). Routing by path stores them apart in
        the first place."""
        assert self.pairs is not None
        apart = self.engine.materialize("scanned", exp.select(exp.Star()).from_(
            self.pairs.copy()).where(exp.EQ(this=_c("scan"), expression=num(1))),
            statistics=False)
        self.scans += 1
        self.stale.append(apart)
        return apart

    def _code_of(self, table: str) -> exp.Expression:
        """Each row's code of the feature that the small table ``table`` names in its row:
        its ``word`` shifted right by its ``shift`` and masked, when the codes are packed
        (a CASE over a few words: a quarter less time for a forest's histogram at 1M rows
        than a CASE over 16 features), else a CASE over the features' columns."""
        if self.packing is None:
            return case(*[(exp.EQ(this=_c("feature", table), expression=num(i)), _c(n, self.cv))
                          for i, n in enumerate(self._code_columns())], default=num(0))
        return self.packing.read([_c(w, self.cv) for w in self.packing.words],
                                 _c("word", table), _c("shift", table))

    def _places(self, feature: int) -> tuple[int, int]:
        """A feature's (word, shift) in the packed codes (zeros when they are not packed)."""
        return self.packing.place(feature) if self.packing is not None else (0, 0)

    def _class_key(self) -> list[exp.Expression]:
        return [_c("y", self.cv)] if self.n_classes else []

    def histogram_query(self, n_features: int | None = None) -> exp.Expression:
        """Every feature's histogram of the scanned nodes: (node, code[, y], sums...);
        ``n_features``: the first that many features' only."""
        offsets = self.layout.offsets[:n_features]
        names = self._code_columns()[:n_features]
        node = _c("node", "a")
        keys = [node, *self._class_key()]
        if self.form == GROUPING_SETS:
            code = exp.func("COALESCE", *[
                exp.Add(this=_c(n, self.cv), expression=num(o))
                for n, o in zip(names, offsets)
            ])
            select = self._joined().select(
                alias(node.copy(), "node"), alias(code, "code"),
                *[alias(k.copy(), "y") for k in keys[1:]], *self._sums(), copy=False)
            sets = exp.GroupingSets(expressions=[
                exp.Tuple(expressions=[*[k.copy() for k in keys], _c(n, self.cv)])
                for n in names])
            select.set("group", exp.Group(grouping_sets=[sets]))
            return select
        if self.form == UNPIVOT:
            # each row's class weights side by side before it is unpivoted: a CASE per
            # class and row, not per row and feature, and a third of the groups to read
            values = list(self.summed)
            if self.n_classes:
                weight = self.summed[-1]
                y = self._class_key()[0]
                values = [self.summed[0]] + [
                    case((exp.EQ(this=y.copy(), expression=num(k)), weight.copy()),
                         default=num(0)) for k in range(self.n_classes)]
            codes = exp.Array(expressions=[exp.Add(this=_c(n, self.cv), expression=num(o))
                                           for n, o in zip(names, offsets)])
            rows = self._joined().select(
                alias(node.copy(), "node"),
                *[alias(v.copy(), f"v{i}") for i, v in enumerate(values)],
                alias(exp.Explode(this=codes), "code"), copy=False)
            return exp.select(_c("node"), _c("code"), *[
                part for i in range(len(values))
                for part in self._summed(exp.func("SUM", _c(f"v{i}")), f"s{i}", i > 0)
            ]).from_(rows.subquery("u", copy=False), copy=False).group_by(
                _c("node"), _c("code"), copy=False)
        parts = []
        apart = len(names) > 1 and self.base is None  # by path, they are apart already
        scanned = self._scanned_apart() if apart else None
        for n, o in zip(names, offsets):
            code = exp.Add(this=_c(n, self.cv), expression=num(o))
            part = self._joined(scanned).select(
                alias(node.copy(), "node"), alias(code, "code"),
                *[alias(k.copy(), "y") for k in keys[1:]], *self._sums(), copy=False
            ).group_by(*[k.copy() for k in keys], code.copy(), copy=False)
            parts.append(part)
        query = parts[0]
        for p in parts[1:]:
            query = exp.union(query, p, distinct=False)
        return query

    def long_histograms(self, n_features: int | None = None
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The scanned nodes' histograms as long rows sorted by (node, code), their sums
        whole numbers as summed (the row count, then each class's weight or each statistic);
        ``n_features``: the first that many features' only."""
        empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                 np.zeros((0, self.n_stats), dtype=np.int64))
        cols = self._fetch(self.histogram_query(n_features))
        if cols is None:
            return empty
        node, code = (c.astype(np.int64) for c in cols[:2])
        by_class = self.n_classes and self.form != UNPIVOT  # else the classes are columns
        summed = np.nan_to_num(np.stack(cols[2 + by_class:], axis=1),
                               nan=0.0).astype(np.int64)
        if self.wide:
            summed = joined_limbs(summed)
        if by_class:
            # classes side by side, in numpy: the grouping's rows are few, and a second
            # aggregate in the engine was one more shuffle a level on Spark
            y = cols[2].astype(np.int64)
            width = self.layout.width
            keys, at = np.unique(node * width + code, return_inverse=True)
            sums = np.zeros((len(keys), 1 + self.n_classes), dtype=np.int64)
            sums[:, 0] = np.bincount(at, weights=summed[:, 0], minlength=len(keys))
            sums[at, 1 + y] = summed[:, -1]  # one row per (node, code, class)
            node, code = keys // width, keys % width
        else:
            sums = summed
        order = np.lexsort((code, node))
        return node[order], code[order], sums[order]

    def allowed_query(self, allowed_table: exp.Table) -> exp.Expression:
        """Each scanned pair once per feature its node may split on, summed per key: the
        place of its (node, feature) in ``allowed_table`` times the widest feature's codes,
        plus its code (times the classes, plus its class): one integer key, grouped faster
        than the four columns it stands for, in key order, so that each node's codes come in
        order."""
        key: exp.Expression = exp.Add(this=_c("base", "m"), expression=self._code_of("m"))
        if self.n_classes:
            key = exp.Add(this=exp.Mul(this=exp.paren(key), expression=num(self.n_classes)),
                          expression=_c("y", self.cv))
        inner = self._joined().join(
            exp.alias_(allowed_table, "m"),
            on=exp.EQ(this=_c("node", "m"), expression=_c("node", "a")),
        ).select(alias(key, "k"), *[alias(s.copy(), f"v{i}") for i, s in enumerate(self.summed)],
                 copy=False)
        return exp.select(_c("k"), *[alias(exp.func("SUM", _c(f"v{i}")), f"s{i}")
                                     for i in range(len(self.summed))]).from_(
            inner.subquery("h")).group_by(_c("k")).order_by(_c("k"))

    def _pivot(self, grouped: exp.Expression, keys: list[str]) -> exp.Expression:
        """Classes' rows of a key side by side: the grouping by ``y`` is cheap where a CASE
        per class and row is not, and its result is small enough to pivot."""
        if not self.n_classes:
            return grouped
        weight = _c("s1") if len(self.summed) > 1 else _c("s0")
        columns = [alias(exp.func("SUM", _c("s0")), "s0")] + [
            alias(exp.func("SUM", case((exp.EQ(this=_c("y"), expression=num(k)), weight.copy()),
                                       default=num(0))), f"w{k}")
            for k in range(self.n_classes)]
        return exp.select(*[_c(k) for k in keys], *columns).from_(
            grouped.subquery("g")).group_by(*[_c(k) for k in keys])

    def _drop_stale(self) -> None:
        while self.stale:
            self.engine.drop(self.stale.pop())

    def _fetch(self, query: exp.Expression) -> list[np.ndarray] | None:
        self.scans += 1
        batches = list(self.engine.float_batches(query))
        self._drop_stale()
        if not batches:
            return None
        return [np.concatenate([b[i] for b in batches]) for i in range(len(batches[0]))]

    def _statistics(self, cols: list[np.ndarray], n_keys: int) -> tuple[list[np.ndarray],
                                                                         np.ndarray]:
        """The result's keys and its rows' statistics in the learner's units."""
        keys = [c.astype(np.int64) for c in cols[:n_keys]]
        sums = np.nan_to_num(np.stack(cols[n_keys:], axis=1), nan=0.0)
        return keys, sums * self.scale

    def histograms(self, allowed: Allowed | None = None) -> Histograms:
        if allowed is None:
            query = self.histogram_query()
            if self.form != UNPIVOT:  # unpivoted, the classes are columns already
                query = self._pivot(query, ["node", "code"])
            cols = self._fetch(query)
            if cols is None:
                return Histograms.of_dense(np.zeros(0, dtype=np.int64),
                                           np.zeros((0, self.layout.width, self.n_stats)),
                                           self.layout)
            (node, code), sums = self._statistics(cols, 2)
            return _dense(node, code, sums, self.layout)
        order = np.argsort(allowed.nodes, kind="stable")  # the histograms' nodes ascending
        nodes, mask = allowed.nodes[order], allowed.mask[order]
        # (node, feature) pairs feature by feature, so that each feature's entries come
        # together in key order
        feature, slot = np.nonzero(mask.T)
        width = max(f.n_codes for f in self.layout.features)
        if len(slot) * width * max(self.n_classes, 1) >= 2**53:
            # the keys come back as doubles
            raise UnsupportedOptionError(
                "a level of this forest has too many (node, feature, code) keys for one "
                "histogram: grow fewer trees at once or use fewer bins")
        base = np.arange(len(slot), dtype=np.int64) * width
        table = self.engine.load_rows(
            "allowed", ["node", "feature", "base", "word", "shift"], [INT] * 4 + [SHIFT],
            [(n, f, b, *self._places(f)) for n, f, b in zip(
                nodes[slot].tolist(), feature.tolist(), base.tolist())])
        try:
            cols = self._fetch(self.allowed_query(table))
        finally:
            self.engine.drop(table)
        if cols is None:
            return Histograms(np.zeros(0, dtype=np.int64), [None] * len(self.layout.features))
        return self._sparse(cols, nodes, slot, feature, width)

    def _sparse(self, cols: list[np.ndarray], nodes: np.ndarray, slot_of: np.ndarray,
                feature_of: np.ndarray, width: int) -> Histograms:
        """``allowed_query``'s rows as sparse blocks: each key's (node, feature) from its
        place (``slot_of``: the place's node in ``nodes``, ascending), its classes' rows side
        by side (a class's weight in its column, the rows of every class added)."""
        key = cols[0].astype(np.int64)
        units = np.nan_to_num(np.stack(cols[1:], axis=1), nan=0.0).astype(np.int64)
        if self.n_classes:
            y = key % self.n_classes
            key //= self.n_classes
            new = np.r_[True, key[1:] != key[:-1]]
            starts = np.flatnonzero(new)
            sums = np.zeros((len(starts), 1 + self.n_classes), dtype=np.int64)
            sums[:, 0] = np.add.reduceat(units[:, 0], starts)
            # one row per (node, feature, code, class): its weight in its class's column
            sums[np.cumsum(new) - 1, 1 + y] = units[:, -1]
            key, units = key[starts], sums
        place, code = key // width, key % width
        # the nodes that hold rows, in order, and each entry's slot among them
        slot = slot_of[place]
        held = np.zeros(len(nodes), dtype=bool)
        held[slot] = True
        ids = nodes[held]
        slot = (np.cumsum(held) - 1)[slot]
        feature = feature_of[place]
        bounds = np.searchsorted(feature, np.arange(len(self.layout.features) + 1))
        blocks: list[Block | None] = []
        for pos in range(len(self.layout.features)):
            lo, hi = int(bounds[pos]), int(bounds[pos + 1])
            if lo == hi:
                blocks.append(None)
                continue
            blocks.append(Sparse(slot[lo:hi], code[lo:hi], units[lo:hi], self.scale))
        return Histograms(ids, blocks)

    def route(self, routes: Sequence[Route], keep: bool = False) -> None:
        assert self.pairs is not None
        if self.base is not None:
            self._route_by_path(routes, keep)
            return
        if self.updating and not keep and self.updates < UPDATES_IN_A_ROW and all(
                self.layout.features[r.feature].n_codes <= MASK_CODES for r in routes
                if r.nominal):
            self._route_by_update(routes)
            self.updates += 1
            return
        self.open = {child for r in routes for child in (r.left, r.right) if child >= 0}
        self.updates = 0
        rows = [(r.node, r.feature, int(r.missing_left), r.upto, int(r.nominal), r.left,
                 r.right, int(r.scan_left), int(r.scan_right), *self._places(r.feature))
                for r in routes]
        split_columns = ["node", "feature", "miss", "upto", "nominal", "lt", "rt", "sl", "sr",
                         "word", "shift"]
        splits = self.engine.load_rows("splits", split_columns,
                                       [INT] * (len(split_columns) - 1) + [SHIFT], rows)
        members = [(r.node, c) for r in routes if r.nominal for c in r.left_codes]
        table = None
        if members:
            table = self.engine.load_rows("members", ["node", "code"], [INT, INT], members)
        # Each row's code of its split's feature, then its side, computed once in derived
        # tables of their own (PostgreSQL would otherwise evaluate the CASE over the features
        # at each place that reads it: 2.2 s a level at 1M rows)
        code = self._code_of("s")
        keyed = exp.select(
            *[_c(n, "a") for n in self.ids], alias(_c("node", "a"), "parent"), _c("cnt", "a"),
            *[_c(n, "s") for n in ("miss", "upto", "nominal", "lt", "rt", "sl", "sr")],
            alias(code, "k"), *[_c(n, "a") for n in self.carried],
        ).from_(exp.alias_(self.pairs.copy(), "a")).join(
            exp.alias_(splits, "s"), on=exp.EQ(this=_c("node", "a"), expression=_c("node", "s")),
            join_type="LEFT" if keep else None,
        )
        if not self.carried:
            keyed = keyed.join(exp.alias_(self.codes.copy(), "c"),
                               on=exp.EQ(this=_c("rid", "a"), expression=_c("rid", "c")))
        is_left_nominal: exp.Expression = exp.false()
        if table is not None:
            is_left_nominal = exp.Not(this=exp.Is(this=_c("node", "m"), expression=exp.null()))
        goes_left = _goes_left_by_row(_c("k", "r"), "r", is_left_nominal)
        sided = exp.select(*[_c(n, "r") for n in [
            *self.ids, "parent", "cnt", "lt", "rt", "sl", "sr", *self.carried]],
            alias(goes_left, "goes_left"),
        ).from_(computed_once(keyed).subquery("r", copy=False), copy=False)
        if table is not None:
            # a nominal split's left values as rows: one equality join, not a lookup per row
            sided = sided.join(exp.alias_(table, "m"), join_type="LEFT", on=exp.and_(
                exp.EQ(this=_c("node", "m"), expression=_c("parent", "r")),
                exp.EQ(this=_c("code", "m"), expression=_c("k", "r"))), copy=False)
        left = exp.column("goes_left", quoted=True)
        child: exp.Expression = exp.If(this=left, true=_c("lt"), false=_c("rt"))
        if keep:  # a row at a leaf (no split joined) stays there
            child = exp.func("COALESCE", child, _c("parent"))
        moved = exp.select(
            *[_c(n) for n in self.ids], alias(exp.cast(child, "INT"), "node"), _c("cnt"),
            alias(exp.cast(exp.If(this=left.copy(), true=_c("sl"), false=_c("sr")), "SMALLINT"),
                  "scan"),
            *[_c(n) for n in self.carried],
        ).from_(computed_once(sided).subquery("d", copy=False), copy=False)
        query = exp.select(*[_c(n) for n in self.ids], _c("node"), _c("cnt"), _c("scan"),
                           *[_c(n) for n in self.carried]).from_(
            moved.subquery("m")).where(exp.GTE(this=_c("node"), expression=num(0)))
        self.stale.append(self.pairs)
        self.scans += 1
        # deferred: computed by the next level's histogram, which reads them anyway (no pass
        # of their own); the pairs they come from stay until then
        self.pairs = self.engine.materialize("pairs", query, deferred=True)
        if not self.engine.defers_tables:
            self._drop_stale()
        self.engine.drop(splits)
        if table is not None:
            self.engine.drop(table)

    def _route_by_update(self, routes: Sequence[Route]) -> None:
        """Move the pairs down in place (``Engine.SCAN_ROUTING``): each row of a split node
        takes its child's node and scan flag, each row of a node that did not split (now a
        leaf) node -1 and no scan, in one ``UPDATE`` joined to a row per open node. A nominal
        split's left codes are bits of one BIGINT (``MASK_CODES``)."""
        assert self.pairs is not None
        split = {r.node for r in routes}
        rows = [(r.node, r.feature, int(r.missing_left), r.upto, int(r.nominal), r.left,
                 r.right, int(r.scan_left), int(r.scan_right),
                 sum(1 << c for c in r.left_codes) if r.nominal else 0) for r in routes]
        rows += [(node, 0, 0, 0, 0, -1, -1, 0, 0, 0) for node in sorted(self.open - split)]
        columns = ["node", "feature", "miss", "upto", "nominal", "lt", "rt", "sl", "sr", "lm"]
        splits = self.engine.load_rows("splits", columns, [INT] * len(columns), rows)
        k = self._code_of("s")
        left_nominal = exp.EQ(this=exp.BitwiseAnd(
            this=paren(exp.BitwiseRightShift(this=_c("lm", "s"), expression=k.copy())),
            expression=num(1)), expression=num(1))
        goes = _goes_left_by_row(k, "s", left_nominal)
        update = exp.Update(
            this=exp.alias_(self.pairs.copy(), "a"),
            expressions=[
                exp.EQ(this=exp.column("node", quoted=True),
                       expression=exp.If(this=goes, true=_c("lt", "s"), false=_c("rt", "s"))),
                exp.EQ(this=exp.column("scan", quoted=True),
                       expression=exp.If(this=goes.copy(), true=_c("sl", "s"),
                                         false=_c("sr", "s"))),
            ],
            from_=exp.From(this=exp.alias_(splits, "s")),
            where=exp.Where(this=exp.EQ(this=_c("node", "a"), expression=_c("node", "s"))),
        )
        self.scans += 1
        self.engine.execute(update)
        self.engine.drop(splits)
        self.open = {child for r in routes for child in (r.left, r.right) if child >= 0}

    def _route_by_path(self, routes: Sequence[Route], keep: bool) -> None:
        """Store the rows of the nodes the next histogram reads, from level 0's rows, each
        one's node computed by ``path_case`` over the splits so far: nothing else is
        written, and no row is joined to anything (``Engine.SCAN_ROUTING``)."""
        assert self.base is not None and not keep  # keep: out-of-bag rows, a forest's only
        self.splits.update((r.node, r) for r in routes)
        children = {child: read for r in routes for child, read in ((r.left, r.scan_left),
                                                                     (r.right, r.scan_right))
                    if child >= 0}
        if len(self.splits) > PATH_SPLITS:
            self._leave_path(children)
            return
        targets = {child for child, read in children.items() if read}
        query = exp.select(_c("node"), _c("cnt"), *[_c(n) for n in self.carried]).from_(
            self._by_path(targets), copy=False).where(
            exp.GTE(this=_c("node"), expression=num(0)), copy=False)
        if self.pairs is not self.base:  # read by nothing from now on
            self.stale.append(self.pairs)
        self.scans += 1
        # deferred: stored by the next histogram, which reads them anyway (they read only
        # level 0's rows, so the rows before them can go now)
        self.pairs = self.engine.materialize("routed", query, deferred=True, statistics=False)
        self._drop_stale()

    def _by_path(self, targets: set[int]) -> exp.Subquery:
        """Level 0's rows, each with its node among ``targets`` (-1: none), computed once
        per row, apart from the filter that reads it (PostgreSQL would evaluate the ``CASE``
        again for each row it keeps)."""
        assert self.base is not None
        node = path_case(self.root, self.splits, targets, self._code_columns(), self.layout)
        return computed_once(exp.select(
            alias(exp.cast(node, "INT", copy=False), "node"), _c("cnt", "a"),
            *[_c(n, "a") for n in self.carried], copy=False,
        ).from_(exp.alias_(self.base.copy(), "a"), copy=False)).subquery("p", copy=False)

    def _leave_path(self, children: dict[int, bool]) -> None:
        """Route by rewriting from now on (the tree has passed ``PATH_SPLITS``): every open
        row, the derived children's too, stored once more from level 0's rows with its node
        and whether the next histogram reads it, as ``route`` would have left it."""
        reads = [num(child) for child, read in sorted(children.items()) if read]
        scan = case((_c("node").isin(*reads), num(1)), default=num(0)) if reads else num(0)
        query = exp.select(
            _c("node"), _c("cnt"), alias(exp.cast(scan, "SMALLINT", copy=False), "scan"),
            *[_c(n) for n in self.carried],
        ).from_(self._by_path(set(children)), copy=False).where(
            exp.GTE(this=_c("node"), expression=num(0)), copy=False)
        assert self.base is not None and self.pairs is not None
        self.stale += [self.base] if self.pairs is self.base else [self.pairs, self.base]
        self.base = None
        self.scans += 1
        self.pairs = self.engine.materialize("pairs", query, deferred=True)
        if not self.engine.defers_tables:
            self._drop_stale()

    def add_votes(self, leaves: dict[int, np.ndarray]) -> None:
        assert self.pairs is not None
        width = len(next(iter(leaves.values()))) if leaves else 1
        names = [f"v{k}" for k in range(width)]
        table = self.engine.load_rows("leaves", ["node", *names], [INT] + ["DOUBLE"] * width,
                                      [(n, *map(float, v)) for n, v in leaves.items()])
        query = exp.select(
            alias(_c("rid", "a"), "rid"),
            *[alias(exp.func("SUM", _c(n, "l")), n) for n in names],
            alias(exp.func("COUNT", exp.Star()), "n"),
        ).from_(exp.alias_(self.pairs.copy(), "a")).join(
            exp.alias_(table, "l"), on=exp.EQ(this=_c("node", "a"), expression=_c("node", "l"))
        ).group_by(_c("rid", "a"))
        self.votes.append(self.engine.materialize("votes", query))
        self._drop_stale()
        self.engine.drop(table)

    def votes_summary(self, n_classes: int) -> np.ndarray:
        width = n_classes or 1
        names = [f"v{k}" for k in range(width)]
        parts = [exp.select(_c("rid"), *[_c(n) for n in names], _c("n")).from_(t.copy())
                 for t in self.votes]
        union = parts[0]
        for p in parts[1:]:
            union = exp.union(union, p, distinct=False)
        per_row = exp.select(
            _c("rid"), *[alias(exp.func("SUM", _c(n)), n) for n in names],
            alias(exp.func("SUM", _c("n")), "n"),
        ).from_(union.subquery("u")).group_by(_c("rid"))
        joined = exp.select().from_(per_row.subquery("v")).join(
            exp.alias_(self.codes.copy(), "c"),
            on=exp.EQ(this=_c("rid", "v"), expression=_c("rid", "c")))
        y = _c("y", "c")
        if n_classes:
            sums = [_c(n, "v") for n in names]
            predicted = case(*[
                (exp.and_(*[exp.GTE(this=sums[k].copy(), expression=sums[j].copy())
                            for j in range(k + 1, width)]) if k + 1 < width else exp.true(),
                 num(k)) for k in range(width - 1)], default=num(width - 1))
            query = joined.select(alias(y.copy(), "y"), alias(predicted, "p"),
                                  alias(exp.func("COUNT", exp.Star()), "k"), copy=False
                                  ).group_by(y.copy(), predicted.copy(), copy=False)
            out = np.zeros((n_classes, n_classes))
            for row in self.engine.execute(query):
                out[int(row[0]), int(row[1])] = float(row[2])
            return out
        mean = exp.Div(this=_c("v0", "v"), expression=_c("n", "v"))
        residual = exp.paren(y.copy() - mean)
        query = joined.select(
            exp.func("COUNT", exp.Star()), exp.func("SUM", y.copy()),
            exp.func("SUM", y.copy() * y.copy()), exp.func("SUM", residual * residual.copy()),
            copy=False)
        (row,) = self.engine.execute(query)
        return np.array([float(v or 0.0) for v in row])

    def close(self) -> None:
        for t in self.votes:
            self.engine.drop(t)
        self.votes = []
        self._drop_pairs()


def _goes_left_by_row(code: exp.Expression, splits: str, left_nominal: exp.Expression
                      ) -> exp.Expression:
    """Whether a row whose code of its split's feature is ``code`` goes left, its split's
    ``miss``, ``nominal`` and ``upto`` read from the table aliased ``splits``; a nominal
    split's membership is ``left_nominal``."""
    return case(
        (exp.EQ(this=code.copy(), expression=num(0)),
         exp.EQ(this=_c("miss", splits), expression=num(1))),
        (exp.EQ(this=_c("nominal", splits), expression=num(1)), left_nominal),
        default=exp.LTE(this=code.copy(), expression=_c("upto", splits)),
    )


def goes_left(route: Route, column: exp.Expression, n_codes: int, left: bool = True
              ) -> exp.Expression:
    """Whether a row whose code of the split's feature is ``column`` goes to ``route``'s left
    child (``left=False``: to its right), as ``SqlBackend.route`` decides it. Codes are never
    NULL (0 is the unknown value's), so a side is the other's negation."""
    if route.nominal:
        members = {*route.left_codes, *([0] if route.missing_left else [])}
        if not left:
            members = set(range(n_codes)) - members
        others = set(range(n_codes)) - members
        if not members or not others:  # every row, or none, goes this way
            return exp.GTE(this=column, expression=num(0 if members else n_codes))
        if len(others) < len(members):
            return exp.Not(this=column.isin(*[num(k) for k in sorted(others)]))
        return column.isin(*[num(k) for k in sorted(members)])
    upto = num(route.upto)
    if route.missing_left:  # the unknown code 0 goes left with the codes up to ``upto``
        taken: exp.Expression = exp.LTE(this=column, expression=upto)
        return taken if left else exp.GT(this=column.copy(), expression=upto.copy())
    taken = exp.Between(this=column, low=num(1), high=upto)
    return taken if left else exp.Not(this=paren(taken))


def path_case(root: int, splits: dict[int, Route], targets: set[int], columns: list[str],
              layout: Layout) -> exp.Expression:
    """Each row's node among ``targets`` (-1 for a row in none of them) from its codes
    (``columns``, table ``a``), by the ``splits`` from ``root``.

    A subtree with no target is one ``WHEN`` giving -1. At each split the side with fewer
    targets is a ``WHEN`` and the other side's splits go on as further ``WHEN``s of the same
    ``CASE`` (the scoring walk's folding, ``compiler.walk``): a row evaluates only the tests
    on its path, and ``CASE``s nest at most log2(targets) + 1 deep, whatever the depth of the
    tree (SQLite's parser allows about 18)."""
    counts: dict[int, int] = {}

    def count(node: int) -> int:
        if node in targets:
            return 1
        if node not in counts:
            split = splits.get(node)
            counts[node] = 0 if split is None else count(split.left) + count(split.right)
        return counts[node]

    def walk(node: int) -> exp.Expression:
        whens: list[tuple[exp.Expression, exp.Expression]] = []
        while node not in targets and count(node):
            split = splits[node]
            to_left = count(split.left) <= count(split.right)  # the smaller side is a WHEN
            side, node = (split.left, split.right) if to_left else (split.right, split.left)
            code = _c(columns[split.feature], "a")
            test = goes_left(split, code, layout.features[split.feature].n_codes, to_left)
            whens.append((test, walk(side) if count(side) else num(-1)))
        last = num(node if node in targets else -1)
        return case(*whens, default=last, copy=False) if whens else last

    return walk(root)


# -- numpy -----------------------------------------------------------------------------------
class NumpyBackend(Backend):
    """The same contract over arrays: ``codes`` (rows x features, the same codes as the SQL
    table's), ``values`` (rows x statistics, each row's whole-number statistics, the row
    count first), ``rid`` (the rows' numbers, for the bootstrap hash)."""

    def __init__(self, codes: np.ndarray, values: np.ndarray, rid: np.ndarray, layout: Layout,
                 scale: np.ndarray, y: np.ndarray | None = None) -> None:
        self.codes = codes
        self.y = y if y is not None else np.zeros(len(rid))
        self.vote_sums: np.ndarray | None = None
        self.vote_counts = np.zeros(len(rid))
        self.values = values
        self.rid = rid
        self.layout = layout
        self.n_stats = values.shape[1]
        self.scale = scale
        self.offsets = np.asarray(layout.offsets, dtype=np.int64)

    def start(self, roots: Sequence[Start], sampling: Sampling,
              out_of_bag: bool = False) -> None:
        rows, nodes, counts = [], [], []
        every = np.arange(len(self.rid))
        for r in roots:
            if sampling.everything or r.constants is None:
                cnt = np.ones(len(self.rid))
            else:
                cnt = sampling.counts(row_hash(self.rid, np.asarray(r.constants)))
            if out_of_bag:
                cnt = (cnt == 0).astype(np.float64)
            kept = cnt > 0
            rows.append(every[kept])
            nodes.append(np.full(int(kept.sum()), r.node, dtype=np.int64))
            counts.append(cnt[kept])
        self.row = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        self.node = np.concatenate(nodes) if nodes else np.zeros(0, dtype=np.int64)
        self.cnt = np.concatenate(counts) if counts else np.zeros(0)
        self.scan = np.ones(len(self.row), dtype=bool)

    def histograms(self, allowed: Allowed | None = None) -> Histograms:
        row, node, cnt = self.row[self.scan], self.node[self.scan], self.cnt[self.scan]
        ids = np.unique(node)
        slot = np.searchsorted(ids, node)
        values = self.values[row] * cnt[:, None]
        values[:, 0] = cnt
        if allowed is None:
            width = self.layout.width
            flat = np.zeros((self.n_stats, len(ids) * width))
            for j, off in enumerate(self.offsets):
                key = slot * width + off + self.codes[row, j].astype(np.int64)
                for s in range(self.n_stats):
                    flat[s] += np.bincount(key, weights=values[:, s], minlength=len(ids) * width)
            hist = flat.reshape(self.n_stats, len(ids), width).transpose(1, 2, 0)
            return Histograms.of_dense(ids, np.ascontiguousarray(hist) * self.scale, self.layout)
        order = np.searchsorted(allowed.nodes, ids)
        mask = allowed.mask[order]  # by slot

        def block(j: int) -> Block | None:
            f = self.layout.features[j]
            takes = np.flatnonzero(mask[:, j])
            if not takes.size:
                return None
            local = np.full(len(ids), -1, dtype=np.int64)
            local[takes] = np.arange(takes.size)
            here = local[slot]
            sel = here >= 0
            key = here[sel] * f.n_codes + self.codes[row[sel], j].astype(np.int64)
            size = takes.size * f.n_codes
            arr = np.stack([np.bincount(key, weights=values[sel, s], minlength=size)
                            for s in range(self.n_stats)], axis=1)
            return takes, arr.reshape(takes.size, f.n_codes, self.n_stats) * self.scale

        # each feature's block on its own: side by side in threads
        return Histograms(ids, side_by_side(block, range(len(self.layout.features)), len(row)))

    def route(self, routes: Sequence[Route], keep: bool = False) -> None:
        by_node = {r.node: r for r in routes}
        ids = np.fromiter(by_node, dtype=np.int64)
        order = np.argsort(ids)
        ids = ids[order]
        table = [by_node[i] for i in ids]
        at = np.searchsorted(ids, self.node)
        at = np.minimum(at, len(ids) - 1)
        has = ids[at] == self.node
        feature = np.array([r.feature for r in table], dtype=np.int64)[at]
        code = self.codes[self.row, feature].astype(np.int64)
        upto = np.array([r.upto for r in table], dtype=np.int64)[at]
        miss = np.array([r.missing_left for r in table], dtype=bool)[at]
        nominal = np.array([r.nominal for r in table], dtype=bool)[at]
        left = np.where(code == 0, miss, code <= upto)
        if nominal.any():
            member = np.zeros(len(self.row), dtype=bool)
            for i, r in enumerate(table):
                if r.nominal:
                    here = (at == i) & has
                    member[here] = np.isin(code[here], r.left_codes)
            left = np.where(nominal & (code != 0), member, left)
        lt = np.array([r.left for r in table], dtype=np.int64)[at]
        rt = np.array([r.right for r in table], dtype=np.int64)[at]
        sl = np.array([r.scan_left for r in table], dtype=bool)[at]
        sr = np.array([r.scan_right for r in table], dtype=bool)[at]
        new_node = np.where(has, np.where(left, lt, rt), self.node if keep else -1)
        kept = new_node >= 0
        self.row, self.cnt = self.row[kept], self.cnt[kept]
        self.node = new_node[kept]
        self.scan = np.where(left, sl, sr)[kept]

    def add_votes(self, leaves: dict[int, np.ndarray]) -> None:
        ids = np.fromiter(leaves, dtype=np.int64)
        order = np.argsort(ids)
        ids = ids[order]
        values = np.stack([leaves[int(i)] for i in ids])
        slot = np.searchsorted(ids, self.node)
        width = values.shape[1]
        if self.vote_sums is None:
            self.vote_sums = np.zeros((len(self.rid), width))
            self.vote_counts = np.zeros(len(self.rid))
        for k in range(width):
            self.vote_sums[:, k] += np.bincount(self.row, weights=values[slot, k],
                                                minlength=len(self.rid))
        self.vote_counts += np.bincount(self.row, minlength=len(self.rid))

    def votes_summary(self, n_classes: int) -> np.ndarray:
        assert self.vote_sums is not None
        voted = self.vote_counts > 0
        y = self.y[voted]
        sums = self.vote_sums[voted]
        if n_classes:
            out = np.zeros((n_classes, n_classes))
            np.add.at(out, (y.astype(np.int64), np.argmax(sums, axis=1)), 1.0)
            return out
        residual = y - sums[:, 0] / self.vote_counts[voted]
        return np.array([float(voted.sum()), y.sum(), (y * y).sum(),
                         (residual * residual).sum()])
