"""The counts C4.5rules needs, each from one grouped query in the engine.

- ``round_counts``: for every rule still being generalised, the class weights of the rows
  that satisfy all of its conditions, and of the rows that fail exactly one (for each
  condition), as C4.5rules' ``FindTables`` counts them. Each row gets one number per rule,
  ``v = sum over conditions j of (0 if j holds else K + j)`` with ``K`` one more than the
  rule's conditions: ``v = 0`` when every condition holds, ``v = K + j`` when only condition
  ``j`` fails, and more when two or more fail. The query sums the weight of each ``v`` of
  interest per class (``SUM(CASE WHEN v = ... THEN w ELSE 0 END) ... GROUP BY class``).
- ``patterns``: the rows grouped by class and by the set of rules that fire on them, the set
  written as bits of BIGINT columns (``MASK_BITS`` rules a column). Subset selection, class
  order, default class and the training evaluation are computed from these groups.
- ``coding``: what C4.5rules' encoding of a condition needs: each nominal feature's value
  frequencies and each continuous feature's number of distinct values.

Unknown values satisfy no condition (see ``conditions``). Rows with a NULL class are left out.
A query has at most ``MAX_COLUMNS`` aggregates (PostgreSQL allows 1,664 result columns,
SQLite 2,000): more rules than that take a few queries a round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from ..compiler.blocks import column, inum
from ..dataset import sort_key
from ..engines import Engine
from ..tree import Value
from .conditions import Condition, conjunction

MAX_COLUMNS = 1000
"""Aggregates in one query at most."""

MASK_BITS = 60
"""Rules per BIGINT column of the pattern query."""

_CLASS, _WEIGHT = "class", "w"


def balanced(parts: Sequence[exp.Expression],
             op: Callable[[exp.Expression, exp.Expression], exp.Expression]
             ) -> exp.Expression:
    """``parts`` combined pairwise by ``op`` into a balanced tree (nesting log2 of their
    number, not their number)."""
    assert parts
    level = list(parts)
    while len(level) > 1:
        nxt = [op(exp.Paren(this=level[i]), exp.Paren(this=level[i + 1]))
               for i in range(0, len(level) - 1, 2)]
        level = nxt + ([level[-1]] if len(level) % 2 else [])
    return level[0]


def _add(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    return exp.Add(this=a, expression=b)


def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _as(e: exp.Expression, name: str) -> exp.Alias:
    return exp.Alias(this=e, alias=_ident(name))


@dataclass
class Counter:
    """Runs the rule-set queries over ``relation`` on ``engine``.

    ``classes`` are the model's; a row whose class is not among them counts against every
    rule. ``weight``: a column weighing each row, or None to count rows.
    """

    engine: Engine
    relation: exp.Expression
    target: str
    classes: Sequence[Value]
    weight: str | None = None

    def __post_init__(self) -> None:
        self._index = {sort_key(c): i for i, c in enumerate(self.classes)}
        self.queries = 0

    def class_index(self, value: Value) -> int:
        """The model's index of a class value, -1 for a class it does not know."""
        found = self._index.get(sort_key(value))
        if found is None and type(value) is int and value in (0, 1):
            found = self._index.get(sort_key(bool(value)))  # SQLite's booleans
        return -1 if found is None else found

    # -- building blocks ---------------------------------------------------------------------
    def _weight(self) -> exp.Expression:
        if self.weight is None:
            return inum(1)
        return exp.Cast(this=column(self.weight), to=exp.DataType.build("DOUBLE"))

    def _inner(self, extra: list[exp.Alias]) -> exp.Subquery:
        """``(SELECT class, w, extra... FROM relation WHERE class IS NOT NULL) AS r``."""
        select = exp.Select(expressions=[
            _as(column(self.target), _CLASS), _as(self._weight(), _WEIGHT), *extra,
        ]).from_(self.relation.copy(), copy=False).where(
            exp.Not(this=exp.Is(this=column(self.target), expression=exp.Null())), copy=False)
        return exp.Subquery(this=select, alias=exp.TableAlias(this=_ident("r")))

    def _run(self, query: exp.Expression) -> list[tuple[Any, ...]]:
        self.queries += 1
        return self.engine.execute(query)

    # -- generalisation ----------------------------------------------------------------------
    def round_counts(self, rules: Sequence[Sequence[Condition]]
                     ) -> tuple[list[list[list[float]]], list[float]]:
        """For each rule, ``counts[d]``: class weights of the rows satisfying all of its
        conditions (``d = 0``) or all but condition ``d`` (1-based; those that satisfy all
        count too, as C4.5rules adds them); and the class weights of all rows. Each list has
        one entry per model class and a last one for classes the model does not know."""
        k = len(self.classes) + 1
        out = [[[0.0] * k for _ in range(len(r) + 1)] for r in rules]
        totals = [0.0] * k
        batches: list[list[int]] = [[]]
        width = 0
        for i, r in enumerate(rules):
            if width + len(r) + 1 > MAX_COLUMNS and batches[-1]:
                batches.append([])
                width = 0
            batches[-1].append(i)
            width += len(r) + 1
        for b, batch in enumerate(batches):
            for row in self._run(self._round_query([rules[i] for i in batch])):
                c = self.class_index(row[0])  # -1: the last entry
                if b == 0:
                    totals[c] += float(row[1])
                at = 2
                for i in batch:
                    for d in range(len(rules[i]) + 1):
                        out[i][d][c] += float(row[at + d] or 0)
                    at += len(rules[i]) + 1
        for per_rule in out:
            for d in range(1, len(per_rule)):
                per_rule[d] = [a + b for a, b in zip(per_rule[d], per_rule[0])]
        return out, totals

    def _round_query(self, rules: Sequence[Sequence[Condition]]) -> exp.Select:
        w = exp.column(_WEIGHT, quoted=True)
        values, sums = [], []
        for i, conditions in enumerate(rules):
            name = f"v{i}"
            big = len(conditions) + 1
            terms = [exp.Case(ifs=[exp.If(this=c.to_expression(), true=inum(0))],
                              default=inum(big + j))
                     for j, c in enumerate(conditions, start=1)]
            values.append(_as(balanced(terms, _add) if terms else inum(0), name))
            v = exp.column(name, quoted=True)
            for code in [0, *range(big + 1, 2 * big)]:
                sums.append(exp.Sum(this=exp.Case(
                    ifs=[exp.If(this=exp.EQ(this=v.copy(), expression=inum(code)),
                                true=w.copy())],
                    default=inum(0))))
        cls = exp.column(_CLASS, quoted=True)
        return exp.Select(expressions=[cls, exp.Sum(this=w.copy()), *sums]).from_(
            self._inner(values), copy=False).group_by(cls.copy(), copy=False)

    # -- patterns ----------------------------------------------------------------------------
    def patterns(self, rules: Sequence[Sequence[Condition]]
                 ) -> list[tuple[int, int, float]]:
        """``(class index, bits of the rules that fire, weight)`` per group of rows; bit ``j``
        stands for ``rules[j]``."""
        blocks = [range(s, min(s + MASK_BITS, len(rules)))
                  for s in range(0, len(rules), MASK_BITS)] or [range(0)]
        masks = []
        for b, block in enumerate(blocks):
            terms: list[exp.Expression] = [
                exp.Case(ifs=[exp.If(this=conjunction(rules[j]),
                                     true=exp.Cast(this=inum(1 << (j - block.start)),
                                                   to=exp.DataType.build("BIGINT")))],
                         default=exp.Cast(this=inum(0), to=exp.DataType.build("BIGINT")))
                for j in block
            ] or [exp.Cast(this=inum(0), to=exp.DataType.build("BIGINT"))]
            masks.append(_as(balanced(terms, _add), f"m{b}"))
        keys = [exp.column(_CLASS, quoted=True),
                *[exp.column(f"m{b}", quoted=True) for b in range(len(blocks))]]
        query = exp.Select(expressions=[
            *[k.copy() for k in keys], exp.Sum(this=exp.column(_WEIGHT, quoted=True)),
        ]).from_(self._inner(masks), copy=False).group_by(*[k.copy() for k in keys], copy=False)
        out = []
        for row in self._run(query):
            bits = 0
            for b in range(len(blocks)):
                bits |= int(row[1 + b]) << (MASK_BITS * b)
            out.append((self.class_index(row[0]), bits, float(row[-1])))
        out.sort(key=lambda p: (p[0], p[1]))
        return out

    # -- coding ------------------------------------------------------------------------------
    def coding(self, nominal: Sequence[str], continuous: Sequence[str]
               ) -> tuple[dict[str, list[float]], dict[str, int]]:
        """Each nominal feature's known-value counts, and each continuous feature's number of
        distinct known values, over the rows with a class (at most 100 features a query)."""
        parts: list[tuple[str, str, exp.Select]] = []
        for i, name in enumerate(nominal):
            c = column(name)
            parts.append(("n", name, exp.Select(expressions=[
                _as(inum(i), "f"), _as(exp.Count(this=exp.Star()), "n")
            ]).from_(self._inner([_as(c, "x")]), copy=False).where(
                exp.Not(this=exp.Is(this=exp.column("x", quoted=True), expression=exp.Null())),
                copy=False).group_by(exp.column("x", quoted=True), copy=False)))
        for i, name in enumerate(continuous):
            parts.append(("c", name, exp.Select(expressions=[
                _as(inum(len(nominal) + i), "f"),
                _as(exp.Count(this=exp.Distinct(expressions=[exp.column("x", quoted=True)])),
                    "n"),
            ]).from_(self._inner([_as(column(name), "x")]), copy=False)))
        names = [*nominal, *continuous]
        frequencies: dict[str, list[float]] = {n: [] for n in nominal}
        distinct: dict[str, int] = {n: 0 for n in continuous}
        for s in range(0, len(parts), 100):
            chunk = [p[2] for p in parts[s:s + 100]]
            query: exp.Expression = chunk[0]
            for more in chunk[1:]:
                query = exp.Union(this=query, expression=more, distinct=False)
            for f, n in self._run(query):
                if int(f) < len(nominal):
                    frequencies[names[int(f)]].append(float(n))
                else:
                    distinct[names[int(f)]] = int(n)
        return frequencies, distinct
