"""Cross-validation and held-out evaluation, with the rows dealt into parts in SQL.

Which part (fold, or training and test) a row belongs to is computed in the engine, the same
on DuckDB, PostgreSQL, Spark and SQLite, from nothing but portable SQL:

1. Each row gets a hash (``sqltree.dealing``): the MD5 (hex text) of the seed and a text
   form of its values, or of its ``key`` column only. Engines write floats as text
   differently (``100`` or ``100.0``, ``1e+20`` or ``1.0E20``), so a float enters as the
   integer ``FLOOR(frac(x * c) * 2^31)`` (IEEE arithmetic, exact and the same everywhere);
   integers and text enter as their text, booleans as ``t`` or ``f``, NULL as the empty
   text. The engines' own hash functions differ, and so do their text collations: the order
   below compares MD5 hex digits and numbers only.
2. Within each class, rows are numbered in the order of their hash (ties, which only rows
   with equal hashed values have, are broken by the values themselves, so that only rows
   identical in every column can trade places, which changes nothing).
3. Classes are laid end to end in sqltree's class order and the rows dealt round robin from
   the start, as Weka's stratification does: the row at position ``p`` goes to fold
   ``p mod k``, so every fold holds each class's rows in proportion (to one row), and the
   folds' sizes differ by one row at most. A held-out split puts the row at position ``p`` in
   the test part when ``FLOOR((p + 1) * f) > FLOOR(p * f)``: ``FLOOR(n * f)`` rows of ``n``,
   spread evenly through each class.

The dealt rows are stored once in a temporary table (on a connection that stores no tables,
SQLite's or a read-only one, each part's query deals the rows again, the same way); each fold
trains on a query of the other folds' rows, by ``train`` with the options it was given (a
tree, a forest or boosting), and is evaluated on its own rows with one query
(``Model.evaluate``, ``Ensemble.evaluate``: the same ``Evaluation``, pooled by the same sums).
Rows with a NULL target are in no part: they are counted and left out.
"""

from __future__ import annotations

import inspect
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from . import progress as reporting
from .algorithm_registry import ENSEMBLES
from .algorithms.memory import HELD_BY, rows_held_by
from .api import ensemble_options, train
from .compiler.blocks import column as quoted
from .compiler.blocks import dnum, literal
from .compiler.scoring import Names
from .dataset import resolve_relation, sort_key
from .dealing import order_key, row_hash
from .dealing import session as _session
from .engines import get_engine
from .engines.select_plan import SELECT
from .ensemble import Ensemble
from .errors import DataError, OptionError
from .evaluation import Evaluation, combine, weka_number
from .model import Model
from .options import CART_OPTIONS, check_keywords, check_train_options, resolve_task
from .regression_evaluation import RegressionEvaluation, combine_regression
from .tree import Value

if TYPE_CHECKING:
    import pandas

FoldProgress = Callable[[Evaluation | RegressionEvaluation], None]


@dataclass
class CrossValidation:
    """The pooled evaluation of a k-fold cross-validation, its folds and their models.

    Attributes
    ----------
    pooled : Evaluation
        All folds' predictions counted together (Weka's "Stratified cross-validation").
    folds : list of Evaluation
        Each fold's evaluation; ``extra`` holds its number, training rows and leaves.
    models : list of Model or Ensemble
        The model each fold trained (a forest or boosting when ``algorithm`` asked for one).
    settings : dict
        ``folds``, ``stratified``, ``seed`` and ``key``.
    """

    pooled: Evaluation | RegressionEvaluation
    folds: list[Any]
    models: list[Model | Ensemble] = field(repr=False)
    settings: dict[str, Any]

    def fold_table(self) -> str:
        """One line per fold (rows, leaves (of all its trees, for an ensemble), accuracy,
        kappa, log loss; a regression model's RMSE, MAE and R²), then mean and standard
        deviation of the folds' figures."""
        if isinstance(self.pooled, RegressionEvaluation):
            return _fold_table(self.folds, REGRESSION_FOLD_COLUMNS)
        return _fold_table(self.folds, CLASSIFICATION_FOLD_COLUMNS)

    def __str__(self) -> str:
        return f"{self.pooled}\n\n=== Per fold ===\n\n{self.fold_table()}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": dict(self.settings),
            "pooled": self.pooled.to_dict(),
            "folds": [f.to_dict() for f in self.folds],
        }

    def to_json(self, indent: int | None = 1) -> str:
        import json

        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, default=str)


FoldColumn = tuple[str, int, Callable[[Any], float], str]
"""A fold table's column: its heading, width, the figure of a fold, its number format."""

CLASSIFICATION_FOLD_COLUMNS: list[FoldColumn] = [
    ("Accuracy", 9, lambda f: 100 * f.accuracy, ">8.3f}%"),
    ("Kappa", 7, lambda f: f.kappa, ">7.4f}"),
    ("Log loss", 8, lambda f: f.log_loss, ">8.4f}"),
]
REGRESSION_FOLD_COLUMNS: list[FoldColumn] = [
    ("RMSE", 12, lambda f: f.root_mean_squared_error, ">12.6g}"),
    ("MAE", 12, lambda f: f.mean_absolute_error, ">12.6g}"),
    ("R2", 8, lambda f: f.r2, ">8.4f}"),
]


def _fold_table(folds: Sequence[Any], columns: list[FoldColumn]) -> str:
    """One line per fold (rows, leaves, then ``columns``), then the mean and standard
    deviation of each column's figure over the folds."""

    def figures(values: Callable[[Callable[[Any], float]], float]) -> str:
        return "  ".join(("{:" + fmt).format(values(get)) for _, _, get, fmt in columns)

    heads = "  ".join(f"{head:>{width}}" for head, width, _, _ in columns)
    lines = [f"{'Fold':>4}  {'Train rows':>10}  {'Test rows':>9}  {'Leaves':>6}  {heads}"]
    for f in folds:
        lines.append(
            f"{f.extra['fold']:>4}  {f.extra['train_rows']:>10}  {f.rows:>9}  "
            f"{f.extra['leaves']:>6}  " + figures(lambda get, f=f: get(f))
        )
    for name, agg in (("Mean", statistics.fmean), ("Std. dev.", _stdev)):
        lines.append(f"{name:<35}  " + figures(lambda get, agg=agg: agg([get(f) for f in folds])))
    return "\n".join(lines)


def _stdev(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


# -- checks before any query ---------------------------------------------------------------------
def _check_train_options(target: str, options: dict[str, Any]) -> str:
    """Refuse what ``train`` would refuse, before the rows are dealt; returns the task."""
    params = inspect.signature(train).parameters
    named = {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    values = {n: params[n].default for n in named} | options
    task, algorithm = resolve_task(values["task"], values["algorithm"], options)
    if algorithm in ENSEMBLES:  # a forest's or boosting's options, as train routes them
        ensemble_options(algorithm, task, values)
        return task
    check_keywords("train", options, [*named, *CART_OPTIONS])
    checked = set(inspect.signature(check_train_options).parameters)
    check_train_options(
        algorithm,
        target=target,
        task=task,
        cart_options={k: v for k, v in options.items() if k in CART_OPTIONS},
        **{k: v for k, v in values.items()
           if k in checked and k not in {"algorithm", "target", "cart_options", "task"}},
    )
    return task


def _check_dealing(seed: Any, key: Any, stratified: Any) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise OptionError(f"seed must be a whole number, not {seed!r}")
    if key is not None and (not isinstance(key, str) or not key):
        raise OptionError(f"key must be a column name, not {key!r}")
    if not isinstance(stratified, bool):
        raise OptionError(f"stratified must be True or False, not {stratified!r}")


def check_folds(folds: Any) -> None:
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise OptionError(f"folds must be a whole number of at least 2, not {folds!r}")


def check_fraction(test_fraction: Any) -> None:
    if (isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float))
            or not 0 < test_fraction < 1):
        raise OptionError(f"test_fraction must be between 0 and 1, not {test_fraction!r}")


# -- the dealing query ---------------------------------------------------------------------------
def build_dealing_query(
    relation: exp.Expression,
    schema: Sequence[tuple[str, exp.DataType]],
    target: str,
    part: Callable[[exp.Expression], exp.Expression],
    part_column: str,
    *,
    offsets: Sequence[tuple[Value, int]] | None,
    seed: int,
    key: str | None,
) -> exp.Select:
    """``SELECT <columns>, part(position) AS part_column FROM relation WHERE target IS NOT
    NULL``; ``offsets`` (class, rows of the classes before it) deal each class from its own
    position (stratified), None deals all rows in one sequence."""
    order = [row_hash(schema, seed, key)]
    ordered_first = sorted(schema, key=lambda s: s[0] != key)  # the key breaks ties first
    order += [k for k in (order_key(quoted(n), t) for n, t in ordered_first) if k]
    y = quoted(target)
    number = exp.Window(
        this=exp.RowNumber(),
        partition_by=[y.copy()] if offsets is not None else None,
        order=exp.Order(expressions=[exp.Ordered(this=o, nulls_first=True) for o in order]),
    )
    position: exp.Expression = exp.Sub(this=number, expression=exp.Literal.number(1))
    if offsets is not None:
        start = exp.Case(ifs=[
            exp.If(this=exp.EQ(this=y.copy(), expression=literal(c)),
                   true=exp.Literal.number(n)) for c, n in offsets
        ])
        position = exp.Add(this=position, expression=start)
    select = exp.Select(expressions=[
        *[quoted(n) for n, _ in schema],
        exp.Alias(this=part(exp.paren(position, copy=False)),
                  alias=exp.to_identifier(part_column, quoted=True)),
    ])
    return select.from_(relation, copy=False).where(
        exp.Not(this=y.copy().is_(exp.null())), copy=False
    )


def fold_rule(folds: int) -> Callable[[exp.Expression], exp.Expression]:
    """Position ``p`` -> fold ``p mod folds`` (0-based)."""
    return lambda p: exp.Mod(this=p, expression=exp.Literal.number(folds))


def split_rule(test_fraction: float) -> Callable[[exp.Expression], exp.Expression]:
    """Position ``p`` -> 1 (test) when ``FLOOR((p + 1) * f) > FLOOR(p * f)``, else 0."""
    f = dnum(float(test_fraction))

    def rule(p: exp.Expression) -> exp.Expression:
        after = exp.Floor(this=exp.Mul(this=exp.paren(exp.Add(
            this=p.copy(), expression=exp.Literal.number(1))), expression=f.copy()))
        before = exp.Floor(this=exp.Mul(this=p, expression=f.copy()))
        return exp.Case(ifs=[exp.If(this=exp.GT(this=after, expression=before),
                                    true=exp.Literal.number(1))],
                        default=exp.Literal.number(0))

    return rule


# -- the dealt table -----------------------------------------------------------------------------
@dataclass
class Dealt:
    """The source's labelled rows with their part, stored in a temporary table, or the
    dealing query itself where the connection stores no tables."""

    table: exp.Table | exp.Subquery
    columns: list[str]
    part_column: str
    class_rows: list[tuple[Value, int]]
    rows_null_target: int
    connection: Any
    """What ``train`` and ``evaluate`` are given to reach the table."""
    held_by: str | None = None
    """Where the source's rows are when they are this process's own (``rows_held_by``):
    the parts' queries say so to ``train``."""

    def rows(self, part: int, *, inside: bool) -> exp.Select:
        """A query of the rows in ``part`` (``inside``) or in every other part."""
        test = exp.EQ if inside else exp.NEQ
        query = exp.Select(expressions=[quoted(c) for c in self.columns]).from_(
            self.table.copy(), copy=False
        ).where(test(this=quoted(self.part_column),
                     expression=exp.Literal.number(part)), copy=False)
        query.meta[HELD_BY] = self.held_by
        return query


@contextmanager
def dealt(
    source: Any,
    target: str,
    part: Callable[[exp.Expression], exp.Expression],
    *,
    connection: Any,
    stratified: bool,
    seed: int,
    key: str | None,
    least_rows: int,
) -> Iterator[Dealt]:
    """Deal the source's labelled rows into parts (see the module's notes); the table is
    dropped when the block ends."""
    with _session(connection) as (engine, shared):
        relation = resolve_relation(source, engine)
        schema = engine.columns(relation)
        names = [n for n, _ in schema]
        for name, what in ((target, "target"), (key, "key")):
            if name is not None and name not in names:
                raise DataError(f"{what} column {name!r} is not in the source; columns: {names}")
        y = quoted(target)
        if stratified:
            counted = engine.execute(
                exp.select(y.copy(), exp.Count(this=exp.Star())).from_(relation.copy())
                .group_by(y.copy())
            )
            class_rows = sorted(((v, int(n)) for v, n in counted if v is not None),
                                key=lambda c: sort_key(c[0]))
            labelled = sum(n for _, n in class_rows)
            null_rows = sum(int(n) for v, n in counted if v is None)
        else:  # one count: a numeric target has about as many values as rows
            ((known, every),) = engine.execute(
                exp.select(exp.Count(this=y.copy()), exp.Count(this=exp.Star()))
                .from_(relation.copy())
            )
            class_rows, labelled, null_rows = [], int(known), int(every) - int(known)
        if labelled < least_rows:
            raise DataError(
                f"the source has {labelled} rows with a known "
                f"{'class' if stratified else 'target'}; dealing them into parts needs at "
                f"least {least_rows}"
            )
        offsets, before = [], 0
        for value, n in class_rows:
            offsets.append((value, before))
            before += n
        part_column = Names.avoiding(names).prefix + "part"
        query = build_dealing_query(
            relation, schema, target, part, part_column,
            offsets=offsets if stratified else None, seed=seed, key=key,
        )
        engine.use_plan()
        if engine.plan == SELECT:  # a table only this engine's statements would define
            table: exp.Table | exp.Subquery = query.subquery(
                exp.to_identifier(part_column + "s", quoted=True), copy=False)
        else:
            table = engine.materialize("parts", query)
        yield Dealt(table, names, part_column, class_rows, null_rows, shared,
                    rows_held_by(source, engine))


# -- the entry points ----------------------------------------------------------------------------
def cross_validate(
    source: Any,
    target: str,
    *,
    folds: int = 10,
    stratified: bool = True,
    seed: int = 1,
    key: str | None = None,
    connection: Any = None,
    progress: bool | FoldProgress = False,
    **train_options: Any,
) -> CrossValidation:
    """k-fold cross-validation in the engine: folds dealt in SQL, each trained and scored there.

    Parameters
    ----------
    source, target, connection
        As for ``sqltree.train``.
    folds : int, default=10
    stratified : bool, default=True
        Deal each class's rows round robin over the folds (Weka's stratification), rather
        than all rows in one sequence.
    seed : int, default=1
        Enters every row's hash: another seed, other folds.
    key : str, optional
        Hash only this column (a row id), so that a row keeps its fold when other columns
        change; default: every column. Rows whose hashed values are equal are ordered by
        their values, so folds are the same on every engine.
    progress : bool or callable
        True shows the command line's progress display (a bar over the folds, each fold's
        training inside it); a callable gets each fold's ``Evaluation`` (its ``extra``
        holds the fold number, training rows and leaves). Either way the folds are reported
        to ``sqltree.progress`` as the steps of the phase ``"cross-validation"``.
    **train_options
        Any option of ``sqltree.train`` (``algorithm``, ``max_depth``, ``weight``, ...); a
        ``weight`` column weighs the evaluation too. ``algorithm="random-forest"`` or
        ``"gradient-boosting"`` trains an ensemble on each fold, with the ensemble's options
        (``n_estimators``, ``max_iter``, ``learning_rate``, ``random_state``, ...) as
        ``train`` takes them: each fold's is the ensemble ``train`` gives on the other folds'
        rows, evaluated by its scoring SQL.

    Returns
    -------
    CrossValidation
        The pooled evaluation (all folds' predictions counted together), each fold's, and
        the folds' models. Options are checked before any query runs.
    """
    check_folds(folds)
    _check_dealing(seed, key, stratified)
    regression = _check_train_options(target, train_options) == "regression"
    stratified = stratified and not regression  # a number has no classes to deal by
    report = progress if callable(progress) else None
    evaluations: list[Any] = []
    models: list[Model | Ensemble] = []
    title = "Stratified cross-validation" if stratified else "Cross-validation"
    with reporting.reporting_to(progress is True), reporting.phase(
        "cross-validation", f"{folds}-fold {title.lower()}", total=folds
    ) as phase, dealt(source, target, fold_rule(folds), connection=connection,
                      stratified=stratified, seed=seed, key=key, least_rows=folds) as parts:
        for i in range(folds):
            evaluations.append(_fold(parts, i, folds, target, train_options))
            models.append(evaluations[-1].extra.pop("model"))
            phase.step(_fold_line(evaluations[-1]), **evaluations[-1].extra)
            if report is not None:
                report(evaluations[-1])
        null_rows = parts.rows_null_target
        pooled = replace((combine_regression if regression else combine)(evaluations, title),
                         rows_null_target=null_rows)
        phase.done(f"{folds} folds: {_headline(pooled)}, {phase.seconds:.2f} s", folds=folds,
                   **_figures(pooled))
    pooled.extra.update(folds=folds)
    settings = {"folds": folds, "stratified": stratified, "seed": seed, "key": key}
    return CrossValidation(pooled, evaluations, models, settings)


def holdout(
    source: Any,
    target: str,
    *,
    test_fraction: float = 0.3,
    stratified: bool = True,
    seed: int = 1,
    key: str | None = None,
    connection: Any = None,
    **train_options: Any,
) -> tuple[Model | Ensemble, Evaluation | RegressionEvaluation]:
    """Train on part of the source and evaluate on the rest, split in SQL.

    ``FLOOR(rows * test_fraction)`` rows, dealt evenly through each class (``stratified``)
    in the order of the rows' hashes (``seed``, ``key``: as for ``cross_validate``), are
    held out; the model (a tree, or a forest or boosting: ``train_options`` as for
    ``cross_validate``) is trained on the others and evaluated on them. Returns the model and
    its evaluation on the held-out rows.
    """
    check_fraction(test_fraction)
    _check_dealing(seed, key, stratified)
    if _check_train_options(target, train_options) == "regression":
        stratified = False  # a number has no classes to deal by
    with dealt(source, target, split_rule(test_fraction), connection=connection,
               stratified=stratified, seed=seed, key=key,
               least_rows=math.ceil(1 / min(test_fraction, 1 - test_fraction))) as parts:
        model = _train_part(parts, 1, target, train_options, "the training split")
        evaluation = model.evaluate(parts.rows(1, inside=True), connection=parts.connection,
                                    title="Evaluation on test split")
        evaluation.extra.update(train_rows=int(model.stats.get("rows", 0)),
                                test_fraction=test_fraction)
        evaluation = replace(evaluation, rows_null_target=parts.rows_null_target)
    return model, evaluation


def _fold(
    parts: Dealt, i: int, folds: int, target: str, options: dict[str, Any]
) -> Evaluation:
    """Fold ``i``: trained on the other folds, evaluated on its own rows; the model rides in
    the evaluation's ``extra`` until the caller takes it."""
    started = time.perf_counter()
    model = _train_part(parts, i, target, options, f"fold {i + 1}")
    evaluation = model.evaluate(parts.rows(i, inside=True), connection=parts.connection)
    evaluation.extra.update(
        fold=i + 1, train_rows=int(model.stats.get("rows", 0)),
        leaves=model.n_leaves, seconds=round(time.perf_counter() - started, 3), model=model,
    )
    return evaluation.titled(f"Fold {i + 1} of {folds}")


def _train_part(
    parts: Dealt, held_out: int, target: str, options: dict[str, Any], what: str
) -> Model | Ensemble:
    try:
        return train(parts.rows(held_out, inside=False), target, connection=parts.connection,
                     **options)
    except DataError as error:
        raise DataError(f"{what}: {error}") from error


def assign_folds(
    source: Any,
    target: str,
    *,
    folds: int = 10,
    stratified: bool = True,
    seed: int = 1,
    key: str | None = None,
    connection: Any = None,
    column: str = "fold",
) -> pandas.DataFrame:
    """The source's labelled rows with the fold (1 to ``folds``) ``cross_validate`` deals
    each into, as a DataFrame (rows in no particular order)."""
    check_folds(folds)
    _check_dealing(seed, key, stratified)
    with dealt(source, target, fold_rule(folds), connection=connection, stratified=stratified,
               seed=seed, key=key, least_rows=folds) as parts:
        if column in parts.columns:
            raise DataError(f"the source already has a column {column!r}; choose another "
                            "column=")
        fold = exp.Add(this=quoted(parts.part_column),
                       expression=exp.Literal.number(1))
        query = exp.Select(expressions=[
            *[quoted(c) for c in parts.columns],
            exp.Alias(this=fold, alias=exp.to_identifier(column, quoted=True)),
        ]).from_(parts.table.copy(), copy=False)
        reader = get_engine(parts.connection)
        try:
            return reader.frame(query)
        finally:
            reader.cleanup()


def _fold_line(evaluation: Evaluation | RegressionEvaluation) -> str:
    e = evaluation
    return (f"fold {e.extra['fold']}: {e.extra['train_rows']:,} training rows, {e.rows:,} "
            f"test rows, {e.extra['leaves']} leaves, {_headline(e)}, "
            f"{e.extra['seconds']:.2f} s")


def _headline(e: Evaluation | RegressionEvaluation) -> str:
    """The figure a progress line shows: accuracy, or a regression model's RMSE and R²."""
    if isinstance(e, RegressionEvaluation):
        return f"RMSE {e.root_mean_squared_error:.6g}, R2 {e.r2:.4f}"
    return f"{_percent(e.accuracy)} correct"


def _figures(e: Evaluation | RegressionEvaluation) -> dict[str, float]:
    if isinstance(e, RegressionEvaluation):
        return {"rmse": e.root_mean_squared_error, "r2": e.r2}
    return {"accuracy": e.accuracy}


def _percent(fraction: float) -> str:
    return f"{weka_number(100 * fraction).strip()}%"
