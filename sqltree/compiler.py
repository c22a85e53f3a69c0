"""Compile a tree into SQL expressions: the predicted class, the leaf, class probabilities.

Rows whose tested values are all known take a nested CASE. Its nesting grows with
log2(leaves), not with the tree's depth: at every test the children other than the largest
become WHENs, and the largest child's own tests are folded into the same CASE as further WHENs
(a row that fails every WHEN of a test belongs to the largest child). Engines limit nesting
(SQLite about 20 CASEs, Spark about 100), and sqlglot itself recurses per level, so this keeps
deep trees compilable while each row still evaluates only the tests on its path.

Rows with a value that is unknown at a C4.5 test (NULL, or a nominal value no branch lists)
are classified as C4.5 does: each class's probability is a sum over leaves of the leaf's
probability times, along its path, 1 for a test the row passes, 0 for one it fails, and the
branch's share of training weight where the value is unknown. The label is the most probable
class (ties, within 1e-9, to the first class).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlglot import exp

from .queries import literal, num
from .tree import CONTINUOUS, Node, Split

PROBA_TIE = 1e-9


def dnum(x: float) -> exp.Expression:
    """A float literal typed DOUBLE by every engine (see ``queries.num``)."""
    return num(float(x))


def column(name: str, table: str | None = None) -> exp.Column:
    return exp.column(
        name, table=exp.to_identifier(table, quoted=True) if table else None, quoted=True
    )


def known_condition(split: Split, table: str | None = None) -> exp.Expression:
    """True where the test's value is known (a nominal value counts if some branch lists it)."""
    c = column(split.feature, table)
    if split.kind == CONTINUOUS:
        return c.is_(exp.null()).not_()
    assert split.groups is not None
    return exp.In(this=c, expressions=[literal(v) for g in split.groups for v in g])


def branch_condition(split: Split, branch: int, table: str | None = None) -> exp.Expression:
    """True where a known value takes ``branch``; NULL or false otherwise."""
    c = column(split.feature, table)
    if split.kind == CONTINUOUS:
        assert split.threshold is not None
        t = num(float(split.threshold), double=False)
        return exp.LTE(this=c, expression=t) if branch == 0 else exp.GT(this=c, expression=t)
    assert split.groups is not None
    group = split.groups[branch]
    if len(group) == 1:
        return exp.EQ(this=c, expression=literal(group[0]))
    return exp.In(this=c, expressions=[literal(v) for v in group])


def routed_condition(node: Node, branch: int, table: str | None) -> exp.Expression:
    """Condition for ``branch`` including unknown values when they are routed to it."""
    assert node.split is not None
    cond = branch_condition(node.split, branch, table)
    if node.unknown_branch == branch:
        return exp.paren(
            exp.or_(cond, exp.not_(exp.func("COALESCE", known_condition(node.split, table),
                                            exp.false()))),
            copy=False,
        )
    return cond


def _n_leaves(node: Node, cache: dict[int, int]) -> int:
    if id(node) not in cache:
        for n in reversed(list(node.walk())):  # children before parents, no recursion
            cache[id(n)] = 1 if n.is_leaf else sum(cache[id(c)] for c in n.children)
    return cache[id(node)]


def build_case(
    root: Node, leaf_value: Callable[[Node], exp.Expression], table: str | None = None
) -> exp.Expression:
    """The merged nested CASE over known values; ``leaf_value`` gives each leaf's output."""
    sizes: dict[int, int] = {}

    def build(node: Node) -> exp.Expression:
        ifs: list[exp.If] = []
        while not node.is_leaf:
            largest = max(
                range(len(node.children)), key=lambda i: (_n_leaves(node.children[i], sizes), -i)
            )
            for i, child in enumerate(node.children):
                if i != largest:
                    ifs.append(exp.If(this=routed_condition(node, i, table), true=build(child)))
            node = node.children[largest]
        if not ifs:
            return leaf_value(node)
        return exp.Case(ifs=ifs, default=leaf_value(node))

    return build(root)


def has_fractional(root: Node) -> bool:
    return any(not n.is_leaf and n.unknown_branch is None for n in root.walk())


def guard(root: Node, table: str | None = None) -> exp.Expression | None:
    """True where no fractional test can meet an unknown value; None if the tree has none."""
    seen: dict[tuple[str, str], exp.Expression] = {}
    for n in root.walk():
        if not n.is_leaf and n.unknown_branch is None:
            assert n.split is not None
            cond = known_condition(n.split, table)
            seen.setdefault((n.split.feature, cond.sql()), cond)
    if not seen:
        return None
    return exp.and_(*seen.values())


def _balanced(op: Callable[[exp.Expression, exp.Expression], exp.Expression],
              items: Sequence[exp.Expression]) -> exp.Expression:
    """Combine items pairwise so the expression's depth is log2(len(items))."""
    layer = list(items)
    while len(layer) > 1:
        nxt = [op(layer[i], layer[i + 1]) for i in range(0, len(layer) - 1, 2)]
        if len(layer) % 2:
            nxt.append(layer[-1])
        layer = nxt
    return layer[0]


# Built with constructors rather than Python operators: sqlglot's operators copy both operands,
# which makes large closed forms quadratic to build. Operands are parenthesised explicitly.
def _product(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    return exp.Paren(this=exp.Mul(this=a, expression=_atom(b)))


def _sum(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    return exp.Add(this=a, expression=_atom(b))


def _atom(e: exp.Expression) -> exp.Expression:
    return e if isinstance(e, (exp.Paren, exp.Literal, exp.Case, exp.Column)) else exp.Paren(this=e)


def _factor(node: Node, branch: int, table: str | None) -> exp.Expression:
    assert node.split is not None
    if node.unknown_branch is not None:
        return exp.Case(
            ifs=[exp.If(this=routed_condition(node, branch, table), true=dnum(1.0))],
            default=dnum(0.0),
        )
    return exp.Case(
        ifs=[
            exp.If(this=branch_condition(node.split, branch, table), true=dnum(1.0)),
            exp.If(this=known_condition(node.split, table), true=dnum(0.0)),
        ],
        default=dnum(node.shares[branch]),
    )


def build_probabilities(
    root: Node, n_classes: int, table: str | None = None
) -> list[exp.Expression]:
    """Closed-form class probabilities, exact for any mix of known and unknown values.

    ``P(node) = sum over branches of factor(branch) * P(child)``, a leaf's ``P`` its ``proba``;
    subtrees that give a class no probability are left out of that class's sum.
    """

    def build(node: Node, c: int) -> exp.Expression | None:
        if node.is_leaf:
            p = node.proba[c]
            return dnum(p) if p > 0 else None
        terms = []
        for i, child in enumerate(node.children):
            sub = build(child, c)
            if sub is not None:
                # The CASE skips the child's subtree for rows that do not reach it, so a row
                # evaluates only the branches its known and unknown values lead to.
                factor = _factor(node, i, table)
                terms.append(
                    exp.Case(
                        ifs=[
                            exp.If(
                                this=exp.GT(this=factor, expression=dnum(0.0)),
                                true=_product(factor.copy(), sub),
                            )
                        ],
                        default=dnum(0.0),
                    )
                )
        return _balanced(_sum, terms) if terms else None

    return [build(root, c) or dnum(0.0) for c in range(n_classes)]


def build_argmax(
    probs: Sequence[exp.Expression], labels: Sequence[exp.Expression]
) -> exp.Expression:
    best = exp.func("GREATEST", *[p.copy() for p in probs]) if len(probs) > 1 else probs[0]
    ifs = [
        exp.If(this=exp.GTE(this=p.copy(), expression=best.copy() - dnum(PROBA_TIE)), true=lab)
        for p, lab in zip(probs[:-1], labels[:-1])
    ]
    return exp.Case(ifs=ifs, default=labels[-1])


def compile_label(root: Node, classes: Sequence[Any], table: str | None = None) -> exp.Expression:
    """The predicted class as one SQL expression."""
    labels = [literal(c) for c in classes]
    tree = build_case(root, lambda n: labels[n.label].copy(), table)
    check = guard(root, table)
    if check is None:
        return tree
    fallback = build_argmax(build_probabilities(root, len(classes), table), labels)
    return exp.Case(ifs=[exp.If(this=check, true=tree)], default=fallback)


def compile_proba(root: Node, n_classes: int, table: str | None = None) -> list[exp.Expression]:
    """One probability expression per class."""
    check = guard(root, table)
    closed = build_probabilities(root, n_classes, table) if check is not None else None
    out = []
    for c in range(n_classes):
        tree = build_case(root, lambda n, c=c: dnum(n.proba[c]), table)
        if check is None or closed is None:
            out.append(tree)
        else:
            out.append(exp.Case(ifs=[exp.If(this=check.copy(), true=tree)], default=closed[c]))
    return out


def compile_leaf(root: Node, table: str | None = None) -> exp.Expression:
    """The id of the leaf a row reaches (NULL where a fractional test meets an unknown value)."""
    tree = build_case(root, lambda n: num(n.node_id), table)
    check = guard(root, table)
    if check is None:
        return tree
    return exp.Case(ifs=[exp.If(this=check, true=tree)], default=exp.null())
