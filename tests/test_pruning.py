"""Pruning: C4.5's error estimate, collapse, error-based pruning with subtree raising (counts
recounted in SQL), pessimistic pruning (seed 002's table) and reduced-error pruning."""

from __future__ import annotations

import copy
import gc
import math
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from sqlglot import exp

import sqltree
from sqltree import progress
from sqltree.algorithms import grow
from sqltree.algorithms.memory import recount as memory_recount
from sqltree.algorithms.memory.recount import RowsInMemory
from sqltree.dataset import describe
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.errors import DataError
from sqltree.fixed_point import training_weight_bits
from sqltree.grower import GrowOptions
from sqltree.pruning import (
    _Router,
    add_errs,
    collapse,
    estimated_errors,
    known_counts,
    pessimistic_decision,
    prune,
    prune_c45,
    prune_pessimistic,
    prune_reduced_error,
    recount_raised,
    route_counts,
)
from sqltree.pruning.c45 import _Estimates
from sqltree.tree import CONTINUOUS, Node, Split
from tests.helpers import GOLF, GOLF_NUMERIC, read_csv
from tests.weka import example, read_arff

Z75 = 0.6744897501960817  # the 75% quantile of the standard normal


def leaf(counts: list[float]) -> Node:
    total = sum(counts)
    return Node(counts=list(counts), proba=[c / total if total else 0.0 for c in counts])


def nominal(feature: str, values: list[str], children: list[Node]) -> Node:
    counts = [sum(c.counts[i] for c in children) for i in range(len(children[0].counts))]
    node = leaf(counts)
    node.split = Split(feature, "nominal", groups=[[v] for v in values])
    node.children = children
    node.shares = [c.weight / node.weight for c in children]
    return node


# -- the error estimate ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "u"),
    # Quinlan, C4.5 (1993), p. 41: U_25%(0, N) for the leaves of the voting example.
    [(6, 0.206), (9, 0.143), (1, 0.750)],
)
def test_add_errs_without_errors_is_the_exact_binomial_limit(n: int, u: float) -> None:
    assert add_errs(n, 0) == pytest.approx(n * (1 - 0.25 ** (1 / n)))
    assert add_errs(n, 0) / n == pytest.approx(u, abs=5e-4)


def test_add_errs_follows_j48_stats() -> None:
    # Normal approximation with continuity correction, as J48's Stats.addErrs.
    n, e = 16.0, 3.0
    f = (e + 0.5) / n
    r = (f + Z75**2 / (2 * n) + Z75 * math.sqrt(f / n - f * f / n + Z75**2 / (4 * n * n))) / (
        1 + Z75**2 / n
    )
    assert add_errs(n, e) == pytest.approx(r * n - e, rel=1e-12)
    # Between 0 and 1 error: linear interpolation between the two.
    assert add_errs(10, 0.25) == pytest.approx(
        add_errs(10, 0) + 0.25 * (add_errs(10, 1) - add_errs(10, 0))
    )
    # Near the top the estimate is capped at all cases wrong.
    assert add_errs(4, 3.6) == pytest.approx(0.4)
    assert add_errs(10, 0, cf=0.6) == 0.0  # J48 leaves the estimate alone for CF > 0.5
    assert estimated_errors([0.0, 0.0]) == 0.0
    assert estimated_errors([13.0, 3.0]) == pytest.approx(3 + add_errs(16, 3))


# -- collapse and pruning on stored counts -----------------------------------------------------
def test_collapse_removes_subtrees_that_fix_no_training_error() -> None:
    useless = nominal("b", ["p", "q"], [leaf([3.0, 1.0]), leaf([3.0, 1.0])])
    useful = nominal("c", ["p", "q"], [leaf([4.0, 0.0]), leaf([0.0, 4.0])])
    root = nominal("a", ["x", "y"], [useless, useful])
    assert collapse(root) == 1
    assert root.children[0].is_leaf and not root.children[1].is_leaf


def test_collapse_reports_the_leaves_it_leaves() -> None:
    """A collapsed subtree with internal nodes below it: the progress line's leaf count,
    worked out by the collapse itself, is the tree's."""
    inner = nominal("c", ["p", "q"], [leaf([2.0, 1.0]), leaf([1.0, 0.0])])
    useless = nominal("b", ["p", "q"], [inner, leaf([3.0, 1.0])])
    useful = nominal("d", ["p", "q"], [leaf([4.0, 0.0]), leaf([0.0, 4.0])])
    root = nominal("a", ["x", "y"], [useless, useful])
    heard: list[progress.Event] = []
    with progress.listening(heard.append):
        stats = prune_c45(root, None, subtree_raising=False, leaves=5)
    assert stats.collapsed == 1 and root.children[0].is_leaf
    line = next(e.message for e in heard if e.message.startswith("collapsed"))
    assert ": 3 leaves" in line, line


@pytest.mark.parametrize("enabled", [True, False])
def test_pruning_leaves_the_cycle_collector_as_it_found_it(enabled: bool) -> None:
    """C4.5 pruning pauses Python's cycle collector over the grown tree, and only pauses it."""
    useful = nominal("d", ["p", "q"], [leaf([4.0, 0.0]), leaf([0.0, 4.0])])
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        prune_c45(nominal("a", ["x", "y"], [useful, leaf([1.0, 1.0])]), None,
                  subtree_raising=False)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_quinlan_voting_example_is_pruned() -> None:
    """C4.5 (1993), section 4.2: three pure leaves of 6, 9 and 1 cases under a node of 16 with
    one error; the subtree's estimate exceeds the leaf's, so the subtree goes."""
    sub = nominal(
        "education spending", ["n", "y", "u"],
        [leaf([6.0, 0.0]), leaf([9.0, 0.0]), leaf([0.0, 1.0])],
    )
    subtree = sum(estimated_errors(c.counts) for c in sub.children)
    assert subtree == pytest.approx(6 * 0.206 + 9 * 0.143 + 0.750, abs=0.01)
    assert estimated_errors(sub.counts) < subtree
    stats = prune_c45(sub, None, subtree_raising=False)
    assert sub.is_leaf and sub.counts == [15.0, 1.0] and stats.pruned == 1


def test_raising_needs_the_data() -> None:
    root = nominal("a", ["x", "y"], [leaf([4.0, 0.0]), leaf([0.0, 4.0])])
    with pytest.raises(ValueError, match="dataset"):
        prune_c45(root)
    with pytest.raises(ValueError, match="pruning must be one of"):
        prune(root, None, "optimal")


def test_a_kept_node_made_a_leaf_again_is_estimated_as_a_leaf() -> None:
    """Pruning a raised branch again can make a node kept before a leaf: its parent's
    subtree estimate then takes the leaf's estimate, not the sum it was kept with."""
    estimates = _Estimates(0.25)
    child = nominal("a", ["x", "y"], [leaf([5.0, 1.0]), leaf([0.0, 4.0])])
    parent = nominal("b", ["p", "q"], [child, leaf([3.0, 0.0])])
    assert estimates.tree(child) == pytest.approx(
        estimated_errors([5.0, 1.0]) + estimated_errors([0.0, 4.0])
    )
    estimates.decided(child, kept=True)
    kept = estimates.subtree(parent)
    assert kept == pytest.approx(estimates.tree(child) + estimated_errors([3.0, 0.0]))
    child.make_leaf()
    assert estimates.subtree(parent) == pytest.approx(
        estimated_errors([5.0, 5.0]) + estimated_errors([3.0, 0.0])
    )
    assert estimates.subtree(parent) != pytest.approx(kept)


# -- counts stay exact: a Python reference of C4.5's fractional routing ------------------------
def reference_counts(root: Node, rows: list[dict[str, Any]], target: str, classes: list
                     ) -> dict[int, list[float]]:
    """Route every row from the root; at each test, unknown values go down every branch with the
    share of the known weight that reached the test (as J48 keeps its distributions)."""
    out: dict[int, list[float]] = {}

    def visit(node: Node, weighted: list[tuple[dict[str, Any], float]]) -> None:
        counts = [0.0] * len(classes)
        for row, w in weighted:
            counts[classes.index(row[target])] += w
        out[id(node)] = counts
        if node.is_leaf:
            return
        assert node.split is not None
        parts: list[list[tuple[dict[str, Any], float]]] = [[] for _ in node.children]
        unknown = []
        for row, w in weighted:
            b = node.split.branch_of(row.get(node.split.feature))
            (unknown.append((row, w)) if b is None else parts[b].append((row, w)))
        known = [sum(w for _, w in p) for p in parts]
        total = sum(known)
        shares = [k / total if total > 0 else 1 / len(parts) for k in known]
        for i, share in enumerate(shares):
            visit(node.children[i], parts[i] + [(r, w * share) for r, w in unknown if share > 0])

    visit(root, [(r, 1.0) for r in rows])
    return out


def assert_counts_exact(root: Node, frame: pd.DataFrame, target: str, classes: list) -> None:
    expected = reference_counts(root, frame.to_dict("records"), target, classes)
    for node in root.walk():
        assert node.counts == pytest.approx(expected[id(node)], abs=1e-9)
        if not node.is_leaf and node.weight > 0:
            assert node.shares == pytest.approx(
                [c.weight / node.weight for c in node.children], abs=1e-9
            )


@pytest.fixture(scope="module")
def labor() -> Iterator[tuple[pd.DataFrame, str, Any, Node]]:
    """Labor (57 rows, unknown values in 16 of 17 columns), grown once: frame, target, the
    dataset on a live engine, and the unpruned root (tests prune a copy)."""
    arff = read_arff(example("labor"))
    engine = DuckDBEngine()
    data = describe(arff.frame, engine, arff.target)
    root, _ = grow(data, GrowOptions())
    yield arff.frame, arff.target, data, root
    engine.cleanup()


def test_subtree_raising_recounts_in_sql(labor: tuple[pd.DataFrame, str, Any, Node]) -> None:
    frame, target, data, grown = labor
    engine = data.engine
    root = copy.deepcopy(grown)
    assert_counts_exact(root, frame, target, data.classes)  # the grower's counts, too
    before = engine.stats.queries
    stats = prune_c45(root, data)
    assert stats.raised == 1  # J48 raises one subtree on labor as well (test_j48)
    assert engine.stats.queries - before == stats.queries + 1  # + the encoded rows, once
    assert_counts_exact(root, frame, target, data.classes)


def test_route_counts_matches_the_reference(labor: tuple[pd.DataFrame, str, Any, Node]) -> None:
    """Hypothetical raising everywhere: each internal node's data sent through each internal
    child, against the Python reference on the same rows."""
    frame, target, data, root = labor
    rows = frame.to_dict("records")
    at_node = {}

    def collect(node: Node, weighted: list, path: list) -> None:
        at_node[id(node)] = (weighted, path)
        if node.is_leaf:
            return
        for i, child in enumerate(node.children):
            keep = []
            for row, w in weighted:
                b = node.split.branch_of(row.get(node.split.feature))
                if b is None:
                    keep.append((row, w * node.shares[i]))
                elif b == i:
                    keep.append((row, w))
            collect(child, keep, [*path, (node, i)])

    collect(root, [(r, 1.0) for r in rows], [])
    router = _Router.open(data)
    checked = 0
    for node in root.walk():
        for child in node.children:
            if child.is_leaf:
                continue
            weighted, path = at_node[id(node)]
            got = route_counts(router, path, child)
            # the reference: the node's weighted rows as the root of the child's subtree
            expected = _reference_weighted(child, weighted, target, data.classes)
            for n in child.walk():
                assert got.get(id(n), [0.0] * 2) == pytest.approx(expected[id(n)], abs=1e-9)
            checked += 1
    router.close()
    assert checked >= 3


def _reference_weighted(root: Node, weighted: list, target: str, classes: list) -> dict:
    rows = [dict(r, __w=w) for r, w in weighted]
    out: dict[int, list[float]] = {}

    def visit(node: Node, items: list[tuple[dict[str, Any], float]]) -> None:
        counts = [0.0] * len(classes)
        for row, w in items:
            counts[classes.index(row[target])] += w
        out[id(node)] = counts
        if node.is_leaf:
            return
        parts: list[list] = [[] for _ in node.children]
        unknown = []
        for row, w in items:
            b = node.split.branch_of(row.get(node.split.feature))
            (unknown.append((row, w)) if b is None else parts[b].append((row, w)))
        known = [sum(w for _, w in p) for p in parts]
        total = sum(known)
        for i in range(len(parts)):
            share = known[i] / total if total > 0 else 1 / len(parts)
            visit(node.children[i], parts[i] + [(r, w * share) for r, w in unknown if share > 0])

    visit(root, [(r, r["__w"]) for r in rows])
    return out


# -- pessimistic pruning: seed 002's table -----------------------------------------------------
@pytest.mark.parametrize(
    ("node", "subtree", "se", "leaf_estimate", "pruned"),
    [
        ("T1", 8, 2.68, 25.5, False),
        ("T2", 5, 2.14, 10.5, False),
        ("T3", 3, 1.60, 5.5, False),
        ("T4", 4, 1.92, 4.5, True),
        ("T5", 1, 0.95, 4.5, False),
    ],
)
def test_pessimistic_rule_on_seed_table(
    node: str, subtree: float, se: float, leaf_estimate: float, pruned: bool
) -> None:
    assert (leaf_estimate <= subtree + se) is pruned
    # the same decision from counts: N chosen so that sqrt(E (N - E) / N) is the table's SE
    n = subtree**2 / (subtree - se**2) if subtree > se**2 else 80.0
    assert pessimistic_decision(leaf_estimate - 0.5, subtree, n) is pruned


def test_pessimistic_pruning_t4_and_t5() -> None:
    """T4: 51 cases (47 A, 4 B), two leaves with 1 and 2 errors: E = 3 + 2 x 0.5 = 4,
    SE = sqrt(4 x 47 / 51) = 1.92, leaf 4 + 0.5 = 4.5 <= 5.92: pruned. T5: 10 cases (6 A,
    4 B) split into pure leaves: E = 1, SE = 0.95, leaf 4.5 > 1.95: kept."""
    t4 = nominal("p", ["u", "v"], [leaf([45.0, 1.0]), leaf([2.0, 3.0])])
    t5 = nominal("q", ["u", "v"], [leaf([6.0, 0.0]), leaf([0.0, 4.0])])
    root = nominal("r", ["s", "t"], [t4, t5])
    assert root.counts == [53.0, 8.0]
    stats = prune_pessimistic(root)
    assert t4.is_leaf and not t5.is_leaf and not root.is_leaf
    assert stats.pruned == 1 and stats.leaves_after == 3


# -- reduced-error pruning ---------------------------------------------------------------------
def _golf_tree() -> tuple[Any, Node, DuckDBEngine]:
    engine = DuckDBEngine()
    data = describe(read_csv(GOLF), engine, "play")
    root, _ = grow(data, GrowOptions())
    return data, root, engine


def _paths(node: Node, path: tuple[int, ...] = ()) -> Iterator[tuple[int, ...]]:
    yield path
    for i, child in enumerate(node.children):
        yield from _paths(child, (*path, i))


def test_reduced_error_keeps_a_tree_the_validation_rows_confirm() -> None:
    data, root, engine = _golf_tree()
    before = copy.deepcopy(root)
    queries = engine.stats.queries
    stats = prune_reduced_error(root, data, read_csv(GOLF))
    depth = max(len(path) for path in _paths(root))
    # per tree level: one grouped count, and one partition below all but the last level
    assert stats.queries == engine.stats.queries - queries == 2 * depth + 1
    assert stats.pruned == 0
    assert root.to_dict() == before.to_dict()
    engine.cleanup()


def test_reduced_error_prunes_what_the_validation_rows_contradict() -> None:
    data, root, engine = _golf_tree()
    validation = read_csv(GOLF)
    validation["play"] = "yes"  # every validation row says yes: no test earns its keep
    stats = prune(root, data, "reduced-error", validation=validation)
    assert root.is_leaf and root.counts == [5.0, 9.0]  # training counts are kept
    assert stats.leaves_after == 1
    engine.cleanup()


def test_reduced_error_refuses_a_validation_source_without_a_feature() -> None:
    frame = read_csv(GOLF)
    with pytest.raises(DataError, match=r"the validation source lacks columns the training "
                                        r"source has: \['windy'\]"):
        sqltree.train(frame, target="play", pruning="reduced-error",
                      validation=frame.drop(columns="windy"))


def test_reduced_error_refuses_a_validation_target_of_another_type() -> None:
    frame = read_csv(GOLF)
    with pytest.raises(DataError, match="target 'play' was text in training but is number"):
        sqltree.train(frame, target="play", pruning="reduced-error",
                      validation=frame.assign(play=1))


def test_reduced_error_routes_unknown_values_by_shares() -> None:
    engine = DuckDBEngine()
    frame = read_csv(GOLF_NUMERIC)
    data = describe(frame, engine, "play")
    root, _ = grow(data, GrowOptions())
    validation = frame.copy()
    validation["humidity"] = None  # every validation row is unknown at the humidity test
    router = _Router.open(data, validation)
    counts = route_counts(router, [], root, recompute_shares=False)
    router.close()
    assert sum(counts[id(root)]) == pytest.approx(len(frame))
    for node in root.walk():  # weight is conserved down every test
        if not node.is_leaf:
            below = sum(sum(counts.get(id(c), [0.0])) for c in node.children)
            assert below == pytest.approx(sum(counts.get(id(node), [0.0])))
    engine.cleanup()


@pytest.mark.parametrize(
    "dialect", ["duckdb", "postgres", "spark", "snowflake", "bigquery", "tsql"]
)
def test_recount_sql_renders_for_every_dialect(
    labor: tuple[pd.DataFrame, str, Any, Node], dialect: str
) -> None:
    """The raising recount is plain SQL: joins with small tables, CASE, GROUP BY (the training
    engines and the warehouses). Each statement reads back in its dialect with the same
    tables, joins, CASE expressions, GROUP BYs and output columns."""
    import sqlglot
    from sqlglot.errors import ErrorLevel

    from sqltree import queries

    def shape(query: exp.Expression) -> tuple:
        return (
            sorted(t.name for t in query.find_all(exp.Table)),
            len(list(query.find_all(exp.Join))),
            len(list(query.find_all(exp.Case))),
            len(list(query.find_all(exp.Group))),
            len(query.selects),
        )

    _, _, data, root = labor
    level = exp.to_table("encoded_rows")
    tests = [(0, data.feature(root.split.feature).index, root.split.threshold)]
    routes = [(0, 0, 1, 1.0), (0, queries.UNKNOWN_KEY, 1, 0.5)]
    for query in (
        queries.build_level0(data),
        queries.build_keyed_counts(level, data.features, tests, len(data.classes),
                                   training_weight_bits(data)),
        queries.build_partition(level, data.features, tests, routes),
    ):
        sql = query.sql(dialect=dialect, unsupported_level=ErrorLevel.RAISE)
        assert shape(sqlglot.parse_one(sql, read=dialect)) == shape(query), sql


def test_rounds_give_j48s_one_at_a_time_result(labor: tuple[pd.DataFrame, str, Any, Node]) -> None:
    """Deciding nodes with disjoint subtrees together changes nothing but the statement count."""
    _, _, data, grown = labor
    one, rounds = copy.deepcopy(grown), copy.deepcopy(grown)
    s1 = prune_c45(one, data, batch=False)
    s2 = prune_c45(rounds, data)
    assert one.to_dict() == rounds.to_dict()
    assert (s1.raised, s1.pruned) == (s2.raised, s2.pruned)


def test_recount_matches_the_reference(labor: tuple[pd.DataFrame, str, Any, Node]) -> None:
    """Hypothetical raising everywhere, every (node, internal child) at once as in a round."""
    frame, target, data, root = labor
    rows = frame.to_dict("records")
    at_node = {}

    def collect(node: Node, weighted: list, path: list) -> None:
        at_node[id(node)] = (weighted, path)
        for i, child in enumerate(node.children):
            keep = []
            for row, w in weighted:
                b = node.split.branch_of(row.get(node.split.feature))
                if b is None:
                    keep.append((row, w * node.shares[i]))
                elif b == i:
                    keep.append((row, w))
            collect(child, keep, [*path, (node, i)])

    collect(root, [(r, 1.0) for r in rows], [])
    router = _Router.open(data)
    # entries of one round head disjoint subtrees: the highest nodes with an internal first child
    entries, heads = [], []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_leaf:
            continue
        if not node.children[0].is_leaf:
            entries.append((at_node[id(node)][1], node.children[0]))
            heads.append(node)
        else:
            stack.extend(node.children)
    assert entries
    got = recount_raised(router, entries)
    for (_, child), node in zip(entries, heads):
        expected = _reference_weighted(child, at_node[id(node)][0], target, data.classes)
        for n in child.walk():
            assert got.get(id(n), [0.0] * 2) == pytest.approx(expected[id(n)], abs=1e-9)
    router.close()


def _heads(root: Node) -> list[tuple[list[tuple[Node, int]], Node]]:
    """(path, largest branch) of the highest nodes whose largest branch is internal: disjoint
    structures, as in a round of subtree raising."""
    entries = []
    stack: list[tuple[Node, list[tuple[Node, int]]]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        if node.is_leaf:
            continue
        largest = max(range(len(node.children)), key=lambda i: node.children[i].weight)
        if not node.children[largest].is_leaf:
            entries.append((path, node.children[largest]))
        else:
            stack.extend((c, [*path, (node, i)]) for i, c in enumerate(node.children))
    return entries


def test_known_counts_bound_the_recount_from_below(
    labor: tuple[pd.DataFrame, str, Any, Node],
) -> None:
    """The rows known at every test reach each leaf of a raised branch with their whole
    weight: no more than the recount, class by class, where values are unknown (labor), and
    all of it where none is."""
    _, _, data, root = labor
    complete = noisy_frame().dropna().reset_index(drop=True)
    engine = DuckDBEngine()
    complete_data = describe(complete, engine, "y")
    complete_root, _ = grow(complete_data, GrowOptions())
    below = 0
    for dataset, tree in ((data, root), (complete_data, complete_root)):
        entries = _heads(tree)
        router = _Router.open(dataset)
        known, recounted = known_counts(router, entries), recount_raised(router, entries)
        router.close()
        assert entries
        for _, branch in entries:
            for leaf in branch.leaves():
                low, exact = known[id(leaf)], recounted.get(id(leaf), [0.0] * len(known[id(leaf)]))
                if dataset is complete_data:
                    assert low == pytest.approx(exact, abs=1e-9)
                else:
                    assert all(a <= b + 1e-9 for a, b in zip(low, exact, strict=True))
                    below += sum(low) < sum(exact) - 1e-9
    engine.cleanup()
    assert below > 0


def test_unknown_branch_takes_unknown_rows_whole() -> None:
    """Trees grown with missing="majority" (or CART's) send unknown values down one branch."""
    frame = pd.DataFrame(
        {"a": ["x", "x", "y", None, None, "y"], "c": ["p", "p", "q", "p", "q", "q"]}
    )
    engine = DuckDBEngine()
    data = describe(frame, engine, "c")
    root = nominal("a", ["x", "y"], [leaf([2.0, 0.0]), leaf([1.0, 3.0])])
    root.unknown_branch = 1
    router = _Router.open(data, frame, materialize=False)
    counts = route_counts(router, [], root, recompute_shares=False)
    assert counts[id(root.children[0])] == [2.0, 0.0]
    assert counts[id(root.children[1])] == [1.0, 3.0]
    below = nominal("a", ["x", "y"], [leaf([2.0, 0.0]), leaf([1.0, 3.0])])
    below.unknown_branch = 0
    counts = route_counts(router, [(root, 1)], below, recompute_shares=True)
    assert counts[id(below)] == [1.0, 3.0]  # the rows at root's branch 1
    assert counts[id(below.children[0])] == [1.0, 1.0]  # its unknown rows, whole
    engine.cleanup()


def test_value_no_branch_lists_is_unknown_at_the_test() -> None:
    frame = pd.DataFrame({"a": ["x", "y", "z", "z"], "c": ["p", "q", "p", "q"]})
    engine = DuckDBEngine()
    data = describe(frame, engine, "c")
    root = nominal("a", ["x", "y"], [leaf([1.0, 0.0]), leaf([0.0, 1.0])])
    root.shares = [0.25, 0.75]
    router = _Router.open(data, frame, materialize=False)
    counts = route_counts(router, [], root, recompute_shares=False)
    assert counts[id(root.children[0])] == pytest.approx([1.25, 0.25])
    assert counts[id(root.children[1])] == pytest.approx([0.75, 1.75])
    counts = route_counts(router, [], root, recompute_shares=True)  # known x: 1, y: 1
    assert counts[id(root.children[0])] == pytest.approx([1.5, 0.5])
    engine.cleanup()


def _same(got: Any, want: Any, path: str = "root") -> None:
    if isinstance(want, dict):
        assert sorted(got) == sorted(want), path
        for key in want:
            _same(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{path}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), path
    else:
        assert got == want, path


def test_pruning_is_the_same_on_every_engine(
    engine_factory: Any, labor: tuple[pd.DataFrame, str, Any, Node], monkeypatch
) -> None:
    """Subtree raising (recounts in the engine, read from it once their rows are few, or the
    training rows read once, in batches of 7 on the engines that fetch rows) and
    reduced-error pruning (validation rows counted in the engine) give DuckDB's tree, counts
    and shares on PostgreSQL and Spark. Spark answers these small statements slowly (about
    100 s here, marked slow with Spark)."""
    frame, target, reference_data, grown = labor
    engine, source = engine_factory(frame, "labor")
    data = describe(source, engine, target)
    root = grown  # growth on every engine is test_engines' business; pruning is ours

    want, got = copy.deepcopy(grown), copy.deepcopy(root)
    prune_c45(want, reference_data, batch=False)
    stats = prune_c45(got, data)
    assert stats.raised == 1
    _same(got.to_dict(), want.to_dict())
    got = copy.deepcopy(root)
    with monkeypatch.context() as patch:
        _recount_in_memory(patch, data.n_rows * len(data.features) - 1)
        assert prune_c45(got, data, rows=RowsInMemory(data)).queries < stats.queries
    _same(got.to_dict(), want.to_dict())
    got = copy.deepcopy(root)
    with monkeypatch.context() as patch:  # the rows read once, a few at a time where fetched
        patch.setattr(type(engine), "FRAME_ROWS", 7)
        assert prune_c45(got, data, rows=RowsInMemory(data)).queries == 1
    _same(got.to_dict(), want.to_dict())

    # Reduced-error pruning against a query over the engine's table (the rows with a first-year
    # wage increase above 3.5), against the same rows as a DataFrame on DuckDB.
    column = "wage-increase-first-year"
    validation = exp.select("*").from_(source.copy()).where(
        exp.GT(this=exp.column(column, quoted=True), expression=exp.Literal.number(3.5))
    )
    want, got = copy.deepcopy(grown), copy.deepcopy(root)
    rows = frame[frame[column] > 3.5].reset_index(drop=True)
    assert 0 < len(rows) < len(frame)
    want_stats = prune_reduced_error(want, reference_data, rows)
    got_stats = prune_reduced_error(got, data, validation)
    assert got_stats.pruned == want_stats.pruned > 0
    _same(got.to_dict(), want.to_dict())


# -- the recount's plan ------------------------------------------------------------------------
def noisy_frame(rows: int = 300, seed: int = 2) -> pd.DataFrame:
    """Random rows with a deep grown tree: two continuous and two nominal features, a label
    that depends on them with noise, and unknown values in every feature."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 2)).round(2)
    a = rng.choice(["p", "q", "r", "s"], size=rows)
    b = rng.choice(["u", "v", "w"], size=rows)
    signal = x[:, 0] + (a == "q") - x[:, 1] * (b == "w")
    y = np.where(rng.random(rows) < 0.25, rng.choice(["k", "l", "m"], size=rows),
                 np.where(signal > 0.5, "k", np.where(signal > -0.5, "l", "m")))
    frame = pd.DataFrame({"x0": x[:, 0], "x1": x[:, 1], "a": a, "b": b, "y": y})
    for column in ("x0", "x1", "a", "b"):
        frame.loc[rng.random(rows) < 0.05, column] = None
    return frame


def test_recount_above_the_structures_in_one_statement_changes_nothing(monkeypatch) -> None:
    """On DuckDB the levels above the raised structures run as one statement, and a bound
    from the rows known at every test settles most nodes without a recount; stored level by
    level (PostgreSQL, Spark), every node recounted, the same tree, with the counts of a
    Python routing of every row (test_rounds_give_j48s_one_at_a_time_result compares the
    rounds with J48's order)."""
    frame = noisy_frame()
    engine = DuckDBEngine()
    data = describe(frame, engine, "y")
    grown, _ = grow(data, GrowOptions())
    chained, stored = copy.deepcopy(grown), copy.deepcopy(grown)
    heard: list = []
    with progress.listening(heard.append):
        by_chain = prune_c45(chained, data)
    with monkeypatch.context() as patch:
        patch.setattr(engine, "VECTORIZED", False)
        by_level = prune_c45(stored, data)
    engine.cleanup()
    assert by_chain.raised > 0 and by_chain.leaves_after < by_chain.leaves_before
    assert chained.to_dict() == stored.to_dict()
    assert by_chain.queries < by_level.queries
    # the rounds' nodes that the known rows' bound settles are not recounted; raises are
    settled = sum(e.details.get("settled_by_bound", 0) for e in heard if e.phase == "prune")
    assert settled > 0
    assert_counts_exact(chained, frame, "y", data.classes)
    # a recounted node that no row reaches has counts 0.0, so the model file keeps floats
    assert all(type(c) is float for node in chained.walk() for c in node.counts)


def test_recounts_route_rows_down_a_path_hundreds_of_levels_deep() -> None:
    """A chain 400 tests deep (a stripe per value of one feature): the statements that route
    rows down its path stay within what sqlglot renders, and count what a walk of the rows
    counts."""
    depth = 400
    frame = pd.DataFrame({"a": [float(i) for i in range(depth + 2)] * 2,
                          "y": ["k"] * (depth + 2) + ["l"] * (depth + 2)})
    engine = DuckDBEngine()
    data = describe(frame, engine, "y")

    def leaf(weights: list[float]) -> Node:
        return Node(counts=weights, proba=[w / sum(weights) for w in weights])

    # node i tests a <= i: its left leaf holds the value i, the chain goes on to the right
    tail = Node(counts=[2.0, 2.0], proba=[0.5, 0.5], split=Split("a", CONTINUOUS, depth + 0.5),
                children=[leaf([1.0, 1.0]), leaf([1.0, 1.0])], shares=[0.5, 0.5])
    path = []
    chain = tail
    for i in reversed(range(depth)):
        rows = 2.0 * (depth + 2 - i)
        chain = Node(counts=[rows / 2, rows / 2], proba=[0.5, 0.5],
                     split=Split("a", CONTINUOUS, i + 0.5),
                     children=[leaf([1.0, 1.0]), chain], shares=[0.5, 0.5])
    node = chain
    while node is not tail:
        path.append((node, 1))
        node = node.children[1]
    router = _Router.open(data)
    entries = [(path, tail)]
    known, recounted = known_counts(router, entries), recount_raised(router, entries)
    router.close()
    engine.cleanup()
    for counts in (known, recounted):
        assert [counts[id(c)] for c in tail.children] == [[1.0, 1.0], [1.0, 1.0]]


def _recount_in_memory(patch: pytest.MonkeyPatch, cells: int) -> None:
    """Recounts go on in numpy from a level of at most ``cells`` (0: never), the training
    rows never read whole before pruning (``READ_FOR_PRUNING_MAX_CELLS``)."""
    patch.setattr(memory_recount, "READ_FOR_PRUNING_MAX_CELLS", 0)
    patch.setattr(memory_recount, "RECOUNT_MEMORY_MAX_CELLS", cells)


def _labor() -> tuple[pd.DataFrame, str]:
    arff = read_arff(example("labor"))
    return arff.frame, arff.target


@pytest.mark.parametrize("plan", ["tables", "select"])
@pytest.mark.parametrize("table", [lambda: (noisy_frame(), "y"), _labor], ids=["noisy", "labor"])
def test_a_recount_goes_on_in_memory_once_its_rows_are_few(monkeypatch, table, plan) -> None:
    """From the first level whose rows are few, a recount reads them once and goes on in
    numpy: the same tree, every count and share to the last bit (unknown values in every
    feature: fractional weights), in fewer statements; on the select plan the level read is
    the statement's chain of CTEs."""
    frame, target = table()
    engine = DuckDBEngine()
    engine.use_plan(plan)
    data = describe(frame, engine, target)
    grown, _ = grow(data, GrowOptions())
    in_engine, in_memory = copy.deepcopy(grown), copy.deepcopy(grown)
    reads = []
    with monkeypatch.context() as patch:
        _recount_in_memory(patch, 0)  # never
        by_statements = prune_c45(in_engine, data, rows=RowsInMemory(data))
        # the training rows are many, any fewer are few: from the first counted level on
        _recount_in_memory(patch, data.n_rows * len(data.features) - 1)
        go_on = RowsInMemory.go_on
        patch.setattr(RowsInMemory, "go_on",
                      lambda self, *a: reads.append(a[3]) or go_on(self, *a))
        by_reads = prune_c45(in_memory, data, rows=RowsInMemory(data))
    engine.cleanup()
    assert by_statements.raised > 0 and len(reads) > 0
    assert in_memory.to_dict() == in_engine.to_dict()
    assert by_reads.queries < by_statements.queries
    assert_counts_exact(in_memory, frame, target, data.classes)


def chain_frame(rows: int = 700, stripe: int = 40, seed: int = 0) -> pd.DataFrame:
    """Rows labelled in stripes of one feature, with noise: C4.5 grows a chain, a stripe per
    level (18 levels here), and raises branches when pruning it."""
    import numpy as np

    rng = np.random.default_rng(seed)
    a = rng.permutation(rows).astype(float)
    y = np.where(((a // stripe) % 2 == 0) & (rng.random(rows) > 0.1), "yes", "no")
    frame = pd.DataFrame({"a": a, "c": rng.integers(0, 7, rows).astype(str), "y": y})
    frame.loc[rng.random(rows) < 0.03, "c"] = None
    return frame


@pytest.mark.parametrize(
    "table",
    [lambda: (noisy_frame(), "y"), _labor, lambda: (chain_frame(), "y")],
    ids=["noisy", "labor", "chain"],
)
def test_pruning_reads_the_rows_once(monkeypatch, table) -> None:
    """Pruning reads the training rows once and bounds and recounts every round in numpy
    (``READ_FOR_PRUNING_MAX_CELLS``): the same tree as with a statement per level of every
    recount and bound, every count and share to the last bit. The chain is 18 levels deep:
    in the engine, a statement per level of each path and two per level of each raised
    branch, every round."""
    frame, target = table()
    engine = DuckDBEngine()
    data = describe(frame, engine, target)
    grown, _ = grow(data, GrowOptions())
    in_engine, in_memory = copy.deepcopy(grown), copy.deepcopy(grown)
    with monkeypatch.context() as patch:
        _recount_in_memory(patch, 0)  # never
        by_statements = prune_c45(in_engine, data, rows=RowsInMemory(data))
    by_reads = prune_c45(in_memory, data, rows=RowsInMemory(data))
    engine.cleanup()
    assert by_statements.raised > 0 and by_statements.queries > 1
    assert by_reads.queries == 1  # the rows, read once
    assert in_memory.to_dict() == in_engine.to_dict()
    assert_counts_exact(in_memory, frame, target, data.classes)


@pytest.mark.parametrize("every", [1, 3])
@pytest.mark.parametrize(("table", "falls_back"), [(noisy_frame, False), (chain_frame, True)],
                         ids=["noisy", "chain"])
def test_recounts_start_from_snapshots_of_the_rows(monkeypatch, table, falls_back: bool,
                                                   every: int) -> None:
    """Bounds and recounts in memory start from the rows kept at every ``SNAPSHOT_EVERY``-th
    depth, not from the root: the same tree as with a statement per level, every count and
    share to the last bit, in rounds and in J48's one-at-a-time order, with unknown values on
    the paths (noisy). The chain's raised branches are pruned again below snapshots taken
    before the raise: their nodes moved up a depth, where the snapshots do not hold them
    (``_Snapshot.holds``), and start higher."""
    frame = table()
    engine = DuckDBEngine()
    data = describe(frame, engine, "y")
    grown, _ = grow(data, GrowOptions())
    want = copy.deepcopy(grown)
    with monkeypatch.context() as patch:
        _recount_in_memory(patch, 0)  # never
        assert prune_c45(want, data, rows=RowsInMemory(data)).raised > 0
    held: list[bool] = []
    holds = memory_recount._Snapshot.holds
    monkeypatch.setattr(memory_recount, "SNAPSHOT_EVERY", every)
    monkeypatch.setattr(memory_recount._Snapshot, "holds",
                        lambda self, *a: held.append(holds(self, *a)) or held[-1])
    for batch in (True, False):
        got, rows = copy.deepcopy(grown), RowsInMemory(data)
        assert rows.read_all_if_small()
        prune_c45(got, data, rows=rows, batch=batch)
        assert got.to_dict() == want.to_dict(), batch
        assert_counts_exact(got, frame, "y", data.classes)
        assert True in held and (False in held) == falls_back, batch
        held.clear()
    engine.cleanup()


def test_known_counts_in_memory_are_the_engines(
    labor: tuple[pd.DataFrame, str, Any, Node],
) -> None:
    """The bound counted in numpy (rows dropped at their leaf) is the engine's (rows carried
    to the last level), leaf by leaf, with unknown values on the paths and in the branches."""
    _, _, data, root = labor
    entries = _heads(root)
    router = _Router.open(data)
    in_engine = known_counts(router, entries)
    router.close()
    rows = RowsInMemory(data)
    assert rows.read_all_if_small()
    in_memory = known_counts(_Router.open(data, in_memory=rows), entries)
    assert entries and in_memory.keys() == in_engine.keys()
    for key, counts in in_engine.items():
        assert in_memory[key] == pytest.approx(counts, abs=1e-12)
