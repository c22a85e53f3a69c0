"""Compile an ``Ensemble`` (a forest or boosting, trained or imported) into one scoring query.

The API, for the trainers and importers that produce ensembles::

    sql = ensemble.to_sql("duckdb", table="events", proba=True)   # text, any sqlglot dialect
    report = {}
    ensemble.to_sql("postgres", table="events", report=report)   # form, reason, length
    query = ensemble.scoring_query(relation, columns)            # a sqlglot Select
    frame = ensemble.predict("events.parquet", proba=True)       # scored in the engine
    ensemble.to_dbt("events", "snowflake")                       # a dbt model file
    ensemble.save("model.json"); sqltree.load("model.json")      # the model file

Columns out: the kept source columns, ``prediction`` (the first most probable class, or the
regression value), ``proba_<class>`` with ``proba=True``, ``raw_<i>`` with ``raw=True``.

The query is a chain of steps (common table expressions), each ``SELECT *, <new columns>``
over the step before:

1. **bins**: a numeric feature whose tests share thresholds (``BIN_SHARING``: LightGBM's,
   XGBoost's and HistGradientBoosting's histogram bins) has its distinct thresholds compared
   once per row: its bin is the number of thresholds below the value (``x <= t_j`` exactly
   when ``bin <= j``), found by a CASE that nests 8 ways at a level (about log8(thresholds)
   deep), and its tests compare small integers. A feature whose thresholds are nearly all
   distinct (a random forest's) is compared in the tests themselves.
2. **sums**: each tree is the walk of ``sqltree.compiler``: at every test the smaller child is a
   WHEN and the larger child's tests fold into the same CASE, so a CASE nests about
   log2(leaves) deep; subtrees whose leaves all hold one value are one leaf. A step adds a
   batch of trees to the running sum of the step before (``MAX_TREES_PER_STEP``,
   ``MAX_LEAVES_PER_STEP``), left to right, so every engine's expression depth and parser
   limit is met for any number of trees, and the additions happen in the order
   ``Ensemble.raw_frame`` makes them (bit for bit; each addition rounded to float32 with
   ``precision="float32"``).

   A tree with a row of values a leaf (a forest's class probabilities) is walked once per row
   where the dialect indexes arrays (``INDEXED_ARRAYS``: DuckDB, PostgreSQL, Spark): a
   **walk** step before the batch's sum step gives each tree's leaf position (its leaves
   numbered in the order the CASE writes them, from the dialect's first index, sqlglot's
   ``INDEX_OFFSET``), and the sum step reads each class's value from an array literal of the
   tree's leaves, ``[v_1, v_2, ...][leaf]``: the same doubles added in the same order. Other
   dialects (SQLite has no arrays), and a query built without a dialect, walk the tree once
   per class (a CASE on the position instead was slower on SQLite than the walks).
   On DuckDB (``SORTED_ROWS``), a model of ``SORT_MIN_TREES`` trees or more first walks its
   first ``SORT_TREES`` trees to their leaves' positions and sorts the rows by them: DuckDB
   evaluates a CASE on 2,048 rows at a time, each WHEN that some row of the batch reaches
   costing the batch a selection and a copy, and rows that the first trees sent to the same
   leaves take the same paths through the later ones. The sums read those trees' values by
   position; ``ordered`` numbers the rows first and sorts them back at the end.
3. **link**: the mean (a forest), the sigmoid, softmax or exp (boosting); then the label (the
   first most probable class) and the probability columns.

A NULL goes where the tree sends missing values: each test is written so that its NULL side is
the CASE's fall-through (``b > j`` where NULL goes left, ``b <= j`` where it goes right), and
``OR b IS NULL`` is added only where the NULL side is the smaller child.

Steps end in ``OFFSET 0`` (as in ``compiler.scoring``): PostgreSQL would otherwise pull each
step into the next and compute each bin once per use.

Very large models get the **table** form instead (``form="auto"`` picks it above
``TABLE_FORM_LEAVES`` leaves; ``to_sql(report=...)`` gives the reason): the leaves are rows of a
``VALUES`` table, one per (tree, leaf), holding each feature's interval of bins and the leaf's
values; every row is joined to the leaves whose intervals hold it and the values are added by
``GROUP BY``. The SQL grows with the leaves only as a table of numbers, which every parser
takes at any size, but the sum's order is the engine's (equal to 1e-12, not bit for bit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

from ..compiler import collector_paused
from ..compiler.blocks import (
    cases,
    column,
    dnum,
    in_values,
    inum,
    is_null,
    literal,
    literal_table,
    or_,
)
from ..compiler.scoring import Names
from ..errors import DataError, OptionError
from ..tree import format_value

if TYPE_CHECKING:
    from .model import Ensemble
    from .trees import TreeArrays

MAX_TREES_PER_STEP = 64
"""Trees a step adds to the running sum: the step's expression is this many additions deep
(DuckDB allows 1,000 levels, SQLite 1,000 for an expression tree)."""
MAX_LEAVES_PER_STEP = 6_000
"""Leaves (after merging) a step's trees may hold, so that no single step is huge to plan."""
BIN_SHARING = 2.0
"""A numeric feature gets a bin column when its tests outnumber its distinct thresholds by
this factor (histogram learners: LightGBM, XGBoost, HistGradientBoosting); otherwise (a
random forest's thresholds are nearly all distinct) each test compares the column itself,
which costs only the rows that reach the test, where a bin costs every row."""
BIN_FANOUT = 8
"""Thresholds a bin CASE compares at one level; the CASE nests log8(thresholds) deep."""
TABLE_FORM_LEAVES = 2_000_000
"""``form="auto"`` writes the table form above this many leaves (the expression form's SQL
would pass 100 MB)."""
FORMS = ("auto", "expression", "table")


# -- the rules ---------------------------------------------------------------------------------
def proba_names(ensemble: Ensemble) -> list[str]:
    """``proba_<label>`` per class, refusing labels that differ only in case."""
    names = [f"proba_{format_value(c)}" for c in ensemble.classes]
    if len({n.lower() for n in names}) != len(names):
        raise DataError(f"class labels {ensemble.classes} would name the same probability "
                        "column twice (names are compared without regard to case)")
    return names


@dataclass
class Bins:
    """Each numeric feature's sorted distinct thresholds (only the features tests compare)."""

    thresholds: dict[int, np.ndarray]

    @classmethod
    def of(cls, ensemble: Ensemble, sharing: float = BIN_SHARING) -> Bins:
        per: dict[int, list[np.ndarray]] = {}
        for t in ensemble.trees:
            numeric = ~t.is_leaf
            for node in t.categories:
                numeric[node] = False
            for f in np.unique(t.feature[numeric]):
                per.setdefault(int(f), []).append(t.threshold[numeric & (t.feature == f)])
        kept = {}
        for f, v in sorted(per.items()):
            tested = np.concatenate(v)
            distinct = np.unique(tested)
            if tested.size >= sharing * distinct.size:
                kept[f] = distinct
        return cls(kept)

    def index(self, feature: int, threshold: float) -> int:
        return int(np.searchsorted(self.thresholds[feature], threshold))

    @property
    def n_thresholds(self) -> int:
        return sum(len(v) for v in self.thresholds.values())


def build_bin(x: exp.Expression, thresholds: np.ndarray) -> exp.Expression:
    """The number of ``thresholds`` (sorted) below ``x``; NULL where ``x`` is NULL."""
    ts = [float(t) for t in thresholds]

    def level(lo: int, hi: int, top: bool) -> exp.Expression:
        # thresholds ts[lo:hi]; the answer is in lo..hi
        n = hi - lo
        if n == 0:
            return inum(lo)
        if n < BIN_FANOUT:
            pivots = list(range(lo, hi))
        else:
            step = n / BIN_FANOUT
            pivots = sorted({lo + int(step * (i + 1)) - 1 for i in range(BIN_FANOUT - 1)})
        ifs, start = [], lo
        for p in pivots:
            ifs.append((exp.LTE(this=x.copy(), expression=dnum(ts[p], double=False)),
                        level(start, p, False)))
            start = p + 1
        last = level(start, hi, False)
        if top:  # no ELSE at the top: a NULL fails every test and stays NULL
            ifs.append((exp.GT(this=x.copy(), expression=dnum(ts[pivots[-1]], double=False)),
                        last))
            return cases(ifs, None)
        return cases(ifs, last)

    if not ts:
        return exp.Null()
    return level(0, len(ts), True)


# -- one tree ----------------------------------------------------------------------------------
def _uniform(tree: TreeArrays, values: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node: whether its leaves all hold one value, its leaves after merging those, and
    the value of a node whose leaves hold one (``values`` is one value or one row of values a
    node: then a node's leaves hold one value when they hold one row)."""
    n = tree.n_nodes
    same = np.zeros(n, dtype=bool)
    size = np.ones(n, dtype=np.int64)
    val = values.astype(np.float64).copy()
    rows = val.ndim == 2
    order = _postorder(tree)
    for node in order:
        left, right = tree.left[node], tree.right[node]
        if left < 0:
            same[node] = True
            continue
        if same[left] and same[right] and (
                (val[left] == val[right]).all() if rows else val[left] == val[right]):
            same[node], val[node] = True, val[left]
        else:
            size[node] = size[left] + size[right]
    return same, size, val


def _postorder(tree: TreeArrays) -> list[int]:
    out, stack = [], [0]
    while stack:
        node = stack.pop()
        out.append(node)
        if tree.left[node] >= 0:
            stack += [int(tree.left[node]), int(tree.right[node])]
    return out[::-1]


@dataclass
class _Tests:
    """Writes a node's test for one side, given the model's features and bins."""

    ensemble: Ensemble
    bins: Bins
    names: Names
    table: str | None = None

    def side(self, tree: TreeArrays, node: int, go_left: bool) -> exp.Expression | None:
        """True for every row that goes to the ``go_left`` side (None: no row does)."""
        f = int(tree.feature[node])
        missing_here = bool(tree.missing_left[node]) == go_left
        if node in tree.categories:
            x = column(self.ensemble.features[f].name, self.table)
            cats = tree.categories[node]
            if go_left:
                cond = in_values(x, list(cats))
            else:
                listed = in_values(x, list(cats))
                cond = (exp.Not(this=is_null(x)) if listed is None
                        else exp.Not(this=exp.Paren(this=listed)))
        elif f in self.bins.thresholds:
            x = self.names.ref(f"b{f}", self.table)
            j = inum(self.bins.index(f, float(tree.threshold[node])))
            cond = exp.LTE(this=x, expression=j) if go_left else exp.GT(this=x, expression=j)
        else:
            x = column(self.ensemble.features[f].name, self.table)
            t = dnum(float(tree.threshold[node]), double=False)
            cond = exp.LTE(this=x, expression=t) if go_left else exp.GT(this=x, expression=t)
        if missing_here:
            null = is_null(x.copy())
            return null if cond is None else or_(cond, null)
        return cond


def _rounded(values: np.ndarray, tests: _Tests) -> np.ndarray:
    """The values as the model holds them (a float32 model's, rounded to float32)."""
    if tests.ensemble.precision == "float32":
        return values.astype(np.float32).astype(np.float64)
    return values


def _walk(tree: TreeArrays, same: np.ndarray, size: np.ndarray, tests: _Tests,
          leaf: Callable[[int], exp.Expression]) -> exp.Expression:
    """The merged, folded CASE over the tree, ``leaf(node)`` at each (merged) leaf, in the
    order the CASE writes them."""
    def chain(node: int) -> exp.Expression:
        ifs: list[tuple[exp.Expression, exp.Expression]] = []
        while not same[node]:
            left, right = int(tree.left[node]), int(tree.right[node])
            # Fold the larger child; on a tie, the one missing values go to (no IS NULL test).
            heavy_left = (size[left], bool(tree.missing_left[node])) >= (
                size[right], not tree.missing_left[node])
            light = right if heavy_left else left
            cond = tests.side(tree, node, go_left=not heavy_left)
            if cond is not None:
                ifs.append((cond, chain(light)))
            node = left if heavy_left else right
        value = leaf(node)
        return cases(ifs, value) if ifs else value

    return chain(0)


def build_tree(tree: TreeArrays, values: np.ndarray, tests: _Tests) -> exp.Expression:
    """The tree's value (``values[node]`` at each leaf) as the merged, folded CASE."""
    same, size, val = _uniform(tree, _rounded(values, tests))
    return _walk(tree, same, size, tests, lambda node: dnum(float(val[node])))


def build_leaf_walk(tree: TreeArrays, tests: _Tests, base: int
                    ) -> tuple[exp.Expression, np.ndarray]:
    """The walk of a tree with a row of values a leaf (a forest's classes): the CASE yields
    the reached leaf's position, ``base``, ``base + 1``, ... (subtrees whose leaves hold one
    row are one leaf); returns it and the rows of values by position."""
    same, size, val = _uniform(tree, _rounded(tree.value, tests))
    rows: list[np.ndarray] = []

    def leaf(node: int) -> exp.Expression:
        rows.append(val[node])
        return inum(base + len(rows) - 1)

    walk = _walk(tree, same, size, tests, leaf)
    return walk, np.array(rows)


def build_leaf_value(values: np.ndarray, position: exp.Expression, base: int
                     ) -> exp.Expression:
    """``values[position - base]``: an array literal indexed by the walk's position (the
    value itself where every leaf holds it)."""
    if np.all(values == values[0]):
        return dnum(float(values[0]))
    return exp.Bracket(this=exp.Array(expressions=[dnum(float(v)) for v in values]),
                       expressions=[position], offset=base)


# -- the query ---------------------------------------------------------------------------------
def _step(select: exp.Select, name: exp.Identifier) -> exp.CTE:
    return exp.CTE(this=select.offset(0, copy=False), alias=exp.TableAlias(this=name))


def _as(e: exp.Expression, name: exp.Identifier | str) -> exp.Alias:
    ident = name if isinstance(name, exp.Identifier) else exp.to_identifier(name, quoted=True)
    return exp.Alias(this=e, alias=ident)


def _float32(e: exp.Expression) -> exp.Expression:
    return exp.Cast(this=e, to=exp.DataType.build("FLOAT"))


def _batches(leaves: list[int]) -> list[list[int]]:
    """Consecutive trees in steps of at most ``MAX_TREES_PER_STEP`` trees and
    ``MAX_LEAVES_PER_STEP`` leaves (a larger tree gets a step of its own)."""
    out: list[list[int]] = [[]]
    held = 0
    for i, n in enumerate(leaves):
        if out[-1] and (len(out[-1]) >= MAX_TREES_PER_STEP or held + n > MAX_LEAVES_PER_STEP):
            out.append([])
            held = 0
        out[-1].append(i)
        held += n
    return out


def _outputs(ensemble: Ensemble, tree: TreeArrays) -> list[tuple[int, np.ndarray]]:
    """(output column, node values) pairs a tree adds to."""
    if tree.output is not None:
        return [(tree.output, tree.value[:, 0])]
    return [(c, tree.value[:, c]) for c in range(tree.value.shape[1])]


@dataclass
class Compiled:
    """A compiled ensemble: the query, and how it was written."""

    query: exp.Select
    form: str
    reason: str
    n_steps: int
    n_thresholds: int


def choose_form(ensemble: Ensemble, form: str = "auto") -> tuple[str, str]:
    """The form to write and why."""
    if form not in FORMS:
        raise OptionError(f"form is one of {FORMS}, not {form!r}")
    leaves = ensemble.n_leaves
    if form != "auto":
        return form, f"form={form!r} was asked for"
    if leaves > TABLE_FORM_LEAVES:
        return "table", (f"{leaves:,} leaves is more than {TABLE_FORM_LEAVES:,}: the "
                         "expression would be too large to parse and plan; the leaves are "
                         "a table of intervals joined to the rows")
    return "expression", (f"{leaves:,} leaves: the trees as CASE expressions, "
                          f"{MAX_TREES_PER_STEP} trees or {MAX_LEAVES_PER_STEP:,} leaves a step")


def build_ensemble_query(
    ensemble: Ensemble,
    relation: exp.Expression,
    columns: Sequence[str] | None = None,
    *,
    column_name: str = "prediction",
    proba: bool = False,
    raw: bool = False,
    form: str = "auto",
    dialect: str | None = None,
    ordered: bool = False,
    proba_columns: Sequence[str] | None = None,
) -> Compiled:
    """``SELECT <columns>, <prediction> [, proba_<class>...] [, raw_<i>...] FROM relation``.

    ``columns`` are the relation's columns to keep (default: the model's features). ``raw``
    adds the raw scores before the link (``raw_0``, ...). ``dialect`` is the one the query
    will be written in: a float32 model rounds by arithmetic in ``NO_FLOAT32`` dialects, and
    a forest's trees are walked once per row in ``INDEXED_ARRAYS`` dialects (the positions
    count from that dialect's first index; without a dialect, a walk per class, which every
    dialect reads). ``ordered`` returns the rows in the relation's order: the expression form
    keeps it (each step is a projection of the one before), the table form's join and
    ``GROUP BY`` do not, so there the rows are sorted by the row number they were given
    before the join (as ``Model.predict`` restores the order of a tree's expansion query).
    ``proba_columns`` name the probability columns (default ``proba_names``:
    ``proba_<class>``).
    """
    arith = dialect in NO_FLOAT32
    chosen, reason = choose_form(ensemble, form)
    keep = list(columns) if columns is not None else ensemble.feature_names
    outputs = [column_name]
    probas: list[str] = []
    if proba:
        if ensemble.is_regression:
            raise OptionError("a regression model predicts a number, not probabilities")
        probas = list(proba_columns) if proba_columns is not None else proba_names(ensemble)
        if len(probas) != len(ensemble.classes):
            raise OptionError(f"{len(probas)} probability columns named for "
                              f"{len(ensemble.classes)} classes")
        outputs += probas
    n_out = ensemble.n_outputs
    if raw:
        outputs += [f"raw_{i}" for i in range(n_out)]
    lowered = [o.lower() for o in outputs]
    if len(set(lowered)) != len(lowered):
        raise DataError(f"output columns repeat: {outputs}")
    clash = sorted({c for c in keep if c.lower() in lowered})
    if clash:
        raise DataError(f"the source already has columns {clash}; choose another column=")
    nm = Names.for_query(relation, [*keep, *outputs, *ensemble.feature_names])
    with collector_paused():
        sort = (chosen == "expression" and dialect in SORTED_ROWS
                and ensemble.n_trees >= SORT_MIN_TREES)
        if chosen == "table":
            steps, sums, n_steps, n_thr = _table_steps(ensemble, relation, nm)
        else:
            steps, sums, n_steps, n_thr = _expression_steps(
                ensemble, relation, nm, arith, index_base(dialect), sort=sort,
                numbered=sort and ordered)
        query = _finish(ensemble, steps, sums, nm, keep, column_name, probas, raw, arith)
        if ordered and (chosen == "table" or sort):
            query = query.order_by(nm.ref("row"), copy=False)
    return Compiled(query, chosen, reason, n_steps, n_thr)


def _bins_step(ensemble: Ensemble, relation: exp.Expression, nm: Names,
               sharing: float = BIN_SHARING, numbered: bool = False) -> tuple[exp.CTE, Bins]:
    bins = Bins.of(ensemble, sharing)
    number = [_as(exp.Window(this=exp.RowNumber()), nm.ident("row"))] if numbered else []
    select = exp.Select(expressions=[exp.Star(), *number] + [
        _as(build_bin(column(ensemble.features[f].name), ts), nm.ident(f"b{f}"))
        for f, ts in bins.thresholds.items()
    ]).from_(relation.copy(), copy=False)
    return _step(select, nm.ident("bins")), bins


def _tree_terms(ensemble: Ensemble, tree: TreeArrays, tests: _Tests, base: int | None,
                position: exp.Column, walked: tuple[exp.Expression, np.ndarray] | None = None
                ) -> tuple[list[tuple[int, exp.Expression]], exp.Expression | None]:
    """(output, expression) pairs a tree adds, and the walk to its leaf's ``position`` that
    they read (None: each expression walks the tree, or the walk was made before). A tree
    with a row of values a leaf is walked once where arrays are indexed (``base``: the
    dialect's first index); so is any tree whose walk a step before made (``walked``: that
    walk and its leaves' values, as ``build_leaf_walk`` returns them)."""
    if walked is not None:
        _, rows = walked
        return [(c, _double(build_leaf_value(rows[:, j], position.copy(), int(base or 0))))
                for j, (c, _) in enumerate(_outputs(ensemble, tree))], None
    if base is None or tree.output is not None or tree.value.shape[1] == 1:
        return [(c, _double(build_tree(tree, v, tests)))
                for c, v in _outputs(ensemble, tree)], None
    walk, rows = build_leaf_walk(tree, tests, base)
    if len(rows) == 1:  # every leaf holds the same row
        return [(c, _double(dnum(float(v)))) for c, v in enumerate(rows[0])], None
    return [(c, _double(build_leaf_value(rows[:, c], position.copy(), base)))
            for c in range(rows.shape[1])], walk


def _sort_step(ensemble: Ensemble, tests: _Tests, base: int, nm: Names, previous: exp.Identifier
               ) -> tuple[list[exp.CTE], dict[int, tuple[exp.Expression, np.ndarray]]]:
    """The leaves of the first ``SORT_TREES`` trees, and the rows sorted by them (see
    ``SORTED_ROWS``); returns the steps and each sorting tree's walk and leaf values, which
    the sums read instead of walking the tree again."""
    walked: dict[int, tuple[exp.Expression, np.ndarray]] = {}
    for i, t in enumerate(ensemble.trees[:SORT_TREES]):
        walk, rows = build_leaf_walk(t, tests, base)
        if len(rows) > 1:  # a tree of one leaf sorts nothing
            walked[i] = (walk, rows)
    if not walked:
        return [], {}
    keys = [nm.ref(f"leaf{i}") for i in walked]
    walk_step = exp.Select(expressions=[exp.Star()] + [
        _as(w, nm.ident(f"leaf{i}")) for i, (w, _) in walked.items()]).from_(
        exp.Table(this=previous.copy()), copy=False)
    sort_step = exp.Select(expressions=[exp.Star()]).from_(
        exp.Table(this=nm.ident("walked")), copy=False).order_by(*keys, copy=False)
    return [_step(walk_step, nm.ident("walked")), _step(sort_step, nm.ident("sorted"))], walked


def _double(e: exp.Expression) -> exp.Expression:
    """A tree's value typed DOUBLE, whatever type the engine gives its literals: PostgreSQL
    reads ``0.6e0`` as NUMERIC, and sums of NUMERICs part from the doubles ``raw_frame`` adds
    in the last bit (a literal's exact decimal, cast once, is the double it was written from)."""
    return exp.Cast(this=e, to=exp.DataType.build("DOUBLE"))


def _expression_steps(ensemble: Ensemble, relation: exp.Expression, nm: Names,
                      arith: bool = False, base: int | None = None, sort: bool = False,
                      numbered: bool = False
                      ) -> tuple[list[exp.CTE], list[exp.Expression], int, int]:
    """The bins, then the running sums (each batch's walks first where ``base``, the
    dialect's first array index, is given; with ``sort`` the rows sorted by the leaves of the
    first trees before, ``SORTED_ROWS``; ``numbered`` gives each row its number first, to
    restore the relation's order after); returns the steps and the raw scores' expressions."""
    bins_cte, bins = _bins_step(ensemble, relation, nm, numbered=numbered)
    steps = [bins_cte]
    tests = _Tests(ensemble, bins, nm)
    previous = nm.ident("bins")
    made: dict[int, tuple[exp.Expression, np.ndarray]] = {}
    if sort and base is not None:
        sorting, made = _sort_step(ensemble, tests, base, nm, previous)
        steps += sorting
        if sorting:
            previous = nm.ident("sorted")
    f32 = ensemble.precision == "float32"
    arith = arith and f32
    r = _rounder(f32, arith)
    n_out = ensemble.n_outputs

    # the running sums: None until a tree adds to an output (a mean starts at its first tree)
    current: list[exp.Expression | None] = [None] * n_out
    if ensemble.aggregation == "sum":
        current = [_double(dnum(float(np.float32(b)) if f32 else float(b)))
                   for b in ensemble.base_score]
    leaves = [t.n_leaves for t in ensemble.trees]
    batches = _single_additions(ensemble) if arith else _batches(leaves)
    for k, batch in enumerate(batches):
        terms: list[exp.Expression | None] = list(current)
        touched: set[int] = set()
        walks: list[exp.Expression] = []
        for i in batch:
            t = ensemble.trees[i]
            added, walk = _tree_terms(ensemble, t, tests, base, nm.ref(f"leaf{i}"),
                                      made.get(i))
            if walk is not None:
                walks.append(_as(walk, nm.ident(f"leaf{i}")))
            for c, e in added:
                before = terms[c]
                if before is None:
                    terms[c] = e
                elif arith:  # a column holds an unrounded sum; the base is a float32
                    terms[c] = exp.Add(this=r(before) if isinstance(before, exp.Column)
                                       else before, expression=e)
                else:
                    terms[c] = r(exp.Add(this=before, expression=e))
                touched.add(c)
        if walks:  # the leaves the batch's trees reach, a step before their values
            walked = exp.Select(expressions=[exp.Star(), *walks]).from_(
                exp.Table(this=previous.copy()), copy=False)
            steps.append(_step(walked, nm.ident(f"walk{k}")))
            previous = nm.ident(f"walk{k}")
        names = [nm.ident(f"s{k}_{c}") for c in range(n_out)]
        select = exp.Select(expressions=[exp.Star()] + [
            _as(term if term is not None else dnum(0.0), name)
            for c, (term, name) in enumerate(zip(terms, names)) if not arith or c in touched
        ]).from_(exp.Table(this=previous.copy()), copy=False)
        steps.append(_step(select, nm.ident(f"sum{k}")))
        for c in (touched if arith else range(n_out)):
            current[c] = nm.ref(f"s{k}_{c}")
        previous = nm.ident(f"sum{k}")
    sums = [c if c is not None else dnum(0.0) for c in current]
    if arith:  # the last additions, rounded
        sums = [r(c) if isinstance(c, exp.Column) else c for c in sums]
    return steps, sums, len(steps), bins.n_thresholds


def _single_additions(ensemble: Ensemble) -> list[list[int]]:
    """Trees in runs that add to distinct outputs: each output gets one addition a step."""
    out: list[list[int]] = [[]]
    seen: set[int] = set()
    for i, t in enumerate(ensemble.trees):
        outputs = {t.output} if t.output is not None else set(range(t.value.shape[1]))
        if seen & outputs:
            out.append([])
            seen = set()
        out[-1].append(i)
        seen |= outputs
    return out


INDEXED_ARRAYS = ("duckdb", "postgres", "spark")
"""Dialects whose engines index an array literal, as each engine's tests check: there a tree
with a row of values a leaf (a forest's classes) is walked once per row, to its leaf's
position, and each value is read from an array of the leaves' values. Elsewhere (SQLite has
no arrays; a query built without a dialect) each value walks the tree."""


SORTED_ROWS = ("duckdb",)
"""Dialects whose engines walk a tree faster over rows sorted by where earlier trees sent
them: DuckDB evaluates a ``CASE`` on a batch of 2,048 rows, every ``WHEN`` some row of the
batch reaches costing the batch a selection and a copy, so rows that take the same paths
share that cost. There the rows are sorted by the leaves of the first ``SORT_TREES``
trees before the sums (whose values those trees then read by leaf). Engines that evaluate
a row at a time (PostgreSQL, SQLite, Spark's generated code) gain nothing from the order
and would pay for the sort."""
SORT_TREES = 9
"""Trees whose leaves sort the rows (``SORTED_ROWS``): sorting by 4 to 15 trees scored a
300-tree model about equally fast, and more keys cost more to sort than they save
(benchmarks/README.md, "Many-tree scoring over rows sorted by the first trees' leaves")."""
SORT_MIN_TREES = 50
"""Models of fewer trees are not sorted: a sort of the rows costs about what the walks of
30 to 50 trees gain from it."""


def index_base(dialect: str | None) -> int | None:
    """The dialect's first array index (sqlglot's ``INDEX_OFFSET``: 1 in DuckDB and PostgreSQL,
    0 in Spark), or None where arrays are not indexed (``INDEXED_ARRAYS``)."""
    if dialect not in INDEXED_ARRAYS:
        return None
    return int(Dialect.get_or_raise(dialect).INDEX_OFFSET)


SPLITTER = 2.0 ** 29 + 1
"""Veltkamp's splitter: ``c = x * SPLITTER; c - (c - x)`` is ``x`` rounded to float32's 24
bits (to nearest, ties to even, in double arithmetic), for engines without a 32-bit float."""
NO_FLOAT32 = ("sqlite",)
"""Dialects whose engines have no 32-bit float type (SQLite's REAL is a double): float32
models round by arithmetic (``SPLITTER``), a step per addition."""


def _rounder(f32: bool, arith: bool) -> Any:
    """``r(e)``: ``e`` rounded as the model rounds (``e`` is a column or a small expression:
    arithmetic rounding writes it three times)."""
    def r(e: exp.Expression) -> exp.Expression:
        if not f32:
            return e
        if not arith:
            return _float32(e)
        c = exp.Mul(this=exp.Paren(this=e.copy()), expression=dnum(SPLITTER))
        return exp.Paren(this=exp.Sub(this=c, expression=exp.Paren(this=exp.Sub(
            this=c.copy(), expression=exp.Paren(this=e.copy())))))
    return r


def _finish(ensemble: Ensemble, steps: list[exp.CTE], sums: list[exp.Expression], nm: Names,
            keep: Sequence[str], column_name: str, probas: Sequence[str], raw: bool,
            arith: bool = False) -> exp.Select:
    """The link's steps and the final SELECT over the last step (``probas``: the probability
    columns' names, none without probabilities)."""
    f32 = ensemble.precision == "float32"
    n_out = len(sums)
    r = _rounder(f32, arith)
    last = [steps[-1].alias_or_name]

    def step(columns: dict[str, exp.Expression]) -> None:
        select = exp.Select(expressions=[exp.Star()] + [
            _as(e, nm.ident(name)) for name, e in columns.items()])
        select = select.from_(exp.Table(this=exp.to_identifier(last[0], quoted=True)),
                              copy=False)
        name = f"link{len(steps)}"
        steps.append(_step(select, nm.ident(name)))
        last[0] = nm.prefix + name

    def one() -> exp.Expression:
        return dnum(1.0)

    raw_exprs = [s.copy() for s in sums]
    if ensemble.aggregation == "mean":
        raw_exprs = [exp.Div(this=exp.Paren(this=s), expression=dnum(float(ensemble.n_trees)))
                     for s in raw_exprs]
    step({f"raw{c}": e for c, e in enumerate(raw_exprs)})
    raw_cols = [nm.ref(f"raw{c}") for c in range(n_out)]
    link = ensemble.link
    if link == "identity":
        link_cols = [c.copy() for c in raw_cols]
    elif link == "exp":
        link_cols = [r(exp.Exp(this=raw_cols[0].copy()))]
    elif link == "sigmoid":
        step({"e": r(exp.Exp(this=exp.Neg(this=exp.Paren(this=raw_cols[0].copy()))))})
        step({"d": r(exp.Add(this=one(), expression=nm.ref("e")))})
        step({"p1": r(exp.Div(this=one(), expression=nm.ref("d")))})
        p1 = nm.ref("p1")
        link_cols = [r(exp.Sub(this=one(), expression=p1.copy())), p1.copy()]
    elif link == "softmax":
        top = exp.Greatest(this=raw_cols[0].copy(), expressions=[c.copy() for c in raw_cols[1:]])
        step({f"x{i}": r(exp.Sub(this=c.copy(), expression=top.copy()))
              for i, c in enumerate(raw_cols)})
        step({f"e{i}": r(exp.Exp(this=nm.ref(f"x{i}"))) for i in range(n_out)})
        total = "e0"
        for i in range(1, n_out):
            step({f"total{i}": r(exp.Add(this=nm.ref(total), expression=nm.ref(f"e{i}")))})
            total = f"total{i}"
        link_cols = [r(exp.Div(this=nm.ref(f"e{i}"), expression=nm.ref(total)))
                     for i in range(n_out)]
    else:
        raise OptionError(f"unknown link {link!r}")
    step({f"out{i}": e for i, e in enumerate(link_cols)})

    outs: list[exp.Expression] = [nm.ref(f"out{i}") for i in range(len(link_cols))]
    if f32 and not arith:  # as doubles: drivers print a REAL shortest, which a double misreads
        outs = [exp.Cast(this=o, to=exp.DataType.build("DOUBLE")) for o in outs]
    select = exp.Select(expressions=[column(c) for c in keep])
    if ensemble.is_regression:
        select.append("expressions", _as(outs[0], column_name))
    else:
        labels = [literal(c) for c in ensemble.classes]
        select.append("expressions", _as(build_first_max(outs, labels), column_name))
        for o, name in zip(outs, probas):
            select.append("expressions", _as(o.copy(), name))
    if raw:
        for c in range(n_out):
            select.append("expressions", _as(nm.ref(f"raw{c}"), f"raw_{c}"))
    select = select.from_(exp.Table(this=exp.to_identifier(last[0], quoted=True)), copy=False)
    select.set("with_", exp.With(expressions=steps))
    return select


def build_first_max(values: Sequence[exp.Expression], labels: Sequence[exp.Expression]
                    ) -> exp.Expression:
    """The label of the first largest value (numpy's ``argmax``)."""
    ifs = []
    for i in range(len(values) - 1):
        rest = [v.copy() for v in values[i + 1:]]
        best = rest[0] if len(rest) == 1 else exp.Greatest(this=rest[0], expressions=rest[1:])
        ifs.append((exp.GTE(this=values[i].copy(), expression=best), labels[i]))
    return cases(ifs, labels[-1]) if ifs else labels[0]


# -- the table form ----------------------------------------------------------------------------
def _leaf_boxes(tree: TreeArrays, bins: Bins
                ) -> list[tuple[int, list[tuple[int, int, int]], list[tuple[int, Any]]]]:
    """Each leaf's box: per numeric feature on its path (lowest bin, highest bin, 1 where
    NULL reaches the leaf, else 0), and its categorical conditions (node, side)."""
    out = []
    stack: list[tuple[int, dict[int, tuple[int, int, int]], list[tuple[int, bool]]]] = [
        (0, {}, [])]
    while stack:
        node, box, cats = stack.pop()
        if tree.left[node] < 0:
            out.append((node, sorted((f, *v) for f, v in box.items()), cats))  # type: ignore
            continue
        f = int(tree.feature[node])
        for go_left, child in ((True, int(tree.left[node])), (False, int(tree.right[node]))):
            miss = bool(tree.missing_left[node]) == go_left
            if node in tree.categories:
                stack.append((child, dict(box), [*cats, (node, go_left)]))
                continue
            j = bins.index(f, float(tree.threshold[node]))
            lo, hi, null = box.get(f, (0, len(bins.thresholds[f]), 1))
            lo, hi = (lo, min(hi, j)) if go_left else (max(lo, j + 1), hi)
            null = null if miss else 0
            nb = dict(box)
            nb[f] = (lo, hi, null)
            stack.append((child, nb, cats))
    return out  # type: ignore[return-value]


def _table_steps(ensemble: Ensemble, relation: exp.Expression, nm: Names
                 ) -> tuple[list[exp.CTE], list[exp.Expression], int, int]:
    """Bins, a row number, the leaves as interval rows, and their sum by row."""
    if ensemble.precision == "float32":
        raise OptionError("the table form adds in double: a float32 model needs "
                          "form='expression'")
    if any(t.categories for t in ensemble.trees):
        raise OptionError("the table form holds numeric tests only; use form='expression'")
    bins_cte, bins = _bins_step(ensemble, relation, nm, sharing=0.0)
    feats = list(bins.thresholds)
    n_out = ensemble.n_outputs
    numbered = exp.Select(expressions=[exp.Star(), _as(
        exp.Window(this=exp.RowNumber()), nm.ident("row"))]).from_(
        exp.Table(this=nm.ident("bins")), copy=False)
    rows = []
    for t in ensemble.trees:
        for node, box, _ in _leaf_boxes(t, bins):
            values = [0.0] * n_out
            for c, v in _outputs(ensemble, t):
                values[c] = float(v[node])
            bounds = {f: (lo, hi, null) for f, lo, hi, null in box}
            row: list[float | int] = []
            for f in feats:
                lo, hi, null = bounds.get(f, (0, len(bins.thresholds[f]), 1))
                row += [lo, hi, null]
            rows.append(row + values)
    names = [f"{p}{f}" for f in feats for p in ("lo", "hi", "nl")] + [
        f"v{c}" for c in range(n_out)]
    types = ["INT"] * (3 * len(feats)) + ["DOUBLE"] * n_out
    leaves = literal_table(f"{nm.prefix}leaves", [nm.prefix + n for n in names], rows, types)
    on: exp.Expression = exp.Boolean(this=True)
    for f in feats:
        b = nm.ref(f"b{f}", "r")
        inside = exp.And(this=exp.GTE(this=b, expression=nm.ref(f"lo{f}", "l")),
                         expression=exp.LTE(this=b.copy(), expression=nm.ref(f"hi{f}", "l")))
        null = exp.And(this=is_null(b.copy()), expression=exp.EQ(
            this=nm.ref(f"nl{f}", "l"), expression=inum(1)))
        on = exp.And(this=on, expression=exp.Paren(this=or_(exp.Paren(this=inside), null)))
    summed = exp.Select(expressions=[nm.ref("row", "l2")] + [
        _as(exp.Sum(this=nm.ref(f"v{c}", "l")), nm.ident(f"t{c}")) for c in range(n_out)])
    summed = summed.from_(exp.alias_(exp.Table(this=nm.ident("numbered")), "r"), copy=False)
    summed.set("expressions", [_as(nm.ref("row", "r"), nm.ident("row")), *summed.expressions[1:]])
    leaves.set("alias", exp.TableAlias(this=exp.to_identifier("l")))
    summed = summed.join(leaves, on=on, copy=False).group_by(nm.ref("row", "r"), copy=False)
    joined = exp.Select(expressions=[exp.Column(this=exp.Star(), table=exp.to_identifier("n"))]
                        + [_as(nm.ref(f"t{c}", "s"), nm.ident(f"t{c}")) for c in range(n_out)])
    joined = joined.from_(exp.alias_(exp.Table(this=nm.ident("numbered")), "n"), copy=False)
    joined = joined.join(exp.alias_(exp.Table(this=nm.ident("summed")), "s"),
                         on=exp.EQ(this=nm.ref("row", "n"), expression=nm.ref("row", "s")),
                         join_type="left", copy=False)
    steps = [bins_cte, _step(numbered, nm.ident("numbered")),
             _step(summed, nm.ident("summed")), _step(joined, nm.ident("joined"))]
    base = ([float(b) for b in ensemble.base_score] if ensemble.aggregation == "sum"
            else [0.0] * n_out)
    sums: list[exp.Expression] = [
        exp.Add(this=dnum(b), expression=exp.Coalesce(this=nm.ref(f"t{c}"),
                                                      expressions=[dnum(0.0)]))
        for c, b in enumerate(base)]
    return steps, sums, len(steps), bins.n_thresholds


def sql_report(ensemble: Ensemble, compiled: Compiled, sql: str, dialect: str) -> dict[str, Any]:
    """What was written: form, reason, characters, bytes per leaf."""
    leaves = ensemble.n_leaves
    return {
        "form": compiled.form,
        "reason": compiled.reason,
        "dialect": dialect,
        "characters": len(sql),
        "bytes": len(sql.encode("utf-8")),
        "leaves": leaves,
        "bytes_per_leaf": round(len(sql.encode("utf-8")) / max(leaves, 1), 2),
        "steps": compiled.n_steps,
        "thresholds": compiled.n_thresholds,
        "trees": ensemble.n_trees,
    }
