"""Hypothesis strategies for the property tests: hostile tables and training options.

A ``Table`` holds its values as plain Python values (None for NULL), so the same rows can be
loaded into DuckDB, SQLite, PostgreSQL and Spark and walked through a tree in Python.

Tables are drawn as their shape (rows, columns, kinds, names) and a small pool of distinct
values per column; the rows pick from the pools with a seeded ``random.Random``, row by row,
so that shrinking the number of rows keeps a prefix of the same rows and a failing example
shrinks to a few rows of a few values.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
from hypothesis import strategies as st

TWO_53 = 2**53
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

KINDS = ("int", "float", "text", "bool")
ARROW_TYPES = {
    "int": pa.int64(), "float": pa.float64(), "text": pa.string(), "bool": pa.bool_(),
    # kinds sqltree cannot use (refusal tests only)
    "list": pa.list_(pa.int64()), "date": pa.date32(), "blob": pa.binary(),
    "struct": pa.struct([("a", pa.int64())]),
}
SQLITE_TYPES = {"int": "INTEGER", "float": "REAL", "text": "TEXT", "bool": "BOOLEAN"}
ALGORITHMS = ("c4.5", "id3", "cart")
MISSING = ("fractional", "majority", "drop")

INTERNAL_NAMES = (
    "__sqltree_entry", "__sqltree_row", "__sqltree_fast", "__sqltree_fast0", "__sqltree_at",
    "__sqltree_w", "__sqltree_p0", "__sqltree_p1", "__sqltree_u0", "__sqltree_stop",
    "__sqltree_share", "__sqltree_leaf", "__sqltree_label", "__sqltree_walk",
    "__sqltree_scored", "__sqltree_spread", "__sqltree_flags", "__sqltree_numbered",
)
"""Names shaped like the helper columns and relations of sqltree's scoring queries."""

HOSTILE_NAMES = (
    "a", "x y", " lead", "trail ", "it's", 'say "hi"', "back`tick", "[br]", "a.b", "a;b",
    "ü", "naïve", "日本語", "Ωmega", "😀", "select", "from", "order", "group", "where", "case",
    "end", "table", "null", "true", "false", "TRUE", "default", "prediction", "proba_a",
    "proba_1", "proba_true", "node", "w", "y", "f0", "rowid", "1abc", "%s", "?", "$1",
    "tab\there", "new\nline", "--", "/*", "x'); DROP TABLE t; --", *INTERNAL_NAMES,
)
"""Column names that must be just names: quotes, keywords, unicode, sqltree's own names."""

HOSTILE_TEXT = (
    "", " ", "'", "''", '"', "it's", 'a"b', "\\", "%", "_", "ü", "日本", "😀", "NULL", "null",
    "true", "false", "TRUE", "a", "A", "a ", "select", "x'); DROP TABLE t; --", "\n", "\t",
    "0", "1.5", "-0", "__sqltree_entry",
)

HOSTILE_LABELS = (
    "yes", "no", "Yes", "YES", "a", "A", "b", "B", "'", "it's", '"q"', "ü", "Ü", "日本",
    "😀", "true", "false", "True", "TRUE", "null", "NULL", "", " ", "a ", "__sqltree_entry",
    "__sqltree_p0", "__sqltree_fast", "__sqltree_label", "proba_a", "prediction", "0", "1",
    "1.0", "x'); DROP TABLE t; --", "select",
)
"""Class labels: quotes, unicode, booleans' names, labels differing only in case or spaces,
internal-looking names."""

SPECIAL_FLOATS = (
    0.0, -0.0, 0.5, -1.5, 0.1, 0.2, 0.30000000000000004, 1 / 3, 1e16, 9007199254740992.0,
    1e308, -1e308, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324, -5e-324,
    2.2250738585072014e-308, 1e-300, -1e-300,
)
SPECIAL_INTS = (
    TWO_53 - 1, TWO_53, TWO_53 + 1, TWO_53 + 2, -TWO_53 - 1, 2**62, 10**18, INT64_MAX,
    INT64_MIN, INT64_MAX - 1,
)
SAFE_TEXT = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))


# -- tables ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """One column: its name, its kind (int, float, text, bool) and one value per row."""

    name: str
    kind: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Table:
    """Columns in source order, and which of them is the target (and the weight)."""

    columns: tuple[Column, ...]
    target: str
    weight: str | None = None

    @property
    def n_rows(self) -> int:
        return len(self.columns[0].values)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    @property
    def features(self) -> list[Column]:
        return [c for c in self.columns if c.name not in {self.target, self.weight}]

    def rows(self) -> list[dict[str, Any]]:
        return [dict(zip(self.names, values)) for values in zip(*(c.values for c in self.columns))]

    def arrow(self) -> pa.Table:
        return pa.Table.from_arrays(
            [pa.array(list(c.values), type=ARROW_TYPES[c.kind]) for c in self.columns],
            names=self.names,
        )

    def frame(self) -> pd.DataFrame:
        """A DataFrame with Arrow types, so that NULLs, big integers and -0.0 survive."""
        return self.arrow().to_pandas(types_mapper=pd.ArrowDtype)

    def permuted(self, order: Sequence[int]) -> Table:
        columns = tuple(
            Column(c.name, c.kind, tuple(c.values[i] for i in order)) for c in self.columns
        )
        return Table(columns, self.target, self.weight)

    def replace(self, name: str, values: Sequence[Any], kind: str | None = None) -> Table:
        columns = tuple(
            Column(c.name, kind or c.kind, tuple(values)) if c.name == name else c
            for c in self.columns
        )
        return Table(columns, self.target, self.weight)

    def with_column(self, column: Column, position: int | None = None) -> Table:
        columns = list(self.columns)
        columns.insert(len(columns) if position is None else position, column)
        return Table(tuple(columns), self.target, self.weight)

    def classes(self) -> list[Any]:
        """Distinct labels of the rows with a target, in order of appearance."""
        return list(dict.fromkeys(v for v in self.column(self.target).values if v is not None))

    def literal(self) -> str:
        """Python source that rebuilds the table (for a regression test)."""
        cols = ",\n".join(
            f"    ({c.name!r}, {c.kind!r}, {list(c.values)!r})" for c in self.columns
        )
        weight = f", weight={self.weight!r}" if self.weight else ""
        return f"make_table([\n{cols},\n], target={self.target!r}{weight})"


def make_table(
    columns: Sequence[tuple[str, str, Sequence[Any]]], target: str, weight: str | None = None
) -> Table:
    """A table from ``(name, kind, values)`` triples (regression tests write them out)."""
    return Table(tuple(Column(n, k, tuple(v)) for n, k, v in columns), target, weight)


def value_strategy(kind: str, *, big_ints: bool = True, infinities: Sequence[float] = (),
                   ) -> st.SearchStrategy[Any]:
    """Values of one kind, with the awkward ones often."""
    if kind == "int":
        parts = [st.integers(-3, 10), st.integers(-1000, 1000)]
        if big_ints:
            parts += [st.sampled_from(SPECIAL_INTS), st.integers(INT64_MIN, INT64_MAX)]
        return st.one_of(*parts)
    if kind == "float":
        parts = [
            st.sampled_from(SPECIAL_FLOATS),
            st.floats(-1000, 1000, allow_nan=False).map(lambda x: round(x, 2)),
            st.floats(allow_nan=False, allow_infinity=False),
        ]
        if infinities:
            parts.append(st.sampled_from(tuple(infinities)))
        return st.one_of(*parts)
    if kind == "text":
        return st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(SAFE_TEXT, max_size=5))
    return st.booleans()


def _identity(value: Any) -> tuple[str, str]:
    """Distinct as Python sees it: -0.0 and 0.0 are two values of a pool, True and 1 too."""
    return (type(value).__name__, repr(value))


def _name_key(name: str) -> tuple[str, str]:
    # Engines compare identifiers without case (DuckDB, SQLite, Spark); two names that differ
    # only in case are the duplicate-columns family, kept apart from valid tables.
    return (name.lower(), name.casefold())


@st.composite
def column_names(draw: st.DrawFn, n: int, hostile: Sequence[str] = HOSTILE_NAMES) -> list[str]:
    """``n`` hostile names, distinct without regard to case (names that differ only in case
    are the refused duplicate-columns family)."""
    name = st.one_of(
        st.sampled_from(tuple(hostile)),
        st.text(SAFE_TEXT, min_size=1, max_size=8).filter(str.strip),  # blank names: refused
    )
    return draw(st.lists(name, min_size=n, max_size=n, unique_by=_name_key))


def label_strategy(kind: str, *, big_ints: bool = True) -> st.SearchStrategy[Any]:
    if kind == "text":
        return st.one_of(st.sampled_from(HOSTILE_LABELS), st.text(SAFE_TEXT, max_size=4))
    if kind == "float":  # whole numbers: a fractional target is a measurement, refused
        return st.one_of(st.sampled_from((0.0, -1.0, 1e308, 2.0**60, -(2.0**53))),
                         st.integers(-10**6, 10**6).map(float))
    return value_strategy(kind, big_ints=big_ints)


@dataclass
class TableSpec:
    """What a table strategy may draw; the defaults make tables sqltree must train on."""

    min_rows: int = 5
    max_rows: int = 300
    min_features: int = 1
    max_features: int = 6
    min_classes: int = 2
    max_classes: int = 6
    big_ints: bool = True
    infinities: tuple[float, ...] = (math.inf, -math.inf)
    weights: bool | None = None  # None: drawn
    names: tuple[str, ...] = HOSTILE_NAMES
    nominal_infinities: bool = True  # numeric columns holding infinity may be made nominal
    binned_extremes: bool = True  # max_bins over values whose range overflows a double
    feature_kinds: tuple[str, ...] = KINDS
    label_kinds: tuple[str, ...] = ("text", "text", "text", "int", "bool", "float")


def _order_key(v: Any) -> tuple[int, Any]:
    return (0, float(v)) if isinstance(v, (int, float)) else (1, str(v))


def _wide_pool(kind: str, size: int, rng: random.Random) -> list[Any]:
    """Many distinct numbers: with alternating labels, a chain of cuts about ``size`` deep
    (and about 0.1 s of training per level)."""
    if kind == "int":
        return rng.sample(range(-1000, 1000), size)
    return [round(rng.uniform(-100.0, 100.0), rng.choice((0, 1, 3))) for _ in range(size)]


@dataclass
class _Draft:
    """The drawn shape of a table, before its rows are made."""

    kinds: list[str]
    pools: list[list[Any]]
    dense: list[int]  # size of a wide pool the column mostly draws from (0: none)
    nulls: list[float]
    labels: list[Any]
    null_target: float
    mode: str  # "random", or labels by the driver's rank: "alternate" or "blocks"
    driver: int
    block: int
    noise: float
    weight_pool: list[Any]


def _label_by_rank(draft: _Draft, rows: list[list[Any]], target: list[Any],
                   keep: list[bool]) -> None:
    """Labels as a function of the driver feature's rank among its values (``keep``: rows
    whose label stays random: noise, or an unknown driver value)."""
    values = sorted({(_order_key(r[draft.driver]), repr(r[draft.driver])) for r in rows
                     if r[draft.driver] is not None})
    rank = {v[1]: i for i, v in enumerate(values)}
    step = 1 if draft.mode == "alternate" else draft.block
    for i, row in enumerate(rows):
        if not keep[i] and target[i] is not None:
            position = rank[repr(row[draft.driver])] // step
            target[i] = draft.labels[position % len(draft.labels)]


def _make_rows(draft: _Draft, n_rows: int, rng: random.Random
               ) -> tuple[list[list[Any]], list[Any], list[Any]]:
    rows: list[list[Any]] = []
    target: list[Any] = []
    weights: list[Any] = []
    keep: list[bool] = []
    wide = [_wide_pool(kind, size, rng) for kind, size in zip(draft.kinds, draft.dense)]
    for _ in range(n_rows):  # row by row: fewer rows keep a prefix of the same rows
        row = []
        for pool, extra, p in zip(draft.pools, wide, draft.nulls):
            if rng.random() < p:
                row.append(None)
            elif extra and rng.random() < 0.8:
                row.append(rng.choice(extra))
            else:
                row.append(rng.choice(pool))
        rows.append(row)
        keep.append(draft.mode == "random" or rng.random() < draft.noise
                    or row[draft.driver] is None)
        label = rng.choice(draft.labels)
        target.append(None if rng.random() < draft.null_target else label)
        weights.append(rng.choice(draft.weight_pool) if draft.weight_pool else None)
    if draft.mode != "random":
        _label_by_rank(draft, rows, target, keep)
    # Validity: two classes with weight, and a value in every feature among trained rows.
    target[0], target[1] = draft.labels[0], draft.labels[1]
    if draft.weight_pool:
        weights[0] = weights[0] or type(draft.weight_pool[0])(1)
        weights[1] = weights[1] or type(draft.weight_pool[0])(1)
    for j, pool in enumerate(draft.pools):
        if all(r[j] is None for r, y in zip(rows, target) if y is not None):
            rows[0][j] = pool[0]
    return rows, target, weights


@st.composite
def _weight_pool(draw: st.DrawFn) -> list[Any]:
    if draw(st.booleans()):
        return draw(st.lists(
            st.one_of(st.sampled_from((0.0, 0.5, 1.0, 2.0, 3.25, 1e-3, 1e6)),
                      st.floats(0, 100).map(lambda x: round(x, 3))),
            min_size=1, max_size=5))
    return draw(st.lists(st.sampled_from((0, 1, 2, 3, 7, 10**6)), min_size=1, max_size=4))


@st.composite
def _drafts(draw: st.DrawFn, spec: TableSpec, n_features: int, weighted: bool) -> _Draft:
    kinds = [draw(st.sampled_from(spec.feature_kinds)) for _ in range(n_features)]
    pools = [
        draw(st.lists(value_strategy(kind, big_ints=spec.big_ints, infinities=spec.infinities),
                      min_size=1, max_size=8, unique_by=_identity))
        for kind in kinds
    ]
    dense = [draw(st.sampled_from((0, 0, 0, 10, 30, 60))) if kind in ("int", "float") else 0
             for kind in kinds]
    label_kind = draw(st.sampled_from(spec.label_kinds))
    max_classes = 2 if label_kind == "bool" else spec.max_classes
    n_classes = draw(st.integers(min(spec.min_classes, max_classes), max_classes))
    labels = draw(st.lists(label_strategy(label_kind, big_ints=spec.big_ints),
                           min_size=n_classes, max_size=n_classes, unique=True))
    return _Draft(
        kinds=kinds,
        pools=pools,
        dense=dense,
        nulls=[draw(st.sampled_from((0.0, 0.0, 0.1, 0.3, 0.8))) for _ in range(n_features)],
        labels=labels,
        null_target=draw(st.sampled_from((0.0, 0.0, 0.0, 0.1))),
        mode=draw(st.sampled_from(("random", "alternate", "blocks"))),
        driver=draw(st.integers(0, n_features - 1)),
        block=draw(st.integers(2, 20)),
        noise=draw(st.sampled_from((0.0, 0.1, 0.3))),
        weight_pool=draw(_weight_pool()) if weighted else [],
    )


@st.composite
def tables(draw: st.DrawFn, spec: TableSpec | None = None) -> Table:
    """A table with 1-6 features of mixed kinds, NULLs, hostile names and labels, and an
    optional non-negative weight column.

    Labels are random, or a function of one feature's rank (alternating, or in blocks: chains
    of cuts, deep trees), with some noise; rows 0 and 1 carry two different classes and
    positive weight, and every feature has a value in some row with a target.
    """
    spec = spec or TableSpec()
    n_rows = draw(st.integers(spec.min_rows, spec.max_rows))
    n_features = draw(st.integers(spec.min_features, spec.max_features))
    weighted = draw(st.booleans()) if spec.weights is None else spec.weights
    draft = draw(_drafts(spec, n_features, weighted))
    names = draw(column_names(n_features + 1 + int(weighted), spec.names))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    rows, target, weights = _make_rows(draft, n_rows, rng)

    columns = [Column(names[j], draft.kinds[j], tuple(r[j] for r in rows))
               for j in range(n_features)]
    label_kind = {bool: "bool", int: "int", float: "float", str: "text"}[type(draft.labels[0])]
    columns.insert(draw(st.integers(0, n_features)),
                   Column(names[n_features], label_kind, tuple(target)))
    weight = None
    if weighted:
        weight = names[-1]
        kind = "float" if isinstance(draft.weight_pool[0], float) else "int"
        columns.insert(draw(st.integers(0, len(columns))), Column(weight, kind, tuple(weights)))
    return Table(tuple(columns), names[n_features], weight)


# -- options -----------------------------------------------------------------------------------
PRUNING = ("default", None, "c4.5", "pessimistic", "reduced-error")


@st.composite
def options(draw: st.DrawFn, table: Table, algorithm: str | None = None) -> dict[str, Any]:
    """Training options for one algorithm (keyword arguments of ``sqltree.train``).

    ``reduced-error`` pruning gets ``validation="t"``: the caller loads the table as ``t``.
    """
    algorithm = algorithm or draw(st.sampled_from(ALGORITHMS))
    out: dict[str, Any] = {"algorithm": algorithm}
    maybe = st.booleans()
    if draw(maybe):
        out["max_depth"] = draw(st.integers(1, 6))
    if draw(maybe):
        out["max_bins"] = draw(st.sampled_from((2, 3, 4, 16, 256)))
    if draw(maybe):
        out["min_samples_split"] = draw(st.sampled_from((0.0, 2, 4.0, 10)))
    if algorithm == "cart":
        return out | draw(cart_options(table))
    if draw(maybe):
        out["min_cases"] = draw(st.sampled_from((0.5, 1, 2, 3, 5)))
    out["missing"] = draw(st.sampled_from(MISSING))
    pruning = draw(st.sampled_from(PRUNING))
    if pruning != "default":
        out["pruning"] = pruning
    if pruning == "reduced-error":
        out["validation"] = "t"
    if pruning == "c4.5" or (pruning == "default" and algorithm == "c4.5"):
        if draw(maybe):
            out["cf"] = draw(st.sampled_from((0.01, 0.1, 0.25, 0.5)))
        out["subtree_raising"] = draw(st.booleans())
    if draw(maybe):
        out["min_gain"] = draw(st.sampled_from((0.0, 0.01, 0.1)))
    return out


@st.composite
def cart_options(draw: st.DrawFn, table: Table) -> dict[str, Any]:
    out: dict[str, Any] = {"criterion": draw(st.sampled_from(("gini", "entropy", "log_loss")))}
    maybe = st.booleans()
    if draw(maybe):
        out["min_samples_leaf"] = draw(st.sampled_from((1, 2, 5, 0.1)))
    if draw(maybe):
        out["max_leaf_nodes"] = draw(st.integers(2, 12))
    if draw(maybe):
        out["ccp_alpha"] = draw(st.sampled_from((0.0, 0.001, 0.01, 0.05)))
    if draw(maybe):
        out["min_weight_fraction_leaf"] = draw(st.sampled_from((0.0, 0.05, 0.2)))
    if draw(maybe):
        out["min_impurity_decrease"] = draw(st.sampled_from((0.0, 0.01)))
    choice = draw(st.sampled_from((None, None, "balanced", "dict")))
    if choice == "dict":
        classes = table.classes()
        chosen = draw(st.lists(st.sampled_from(classes), min_size=1, unique_by=_identity))
        out["class_weight"] = {c: draw(st.sampled_from((0.5, 2.0, 3.0))) for c in chosen}
    elif choice is not None:
        out["class_weight"] = choice
    return out


@st.composite
def trained_cases(draw: st.DrawFn, spec: TableSpec | None = None,
                  algorithm: str | None = None) -> tuple[Table, dict[str, Any]]:
    """A valid table and options to train on it.

    No +infinity for CART, which refuses it; integer columns beyond 2^53 are nominal (as
    continuous features they are refused), and other numeric columns sometimes are.
    """
    algorithm = algorithm or draw(st.sampled_from(ALGORITHMS))
    spec = spec or TableSpec()
    if algorithm == "cart":
        spec = dataclasses.replace(spec, infinities=tuple(x for x in spec.infinities if x < 0))
    table = draw(tables(spec))
    opts = draw(options(table, algorithm))
    if not spec.binned_extremes and any(_overflows(c) for c in table.features):
        opts.pop("max_bins", None)
    numeric = [c.name for c in table.features if c.kind in ("int", "float")
               and (spec.nominal_infinities or not _holds_infinity(c))]
    nominal = [n for n in numeric if n in beyond_2_53(table) or draw(st.integers(0, 4)) == 0]
    if nominal:
        opts["nominal"] = nominal
    return table, opts


def beyond_2_53(table: Table) -> list[str]:
    """Integer features holding a value a DOUBLE cannot tell from its neighbours."""
    return [
        c.name for c in table.features
        if c.kind == "int" and any(v is not None and abs(v) > TWO_53 for v in c.values)
    ]


def _holds_infinity(column: Column) -> bool:
    return any(isinstance(v, float) and math.isinf(v) for v in column.values)


def _overflows(column: Column) -> bool:
    """Whether the column's range (max - min) is beyond the largest double."""
    values = [float(v) for v in column.values if isinstance(v, (int, float))]
    return bool(values) and math.isinf(max(values) - min(values))


@st.composite
def pruned_cases(draw: st.DrawFn, spec: TableSpec | None = None, algorithm: str | None = None
                 ) -> tuple[Table, dict[str, Any], dict[str, Any]]:
    """A table, options that prune, and the same options without pruning.

    C4.5 and ID3: ``pruning`` in c4.5 (with or without subtree raising), pessimistic or
    reduced-error against ``pruning=None``; CART: ``ccp_alpha > 0`` against ``ccp_alpha=0``.
    """
    table, opts = draw(trained_cases(spec, algorithm))
    unpruned = {k: v for k, v in opts.items()
                if k not in ("pruning", "cf", "subtree_raising", "validation", "ccp_alpha")}
    pruned = dict(unpruned)
    if opts["algorithm"] == "cart":
        pruned["ccp_alpha"] = draw(st.sampled_from((0.001, 0.005, 0.01, 0.05, 0.2)))
        return table, pruned, unpruned
    unpruned["pruning"] = None
    pruned["pruning"] = draw(st.sampled_from(("c4.5", "pessimistic", "reduced-error")))
    if pruned["pruning"] == "c4.5":
        pruned["subtree_raising"] = draw(st.booleans())
        pruned["cf"] = draw(st.sampled_from((0.01, 0.1, 0.25, 0.5)))
    if pruned["pruning"] == "reduced-error":
        pruned["validation"] = "t"
    return table, pruned, unpruned


# -- inputs sqltree must refuse ------------------------------------------------------------------
@dataclass(frozen=True)
class Refusal:
    """A call of ``sqltree.train`` that must raise a ``sqltree.SqlTreeError``.

    The table is loaded into DuckDB as ``t``; ``source`` is what the call passes: ``"t"``, a
    query or other text, ``("frame", names)`` for the table as a DataFrame with those column
    names, or any other object. ``kwargs`` are the other arguments.
    """

    kind: str
    table: Table
    source: Any
    kwargs: dict[str, Any]


def _with_values(table: Table, name: str, kind: str, edit: dict[int, Any]) -> Table:
    values = list(table.column(name).values)
    for i, v in edit.items():
        values[i] = v
    return table.replace(name, values, kind)


def _base(table: Table, opts: dict[str, Any]) -> dict[str, Any]:
    return {"target": table.target, "weight": table.weight, **opts}


def _data_refusals(draw: st.DrawFn, table: Table, opts: dict[str, Any], kind: str
                   ) -> tuple[Table, Any, dict[str, Any]]:
    """Tables that are wrong in their values."""
    kw = _base(table, opts)
    n = table.n_rows
    row = draw(st.integers(0, n - 1))
    target = table.target
    if kind in ("nan_feature", "nan_nominal"):
        name = draw(st.sampled_from(table.features)).name
        kw["nominal"] = [c for c in kw.get("nominal", []) if c != name]
        if kind == "nan_nominal":
            kw["nominal"].append(name)
        table = table.replace(name, [math.nan if i == row else float(i) for i in range(n)],
                              "float")
    elif kind in ("nan_target", "fractional_target"):
        bad = math.nan if kind == "nan_target" else draw(st.sampled_from((0.5, -1.25, 1e-9)))
        table = table.replace(target, [float(i % 3) for i in range(n)], "float")
        table = _with_values(table, target, "float", {row: bad})
        kw.pop("class_weight", None)
    elif kind in ("negative_weight", "null_weight", "nan_weight", "inf_weight", "zero_weights"):
        name = table.weight or "__weight"
        values = [0.0] * n if kind == "zero_weights" else [1.0] * n
        bad = {"negative_weight": -draw(st.sampled_from((1e-9, 0.5, 1e6))),
               "null_weight": None, "nan_weight": math.nan, "zero_weights": 0.0,
               "inf_weight": draw(st.sampled_from((math.inf, -math.inf)))}[kind]
        values[row] = bad
        if table.weight is None:
            table = table.with_column(Column(name, "float", tuple(values)))
        table = table.replace(name, values, "float")
        kw["weight"] = name
    elif kind in ("text_weight", "bool_weight"):
        name = draw(st.sampled_from(table.features)).name
        value = "1" if kind == "text_weight" else True
        table = table.replace(name, [value] * n, "text" if kind == "text_weight" else "bool")
        kw["weight"] = name
        kw["nominal"] = [c for c in kw.get("nominal", []) if c != name]
    elif kind == "single_class":
        table = table.replace(target, [table.column(target).values[0]] * n)
        kw.pop("class_weight", None)
    elif kind == "null_target":
        table = table.replace(target, [None] * n)
        kw.pop("class_weight", None)
    elif kind == "null_feature":
        name = draw(st.sampled_from(table.features)).name
        table = table.replace(name, [None] * n)
    elif kind == "empty":
        table = Table(tuple(Column(c.name, c.kind, ()) for c in table.columns), target,
                      table.weight)
    elif kind == "beyond_2_53":
        name = draw(st.sampled_from(table.features)).name
        big = draw(st.sampled_from((TWO_53 + 1, -TWO_53 - 1, INT64_MAX, INT64_MIN)))
        table = table.replace(name, [big if i == row else i for i in range(n)], "int")
        kw["nominal"] = [c for c in kw.get("nominal", []) if c != name]
    elif kind == "minus_infinity":
        name = draw(st.sampled_from(table.features)).name
        table = table.replace(name, [-math.inf if i == row else float(i) for i in range(n)],
                              "float")
        kw["nominal"] = [c for c in kw.get("nominal", []) if c != name]
    elif kind == "cart_infinity":
        name = draw(st.sampled_from(table.features)).name
        table = table.replace(name, [math.inf if i == row else float(i) for i in range(n)],
                              "float")
        kw["nominal"] = [c for c in kw.get("nominal", []) if c != name]
    return table, "t", kw


UNSUPPORTED_VALUES = {
    "list": [1, 2], "date": datetime.date(2024, 2, 29), "blob": b"\x00\xff",
    "struct": {"a": 1},
}
BAD_COMMON = {
    "max_depth": (0, -1, 2.5, "3", True, math.nan),
    "max_bins": (1, 0, -4, 2.5, "16", True),
    "min_samples_split": (-1, -0.5, math.nan, math.inf, "2"),
    "algorithm": ("c5.0", "", 3, "cart2"),  # None is the default, not a mistake
}
BAD_C45 = {
    "min_cases": (-1, -0.001, math.nan, math.inf, "2"),
    "min_gain": (-0.1, math.nan, math.inf),
    "missing": ("mean", None, "", "FRACTIONAL "),
    "pruning": ("best", True, "c45x", 0),
    "subtree_raising": ("yes", 1, None),
    "cf": (0, 0.0, -0.1, 0.6, 2, math.nan, "0.25"),
    "criterion": ("gini", "entropy"),  # CART's option given to C4.5 or ID3
    "ccp_alpha": (0.01,),
    "class_weight": ("balanced",),
}
BAD_CART = {
    "criterion": ("mse", "Gini", None, ""),
    "min_samples_leaf": (0, -1, 0.0, 1.0, 1.5, "1", math.nan),
    "max_leaf_nodes": (1, 0, -3, 2.5, "8"),
    "ccp_alpha": (-0.01, math.nan, math.inf, "0.1"),
    "class_weight": ("heavy", [1, 2], "BALANCED"),
    "min_weight_fraction_leaf": (-0.1, 0.6, math.nan),
    "min_impurity_decrease": (-1, math.nan),
    "missing": ("drop", "majority"),  # C4.5's options given to CART
    "pruning": ("c4.5", "pessimistic"),
    "min_cases": (2,),
    "cf": (0.1,),
    "subtree_raising": (False,),
}


def _option_refusals(draw: st.DrawFn, table: Table, opts: dict[str, Any], kind: str
                     ) -> tuple[Table, Any, dict[str, Any]]:
    """Valid tables with an option that is wrong, or wrong for the algorithm."""
    kw = _base(table, opts)
    cart = opts["algorithm"] == "cart"
    names = [c.name for c in table.features]
    if kind == "bad_option":
        table_of_bad = {**BAD_COMMON, **(BAD_CART if cart else BAD_C45)}
        key = draw(st.sampled_from(sorted(table_of_bad)))
        kw[key] = draw(st.sampled_from(table_of_bad[key]))
        if key == "cf":  # cf is C4.5 pruning's: checked where it applies
            kw["pruning"] = "c4.5"
            kw.pop("validation", None)
    elif kind == "negative_class_weight":
        kw["algorithm"] = "cart"
        for key in set(kw) & set(BAD_C45) - {"criterion", "ccp_alpha", "class_weight"}:
            kw.pop(key)
        kw.pop("validation", None)
        kw["class_weight"] = {table.classes()[0]: draw(st.sampled_from((-1.0, math.nan)))}
    elif kind == "unknown_keyword":
        kw[draw(st.sampled_from(("max_dept", "min_sample_leaf", "foo", "seed")))] = 1
    elif kind == "reduced_error_alone":
        if cart:
            kw["algorithm"] = "c4.5"
            for key in BAD_CART:
                kw.pop(key, None)
        kw.pop("cf", None)
        kw.pop("subtree_raising", None)
        kw["pruning"] = "reduced-error"
        kw.pop("validation", None)
    elif kind == "validation_alone":
        kw["validation"] = "t"
        kw["pruning"] = None if not cart else kw.get("pruning")
        kw.pop("cf", None)
        kw.pop("subtree_raising", None)
    elif kind == "missing_column":
        role = draw(st.sampled_from(("target", "weight", "features", "nominal", "continuous")))
        ghost = "no such column " + draw(st.sampled_from(("", "ü", "'", '"')))
        kw[role] = ghost if role in ("target", "weight") else [*names[:1], ghost]
    elif kind == "both_roles":
        name = draw(st.sampled_from(names))
        kw["nominal"], kw["continuous"] = [name], [name]
    elif kind == "text_continuous":
        text = [c.name for c in table.features if c.kind in ("text", "bool")]
        if not text:
            table = table.with_column(Column("t x", "text", ("a",) * table.n_rows))
            text = ["t x"]
        kw["continuous"] = [draw(st.sampled_from(text))]
        kw["nominal"] = [c for c in kw.get("nominal", []) if c not in kw["continuous"]]
    elif kind == "no_features":
        kw["features"] = draw(st.sampled_from(([], [table.target])))
    elif kind == "target_as_feature_list":
        kw["features"] = names[0]  # a string where a list belongs
    elif kind == "weight_is_target":
        kw["weight"] = table.target
    return table, "t", kw


def _source_refusals(draw: st.DrawFn, table: Table, opts: dict[str, Any], kind: str
                     ) -> tuple[Table, Any, dict[str, Any]]:
    """Sources that are not one readable relation, and connections that are not engines."""
    kw = _base(table, opts)
    source: Any = "t"
    if kind == "multi_statement":
        source = draw(st.sampled_from((
            "SELECT * FROM t; DROP TABLE t", "SELECT * FROM t;; DELETE FROM t",
            "(SELECT * FROM t); CREATE TABLE u AS SELECT 1", "SELECT 1; SELECT * FROM t",
        )))
    elif kind == "writing_query":
        source = draw(st.sampled_from((
            "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
            "SELECT * INTO u FROM t",
        )))
    elif kind == "star_duplicates":  # * expands to names another column of the query has
        source = draw(st.sampled_from(("SELECT * FROM t AS a, t AS b", "SELECT *, * FROM t",
                                       "SELECT t.*, u.* FROM t, t AS u")))
    elif kind == "missing_table":
        source = draw(st.sampled_from(("no_such_table", '"t "', "main.nope", "SELECT * FROM nope")))
    elif kind == "bad_query":
        source = draw(st.sampled_from(("SELECT FROM WHERE", "SELECT * FROM t WHERE", "(")))
    elif kind == "bad_source_type":
        source = draw(st.sampled_from((42, None, 3.5, b"t", ["t"], {"t": 1}, object())))
    elif kind == "blank_source":
        source = draw(st.sampled_from(("", "   ", "\n")))
    elif kind == "missing_file":
        source = draw(st.sampled_from(("nope/*.parquet", "/nonexistent/x.csv", "x.parquet")))
    elif kind == "bad_connection":
        kw["connection"] = draw(st.sampled_from(("mysql://u@h/db", 42, object(), "t")))
    elif kind in ("case_clash", "duplicate_names", "blank_name"):
        # The DataFrame gets a feature renamed: blank, or the name of another column, or two
        # features get names that differ only in case.
        table = table.with_column(Column("extra ü", "int", tuple(range(table.n_rows))))
        names = list(table.names)
        i, j = draw(st.lists(st.sampled_from([names.index(c.name) for c in table.features]),
                             min_size=2, max_size=2, unique=True))
        if kind == "blank_name":
            names[i] = draw(st.sampled_from(("", " ", "\t")))
        elif kind == "duplicate_names":
            names[i] = names[draw(st.sampled_from([k for k in range(len(names)) if k != i]))]
        else:
            names[i], names[j] = draw(st.sampled_from((("Col", "COL"), ("ü", "Ü"), ("a b", "A B"))))
        kw = {k: v for k, v in kw.items() if k not in ("nominal", "features", "continuous")}
        source = ("frame", tuple(names))
    elif kind == "unsupported_feature":
        extra = draw(st.sampled_from(sorted(UNSUPPORTED_VALUES)))
        value = UNSUPPORTED_VALUES[extra]
        table = table.with_column(Column("odd", extra, (value,) * table.n_rows),
                                  draw(st.integers(0, len(table.columns))))
    elif kind == "unsupported_target":
        extra = draw(st.sampled_from(sorted(UNSUPPORTED_VALUES)))
        values = [UNSUPPORTED_VALUES[extra], None] * table.n_rows
        table = table.replace(table.target, values[:table.n_rows], extra)
        kw.pop("class_weight", None)
    return table, source, kw


DATA_REFUSALS = (
    "nan_feature", "nan_nominal", "nan_target", "fractional_target", "negative_weight",
    "null_weight", "nan_weight", "inf_weight", "zero_weights", "text_weight", "bool_weight",
    "single_class", "null_target", "null_feature", "empty", "beyond_2_53", "minus_infinity",
    "cart_infinity",
)
OPTION_REFUSALS = (
    "bad_option", "negative_class_weight", "unknown_keyword", "reduced_error_alone",
    "validation_alone", "missing_column", "both_roles", "text_continuous", "no_features",
    "target_as_feature_list", "weight_is_target",
)
SOURCE_REFUSALS = (
    "multi_statement", "writing_query", "star_duplicates", "missing_table", "bad_query",
    "bad_source_type", "blank_source", "missing_file", "bad_connection", "case_clash",
    "duplicate_names", "blank_name", "unsupported_feature", "unsupported_target",
)


@st.composite
def refusals(draw: st.DrawFn, spec: TableSpec | None = None,
             kinds: Sequence[str] = DATA_REFUSALS + OPTION_REFUSALS + SOURCE_REFUSALS
             ) -> Refusal:
    """A valid table and options made wrong in one way (``kind``)."""
    kind = draw(st.sampled_from(tuple(kinds)))
    algorithm = "cart" if kind == "cart_infinity" else None
    spec = dataclasses.replace(spec or TableSpec(), max_rows=60)
    table, opts = draw(trained_cases(spec, algorithm))
    for family, make in ((DATA_REFUSALS, _data_refusals), (OPTION_REFUSALS, _option_refusals),
                         (SOURCE_REFUSALS, _source_refusals)):
        if kind in family:
            table, source, kwargs = make(draw, table, opts, kind)
            return Refusal(kind, table, source, kwargs)
    raise AssertionError(kind)


# -- model files sqltree must refuse -------------------------------------------------------------
TOP_LEVEL_BAD = {
    "format": ("sqltree", None, 1),
    "version": (3, 0, "1", None, 1.5, True),
    "target": (5, None, [], ""),
    "classes": ("yes", None, 5, {}, [], [[1]], [{"a": 1}]),
    "features": ("x", None, [1], [{"name": "a"}], {}),
    "tree": ({}, "x", None, [], [1], [[]]),
    "options": ("x", [1]),
    "stats": ("x", [1]),
}
NODE_BAD = {
    "counts": ("x", None, [], ["a"], [None], {}, [-1.0], [math.nan], [math.inf]),
    "proba": ("x", None, [], ["a"], [None], [2.0], [-0.5], [math.nan]),
    "id": ("x", None, 1.5, -1),
}
SPLIT_BAD = {
    "children": ("out of range", "negative", "string", None, "x", "none", "one fewer",
                 "self", "root", "twice"),
    "split": (None, "x", {}, "no feature", "weird kind", "unknown feature"),
    "threshold": ("x", None, "missing", math.nan, math.inf),
    "shares": ("x", None, "one fewer", [-1.0], [math.nan]),
    "unknown_branch": ("out of range", -1, "x", 1.5),
}


def _length(value: Any, k: int) -> Any:
    """A list bad value stretched to the length of the list it replaces, so that only its
    content is wrong (an empty list stays empty: wrong by its length)."""
    if isinstance(value, list) and len(value) == 1:
        return value * k
    return value


def _corrupt_split(draw: st.DrawFn, tree: list[dict[str, Any]], i: int) -> str:
    node = tree[i]
    field = draw(st.sampled_from(sorted(SPLIT_BAD)))
    bad = draw(st.sampled_from(SPLIT_BAD[field]))
    n = len(node["children"])
    if field == "children":
        node["children"] = {
            "out of range": [*node["children"][:-1], len(tree)], "negative": [-1] * n,
            "string": [str(c) for c in node["children"]], "none": [], "x": "x", None: None,
            "one fewer": node["children"][:-1], "self": [i] * n,
            "root": [0, *node["children"][1:]], "twice": [node["children"][0]] * n,
        }[bad]
    elif field == "split":
        if bad in ("no feature", "weird kind", "unknown feature"):
            key, value = {"no feature": ("feature", None), "weird kind": ("kind", "weird"),
                          "unknown feature": ("feature", "no such feature ü")}[bad]
            if value is None:
                del node["split"][key]
            else:
                node["split"][key] = value
        else:
            node["split"] = bad
    elif field == "threshold":
        if node["split"]["kind"] == "continuous":
            if bad == "missing":
                del node["split"]["threshold"]
            else:
                node["split"]["threshold"] = bad
        else:  # a nominal test: a wrong number of groups, or a group that is not a list
            groups = node["split"]["groups"]
            fewer = bad in ("missing", None)
            node["split"]["groups"] = groups[:-1] if fewer else [bad, *groups[1:]]
    elif field == "shares":
        node["shares"] = node["shares"][:-1] if bad == "one fewer" else _length(bad, n)
    else:
        node["unknown_branch"] = n if bad == "out of range" else bad
    return f"node {i}: {field} {bad!r}"


@st.composite
def corrupt_model_files(draw: st.DrawFn, data: dict[str, Any]) -> tuple[str, bytes]:
    """A model's saved JSON (``data`` is its ``to_dict()``) made invalid in one way; returns
    a description and the file's bytes. Every one must be refused with ``ModelFileError``."""
    kind = draw(st.sampled_from(("truncated", "not utf-8", "not an object", "missing key",
                                 "top-level type", "node field", "split")))
    text = json.dumps(data, indent=1, ensure_ascii=False)
    if kind == "truncated":
        cut = draw(st.integers(0, text.rindex("}") - 1))
        return f"truncated at {cut}", text[:cut].encode()
    if kind == "not utf-8":
        at = draw(st.integers(0, len(text)))
        raw = text.encode()
        return f"byte 0xff at {at}", raw[:at] + b"\xff" + raw[at:]
    if kind == "not an object":
        value = draw(st.sampled_from(([], 1, "x", None, True, [data])))
        return f"document {value!r:.40}", json.dumps(value).encode()
    doc = json.loads(text)
    if kind == "missing key":
        key = draw(st.sampled_from(("format", "version", "target", "classes", "features",
                                    "tree")))
        del doc[key]
        what = f"no {key!r}"
    elif kind == "top-level type":
        key = draw(st.sampled_from(sorted(TOP_LEVEL_BAD)))
        doc[key] = draw(st.sampled_from(TOP_LEVEL_BAD[key]))
        what = f"{key} = {doc[key]!r}"
    elif kind == "node field":
        i = draw(st.integers(0, len(doc["tree"]) - 1))
        key = draw(st.sampled_from(sorted(NODE_BAD)))
        bad = draw(st.sampled_from(NODE_BAD[key]))
        doc["tree"][i][key] = _length(bad, len(doc["classes"]))
        what = f"node {i}: {key} = {bad!r}"
    else:
        inner = [i for i, node in enumerate(doc["tree"]) if "split" in node]
        what = _corrupt_split(draw, doc["tree"], draw(st.sampled_from(inner)))
    return what, json.dumps(doc, indent=1, ensure_ascii=False).encode()


@st.composite
def scoring_tables(draw: st.DrawFn, table: Table, spec: TableSpec | None = None) -> Table:
    """New rows for a model trained on ``table``: the same columns, its values mixed with
    values it never saw (nominal values no branch lists, numbers between and beyond its
    thresholds, integers beyond 2^53) and more NULLs."""
    spec = spec or TableSpec()
    n_rows = draw(st.integers(1, 60))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    columns = []
    for c in table.columns:
        seen = [v for v in c.values if v is not None]
        if c.name in (table.target, table.weight):
            values = [rng.choice(seen) if seen else None for _ in range(n_rows)]
        else:
            fresh = draw(st.lists(value_strategy(c.kind, infinities=spec.infinities),
                                  max_size=6, unique_by=_identity))
            pool = seen + fresh or [None]
            values = [None if rng.random() < 0.2 else rng.choice(pool) for _ in range(n_rows)]
        columns.append(Column(c.name, c.kind, tuple(values)))
    return Table(tuple(columns), table.target, table.weight)
