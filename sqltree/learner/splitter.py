"""The best split of every open node, from its histogram.

A histogram holds, per node, the statistics (``gains``) of every code of every feature:
code 0 is the feature's unknown value (NULL), codes 1.. are a continuous feature's bins in
order or a nominal feature's values. A split sends a set of codes left and the rest right:

- continuous: codes ``1..t`` left (the test ``value <= edge[t]``), unknown values to the side
  that gains more (a learned direction, as LightGBM and XGBoost learn it);
- nominal: the node's values ordered by the criterion's key, a prefix of that order left;
  every other value, seen in training or not, goes right.

Ties are CART's (``sqltree.algorithms.cart``): gains within ``criteria.TIE_TOLERANCE`` per
unit of the node's weight tie (in units of the root's impurity for a regression criterion;
Newton's gains tie only when equal, as in LightGBM), and a tie goes to the first candidate in
the order: feature as the source lists them, then unknown values right before left, then
threshold ascending. Gains equal in exact arithmetic may differ in their last bits; the
tolerance makes them tie. The gains are computed by the same numpy code from the same exact
sums on every engine, so the choice is the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..criteria import TIE_TOLERANCE
from .gains import ROWS, Criterion

NODE_CHUNK = 512
"""Nodes scored at a time: a chunk's candidates (nodes x codes x statistics doubles, twice)
stay a few tens of MB at 256 bins."""


@dataclass(frozen=True)
class FeatureCodes:
    """A feature as the learner sees it: its kind and how many codes it has (unknown included)."""

    index: int
    kind: str  # "continuous" or "nominal"
    n_codes: int


@dataclass(frozen=True)
class Layout:
    """Where each feature's codes sit along a histogram's code axis."""

    features: tuple[FeatureCodes, ...]

    @property
    def offsets(self) -> list[int]:
        out, at = [], 0
        for f in self.features:
            out.append(at)
            at += f.n_codes
        return out

    @property
    def width(self) -> int:
        return sum(f.n_codes for f in self.features)


@dataclass(frozen=True)
class Rules:
    """When a split is allowed."""

    min_samples_leaf: float = 1.0
    min_weight_leaf: float = 0.0
    """Least weight of a child (the hessian's sum in boosting, ``min_child_weight``)."""
    min_gain: float = 0.0
    """Least gain of a split (in the criterion's score units); a gain of exactly zero splits
    an impure node unless this is positive (as scikit-learn splits an XOR's root)."""


@dataclass
class Choice:
    """The split chosen for one node."""

    feature: int  # position in the layout
    gain: float
    missing_left: bool
    upto: int = 0  # continuous: codes 1..upto go left
    left_codes: tuple[int, ...] = ()  # nominal: the codes that go left
    left: np.ndarray = field(default_factory=lambda: np.zeros(0))
    right: np.ndarray = field(default_factory=lambda: np.zeros(0))
    saw_missing: bool = True


@dataclass(frozen=True)
class Sparse:
    """One feature's histograms as the codes that hold rows, for levels whose nodes hold few
    of a feature's codes (a dense block of a forest's deepest level was nodes x 256 codes,
    mostly zeros, 1.5 GB at 100,000 rows and 100 trees): entry ``i`` is code ``code[i]`` of
    the node in slot ``slot[i]``, entries sorted by (slot, code). ``units``: each entry's
    whole-number sums as summed (int64), ``scale``: the factor of each statistic that turns
    them into the learner's units (a power of two, so the product is exact)."""

    slot: np.ndarray
    code: np.ndarray
    units: np.ndarray
    scale: np.ndarray

    def to_dense(self, n_codes: int) -> tuple[np.ndarray, np.ndarray]:
        """The same sums as a dense block: (slots, nodes x codes x statistics)."""
        slots, at = np.unique(self.slot, return_inverse=True)
        out = np.zeros((len(slots), n_codes, self.units.shape[1]))
        out[at, self.code] = self.units * self.scale
        return slots, out


Block = tuple[np.ndarray, np.ndarray] | Sparse


@dataclass
class Histograms:
    """A level's histograms, feature by feature: ``blocks[pos]`` holds, for the nodes that may
    split on feature ``pos``, their slots in ``nodes`` and their sums per code (nodes x codes x
    statistics), or the same as ``Sparse`` entries; None where no node takes the feature. With
    every feature at every node the blocks are views of one dense array (``dense``), which
    subtraction of siblings needs."""

    nodes: np.ndarray
    blocks: list[Block | None]
    dense: np.ndarray | None = None

    @classmethod
    def of_dense(cls, nodes: np.ndarray, dense: np.ndarray, layout: Layout) -> Histograms:
        slots = np.arange(len(nodes))
        blocks: list[tuple[np.ndarray, np.ndarray] | None] = [
            (slots, dense[:, off : off + f.n_codes, :])
            for f, off in zip(layout.features, layout.offsets)
        ]
        return cls(nodes, blocks, dense)

    @classmethod
    def of_rows(cls, nodes: np.ndarray, feature: np.ndarray, code: np.ndarray,
                sums: np.ndarray, layout: Layout) -> Histograms:
        """From long rows (node id, feature position, code, sums...)."""
        ids = np.unique(nodes)
        blocks: list[tuple[np.ndarray, np.ndarray] | None] = []
        for pos, f in enumerate(layout.features):
            sel = feature == pos
            if not sel.any():
                blocks.append(None)
                continue
            here = np.unique(nodes[sel])
            arr = np.zeros((len(here), f.n_codes, sums.shape[1]))
            arr[np.searchsorted(here, nodes[sel]), code[sel]] = sums[sel]
            blocks.append((np.searchsorted(ids, here), arr))
        return cls(ids, blocks)


def best_splits(
    hist: Histograms,
    layout: Layout,
    criterion: Criterion,
    rules: Rules,
    roots: np.ndarray | None = None,
) -> tuple[list[Choice | None], np.ndarray]:
    """One choice (or None) per node of ``hist``, and every node's statistics (its sums over
    all codes of any one feature).

    ``roots``: the statistics of each node's tree's root, the scale of the tie tolerance
    (``Criterion.tie_scale``); None when every node is a root.
    """
    n = len(hist.nodes)
    n_features = len(layout.features)
    n_stats = next((b.units.shape[1] if isinstance(b, Sparse) else b[1].shape[2]
                    for b in hist.blocks if b is not None), 1)
    # each feature's best candidate per node: its gain, its last code on the left, its side
    gain = np.full((n, n_features), -np.inf)
    cut = np.zeros((n, n_features), dtype=np.int64)
    side = np.zeros((n, n_features), dtype=bool)
    totals = np.zeros((n, n_stats))
    scanned: dict[int, _SparseBest] = {}
    stacked: set[int] = set()
    if hist.dense is not None:  # every feature at every node: features side by side
        stacked = _scan_stacked(hist, layout, criterion, rules, roots, gain, cut, side, totals)
    for pos, f in enumerate(layout.features):
        block = hist.blocks[pos]
        if block is None or pos in stacked:
            continue
        if isinstance(block, Sparse):
            found = _scan_sparse(block, f, criterion, rules, roots)
            totals[found.slots] = found.total
            if f.n_codes >= 2:
                gain[found.slots, pos] = found.gain
                cut[found.slots, pos] = found.cut
                side[found.slots, pos] = found.side
                scanned[pos] = found
            continue
        all_slots, all_sums = block
        for start in range(0, len(all_slots), NODE_CHUNK):
            slots = all_slots[start : start + NODE_CHUNK]
            prefix, missing, total, _ = _prefix(all_sums[start : start + NODE_CHUNK], f,
                                                criterion)
            totals[slots] = total
            if f.n_codes < 2:
                continue
            tie = _tie_tolerance(criterion, total, None if roots is None else roots[slots])
            gain[slots, pos], cut[slots, pos], side[slots, pos] = _scan(
                prefix, missing, total, criterion.score(total), criterion, rules, tie)
    out: list[Choice | None] = [None] * n
    if not n_features:
        return out, totals
    # the first feature within the tie tolerance of the best (CART's rule)
    best = gain.max(axis=1)
    chosen = np.argmax(gain >= (best - _tie_tolerance(criterion, totals, roots))[:, None],
                       axis=1)
    for pos, f in enumerate(layout.features):
        nodes = np.flatnonzero(np.isfinite(best) & (chosen == pos))
        block = hist.blocks[pos]
        if not nodes.size or block is None:
            continue
        c, s = cut[nodes, pos], side[nodes, pos]
        if isinstance(block, Sparse):
            found = scanned[pos]
            at = np.searchsorted(found.slots, nodes)
            lefts, missing = found.left[at], found.missing[at]
            every_known = found.every_known[at]
            left_codes = found.left_codes(at)
        else:
            # the winners' left statistics, from their histograms once more
            all_slots, all_sums = block
            where = np.full(n, -1, dtype=np.int64)
            where[all_slots] = np.arange(len(all_slots))
            prefix, missing, _, order = _prefix(all_sums[where[nodes]], f, criterion)
            rows = np.arange(len(nodes))
            lefts = prefix[rows, c] + np.where(s[:, None], missing, 0.0)
            every_known = prefix[rows, c, ROWS] == prefix[:, -1, ROWS]
            left_codes = None if order is None else [
                tuple(sorted(int(v) + 1 for v in order[r, : c[r] + 1])) for r in rows.tolist()]
        for r, i in enumerate(nodes.tolist()):
            out[i] = _choice(f, pos, float(gain[i, pos]), int(c[r]), bool(s[r]), lefts[r],
                             totals[i], bool(missing[r, ROWS] > 0), bool(every_known[r]),
                             None if left_codes is None else left_codes[r])
    return out, totals


def _scan_stacked(hist: Histograms, layout: Layout, criterion: Criterion, rules: Rules,
                  roots: np.ndarray | None, gain: np.ndarray, cut: np.ndarray,
                  side: np.ndarray, totals: np.ndarray) -> set[int]:
    """``best_splits``' scan of a dense histogram's features, those of a kind side by side
    (each padded to the widest with codes of no rows, which ``_scan`` passes over): a few
    numpy calls over all the features, not a few per feature (a boosted tree's node was 16
    features of a few hundred codes, and the calls' own cost was most of its scan). Every
    candidate is computed as the one-feature scan computes it. Fills ``gain``, ``cut``,
    ``side`` and ``totals`` (the last feature's, as the one-feature scan leaves them) and
    returns the positions scanned."""
    n = len(hist.nodes)
    done: set[int] = set()
    last = len(layout.features) - 1
    for kind in ("continuous", "nominal"):
        group = [pos for pos, f in enumerate(layout.features) if f.kind == kind]
        if not group:
            continue
        widest = max(layout.features[pos].n_codes for pos in group)
        cuts = np.array([layout.features[pos].n_codes - 1 for pos in group])
        chunk = max(1, NODE_CHUNK // len(group))
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            sums = np.zeros((stop - start, len(group), widest, hist.dense.shape[2]))  # type: ignore[union-attr]
            for j, pos in enumerate(group):
                block = hist.blocks[pos]
                assert block is not None and not isinstance(block, Sparse)
                sums[:, j, : layout.features[pos].n_codes] = block[1][start:stop]
            m = (stop - start) * len(group)
            prefix, missing, total, _ = _prefix(sums.reshape(m, widest, -1),
                                                layout.features[group[0]], criterion)
            here = None if roots is None else np.repeat(roots[start:stop], len(group), axis=0)
            tie = _tie_tolerance(criterion, total, here)
            best, at, left = _scan(prefix, missing, total, criterion.score(total), criterion,
                                   rules, tie, np.tile(cuts, stop - start))
            shape = (stop - start, len(group))
            gain[start:stop, group] = np.where(cuts >= 1, best.reshape(shape), -np.inf)
            cut[start:stop, group] = at.reshape(shape)
            side[start:stop, group] = left.reshape(shape)
            if last in group:
                totals[start:stop] = total.reshape(*shape, -1)[:, group.index(last)]
        done.update(group)
    return done


def _choice(f: FeatureCodes, pos: int, gain: float, c: int, side: bool, left: np.ndarray,
            total: np.ndarray, saw: bool, every_known: bool,
            left_codes: tuple[int, ...] | None) -> Choice:
    """The choice of a node's best cut ``c`` (its last code position on the left) of feature
    ``pos``, unknown values left if ``side``; ``every_known``: the cut's left side holds every
    known value; ``left_codes``: a nominal cut's codes on the left."""
    right = total - left
    missing_left = side
    if not saw:
        # no unknown value reached this node: unknown values follow the child of more rows
        # at scoring time, the right one when they hold as many (scikit-learn's rule)
        missing_left = bool(left[ROWS] > right[ROWS])
    upto = c + 1
    if not side and every_known:
        # every known value left, only the unknown ones right: the test takes every code
        # (scikit-learn's threshold +inf), not only those up to the node's largest
        upto = f.n_codes - 1
    return Choice(feature=pos, gain=gain, missing_left=missing_left,
                  upto=0 if left_codes is not None else upto, left_codes=left_codes or (),
                  left=left, right=right, saw_missing=saw)


def _prefix(sums: np.ndarray, f: FeatureCodes, criterion: Criterion
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """One feature's candidates for some nodes (nodes x codes x statistics): the running
    sums of the known codes in the order they are cut (a nominal feature's by the
    criterion's key), the unknown value's sums, the nodes' totals, and that order."""
    missing = sums[:, 0, :]
    known = sums[:, 1:, :]
    order = None
    if f.kind == "nominal":
        node_total = missing + known.sum(axis=1)
        key = criterion.order_key(known, node_total)
        # values without rows sort last (they go right); a stable sort keeps ties by code
        key = np.where(known[..., ROWS] > 0, key, np.inf)
        order = np.argsort(key, axis=1, kind="stable")
        known = np.take_along_axis(known, order[..., None], axis=1)
    prefix = np.cumsum(known, axis=1)
    return prefix, missing, prefix[:, -1, :] + missing, order


def _tie_tolerance(criterion: Criterion, total: np.ndarray, roots: np.ndarray | None
                   ) -> np.ndarray:
    """Per node, how close two gains are to tie: ``TIE_TOLERANCE`` per unit of the node's
    weight (a gain is the node's weight times CART's impurity decrease per unit weight), in
    units of the tree root's impurity for a regression criterion."""
    scale = criterion.tie_scale(total if roots is None else roots)
    return TIE_TOLERANCE * scale * criterion.weight(total)


def _scan(
    prefix: np.ndarray, missing: np.ndarray, total: np.ndarray, parent: np.ndarray,
    criterion: Criterion, rules: Rules, tie: np.ndarray, cuts: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The best cut of one feature for every node: its gain (-inf if none), the last code
    position on the left, and whether unknown values go left. The best is the first
    candidate within ``tie`` of the largest gain: unknown values right, every cut in order,
    then unknown values left (scikit-learn's two passes, and CART's ``TIE_ORDER``).
    ``cuts``: per row, how many of the positions are cuts (rows of features of fewer codes
    padded to the widest); None: all."""
    m, width, _ = prefix.shape
    gains = np.full((m, 2, width), -np.inf)
    has_missing = missing[:, ROWS] > 0
    for side in (0, 1):  # unknown values right, then left
        if side and not has_missing.any():
            break
        left = prefix + (missing[:, None, :] if side else 0.0)
        right = total[:, None, :] - left
        g = criterion.score(left) + criterion.score(right) - parent[:, None]
        least_rows = np.minimum(left[..., ROWS], right[..., ROWS])
        least_weight = np.minimum(criterion.weight(left), criterion.weight(right))
        ok = (
            (least_rows >= rules.min_samples_leaf) & (least_rows > 0)
            & (least_weight >= rules.min_weight_leaf) & (least_weight > 0)
        )
        if side:
            # with no unknown rows the two sides are the same split: score it once
            ok &= missing[:, None, ROWS] > 0
        if cuts is not None:
            ok &= np.arange(width)[None, :] < cuts[:, None]
        gains[:, side, :] = np.where(ok & np.isfinite(g), g, -np.inf)
    flat = gains.reshape(m, -1)
    top = flat.max(axis=1)
    at = np.argmax(flat >= (top - tie)[:, None], axis=1)
    best = flat[np.arange(m), at]
    best = np.where(np.isfinite(best) & (best >= rules.min_gain), best, -np.inf)
    return best, at % width, at // width == 1


@dataclass
class _SparseBest:
    """One sparse feature's best cut per node (``slots``, ascending), as ``_scan`` finds it
    on the dense block, and what the choice needs of it."""

    slots: np.ndarray
    total: np.ndarray
    gain: np.ndarray
    cut: np.ndarray
    side: np.ndarray
    left: np.ndarray
    missing: np.ndarray
    every_known: np.ndarray
    ordered: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    """A nominal feature's known codes in the criterion's order, each node's first of them
    and its chosen last on the left (None: a continuous feature)."""

    def left_codes(self, at: np.ndarray) -> list[tuple[int, ...]] | None:
        """The codes on the left of the chosen cuts of the nodes at ``at``."""
        if self.ordered is None:
            return None
        codes, first, last = self.ordered
        return [tuple(sorted(codes[first[i] : last[i] + 1].tolist())) for i in at.tolist()]


def _scan_sparse(block: Sparse, f: FeatureCodes, criterion: Criterion, rules: Rules,
                 roots: np.ndarray | None) -> _SparseBest:
    """``_scan`` over the codes that hold rows only, to the same choice bit for bit.

    A dense block's candidate ``c`` (codes ``1..c+1`` left) whose code holds no row has the
    left sums of the candidate before it, and so the same gain: the first candidate within
    the tolerance of the best is never such a duplicate. Where code 1 holds no row, ``c = 0``
    is no duplicate: it sends nothing known left, so with unknown values right it is empty,
    and with them left it is the mirror of the last cut with them right (every known value
    left), which comes first with the same gain. So the candidates are the codes that hold
    rows. Every sum is a whole number below 2^53 in each node, so the prefix sums are exact
    here as there, and every gain is the same elementwise arithmetic on the same doubles.
    """
    slot, code = block.slot, block.code
    n_entries = len(slot)
    starts = np.flatnonzero(np.r_[True, slot[1:] != slot[:-1]]) if n_entries else (
        np.zeros(0, dtype=np.int64))
    slots = slot[starts]
    m = len(slots)
    seg = np.repeat(np.arange(m), np.diff(np.r_[starts, n_entries]))
    unknown = code == 0
    width = block.units.shape[1]
    missing_units = np.zeros((m, width), dtype=np.int64)
    missing_units[seg[unknown]] = block.units[unknown]
    known = ~unknown
    k_seg, k_code, k_units = seg[known], code[known], block.units[known]
    nominal = f.kind == "nominal"
    # each node's first and last known entries (-1: none), and its known sums
    k_starts = np.flatnonzero(np.r_[True, k_seg[1:] != k_seg[:-1]]) if len(k_seg) else (
        np.zeros(0, dtype=np.int64))
    first_known = np.full(m, -1, dtype=np.int64)
    first_known[k_seg[k_starts]] = k_starts
    last_known = np.full(m, -1, dtype=np.int64)
    last_known[k_seg[k_starts]] = np.r_[k_starts[1:], len(k_seg)] - 1
    # exact prefix sums within each node: int64 sums of the whole block may wrap, their
    # differences cannot (each node's sums stay below 2^53)
    running = np.cumsum(k_units, axis=0)
    before = np.zeros((m, width), dtype=np.int64)
    has_known = first_known >= 0
    before[has_known] = running[first_known[has_known]] - k_units[first_known[has_known]]
    known_units = np.zeros((m, width), dtype=np.int64)
    known_units[has_known] = running[last_known[has_known]] - before[has_known]
    scale = block.scale
    missing = missing_units * scale
    known_total = known_units * scale
    total = known_total + missing
    if nominal and len(k_seg):
        # a nominal feature's values in the criterion's order, ties by code (a stable sort)
        sums = k_units * scale
        key = criterion.order_key(sums[:, None, :], known_total[k_seg] + missing[k_seg])[:, 0]
        key = np.where(sums[:, ROWS] > 0, key, np.inf)
        order = np.lexsort((k_code, key, k_seg))
        k_code, k_units = k_code[order], k_units[order]
        running = np.cumsum(k_units, axis=0)
    prefix = (running - before[k_seg]) * scale
    parent = criterion.score(total)
    tie = _tie_tolerance(criterion, total, None if roots is None else roots[slots])
    top = np.full(m, -np.inf)
    gains = []
    for s in (0, 1):  # unknown values right, then left
        left = prefix + (missing[k_seg] if s else 0.0)
        g = _gains(left, total[k_seg], parent[k_seg], criterion, rules)
        if s:
            g = np.where(missing[k_seg, ROWS] > 0, g, -np.inf)
        gains.append(g)
        if len(k_starts):
            at = k_seg[k_starts]
            top[at] = np.maximum(top[at], np.maximum.reduceat(g, k_starts))
    threshold = top - tie
    # the first candidate within the tolerance: unknown values right in code order, then
    # left in code order
    pick = np.full(m, -1, dtype=np.int64)
    side = np.zeros(m, dtype=bool)
    for s in (0, 1):
        hit = np.flatnonzero((gains[s] >= threshold[k_seg]) & (pick[k_seg] < 0))
        if len(hit):
            firsts = hit[np.r_[True, k_seg[hit][1:] != k_seg[hit][:-1]]]
            pick[k_seg[firsts]] = firsts
            side[k_seg[firsts]] = bool(s)
    entry = np.maximum(pick, 0)
    chosen = pick >= 0
    gain = np.full(m, -np.inf)
    gain[chosen] = np.where(side[chosen], gains[1][pick[chosen]], gains[0][pick[chosen]])
    gain = np.where(np.isfinite(gain) & (gain >= rules.min_gain), gain, -np.inf)
    cut = np.zeros(m, dtype=np.int64)
    left = np.zeros((m, width))
    every_known = np.zeros(m, dtype=bool)
    if len(k_seg):
        cut = np.where(chosen, entry - np.maximum(first_known, 0) if nominal
                       else k_code[entry] - 1, 0)
        left = np.where(chosen[:, None], prefix[entry], 0.0)
        every_known = chosen & (prefix[entry, ROWS] == known_total[:, ROWS])
    left = left + np.where(side[:, None], missing, 0.0)
    return _SparseBest(slots=slots, total=total, gain=gain, cut=cut, side=side, left=left,
                       missing=missing, every_known=every_known,
                       ordered=(k_code, first_known, pick) if nominal else None)


def _gains(left: np.ndarray, total: np.ndarray, parent: np.ndarray, criterion: Criterion,
           rules: Rules) -> np.ndarray:
    """Each candidate's gain (-inf where a rule refuses it), as ``_scan`` computes it."""
    right = total - left
    g = criterion.score(left) + criterion.score(right) - parent
    least_rows = np.minimum(left[..., ROWS], right[..., ROWS])
    least_weight = np.minimum(criterion.weight(left), criterion.weight(right))
    ok = (
        (least_rows >= rules.min_samples_leaf) & (least_rows > 0)
        & (least_weight >= rules.min_weight_leaf) & (least_weight > 0)
    )
    return np.where(ok & np.isfinite(g), g, -np.inf)
