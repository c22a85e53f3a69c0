"""Growing trees level by level over a backend: every open node of every tree in one request.

The learner sees only statistics: it asks the backend for the histograms of the nodes it
flagged, derives each remaining node's histogram as its parent's less its scanned sibling's,
picks every node's split (``splitter.best_splits``), and tells the backend where the rows go.
It never builds SQL and never touches rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .backends import Allowed, Backend, Route, Start
from .gains import ROWS, Criterion
from .rows import Sampling
from .splitter import Choice, Histograms, Layout, Rules, best_splits

SUBTRACT_BYTES = 512 * 2**20
"""Parents' histograms kept for the next level's subtraction, at most (else both children of
a split are scanned: a level of 20,000 nodes at 16 x 256 codes would hold 2.6 GB)."""


@dataclass
class GrowthOptions:
    max_depth: int | None = None
    min_samples_split: float = 2.0
    rules: Rules = field(default_factory=Rules)
    max_features: int | None = None
    seed: int = 0


@dataclass
class Grown:
    """One grown tree, its nodes in the order they were made (the root first)."""

    feature: list[int] = field(default_factory=list)
    upto: list[int] = field(default_factory=list)
    left_codes: list[tuple[int, ...]] = field(default_factory=list)
    missing_left: list[bool] = field(default_factory=list)
    left: list[int] = field(default_factory=list)
    right: list[int] = field(default_factory=list)
    stats: list[np.ndarray] = field(default_factory=list)
    gain: list[float] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)

    def add(self, stats: np.ndarray, depth: int) -> int:
        self.feature.append(-1)
        self.upto.append(0)
        self.left_codes.append(())
        self.missing_left.append(False)
        self.left.append(-1)
        self.right.append(-1)
        self.stats.append(stats)
        self.gain.append(0.0)
        self.depth.append(depth)
        return len(self.feature) - 1


@dataclass
class LevelStats:
    """One level: its open nodes, the nodes whose rows were read, and where its seconds went
    (summing the histograms, choosing the splits, moving the rows)."""

    level: int
    nodes: int
    scanned: int
    seconds: float
    histogram_seconds: float = 0.0
    split_seconds: float = 0.0
    route_seconds: float = 0.0
    statements: int | None = None
    """Queries the engine counted for the level (``EngineStats.queries``; the small tables
    of a level's splits are loaded apart), None when grown in numpy: the same for any number
    of trees, as every tree's open nodes share the level's statements."""
    scans: int | None = None
    """Those of them that read the level's rows (the histogram, and routing them down)."""


def grow_level_wise(
    backend: Backend,
    layout: Layout,
    criterion: Criterion,
    options: GrowthOptions,
    roots: list[tuple[int, int, int, int] | None],
    sampling: Sampling,
    on_level: Callable[[LevelStats], None] | None = None,
    first_tree: int = 0,
) -> tuple[list[Grown], list[LevelStats]]:
    """Grow one tree per entry of ``roots`` (its bootstrap constants, or None for every row
    once), all in the same level requests; ``first_tree`` numbers the first of them (the
    feature sampling of a node is drawn from the seed, its tree's number and its place)."""
    trees = [Grown() for _ in roots]
    # a node's global id is its place in ``where``: (tree, node within the tree)
    where: list[tuple[int, int]] = []

    def new(tree: int, stats: np.ndarray, depth: int) -> int:
        where.append((tree, trees[tree].add(stats, depth)))
        return len(where) - 1

    starts = []
    for t, constants in enumerate(roots):
        # a root that draws no row (a few rows' bootstrap) keeps empty statistics
        starts.append(Start(new(t, np.zeros(backend.n_stats), 0), constants))
    backend.start(starts, sampling)
    open_nodes = [s.node for s in starts]
    # with a sample of features per node, a child's features are not its parent's: every
    # open node is scanned for its own; else the larger child is its parent less its sibling
    sampled = options.max_features is not None and options.max_features < len(layout.features)
    kept: dict[int, np.ndarray] = {}  # parent id -> its histogram (for subtraction)
    pair: dict[int, tuple[int, int]] = {}  # child id -> (parent id, sibling id)
    levels: list[LevelStats] = []
    level = 0
    while open_nodes:
        started = time.perf_counter()
        counted = backend.statements()
        if sampled:
            nodes = np.asarray(open_nodes, dtype=np.int64)
            masks = _feature_masks(open_nodes, where, layout, options, first_tree)
            hist = backend.histograms(Allowed(nodes, masks))
            scanned = len(hist.nodes)
        else:
            hist = backend.histograms()
            scanned = len(hist.nodes)
            if pair:
                assert hist.dense is not None
                hist_of = {int(i): hist.dense[k] for k, i in enumerate(hist.nodes)}
                for node in open_nodes:
                    if node not in hist_of:
                        parent, sibling = pair[node]
                        hist_of[node] = kept[parent] - hist_of[sibling]
                dense = np.stack([hist_of[n] for n in open_nodes])
                del hist_of
                hist = Histograms.of_dense(np.asarray(open_nodes, dtype=np.int64), dense,
                                           layout)
            kept.clear()
            pair.clear()
        summed = time.perf_counter()
        # the roots' statistics scale the tie tolerance (at level 0 the nodes are the roots)
        roots = None if level == 0 else np.stack(
            [trees[where[n][0]].stats[0] for n in hist.nodes.tolist()])
        choices, totals = best_splits(hist, layout, criterion, options.rules, roots)
        routes: list[Route] = []
        next_open: list[int] = []
        keep_budget = SUBTRACT_BYTES
        for k, node in enumerate(hist.nodes.tolist()):
            choice = choices[k]
            t, local = where[node]
            tree = trees[t]
            tree.stats[local] = totals[k]
            if choice is None or criterion.is_pure(totals[k]):
                continue
            depth = tree.depth[local] + 1
            left = new(t, choice.left, depth)
            right = new(t, choice.right, depth)
            _record(tree, local, choice, where[left][1], where[right][1])
            grow_left = _may_split(choice.left, depth, options, criterion)
            grow_right = _may_split(choice.right, depth, options, criterion)
            scan_left, scan_right = grow_left, grow_right
            if (not sampled and grow_left and grow_right and hist.dense is not None
                    and keep_budget >= hist.dense[k].nbytes):
                # scan the smaller child, subtract it from the parent for the larger
                small_left = choice.left[ROWS] <= choice.right[ROWS]
                scan_left, scan_right = small_left, not small_left
                kept[node] = hist.dense[k]
                keep_budget -= hist.dense[k].nbytes
                if small_left:
                    pair[right] = (node, left)
                else:
                    pair[left] = (node, right)
            routes.append(Route(
                node=node, feature=choice.feature, missing_left=choice.missing_left,
                upto=choice.upto, left_codes=choice.left_codes,
                nominal=layout.features[choice.feature].kind == "nominal",
                left=left if grow_left else -1, right=right if grow_right else -1,
                scan_left=scan_left, scan_right=scan_right,
            ))
            next_open += [c for c, g in ((left, grow_left), (right, grow_right)) if g]
        chosen = time.perf_counter()
        if routes and next_open:
            backend.route(routes)
        now = time.perf_counter()
        ran = backend.statements()
        statements = scans = None
        if counted is not None and ran is not None:
            statements = ran[0] - counted[0]
            scans = ran[1] - counted[1]
        stats = LevelStats(level, len(hist.nodes), scanned, now - started,
                           histogram_seconds=summed - started, split_seconds=chosen - summed,
                           route_seconds=now - chosen, statements=statements, scans=scans)
        levels.append(stats)
        if on_level:
            on_level(stats)
        open_nodes = next_open
        level += 1
    return trees, levels


def _record(tree: Grown, local: int, choice: Choice, left: int, right: int) -> None:
    tree.feature[local] = choice.feature
    tree.upto[local] = choice.upto
    tree.left_codes[local] = choice.left_codes
    tree.missing_left[local] = choice.missing_left
    tree.left[local] = left
    tree.right[local] = right
    tree.gain[local] = choice.gain


def _may_split(stats: np.ndarray, depth: int, options: GrowthOptions,
               criterion: Criterion) -> bool:
    if options.max_depth is not None and depth >= options.max_depth:
        return False
    rows = stats[ROWS]
    if rows < options.min_samples_split or rows < 2 * options.rules.min_samples_leaf:
        return False
    return not criterion.is_pure(stats)


def _feature_masks(open_nodes: list[int], where: list[tuple[int, int]], layout: Layout,
                   options: GrowthOptions, first_tree: int) -> np.ndarray:
    """Each node's sampled features (``max_features``): the ``k`` features with the least
    hash of (seed, tree, node within the tree, feature), a draw without replacement that
    depends only on those four numbers."""
    n_features = len(layout.features)
    k = options.max_features
    assert k is not None
    tree = np.asarray([first_tree + where[n][0] for n in open_nodes], dtype=np.uint64)
    local = np.asarray([where[n][1] for n in open_nodes], dtype=np.uint64)
    feature = np.arange(n_features, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = _mix(np.uint64(options.seed & 0xFFFFFFFFFFFFFFFF))
        x = _mix(x ^ tree)
        x = _mix(x[:, None] ^ (local[:, None] * np.uint64(0x9E3779B97F4A7C15)) ^ feature[None])
    chosen = np.argsort(x, axis=1, kind="stable")[:, :k]
    masks = np.zeros((len(open_nodes), n_features), dtype=bool)
    np.put_along_axis(masks, chosen, True, axis=1)
    return masks


def _mix(x: np.ndarray | np.uint64) -> np.ndarray:
    """splitmix64's finaliser: a 64-bit bijection that scatters nearby inputs."""
    x = np.asarray(x, dtype=np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))
