"""Check a scoring source's column types against the types a model was trained on.

A model compares each feature with values of the type it was trained on: numbers with
numbers, text with text literals, booleans with boolean literals. A source whose column holds
another kind of value (a boolean stored as 1/0 by SQLite, text labels read as BOOLEAN from a
CSV) would be scored without an error and answer wrongly, or fail in the engine with an error
that names no column. ``check_features`` and ``check_target`` refuse such a source before any
scoring query runs, with a ``DataError`` naming the column, the type trained and the type
found.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlglot import exp
from sqlglot.errors import SqlglotError

from .errors import DataError
from .tree import CONTINUOUS, Value

NUMBER = "number"
TEXT = "text"
BOOLEAN = "boolean"
TEMPORAL = "date/time"
OTHER = "other"

_UNTYPED = (exp.DataType.Type.NULL, exp.DataType.Type.UNKNOWN)


def type_family(dtype: exp.DataType) -> str | None:
    """The family of a column type: number, text, boolean, date/time or other (None for a
    column whose type the engine does not name, such as an all-NULL one)."""
    if dtype.is_type(*_UNTYPED):
        return None
    if dtype.is_type(exp.DataType.Type.BOOLEAN):
        return BOOLEAN
    if dtype.is_type(*exp.DataType.NUMERIC_TYPES):
        return NUMBER
    if dtype.is_type(*exp.DataType.TEXT_TYPES, exp.DataType.Type.ENUM):
        return TEXT
    if dtype.is_type(*exp.DataType.TEMPORAL_TYPES):
        return TEMPORAL
    return OTHER


def value_family(values: Iterable[Value]) -> str | None:
    """The family of a model's values (a nominal domain, the class labels): None when there
    are none or they mix families."""
    families = set()
    for v in values:
        if isinstance(v, bool):
            families.add(BOOLEAN)
        elif isinstance(v, (int, float)):
            families.add(NUMBER)
        elif isinstance(v, str):
            families.add(TEXT)
        else:
            return None
    return families.pop() if len(families) == 1 else None


def _declared_family(sql_type: str) -> str | None:
    try:
        return type_family(exp.DataType.build(sql_type))
    except (SqlglotError, ValueError):
        return None


def trained_family(kind: str, sql_type: str, values: Sequence[Value]) -> str | None:
    """The family a feature was trained as: continuous features are numbers; a nominal one is
    what its values are (or, without any, what its recorded type says)."""
    if kind == CONTINUOUS:
        return NUMBER
    return value_family(values) or _declared_family(sql_type)


def _mismatch(what: str, name: str, trained: str, sql_type: str, dtype: exp.DataType,
              found: str, dialect: str, hint: str) -> DataError:
    described = f"{trained} ({sql_type})" if sql_type else trained
    return DataError(
        f"{what} {name!r} was {described} in training but is {found} "
        f"({dtype.sql(dialect)}) in the source: {hint}"
    )


def _same(trained: str | None, found: str | None, dtype: exp.DataType,
          integer_booleans: bool) -> bool:
    if trained is None or found is None or trained == found:
        return True
    # SQLite stores booleans as 1 and 0, and the compiled SQL's boolean literals as well.
    return (integer_booleans and trained == BOOLEAN
            and dtype.is_type(*exp.DataType.INTEGER_TYPES))


def check_features(features: Iterable[Any], tested: Iterable[str],
                   types: Mapping[str, exp.DataType], dialect: str, *,
                   integer_booleans: bool = False) -> None:
    """Refuse a source where a column the tree tests holds another family of values than in
    training (``features``: the model's ``FeatureInfo``s; ``types``: the source's schema;
    ``integer_booleans``: the engine stores booleans as integers, see
    ``Engine.BOOLEANS_AS_INTEGERS``)."""
    info = {f.name: f for f in features}
    for name in sorted(set(tested)):
        f = info.get(name)
        if f is None or name not in types:
            continue
        trained = trained_family(f.kind, f.sql_type, f.values)
        found = type_family(types[name])
        if _same(trained, found, types[name], integer_booleans):
            continue
        raise _mismatch(
            "column", name, trained, f.sql_type, types[name], found, dialect,
            f"its values would not compare with the model's; cast it to {_cast_hint(trained)} "
            "in a query, with the values it had in training",
        )


def check_target(target: str, classes: Sequence[Value], regression: bool,
                 types: Mapping[str, exp.DataType], dialect: str, *,
                 integer_booleans: bool = False) -> None:
    """Refuse a source whose target column holds another family of values than the model's
    classes (or, for a regression tree, than numbers)."""
    if target not in types:
        return
    trained = NUMBER if regression else value_family(classes)
    found = type_family(types[target])
    if _same(trained, found, types[target], integer_booleans):
        return
    labels = "" if regression else f" with the labels {[*classes][:5]!r}"
    raise _mismatch(
        "target", target, trained, "", types[target], found, dialect,
        "no row's class could match a prediction; evaluate a query that casts or maps it to "
        f"{_cast_hint(trained)}{labels}",
    )


def _cast_hint(family: str) -> str:
    return {NUMBER: "a number", TEXT: "text", BOOLEAN: "a boolean"}.get(family, family)


def check_source(model: Any, types: Mapping[str, exp.DataType], engine: Any, *,
                 target: bool = False, tested: Iterable[str] | None = None) -> None:
    """``check_features`` for the columns ``model``'s tree tests (or ``tested``: an
    ensemble's ``used_features()``) and, with ``target``, ``check_target`` for its target
    (``model``: a ``Model`` or an ``Ensemble``, or anything with their ``features``,
    ``classes``, ``target`` and ``task``, and a ``root`` unless ``tested`` is given;
    ``engine``: the scoring ``Engine``)."""
    if tested is None:
        tested = {n.split.feature for n in model.root.walk() if n.split is not None}
    flag = bool(engine.BOOLEANS_AS_INTEGERS)
    check_features(getattr(model, "features", ()), tested, types, engine.dialect,
                   integer_booleans=flag)
    if target:
        check_target(model.target, model.classes,
                     getattr(model, "task", "classification") == "regression", types,
                     engine.dialect, integer_booleans=flag)
