"""Compile a tree into SQL: the predicted class, the leaf, class probabilities.

Scoring takes a fast path and, for a few rows, a slow path. Both are written so that their
nesting grows with log2(leaves), not with the tree's depth: engines limit nesting (SQLite's
parser about 90 units of stack, which is 18 CASEs in THEN position or 30 parentheses on the
right of an operator; Spark about 100 CASEs, slowly; DuckDB 1,000 levels of any expression),
and sqlglot itself recurses once per level when it writes SQL.

The fast path is a nested CASE that follows a row's known values to its leaf. At every test the
children other than the largest become WHENs, and the largest child's own tests are folded into
the same CASE as further WHENs (a row that fails every WHEN of a test belongs to the largest
child), so a CASE nests only where a row leaves the path of largest children, which halves the
leaves each time. Where a C4.5 test meets an unknown value (NULL, or a nominal value no branch
lists) the walk stops: the CASE gives NULL there, or, in a query, a code naming the test
(``stop_code``).

Only rows that stopped take the slow path, which classifies them as C4.5 does: each class's
probability is a sum over leaves of the leaf's probability times, along its path, 1 for a test
the row passes, 0 for one it fails, and the branch's share of training weight where the value
is unknown; the label is the most probable class (``criteria.predicted_class``).
A single expression computes that sum in closed form (``build_closed_form``), along the same
paths of largest children, halving each path's segments, so that it too nests by about
log2(leaves). A query can instead copy each stopped row once per branch, weighted by the
branch's share, let every copy walk on from its branch (``build_case`` with ``entry``), and add
up the leaves the copies reach (``build_expansion_query``).

The modules: ``blocks`` (literals and boolean nodes built without copying), ``walk`` (branch
conditions and the nested CASE of the fast path), ``closed_form`` (the slow path's arithmetic
and its log-depth nesting), ``scoring`` (the queries ``Model.predict`` runs). This package's
own functions give the single expressions: label, probabilities, leaf.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from sqlglot import exp

from ..tree import Node
from .blocks import dnum, inum, literal
from .closed_form import build_closed_form, build_closed_form_label, build_slow_path
from .walk import build_case, merge_uniform

P = ParamSpec("P")
R = TypeVar("R")


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


def builds_large(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run with the cycle collector paused (``collector_paused``)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with collector_paused():
            return fn(*args, **kwargs)

    return wrapper


@builds_large
def compile_label(root: Node, classes: Sequence[Any], table: str | None = None) -> exp.Expression:
    """The predicted class as one SQL expression."""
    fast = build_case(merge_uniform(root, lambda n: n.label),
                      lambda n: literal(classes[n.label]), table)
    if not has_fractional(root):
        return fast
    slow = build_slow_path(root, build_closed_form_label(root, classes, table), table)
    return exp.Coalesce(this=fast, expressions=[slow])


@builds_large
def compile_proba(root: Node, n_classes: int, table: str | None = None) -> list[exp.Expression]:
    """One probability expression per class."""
    fractional = has_fractional(root)
    out = []
    for c in range(n_classes):
        fast = build_case(merge_uniform(root, lambda n, c=c: n.proba[c]),
                          lambda n, c=c: dnum(n.proba[c]), table)
        if not fractional:
            out.append(fast)
            continue
        closed = build_closed_form(root, lambda n, c=c: n.proba[c], table) or dnum(0.0)
        out.append(exp.Coalesce(this=fast, expressions=[build_slow_path(root, closed, table)]))
    return out


@builds_large
def compile_value(root: Node, table: str | None = None) -> exp.Expression:
    """A regression tree's prediction, each leaf's ``value``, as one numeric CASE (every test
    of such a tree routes unknown values to one branch, so the fast path is the whole walk)."""
    if has_fractional(root):
        raise ValueError("a regression tree routes unknown values to one branch at every test")
    return build_case(merge_uniform(root, _value), lambda n: dnum(_value(n)), table)


def _value(node: Node) -> float:
    if node.value is None:
        raise ValueError(f"leaf {node.node_id} has no value: not a regression tree's")
    return node.value


@builds_large
def compile_leaf(root: Node, table: str | None = None) -> exp.Expression:
    """The id of the leaf a row reaches (NULL where a fractional test meets an unknown value)."""
    return build_case(root, lambda n: inum(n.node_id), table)
