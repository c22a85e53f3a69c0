"""Property tests (hypothesis): random hostile tables, every algorithm and option family.

Tables, options and bad inputs come from ``tests/strategies.py``. Profiles are registered in
``tests/conftest.py`` and chosen with ``SQLTREE_HYPOTHESIS_PROFILE``:

- ``default`` (CI): derandomized, so every run tries the same examples; no deadline, no
  example database. The DuckDB/SQLite properties take about two minutes on a 2-core machine.
- ``thorough``: ten times the examples, new ones each run, failures kept in the local
  example database::

      SQLTREE_HYPOTHESIS_PROFILE=thorough python -m pytest -q tests/test_properties.py

Example counts below are written for ``default`` (``max_examples=100``) and scale with the
profile's ``max_examples``. A failing table prints as a ``Table``; ``Table.literal()`` gives
the source of a regression test for ``tests/test_regressions_found.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import math
import os
import random
import sqlite3
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import duckdb
import pandas as pd
import pytest
import sqlglot
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from sqlglot import exp

import sqltree
from sqltree.model import Model
from sqltree.tree import format_value
from tests.conftest import EngineFactory
from tests.helpers import mixed_table
from tests.strategies import (
    DATA_REFUSALS,
    OPTION_REFUSALS,
    SOURCE_REFUSALS,
    SQLITE_TYPES,
    Refusal,
    Table,
    TableSpec,
    corrupt_model_files,
    pruned_cases,
    refusals,
    scoring_tables,
    trained_cases,
)

# Input families left out of the valid tables until their bugs are fixed (each has a test in
# tests/test_regressions_found.py).
SPEC = TableSpec(
    infinities=(math.inf,),  # -infinity is refused (a refusal below)
    nominal_infinities=False,  # unassigned bug: an infinite nominal value has no SQL literal
    binned_extremes=False,  # unassigned bug: max_bins over an overflowing range gives NaN bins
)
VALID = trained_cases(SPEC)

TOL = 1e-9
SCALE = settings.default.max_examples / 100


def examples(n: int) -> int:
    """``n`` examples in the default profile, scaled by the loaded profile."""
    return max(1, round(n * SCALE))


# -- loading a table into the engines ----------------------------------------------------------
TABLE = exp.Table(this=exp.to_identifier("t", quoted=True))
SCORED = "s"
"""Where the trained-models property keeps the rows it scores (training rows and new rows)."""


def duckdb_with(table: Table, **more: Table) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB database holding the table as ``t`` (and each of ``more`` under
    its keyword)."""
    con = duckdb.connect()
    for name, rows in {"t": table, **more}.items():
        con.register("src", rows.arrow())
        target = exp.Table(this=exp.to_identifier(name, quoted=True))
        con.execute(
            exp.Create(this=target, kind="TABLE", expression=exp.select("*").from_("src"))
            .sql("duckdb")
        )
        con.unregister("src")
    return con


def stacked(table: Table, more: Table) -> Table:
    """The rows of ``table`` and then those of ``more``, which has the same columns."""
    assert [(c.name, c.kind) for c in table.columns] == [(c.name, c.kind) for c in more.columns]
    columns = tuple(dataclasses.replace(a, values=a.values + b.values)
                    for a, b in zip(table.columns, more.columns))
    return Table(columns, table.target, table.weight)


def sqlite_with(table: Table) -> sqlite3.Connection:
    """SQLite (Python's sqlite3) holding the table as ``t``; booleans are stored as 0/1."""
    con = sqlite3.connect(":memory:")
    schema = exp.Schema(this=TABLE.copy(), expressions=[
        exp.ColumnDef(this=exp.to_identifier(c.name, quoted=True),
                      kind=exp.DataType.build(SQLITE_TYPES[c.kind]))
        for c in table.columns
    ])
    con.execute(exp.Create(this=schema, kind="TABLE").sql("sqlite"))
    insert = exp.Insert(this=TABLE.copy(), expression=exp.Values(expressions=[
        exp.Tuple(expressions=[exp.Placeholder() for _ in table.columns])]))
    values = list(zip(*(c.values for c in table.columns)))
    con.executemany(insert.sql("sqlite"), values)
    return con


SOURCES = ("table", "query", "frame")


def source_of(table: Table, kind: str) -> Any:
    if kind == "table":
        return "t"
    if kind == "query":
        return "SELECT * FROM t"
    return table.frame()


def train(table: Table, opts: dict[str, Any], con: Any, source: str = "table") -> Model:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NULL targets are left out with a warning
        return sqltree.train(source_of(table, source), target=table.target,
                             weight=table.weight, connection=con, **opts)


def free_name(table: Table, base: str) -> str:
    """``base``, or ``base`` with a suffix, unlike every column name whatever the case."""
    taken = {n.casefold() for n in table.names}
    name, i = base, 0
    while name.casefold() in taken:
        i += 1
        name = f"{base}_{i}"
    return name


# -- what a model must agree on ----------------------------------------------------------------
def expected_scores(model: Model, table: Table) -> tuple[list[Any], list[list[float]]]:
    rows = table.rows()
    return [model.predict_row(r) for r in rows], [model.predict_proba_row(r) for r in rows]


def assert_scores(where: str, got: Sequence[Sequence[Any]], model: Model, table: Table,
                  expected: tuple[list[Any], list[list[float]]]) -> None:
    """``got`` holds one (label, p_1, ..., p_k) or (label,) per row, in the table's order."""
    labels, probas = expected
    assert len(got) == len(labels), f"{where}: {len(got)} rows, expected {len(labels)}"
    rows = table.rows()
    for i, (row, label, proba) in enumerate(zip(got, labels, probas)):
        context = f"{where}, row {i} {rows[i]!r}"
        assert row[0] == label and row[0] is not None, (
            f"{context}: label {row[0]!r}, Python walk says {label!r}")
        assert len(row) in (1, len(proba) + 1)
        for c, (p, q) in enumerate(zip(row[1:], proba)):
            assert p is not None and abs(p - q) <= TOL, (
                f"{context}: P({model.classes[c]!r}) = {p!r}, Python walk says {q!r}")


def last(rows: Sequence[Sequence[Any]], n: int) -> list[tuple[Any, ...]]:
    """The prediction and probability columns, which a scoring query puts last."""
    return [tuple(r[-n:]) for r in rows]


def scored(model: Model, run: Callable[[bool], list[tuple[Any, ...]]],
           taken: Sequence[str] = ()) -> list[tuple[Any, ...]]:
    """``run(proba)``'s rows with probabilities, or, where probability columns would be named
    alike or like a column in ``taken`` (ignoring case), refused with a DataError, without."""
    try:
        return run(True)
    except sqltree.DataError:
        names = [f"proba_{format_value(c)}".casefold() for c in model.classes]
        clash = len(set(names)) < len(names) or {n.casefold() for n in taken} & set(names)
        assert clash, "probabilities refused, but their column names clash with nothing"
        return run(False)


def frame_scores(frame: Any, n: int) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in frame.iloc[:, -n:].astype(object).itertuples(index=False, name=None)]


def check_agreement(model: Model, table: Table, con: duckdb.DuckDBPyConnection,
                    relation: str = "t") -> None:
    """Compiled SQL on DuckDB (``table``'s rows in ``relation``) and SQLite, both scoring
    queries and ``predict`` agree with the Python walk on every row, labels and
    probabilities."""
    k = len(model.classes)
    expected = expected_scores(model, table)
    width = {True: k + 1, False: 1}
    column = free_name(table, "prediction")

    def to_sql(proba: bool) -> list[tuple[Any, ...]]:
        sql = model.to_sql("duckdb", table=relation, proba=proba)
        return last(con.execute(sql).fetchall(), width[proba])

    def predict(proba: bool) -> list[tuple[Any, ...]]:
        frame = model.predict(relation, connection=con, proba=proba, column=column)
        return frame_scores(frame, width[proba])

    def closed_form(proba: bool) -> list[tuple[Any, ...]]:
        query = model.scoring_query(exp.to_table(relation), proba=proba, column=column,
                                    source_columns=table.names, expand=False)
        return last(con.execute(query.sql("duckdb")).fetchall(), width[proba])

    def sqlite(proba: bool) -> list[tuple[Any, ...]]:
        with contextlib.closing(sqlite_with(table)) as lite:
            sql = model.to_sql("sqlite", table="t", proba=proba)
            return last(lite.execute(sql).fetchall(), width[proba])

    for where, run, taken in [
        ("to_sql on DuckDB", to_sql, ()), ("predict on DuckDB", predict, table.names),
        ("closed-form query on DuckDB", closed_form, ()), ("to_sql on SQLite", sqlite, ()),
    ]:
        assert_scores(where, scored(model, run, taken), model, table, expected)
    check_leaves_and_into(model, table, con, relation)


def leaf_of(model: Model, row: dict[str, Any]) -> int | None:
    """The id of the leaf a row's known values lead to; None where a test that spreads
    unknown values over its branches meets one."""
    node = model.root
    while node.split is not None:
        branch = node.split.branch_of(row.get(node.split.feature))
        if branch is None:
            branch = node.unknown_branch
        if branch is None:
            return None
        node = node.children[branch]
    return node.node_id


def check_leaves_and_into(model: Model, table: Table, con: duckdb.DuckDBPyConnection,
                          relation: str = "t") -> None:
    """``output="leaf"`` gives each row's leaf; ``predict(into=...)`` writes the rows
    ``predict`` returns (in any order)."""
    sql = model.to_sql("duckdb", table=relation, output="leaf", column=free_name(table, "leaf"))
    leaves = [r[-1] for r in con.execute(sql).fetchall()]
    assert leaves == [leaf_of(model, r) for r in table.rows()]

    column = free_name(table, "prediction")
    into = free_name(table, "scored")
    expected = model.predict(relation, connection=con, column=column)
    model.predict(relation, connection=con, column=column, into=into)
    try:
        written = con.execute(exp.select("*").from_(exp.to_table(into)).sql("duckdb")).df()
    finally:
        con.execute(exp.Drop(tables=[exp.to_table(into)], kind="TABLE").sql("duckdb"))

    def rows(frame: pd.DataFrame) -> list[str]:
        # plain tuples: a namedtuple refuses names equal after NFKC folding ('ª' and 'a')
        values = frame.astype(object).itertuples(index=False, name=None)
        return sorted(repr(tuple(r)) for r in values)

    assert rows(written) == rows(expected)


def class_factors(model: Model, table: Table) -> list[float]:
    """What each class's weight is multiplied by (CART's ``class_weight``; 1 otherwise)."""
    k = len(model.classes)
    class_weight = model.options.get("class_weight")
    if class_weight is None:
        return [1.0] * k
    if class_weight == "balanced":  # scikit-learn: n / (k * rows of the class), unweighted
        labels = [y for y in table.column(table.target).values if y is not None]
        rows = [sum(1 for y in labels if y == c) for c in model.classes]
        return [len(labels) / (k * n) if n else 1.0 for n in rows]
    return [float(class_weight.get(c, class_weight.get(str(c), 1.0))) for c in model.classes]


def recount(model: Model, table: Table) -> dict[int, list[float]]:
    """Class weights at every node from the training rows walked in Python, unknown values as
    training handles them: dropped (``missing="drop"``), down one branch, or spread by the
    node's shares."""
    k = len(model.classes)
    factors = class_factors(model, table)
    drop = model.options.get("algorithm") != "cart" and model.options.get("missing") == "drop"
    counts = {id(n): [0.0] * k for n in model.root.walk()}
    for row in table.rows():
        label = row[table.target]
        if label is None:
            continue
        c = model.classes.index(label)
        weight = 1.0 if table.weight is None else float(row[table.weight])
        stack = [(model.root, weight * factors[c])]
        while stack:
            node, w = stack.pop()
            counts[id(node)][c] += w
            if node.split is None:
                continue
            branch = node.split.branch_of(row.get(node.split.feature))
            if branch is None and drop:
                continue
            if branch is None:
                branch = node.unknown_branch
            if branch is not None:
                stack.append((node.children[branch], w))
            else:
                stack.extend((child, w * share)
                             for child, share in zip(node.children, node.shares))
    return counts


def close(a: float, b: float, scale: float) -> bool:
    return abs(a - b) <= TOL * max(abs(a), abs(b), scale)


def check_counts(model: Model, table: Table) -> None:
    """Children's weights add up to their parent's (less dropped unknown values), and every
    node's class weights are those of the training rows that reach it."""
    drop = model.options.get("algorithm") != "cart" and model.options.get("missing") == "drop"
    root_weight = model.root.weight
    for node in model.root.walk():
        if node.split is None:
            continue
        below = sum(child.weight for child in node.children)
        if drop:
            assert below <= node.weight + TOL * max(node.weight, 1.0), (
                f"node {node.node_id}: children hold {below}, more than its {node.weight}")
        else:
            assert close(below, node.weight, 0.0), (
                f"node {node.node_id} ({node.split.describe(0)}): children hold {below}, "
                f"the node {node.weight}")
    expected = recount(model, table)
    for node in model.root.walk():
        want = expected[id(node)]
        assert all(close(a, b, root_weight * 1e-6) for a, b in zip(node.counts, want)), (
            f"node {node.node_id}: counts {node.counts}, the training rows give {want}")


def reaching(model: Model, table: Table) -> dict[int, list[dict[str, Any]]]:
    """The training rows that reach each node (by any route, for fractional unknowns)."""
    drop = model.options.get("algorithm") != "cart" and model.options.get("missing") == "drop"
    out: dict[int, list[dict[str, Any]]] = {id(n): [] for n in model.root.walk()}
    for row in table.rows():
        if row[table.target] is None:
            continue
        stack = [model.root]
        while stack:
            node = stack.pop()
            out[id(node)].append(row)
            if node.split is None:
                continue
            branch = node.split.branch_of(row.get(node.split.feature))
            if branch is None and not drop:
                branch = node.unknown_branch
                if branch is None:
                    stack.extend(c for c, share in zip(node.children, node.shares) if share > 0)
                    continue
            if branch is not None:
                stack.append(node.children[branch])
    return out


def midpoint(a: float, b: float) -> float:
    """scikit-learn's threshold between adjacent values (``a`` where ``a/2 + b/2`` is ``b``)."""
    t = a / 2.0 + b / 2.0
    return a if t == b or math.isinf(t) else t


def check_tree(model: Model, table: Table) -> None:
    """Thresholds are training values (C4.5, ID3, bins) or midpoints of a node's adjacent
    values (CART); probabilities are counts normalised and add up to 1."""
    cart = model.options.get("algorithm") == "cart"
    binned = model.options.get("max_bins") is not None
    training = [r for r in table.rows() if r[table.target] is not None]
    rows = reaching(model, table) if cart and not binned else {}
    for node in model.root.walk():
        assert abs(sum(node.proba) - 1.0) <= TOL, f"node {node.node_id}: proba {node.proba}"
        if node.weight > 0:
            assert all(close(p, c / node.weight, 1e-300) for p, c in zip(node.proba, node.counts))
        split = node.split
        if split is None or split.kind != "continuous":
            continue
        values = sorted({float(r[split.feature]) for r in training
                         if r[split.feature] is not None})
        if cart and split.threshold == sys.float_info.max:
            continue  # scikit-learn's infinite threshold: known values left, unknown right
        if not cart or binned:
            assert split.threshold in values, (
                f"node {node.node_id}: threshold {split.threshold!r} is no value of "
                f"{split.feature!r}")
            continue
        # Midpoints of adjacent values at the node; values only rows of weight 0 hold may
        # count or not (scikit-learn keeps such rows, sqltree's sums do not see them).
        cuts: set[float] = set()
        for weighted in (False, True):
            here = sorted({float(r[split.feature]) for r in rows[id(node)]
                           if r[split.feature] is not None
                           and not (weighted and table.weight and not r[table.weight] > 0)})
            cuts |= {midpoint(a, b) for a, b in itertools.pairwise(here)}
        assert split.threshold in cuts, (
            f"node {node.node_id}: threshold {split.threshold!r} is no midpoint of the "
            f"node's adjacent values of {split.feature!r} ({here[:20]})")


DIALECTS = ("postgres", "spark", "bigquery", "snowflake", "tsql", "mysql", "trino")


def check_exports(model: Model, table: Table) -> None:
    """Text, rules and DOT print, and the scoring SQL renders in other dialects and reads
    back; the Python walk reads NaN as unknown."""
    assert model.text() and model.rules() and model.graphviz()
    for dialect in DIALECTS:
        sql = model.to_sql(dialect)
        assert sqlglot.parse_one(f"SELECT {sql} FROM t", read=dialect) is not None
    for row in table.rows()[:20]:
        proba = model.predict_proba_row(row)
        assert abs(sum(proba) - 1.0) <= TOL
        nan = {k: math.nan if v is None else v for k, v in row.items()}
        assert model.predict_proba_row(nan) == proba


def check_round_trip(model: Model, table: Table) -> None:
    """to_dict/from_dict is exact; save, load, save writes the same bytes; the loaded model
    compiles to the same SQL and walks rows the same way."""
    data = model.to_dict()
    again = Model.from_dict(data).to_dict()
    assert again == data
    assert json.dumps(again) == json.dumps(data)
    with tempfile.TemporaryDirectory() as tmp:
        first, second = os.path.join(tmp, "a.json"), os.path.join(tmp, "b.json")
        model.save(first)
        loaded = sqltree.load(first)
        loaded.save(second)
        with open(first, "rb") as a, open(second, "rb") as b:
            assert a.read() == b.read()
    assert loaded.classes == model.classes
    assert loaded.to_sql("duckdb", table="t") == model.to_sql("duckdb", table="t")
    with contextlib.suppress(sqltree.DataError):  # labels that name one probability column
        assert loaded.to_sql("sqlite", table="t", proba=True) == model.to_sql(
            "sqlite", table="t", proba=True)
    rows = table.rows()
    assert [loaded.predict_proba_row(r) for r in rows] == [model.predict_proba_row(r)
                                                           for r in rows]


def same_tree(a: Model, b: Model) -> None:
    """Same classes, domains, tests and thresholds exactly; weights to 1e-9 relative."""
    assert a.classes == b.classes
    # Each engine names its types its own way (DOUBLE, DOUBLE PRECISION).
    assert [(f.name, f.kind, f.values) for f in a.features] == [
        (f.name, f.kind, f.values) for f in b.features]
    ta, tb = a.to_dict()["tree"], b.to_dict()["tree"]
    assert len(ta) == len(tb), f"{len(ta)} nodes against {len(tb)}:\n{a.text()}\n{b.text()}"
    for x, y in zip(ta, tb):
        assert {k: v for k, v in x.items() if k not in FLOATS} == {
            k: v for k, v in y.items() if k not in FLOATS}, f"{x} != {y}\n{a.text()}\n{b.text()}"
        for key in FLOATS:
            assert len(x.get(key, [])) == len(y.get(key, []))
            assert all(close(p, q, 1e-300) for p, q in zip(x.get(key, []), y.get(key, []))), (
                f"{key}: {x} != {y}")


FLOATS = ("counts", "proba", "shares")

CONNECTION_STATE = (
    "SELECT name, value FROM duckdb_settings() ORDER BY name",
    "SELECT database_name, schema_name, table_name, temporary FROM duckdb_tables() ORDER BY ALL",
    "SELECT database_name, schema_name, view_name FROM duckdb_views() WHERE NOT internal "
    "ORDER BY ALL",
    "SELECT database_name FROM duckdb_databases() ORDER BY ALL",
)


def connection_state(con: duckdb.DuckDBPyConnection) -> list[list[tuple[Any, ...]]]:
    """The settings and catalog a caller's connection must get back unchanged."""
    return [con.execute(q).fetchall() for q in CONNECTION_STATE]


@contextlib.contextmanager
def unchanged(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    before = connection_state(con)
    yield
    after = connection_state(con)
    for b, a in zip(before, after):
        assert a == b, f"the connection changed: {sorted(set(a) ^ set(b))}"


# -- properties --------------------------------------------------------------------------------
# A caller's own settings, which sqltree changes while it works and must give back.
PRESETS = ("SET threads = 1", "SET perfect_ht_threshold = 7",
           "SET disabled_optimizers = 'build_side_probe_side'")


@given(case=VALID, source=st.sampled_from(SOURCES),
       presets=st.lists(st.sampled_from(PRESETS), unique=True), transaction=st.booleans(),
       data=st.data())
@settings(max_examples=examples(40))
def test_trained_models_score_count_and_save_consistently(case, source, presets, transaction,
                                                          data):
    """For every trained model: the compiled SQL on DuckDB and SQLite, ``predict`` and the
    Python walk agree on every row, of the training table and of new rows; weights are
    conserved down the tree; thresholds are training values or midpoints; the model file
    round-trips exactly; the caller's connection (its settings, catalog and open
    transaction) is left as it was."""
    table, opts = case
    if source == "frame":  # unassigned bug: an unfinished result then blocks register()
        presets = [p for p in presets if "build_side_probe_side" not in p]
    # The training rows and the new rows are scored together, in one more table of the
    # caller's connection: the scoring SQL is compiled once per form, not once per table.
    scored_rows = stacked(table, data.draw(scoring_tables(table, SPEC), label="new rows"))
    with contextlib.closing(duckdb_with(table, **{SCORED: scored_rows})) as con:
        for statement in presets:
            con.execute(statement)
        if transaction:
            con.execute("BEGIN TRANSACTION")
        with unchanged(con):
            model = train(table, opts, con, source)
            note(f"tree:\n{model.text()}")
            check_agreement(model, scored_rows, con, SCORED)
        if transaction:
            con.execute("ROLLBACK")  # still the caller's transaction, still open
    check_counts(model, table)
    check_tree(model, table)
    check_round_trip(model, table)
    check_exports(model, table)


@given(case=pruned_cases(SPEC))
@settings(max_examples=examples(20))
def test_pruning_never_adds_leaves(case):
    table, pruned_opts, unpruned_opts = case
    with contextlib.closing(duckdb_with(table)) as con:
        pruned = train(table, pruned_opts, con)
        unpruned = train(table, unpruned_opts, con)
    assert pruned.n_leaves <= unpruned.n_leaves, f"{pruned.text()}\n{unpruned.text()}"


@given(case=VALID, seed=st.integers(0, 2**32 - 1))
@settings(max_examples=examples(10))
def test_row_order_does_not_change_the_tree(case, seed):
    table, opts = case
    order = list(range(table.n_rows))
    random.Random(seed).shuffle(order)
    shuffled = table.permuted(order)
    with contextlib.closing(duckdb_with(table)) as con:
        a = train(table, opts, con)
    with contextlib.closing(duckdb_with(shuffled)) as con:
        b = train(shuffled, opts, con)
    same_tree(a, b)


def entropy(weights: Sequence[float]) -> float:
    total = sum(weights)
    return -sum(w / total * math.log2(w / total) for w in weights if w > 0) if total > 0 else 0.0


def expected_split(branches: list[list[float]], unknown: list[float]) -> dict[str, float]:
    """Gain (times the known fraction), split info (unknown weight as one more branch) and
    gain ratio of one candidate, from its branches' class weights."""
    known = [sum(col) for col in zip(*branches)]
    w_known, w_unknown = sum(known), sum(unknown)
    after = sum(sum(b) / w_known * entropy(b) for b in branches) if w_known > 0 else 0.0
    gain = w_known / (w_known + w_unknown) * (entropy(known) - after) if w_known > 0 else 0.0
    info = entropy([sum(b) for b in branches] + [w_unknown])
    return {"gain": gain, "split_info": info, "gain_ratio": gain / info if info > 0 else 0.0,
            "known_weight": w_known, "weight": w_known + w_unknown}


def candidate_splits(table: Table, feature: str, nominal: bool,
                     classes: list[Any]) -> dict[Any, dict[str, float]]:
    """Every root candidate of ``feature`` (None: the nominal split) scored in Python."""
    rows = [r for r in table.rows() if r[table.target] is not None]

    def weights(selected: list[dict[str, Any]]) -> list[float]:
        out = [0.0] * len(classes)
        for r in selected:
            out[classes.index(r[table.target])] += (
                1.0 if table.weight is None else float(r[table.weight]))
        return out

    known = [r for r in rows if r[feature] is not None]
    unknown = weights([r for r in rows if r[feature] is None])
    if nominal:
        groups: dict[Any, list[dict[str, Any]]] = {}
        for r in known:
            groups.setdefault(r[feature], []).append(r)
        return {None: expected_split([weights(g) for g in groups.values()], unknown)}
    # A value that only rows of weight 0 hold is no candidate (the engine sums weights).
    values = sorted({float(r[feature]) for r in known
                     if table.weight is None or r[table.weight] > 0})
    return {t: expected_split([weights([r for r in known if float(r[feature]) <= t]),
                               weights([r for r in known if float(r[feature]) > t])], unknown)
            for t in values[:-1]}


@given(case=VALID)
@settings(max_examples=examples(30))
def test_split_scores_are_the_formulas_over_the_rows(case):
    """``split_scores`` (every root candidate, scored in SQL) equals gain, split info and
    gain ratio computed in Python from the rows, for every candidate and no other."""
    table, opts = case
    nominal = opts.get("nominal", [])
    with contextlib.closing(duckdb_with(table)) as con, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = sqltree.split_scores("t", target=table.target, weight=table.weight,
                                      nominal=nominal, connection=con)
    classes = table.classes()
    for column in table.features:
        is_nominal = column.kind in ("text", "bool") or column.name in nominal
        expected = candidate_splits(table, column.name, is_nominal, classes)
        got = scores[scores["attribute"] == column.name]
        found = {None if is_nominal else float(r["threshold"]): r for _, r in got.iterrows()}
        assert sorted(found, key=repr) == sorted(expected, key=repr), column.name
        for threshold, want in expected.items():
            row = found[threshold]
            if want["split_info"] == 0 and pd.isna(row["gain_ratio"]):
                del want["gain_ratio"]  # 0 / 0, reported as missing
            for key, value in want.items():
                assert abs(row[key] - value) <= TOL * max(1.0, abs(value)), (
                    f"{column.name!r} at {threshold!r}: {key} {row[key]!r}, rows give {value!r}")


def refusal_source(case: Refusal) -> Any:
    if isinstance(case.source, tuple) and case.source[:1] == ("frame",):
        frame = case.table.frame()
        frame.columns = list(case.source[1])
        return frame
    return case.source


def check_refused(case: Refusal) -> None:
    with contextlib.closing(duckdb_with(case.table)) as con, unchanged(con):
        kwargs = {"connection": con, **case.kwargs}
        with warnings.catch_warnings(), pytest.raises(sqltree.SqlTreeError):
            warnings.simplefilter("ignore")
            sqltree.train(refusal_source(case), **kwargs)
        assert con.execute("SELECT COUNT(*) FROM t").fetchone() == (case.table.n_rows,)


# Not refused yet (see tests/test_regressions_found.py): NaN in a nominal float column fails
# as a SQL literal (plain ValueError); a query whose * repeats column names trains on the
# engine's renamed copies (x_1, and the target's copy y_1 as a feature).
NOT_YET = ("nan_nominal", "star_duplicates")
@given(case=refusals(SPEC, kinds=[k for k in DATA_REFUSALS + OPTION_REFUSALS + SOURCE_REFUSALS
                                  if k not in NOT_YET]))
@settings(max_examples=examples(120))
def test_invalid_input_is_refused_with_a_sqltree_error(case):
    """Wrong data, columns, sources or connections raise a ``sqltree.SqlTreeError``
    subclass, never another exception; the caller's connection and table are untouched."""
    check_refused(case)


@functools.lru_cache(maxsize=1)
def saved_model() -> dict[str, Any]:
    """A C4.5 tree with nominal and continuous tests and fractional shares, as saved."""
    return sqltree.train(mixed_table(400), target="label", min_cases=5).to_dict()


@given(data=st.data())
@settings(max_examples=examples(100))
def test_corrupt_model_files_are_refused(data):
    """A truncated, mistyped or structurally broken model file raises ``ModelFileError``."""
    what, raw = data.draw(corrupt_model_files(saved_model()))
    note(what)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.json")
        with open(path, "wb") as fh:
            fh.write(raw)
        with pytest.raises(sqltree.ModelFileError):
            sqltree.load(path)


# "missing_table" is left out until predict reads a missing table's schema into a DataError
# (unassigned bug: DuckDB's CatalogException comes through; see the regression test).
SCORING_REFUSALS = ("missing_column", "column_clash", "proba_clash", "multi_statement",
                    "writing_query", "bad_source_type", "bad_connection")


@given(kind=st.sampled_from(SCORING_REFUSALS), data=st.data())
@settings(max_examples=examples(30))
def test_invalid_scoring_input_is_refused(kind, data):
    """``predict`` refuses a source without a tested column, output columns that clash with
    the source's (ignoring case), sources that are not one readable relation and connections
    that are not engines, with a ``sqltree.SqlTreeError``; the source is untouched."""
    model = Model.from_dict(saved_model())
    frame = mixed_table(50)
    tested = sorted({n.split.feature for n in model.root.walk() if n.split is not None})
    source: Any = "s"
    kwargs: dict[str, Any] = {"proba": data.draw(st.booleans())}
    if kind == "missing_column":
        frame = frame.drop(columns=[data.draw(st.sampled_from(tested))])
    elif kind == "column_clash":
        frame[data.draw(st.sampled_from(("prediction", "Prediction", "PREDICTION")))] = 1
    elif kind == "proba_clash":
        name = data.draw(st.sampled_from(model.proba_columns()))
        frame[data.draw(st.sampled_from((name, name.upper(), name.title())))] = 1.0
        kwargs["proba"] = True
    elif kind == "multi_statement":
        source = data.draw(st.sampled_from(("SELECT * FROM s; DROP TABLE s",
                                            "SELECT * FROM s;; DELETE FROM s")))
    elif kind == "writing_query":
        source = "WITH d AS (DELETE FROM s RETURNING *) SELECT * FROM d"
    elif kind == "bad_source_type":
        source = data.draw(st.sampled_from((42, None, b"s", ["s"])))
    with contextlib.closing(duckdb.connect()) as con:
        con.register("frame", frame)
        con.execute("CREATE TABLE s AS SELECT * FROM frame")
        con.unregister("frame")
        if kind == "bad_connection":
            kwargs["connection"] = data.draw(st.sampled_from((42, "mysql://u@h/db", object())))
        else:
            kwargs["connection"] = con
        with unchanged(con), pytest.raises(sqltree.SqlTreeError):
            model.predict(source, **kwargs)
        assert con.execute("SELECT COUNT(*) FROM s").fetchone() == (len(frame),)


# -- PostgreSQL and Spark: a sample in CI ------------------------------------------------------
def engine_rows(table: Table) -> tuple[Any, str]:
    """The table as a DataFrame with a row number column first (engines keep no row order)."""
    rid = free_name(table, "rid")
    frame = table.frame()
    frame.insert(0, rid, list(range(table.n_rows)))
    return frame, rid


def check_engine(model: Model, table: Table, engine: Any, source: exp.Table, rid: str) -> None:
    """The compiled scoring query and ``predict`` on ``engine`` agree with the Python walk."""
    k = len(model.classes)
    width = {True: k + 1, False: 1}
    column = free_name(table, "prediction")

    def query(proba: bool) -> list[tuple[Any, ...]]:
        rows = engine.execute(model.scoring_query(source.copy(), proba=proba, column=column))
        return last(sorted(rows, key=lambda r: r[0]), width[proba])

    def predict(proba: bool) -> list[tuple[Any, ...]]:
        frame = model.predict(source.copy(), connection=engine, proba=proba, column=column)
        return frame_scores(frame.sort_values(rid), width[proba])

    expected = expected_scores(model, table)
    for where, run, taken in [(f"scoring query on {engine.dialect}", query, ()),
                              (f"predict on {engine.dialect}", predict, [rid, *table.names])]:
        assert_scores(where, scored(model, run, taken), model, table, expected)


def shallow(opts: dict[str, Any]) -> dict[str, Any]:
    """At most 6 levels: each level costs a few statements, slow on the server engines."""
    return {**opts, "max_depth": min(opts.get("max_depth", 6), 6)}


@pytest.mark.postgres
@given(case=trained_cases(dataclasses.replace(SPEC, max_rows=120)))
@settings(max_examples=examples(10), suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_postgres_scores_and_grows_as_duckdb_and_python_do(case, request):
    table, opts = case[0], shallow(case[1])
    with contextlib.closing(duckdb_with(table)) as con:
        model = train(table, opts, con)
    frame, rid = engine_rows(table)
    factory = EngineFactory("postgres", request)
    try:
        engine, source = factory(frame, "t")
        check_engine(model, table, engine, source, rid)
        features = [c.name for c in table.features]
        pg_opts = {**opts, "validation": source.copy()} if "validation" in opts else opts
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grown = sqltree.train(source.copy(), target=table.target, weight=table.weight,
                                  connection=engine, features=features, **pg_opts)
        same_tree(model, grown)
    finally:
        factory.close()


@pytest.mark.spark
@pytest.mark.slow
@given(case=trained_cases(dataclasses.replace(SPEC, max_rows=120)))
@settings(max_examples=examples(3), suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_spark_scores_as_python_does(case, request):
    table, opts = case
    with contextlib.closing(duckdb_with(table)) as con:
        model = train(table, opts, con)
    frame, rid = engine_rows(table)
    factory = EngineFactory("spark", request)
    try:
        engine, source = factory(frame, "t")
        check_engine(model, table, engine, source, rid)
    finally:
        factory.close()
