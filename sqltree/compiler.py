"""Compile a tree into SQL: the predicted class, the leaf, class probabilities.

Scoring takes a fast path and, for a few rows, a slow path.

The fast path is a nested CASE that follows a row's known values to its leaf. Its nesting grows
with log2(leaves), not with the tree's depth: at every test the children other than the largest
become WHENs, and the largest child's own tests are folded into the same CASE as further WHENs
(a row that fails every WHEN of a test belongs to the largest child). Engines limit nesting
(SQLite about 20 CASEs, Spark about 100), and sqlglot itself recurses per level, so this keeps
deep trees compilable while each row still evaluates only the tests on its path. Where a C4.5
test meets an unknown value (NULL, or a nominal value no branch lists) the walk stops: the CASE
gives NULL there, or, in a query, a code naming the test (``stop_code``).

Only rows that stopped take the slow path, which classifies them as C4.5 does: each class's
probability is a sum over leaves of the leaf's probability times, along its path, 1 for a test
the row passes, 0 for one it fails, and the branch's share of training weight where the value
is unknown; the label is the most probable class (ties, within 1e-9, to the first class).
A single expression computes that sum in closed form (``build_closed_form``). A query can
instead copy each stopped row once per branch, weighted by the branch's share, let every copy
walk on from its branch (``build_case`` with ``entry``), and add up the leaves the copies reach
(``build_expansion_query``): a walk per copy rather than a sum over the whole tree per row.
"""

from __future__ import annotations

import functools
import gc
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from sqlglot import exp

from .tree import CONTINUOUS, Node, Split

PROBA_TIE = 1e-9

P = ParamSpec("P")
R = TypeVar("R")

PREFIX = "__sqltree_"
"""Prefix of the helper columns and relations scoring queries add."""


# Literals are built directly: a large tree's SQL holds tens of thousands, and sqlglot's
# Literal.number and Literal.string check and convert each one.
def _number(text: str) -> exp.Expression:
    if text.startswith("-"):
        return exp.Neg(this=exp.Literal(this=text[1:], is_string=False))
    return exp.Literal(this=text, is_string=False)


def dnum(x: float, *, double: bool = True) -> exp.Expression:
    """A float literal, exact; typed DOUBLE by every engine unless ``double=False`` (see
    ``queries.num``)."""
    x = float(x)
    if math.isinf(x) or math.isnan(x):
        raise ValueError(f"{x} cannot be written as a SQL literal")
    text = repr(x)
    return _number(text + "e0" if double and "e" not in text else text)


def _int(i: int) -> exp.Expression:
    return _number(str(i))


def literal(value: Any) -> exp.Expression:
    """A class label or nominal value (see ``queries.literal``)."""
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int):
        return _int(value)
    if isinstance(value, float):
        return dnum(value)
    return exp.Literal(this=str(value), is_string=True)


def _values(alias: str, columns: Sequence[str], rows: Sequence[Sequence[float]],
            types: Sequence[str]) -> exp.Subquery:
    """``(SELECT CAST(c AS type) AS c ... FROM (VALUES ...)) AS alias`` (see
    ``queries.values_table``), with literals built directly: a leaf table has thousands."""
    tuples = [
        exp.Tuple(expressions=[_int(v) if isinstance(v, int) else dnum(v) for v in row])
        for row in rows
    ]
    raw = exp.Values(expressions=tuples, alias=exp.TableAlias(
        this=exp.to_identifier(f"{alias}_raw"), columns=[exp.to_identifier(c) for c in columns]))
    casts = [
        exp.Alias(this=exp.Cast(this=exp.column(c), to=exp.DataType.build(t)),
                  alias=exp.to_identifier(c))
        for c, t in zip(columns, types)
    ]
    return exp.Subquery(this=exp.Select(expressions=casts).from_(raw, copy=False),
                        alias=exp.TableAlias(this=exp.to_identifier(alias)))


def column(name: str, table: str | None = None) -> exp.Column:
    return exp.Column(
        this=exp.to_identifier(name, quoted=True),
        table=exp.to_identifier(table, quoted=True) if table else None,
    )


def leaf_label(node: Node) -> int:
    """The class a leaf predicts as ``Model.predict_row`` decides it (ties within 1e-9 first)."""
    best = max(node.proba)
    return next(i for i, p in enumerate(node.proba) if p >= best - PROBA_TIE)


def has_fractional(root: Node) -> bool:
    """Whether some test sends unknown values down every branch (C4.5's fractional cases)."""
    return any(not n.is_leaf and n.unknown_branch is None for n in root.walk())


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cycle collector while a large expression (or tree) is built.

    sqlglot nodes point to their parents, so every node is in a cycle, and the collector's
    passes over a growing tree took three quarters of the time to build a 2,000-leaf tree's
    SQL. Nothing built here is garbage until the caller drops it.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _builds_large(fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with collector_paused():
            return fn(*args, **kwargs)

    return wrapper


# -- building blocks -------------------------------------------------------------------------
# Nodes are built with constructors and never copied: sqlglot's builder functions and operators
# copy their operands, which makes trees of thousands of tests quadratic to build.
def _paren(e: exp.Expression) -> exp.Expression:
    atoms = (exp.Column, exp.Literal, exp.Case, exp.Paren, exp.Null, exp.Boolean, exp.Func)
    return e if isinstance(e, atoms) else exp.Paren(this=e)


def _or(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    return exp.Or(this=a, expression=b)


def _and(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    def side(e: exp.Expression) -> exp.Expression:
        return exp.Paren(this=e) if isinstance(e, exp.Or) else e

    return exp.And(this=side(a), expression=side(b))


def _not(e: exp.Expression) -> exp.Expression:
    return exp.Not(this=exp.Paren(this=e) if isinstance(e, exp.Connector) else e)


def _case(ifs: list[tuple[exp.Expression, exp.Expression]], default: exp.Expression | None
          ) -> exp.Case:
    return exp.Case(ifs=[exp.If(this=c, true=v) for c, v in ifs], default=default)


def _coalesce_false(e: exp.Expression) -> exp.Expression:
    return exp.Coalesce(this=e, expressions=[exp.false()])


def _in(c: exp.Expression, values: Sequence[Any]) -> exp.Expression:
    if len(values) == 1:
        return exp.EQ(this=c, expression=literal(values[0]))
    return exp.In(this=c, expressions=[literal(v) for v in values])


def known_condition(split: Split, table: str | None = None) -> exp.Expression:
    """True where the test's value is known (a nominal value counts if some branch lists it)."""
    c = column(split.feature, table)
    if split.kind == CONTINUOUS:
        return _not(exp.Is(this=c, expression=exp.Null()))
    assert split.groups is not None
    return _in(c, [v for g in split.groups for v in g])


def unknown_condition(split: Split, table: str | None = None) -> exp.Expression:
    """True where the test's value is unknown (never NULL itself)."""
    if split.kind == CONTINUOUS:
        return exp.Is(this=column(split.feature, table), expression=exp.Null())
    return _not(_coalesce_false(known_condition(split, table)))


def branch_condition(split: Split, branch: int, table: str | None = None) -> exp.Expression:
    """True where a known value takes ``branch``; NULL or false otherwise."""
    c = column(split.feature, table)
    if split.kind == CONTINUOUS:
        assert split.threshold is not None
        t = dnum(split.threshold, double=False)
        return exp.LTE(this=c, expression=t) if branch == 0 else exp.GT(this=c, expression=t)
    assert split.groups is not None
    return _in(c, split.groups[branch])


def routed_condition(node: Node, branch: int, table: str | None) -> exp.Expression:
    """Condition for ``branch`` including unknown values when they are routed to it."""
    assert node.split is not None
    cond = branch_condition(node.split, branch, table)
    if node.unknown_branch == branch:
        return _or(cond, unknown_condition(node.split, table))
    return cond


# -- positions -------------------------------------------------------------------------------
@dataclass
class Layout:
    """Positions of a tree's nodes, for codes and for walks that start below the root.

    ``pre`` is the node's position in depth-first preorder, so a subtree holds the positions
    ``pre[n] .. last[n]``; ``leaf`` numbers the leaves in the same order; ``size`` counts the
    leaves under a node. Keys are ``id(node)``.
    """

    nodes: list[Node]
    pre: dict[int, int]
    last: dict[int, int]
    leaf: dict[int, int]
    size: dict[int, int]

    @classmethod
    def of(cls, root: Node) -> Layout:
        nodes = list(root.walk())
        pre = {id(n): i for i, n in enumerate(nodes)}
        last: dict[int, int] = {}
        size: dict[int, int] = {}
        for n in reversed(nodes):  # children before parents, no recursion
            if n.is_leaf:
                last[id(n)], size[id(n)] = pre[id(n)], 1
            else:
                last[id(n)] = last[id(n.children[-1])]
                size[id(n)] = sum(size[id(c)] for c in n.children)
        leaves = [n for n in nodes if n.is_leaf]
        return cls(nodes, pre, last, {id(n): i for i, n in enumerate(leaves)}, size)

    def heavy(self, node: Node) -> int:
        """The child with most leaves (the first on ties): the one folded into its parent."""
        return max(range(len(node.children)), key=lambda i: (self.size[id(node.children[i])], -i))

    def stop_code(self, node: Node) -> int:
        """The (negative) code of a walk that stopped at ``node``."""
        return -1 - self.pre[id(node)]

    def within(self, entry: exp.Column, node: Node) -> exp.Expression:
        return exp.Between(this=column(entry.name, entry.table or None),
                           low=_int(self.pre[id(node)]), high=_int(self.last[id(node)]))


# -- fast path -------------------------------------------------------------------------------
def build_case(
    root: Node,
    leaf_value: Callable[[Node], exp.Expression],
    table: str | None = None,
    *,
    stop: Callable[[Node], exp.Expression] | None = None,
    entry: exp.Column | None = None,
    layout: Layout | None = None,
) -> exp.Expression:
    """The merged nested CASE over known values; ``leaf_value`` gives each leaf's output.

    Where a C4.5 test meets an unknown value the CASE gives ``stop(node)`` (default NULL).
    With ``entry``, an integer column holding a node's preorder position, a row that met an
    unknown value on its way to that node goes on towards it (a copy of a stopped row that
    continues from one branch); the row's known values decide everywhere else.
    """
    lay = layout or Layout.of(root)

    def chain(node: Node) -> exp.Expression:
        ifs: list[tuple[exp.Expression, exp.Expression]] = []
        while not node.is_leaf:
            assert node.split is not None
            split = node.split
            heavy = lay.heavy(node)
            fractional = node.unknown_branch is None
            for i, child in enumerate(node.children):
                if i == heavy:
                    continue
                cond = routed_condition(node, i, table)
                if entry is not None and fractional:
                    towards = lay.within(entry, child)
                    if split.kind == CONTINUOUS:  # a cheap filter first: only unknowns go on
                        towards = _and(exp.Is(this=column(split.feature, table),
                                              expression=exp.Null()), towards)
                    cond = _or(cond, towards)
                ifs.append((cond, chain(child)))
            if fractional:
                # Rows left here failed every other branch: unknown unless the largest takes it.
                if split.kind == CONTINUOUS:
                    unknown = unknown_condition(split, table)
                else:
                    unknown = _not(_coalesce_false(branch_condition(split, heavy, table)))
                if entry is not None:
                    unknown = _and(unknown, _not(lay.within(entry, node.children[heavy])))
                ifs.append((unknown, stop(node) if stop else exp.Null()))
            node = node.children[heavy]
        return _case(ifs, leaf_value(node)) if ifs else leaf_value(node)

    return chain(root)


# -- slow path in closed form ----------------------------------------------------------------
def build_closed_form(
    root: Node,
    value: Callable[[Node], float],
    table: str | None = None,
    unknown: Callable[[Node], exp.Expression] | None = None,
) -> exp.Expression | None:
    """``sum over leaves of value(leaf) * weight(row, leaf)``, C4.5's weights; None if 0.

    ``P(node) = sum over branches of factor(branch) * P(child)``, the factor 1 for the branch a
    known value takes, 0 for the others, and the branch's share where the value is unknown.
    A CASE skips a child's subtree for rows that do not reach it, so a row evaluates only the
    branches its known and unknown values lead to.

    Each branch's term tests whether the value is unknown; for a nominal test that lists its
    whole domain, so ``m`` branches name ``m * m`` values. Where that is more than the
    branches' own size, the test instead sends known values to their branch and sums the
    shares otherwise (``CASE WHEN x = a THEN P(a) ... ELSE s_a * P(a) + ... END``), which
    writes each branch twice. ``unknown(node)`` may replace the test for an unknown value
    (a query can compute it once per row); the terms then stay.
    """
    test_unknown = unknown
    if test_unknown is None:
        def test_unknown(n: Node) -> exp.Expression:
            assert n.split is not None
            return unknown_condition(n.split, table)

    out: dict[int, exp.Expression | None] = {}
    size: dict[int, int] = {}  # about how many nodes each node's closed form holds
    for node in reversed(list(root.walk())):  # children before parents, no recursion
        if node.is_leaf:
            v = value(node)
            out[id(node)] = dnum(v) if v != 0 else None
            size[id(node)] = 1
            continue
        assert node.split is not None
        split = node.split
        subs = [(i, child, out.pop(id(child)), size.pop(id(child)))
                for i, child in enumerate(node.children)]
        subs = [(i, child, sub, n) for i, child, sub, n in subs if sub is not None]
        fractional = node.unknown_branch is None
        m = len(node.children)
        inner = sum(n for *_, n in subs)
        by_terms = inner + len(subs) * (10 + (m if split.kind != CONTINUOUS else 2))
        by_dispatch = 2 * inner + 6 * len(subs)
        if (fractional and unknown is None and split.kind != CONTINUOUS
                and by_dispatch < by_terms):
            out[id(node)] = _dispatch(node, subs, value, table) if subs else None
            size[id(node)] = by_dispatch
            continue
        terms = []
        for i, child, sub, _ in subs:
            share = node.shares[i] if fractional else 0.0
            if share <= 0:
                when = [(routed_condition(node, i, table), sub)]
            elif child.is_leaf:  # a constant: the share folds in
                when = [(branch_condition(split, i, table), sub),
                        (test_unknown(node), dnum(share * value(child)))]
            else:
                factor = _case([(branch_condition(split, i, table), dnum(1.0))], dnum(share))
                when = [(_or(branch_condition(split, i, table), test_unknown(node)),
                         exp.Mul(this=factor, expression=_paren(sub)))]
            terms.append(_case(when, dnum(0.0)))
        out[id(node)] = _balanced_sum(terms) if terms else None
        size[id(node)] = by_terms
    return out[id(root)]


def _dispatch(
    node: Node,
    subs: list[tuple[int, Node, exp.Expression, int]],
    value: Callable[[Node], float],
    table: str | None,
) -> exp.Expression:
    """Known values to their branch's closed form; unknown ones to the shares' sum."""
    assert node.split is not None
    spread: list[exp.Expression] = []
    constant = 0.0  # leaves' shares add up here, in branch order as Node.predict_proba does
    for i, child, sub, _ in subs:
        share = node.shares[i]
        if share <= 0:
            continue
        if child.is_leaf:
            constant += share * value(child)
        else:
            spread.append(exp.Mul(this=dnum(share), expression=_paren(sub.copy())))
    if constant != 0 or not spread:
        spread.insert(0, dnum(constant))
    ifs = [(branch_condition(node.split, i, table), sub) for i, _, sub, _ in subs]
    # A branch whose closed form is 0 has no term above, and its known values must not fall
    # to the ELSE that spreads unknown ones: they get an explicit 0.
    listed = {i for i, *_ in subs}
    ifs += [(branch_condition(node.split, i, table), dnum(0.0))
            for i in range(len(node.children)) if i not in listed]
    return _case(ifs, _balanced_sum(spread))


def _balanced_sum(items: Sequence[exp.Expression]) -> exp.Expression:
    """Add pairwise so that the expression's depth is log2(len(items))."""
    layer = list(items)
    while len(layer) > 1:
        nxt: list[exp.Expression] = [
            exp.Add(this=layer[i], expression=_paren(layer[i + 1]))
            for i in range(0, len(layer) - 1, 2)
        ]
        if len(layer) % 2:
            nxt.append(layer[-1])
        layer = nxt
    return layer[0]


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
    """The first class whose probability is within 1e-9 of the largest.

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
    return _case(ifs, labels[-1])


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
                cond = _and(cond, c)
            ifs.append((cond, labels[i]))
        return _case(ifs, labels[-1])
    return build_argmax(
        [lambda c=c: build_closed_form(root, lambda n: n.proba[c], table) or dnum(0.0)
         for c in range(k)],
        labels,
    )


# -- single expressions ----------------------------------------------------------------------
@_builds_large
def compile_label(root: Node, classes: Sequence[Any], table: str | None = None) -> exp.Expression:
    """The predicted class as one SQL expression."""
    fast = build_case(root, lambda n: literal(classes[leaf_label(n)]), table)
    if not has_fractional(root):
        return fast
    return exp.Coalesce(this=fast, expressions=[build_closed_form_label(root, classes, table)])


@_builds_large
def compile_proba(root: Node, n_classes: int, table: str | None = None) -> list[exp.Expression]:
    """One probability expression per class."""
    layout = Layout.of(root)
    fractional = has_fractional(root)
    out = []
    for c in range(n_classes):
        fast = build_case(root, lambda n, c=c: dnum(n.proba[c]), table, layout=layout)
        if not fractional:
            out.append(fast)
            continue
        closed = build_closed_form(root, lambda n, c=c: n.proba[c], table) or dnum(0.0)
        out.append(exp.Coalesce(this=fast, expressions=[closed]))
    return out


@_builds_large
def compile_leaf(root: Node, table: str | None = None) -> exp.Expression:
    """The id of the leaf a row reaches (NULL where a fractional test meets an unknown value)."""
    return build_case(root, lambda n: _int(n.node_id), table)


# -- scoring queries -------------------------------------------------------------------------
def _name(suffix: str) -> exp.Identifier:
    return exp.to_identifier(PREFIX + suffix, quoted=True)


def _ref(suffix: str, table: str | None = None) -> exp.Column:
    return column(PREFIX + suffix, table)


def _as(e: exp.Expression, name: str | exp.Identifier) -> exp.Alias:
    ident = name if isinstance(name, exp.Identifier) else exp.to_identifier(name, quoted=True)
    return exp.Alias(this=e, alias=ident)


def _from(select: exp.Select, relation: exp.Expression) -> exp.Select:
    return select.from_(relation, copy=False)


def _step(select: exp.Select, alias: str) -> exp.Subquery:
    """``(select OFFSET 0) AS alias``: a step the planner keeps.

    PostgreSQL pulls plain subqueries up into the query that reads them, writing each column's
    expression wherever the column is used; the closed form uses each unknown flag and each
    probability many times, so the pulled-up query grew without bound. ``OFFSET 0`` keeps the
    subquery a step of its own.
    """
    return exp.Subquery(this=select.offset(0, copy=False),
                        alias=exp.TableAlias(this=_name(alias)))


def _label_case(code: exp.Expression, classes: Sequence[Any]) -> exp.Expression:
    """The class whose index ``code`` holds."""
    return exp.Case(this=code, ifs=[exp.If(this=_int(i), true=literal(c))
                                    for i, c in enumerate(classes)])


@_builds_large
def build_scoring_query(
    root: Node,
    classes: Sequence[Any],
    relation: exp.Expression,
    source_columns: Sequence[str],
    column_name: str = "prediction",
    proba_names: Sequence[str] | None = None,
    *,
    expand: bool = False,
    ordered: bool = True,
) -> exp.Select:
    """``SELECT <source columns>, <prediction> [, <probabilities>] FROM relation``.

    Rows that stop at an unknown value get their probabilities in closed form in a subquery
    (each class once per row), or, with ``expand``, by copies that walk on from every branch
    (``build_expansion_query``, which keeps the source's row order only if ``ordered``).
    """
    if not has_fractional(root):
        select = exp.Select(expressions=[column(c) for c in source_columns])
        select.append("expressions", _as(compile_label(root, classes), column_name))
        if proba_names is not None:
            for name, p in zip(proba_names, compile_proba(root, len(classes))):
                select.append("expressions", _as(p, name))
        return _from(select, relation)
    if expand:
        return build_expansion_query(root, classes, relation, source_columns, column_name,
                                     proba_names, ordered=ordered)
    return build_closed_form_query(root, classes, relation, source_columns, column_name,
                                   proba_names)


def build_closed_form_query(
    root: Node,
    classes: Sequence[Any],
    relation: exp.Expression,
    source_columns: Sequence[str],
    column_name: str = "prediction",
    proba_names: Sequence[str] | None = None,
) -> exp.Select:
    """Walk every row; rows that stopped get closed-form probabilities, computed once each.

    Nominal tests' unknown flags are columns of a step of their own, so that the closed form
    names each domain once instead of once per branch.
    """
    k = len(classes)
    layout = Layout.of(root)
    fast = _ref("fast")
    stopped = exp.Is(this=fast, expression=exp.Null())
    walk = exp.Select(expressions=[exp.Star(), _as(build_case(
        root, lambda n: literal(classes[leaf_label(n)]), layout=layout), _name("fast"))])
    if proba_names is not None:
        for c in range(k):
            walk.append("expressions", _as(
                build_case(root, lambda n, c=c: dnum(n.proba[c]), layout=layout),
                _name(f"fast{c}")))
    step = _from(walk, relation)

    flags: dict[tuple[str, tuple[Any, ...]], str] = {}
    for n in layout.nodes:
        if n.split is not None and n.unknown_branch is None and n.split.kind != CONTINUOUS:
            assert n.split.groups is not None
            key = (n.split.feature, tuple(v for g in n.split.groups for v in g))
            flags.setdefault(key, f"u{len(flags)}")
    if flags:
        marks = exp.Select(expressions=[exp.Star()])
        for (feature, values), name in flags.items():
            known = _coalesce_false(_in(column(feature), values))
            marks.append("expressions", _as(
                _case([(stopped.copy(), _not(known))], None), _name(name)))
        step = _from(marks, _step(step, "walk"))

    def unknown(n: Node) -> exp.Expression:
        assert n.split is not None
        if n.split.kind == CONTINUOUS:
            return unknown_condition(n.split)
        assert n.split.groups is not None
        return _ref(flags[(n.split.feature, tuple(v for g in n.split.groups for v in g))])

    spread = exp.Select(expressions=[exp.Star()])
    for c, p in enumerate(build_probabilities(root, k, unknown=unknown)):
        spread.append("expressions", _as(_case([(stopped.copy(), p)], None), _name(f"p{c}")))
    spread = _from(spread, _step(step, "flags"))

    out = exp.Select(expressions=[column(c) for c in source_columns])
    label = build_argmax([lambda c=c: _ref(f"p{c}") for c in range(k)],
                         [literal(c) for c in classes])
    out.append("expressions", _as(exp.Coalesce(this=fast.copy(), expressions=[label]),
                                  column_name))
    if proba_names is not None:
        for c, name in enumerate(proba_names):
            out.append("expressions", _as(
                exp.Coalesce(this=_ref(f"fast{c}"), expressions=[_ref(f"p{c}")]), name))
    return _from(out, _step(spread, "spread"))


SORT_REGIONS = 8
"""How many subtrees ``build_expansion_query`` sorts rows into before they walk."""


def _region(root: Node, layout: Layout, regions: int) -> exp.Expression:
    """An integer naming which of about ``regions`` top subtrees a row falls in."""
    frontier = [root]
    while True:  # split the subtree with most leaves while the count stays within bounds
        inner = [n for n in frontier if not n.is_leaf]
        if not inner:
            break
        biggest = max(inner, key=lambda n: layout.size[id(n)])
        if len(frontier) - 1 + len(biggest.children) > regions:
            break
        frontier.remove(biggest)
        frontier.extend(biggest.children)
    cut = {id(n) for n in frontier}

    def key(node: Node) -> exp.Expression:
        if id(node) in cut:
            return _int(layout.pre[id(node)])
        ifs = [(routed_condition(node, i, None), key(c)) for i, c in enumerate(node.children)]
        return _case(ifs, _int(layout.pre[id(node)]))  # unknown values: a region of their own

    return key(root)


def build_expansion_query(
    root: Node,
    classes: Sequence[Any],
    relation: exp.Expression,
    source_columns: Sequence[str],
    column_name: str = "prediction",
    proba_names: Sequence[str] | None = None,
    *,
    ordered: bool = True,
) -> exp.Select:
    """Walk every row; copy rows that stopped once per branch and let the copies walk on.

    ``scored`` walks every row to a leaf (its class, or its leaf with ``proba_names``) or to
    the test where it stopped (``Layout.stop_code``). The recursive ``walk`` copies each
    stopped row once per branch of that test, with the branch's share as weight, and walks
    every copy on from its branch, until all copies reach leaves. ``spread`` adds up each
    stopped row's leaves, weighted.

    Rows are sorted by the subtree of the first few tests they fall in, and stopped rows by
    the test where they stopped (so that their copies go on from nearby branches), before
    they walk: an engine that evaluates a CASE a batch of rows at a time pays for every
    branch some row of the batch takes, and a batch from one subtree takes few (DuckDB, 10M
    rows: the sorts pay for themselves, 30-40% less time).

    Written for DuckDB: PostgreSQL, for one, refuses the recursive reference inside the
    sorting subquery. Joining the stopped rows' results back loses the source's row order;
    ``ordered`` sorts by row number to restore it.
    """
    k = len(classes)
    layout = Layout.of(root)
    with_proba = proba_names is not None
    features = sorted({n.split.feature for n in layout.nodes if n.split is not None})

    def fast_value(n: Node) -> exp.Expression:
        return _int(layout.leaf[id(n)] if with_proba else leaf_label(n))

    def stop(n: Node) -> exp.Expression:
        return _int(layout.stop_code(n))

    needed = [column(c) for c in dict.fromkeys([*source_columns, *features])]
    numbered = _from(exp.Select(expressions=[
        *needed, _as(exp.Window(this=exp.RowNumber()), _name("row"))]), relation)
    region = _region(root, layout, SORT_REGIONS)
    if isinstance(region, exp.Case):  # a constant would be read as a column's position
        numbered = numbered.order_by(region, copy=False)
    scored = _from(exp.Select(expressions=[
        exp.Star(), _as(build_case(root, fast_value, stop=stop, layout=layout), _name("at")),
    ]), exp.Subquery(this=numbered, alias=exp.TableAlias(this=_name("numbered"))))

    def edges() -> exp.Expression:
        rows = [(layout.stop_code(n), layout.pre[id(child)], share)
                for n in layout.nodes if n.split is not None and n.unknown_branch is None
                for share, child in zip(n.shares, n.children) if share > 0]
        names = [PREFIX + "stop", PREFIX + "entry", PREFIX + "share"]
        return _values("e", names, rows, ["INT", "INT", "DOUBLE"])

    def leaf_table() -> exp.Expression:
        rows = [(layout.leaf[id(n)], leaf_label(n), *[float(p) for p in n.proba])
                for n in layout.nodes if n.is_leaf]
        names = [PREFIX + "leaf", PREFIX + "label", *[PREFIX + f"p{c}" for c in range(k)]]
        return _values("l", names, rows, ["INT", "INT"] + ["DOUBLE"] * k)

    def cte(name: str, alias: str) -> exp.Table:
        return exp.Table(this=_name(name), alias=exp.TableAlias(this=exp.to_identifier(alias)))

    base = exp.Select(expressions=[
        _ref("row"), dnum(1.0), _ref("at"), *[column(f) for f in features],
    ]).from_(_name("scored"), copy=False).where(
        exp.LT(this=_ref("at"), expression=_int(0)), copy=False)
    copies = exp.Select(expressions=[
        exp.Column(this=exp.Star(), table=exp.to_identifier("w")),
        _ref("entry", "e"), _ref("share", "e"),
    ])
    stopped = exp.Select(expressions=[exp.Star()]).from_(cte("walk", "w"), copy=False).where(
        exp.LT(this=_ref("at", "w"), expression=_int(0)), copy=False)
    stopped = stopped.order_by(_ref("at", "w"), copy=False)
    copies = copies.from_(exp.Subquery(this=stopped, alias=exp.TableAlias(
        this=exp.to_identifier("w"))), copy=False)
    copies = copies.join(edges(), on=exp.EQ(this=_ref("stop", "e"), expression=_ref("at", "w")),
                         copy=False)
    step = exp.Select(expressions=[
        _ref("row", "c"),
        exp.Mul(this=_ref("w", "c"), expression=_ref("share", "c")),
        build_case(root, lambda n: _int(layout.leaf[id(n)]), "c", stop=stop,
                   entry=_ref("entry", "c"), layout=layout),
        *[column(f, "c") for f in features],
    ]).from_(exp.Subquery(this=copies, alias=exp.TableAlias(this=exp.to_identifier("c"))),
             copy=False)
    walk = exp.Union(this=base, expression=step, distinct=False)

    spread = exp.Select(expressions=[_ref("row", "w")] + [
        _as(exp.Sum(this=exp.Mul(this=_ref("w", "w"), expression=_ref(f"p{c}", "l"))),
            _name(f"p{c}"))
        for c in range(k)
    ]).from_(cte("walk", "w"), copy=False)
    same_leaf = exp.EQ(this=_ref("leaf", "l"), expression=_ref("at", "w"))
    spread = spread.join(leaf_table(), on=same_leaf, copy=False)
    spread = spread.group_by(_ref("row", "w"), copy=False)

    ctes = [
        exp.CTE(this=scored, alias=exp.TableAlias(this=_name("scored"))),
        exp.CTE(this=walk, alias=exp.TableAlias(this=_name("walk"), columns=[
            _name("row"), _name("w"), _name("at"),
            *[exp.to_identifier(f, quoted=True) for f in features]])),
        exp.CTE(this=spread, alias=exp.TableAlias(this=_name("spread"))),
    ]

    at = _ref("at", "s")
    slow_label = build_argmax([lambda c=c: _ref(f"p{c}", "r") for c in range(k)],
                              [literal(c) for c in classes])
    fast_label = _label_case(_ref("label", "l") if with_proba else at.copy(), classes)
    out = exp.Select(expressions=[column(c, "s") for c in source_columns])
    out.append("expressions", _as(_case([(exp.GTE(this=at, expression=_int(0)), fast_label)],
                                        slow_label), column_name))
    if proba_names is not None:
        for c, name in enumerate(proba_names):
            out.append("expressions", _as(
                exp.Coalesce(this=_ref(f"p{c}", "l"), expressions=[_ref(f"p{c}", "r")]), name))
    out = out.from_(cte("scored", "s"), copy=False)
    if with_proba:
        out = out.join(leaf_table(), on=exp.EQ(this=_ref("leaf", "l"), expression=_ref("at", "s")),
                       join_type="left", copy=False)
    same_row = exp.EQ(this=_ref("row", "r"), expression=_ref("row", "s"))
    out = out.join(cte("spread", "r"), on=same_row, join_type="left", copy=False)
    out.set("with_", exp.With(expressions=ctes, recursive=True))
    if ordered:
        out = out.order_by(_ref("row", "s"), copy=False)
    return out
