"""A rule's conditions: one branch of one test, as text, as SQL and in Python.

A condition is satisfied by a known value that takes its branch. An unknown value (NULL, NaN,
or for a nominal test a value no branch of the tree lists) satisfies no condition, as in
C4.5rules, where an unknown outcome never equals the condition's outcome. In SQL the
condition is then NULL or false, which a ``CASE WHEN`` takes as not satisfied.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from ..compiler.blocks import column, dnum, in_values
from ..export import condition as condition_text
from ..tree import CONTINUOUS, NOMINAL, Node, Split, Value

LE, GT, IN = "<=", ">", "in"


@dataclass(frozen=True)
class Condition:
    """``feature <= threshold``, ``feature > threshold`` or ``feature in values``.

    ``subset`` marks a nominal condition taken from a test whose branches hold several
    values each (CART's), which C4.5rules encodes at a different cost (see ``selection``).
    """

    feature: str
    op: str
    threshold: float | None = None
    values: tuple[Value, ...] = ()
    subset: bool = False

    @classmethod
    def of_branch(cls, split: Split, branch: int) -> Condition:
        """The condition that leads into ``branch`` of ``split``."""
        if split.kind == CONTINUOUS:
            assert split.threshold is not None
            return cls(split.feature, LE if branch == 0 else GT, float(split.threshold))
        assert split.groups is not None
        return cls(split.feature, IN, values=tuple(split.groups[branch]),
                   subset=any(len(g) > 1 for g in split.groups))

    @property
    def continuous(self) -> bool:
        return self.op != IN

    def holds(self, row: dict[str, Any]) -> bool:
        """Whether a row (column name to value) satisfies the condition; an unknown value
        does not."""
        value = row.get(self.feature)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        if self.op == IN:
            return value in self.values
        assert self.threshold is not None
        return float(value) <= self.threshold if self.op == LE else float(value) > self.threshold

    def to_expression(self, table: str | None = None) -> exp.Expression:
        """True where the condition holds, NULL or false elsewhere (as the tree's SQL tests
        the branch: ``compiler.walk.branch_condition``)."""
        c = column(self.feature, table)
        if self.op == IN:
            test = in_values(c, list(self.values))
            return exp.false() if test is None else test
        assert self.threshold is not None
        t = dnum(self.threshold, double=False)
        return exp.LTE(this=c, expression=t) if self.op == LE else exp.GT(this=c, expression=t)

    def text(self, decimals: int | None = 6) -> str:
        """``humidity <= 75``, ``outlook = sunny``, as ``sqltree rules`` prints a leaf's path."""
        if self.op == IN:
            split = Split(self.feature, NOMINAL, groups=[list(self.values)])
            return condition_text(split, 0, decimals)
        split = Split(self.feature, CONTINUOUS, threshold=self.threshold)
        return condition_text(split, 0 if self.op == LE else 1, decimals)

    def implies(self, other: Condition) -> bool:
        """Whether every row satisfying this condition satisfies ``other``."""
        if self.feature != other.feature or self.op != other.op:
            return False
        if self.op == IN:
            return set(self.values) <= set(other.values)
        assert self.threshold is not None and other.threshold is not None
        return (self.threshold <= other.threshold if self.op == LE
                else self.threshold >= other.threshold)


def without_redundant(conditions: Sequence[Condition]) -> tuple[Condition, ...]:
    """The conditions without those another implies (``x <= 5`` beside ``x <= 3``): a path
    that tests a feature twice covers the same rows with the tighter test alone. Of equal
    conditions the first stays."""
    kept: list[Condition] = []
    for i, c in enumerate(conditions):
        redundant = any(
            j != i and o.implies(c) and (not c.implies(o) or j < i)
            for j, o in enumerate(conditions)
        )
        if not redundant:
            kept.append(c)
    return tuple(kept)


def conjunction(conditions: Sequence[Condition], table: str | None = None) -> exp.Expression:
    """All conditions hold: an AND balanced as a tree, so that its nesting grows with the
    logarithm of the number of conditions (engines limit expression depth)."""
    parts = [c.to_expression(table) for c in conditions]
    if not parts:
        return exp.true()
    while len(parts) > 1:
        paired = [exp.And(this=_wrapped(parts[i]), expression=_wrapped(parts[i + 1]))
                  for i in range(0, len(parts) - 1, 2)]
        parts = paired + ([parts[-1]] if len(parts) % 2 else [])
    return parts[0]


def _wrapped(e: exp.Expression) -> exp.Expression:
    return exp.Paren(this=e) if isinstance(e, exp.And | exp.Or) else e


def leaf_paths(root: Node) -> Iterator[tuple[Node, tuple[Condition, ...]]]:
    """Every leaf with the conditions on its path, in the order ``sqltree rules`` prints the
    leaves (redundant conditions left out)."""
    stack: list[tuple[Node, tuple[Condition, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if node.split is None:
            yield node, without_redundant(path)
            continue
        split = node.split
        stack.extend(
            (child, (*path, Condition.of_branch(split, branch)))
            for branch, child in reversed(list(enumerate(node.children)))
        )
