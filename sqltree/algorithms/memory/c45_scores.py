"""C4.5's and ID3's scoring query (``c45.scores.build_split_scores``) computed in numpy.

The rows are the query's (``SCORE_COLUMNS``), one per (node, feature), with the query's double
arithmetic in the query's order: the (node, feature) totals as fixed-point sums where weights
are fractional; a nominal feature's multiway split from its values' entropy terms, summed in
the ``entropy_bits`` fixed point; a continuous feature's best cut by the ordered scan's rules
(J48's minimum weight per side, its 1e-5 gap between values, ties within ``threshold_tie`` to
the lowest cut, the number of valid cuts); then the MDL correction and the gain ratio. The
logarithms that decide are the C library's (``level.ln``), as the engines' ``LN`` computes
them; numpy's faster one only screens out the cuts that cannot come near a node's best
(``_near_best``).

``branch_counts`` and ``observed_threshold`` are the strategy's two other readings of the
engine (``c45.scores.build_branch_counts``, ``c45.cuts.build_observed_thresholds``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import queries as q
from ...criteria import J48_SMALL
from ...dataset import Feature
from ...parallel import side_by_side
from ...tree import CONTINUOUS
from ..c45.criteria import LN2, ScoreOptions
from . import routes
from .cart_scores import Segments, _left_sum, _rows, group_max
from .level import NEAR_BEST_ERROR, Groups, Histogram, Ranks, as_weight, ln, xlogx
from .routes import NO_TEST, row_keys, stable_order


@dataclass
class _Totals:
    """Per node of the level (ascending ``node``), or per (node, feature) segment: weights."""

    w_all: np.ndarray
    w_known: np.ndarray
    w_unknown: np.ndarray
    k: np.ndarray
    """Known weight per class (rows x classes)."""
    first: int = 0
    """Where these nodes start among all of the level's (``_Scorer.nodes``): the totals
    are a part's (``Histogram.node_chunks``)."""


def _entropy_mass(total: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """``c45_criteria.entropy_mass``: ``W ln W - c0 ln c0 - c1 ln c1 ...``, left to right."""
    out = xlogx(total)
    for j in range(classes.shape[1]):
        out = out - xlogx(classes[:, j])
    return out


def _fixed_sum(terms: np.ndarray, seg: np.ndarray, size: int, bits: int | None) -> np.ndarray:
    """Per segment, the sum of ``terms`` in the fixed point of ``bits`` (``to_fixed``), or in
    floating point without."""
    if bits is None:
        return np.bincount(seg, weights=terms, minlength=size)
    fixed = np.floor(terms * (2.0**bits) + 0.5).astype(np.int64)
    sums = np.zeros(size, dtype=np.int64)
    np.add.at(sums, seg, fixed)
    return as_weight(sums, bits)


class _Scorer:
    """The scoring query over one level's histogram."""

    def __init__(self, h: Histogram, options: ScoreOptions) -> None:
        self.h, self.options = h, options
        self.nodes, self.n_rows, sums = h.totals()
        self.sums = sums
        self.total = sums.sum(axis=1)
        self.w_all = as_weight(self.total, h.bits)
        self.chunks = h.node_chunks()

    def denominator(self, t: _Totals) -> np.ndarray:
        """What gain and split info are divided by, less ``LN2``: all weight or the known."""
        return t.w_known if self.options.unknown == "drop" else t.w_all

    def unknown(self, t: _Totals) -> np.ndarray:
        return np.zeros(len(t.w_all)) if self.options.unknown == "drop" else t.w_unknown

    def totals(self, g: Groups, s: Segments) -> tuple[_Totals, np.ndarray]:
        """The (node, feature) totals (``node_feature_totals``) of the level's nodes from the
        first to the last with a group in ``g`` (a part of the level's: ``node_chunks``), and
        each one's segment in ``g`` (-1 for a node without a known value)."""
        first, last = (int(i) for i in np.searchsorted(self.nodes, g.node[[0, -1]]))
        size = last + 1 - first
        seg_of_node = np.full(size, -1, dtype=np.int64)
        known = np.zeros_like(self.sums[first:last + 1])
        at = np.searchsorted(self.nodes, g.node[s.starts]) - first
        seg_of_node[at] = np.arange(len(s.starts))
        known[at] = np.add.reduceat(g.sums, s.starts, axis=0)
        return self._totals_of(first, last, known), seg_of_node

    def _totals_of(self, first: int, last: int, known: np.ndarray) -> _Totals:
        """The totals of the level's nodes ``first`` to ``last``, given their known sums."""
        known_total = known.sum(axis=1)
        bits = self.h.bits
        return _Totals(
            w_all=self.w_all[first:last + 1],
            w_known=as_weight(known_total, bits),
            w_unknown=as_weight(self.total[first:last + 1] - known_total, bits),
            k=as_weight(known, bits),
            first=first,
        )

    def parent_entropy(self, t: _Totals) -> np.ndarray:
        return _entropy_mass(t.w_known, t.k)

    def emit(self, at: np.ndarray, attr: int, t: _Totals, gain: np.ndarray,
             split_info: np.ndarray, candidates: np.ndarray, big_branches: np.ndarray,
             threshold: np.ndarray | None = None, next_value: np.ndarray | None = None
             ) -> list[tuple[Any, ...]]:
        """The rows of nodes ``at`` (indexes into the totals), with ``mdl_gain`` and
        ``gain_ratio`` as ``_with_gain_ratio`` adds them; only those ``choose_split`` can
        choose (a nominal split into two big branches or more with a gain, a cut whose gain
        less its MDL cost is at least J48's ``SMALL``). The others it passes over, and at the
        deep levels they were three rows in four, each a tuple and then a ``C45ScoreRow``."""
        w_all = t.w_all[at]
        if threshold is not None and self.options.mdl:
            with np.errstate(divide="ignore"):
                mdl_gain = np.where(candidates > 0,
                                    gain - ln(np.maximum(candidates, 1.0)) / LN2 / w_all, gain)
        else:
            mdl_gain = gain
        if threshold is None:
            keep = np.flatnonzero((big_branches >= 2) & ~np.isnan(gain))
        else:
            keep = np.flatnonzero(~np.isnan(threshold) & (mdl_gain >= J48_SMALL))
        if len(keep) < len(at):
            at, w_all, gain, mdl_gain, split_info, candidates, big_branches = (
                a[keep] for a in (at, w_all, gain, mdl_gain, split_info, candidates,
                                  big_branches))
            if threshold is not None:
                threshold = threshold[keep]
                next_value = None if next_value is None else next_value[keep]
        positive = split_info > 0
        ratio = np.where(positive, mdl_gain / np.where(positive, split_info, 1.0), np.nan)
        empty = np.full(len(at), np.nan)
        columns = [
            self.nodes[t.first + at].tolist(), [attr] * len(at),
            _nullable(empty if threshold is None else threshold),
            _nullable(empty if next_value is None else next_value),
            _nullable(gain), _nullable(mdl_gain), _nullable(split_info), _nullable(ratio),
            candidates.astype(np.int64).tolist(), t.w_known[at].tolist(), w_all.tolist(),
            big_branches.astype(np.int64).tolist(),
        ]
        return list(zip(*columns, strict=True))

    def safe_div(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``sqlexpr.safe_div``: ``a / b``, NULL (NaN) where ``b`` is not positive."""
        positive = b > 0
        return np.where(positive, a / np.where(positive, b, 1.0), np.nan)

    def by_parts(self, f: Feature) -> list[tuple[Any, ...]]:
        """Feature ``f``'s rows, scored a part of the level's nodes at a time
        (``Histogram.node_chunks``): every split here is a node's own. A continuous
        feature's part of one node of many rows is grouped a band of its values at a time
        (``_banded``)."""
        r = self.h.ranks(f)
        out: list[tuple[Any, ...]] = []
        for rows in self.chunks:
            if f.kind != CONTINUOUS:
                out += self._nominal(f, self.h.grouped(r, rows))
                continue
            banded = self._banded(f, r, rows)
            out += self._continuous(f, self.h.grouped(r, rows)) if banded is None else banded
        return out

    def _nominal(self, f: Feature, g: Groups) -> list[tuple[Any, ...]]:
        """A nominal feature's multiway split on every node of ``g`` (``_nominal_scores``)."""
        if len(g.node) == 0:
            return []
        s = Segments.of(g)
        t, seg_of_node = self.totals(g, s)
        bits, ebits = self.h.bits, self.options.entropy_bits
        group_total = as_weight(g.sums.sum(axis=1), bits)
        size = len(s.starts)
        bags_ent = _fixed_sum(_entropy_mass(group_total, as_weight(g.sums, bits)), s.seg, size,
                              ebits)
        bags_xlogx = _fixed_sum(xlogx(group_total), s.seg, size, ebits)
        big = np.bincount(s.seg, weights=group_total > self.options.min_cases - J48_SMALL,
                          minlength=size)
        has = seg_of_node >= 0
        per_node = np.zeros(len(has))

        def by_node(values: np.ndarray) -> np.ndarray:
            out = per_node.copy()
            out[has] = values[seg_of_node[has]]
            return out

        d = self.denominator(t)
        denom = d * LN2
        gain = self.safe_div(self.parent_entropy(t) - by_node(bags_ent), denom)
        split_info = self.safe_div(xlogx(d) - by_node(bags_xlogx) - xlogx(self.unknown(t)),
                                   denom)
        # the nodes with known values: the others have no branch (``emit`` would drop them)
        at = np.flatnonzero(has)
        return self.emit(at, f.index, t, gain[at], split_info[at],
                         by_node(s.m.astype(np.float64))[at], by_node(big)[at])

    def _continuous(self, f: Feature, g: Groups) -> list[tuple[Any, ...]]:
        """A continuous feature's best cut per node of ``g`` (``best_cuts_ordered``)."""
        if len(g.node) == 0:
            return []
        s = Segments.of(g)
        t, seg_of_node = self.totals(g, s)
        # the nodes with known values, ascending as the segments
        cuts = _Cuts(g, s, np.flatnonzero(seg_of_node >= 0))
        return self._best_cuts(f, t, cuts.blocks(CUT_CHUNK))

    def _banded(self, f: Feature, r: Ranks, rows: np.ndarray | None
                ) -> list[tuple[Any, ...]] | None:
        """The best cut of a part that is one node of more than ``BAND_ROWS`` rows of known
        values, its rows grouped a band of neighbouring ranks at a time (about ``BAND_ROWS``
        rows each); None for another part. One node's groups at a first level are about
        one per row: with two threads each grouping a node of 5M rows, their counts, sums
        and gathered weights were the fit's peak at 10M rows."""
        level = self.h.level
        if len(level.node if rows is None else rows) <= BAND_ROWS or not self.h.exact:
            return None
        node = level.node if rows is None else level.node[rows]
        if node[0] != node[-1] or (node != node[0]).any():
            return None
        one = node[0]
        del node
        rank = r.rank if rows is None else r.rank[rows]
        known = np.flatnonzero(rank >= 0)
        if len(known) <= BAND_ROWS:
            return None
        rank = rank[known]
        if rows is not None:
            known = rows[known]
        # bands of whole coarse bins of ranks (at most 4,096 bins), about equal in rows
        shift = max(int(r.size - 1).bit_length() - 12, 0)
        coarse = np.bincount(rank >> shift)
        n_bands = -(-len(known) // BAND_ROWS)
        edge = np.unique(np.searchsorted(np.cumsum(coarse), np.arange(1, n_bands) * (
            len(known) / n_bands)))
        band_of_bin = np.searchsorted(edge, np.arange(len(coarse)), "right").astype(np.uint16)
        band = band_of_bin[rank >> shift]
        del rank
        order = stable_order(band, len(edge) + 1)
        ends = np.cumsum(np.bincount(band, minlength=len(edge) + 1))
        del band
        banded = known[order]
        del order, known
        first = int(np.searchsorted(self.nodes, one))
        _, _, sums = self.h.sums_by(np.zeros(len(banded), dtype=np.int64), 1, banded)
        t = self._totals_of(first, first, sums)
        bands = (self.h.grouped(r, banded[lo:hi]) for lo, hi in zip(
            np.append(0, ends[:-1]).tolist(), ends.tolist(), strict=True) if hi > lo)
        return self._best_cuts(f, t, _band_cuts(bands, CUT_CHUNK))

    def _best_cuts(self, f: Feature, t: _Totals,
                   blocks: Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
                   ) -> list[tuple[Any, ...]]:
        """Each node's best cut among ``blocks`` of cuts (``_Cuts.blocks``).

        The cuts are screened (``_screen``) a block at a time, so that a level's temporaries
        per cut are bounded, not one set per cut of the level; only the cuts near their
        node's best are scored again with the C library's logarithm."""
        parent = self.parent_entropy(t)
        tie = self.options.threshold_tie
        # per node of the totals, its valid cuts (the MDL correction counts them all)
        count = np.zeros(len(t.w_all), dtype=np.int64)
        kept = []
        for block in blocks:
            screened = self._screen(t, parent, *block)
            at, gain, error = screened[0], screened[4], screened[5]
            if len(at) == 0:
                continue
            count += np.bincount(at, minlength=len(count))
            # a block keeps the cuts near its own best of a node: among them are those near
            # the best of all, and the best itself (a first level's node has a cut per row)
            near = ~(gain + error < group_max(at, gain - error) - tie)
            kept.append(tuple(a[near] for a in screened))
        if not kept:
            return []
        at, running_left, v, nxt, gain, error = (np.concatenate(parts)
                                                 for parts in zip(*kept, strict=True))
        del kept
        n_valid = count[count > 0]  # the nodes with a valid cut, ascending as ``at``
        near = np.flatnonzero(~(gain + error < group_max(at, gain - error) - tie))
        at, v, nxt = at[near], v[near], nxt[near]
        left = as_weight(_rows(running_left, near), self.h.bits)
        lw = _left_sum(left)
        rw = t.w_known[at] - lw
        k = _rows(t.k, at)
        d = self.denominator(t)[at]
        gain = self.safe_div(parent[at] - _entropy_mass(lw, left)
                             - _entropy_mass(rw, k - left), d * LN2)
        chosen = self._best(at, gain)
        at = at[chosen]
        d = d[chosen]
        split_info = self.safe_div(
            xlogx(d) - xlogx(lw[chosen]) - xlogx(t.w_known[at] - lw[chosen])
            - xlogx(self.unknown(t)[at]),
            d * LN2,
        )
        return self.emit(at, f.index, t, gain[chosen], split_info, n_valid.astype(np.float64),
                         np.full(len(at), 2), threshold=v[chosen], next_value=nxt[chosen])

    def _screen(self, t: _Totals, parent: np.ndarray, at: np.ndarray, running_left: np.ndarray,
                v: np.ndarray, nxt: np.ndarray) -> tuple[np.ndarray, ...]:
        """Of a block of cuts (each one's node among the totals, left sums, and the values
        each side), the valid ones (J48's minimum weight on each side, its gap between
        values) as the same four arrays, and each one's gain from numpy's logarithm and that
        gain's error bound (``NEAR_BEST_ERROR``)."""
        left = as_weight(running_left, self.h.bits)
        lw = _left_sum(left)
        w_known = t.w_known[at]
        rw = w_known - lw
        least = self._min_split(w_known) - J48_SMALL
        valid = (lw > least) & (rw > least)
        if self.options.cut_gap > 0:
            valid &= (v + self.options.cut_gap) < nxt
        keep = np.flatnonzero(valid)
        at, left, lw, rw = (_rows(a, keep) for a in (at, left, lw, rw))
        gain, error = _fast_gain(parent[at], lw, left, rw, _rows(t.k, at),
                                 self.denominator(t)[at] * LN2)
        return at, _rows(running_left, keep), v[keep], nxt[keep], gain, error

    def _min_split(self, w_known: np.ndarray) -> np.ndarray:
        """``SplitCriteria.min_split``: J48's ``max(M, min(25, 0.1 * known / k))``, or M."""
        m = float(self.options.min_cases)
        if not self.options.j48_min_split:
            return np.full(len(w_known), m)
        raw = 0.1 * w_known / float(self.h.n_classes)
        return np.where(raw <= m, m, np.where(raw > 25.0, 25.0, raw))

    def _best(self, at: np.ndarray, gain: np.ndarray) -> np.ndarray:
        """Per node (runs of equal ``at``, cuts in value order): the lowest cut whose gain is
        within ``threshold_tie`` of the best."""
        starts = _runs(at)
        run = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(at))))
        best = np.fmax.reduceat(gain, starts)
        near = np.flatnonzero(gain >= best[run] - self.options.threshold_tie)
        first = np.flatnonzero(np.append(True, run[near][1:] != run[near][:-1]))
        return near[first]


CUT_CHUNK = 1 << 17
"""Cuts screened at a time (``_Scorer.continuous``): each takes a few hundred bytes of
temporaries, and a level can have about one per row for every continuous feature."""


def _runs(at: np.ndarray) -> np.ndarray:
    """Where each run of equal ``at`` starts."""
    return np.flatnonzero(np.append(True, at[1:] != at[:-1]))


def _fast_mass(total: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_entropy_mass`` with numpy's logarithm, and the sum of its terms' magnitudes."""
    def term(e: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(e > 0, e * np.log(np.where(e > 0, e, 1.0)), 0.0)

    first = term(total)
    out, size = first.copy(), np.abs(first)
    for j in range(classes.shape[1]):
        e = term(classes[:, j])
        out -= e
        size += np.abs(e)
    return out, size


def _fast_gain(parent: np.ndarray, lw: np.ndarray, left: np.ndarray, rw: np.ndarray,
               k: np.ndarray, denom: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cuts' gains found with numpy's ``log``, and how far each may be from the gain from the
    C library's (``ln``, as the engines compute it; several times slower): within
    ``NEAR_BEST_ERROR`` of the size of its terms. A node's choice needs the exact gain only
    of the cuts near its best: a cut is scored again unless even its highest possible gain is
    below the best cut's lowest one less the tie tolerance (``_best``), so every cut within
    the tolerance of the exact best is, the best among them."""
    left_mass, left_size = _fast_mass(lw, left)
    right_mass, right_size = _fast_mass(rw, k - left)
    positive = denom > 0
    safe = np.where(positive, denom, 1.0)
    gain = np.where(positive, (parent - left_mass - right_mass) / safe, np.nan)
    return gain, NEAR_BEST_ERROR * (np.abs(parent) + left_size + right_size) / safe


@dataclass
class _Cuts:
    """A feature's cuts: a cut between each two neighbouring groups of a node, by the index
    of the lower group; its left side's class sums are the node's running sums there."""

    g: Groups
    s: Segments
    node_of_seg: np.ndarray

    def blocks(self, block: int) -> Iterator[tuple[np.ndarray, ...]]:
        """The cuts of ``block`` groups at a time: each one's node (an index into the
        level's totals), left class sums in the sums' type (fixed point: integers), and the
        values each side. The running sums are made a block at a time (``_running_after``:
        a first level's continuous feature has a group per value, 240 MB a thread at 10M
        rows of 3 classes)."""
        g, seg, starts = self.g, self.s.seg, self.s.starts
        size = len(g.sums)
        # each segment's running sums before its first group: the last running sum before
        before = np.zeros((len(starts), g.sums.shape[1]), dtype=g.sums.dtype)
        last = g.sums[:0].sum(axis=0)
        for lo in range(0, size - 1, block):
            hi = min(lo + block, size)
            running = _running_after(last, g.sums[lo:hi])
            last = running[-1]
            # the segments that start in this block (not the first: it starts from zeros)
            first = np.searchsorted(starts, [max(lo, 1), hi])
            opening = starts[first[0]:first[1]]
            before[first[0]:first[1]] = running[opening - lo]
            end = min(hi, size - 1)
            cut = lo + np.flatnonzero(seg[lo:end] == seg[lo + 1:end + 1])
            at = seg[cut]
            yield (self.node_of_seg[at], running[cut - lo + 1] - _rows(before, at), g.v[cut],
                   g.v[cut + 1])



def _running_after(last: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """The running sums of ``sums`` (rows of class sums) going on from ``last``, the running
    sum before them, which is the first row: the same additions in the same order as one
    running sum of every group, so that blocks of doubles round as the whole would."""
    return np.cumsum(np.concatenate([last[None], sums]), axis=0)

def _band_cuts(bands: Iterator[Groups], block: int) -> Iterator[tuple[np.ndarray, ...]]:
    """``_Cuts.blocks`` of one node (the totals' first) whose groups come a band of
    neighbouring values at a time, in ascending order: the running sums go on from band to
    band (``_running_after``), and a cut lies between each band's last group and the next
    band's first."""
    last: np.ndarray | None = None
    last_v = np.zeros(1)
    for g in bands:
        if last is None:
            last = g.sums[:0].sum(axis=0)
        else:  # the cut below this band's first group
            yield np.zeros(1, dtype=np.int64), last[None].copy(), last_v, g.v[:1]
        size = len(g.sums)
        for lo in range(0, size, block):
            hi = min(lo + block, size)
            running = _running_after(last, g.sums[lo:hi])
            last = running[-1]
            cut = np.arange(lo, min(hi, size - 1))
            yield (np.zeros(len(cut), dtype=np.int64), running[cut - lo + 1], g.v[cut],
                   g.v[cut + 1])
        last_v = g.v[-1:]


BAND_ROWS = 1 << 20
"""Rows of known values of a band of ``_Scorer._banded``."""


def _nullable(values: np.ndarray) -> list[float | None]:
    """Doubles as Python floats, NaN as None (the query's NULL)."""
    return [None if x != x else x for x in values.astype(np.float64).tolist()]


def score(h: Histogram, features: Sequence[Feature], options: ScoreOptions,
          workers: int | None = None) -> list[tuple[Any, ...]]:
    """The scoring query's rows, ordered by node and feature; the features scored by up to
    ``workers`` threads (``parallel.side_by_side``)."""
    scorer = _Scorer(h, options)

    parts = side_by_side(scorer.by_parts, features, len(h.level.node), workers)
    return sorted((row for part in parts for row in part), key=lambda row: (row[0], row[1]))


def branch_counts(h: Histogram, tests: Sequence[tuple[int, int, float | None]],
                  keys: np.ndarray | None = None, workers: int | None = 1
                  ) -> dict[int, dict[int, list[float]]]:
    """``build_branch_counts``: class counts per (node, key) of each node's chosen test (0/1
    below or above a cut, a nominal value's code, -1 for unknown values), the keys that rows
    reach, in ascending order with -1 last. ``keys``: the rows' keys (``row_keys``) of these
    tests or more.

    Counted from each row's key, as the partition keys them, not from the features' groups:
    a deep level's groups of every feature would have to be kept until the tests are chosen,
    about as many per feature as the level has rows. A block of rows at a time where the
    sums are exact (``ROW_BLOCK``), since blocks' sums then add up to the level's; blocks
    counted by up to ``workers`` threads (None: one per core)."""
    out: dict[int, dict[int, list[float]]] = {node: {} for node, _, _ in tests}
    if not tests:
        return out
    level = h.level
    if keys is None:
        keys = row_keys(level, tests)
    tested = np.unique(np.array([node for node, _, _ in tests], dtype=np.int64))
    span = int(keys.max(initial=0)) + 2  # keys from -1 up
    block = routes.ROW_BLOCK if h.exact else max(len(keys), 1)

    def counted(lo: int) -> tuple[np.ndarray, np.ndarray] | None:
        rows = np.flatnonzero(keys[lo:lo + block] != NO_TEST)
        if len(rows) == 0:
            return None
        rows += lo
        slot = np.searchsorted(tested, level.node[rows]) * span + (keys[rows] + 1)
        slots, _, sums = h.sums_by(slot, len(tested) * span, rows)
        return slots, sums

    blocks = [b for b in side_by_side(counted, range(0, len(keys), block), len(keys), workers)
              if b is not None]
    found, summed = [b[0] for b in blocks], [b[1] for b in blocks]
    del blocks
    slots = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
    if len(found) > 1:
        slots, at = np.unique(slots, return_inverse=True)
        sums = np.zeros((len(slots), h.n_classes), dtype=summed[0].dtype)
        np.add.at(sums, at, np.concatenate(summed))
    else:
        sums = summed[0] if summed else np.zeros((0, h.n_classes))
    unknown: list[tuple[int, list[float]]] = []
    for at, counts in zip(slots.tolist(), as_weight(sums, h.bits).tolist(), strict=True):
        node, k = int(tested[at // span]), at % span - 1
        if k == q.UNKNOWN_KEY:
            unknown.append((node, counts))
        else:
            out[node][k] = counts
    for node, counts in unknown:
        out[node][q.UNKNOWN_KEY] = counts
    return out


def distinct_values(h: Histogram, features: Sequence[Feature]) -> dict[int, np.ndarray]:
    """The sorted distinct known values of each continuous feature (``build_distinct_values``
    over the root level)."""
    level = h.level
    out = {}
    for f in features:
        if f.kind == CONTINUOUS:
            # the ranks that growth groups by hold them: sorted, or as the whole numbers
            r = level.ranks_of(level.column[f.index])
            out[f.index] = r.values if r.values is not None else np.flatnonzero(
                np.bincount(r.rank[r.rank >= 0], minlength=r.size)).astype(np.float64)
    return out


def observed_threshold(values: np.ndarray, mid: float) -> float:
    """The largest value not above ``mid`` (``build_observed_thresholds``)."""
    return float(values[np.searchsorted(values, mid, "right") - 1])
