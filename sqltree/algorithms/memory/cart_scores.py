"""CART's scoring query (``cart.scores.build_cart_scores``) computed in numpy.

The same candidates, the same double arithmetic in the same order, and the same choice per
(node, feature): continuous cuts between adjacent values more than ``FEATURE_THRESHOLD``
apart, nominal values ordered by class proportion (or mean target) and cut, every two-way
partition of at most ``EXACT_SUBSETS_MAX`` values for more than two classes, all known values
left; each with the unknown rows right and, where there are some, left; the leaf rules; the
impurity decrease; the best candidate per (node, feature), first in ``TIE_ORDER`` among those
within the tie tolerance, with ``n_near``. Rows come out as the query's (``SCORE_COLUMNS``),
so the strategy chooses from them exactly as from the engine's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...dataset import Feature
from ...parallel import side_by_side
from ...tree import CONTINUOUS
from ..cart.scores import (
    CONTINUOUS_CUT,
    FEATURE_THRESHOLD,
    KNOWN_LEFT,
    ORDERED_CUT,
    POISSON_EPSILON,
    REGRESSION,
    SUBSET,
)
from ..cart.subsets import EXACT_SUBSETS_MAX, MEAN_ORDER, orders
from .level import NEAR_BEST_ERROR, Groups, Histogram, _group, as_weight, ln

LN2 = float(np.log(2.0))


@dataclass
class Segments:
    """A feature's groups split by node: ``seg`` (each group's segment), ``starts`` (each
    segment's first group), ``m`` (values per segment)."""

    seg: np.ndarray
    starts: np.ndarray
    m: np.ndarray

    @classmethod
    def of(cls, g: Groups) -> Segments:
        starts = _group([g.node], len(g.node))
        # int32: a first level's continuous feature has a group per value
        seg = np.zeros(len(g.node), dtype=np.int32)
        seg[starts[1:]] = 1
        np.cumsum(seg, out=seg)
        return cls(seg, starts, np.diff(np.append(starts, len(g.node))))


def _running(values: np.ndarray, seg: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running sums of ``values`` (rows in order) restarting at each segment."""
    cum = np.cumsum(values, axis=0)
    before = np.zeros_like(cum[:1]).repeat(len(starts), axis=0)
    before[1:] = cum[starts[1:] - 1]
    return cum - before[seg]


def _left_sum(columns: np.ndarray) -> np.ndarray:
    """``(c0 + c1 + ...)`` added left to right, as ``sqlexpr.add_all`` writes it."""
    out = columns[:, 0].copy()
    for j in range(1, columns.shape[1]):
        out = out + columns[:, j]
    return out


def _rounded(h: Histogram) -> bool:
    """Whether the histogram's sums are doubles whose rounding depends on their order."""
    return h.moments and h.bits is None


def proportion(h: Histogram, g: Groups, o: int) -> np.ndarray:
    """Each group's proportion of class ``o`` (its mean target for ``MEAN_ORDER``), 0 where
    its weight is not positive (``subsets._proportion``)."""
    if o == MEAN_ORDER:
        num, den = as_weight(g.sums[:, 1], h.bits), as_weight(g.sums[:, 0], h.bits)
    else:
        num = as_weight(g.sums[:, o], h.bits)
        den = as_weight(g.sums.sum(axis=1), h.bits) if h.bits is not None else _left_sum(g.sums)
    out = np.zeros(len(num))
    positive = den > 0
    out[positive] = num[positive] / den[positive]
    return out


def in_order(h: Histogram, g: Groups, s: Segments, o: int) -> np.ndarray:
    """The groups sorted by segment, then proportion of ``o``, then value code."""
    return np.lexsort((g.v, proportion(h, g, o), s.seg))


@dataclass
class Candidates:
    """Every candidate of a level, column by column (``CANDIDATE_COLUMNS`` before the unknown
    sides), with the known totals of its (node, feature): ``kn``, ``k``."""

    node: list[np.ndarray]
    attr: list[np.ndarray]
    kind: list[np.ndarray]
    o: list[np.ndarray]
    cut: list[np.ndarray]
    thr: list[np.ndarray]
    nxt: list[np.ndarray]
    ln: list[np.ndarray]
    l: list[np.ndarray]  # noqa: E741
    kn: list[np.ndarray]
    k: list[np.ndarray]

    @classmethod
    def empty(cls) -> Candidates:
        return cls(*[[] for _ in range(11)])

    def add(self, *, node: np.ndarray, attr: int, kind: int, ln: np.ndarray, l: np.ndarray,  # noqa: E741
            kn: np.ndarray, k: np.ndarray, o: Any = -1, cut: Any = 0, thr: Any = np.nan,
            nxt: Any = np.nan) -> None:
        size = len(node)
        self.node.append(node)
        self.attr.append(np.full(size, attr, dtype=np.int64))
        self.kind.append(np.full(size, kind, dtype=np.int64))
        for name, value in (("o", o), ("cut", cut), ("thr", thr), ("nxt", nxt)):
            getattr(self, name).append(np.broadcast_to(value, (size,)))
        self.ln.append(ln)
        self.l.append(l)
        self.kn.append(kn)
        self.k.append(k)


def candidates(h: Histogram, g: Groups, f: Feature, regression: bool) -> Iterator[Candidates]:
    """Every candidate of feature ``f`` on the nodes of its groups ``g``: a continuous
    feature's cuts a block of ``CANDIDATE_CHUNK`` groups at a time (a level's first nodes
    have about a group per row), or the nominal cuts; then each node's split of all known
    values left."""
    if len(g.node) == 0:
        return
    s = Segments.of(g)
    kn = np.add.reduceat(g.n, s.starts)
    k_w = as_weight(np.add.reduceat(g.sums, s.starts, axis=0), h.bits)
    if f.kind == CONTINUOUS:
        yield from _continuous(h, g, s, f.index, kn, k_w)
    else:
        out = Candidates.empty()
        _nominal(out, h, g, s, f.index, kn, k_w, regression)
        yield out
    out = Candidates.empty()
    out.add(node=g.node[s.starts], attr=f.index, kind=KNOWN_LEFT, ln=kn.astype(np.float64),
            l=k_w, kn=kn, k=k_w)
    yield out


def _continuous(h: Histogram, g: Groups, s: Segments, attr: int, kn: np.ndarray,
                k_w: np.ndarray) -> Iterator[Candidates]:
    size = len(g.node)
    for lo, hi, run_n, run_s in _running_blocks(g, s, size if _rounded(h) else CANDIDATE_CHUNK):
        v = g.v[lo:hi]
        nxt = g.v[lo + 1:hi + 1]
        same = s.seg[lo + 1:hi + 1] == s.seg[lo:hi - 1 if hi == size else hi]
        if hi == size:  # the last group has no next
            nxt, same = np.append(nxt, np.nan), np.append(same, False)
        with np.errstate(invalid="ignore"):
            cut = np.flatnonzero(same & (nxt > v + FEATURE_THRESHOLD))
        seg = s.seg[lo + cut]
        out = Candidates.empty()
        out.add(node=g.node[lo + cut], attr=attr, kind=CONTINUOUS_CUT,
                ln=run_n[cut].astype(np.float64), l=as_weight(_rows(run_s, cut), h.bits),
                kn=kn[seg], k=_rows(k_w, seg), thr=v[cut], nxt=nxt[cut])
        yield out


def _running_blocks(g: Groups, s: Segments, block: int
                    ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """``_running``'s counts and sums of groups ``lo`` to ``hi``, ``block`` groups at a time
    (a first level's continuous feature has a group per value, and running sums of them all
    were a few hundred MB a thread at 10M rows). A block's sums start from the blocks' before
    and its segments' totals before: exact where the sums are whole numbers (counts, fixed
    point); moments in doubles take one block (their sums' rounding follows the rows before)."""
    size = len(g.node)
    if block >= size:
        yield 0, size, _running(g.n, s.seg, s.starts), _running(g.sums, s.seg, s.starts)
        return
    seg_n = np.add.reduceat(g.n, s.starts)
    seg_s = np.add.reduceat(g.sums, s.starts, axis=0)
    before_n, before_s = np.cumsum(seg_n) - seg_n, np.cumsum(seg_s, axis=0) - seg_s
    carry_n, carry_s = g.n[:0].sum(), g.sums[:0].sum(axis=0)
    for lo in range(0, size, block):
        hi = min(lo + block, size)
        cum_n = np.cumsum(g.n[lo:hi]) + carry_n
        cum_s = np.cumsum(g.sums[lo:hi], axis=0) + carry_s
        carry_n, carry_s = cum_n[-1], cum_s[-1]
        seg = s.seg[lo:hi]
        yield lo, hi, cum_n - before_n[seg], cum_s - _rows(before_s, seg)


def _nominal(out: Candidates, h: Histogram, g: Groups, s: Segments, attr: int,
             kn: np.ndarray, k_w: np.ndarray, regression: bool) -> None:
    if regression:
        by, scanned = [MEAN_ORDER], np.ones(len(s.m), dtype=bool)
    elif h.n_classes == 2:
        by, scanned = orders(2), np.ones(len(s.m), dtype=bool)
    else:
        by, scanned = orders(h.n_classes), s.m > EXACT_SUBSETS_MAX
    for o in by:
        order = in_order(h, g, s, o)
        seg = s.seg[order]
        rank = np.arange(len(order)) - s.starts[seg] + 1
        run_n = _running(g.n[order], seg, s.starts)
        run_s = as_weight(_running(g.sums[order], seg, s.starts), h.bits)
        cut = np.flatnonzero(scanned[seg] & (rank < s.m[seg]))
        out.add(node=g.node[order][cut], attr=attr, kind=ORDERED_CUT, ln=run_n[cut].astype(
            np.float64), l=run_s[cut], kn=kn[seg[cut]], k=k_w[seg[cut]], o=o, cut=rank[cut])
    if regression or h.n_classes == 2:
        return
    # every two-way partition of a node's values, the nodes with m values at once
    for m in range(2, EXACT_SUBSETS_MAX + 1):
        segs = np.flatnonzero(s.m == m)
        if len(segs) == 0:
            continue
        masks = np.arange(1, 1 << (m - 1), dtype=np.int64)
        bits = (masks[:, None] >> np.arange(m)[None, :]) & 1
        rows = s.starts[segs][:, None] + np.arange(m)[None, :]
        ln = (g.n[rows] @ bits.T).ravel()
        sums = np.einsum("km,smc->skc", bits.astype(g.sums.dtype), g.sums[rows])
        size = len(masks)
        out.add(node=np.repeat(g.node[s.starts[segs]], size), attr=attr, kind=SUBSET,
                ln=ln.astype(np.float64), l=as_weight(sums.reshape(-1, sums.shape[2]), h.bits),
                kn=np.repeat(kn[segs], size), k=np.repeat(k_w[segs], size, axis=0),
                cut=np.tile(masks, len(segs)))


def impurity(c: np.ndarray, w: np.ndarray, criterion: str, log: Any = ln) -> np.ndarray:
    """``build_impurity``: Gini or entropy of count columns ``c`` of weight ``w``, 0 for none;
    the entropy's logarithm is the engines' (``ln``) unless ``log`` says otherwise."""
    positive = w > 0
    safe_w = np.where(positive, w, 1.0)
    if criterion == "gini":
        squares = c * c
        value = 1.0 - _left_sum(squares) / (safe_w * safe_w)
    else:
        p = c / safe_w[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(c > 0, p * (log(np.where(c > 0, p, 1.0)) / LN2), 0.0)
        value = 0.0 - _left_sum(terms)
    return np.where(positive, value, 0.0)


def _variance(c: np.ndarray, w: np.ndarray) -> np.ndarray:
    mean = c[:, 1] / w
    value = c[:, 2] / w - mean * mean
    return np.where(value > 0.0, value, 0.0)


def _sum_log_mean(c: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``cart.scores._sum_log_mean``: ``s1 LN(s1 / w)``, 0 where ``s1`` is not positive."""
    s1 = c[:, 1]
    positive = s1 > 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(positive, s1 * ln(np.where(positive, s1 / w, 1.0)), 0.0)


def _deviance(c: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``cart.scores._deviance``: a side's half Poisson deviance ``(s2 - s1 LN(s1/w)) / w``,
    never below 0."""
    value = (c[:, 2] - _sum_log_mean(c, w)) / w
    return np.where(value > 0.0, value, 0.0)


@dataclass
class Rules:
    """What ``_gains`` compares with: the leaf rules, the criterion and the tie tolerance."""

    criterion: str
    min_samples_leaf: int
    min_weight_leaf: float
    tie_tolerance: float


def score(
    h: Histogram,
    features: Sequence[Feature],
    totals: tuple[np.ndarray, np.ndarray, np.ndarray],
    rules: Rules,
    workers: int | None = None,
) -> list[tuple[Any, ...]]:
    """The scoring query's rows: the best candidate per (node, feature), by node and feature;
    ``workers``: threads for the features (``parallel.side_by_side``).

    A feature's candidates are scored a part of the level's nodes at a time
    (``Histogram.node_chunks``; not moments in doubles, whose running sums' rounding follows
    the rows before) and ``CANDIDATE_CHUNK`` at
    a time, each batch keeping only the candidates near its own best of a (node, feature),
    among which are those near the best of all: a level's temporaries are a batch's, not
    one set per candidate of the level."""
    t = _NodeTotals.of(totals, h.bits, rules.criterion)
    chunks = [None] if _rounded(h) else h.node_chunks()
    regression = rules.criterion in REGRESSION

    def of_feature(f: Feature) -> list[dict[str, np.ndarray]]:
        r = h.ranks(f) if len(chunks) > 1 else None
        near, parts = [], []
        for rows in chunks:
            g = h.groups(f) if r is None else h.grouped(r, rows)
            if r is not None and f.kind != CONTINUOUS:
                parts.append(g)
            for c in candidates(h, g, f, regression):
                if not c.node:
                    continue
                cat = {name: np.concatenate(getattr(c, name)) for name in vars(c)}
                for i in range(0, len(cat["node"]), CANDIDATE_CHUNK):
                    found = _scored(h, {k: v[i:i + CANDIDATE_CHUNK] for k, v in cat.items()},
                                    t, rules)
                    if len(found["node"]):
                        near.append(found)
        if parts:
            h.keep_groups(f, parts)
        return near

    found = [c for part in side_by_side(of_feature, features, len(h.level.node), workers)
             for c in part]
    if not found:
        return []
    return _best_per_feature({name: np.concatenate([c[name] for c in found])
                              for name in found[0]}, rules.tie_tolerance)


CANDIDATE_CHUNK = 1 << 17
"""Candidates scored at a time (``score``): each takes a few hundred bytes of temporaries,
and a level's first nodes have about one per row for every continuous feature."""


@dataclass
class _NodeTotals:
    """Per node of the level (ascending ``node``): row count, weights by class (or moments),
    and the node's impurity (classification)."""

    node: np.ndarray
    n: np.ndarray
    w: np.ndarray
    w_sum: np.ndarray
    """Each node's weight: its classes' ``w`` added left to right (``_left_sum``)."""
    impurity: np.ndarray | None

    @classmethod
    def of(cls, totals: tuple[np.ndarray, np.ndarray, np.ndarray], bits: int | None,
           criterion: str) -> _NodeTotals:
        node, n, sums = totals
        w = as_weight(sums, bits)
        # a node's impurity is the same on each of its candidates: computed once per node
        w_sum = _left_sum(w)
        imp = None if criterion in REGRESSION else impurity(w, w_sum, criterion)
        return cls(node, n, w, w_sum, imp)


def _scored(h: Histogram, cat: dict[str, np.ndarray], totals: _NodeTotals, rules: Rules
            ) -> dict[str, np.ndarray]:
    """The scoring query's columns of candidates ``cat`` (``Candidates``' columns, of one
    feature) that pass the leaf rules, each on each of its unknown sides: those within the
    tie tolerance of the best of their node among these (``_near``)."""
    at = np.searchsorted(totals.node, cat["node"])
    tn, t = totals.n[at], _rows(totals.w, at)
    kn, kind = cat["kn"], cat["kind"]
    unknown = tn - kn
    # _unknown_sides: side 0 for every candidate (known-left only with unknown rows), side 1
    # where some rows are unknown, except for known-left
    some = unknown > 0
    side0 = np.flatnonzero((kind != KNOWN_LEFT) | some)
    side1 = np.flatnonzero((kind != KNOWN_LEFT) & some)
    idx = np.concatenate([side0, side1])
    side = np.concatenate([np.zeros(len(side0), dtype=np.int64), np.ones(len(side1), np.int64)])
    # each candidate once, on side 0 (no unknown rows): its own columns, not gathered copies
    every = _Every(len(side1) == 0 and len(side0) == len(kind), idx)
    unk = every.take(unknown)
    ln = every.take(cat["ln"])
    t_idx = every.take(t)
    if len(side1):
        n_left = ln + side * unk
        n_right = tn[idx] - ln - side * unk
        a = _rows(cat["l"], idx) + side[:, None] * (t_idx - _rows(cat["k"], idx))
    else:
        n_left, n_right, a = ln, every.take(tn) - ln, every.take(cat["l"])
    b = t_idx - a
    regression = rules.criterion in REGRESSION
    if regression:
        wl, wr, wn = a[:, 0], b[:, 0], t_idx[:, 0]
    else:
        wl, wr, wn = _left_sum(a), _left_sum(b), totals.w_sum[every.take(at)]
    keep = (
        (n_left >= rules.min_samples_leaf) & (n_right >= rules.min_samples_leaf)
        & (wl > 0) & (wr > 0) & (wl >= rules.min_weight_leaf) & (wr >= rules.min_weight_leaf)
    )
    poisson = rules.criterion == "poisson"
    if poisson:
        keep &= (a[:, 1] > POISSON_EPSILON) & (b[:, 1] > POISSON_EPSILON)
    k = np.flatnonzero(keep)
    if len(k) < len(keep):
        idx, side, n_left, n_right, a, b = idx[k], side[k], n_left[k], n_right[k], \
            _rows(a, k), _rows(b, k)
        wl, wr, wn, unk = wl[k], wr[k], wn[k], unk[k]
        every = _Every(False, idx)
    pair = every.take(at)
    if poisson:
        t_k = every.take(t)
        imp_l, imp_r = _deviance(a, wl), _deviance(b, wr)
        gain = (_sum_log_mean(a, wl) + _sum_log_mean(b, wr) - _sum_log_mean(t_k, wn)) / wn
    elif regression:
        imp_l, imp_r = _variance(a, wl), _variance(b, wr)
        gap = a[:, 1] / wl - b[:, 1] / wr
        gain = (wl / wn) * (wr / wn) * (gap * gap)
    else:
        assert totals.impurity is not None
        imp_node = totals.impurity[pair]
        if rules.criterion != "gini":
            k = _near_best(pair, imp_node, a, b, wl, wr, wn, rules)
            idx, side, n_left, n_right, pair = idx[k], side[k], n_left[k], n_right[k], pair[k]
            a, b = _rows(a, k), _rows(b, k)
            wl, wr, wn, unk, imp_node = wl[k], wr[k], wn[k], unk[k], imp_node[k]
        imp_l = impurity(a, wl, rules.criterion)
        imp_r = impurity(b, wr, rules.criterion)
        gain = imp_node - (wr / wn) * imp_r - (wl / wn) * imp_l
    # only the candidates near their node's best are columns of the query's rows
    k = _near(pair, gain, rules.tie_tolerance)
    idx, wl, wr, wn, imp_l, imp_r = idx[k], wl[k], wr[k], wn[k], imp_l[k], imp_r[k]
    return {
        "node": cat["node"][idx], "attr": cat["attr"][idx], "kind": kind[idx],
        "o": cat["o"][idx], "cut": cat["cut"][idx], "threshold": cat["thr"][idx],
        "next_value": cat["nxt"][idx], "side": side[k], "n_left": n_left[k], "w_left": wl,
        "n_right": n_right[k], "w_right": wr, "n_unknown": unk[k], "impurity_left": imp_l,
        "impurity_right": imp_r, "gain": gain[k],
        "impurity_after": (wr / wn) * imp_r + (wl / wn) * imp_l,
    }


@dataclass
class _Every:
    """Candidates ``idx`` of a batch's columns: ``take`` gathers them, or where they are
    every candidate once, in order (``all``), gives the column itself."""

    all: bool
    idx: np.ndarray

    def take(self, a: np.ndarray) -> np.ndarray:
        return a if self.all else _rows(a, self.idx)


def group_max(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each entry's highest ``values`` (NaN ignored) among those of its ``group`` (small
    integers, in any order); -inf where the group has none but NaN."""
    low = int(group.min(initial=0))
    best = np.full(int(group.max(initial=0)) - low + 1, -np.inf)
    np.fmax.at(best, group - low, values)
    return best[group - low]


def _near_best(pair: np.ndarray, imp_node: np.ndarray, a: np.ndarray, b: np.ndarray,
               wl: np.ndarray, wr: np.ndarray, wn: np.ndarray, rules: Rules) -> np.ndarray:
    """The candidates whose entropy decrease can come within the tie tolerance of the best of
    their ``pair`` (node), found with numpy's logarithm: the C library's, one call per
    argument, is needed only for those (``_best_per_feature`` then counts them exactly)."""
    imp_l = impurity(a, wl, rules.criterion, np.log)
    imp_r = impurity(b, wr, rules.criterion, np.log)
    gain = imp_node - (wr / wn) * imp_r - (wl / wn) * imp_l
    error = NEAR_BEST_ERROR * (1.0 + imp_node + imp_l + imp_r)
    return np.flatnonzero(~(gain + error < group_max(pair, gain - error) - rules.tie_tolerance))


def _near(pair: np.ndarray, gain: np.ndarray, tolerance: float) -> np.ndarray:
    """The candidates within ``tolerance`` of the best gain of their ``pair``."""
    return np.flatnonzero(gain >= group_max(pair, gain) - tolerance)


INTEGER_COLUMNS = ("node", "attr", "kind", "o", "cut", "side", "n_unknown")


def _rows(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``a[rows]`` along the first axis: for a matrix of a few columns ``take`` copies the
    rows several times faster than fancy indexing does."""
    return np.take(a, rows, axis=0)


def _best_per_feature(columns: dict[str, np.ndarray], tolerance: float) -> list[tuple[Any, ...]]:
    """Per (node, feature): the first candidate in ``TIE_ORDER`` among those within
    ``tolerance`` of the best gain, and ``n_near``, how many those are."""
    node, attr, gain = columns["node"], columns["attr"], columns["gain"]
    if len(node) == 0:
        return []
    # a (node, feature) pair as one integer key
    key = node.astype(np.int64) * (int(attr.max()) + 1) + attr.astype(np.int64)
    by_pair = np.argsort(key, kind="stable")
    pair_starts = _group([key[by_pair]], len(by_pair))
    best = np.maximum.reduceat(gain[by_pair], pair_starts)
    pair = np.empty(len(node), dtype=np.int64)
    pair[by_pair] = np.repeat(np.arange(len(pair_starts)), np.diff(np.append(pair_starts,
                                                                            len(node))))
    near = np.flatnonzero(gain >= best[pair] - tolerance)
    order = near[np.lexsort((columns["cut"][near], columns["o"][near],
                             columns["threshold"][near], columns["kind"][near],
                             columns["side"][near], pair[near]))]
    firsts = _group([pair[order]], len(order))
    n_near = np.diff(np.append(firsts, len(order)))
    chosen = order[firsts]
    out: list[list[Any]] = []
    for name, values in columns.items():
        picked = values[chosen]
        if name in INTEGER_COLUMNS:
            out.append(picked.astype(np.int64).tolist())
        else:
            # NULL where the query has one (a nominal candidate's threshold)
            out.append([None if v != v else v for v in picked.astype(np.float64).tolist()])
    out.append(n_near.tolist())
    return list(zip(*out, strict=True))


def nominal_ranks(
    h: Histogram, features: dict[int, Feature], pairs: Sequence[tuple[int, int]],
    by: Sequence[int],
) -> dict[tuple[int, int], list[tuple[int, int, int, int]]]:
    """``subsets.read_nominal_ranks`` over the histogram: per (node, nominal feature), each
    value's (code, rank by code, order, rank in that order)."""
    out: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
    wanted = set(pairs)
    for attr in sorted({a for _, a in pairs}):
        g = h.groups(features[attr])
        s = Segments.of(g)
        rank_v = np.arange(len(g.node)) - s.starts[s.seg]
        for o in by:
            order = in_order(h, g, s, o)
            rank_o = np.arange(len(order)) - s.starts[s.seg[order]] + 1
            for i, r in zip(order.tolist(), rank_o.tolist(), strict=True):
                key = (int(g.node[i]), attr)
                if key in wanted:
                    out.setdefault(key, []).append((int(g.v[i]), int(rank_v[i]), o, int(r)))
    return out
