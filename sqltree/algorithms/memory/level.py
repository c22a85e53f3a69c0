"""A level's rows in numpy, and the shared stages over them: histogram groups and partition.

The rows are those of the SQL plans' level tables (``queries.build_level0`` read once, then
moved down level by level): ``node``, ``w``, ``y`` and one column per feature, continuous
values (or bin indexes) and nominal codes as float64, NaN for an unknown value. The engines
refuse NaN in a feature, so NaN means NULL here and nothing else.

Sums follow the histogram's rules: with ``bits``, weights are summed as integer counts of
``2**-bits`` (``queries.to_fixed``) and turned into doubles only after summing, so every sum
is the exact one the engine returns; without, weights are whole numbers (unit weights), whose
double sums are exact in any order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import queries as q
from ...dataset import Dataset, Feature


@dataclass
class Level:
    """A level's rows: node, weight, class index (or centred target), feature values."""

    node: np.ndarray
    w: np.ndarray
    y: np.ndarray
    x: np.ndarray
    column: dict[int, int]
    """Feature index -> column of ``x``."""


def read_level0(data: Dataset, query: Any, regression: bool) -> Level:
    """The rows of the level-0 query (``build_level0``), read with one statement."""
    frame = data.engine.frame(query)
    values = np.empty((len(frame), 3 + len(data.features)), dtype=np.float64)
    for j, name in enumerate(frame.columns):
        values[:, j] = frame[name].to_numpy(dtype=np.float64, na_value=np.nan)
    return Level(
        node=values[:, 0].astype(np.int64),
        w=np.ascontiguousarray(values[:, 1]),
        y=np.ascontiguousarray(values[:, 2]) if regression else values[:, 2].astype(np.int64),
        x=np.ascontiguousarray(values[:, 3:]),
        column={f.index: j for j, f in enumerate(data.features)},
    )


def partition(
    level: Level,
    tests: Sequence[tuple[int, int, float | None]],
    routes: Sequence[tuple[int, int, int, float]],
) -> Level:
    """The next level (``queries.build_partition``): each row of a tested node goes to the
    child(ren) routed for its key (0/1 for ``v <= t``/above, the code of a nominal value, -1
    when unknown), its weight times the route's factor; rows with no route are left out."""
    test_node = np.array([t[0] for t in tests], dtype=np.int64)
    order = np.argsort(test_node)
    test_node = test_node[order]
    test_col = np.array([level.column[t[1]] for t in tests], dtype=np.int64)[order]
    test_thr = np.array([np.nan if t[2] is None else t[2] for t in tests])[order]
    at = np.searchsorted(test_node, level.node)
    at = np.minimum(at, len(test_node) - 1)
    tested = test_node[at] == level.node
    rows = np.flatnonzero(tested)
    at = at[rows]
    v = level.x[rows, test_col[at]]
    thr = test_thr[at]
    with np.errstate(invalid="ignore"):
        key = np.where(np.isnan(thr), v, np.where(v <= thr, 0.0, 1.0))
    key = np.where(np.isnan(v), float(q.UNKNOWN_KEY), key)

    r_node = np.array([r[0] for r in routes], dtype=np.int64)
    r_key = np.array([r[1] for r in routes], dtype=np.float64)
    by = np.lexsort((r_key, r_node))
    r_node, r_key = r_node[by], r_key[by]
    r_child = np.array([r[2] for r in routes], dtype=np.int64)[by]
    r_factor = np.array([r[3] for r in routes], dtype=np.float64)[by]
    # a (node, key) pair as one sortable number: keys are small integers from -1 up
    span = float(max(np.max(np.abs(r_key)), np.max(np.abs(key), initial=0.0)) + 2.0)
    r_pair = r_node * span + r_key
    pair = level.node[rows] * span + key
    lo = np.searchsorted(r_pair, pair, "left")
    hi = np.searchsorted(r_pair, pair, "right")
    many = hi - lo
    src = np.repeat(rows, many)
    first = np.repeat(lo, many)
    offset = np.arange(len(src)) - np.repeat(np.cumsum(many) - many, many)
    route = first + offset
    return Level(
        node=r_child[route],
        w=level.w[src] * r_factor[route],
        y=level.y[src],
        x=level.x[src],
        column=level.column,
    )


def per_row_sums(level: Level, n_classes: int, bits: int | None, moments: bool,
                 poisson: bool = False) -> np.ndarray:
    """Each row's terms of the histogram's sums: its weight in its class's column (an integer
    count of ``2**-bits`` with ``bits``), or the moments ``w``, ``w*y``, ``w*y*y``; with
    ``poisson``, ``w*y*LN(y)`` (0 where y is not positive) last, as
    ``cart.regression.poisson_terms`` writes them."""
    if moments:
        wy = level.w * level.y
        if poisson:
            positive = level.y > 0
            with np.errstate(divide="ignore", invalid="ignore"):
                last = np.where(positive, wy * np.log(np.where(positive, level.y, 1.0)), 0.0)
            return np.column_stack([level.w, wy, last])
        return np.column_stack([level.w, wy, wy * level.y])
    if bits is None:
        out = np.zeros((len(level.w), n_classes), dtype=np.float64)
        out[np.arange(len(level.w)), level.y] = level.w
        return out
    fixed = np.floor(level.w * (2.0**bits) + 0.5).astype(np.int64)
    out_i = np.zeros((len(level.w), n_classes), dtype=np.int64)
    out_i[np.arange(len(level.w)), level.y] = fixed
    return out_i


def as_weight(sums: np.ndarray, bits: int | None) -> np.ndarray:
    """Sums as DOUBLE weights (``queries.weight``): integer counts scaled by ``2**-bits``."""
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
    terms: np.ndarray = field(init=False)
    _groups: dict[int, Groups] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.terms = per_row_sums(self.level, self.n_classes, self.bits, self.moments,
                                  self.poisson)

    def totals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per node (ascending): its id, row count and sums (``attr = -1`` rows)."""
        order = np.argsort(self.level.node, kind="stable")
        nodes = self.level.node[order]
        starts = _group([nodes], len(nodes))
        if len(starts) == 0:
            return nodes, np.zeros(0, dtype=np.int64), self.terms[:0]
        counts = np.diff(np.append(starts, len(nodes)))
        return nodes[starts], counts, np.add.reduceat(self.terms[order], starts, axis=0)

    def groups(self, f: Feature) -> Groups:
        """Feature ``f``'s groups of known values."""
        found = self._groups.get(f.index)
        if found is not None:
            return found
        v = self.level.x[:, self.level.column[f.index]]
        known = np.flatnonzero(~np.isnan(v))
        order = known[np.lexsort((v[known], self.level.node[known]))]
        nodes, values = self.level.node[order], v[order]
        starts = _group([nodes, values], len(order))
        if len(starts) == 0:
            out = Groups(nodes, values, np.zeros(0, dtype=np.int64), self.terms[:0])
        else:
            out = Groups(
                node=nodes[starts],
                v=values[starts],
                n=np.diff(np.append(starts, len(order))),
                sums=np.add.reduceat(self.terms[order], starts, axis=0),
            )
        self._groups[f.index] = out
        return out
