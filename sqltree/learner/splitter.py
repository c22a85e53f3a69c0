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


@dataclass
class Histograms:
    """A level's histograms, feature by feature: ``blocks[pos]`` holds, for the nodes that may
    split on feature ``pos``, their slots in ``nodes`` and their sums per code (nodes x codes x
    statistics); None where no node takes the feature. With every feature at every node the
    blocks are views of one dense array (``dense``), which subtraction of siblings needs."""

    nodes: np.ndarray
    blocks: list[tuple[np.ndarray, np.ndarray] | None]
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
    n_stats = next((b[1].shape[2] for b in hist.blocks if b is not None), 1)
    # each feature's best candidate per node: its gain, its last code on the left, its side
    gain = np.full((n, n_features), -np.inf)
    cut = np.zeros((n, n_features), dtype=np.int64)
    side = np.zeros((n, n_features), dtype=bool)
    totals = np.zeros((n, n_stats))
    for pos, f in enumerate(layout.features):
        block = hist.blocks[pos]
        if block is None:
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
        # the winners' left statistics, from their histograms once more
        all_slots, all_sums = block
        where = np.full(n, -1, dtype=np.int64)
        where[all_slots] = np.arange(len(all_slots))
        prefix, missing, _, order = _prefix(all_sums[where[nodes]], f, criterion)
        c, s = cut[nodes, pos], side[nodes, pos]
        lefts = prefix[np.arange(len(nodes)), c] + np.where(s[:, None], missing, 0.0)
        nominal = order is not None
        for r, i in enumerate(nodes.tolist()):
            left = lefts[r]
            right = totals[i] - left
            saw = bool(missing[r, ROWS] > 0)
            missing_left = bool(s[r])
            if not saw:
                # no unknown value reached this node: unknown values follow the child of
                # more rows at scoring time, the right one when they hold as many
                # (scikit-learn's rule)
                missing_left = bool(left[ROWS] > right[ROWS])
            upto = int(c[r]) + 1
            if not s[r] and prefix[r, c[r], ROWS] == prefix[r, -1, ROWS]:
                # every known value left, only the unknown ones right: the test takes every
                # code (scikit-learn's threshold +inf), not only those up to the node's largest
                upto = f.n_codes - 1
            out[i] = Choice(
                feature=pos, gain=float(gain[i, pos]), missing_left=missing_left,
                upto=0 if nominal else upto,
                left_codes=tuple(sorted(int(v) + 1 for v in order[r, : c[r] + 1]))
                if order is not None else (),
                left=left, right=right, saw_missing=saw,
            )
    return out, totals


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
    criterion: Criterion, rules: Rules, tie: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The best cut of one feature for every node: its gain (-inf if none), the last code
    position on the left, and whether unknown values go left. The best is the first
    candidate within ``tie`` of the largest gain: unknown values right, every cut in order,
    then unknown values left (scikit-learn's two passes, and CART's ``TIE_ORDER``)."""
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
        gains[:, side, :] = np.where(ok & np.isfinite(g), g, -np.inf)
    flat = gains.reshape(m, -1)
    top = flat.max(axis=1)
    at = np.argmax(flat >= (top - tie)[:, None], axis=1)
    best = flat[np.arange(m), at]
    best = np.where(np.isfinite(best) & (best >= rules.min_gain), best, -np.inf)
    return best, at % width, at // width == 1
