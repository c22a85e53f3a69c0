"""The slow path: C4.5's class probabilities in closed form, nested by about log2(leaves).

Only rows whose walk stopped at an unknown value need it (``build_slow_path`` guards it).
Each class's probability is a sum over leaves of the leaf's probability times, along its path,
1 for a test the row passes, 0 for one it fails, and the branch's share where the value is
unknown; ``build_closed_form`` writes that sum along the paths of largest children, halving
each path's segments, and ``build_argmax`` picks the label as ``criteria.predicted_class``.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from ..criteria import PROBA_TIE
from ..tree import CONTINUOUS, NOMINAL, Node, Split
from .blocks import and_, cases, column, dnum, in_values, listed, literal
from .walk import Layout, branch_condition, other_branches, unknown_condition

# The closed form is a sum of products. Each part carries what it costs SQLite's parser, the
# tightest of the engines: an operand on the right of an operator holds 2 units of its stack
# while it is read, a parenthesis 1, a CASE about 5 for its THEN and 4 for its ELSE, against a
# stack of about 90. Runs of + and * are written with the costliest operand first, where it
# holds nothing, and at most CHAIN operands long, since every engine also bounds the depth of
# the expression tree a left-deep run builds (SQLite and DuckDB at 1,000).
CHAIN = 16
"""Most operands of one run of + or * before the run is cut into parenthesised groups."""

_CASE_COST = 8
"""What a CASE of flat conditions and literals costs SQLite's parser stack, about."""

GUARD_SIZE = 1024
"""Smallest sum (in nodes) that ``_times`` evaluates only where its factors are not 0."""

GUARD_COST = 30
"""Most SQLite parser stack a guarded sum may cost: each guard nests a CASE (about 5 units).
Guards are placed from the leaves up, so once the guards below have spent it the sums nearest
the root, the largest, stay unguarded (scoring leaves SQLite at least 40 units of headroom)."""


@dataclass
class _Part:
    """An expression, what it costs SQLite's parser stack, and about how many nodes it has."""

    e: exp.Expression
    cost: int
    size: int
    value: float | None = None
    """The number, for a constant."""

    def copy(self) -> _Part:
        return _Part(self.e.copy(), self.cost, self.size, self.value)


_Term = list[_Part]
"""A product of factors, each an operand that needs no parentheses inside a product."""

_Sum = list[_Term]
"""A sum of products; the empty sum is 0."""


def _run(parts: list[_Part], op: type[exp.Binary]) -> _Part:
    """``a op b op ...``, left-deep, of parts sorted by cost, the costliest first."""
    e = parts[0].e
    for p in parts[1:]:
        e = op(this=e, expression=p.e)
    cost = parts[0].cost if len(parts) == 1 else max(parts[0].cost, 2 + parts[1].cost)
    return _Part(e, cost, sum(p.size for p in parts) + len(parts) - 1)


def _chain(parts: list[_Part], op: type[exp.Binary]) -> _Part:
    """All parts joined by ``op``, in runs of at most CHAIN operands."""
    parts = sorted(parts, key=lambda p: -p.cost)
    while len(parts) > CHAIN:
        groups = [_run(parts[i:i + CHAIN], op) for i in range(0, len(parts), CHAIN)]
        parts = sorted((_Part(exp.Paren(this=g.e), g.cost + 1, g.size) for g in groups),
                       key=lambda p: -p.cost)
    return _run(parts, op)


def _sum_part(terms: _Sum) -> _Part:
    if not terms:
        return _constant(0.0)
    return _chain([_chain(t, exp.Mul) if t else _constant(1.0) for t in terms], exp.Add)


def _factors(terms: _Sum) -> _Term:
    """The sum as factors of a product: its own factors if it is a single product."""
    if len(terms) == 1:
        return terms[0]
    s = _sum_part(terms)
    return [_Part(exp.Paren(this=s.e), s.cost + 1, s.size)]


def _constant(x: float) -> _Part:
    x = x or 0.0  # not -0.0
    return _Part(dnum(x), 1, 1, x)


def _size(terms: _Sum) -> int:
    return sum(p.size for t in terms for p in t)


def _case_part(ifs: list[tuple[exp.Expression, _Part]], default: _Part) -> _Part:
    cost = max([_CASE_COST, 4 + default.cost, *(5 + v.cost for _, v in ifs)])
    size = 1 + default.size + sum(3 + v.size for _, v in ifs)
    return _Part(cases([(c, v.e) for c, v in ifs], default.e), cost, size)


Factor = _Part | float
"""A factor of the closed form: an expression, or a constant."""


def _share_factor(
    node: Node, branch: int, scale: float, table: str | None,
    test_unknown: Callable[[Node], exp.Expression],
) -> Factor:
    """How much of a row goes down ``branch``, times ``scale``: 1 for a known value that takes
    it, 0 for one that does not; for an unknown value the branch's share (fractional tests),
    or 1 if the test routes unknown values to the branch, else 0."""
    assert node.split is not None
    cond = branch_condition(node.split, branch, table)
    ifs: list[tuple[exp.Expression, float]] = []
    rest = 0.0
    if node.unknown_branch is None:
        if cond is not None:
            ifs.append((cond, 1.0))
        if node.shares[branch] > 0:
            ifs.append((test_unknown(node), node.shares[branch]))
    elif node.unknown_branch != branch:
        if cond is not None:
            ifs.append((cond, 1.0))
    else:  # everything but the known values of the other branches
        other = other_branches(node.split, branch, table)
        if other is not None:
            ifs.append((other, 0.0))
        rest = 1.0
    if not ifs:
        return rest * scale
    return _case_part([(c, _constant(x * scale)) for c, x in ifs], _constant(rest * scale))


def _times(terms: _Sum, factors: Iterable[Factor]) -> _Sum:
    """The sum times the factors (the empty sum where a factor is 0).

    A sum of ``GUARD_SIZE`` nodes or more is evaluated only where no factor is 0, ``CASE WHEN
    f <> 0 THEN sum * f END``, while that nesting costs at most ``GUARD_COST``. A row's factors
    are 0 on every branch its known values do not take, so the row computes the sums of the
    branches it reaches rather than the whole tree's, and an engine that evaluates a CASE a
    batch of rows at a time skips a sum that no row of the batch reaches.
    """
    if not terms:
        return terms
    extra: _Term = []
    for f in factors:
        if isinstance(f, float):
            if f == 0:
                return []
            if f != 1:
                extra.append(_constant(f))
        else:
            extra.append(f)
    if not extra:
        return terms
    product = [_factors(terms) + extra]
    tests = [f for f in extra if f.value is None]
    if not tests or _size(terms) < GUARD_SIZE:
        return product
    guard = [_Part(exp.NEQ(this=f.e.copy(), expression=dnum(0.0)), f.cost + 2, f.size + 2)
             for f in tests]
    guarded = _case_part([(_chain(guard, exp.And).e, _sum_part(product))], _constant(0.0))
    return product if guarded.cost > GUARD_COST else [[guarded]]


def _branch_terms(
    node: Node, branch: int, sub: _Sum | None, value: float, table: str | None,
    test_unknown: Callable[[Node], exp.Expression],
) -> _Sum:
    """A child's closed form times the factor of its branch (a leaf's value folds into it)."""
    child = node.children[branch]
    if child.is_leaf:
        if value == 0:
            return []
        f = _share_factor(node, branch, value, table, test_unknown)
        return _times([[]], [f]) if isinstance(f, float) else [[f]]
    if not sub:
        return []
    return _times(sub, [_share_factor(node, branch, 1.0, table, test_unknown)])


def _dispatch(
    node: Node, heavy: int, subs: dict[int, _Sum], values: dict[int, float], table: str | None
) -> _Sum:
    """The other branches of a fractional nominal test as one CASE: each known value to its
    branch's closed form, 0 for the largest branch's values, the shares' sum for the rest.

    Each branch is written twice, but the values once, where the terms of ``_branch_terms``
    would list the test's whole domain once per branch to recognise an unknown value.
    """
    split = node.split
    assert split is not None and split.groups is not None
    ifs: list[tuple[exp.Expression, _Part]] = []
    spread: _Sum = []
    constant = 0.0  # leaves' shares add up here, in branch order as Node.predict_proba does
    zero = list(split.groups[heavy])
    for i, child in enumerate(node.children):
        if i == heavy:
            continue
        sub = [[_constant(values[i])]] if child.is_leaf and values[i] != 0 else subs.get(i)
        if not sub:
            zero.extend(split.groups[i])
            continue
        cond = branch_condition(split, i, table)
        if cond is not None:
            ifs.append((cond, _sum_part([[p.copy() for p in t] for t in sub])))
        if node.shares[i] > 0:
            if child.is_leaf:
                constant += node.shares[i] * values[i]
            else:
                spread.append([*_factors(sub), _constant(node.shares[i])])
    if constant != 0:
        spread.insert(0, [_constant(constant)])
    known_zero = in_values(column(split.feature, table), zero)
    if known_zero is not None:
        ifs.append((known_zero, _constant(0.0)))
    if not ifs:  # no branch lists a value: every value is unknown
        return spread
    return [[_case_part(ifs, _sum_part(spread))]]


def _passes(
    steps: Sequence[tuple[Node, int]], table: str | None,
    test_unknown: Callable[[Node], exp.Expression], scale: float = 1.0,
) -> list[Factor]:
    """The product of the factors that pass rows down the given (node, branch) steps.

    Steps that test the same feature (nominal ones: with the same listed values) share one
    factor: a known value passes all of them when it lies in every branch (an interval, or
    the values the branches have in common), and an unknown value is unknown at each, so it
    passes with the product of their coefficients. A path of a thousand tests of one feature
    then multiplies by one factor instead of a thousand. ``scale`` multiplies the first
    factor's numbers (a leaf's value folds into them).
    """
    groups: dict[tuple[Any, ...], list[tuple[Node, int]]] = {}
    for node, branch in steps:
        assert node.split is not None
        split = node.split
        key = ((split.feature, CONTINUOUS) if split.kind == CONTINUOUS
               else (split.feature, NOMINAL, tuple(listed(split))))
        groups.setdefault(key, []).append((node, branch))
    out: list[Factor] = []
    for group in groups.values():
        if out:
            scale = 1.0
        if len(group) == 1:
            out.append(_share_factor(*group[0], scale, table, test_unknown))
            continue
        first = group[0][0]
        assert first.split is not None
        unknown = 1.0
        for node, branch in group:
            if node.unknown_branch is None:
                unknown *= node.shares[branch]
            elif node.unknown_branch != branch:
                unknown = 0.0
        ifs: list[tuple[exp.Expression, float]] = []
        known = _all_branches(group, table)
        if known is not None:
            ifs.append((known, 1.0))
        if unknown > 0:
            ifs.append((test_unknown(first), unknown))
        out.append(_case_part([(c, _constant(x * scale)) for c, x in ifs], _constant(0.0))
                   if ifs else 0.0)
    return out


def _all_branches(steps: list[tuple[Node, int]], table: str | None) -> exp.Expression | None:
    """True where a known value takes every step's branch; None where none does."""
    split = steps[0][0].split
    assert split is not None
    c = column(split.feature, table)
    if split.kind != CONTINUOUS:
        common: set[Any] | None = None
        for node, branch in steps:
            assert node.split is not None and node.split.groups is not None
            here = set(node.split.groups[branch])
            common = here if common is None else common & here
        return in_values(c, [v for v in listed(split) if v in (common or set())])
    low = max((n.split.threshold for n, b in steps if b == 1 and n.split
               and n.split.threshold is not None), default=None)
    high = min((n.split.threshold for n, b in steps if b == 0 and n.split
                and n.split.threshold is not None), default=None)
    if low is not None and high is not None:
        if low >= high:
            return None
        return exp.And(this=exp.GT(this=c, expression=dnum(low, double=False)),
                       expression=exp.LTE(this=column(split.feature, table),
                                          expression=dnum(high, double=False)))
    if low is not None:
        return exp.GT(this=c, expression=dnum(low, double=False))
    assert high is not None
    return exp.LTE(this=c, expression=dnum(high, double=False))


def _path_sum(
    items: list[tuple[_Sum, tuple[Node, int] | None]], weights: list[int],
    table: str | None, test_unknown: Callable[[Node], exp.Expression],
) -> _Sum:
    """The closed form of a path of largest children, from each node's terms for its other
    branches and its step to its largest branch (the last item is the leaf's value).

    ``P = side_0 + g_0 * (side_1 + g_1 * (side_2 + ...))``, written by halving: a segment's sum
    is its first half's plus its second half's times the first half's factors. Halves are cut
    at the middle of the leaves they hold, so that parentheses nest about log2(leaves) deep
    over all the paths a row's closed form crosses, not once per node.
    """
    bounds = list(itertools.accumulate(weights, initial=0))

    def steps(a: int, b: int) -> list[tuple[Node, int]]:
        out = []
        for t in range(a, b):
            step = items[t][1]
            assert step is not None
            out.append(step)
        return out

    def segment(a: int, b: int) -> _Sum:
        if b - a == 1:
            return items[a][0]
        middle = (bounds[a] + bounds[b]) / 2
        m = min(max(bisect.bisect_left(bounds, middle, a + 1, b), a + 1), b - 1)
        if m > a + 1 and middle - bounds[m - 1] < bounds[m] - middle:
            m -= 1
        later = segment(m, b)
        if not later:
            return segment(a, m)
        if len(later) == 1 and len(later[0]) == 1 and later[0][0].value is not None:
            # A constant (a leaf's value) folds into the factors' numbers.
            return segment(a, m) + _times([[]], _passes(
                steps(a, m), table, test_unknown, later[0][0].value))
        return segment(a, m) + _times(later, _passes(steps(a, m), table, test_unknown))

    return segment(0, len(items))


def _closed_form_sum(
    root: Node,
    value: Callable[[Node], float],
    table: str | None,
    test_unknown: Callable[[Node], exp.Expression],
    dispatch: bool,
) -> _Sum:
    """The closed form of every path of largest children, from the bottom up."""
    lay = Layout.of(root)
    done: dict[int, _Sum] = {}
    heads = [root]
    for n in lay.nodes:
        if not n.is_leaf:
            heavy = lay.heavy(n)  # once per node: it looks at every child
            heads += [c for i, c in enumerate(n.children) if i != heavy and not c.is_leaf]
    for head in sorted(heads, key=lambda n: -lay.pre[id(n)]):  # a head after those below it
        items: list[tuple[_Sum, tuple[Node, int] | None]] = []
        weights: list[int] = []
        node = head
        while node.split is not None:
            heavy = lay.heavy(node)
            others = [i for i in range(len(node.children)) if i != heavy]
            subs = {i: done.pop(id(node.children[i]), []) for i in others}
            values = {i: value(node.children[i]) for i in others if node.children[i].is_leaf}
            side: _Sum = []
            if dispatch and node.unknown_branch is None and node.split.kind != CONTINUOUS:
                m = len(node.children)
                inner = sum(_size(subs[i]) + (1 if i in values else 0) for i in others)
                if 2 * inner + 6 * len(others) + m < inner + len(others) * (10 + m):
                    side = _dispatch(node, heavy, subs, values, table)
                    others = []
            for i in others:
                side += _branch_terms(node, i, subs[i], values.get(i, 0.0), table, test_unknown)
            items.append((side, (node, heavy)))
            weights.append(1 + sum(lay.size[id(node.children[i])] for i in range(
                len(node.children)) if i != heavy))
            node = node.children[heavy]
        leaf = value(node)
        items.append(([[_constant(leaf)]] if leaf != 0 else [], None))
        weights.append(1)
        done[id(head)] = _path_sum(items, weights, table, test_unknown)
    return done[id(root)]


def build_closed_form(
    root: Node,
    value: Callable[[Node], float],
    table: str | None = None,
    unknown: Callable[[Node], exp.Expression] | None = None,
) -> exp.Expression | None:
    """``sum over leaves of value(leaf) * weight(row, leaf)``, C4.5's weights; None if 0.

    ``P(node) = sum over branches of factor(branch) * P(child)``, the factor 1 for the branch a
    known value takes, 0 for the others, and the branch's share where the value is unknown.

    Each branch's factor tests whether the value is unknown; for a nominal test that lists its
    whole domain, so ``m`` branches name ``m * m`` values. Where that is more than the
    branches' own size, the test instead sends known values to their branch and sums the
    shares otherwise (``_dispatch``), which writes each branch twice. ``unknown(node)`` may
    replace the test for an unknown value (a query can compute it once per row); the factors
    then stay.
    """
    test_unknown = unknown
    if test_unknown is None:
        def test_unknown(n: Node) -> exp.Expression:
            assert n.split is not None
            return unknown_condition(n.split, table)

    terms = _closed_form_sum(root, value, table, test_unknown, dispatch=unknown is None)
    return _sum_part(terms).e if terms else None


def build_probabilities(
    root: Node, n_classes: int, table: str | None = None,
    unknown: Callable[[Node], exp.Expression] | None = None,
) -> list[exp.Expression]:
    """Closed-form class probabilities, exact for any mix of known and unknown values."""
    return [
        build_closed_form(root, lambda n, c=c: n.proba[c], table, unknown) or dnum(0.0)
        for c in range(n_classes)
    ]


def build_argmax(
    probs: Sequence[Callable[[], exp.Expression]], labels: Sequence[exp.Expression]
) -> exp.Expression:
    """The first class whose probability is within ``PROBA_TIE`` of the largest: the rule of
    ``criteria.predicted_class``, in SQL.

    ``probs`` make a fresh expression per call (each is used more than once). Once the
    classes before ``i`` have failed, the largest is among ``i`` and later classes, so class
    ``i`` wins when it is within 1e-9 of the largest of the later ones.
    """
    ifs = []
    for i in range(len(labels) - 1):
        rest = [p() for p in probs[i + 1:]]
        best = rest[0] if len(rest) == 1 else exp.Greatest(this=rest[0], expressions=rest[1:])
        margin = exp.Sub(this=best, expression=dnum(PROBA_TIE))
        ifs.append((exp.GTE(this=probs[i](), expression=margin), labels[i]))
    return cases(ifs, labels[-1])


def build_closed_form_label(
    root: Node, classes: Sequence[Any], table: str | None = None
) -> exp.Expression:
    """The C4.5 label in closed form, for any row.

    Comparing classes needs each probability more than once; with few classes the pairwise
    differences ``P(i) - P(j)``, each in closed form once, make a smaller expression.
    """
    k = len(classes)
    labels = [literal(c) for c in classes]
    if k * (k - 1) // 2 <= 2 * k - 1:
        ifs = []
        for i in range(k - 1):
            conds = [
                exp.GTE(
                    this=build_closed_form(root, lambda n, i=i, j=j: n.proba[i] - n.proba[j],
                                           table) or dnum(0.0),
                    expression=dnum(-PROBA_TIE),
                )
                for j in range(i + 1, k)
            ]
            cond = conds[0]
            for c in conds[1:]:
                cond = and_(cond, c)
            ifs.append((cond, labels[i]))
        return cases(ifs, labels[-1])
    return build_argmax(
        [lambda c=c: build_closed_form(root, lambda n: n.proba[c], table) or dnum(0.0)
         for c in range(k)],
        labels,
    )


def build_slow_path(root: Node, closed: exp.Expression, table: str | None) -> exp.Expression:
    """``CASE WHEN <some value a fractional test reads is unknown> THEN closed END``.

    Only rows whose walk stopped need the closed form, and each of those has such a value. The
    CASE also keeps DuckDB's optimizer out of the closed form: it gathers the repeated
    subexpressions of a projection that are sure to be evaluated, which excludes those inside
    a CASE's branches, and gathering the closed form's hundreds took minutes on a 4,000-leaf
    tree.
    """
    tests: dict[tuple[Any, ...], Split] = {}
    for n in root.walk():
        if n.split is not None and n.unknown_branch is None:
            split = n.split
            key = ((split.feature,) if split.kind == CONTINUOUS
                   else (split.feature, tuple(listed(split))))
            tests.setdefault(key, split)
    unknown = [_Part(unknown_condition(s, table), 1, 1) for s in tests.values()]
    return cases([(_chain(unknown, exp.Or).e, closed)], None)
