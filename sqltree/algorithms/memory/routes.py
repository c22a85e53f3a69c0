"""Where a level's rows go: each row's key for its node's chosen test, as
``queries.build_partition`` keys them, and the next level that the routes of those keys make.

Both read the level a block of rows at a time (``ROW_BLOCK``): a test's lookup takes several
arrays a row (the row's test, column, rank, value and threshold), and over the whole level
they were the largest temporaries of a deep level at 10M rows (more than 1 GB).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ... import queries as q
from ...parallel import side_by_side
from .level import COUNTED_KEYS_PER_ROW, Level, _rows_of

ROW_BLOCK = 1 << 20
"""Rows of a level keyed or routed at a time."""

NO_TEST = -2
"""``row_keys``' key of a row whose node has no test."""


@dataclass(frozen=True)
class _Tests:
    """The tests, ascending by node: each one's node, column, and threshold as the level's
    rows are compared with it (a rank where the column is ranked; NaN: a nominal test)."""

    node: np.ndarray
    col: np.ndarray
    thr: np.ndarray
    looked_up: tuple[int, ...]
    """Ranked columns whose nominal tests look up the value of a rank (codes too many to be
    ranks)."""

    @classmethod
    def of(cls, level: Level, tests: Sequence[tuple[int, int, float | None]]) -> _Tests:
        node = np.array([t[0] for t in tests], dtype=np.int64)
        order = np.argsort(node)
        col = np.array([level.column[t[1]] for t in tests], dtype=np.int64)[order]
        thr = np.array([np.nan if t[2] is None else t[2] for t in tests])[order]
        looked_up = []
        if level.x is None:
            assert level.ranks is not None
            nominal = np.isnan(thr)
            ranked_thr = thr.copy()
            for c in np.unique(col).tolist():
                values = level.ranks[c].values
                if values is None:  # small whole numbers: a rank is its value
                    continue
                # a cut's threshold becomes the rank of the largest value not above it
                cut = (col == c) & ~nominal
                ranked_thr[cut] = np.searchsorted(values, thr[cut], "right") - 1.0
                if np.any((col == c) & nominal):
                    looked_up.append(c)
            thr = ranked_thr
        return cls(node[order], col, thr, tuple(looked_up))

    def keys(self, level: Level, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Of rows ``lo`` to ``hi``, those of tested nodes and each one's key (int32)."""
        first, last = equal_range(self.node, level.node[lo:hi])
        rows = np.flatnonzero(last > first)
        at = first[rows]
        del first, last
        rows += lo
        of_x = rows if level.base is None else level.base[rows]
        v = (gather(level.x, of_x, self.col[at]) if level.x is not None
             else self._ranked_values(level, of_x, at))
        thr = self.thr[at]
        with np.errstate(invalid="ignore"):
            key = np.where(np.isnan(thr), v, np.where(v <= thr, 0.0, 1.0))
        unknown = v < 0 if v.dtype.kind == "i" else np.isnan(v)  # ranks: -1
        key[unknown] = q.UNKNOWN_KEY
        return rows, key.astype(np.int32)

    def _ranked_values(self, level: Level, of_x: np.ndarray, at: np.ndarray) -> np.ndarray:
        """The tested values of rows ``of_x`` (of level 0) from the ranks, compared with the
        ranked thresholds: the ranks themselves (-1: unknown) unless a nominal test's value
        is looked up (then doubles, NaN: unknown)."""
        assert level.ranks is not None
        col_of_row = self.col[at]
        rank = np.empty(len(at), dtype=np.int32)
        for c in np.unique(self.col).tolist():
            rows = np.flatnonzero(col_of_row == c)
            rank[rows] = level.ranks[c].rank[of_x[rows]]
        v: np.ndarray = rank
        nominal = np.isnan(self.thr)
        for c in self.looked_up:
            values = level.ranks[c].values
            assert values is not None
            if v is rank:
                v = np.where(rank < 0, np.nan, rank.astype(np.float64))
            looked_up = np.flatnonzero((col_of_row == c) & nominal[at] & (rank >= 0))
            v[looked_up] = values[rank[looked_up]]
        return v


def row_keys(level: Level, tests: Sequence[tuple[int, int, float | None]],
             workers: int | None = 1) -> np.ndarray:
    """Each row's key for its node's test (0/1 for ``v <= t``/above, the code of a nominal
    value, -1 when unknown; ``NO_TEST`` for a row of an untested node), as int32; blocks
    keyed by up to ``workers`` threads (``parallel.side_by_side``; None: one per core)."""
    out = np.full(len(level.node), NO_TEST, dtype=np.int32)
    if tests:
        prepared = _Tests.of(level, tests)

        def keyed(lo: int) -> None:
            rows, key = prepared.keys(level, lo, min(lo + ROW_BLOCK, len(out)))
            out[rows] = key

        side_by_side(keyed, range(0, len(out), ROW_BLOCK), len(out), workers)
    return out


def test_keys(level: Level, tests: Sequence[tuple[int, int, float | None]]
              ) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the tested nodes, and each one's key (``row_keys``) as a double."""
    keys = row_keys(level, tests)
    rows = np.flatnonzero(keys != NO_TEST)
    return rows, keys[rows].astype(np.float64)


def gather(x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``x[rows, cols]``: one value of each row, as one ``take`` from the flat array where it
    is contiguous (about twice as fast as numpy's indexing by two arrays)."""
    if not (x.flags.f_contiguous or x.flags.c_contiguous):
        return x[rows, cols]
    row_step, col_step = (stride // x.itemsize for stride in x.strides)
    return np.take(x.ravel(order="K"), rows * row_step + cols * col_step)


def equal_range(keys: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each query, where its run of equal entries of the sorted integer ``keys`` starts
    and ends (``searchsorted`` left and right; equal for a query no key equals): from a table
    of every key between the least and the greatest where they span at most a few per query,
    else by binary search."""
    if len(keys) == 0 or len(queries) == 0:
        empty = np.zeros(len(queries), dtype=np.int64)
        return empty, empty
    low, high = int(keys[0]), int(keys[-1])
    span = high - low + 1
    if span > COUNTED_KEYS_PER_ROW * len(queries) + 1024:
        return np.searchsorted(keys, queries, "left"), np.searchsorted(keys, queries, "right")
    # a slot of no entries on each side takes the queries outside [low, high]
    ends = np.zeros(span + 2, dtype=np.int64)
    np.cumsum(np.bincount(keys - low, minlength=span), out=ends[1:-1])
    ends[-1] = ends[-2]
    slot = np.clip(queries - (low - 1), 0, span + 1)
    starts = np.concatenate(([0], ends[:-1]))
    starts[-1] = ends[-1]
    return starts[slot], ends[slot]


def partition(
    level: Level,
    tests: Sequence[tuple[int, int, float | None]],
    routes: Sequence[tuple[int, int, int, float]],
    keys: np.ndarray | None = None,
    workers: int | None = 1,
    by_node: bool = False,
) -> Level:
    """The next level (``queries.build_partition``): each row of a tested node goes to the
    child(ren) routed for its key, its weight times the route's factor; rows with no route
    are left out. ``keys``: the rows' keys (``row_keys``) of these tests or more; blocks
    routed by up to ``workers`` threads (None: one per core).

    ``by_node``: the rows in the order of their nodes, each node's in the order they had (so
    in the order of level 0's rows, as without): a node's rows are then together, and a
    stage that reads a part of the nodes (``Histogram.node_chunks``) reads neighbouring rows,
    not one row in every few dozen of the level's arrays."""
    if keys is None:
        keys = row_keys(level, tests, workers)
    r_node = np.array([r[0] for r in routes], dtype=np.int64)
    r_key = np.array([r[1] for r in routes], dtype=np.float64)
    by = np.lexsort((r_key, r_node))
    r_node, r_key = r_node[by], r_key[by]
    r_child = np.array([r[2] for r in routes], dtype=np.int64)[by]
    r_factor = np.array([r[3] for r in routes], dtype=np.float64)[by]
    # a (node, key) pair as one integer: keys are small integers from -1 up
    span = int(max(np.max(r_key), keys.max(initial=0))) + 2
    r_pair = r_node * span + (r_key.astype(np.int64) + 1)
    route_type = np.int32 if len(routes) < 2**31 else np.int64

    def routed_block(lo: int) -> tuple[np.ndarray, np.ndarray]:
        block = keys[lo:lo + ROW_BLOCK]
        rows = np.flatnonzero(block != NO_TEST)
        pair = level.node[lo + rows].astype(np.int64) * span
        pair += block[rows]
        pair += 1
        first, last = equal_range(r_pair, pair)
        del pair
        rows += lo
        many = last - first
        if len(many) and many.max() > 1:  # a row to several children (an unknown value spread)
            src = np.repeat(rows, many)
            # the j-th copy of a row takes its j-th route: first + (place - the row's first place)
            start = np.cumsum(many) - many
            route = np.repeat(first - start, many) + np.arange(len(src))
        else:
            routed = many > 0
            src, route = rows[routed], first[routed]
        return _rows_of(src), route.astype(route_type)

    blocks = side_by_side(routed_block, range(0, len(keys), ROW_BLOCK), len(keys), workers)
    if by_node and blocks:
        src, route = (np.concatenate(parts) for parts in zip(*blocks, strict=True))
        del blocks
        # each route's child numbered in ascending order, the rows sorted stably by it
        children = np.unique(r_child)
        order = stable_order(np.searchsorted(children, r_child)[route], len(children))
        src, route = src[order], route[order]
        del order
        blocks = [(src[lo:lo + ROW_BLOCK], route[lo:lo + ROW_BLOCK])
                  for lo in range(0, len(src), ROW_BLOCK)]
        del src, route
    ends = np.cumsum([len(src) for src, _ in blocks], dtype=np.int64)
    size = int(ends[-1]) if len(ends) else 0
    node = np.empty(size, dtype=np.int64)
    w = np.empty(size)
    y = np.empty(size, dtype=level.y.dtype)
    base = np.empty(size, dtype=level.base.dtype if level.base is not None
                    else _rows_of(np.array([len(keys)])).dtype)

    def moved(i: int) -> None:
        src, route = blocks[i]
        at = slice(int(ends[i]) - len(src), int(ends[i]))
        node[at] = r_child[route]
        np.multiply(level.w[src], r_factor[route], out=w[at])
        y[at] = level.y[src]
        base[at] = src if level.base is None else level.base[src]

    side_by_side(moved, range(len(blocks)), size, workers)
    return Level(node=node, w=w, y=y, x=level.x, column=level.column, base=base,
                 ranks=level.ranks)


def stable_order(key: np.ndarray, size: int) -> np.ndarray:
    """The order that sorts ``key`` (integers from 0 below ``size``, at most 2**32) stably:
    numpy's radix sort of 16-bit keys, in two passes (low half, then high) where they need
    more."""
    if size <= 1 << 16:
        return np.argsort(key.astype(np.uint16), kind="stable")
    order = np.argsort((key & 0xFFFF).astype(np.uint16), kind="stable")
    return order[np.argsort((key[order] >> 16).astype(np.uint16), kind="stable")]
