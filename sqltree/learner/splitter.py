"""The best split of every open node, from its histogram.

A histogram holds, per node, the statistics (``gains``) of every code of every feature:
code 0 is the feature's unknown value (NULL), codes 1.. are a continuous feature's bins in
order or a nominal feature's values. A split sends a set of codes left and the rest right:

- continuous: codes ``1..t`` left (the test ``value <= edge[t]``), unknown values to the side
  that gains more (a learned direction, as LightGBM and XGBoost learn it);
- nominal: the node's values ordered by the criterion's key, a prefix of that order left;
  every other value, seen in training or not, goes right.

Ties go to the first candidate in the order (feature as the source lists them, threshold
ascending, unknown values right before left): the gains are computed by the same numpy code
from the same exact sums on every engine, so the choice is the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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
) -> tuple[list[Choice | None], np.ndarray]:
    """One choice (or None) per node of ``hist``, and every node's statistics (its sums over
    all codes of any one feature)."""
    n = len(hist.nodes)
    n_stats = next((b[1].shape[2] for b in hist.blocks if b is not None), 1)
    best_gain = np.full(n, -np.inf)
    best_feature = np.full(n, -1, dtype=np.int64)
    best_upto = np.zeros(n, dtype=np.int64)
    best_side = np.zeros(n, dtype=bool)
    best_saw = np.zeros(n, dtype=bool)
    best_left = np.zeros((n, n_stats))
    totals = np.zeros((n, n_stats))
    nominal_left: dict[int, tuple[int, ...]] = {}
    for pos, f in enumerate(layout.features):
        block = hist.blocks[pos]
        if block is None:
            continue
        all_slots, all_sums = block
        for start in range(0, len(all_slots), NODE_CHUNK):
            slots = all_slots[start : start + NODE_CHUNK]
            sums = all_sums[start : start + NODE_CHUNK]
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
            total = prefix[:, -1, :] + missing
            totals[slots] = total
            if f.n_codes < 2:
                continue
            gains, cut, side = _scan(prefix, missing, total, criterion.score(total),
                                     criterion, rules)
            better = gains > best_gain[slots]
            if not better.any():
                continue
            at = slots[better]
            rows = np.flatnonzero(better)
            best_gain[at] = gains[better]
            best_feature[at] = pos
            best_upto[at] = cut[better] + 1
            best_side[at] = side[better]
            best_saw[at] = missing[better, ROWS] > 0
            best_left[at] = prefix[rows, cut[better]] + np.where(
                side[better][:, None], missing[better], 0.0)
            if order is not None:
                for r, node in zip(rows, at):
                    nominal_left[int(node)] = tuple(
                        sorted(int(c) + 1 for c in order[r, : cut[r] + 1]))
    out: list[Choice | None] = [None] * n
    for i in np.flatnonzero(np.isfinite(best_gain)):
        left = best_left[i]
        right = totals[i] - left
        missing_left = bool(best_side[i])
        if not best_saw[i]:
            # no unknown value reached this node: unknown values follow the heavier child at
            # scoring time (scikit-learn's rule)
            missing_left = bool(left[ROWS] >= right[ROWS])
        pos = int(best_feature[i])
        nominal = layout.features[pos].kind == "nominal"
        out[i] = Choice(
            feature=pos, gain=float(best_gain[i]), missing_left=missing_left,
            upto=0 if nominal else int(best_upto[i]),
            left_codes=nominal_left[int(i)] if nominal else (),
            left=left, right=right, saw_missing=bool(best_saw[i]),
        )
    return out, totals


def _scan(
    prefix: np.ndarray, missing: np.ndarray, total: np.ndarray, parent: np.ndarray,
    criterion: Criterion, rules: Rules,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The best cut of one feature for every node: its gain (-inf if none), the last code
    position on the left, and whether unknown values go left."""
    m, width, _ = prefix.shape
    gains = np.full((m, width, 2), -np.inf)
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
        gains[:, :, side] = np.where(ok & np.isfinite(g), g, -np.inf)
    flat = gains.reshape(m, -1)
    at = np.argmax(flat, axis=1)
    best = flat[np.arange(m), at]
    best = np.where(np.isfinite(best) & (best >= rules.min_gain), best, -np.inf)
    return best, at // 2, at % 2
