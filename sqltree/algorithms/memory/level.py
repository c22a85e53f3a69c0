"""A level's rows in numpy, and the shared stage over them: histogram groups (``routes``
moves the rows down a level).

The rows are those of the SQL plans' level tables (``queries.build_level0`` read once, then
moved down level by level): ``node``, ``w``, ``y`` and one column per feature, continuous
values (or bin indexes) and nominal codes as float64, NaN for an unknown value. The engines
refuse NaN in a feature, so NaN means NULL here and nothing else.

Sums follow the histogram's rules: with ``bits``, weights are summed as integer counts of
``2**-bits`` (``fixed_point.to_fixed``) and turned into doubles only after summing, so every sum
is the exact one the engine returns; without, weights are whole numbers (unit weights), whose
double sums are exact in any order.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlglot import exp

from ...dataset import Dataset, Feature, frame_level0
from ...parallel import engine_workers, side_by_side
from ...tree import CONTINUOUS

WHOLE_LOGS_MAX = 1 << 21
"""Whole numbers up to this one take their logarithm from a table (``ln``)."""

_whole_logs = np.zeros(1)
_whole_logs_lock = threading.Lock()


def _logs_up_to(n: int) -> np.ndarray:
    """The table of ``log(i)`` for i = 0 .. at least ``n`` (entry 0 unused), grown by doubling.

    Grown under a lock: a level's features are scored in threads (``parallel``), and two
    threads growing the table at once appended one's logarithms after the other's longer
    table, misplacing them (seen in 6 of 30 trials of four threads)."""
    global _whole_logs
    table = _whole_logs
    if n < len(table):
        return table
    with _whole_logs_lock:
        table = _whole_logs
        if n >= len(table):
            size = max(n + 1, 2 * len(table), 1024)
            more = np.fromiter(map(math.log, range(len(table), size)), dtype=np.float64)
            table = _whole_logs = np.concatenate([table, more])
        return table


def ln(x: np.ndarray) -> np.ndarray:
    """Natural logarithms as the engines' ``LN`` computes them, the C library's ``log``.

    numpy's own ``log`` (SIMD code on CPUs with AVX-512) differs from it in the last bit for
    about one argument in 2,500, enough to break a tie of gains the other way. The C function
    is called once per argument, but the arguments are mostly whole numbers (the counts of
    unit weights), whose logarithms come from a table of them.
    """
    flat = x.ravel()
    out = np.empty(flat.size)
    whole = (flat >= 1) & (flat <= WHOLE_LOGS_MAX) & (flat == np.floor(flat))
    at = np.flatnonzero(whole)
    if len(at):
        index = flat[at].astype(np.int64)
        out[at] = _logs_up_to(int(index.max()))[index]
    rest = np.flatnonzero(~whole)
    if len(rest):
        # the same weights recur across candidates: each distinct one once
        values, inverse = np.unique(flat[rest], return_inverse=True)
        logs = np.fromiter(map(math.log, values.tolist()), dtype=np.float64, count=len(values))
        out[rest] = logs[inverse]
    return out.reshape(x.shape)


NEAR_BEST_ERROR = 1e-10
"""How far a gain from numpy's ``log`` may be from the one from ``ln``, relative to the sum
of the magnitudes of the terms it is made of: the two logarithms differ by at most one unit in
the last place (measured over 9 million arguments from 1e-9 to 1e6), and the sums round
alike, so a relative 1e-10 leaves a margin of about a million. The scorers screen candidates
with numpy's and score only those that can come near the best with ``ln``."""


def xlogx(e: np.ndarray) -> np.ndarray:
    """``sqlexpr.xlogx``: ``e * LN(e)``, 0 where ``e`` is not positive."""
    out = np.zeros(len(e))
    positive = np.flatnonzero(e > 0)
    if len(positive):
        out[positive] = e[positive] * ln(e[positive])
    return out


@dataclass
class Level:
    """A level's rows: node, weight, class index (or centred target), feature values."""

    node: np.ndarray
    w: np.ndarray
    y: np.ndarray
    x: np.ndarray | None
    """The feature values of the level-0 rows, column-major; None where ``ranks`` holds them."""
    column: dict[int, int]
    """Feature index -> column of ``x`` (and key of ``ranks``)."""
    base: np.ndarray | None = None
    """The row of ``x`` that each row of the level is (None: the row of the same number): the
    feature values are never copied down the levels, each stage reads the columns it needs."""
    ranks: dict[int, Ranks] | None = None
    """Column -> the ranks of its values of the level-0 rows, for a level of growth (the
    stages group rows by them): every column's, and no ``x``. None for a level without
    (pruning's recounts)."""

    def values(self, col: int) -> np.ndarray:
        """Column ``col``'s values of the level's rows (a level with ``x``)."""
        assert self.x is not None
        return self.x[:, col] if self.base is None else self.x[self.base, col]

    def ranks_of(self, col: int) -> Ranks:
        """Column ``col``'s ranks of the level's rows (``Ranks.of``)."""
        if self.ranks is None:
            return Ranks.of(self.values(col))
        found = self.ranks[col]
        return found if self.base is None else found.take(self.base)


@dataclass(frozen=True)
class Ranks:
    """A column's values as ranks (-1 for an unknown value), so that rows sort and group by
    integer keys: the value itself where every known value is a small whole number (nominal
    codes, bin indexes), else its index among the column's sorted distinct values
    (``values``). Ranked once per column of ``x``, they serve every level, whose rows are rows
    of ``x`` (``Level.base``)."""

    rank: np.ndarray
    values: np.ndarray | None
    size: int
    """One more than the largest rank."""

    @classmethod
    def of(cls, v: np.ndarray) -> Ranks:
        """``v``'s ranks, in the narrowest integer type that holds them (``RANK_TYPES``)."""
        known = ~np.isnan(v)
        every = bool(known.all())
        kv = v if every else v[known]
        if len(kv) == 0:
            return cls(np.full(len(v), -1, dtype=np.int8), None, 0)
        top = float(kv.max())
        if kv.min() >= 0 and top < RANK_WHOLE_MAX and bool(np.all(kv == np.floor(kv))):
            rank = np.full(len(v), -1, dtype=_rank_type(int(top) + 1))
            rank[known] = kv
            return cls(rank, None, int(top) + 1)
        # np.unique's inverse, with fewer and narrower temporaries (a thread ranks a column
        # of 10M rows beside another): the sorted values' run numbers, put back in place
        order = np.argsort(kv)
        ordered = kv[order]
        del kv
        new = np.empty(len(ordered), dtype=bool)
        new[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
        values = ordered[new]
        del ordered
        rank_type = _rank_type(len(values))
        run = np.cumsum(new, dtype=np.int32 if len(values) <= 2**31 else np.int64)
        del new
        run -= 1
        rank = np.full(len(v), -1, dtype=rank_type)
        rank[order if every else np.flatnonzero(known)[order]] = run
        return cls(rank, values, len(values))

    def take(self, rows: np.ndarray) -> Ranks:
        return Ranks(self.rank[rows], self.values, self.size)

    def value(self, rank: np.ndarray) -> np.ndarray:
        return rank.astype(np.float64) if self.values is None else self.values[rank]


RANK_WHOLE_MAX = 1 << 20
"""Known values that are all whole numbers from 0 below this one rank as themselves."""

RANK_TYPES = (np.int8, np.int16, np.int32)
"""A column's ranks (-1 for an unknown value) are the first of these that holds them: a
growth keeps every column's for every row, and most columns of a table (nominal codes, binned
or rounded values) have few distinct values (10M rows of 16 features: 640 MB as int32)."""


def _rank_type(size: int) -> type[np.signedinteger]:
    """The first of ``RANK_TYPES`` that holds ranks from -1 below ``size``."""
    return next(t for t in RANK_TYPES if size <= np.iinfo(t).max + 1)


NODE_CHUNK_ROWS = 1 << 18
"""Rows of a part of ``Histogram.node_chunks``. The 1M benchmark file, C4.5 ``max_depth=10``,
two runs each: parts of 131,072 rows peaked at 714-731 MB in 17.4-18.3 s, of 262,144 at
726-748 MB in 17.0-17.3 s, of 524,288 at 772-796 MB in 16.1-16.8 s, and the whole level at
once at about 923 MB in 16.0-16.9 s (more numpy calls on smaller arrays cost a little)."""

COUNTED_KEYS_PER_ROW = 4
"""A feature's groups are counted into an array of every (node, rank) key, without sorting,
where the keys are at most this many per row of the level; else the rows are sorted."""


def read_level0(data: Dataset, query: Any, regression: bool, ranked: bool = False) -> Level:
    """The rows of the level-0 query (``build_level0``), read with one statement; ``ranked``:
    a level of growth, which keeps its columns' ranks (``Level.ranks``)."""
    width = 3 + len(data.features)
    made = frame_level0(data, query)
    constant = _constant_columns(query) if made is None else {}
    if constant:
        query = query.copy()
        query.set("expressions", [e for j, e in enumerate(query.expressions)
                                  if j not in constant])
    # a DataFrame's rows are made in numpy, with no statement (``dataset.frame_level0``)
    batches = [made] if made is not None else list(data.engine.float_batches(query))
    fetched: list[np.ndarray] = [
        (batches[0][j] if len(batches) == 1 else np.concatenate([b[j] for b in batches]))
        if batches else np.zeros(0) for j in range(width - len(constant))
    ]
    del batches
    size = len(fetched[0])
    given = iter(fetched)
    columns: list[np.ndarray | None] = [
        np.full(size, constant[j]) if j in constant else next(given) for j in range(width)
    ]
    del fetched, given
    node, w, y = (columns[j] for j in range(3))
    assert node is not None and w is not None and y is not None
    column = {f.index: j for j, f in enumerate(data.features)}
    rows = len(node)
    # each column is let go once converted, copied or ranked: the result of 10M rows of 16
    # features is 1.3 GB as doubles
    node, y = node.astype(np.int64), y if regression else _classes(y)
    columns[:3] = [None] * 3
    if not ranked:
        # column-major: a stage reads a column's values, or one value of each row (``gather``)
        x = np.empty((rows, width - 3), dtype=np.float64, order="F")
        for j in range(width - 3):
            x[:, j] = columns[3 + j]
            columns[3 + j] = None
        return Level(node=node, w=w, y=y, x=x, column=column)

    def rank(j: int) -> Ranks:
        values, columns[3 + j] = columns[3 + j], None
        assert values is not None
        return Ranks.of(values)

    # nominal columns first: their ranks take little beside their doubles, which are let go
    # before the continuous columns' sorts
    features = sorted(range(width - 3), key=lambda j: data.features[j].kind == CONTINUOUS)
    ranks = side_by_side(rank, features, rows, engine_workers(data.engine))
    return Level(node=node, w=w, y=y, x=None, column=column,
                 ranks=dict(zip(features, ranks, strict=True)))


def _constant_columns(query: Any) -> dict[int, float]:
    """The columns of a SELECT that are number literals (a first level's node and unit
    weight), by position: filled in here rather than read (10M rows: 240 MB in the engine's
    result and again in numpy, at the read's peak). Empty where every column is one."""
    if not isinstance(query, exp.Select):
        return {}
    found = {}
    for j, e in enumerate(query.expressions):
        inner = e.this if isinstance(e, exp.Alias) else e
        while isinstance(inner, (exp.Cast, exp.Paren)):
            inner = inner.this
        if isinstance(inner, exp.Literal) and not inner.is_string:
            found[j] = float(inner.this)
    return found if len(found) < len(query.expressions) else {}


def _classes(y: np.ndarray) -> np.ndarray:
    """Class indexes (doubles from the engine) in the narrowest type that holds them
    (``RANK_TYPES``): a level keeps one per row, and its previous level's during a
    partition."""
    return y.astype(_rank_type(int(y.max(initial=0)) + 1))


def _rows_of(index: np.ndarray) -> np.ndarray:
    """Row numbers as int32 where they fit (a level keeps one per row), else as they are."""
    if len(index) and int(index.max()) >= 2**31:
        return index
    return index.astype(np.int32, copy=False)


def per_row_sums(level: Level, n_classes: int, bits: int | None, moments: bool,
                 poisson: bool = False) -> np.ndarray:
    """Each row's terms of the histogram's sums: its weight in its class's column (an integer
    count of ``2**-bits`` with ``bits``), or the moments ``w``, ``w*y``, ``w*y*y``; with
    ``poisson``, ``w*y*LN(y)`` (0 where y is not positive) last, as
    ``cart.regression.poisson_terms`` writes them (with ``bits``, each as an integer count)."""
    if moments:
        wy = level.w * level.y
        if poisson:
            positive = level.y > 0
            with np.errstate(divide="ignore", invalid="ignore"):
                last = np.where(positive, wy * ln(np.where(positive, level.y, 1.0)), 0.0)
        else:
            last = wy * level.y
        terms = [level.w, wy, last]
        if bits is not None:
            terms = [row_terms(t, bits) for t in terms]
        return np.column_stack(terms)
    out = np.zeros((len(level.w), n_classes), dtype=np.float64 if bits is None else np.int64)
    out[np.arange(len(level.w)), level.y] = row_terms(level.w, bits)
    return out


def row_terms(w: np.ndarray, bits: int | None) -> np.ndarray:
    """Each row's one nonzero term of ``per_row_sums`` (in its class's column): its weight,
    or with ``bits`` its integer count of ``2**-bits``."""
    if bits is None:
        return w
    return np.floor(w * (2.0**bits) + 0.5).astype(np.int64)


def as_weight(sums: np.ndarray, bits: int | None) -> np.ndarray:
    """Sums as DOUBLE weights (``fixed_point.weight``): integer counts scaled by ``2**-bits``."""
    if bits is None:
        return sums.astype(np.float64, copy=False)
    return sums.astype(np.float64) * (2.0**-bits)


@dataclass
class Groups:
    """A feature's histogram rows of known values, sorted by (node, value): per group its
    node, value, row count and sums; ``starts`` marks each node's first group."""

    node: np.ndarray
    v: np.ndarray
    n: np.ndarray
    sums: np.ndarray


def _group(keys_sorted: list[np.ndarray], n: int) -> np.ndarray:
    """Indexes where a run of equal keys starts, in rows sorted by those keys."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for k in keys_sorted:
        change[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(change)


@dataclass
class Histogram:
    """A level's histogram, computed per feature when a stage first asks for it."""

    level: Level
    features: list[Feature]
    n_classes: int
    bits: int | None
    moments: bool = False
    poisson: bool = False
    _terms: np.ndarray | None = field(default=None, init=False)
    _groups: dict[int, Groups] = field(default_factory=dict, init=False)
    _totals: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, init=False)
    _parts: list[tuple[np.ndarray | None, int | None]] | None = field(default=None,
                                                                      init=False)
    _chunks: list[np.ndarray | None] | None = field(default=None, init=False)

    @property
    def terms(self) -> np.ndarray:
        """Each row's terms (``per_row_sums``), made when first asked for: the class counts
        of C4.5 and CART classification are summed from each row's one term
        (``_class_parts``), and the matrix of a term per class was a level's largest resting
        array (10M rows of 3 classes: 240 MB)."""
        if self._terms is None:
            self._terms = per_row_sums(self.level, self.n_classes, self.bits, self.moments,
                                       self.poisson)
        return self._terms

    def _no_sums(self) -> np.ndarray:
        """The sums of no row: ``terms``' width and type."""
        return np.zeros((0, 3 if self.moments else self.n_classes),
                        dtype=np.float64 if self.bits is None else np.int64)

    def totals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per node (ascending): its id, row count and sums (``attr = -1`` rows)."""
        if self._totals is None:
            node = self.level.node
            if len(node) == 0:
                self._totals = node, np.zeros(0, dtype=np.int64), self._no_sums()
            else:
                low = int(node.min())
                slots, n, sums = self.sums_by(node - low, int(node.max()) - low + 1, None)
                self._totals = slots + low, n, sums
        return self._totals

    def groups(self, f: Feature) -> Groups:
        """Feature ``f``'s groups of known values; a nominal feature's are kept for a stage
        that asks again (CART's value orders). A continuous feature's are about as many as
        the level's rows at the deep levels, too many to keep for every feature: a stage
        that needs them again groups again, or counts the rows it needs (``sums_by``)."""
        found = self._groups.get(f.index)
        if found is None:
            found = self.grouped(self.ranks(f))
            if f.kind != CONTINUOUS:
                self._groups[f.index] = found
        return found

    def keep_groups(self, f: Feature, parts: list[Groups]) -> None:
        """Keep nominal feature ``f``'s groups, grouped a part of the nodes at a time
        (``node_chunks``, in order), for a stage that asks again (``groups``): a few per
        node, where grouping the level's rows again took seconds at 10M rows."""
        self._groups[f.index] = Groups(*(np.concatenate([getattr(g, name) for g in parts])
                                         for name in ("node", "v", "n", "sums")))

    def ranks(self, f: Feature) -> Ranks:
        """Feature ``f``'s ranks of the level's rows."""
        return self.level.ranks_of(self.level.column[f.index])

    def node_chunks(self) -> list[np.ndarray | None]:
        """The level's rows in parts of whole nodes (ascending), each of about
        ``NODE_CHUNK_ROWS`` rows or one node's: a scorer that works node by node groups a
        part at a time, so that its temporaries are a part's, not the level's (at the deep
        levels of the 1M benchmark file, 200 MB a thread). ``[None]``: all rows at once.
        Made in the thread that scores, before the features are dealt to threads."""
        if self._chunks is None:
            self._chunks = [None]
            nodes, n, _ = self.totals()
            if len(self.level.node) > NODE_CHUNK_ROWS and len(n) > 1:
                # a node's part is where its first row falls, the rows counted in node order
                first = np.cumsum(n) - n
                starts = np.flatnonzero(np.diff(first // NODE_CHUNK_ROWS)) + 1
                if len(starts) and len(starts) < 1 << 16:
                    # each row's part, and each part's rows in row order (gathers then read
                    # the level's arrays forwards), by a radix sort of 16-bit keys
                    part = np.searchsorted(nodes[starts], self.level.node, "right")
                    order = np.argsort(part.astype(np.uint16), kind="stable")
                    self._chunks = np.split(_rows_of(order), np.cumsum(np.bincount(part))[:-1])
        return self._chunks

    def grouped(self, r: Ranks, rows: np.ndarray | None = None) -> Groups:
        """The groups of (node, rank) keys of ``rows`` (all when None; ``node_chunks``), in
        key order."""
        level = self.level
        if rows is None:
            is_known = r.rank >= 0
            # None: every row (no index of every row, nor gathers by it)
            known = None if is_known.all() else np.flatnonzero(is_known)
            del is_known
        else:
            known = rows[r.rank[rows] >= 0]
        if len(level.node if known is None else known) == 0:
            return Groups(level.node[:0], np.zeros(0), np.zeros(0, dtype=np.int64),
                          self._no_sums())
        # the key in place: a deep level's temporaries are a few arrays a row per feature
        key = level.node.astype(np.int64) if known is None else level.node[known].astype(
            np.int64, copy=False)
        low = int(key.min())
        span = int(key.max()) - low + 1
        if span == 1:
            return self._one_node(r, known, low)
        key -= low
        key *= r.size
        key += r.rank if known is None else r.rank[known]
        slots, n, sums = self.sums_by(key, span * r.size, known)
        del key, known
        return Groups(node=slots // r.size + low, v=r.value(slots % r.size), n=n, sums=sums)

    def _one_node(self, r: Ranks, known: np.ndarray | None, node: int) -> Groups:
        """``grouped`` where the rows are one node's: the keys are the ranks, from the least
        (a slot per rank between the rows' least and greatest, not per rank of the column),
        and the node one value seen as an array (a first level's continuous feature has a
        group per row)."""
        rank = (r.rank if known is None else r.rank[known]).astype(np.int64)
        least = int(rank.min())
        rank -= least
        slots, n, sums = self.sums_by(rank, int(rank.max()) + 1, known)
        del rank
        return Groups(node=np.broadcast_to(np.int64(node), len(slots)), v=r.value(slots + least),
                      n=n, sums=sums)

    def sums_by(self, key: np.ndarray, size: int, rows: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct keys (ascending, from 0 below ``size``) of ``rows`` (all when None),
        each with its row count and the sums of its rows' terms. Counted into every key's
        slot where the keys are few (``COUNTED_KEYS_PER_ROW``), else grouped by sorting;
        summed by class with ``bincount`` where its double sums are exact
        (``_class_parts``)."""
        parts = self._class_parts()
        if size <= COUNTED_KEYS_PER_ROW * len(key) + 1024 and parts:
            n = np.bincount(key, minlength=size)
            slots = np.flatnonzero(n)
            # the sums by class of the keys that occur only: a slot per key and class of
            # every key was up to 4 x 3 doubles per row, for each of two parts (at a deep
            # level, a nominal feature of 50 values: a few hundred MB)
            if len(slots) == size:  # every key occurs (a first level's ranks): its own number
                return slots, n, self._class_sums(key, rows, size, parts)
            counts = n[slots]
            del n
            # int32 numbers where each slot's by class fit: an array of every key and one of
            # every row, at the first levels of 10M rows 80 MB each as int64
            fits = (len(slots) + 1) * max(self.n_classes, 1) < 2**31
            number = np.zeros(size, dtype=np.int32 if fits else np.int64)
            number[slots] = np.arange(len(slots), dtype=number.dtype)
            return slots, counts, self._class_sums(number[key], rows, len(slots), parts)
        order = np.argsort(key, kind="stable" if self.moments and self.bits is None else None)
        key = key[order]
        starts = _group([key], len(key))
        n = np.diff(np.append(starts, len(key)))
        if parts:
            # each row's group put back in the rows' order, so that the rows' classes and
            # weights are read forwards, not gathered in key order (exact sums: any order)
            group = np.empty(len(key), dtype=np.int32 if len(starts) < 2**31 else np.int64)
            group[order] = np.cumsum(np.append(False, key[1:] != key[:-1]), dtype=group.dtype)
            del order
            return key[starts], n, self._class_sums(group, rows, len(starts), parts)
        at = order if rows is None else rows[order]
        del order
        return key[starts], n, np.add.reduceat(self.terms[at], starts, axis=0)

    def _class_sums(self, index: np.ndarray, rows: np.ndarray | None, size: int,
                    parts: list[tuple[np.ndarray | None, int | None]]) -> np.ndarray:
        """Per index from 0 below ``size``: the sums of the terms of ``rows`` (all when None)
        by class, in the terms' type; ``index`` gives each row's."""
        classes = self.n_classes
        y = self.level.y if rows is None else self.level.y[rows]
        slot = index * classes
        slot += y
        del y
        return sum_exactly(slot, parts, size * classes, rows).reshape(size, classes)

    def forget_terms(self) -> None:
        """Let go of the rows' terms (made again if asked): 160 MB at 10M rows of fractional
        weights, held until the level is dropped, after the next level is made."""
        self._terms = self._parts = None

    @property
    def exact(self) -> bool:
        """Whether the sums by class are exact (integers, whole numbers): sums of parts of
        the rows then add up to those of all, in any order."""
        return bool(self._class_parts())

    def _class_parts(self) -> list[tuple[np.ndarray | None, int | None]]:
        """Each row's one nonzero term (in its class's column) in parts for ``sum_exactly``;
        empty for moments and fractional weights without a fixed point."""
        if self._parts is None:
            level = self.level
            self._parts = [] if self.moments or len(level.w) == 0 else exact_parts(
                row_terms(level.w, self.bits), self.bits is not None)
        return self._parts


def exact_parts(term: np.ndarray, fixed: bool) -> list[tuple[np.ndarray | None, int | None]]:
    """``term`` (one per row, none negative) as doubles whose every sum by ``bincount`` is
    exact, each part with the shift that puts its sums back in place (None: the sums are the
    doubles themselves); empty where there are none.

    Doubles (not ``fixed``) must be whole numbers totalling below 2**53: one part, None where
    every term is 1 (rows are counted, and a stage need not gather a weight per row).
    Fixed-point counts (int64) reach 2**62: split into the bits below ``shift`` and those
    above, each part's sums below 2**53 (for up to 2**(53 - 10) rows)."""
    if not fixed:
        if bool(np.all(term == 1.0)) and len(term) < 2**53:
            return [(None, None)]
        whole = bool(np.all(term == np.floor(term)))
        return [(term.astype(np.float64), None)] if whole and float(
            np.abs(term).sum()) < 2.0**53 else []
    if float(term.sum()) < 2.0**53:
        return [(term.astype(np.float64), 0)]
    shift = 53 - len(term).bit_length()
    if shift < 10:
        return []
    return [((term >> shift).astype(np.float64), shift),
            ((term & ((1 << shift) - 1)).astype(np.float64), 0)]


def sum_exactly(slot: np.ndarray, parts: list[tuple[np.ndarray | None, int | None]],
                size: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Per slot from 0 below ``size``, the sum of the terms (``exact_parts``) of the rows in
    it (``rows`` of the parts, in ``slot``'s order; None: all): doubles, or int64 counts for
    fixed-point or unit terms."""
    out: np.ndarray | None = None
    for part, shift in parts:
        if part is None:  # each term 1: the counts, exact as int64 (not copied to doubles)
            return np.bincount(slot, minlength=size)
        # one part's terms gathered at a time
        summed = np.bincount(slot, weights=part if rows is None else part[rows],
                             minlength=size)
        if shift is None:
            return summed
        # in place: a continuous feature's sums are a slot per row and class at the deep
        # levels, and four such arrays at once were a level's largest temporaries
        whole = _as_int64_in_place(summed)
        del summed
        if shift:
            np.left_shift(whole, shift, out=whole)
        if out is None:
            out = whole
        else:
            out += whole
            del whole
    assert out is not None
    return out


def _as_int64_in_place(whole_numbers: np.ndarray) -> np.ndarray:
    """Doubles that are whole numbers as int64 in their own memory, a block at a time: a
    first level's sums of a continuous feature are a slot per value and class (240 MB at 10M
    rows of 3 classes), and a converted copy doubled them."""
    out = whole_numbers.view(np.int64)
    for lo in range(0, len(out), IN_PLACE_BLOCK):
        # numpy copies the overlapping block before it writes
        out[lo:lo + IN_PLACE_BLOCK] = whole_numbers[lo:lo + IN_PLACE_BLOCK]
    return out


IN_PLACE_BLOCK = 1 << 16
