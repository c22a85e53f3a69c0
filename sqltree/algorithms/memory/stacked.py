"""A small level's features scored as one: their rows stacked, a copy per feature.

The in-memory scorers (``cart_scores.score``, ``c45_scores.score``) work a feature at a time,
each with a few dozen numpy calls over that feature's groups. On a small level those calls
cost far more than the arithmetic in them: a 569-row, 30-feature fit spent most of its
growth there (30 features x 7 levels x about 0.5 ms). Here the level's rows are stacked, one
copy per feature of a kind, into one histogram of one feature whose node of a row is the pair
(feature, node): each (feature, node) is a node of its own there, so the scorer computes per
stacked node exactly what it computes per (node, feature) feature by feature, in one set of
calls; the rows it returns are read back as (node, feature).

The same rows come out, bit for bit: every candidate's arithmetic is its own, a (node,
feature)'s groups and their sums are its rows' (the stacked node has the same rows, weights and
classes), and where sums run across nodes (running sums of the groups in key order) they are
exact, whole numbers or fixed point (``Histogram.exact``), so the groups before a node's
change nothing. Moments (regression) are doubles summed in order and are not stacked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import parallel
from ...dataset import Feature
from .level import Histogram, Level, Ranks

STACK_CELLS = {"cart": 1 << 13, "c4.5": 1 << 14}
"""The most stacked rows (a level's rows times the features of a stack) each scorer takes at
once. A stack's arrays outgrow the processor's caches: CART's scorer keeps a few dozen
temporaries per candidate, C4.5's fewer. Measured (CPU time of a fit, the benchmark table's
16 features, ``max_depth=10``; and the breast-cancer grid search): CART on 569 rows x 30
features 82-92 ms stacked by 8,192 or 16,384 cells against 133-149 ms a feature at a time,
on 2,000 rows 241 against 264 ms, but on 4,000 rows 437 ms in stacks of 4 (16,384 cells)
against 384 ms; C4.5 on 569 rows 70-74 ms against 192 ms, on 4,000 rows 251-262 ms against
301-313 ms. Tests set it to ``{}``: every feature on its own."""

MIN_STACK = 4
"""The fewest features worth stacking: a stack of two or three saves few calls."""

Rows = list[tuple[Any, ...]]
Scorer = Callable[[Histogram, Sequence[Feature]], Rows]


def stacks(hist: Histogram, features: Sequence[Feature], scorer: str) -> list[list[Feature]]:
    """The features to score stacked, in stacks of one kind of ``MIN_STACK`` features or
    more and at most ``STACK_CELLS[scorer]`` stacked rows; none where the level's rows are
    scored side by side in threads (``parallel.PARALLEL_MIN_ROWS``) or its sums are not exact
    in any order."""
    level = hist.level
    rows = len(level.node)
    if (rows == 0 or rows >= parallel.PARALLEL_MIN_ROWS or level.ranks is None
            or hist.moments):
        return []
    size = STACK_CELLS.get(scorer, 0) // rows  # features a stack holds
    if size < MIN_STACK or not _exact(hist, size):
        return []
    by_kind: dict[str, list[Feature]] = {}
    for f in features:
        by_kind.setdefault(f.kind, []).append(f)
    # a kind's features in stacks of about equal size
    out = []
    for group in by_kind.values():
        parts = -(-len(group) // size)
        step = -(-len(group) // parts)
        out += [group[i:i + step] for i in range(0, len(group), step)
                if len(group[i:i + step]) >= MIN_STACK]
    return out


def _exact(hist: Histogram, copies: int) -> bool:
    """Whether sums of ``copies`` copies of the level's rows are exact in any order, as the
    level's own are (``Histogram.exact``): integer counts (unit weights, fixed point) run
    across the copies in int64, whose wrapping additions and subtractions still give every
    node's sums exactly; whole-number doubles must stay below 2**53 all together."""
    parts = hist._class_parts()
    return bool(parts) and all(
        shift is not None or part is None or copies * float(part.sum()) < 2.0**53
        for part, shift in parts)


def score_stacked(hist: Histogram, features: Sequence[Feature], score: Scorer,
                  scorer: str) -> Rows:
    """``score(hist, features)``'s rows, ordered by (node, feature) as the scorers order
    theirs, with the features of each of ``stacks`` scored as one."""
    groups = stacks(hist, features, scorer)
    if not groups:
        return score(hist, features)
    stacked = {f.index for group in groups for f in group}
    rest = [f for f in features if f.index not in stacked]
    rows = list(score(hist, rest)) if rest else []
    for group in groups:
        one, span = _stack(hist, group)
        attr = [f.index for f in group]
        for row in score(one, one.features):
            slot, node = divmod(int(row[0]), span)
            rows.append((node, attr[slot], *row[2:]))
    rows.sort(key=lambda row: (row[0], row[1]))
    return rows


def _stack(hist: Histogram, features: Sequence[Feature]) -> tuple[Histogram, int]:
    """``hist``'s rows once per feature, the copy of feature ``i`` on nodes ``i * span +
    node``, and one feature of their ranks (each feature's ranks after the ones before:
    their values side by side); returns it and ``span``."""
    level = hist.level
    rows = len(level.node)
    span = int(level.node.max()) + 1
    copies = len(features)
    stacked_node = np.empty((copies, rows), dtype=np.int64)
    rank = np.empty((copies, rows), dtype=np.int64)
    values, size = [], 0
    for i, f in enumerate(features):
        np.add(level.node, i * span, out=stacked_node[i])
        r = hist.ranks(f)
        # the rank after the features' before, -1 (unknown) kept
        np.add(r.rank, np.where(r.rank >= 0, size, 0), out=rank[i])
        values.append(r.values if r.values is not None
                      else np.arange(r.size, dtype=np.float64))
        size += r.size
    narrow = next(t for t in (np.int8, np.int16, np.int32, np.int64)
                  if size <= np.iinfo(t).max + 1)
    one = Feature(name=features[0].name, kind=features[0].kind, index=0, sql_type="")
    stacked = Level(
        node=stacked_node.ravel(), w=np.tile(level.w, copies), y=np.tile(level.y, copies),
        x=None, column={0: 0},
        ranks={0: Ranks(rank.ravel().astype(narrow, copy=False), np.concatenate(values), size)},
    )
    out = Histogram(stacked, [one], hist.n_classes, hist.bits, hist.moments, hist.poisson)
    # the level's own parts of the exact sums, a copy each (``exact_parts`` of the stacked
    # terms would split them by their total, the copies' total, which int64 may not hold)
    out._parts = [(None if part is None else np.tile(part, copies), shift)
                  for part, shift in hist._class_parts()]
    return out, span
