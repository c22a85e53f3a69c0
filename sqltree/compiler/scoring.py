"""The scoring queries ``Model.predict`` runs: the walk, and for rows that stopped at an unknown
value either closed-form probabilities computed once per row (``build_closed_form_query``) or
copies that walk on from every branch (``build_expansion_query``, DuckDB).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from ..tree import CONTINUOUS, NOMINAL, Node, Split
from . import builds_large, compile_label, compile_proba, has_fractional
from .blocks import cases, column, dnum, inum, is_null, listed, literal, literal_table
from .closed_form import build_argmax, build_probabilities
from .walk import Layout, build_case, merge_uniform, routed_condition, unknown_condition

PREFIX = "__sqltree_"
"""Prefix of the helper columns and relations scoring queries add (see ``Names``)."""


@dataclass(frozen=True)
class Names:
    """Names of a scoring query's helper columns and relations: ``prefix + suffix``.

    The prefix is ``PREFIX`` unless a name the query must leave alone (a column of the scored
    relation, an output column, a table the relation reads) starts with it, ignoring case as
    DuckDB, SQLite and Spark compare names; then ``__sqltree1_``, ``__sqltree2_``, and so on.
    No helper can then take the place of a source column, or a helper relation the place of a
    table the source reads.
    """

    prefix: str = PREFIX

    @classmethod
    def avoiding(cls, taken: Iterable[str]) -> Names:
        lowered = [t.lower() for t in taken]
        for i in itertools.count():
            prefix = PREFIX if i == 0 else f"__sqltree{i}_"
            if not any(t.startswith(prefix) for t in lowered):
                return cls(prefix)
        raise AssertionError("unreachable")

    @classmethod
    def for_query(cls, relation: exp.Expression, output: Iterable[str]) -> Names:
        """Names that none of ``output`` and none of the relation's tables and aliases start
        with."""
        tables = [t.name for t in relation.find_all(exp.Table)]
        return cls.avoiding([*output, *tables, relation.alias_or_name])

    def ident(self, suffix: str) -> exp.Identifier:
        return exp.to_identifier(self.prefix + suffix, quoted=True)

    def ref(self, suffix: str, table: str | None = None) -> exp.Column:
        return column(self.prefix + suffix, table)


def _as(e: exp.Expression, name: str | exp.Identifier) -> exp.Alias:
    ident = name if isinstance(name, exp.Identifier) else exp.to_identifier(name, quoted=True)
    return exp.Alias(this=e, alias=ident)


def _from(select: exp.Select, relation: exp.Expression) -> exp.Select:
    return select.from_(relation, copy=False)


def _step(select: exp.Select, alias: exp.Identifier) -> exp.Subquery:
    """``(select OFFSET 0) AS alias``: a step the planner keeps.

    PostgreSQL pulls plain subqueries up into the query that reads them, writing each column's
    expression wherever the column is used; the closed form uses each unknown flag and each
    probability many times, so the pulled-up query grew without bound. ``OFFSET 0`` keeps the
    subquery a step of its own.
    """
    return exp.Subquery(this=select.offset(0, copy=False), alias=exp.TableAlias(this=alias))


def _label_case(code: exp.Expression, classes: Sequence[Any]) -> exp.Expression:
    """The class whose index ``code`` holds."""
    return exp.Case(this=code, ifs=[exp.If(this=inum(i), true=literal(c))
                                    for i, c in enumerate(classes)])


@builds_large
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
    Helper columns and relations are named so that none can capture a source column
    (``Names``).
    """
    if not has_fractional(root):
        select = exp.Select(expressions=[column(c) for c in source_columns])
        select.append("expressions", _as(compile_label(root, classes), column_name))
        if proba_names is not None:
            for name, p in zip(proba_names, compile_proba(root, len(classes))):
                select.append("expressions", _as(p, name))
        return _from(select, relation)
    names = Names.for_query(relation, [*source_columns, column_name, *(proba_names or [])])
    query = ScoringQuery(root, classes, relation, source_columns, column_name, proba_names, names)
    if expand:
        return build_expansion_query(query, ordered=ordered)
    return build_closed_form_query(query)


@dataclass(frozen=True)
class ScoringQuery:
    """What a scoring query of a tree with fractional tests is asked for (see
    ``build_scoring_query``), and the names of its helpers."""

    root: Node
    classes: Sequence[Any]
    relation: exp.Expression
    source_columns: Sequence[str]
    column_name: str
    proba_names: Sequence[str] | None
    names: Names


def build_closed_form_query(query: ScoringQuery) -> exp.Select:
    """Walk every row; rows that stopped get closed-form probabilities, computed once each.

    Nominal tests' unknown flags are columns of a step of their own, so that the closed form
    names each domain once instead of once per branch.
    """
    root, classes, nm, proba_names = query.root, query.classes, query.names, query.proba_names
    k = len(classes)
    layout = Layout.of(root)
    fast = nm.ref("fast")
    stopped = is_null(fast)
    walk = exp.Select(expressions=[exp.Star(), _as(build_case(
        merge_uniform(root, lambda n: n.label), lambda n: literal(classes[n.label])),
        nm.ident("fast"))])
    if proba_names is not None:
        for c in range(k):
            walk.append("expressions", _as(
                build_case(merge_uniform(root, lambda n, c=c: n.proba[c]),
                           lambda n, c=c: dnum(n.proba[c])),
                nm.ident(f"fast{c}")))
    step = _from(walk, query.relation)

    flags: dict[tuple[str, tuple[Any, ...]], str] = {}
    for n in layout.nodes:
        if n.split is not None and n.unknown_branch is None and n.split.kind != CONTINUOUS:
            flags.setdefault((n.split.feature, tuple(listed(n.split))), f"u{len(flags)}")
    if flags:
        marks = exp.Select(expressions=[exp.Star()])
        for (feature, values), name in flags.items():
            unknown = unknown_condition(Split(feature, NOMINAL, groups=[list(values)]))
            marks.append("expressions", _as(cases([(stopped.copy(), unknown)], None),
                                            nm.ident(name)))
        step = _from(marks, _step(step, nm.ident("walk")))

    def unknown(n: Node) -> exp.Expression:
        assert n.split is not None
        if n.split.kind == CONTINUOUS:
            return unknown_condition(n.split)
        return nm.ref(flags[(n.split.feature, tuple(listed(n.split)))])

    spread = exp.Select(expressions=[exp.Star()])
    for c, p in enumerate(build_probabilities(root, k, unknown=unknown)):
        spread.append("expressions", _as(cases([(stopped.copy(), p)], None), nm.ident(f"p{c}")))
    spread = _from(spread, _step(step, nm.ident("flags")))

    out = exp.Select(expressions=[column(c) for c in query.source_columns])
    label = build_argmax([lambda c=c: nm.ref(f"p{c}") for c in range(k)],
                         [literal(c) for c in classes])
    out.append("expressions", _as(exp.Coalesce(this=fast.copy(), expressions=[label]),
                                  query.column_name))
    if proba_names is not None:
        for c, name in enumerate(proba_names):
            out.append("expressions", _as(
                exp.Coalesce(this=nm.ref(f"fast{c}"), expressions=[nm.ref(f"p{c}")]), name))
    return _from(out, _step(spread, nm.ident("spread")))


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
            return inum(layout.pre[id(node)])
        ifs = []
        for i, child in enumerate(node.children):
            cond = routed_condition(node, i, None)
            if cond is not None:
                ifs.append((cond, key(child)))
        if not ifs:  # no value is known here
            return inum(layout.pre[id(node)])
        return cases(ifs, inum(layout.pre[id(node)]))  # unknown values: a region of their own

    return key(root)


def _expansion_tables(
    layout: Layout, k: int, nm: Names
) -> tuple[Callable[[], exp.Expression], Callable[[], exp.Expression]]:
    """Makers of the two literal tables: ``e``, each fractional test's branches with their
    shares, by stop code; ``l``, each leaf's label and probabilities."""

    def edges() -> exp.Expression:
        rows = [(layout.stop_code(n), layout.pre[id(child)], share)
                for n in layout.nodes if n.split is not None and n.unknown_branch is None
                for share, child in zip(n.shares, n.children) if share > 0]
        names = [nm.prefix + "stop", nm.prefix + "entry", nm.prefix + "share"]
        return literal_table("e", names, rows, ["INT", "INT", "DOUBLE"])

    def leaf_table() -> exp.Expression:
        rows = [(layout.leaf[id(n)], n.label, *[float(p) for p in n.proba])
                for n in layout.nodes if n.is_leaf]
        names = [nm.prefix + "leaf", nm.prefix + "label", *[nm.prefix + f"p{c}" for c in range(k)]]
        return literal_table("l", names, rows, ["INT", "INT"] + ["DOUBLE"] * k)

    return edges, leaf_table


def _cte_ref(nm: Names, name: str, alias: str) -> exp.Table:
    return exp.Table(this=nm.ident(name), alias=exp.TableAlias(this=exp.to_identifier(alias)))


def _expansion_walk(root: Node, layout: Layout, features: list[str], nm: Names,
                    edges: Callable[[], exp.Expression]) -> exp.Union:
    """The recursive walk: stopped rows, then their copies, one per branch, walking on."""

    def stop(n: Node) -> exp.Expression:
        return inum(layout.stop_code(n))

    base = exp.Select(expressions=[
        nm.ref("row"), dnum(1.0), nm.ref("at"), *[column(f) for f in features],
    ]).from_(nm.ident("scored"), copy=False).where(
        exp.LT(this=nm.ref("at"), expression=inum(0)), copy=False)
    copies = exp.Select(expressions=[
        exp.Column(this=exp.Star(), table=exp.to_identifier("w")),
        nm.ref("entry", "e"), nm.ref("share", "e"),
    ])
    stopped = exp.Select(expressions=[exp.Star()]).from_(
        _cte_ref(nm, "walk", "w"), copy=False).where(
        exp.LT(this=nm.ref("at", "w"), expression=inum(0)), copy=False)
    stopped = stopped.order_by(nm.ref("at", "w"), copy=False)
    copies = copies.from_(exp.Subquery(this=stopped, alias=exp.TableAlias(
        this=exp.to_identifier("w"))), copy=False)
    copies = copies.join(edges(), on=exp.EQ(this=nm.ref("stop", "e"),
                                            expression=nm.ref("at", "w")), copy=False)
    step = exp.Select(expressions=[
        nm.ref("row", "c"),
        exp.Mul(this=nm.ref("w", "c"), expression=nm.ref("share", "c")),
        build_case(root, lambda n: inum(layout.leaf[id(n)]), "c", stop=stop,
                   entry=nm.ref("entry", "c"), layout=layout),
        *[column(f, "c") for f in features],
    ]).from_(exp.Subquery(this=copies, alias=exp.TableAlias(this=exp.to_identifier("c"))),
             copy=False)
    return exp.Union(this=base, expression=step, distinct=False)


def build_expansion_query(query: ScoringQuery, *, ordered: bool = True) -> exp.Select:
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
    root, classes, nm, proba_names = query.root, query.classes, query.names, query.proba_names
    k = len(classes)
    layout = Layout.of(root)
    with_proba = proba_names is not None
    features = sorted({n.split.feature for n in layout.nodes if n.split is not None})
    edges, leaf_table = _expansion_tables(layout, k, nm)

    def fast_value(n: Node) -> exp.Expression:
        return inum(layout.leaf[id(n)] if with_proba else n.label)

    needed = [column(c) for c in dict.fromkeys([*query.source_columns, *features])]
    numbered = _from(exp.Select(expressions=[
        *needed, _as(exp.Window(this=exp.RowNumber()), nm.ident("row"))]), query.relation)
    region = _region(root, layout, SORT_REGIONS)
    if isinstance(region, exp.Case):  # a constant would be read as a column's position
        numbered = numbered.order_by(region, copy=False)
    scored = _from(exp.Select(expressions=[exp.Star(), _as(build_case(
        root, fast_value, stop=lambda n: inum(layout.stop_code(n)), layout=layout),
        nm.ident("at"))]), exp.Subquery(this=numbered, alias=exp.TableAlias(
            this=nm.ident("numbered"))))

    spread = exp.Select(expressions=[nm.ref("row", "w")] + [
        _as(exp.Sum(this=exp.Mul(this=nm.ref("w", "w"), expression=nm.ref(f"p{c}", "l"))),
            nm.ident(f"p{c}"))
        for c in range(k)
    ]).from_(_cte_ref(nm, "walk", "w"), copy=False)
    same_leaf = exp.EQ(this=nm.ref("leaf", "l"), expression=nm.ref("at", "w"))
    spread = spread.join(leaf_table(), on=same_leaf, copy=False)
    spread = spread.group_by(nm.ref("row", "w"), copy=False)

    ctes = [
        exp.CTE(this=scored, alias=exp.TableAlias(this=nm.ident("scored"))),
        exp.CTE(this=_expansion_walk(root, layout, features, nm, edges),
                alias=exp.TableAlias(this=nm.ident("walk"), columns=[
                    nm.ident("row"), nm.ident("w"), nm.ident("at"),
                    *[exp.to_identifier(f, quoted=True) for f in features]])),
        exp.CTE(this=spread, alias=exp.TableAlias(this=nm.ident("spread"))),
    ]

    at = nm.ref("at", "s")
    slow_label = build_argmax([lambda c=c: nm.ref(f"p{c}", "r") for c in range(k)],
                              [literal(c) for c in classes])
    fast_label = _label_case(nm.ref("label", "l") if with_proba else at.copy(), classes)
    out = exp.Select(expressions=[column(c, "s") for c in query.source_columns])
    out.append("expressions", _as(cases([(exp.GTE(this=at, expression=inum(0)), fast_label)],
                                        slow_label), query.column_name))
    if proba_names is not None:
        for c, name in enumerate(proba_names):
            out.append("expressions", _as(exp.Coalesce(
                this=nm.ref(f"p{c}", "l"), expressions=[nm.ref(f"p{c}", "r")]), name))
    out = out.from_(_cte_ref(nm, "scored", "s"), copy=False)
    if with_proba:
        out = out.join(leaf_table(), on=exp.EQ(this=nm.ref("leaf", "l"),
                                               expression=nm.ref("at", "s")),
                       join_type="left", copy=False)
    same_row = exp.EQ(this=nm.ref("row", "r"), expression=nm.ref("row", "s"))
    out = out.join(_cte_ref(nm, "spread", "r"), on=same_row, join_type="left", copy=False)
    out.set("with_", exp.With(expressions=ctes, recursive=True))
    if ordered:
        out = out.order_by(nm.ref("row", "s"), copy=False)
    return out

