"""Evaluate a regression tree where the data lives: one aggregate query over the scoring SQL.

The query scores the source with the compiled numeric ``CASE`` (``compiler.compile_value``)
and sums, over the rows with a known target, their weight, the weighted squared and absolute
errors, and the weighted first and second moments of the target about a centre (the model's
training mean, ``root.value``). RMSE, MAE and R² are arithmetic on those few numbers; the
centre keeps R²'s total sum of squares exact for a target far from zero (``SUM(w*y*y)`` of
values near 1e9 would keep no digit of a spread near 1). Rows with a NULL target are counted,
not evaluated.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sqlglot import exp

from . import compiler, dates
from .compiler.blocks import column, dnum
from .dataset import resolve_relation
from .engines import get_engine
from .errors import DataError
from .evaluation import Scorable, ScoredColumns, model_weight
from .source_check import check_source

_SUMS = ("rows", "rows_null_target", "total", "sum_sq_error", "sum_abs_error", "sum_dev",
         "sum_sq_dev", "bad_weights")

_SHORT_NAMES = {"rows": "count", "rmse": "root_mean_squared_error",
                "mae": "mean_absolute_error"}


@dataclass(frozen=True)
class RegressionEvaluation:
    """Sums over the evaluated rows, and every figure computed from them.

    ``total`` is the rows' weight; the errors are ``prediction - target``; ``sum_dev`` and
    ``sum_sq_dev`` are the weighted sums of ``target - centre`` and its square.
    """

    rows: int
    rows_null_target: int
    weight: str | None
    total: float
    sum_sq_error: float
    sum_abs_error: float
    centre: float
    sum_dev: float
    sum_sq_dev: float
    title: str = "Evaluation"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    """What a caller adds (cross-validation: the fold, its training rows and leaves)."""

    @property
    def count(self) -> int:
        """Rows evaluated (a known target)."""
        return self.rows

    @property
    def mean_squared_error(self) -> float:
        return self.sum_sq_error / self.total if self.total > 0 else math.nan

    @property
    def root_mean_squared_error(self) -> float:
        return math.sqrt(self.mean_squared_error)

    @property
    def mean_absolute_error(self) -> float:
        return self.sum_abs_error / self.total if self.total > 0 else math.nan

    @property
    def r2(self) -> float:
        """``1 - SSE / SST``; for a constant target 1.0 when every prediction is exact, else
        0.0 (scikit-learn's ``r2_score``)."""
        spread = self.sum_sq_dev - self.sum_dev * self.sum_dev / self.total
        if spread <= 0:
            return 1.0 if self.sum_sq_error == 0 else 0.0
        return 1.0 - self.sum_sq_error / spread

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "count": self.count,
            "rows_null_target": self.rows_null_target,
            "weight": self.weight,
            "total_weight": self.total,
            "root_mean_squared_error": self.root_mean_squared_error,
            "mean_absolute_error": self.mean_absolute_error,
            "r2": self.r2,
            "mean_squared_error": self.mean_squared_error,
            "sums": {k: v for k, v in asdict(self).items() if k not in ("title", "extra")},
            **self.extra,
        }

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __getitem__(self, key: str) -> Any:
        """The figure ``to_dict()`` names ``key``, or one of the short names the dict an
        ensemble's evaluation used to return had (``rows``, ``rmse``, ``mae``)."""
        return self.to_dict()[_SHORT_NAMES.get(key, key)]

    def __str__(self) -> str:
        lines = [
            f"=== {self.title} ===",
            "",
            f"Root mean squared error           {self.root_mean_squared_error:14.6g}",
            f"Mean absolute error               {self.mean_absolute_error:14.6g}",
            f"R squared                         {self.r2:14.6f}",
            f"Total Number of Instances         {self.count:14d}",
        ]
        if self.weight:
            lines.append(f"Total weight ({self.weight})".ljust(34) + f"{self.total:14.6g}")
        if self.rows_null_target:
            lines.append(f"Ignored Class Unknown Instances   {self.rows_null_target:14d}")
        return "\n".join(lines) + "\n"

    def titled(self, title: str) -> RegressionEvaluation:
        return replace(self, title=title)


def build_regression_query(
    model: Scorable, relation: exp.Expression, weight: str | None = None
) -> exp.Select:
    """``build_sums_query`` over the rows of ``relation`` scored by the tree's SQL."""
    scored = ScoredColumns(model.target, weight, 0)
    query = exp.select(
        *[column(c) for c in scored.kept],
        exp.alias_(compiler.compile_value(model.root), scored.names.ident("predicted"),
                   copy=False),
    ).from_(relation.copy(), copy=False)
    return build_sums_query(query, scored, tree_centre(model))


def tree_centre(model: Scorable) -> float:
    """The centre of a tree's target moments: its training mean (``root.value``)."""
    return model.root.value if model.root.value is not None else 0.0


def build_sums_query(query: exp.Select, scored: ScoredColumns, centre: float) -> exp.Select:
    """One row of ``_SUMS`` over ``query``, any model's scoring query that gives the columns
    ``scored`` names (a tree's, an ensemble's); ``centre`` is subtracted from the target
    before its moments are summed (see the module's docstring)."""
    weight, s = scored.weight, scored.alias
    actual = exp.cast(column(scored.target, s), "DOUBLE")
    known = actual.copy().is_(exp.null()).not_()
    w = exp.cast(column(weight, s), "DOUBLE") if weight else dnum(1.0)
    error = exp.paren(column(scored.predicted, s) - actual.copy())
    deviation = exp.paren(actual.copy() - dnum(centre))

    def known_sum(e: exp.Expression) -> exp.Expression:
        return exp.func("SUM", exp.Case(
            ifs=[exp.If(this=known.copy(), true=exp.paren(e, copy=False))], default=dnum(0.0)
        ))

    def count_when(condition: exp.Expression) -> exp.Expression:
        return exp.func("SUM", exp.Case(
            ifs=[exp.If(this=condition, true=exp.Literal.number(1))],
            default=exp.Literal.number(0),
        ))

    bad = (exp.or_(w.copy().is_(exp.null()), exp.LT(this=w.copy(), expression=dnum(0.0)))
           if weight else exp.false())
    outputs = [
        count_when(known.copy()),
        count_when(exp.not_(known.copy())),
        known_sum(w.copy()),
        known_sum(w.copy() * error * error.copy()),
        known_sum(w.copy() * exp.func("ABS", error.copy())),
        known_sum(w.copy() * deviation),
        known_sum(w.copy() * deviation.copy() * deviation.copy()),
        count_when(bad),
    ]
    return exp.select(*[
        exp.alias_(e, scored.names.ident(name), copy=False)
        for e, name in zip(outputs, _SUMS, strict=True)
    ]).from_(exp.Subquery(this=query, alias=exp.TableAlias(
        this=exp.to_identifier(s, quoted=True))), copy=False)


def evaluate_regression(
    model: Scorable,
    source: Any,
    *,
    connection: Any = None,
    weight: str | bool = True,
    title: str = "Evaluation",
) -> RegressionEvaluation:
    """Evaluate a regression ``model`` on ``source`` in the engine (``Model.evaluate``)."""
    weight_column = model_weight(model, weight)
    engine = get_engine(connection)
    try:
        relation = resolve_relation(source, engine)
        tested = {n.split.feature for n in model.root.walk() if n.split is not None}
        relation, schema = dates.for_scoring(getattr(model, "features", ()), tested, relation,
                                             engine.columns(relation), engine.dialect)
        names = [n for n, _ in schema]
        needed = [model.target, *([weight_column] if weight_column else [])]
        missing = [c for c in [*needed, *sorted(tested)] if c not in names]
        if missing:
            raise DataError(f"columns the evaluation reads are not in the source: {missing}; "
                            f"columns: {names}")
        check_source(model, dict(schema), engine, target=True)
        with compiler.collector_paused():
            (row,) = engine.execute(build_regression_query(model, relation, weight_column))
    finally:
        engine.cleanup()
    return from_sums(row, weight_column, tree_centre(model), title)


def from_sums(row: Sequence[Any], weight: str | None, centre: float,
              title: str = "Evaluation") -> RegressionEvaluation:
    """A ``RegressionEvaluation`` from the row of ``build_sums_query``."""
    sums = dict(zip(_SUMS, row, strict=True))
    if int(sums["bad_weights"] or 0):
        raise DataError(f"{int(sums['bad_weights'])} rows have a NULL or negative weight in "
                        f"{weight!r}")
    if not int(sums["rows"] or 0):
        raise DataError("the source has no rows with a known target to evaluate")
    return RegressionEvaluation(
        rows=int(sums["rows"]), rows_null_target=int(sums["rows_null_target"] or 0),
        weight=weight, total=float(sums["total"]),
        sum_sq_error=float(sums["sum_sq_error"]), sum_abs_error=float(sums["sum_abs_error"]),
        centre=centre, sum_dev=float(sums["sum_dev"]), sum_sq_dev=float(sums["sum_sq_dev"]),
        title=title,
    )


def combine_regression(
    parts: Sequence[RegressionEvaluation], title: str = "Evaluation"
) -> RegressionEvaluation:
    """The evaluation of all parts' rows together (cross-validation's pooled figures): the
    sums added, each part's moments moved to the first part's centre."""
    centre = parts[0].centre
    sum_dev = sum_sq_dev = 0.0
    for p in parts:
        shift = p.centre - centre  # target - centre = (target - p.centre) + shift
        sum_sq_dev += p.sum_sq_dev + 2 * shift * p.sum_dev + shift * shift * p.total
        sum_dev += p.sum_dev + shift * p.total
    return RegressionEvaluation(
        rows=sum(p.rows for p in parts),
        rows_null_target=sum(p.rows_null_target for p in parts),
        weight=parts[0].weight,
        total=sum(p.total for p in parts),
        sum_sq_error=sum(p.sum_sq_error for p in parts),
        sum_abs_error=sum(p.sum_abs_error for p in parts),
        centre=centre, sum_dev=sum_dev, sum_sq_dev=sum_sq_dev, title=title,
    )
