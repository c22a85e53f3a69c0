"""Permutation importance computed in the engine: each feature's values shuffled among the
rows by a hash, and the model scored on the shuffled rows, as scikit-learn's
``sklearn.inspection.permutation_importance`` does in memory.

The source's rows are numbered in the order of a hash of their values (as ``crossval`` deals
them, ``sqltree.dealing``: the same on every engine). A repeat of a feature joins each row's
number to the number its feature value is moved to, the order of
``MD5(seed | repeat | feature | number)``; the model is scored on that join by one aggregate
query. Nothing but the scores' sums comes back.

Any model that compiles to a scoring query is shuffled the same way: a tree (``Model``) is
scored by its evaluation query (``Model.evaluate``), a forest or boosting (``Ensemble``) by one
aggregate over its scoring query (``Ensemble.scoring_query``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from .compiler import collector_paused
from .compiler.blocks import column as quoted
from .compiler.blocks import dnum
from .dataset import resolve_relation
from .dealing import order_key, row_hash, session
from .errors import DataError, OptionError
from .evaluation import model_weight

__all__ = ["PermutationImportance", "permutation_importance"]


@dataclass
class PermutationImportance:
    """How much the model's score drops when each feature's values are shuffled.

    Attributes
    ----------
    baseline : float
        The score on the source as it is: accuracy for classes, R² for regression.
    importances : dict of str to list of float
        Per feature, the score's drop in each repeat (0 for a feature the tree never tests).
    """

    baseline: float
    importances: dict[str, list[float]] = field(default_factory=dict)

    @property
    def mean(self) -> dict[str, float]:
        """Each feature's mean drop (scikit-learn's ``importances_mean``)."""
        return {f: sum(v) / len(v) for f, v in self.importances.items()}

    @property
    def std(self) -> dict[str, float]:
        """Each feature's standard deviation of the drops (``importances_std``, ddof 0)."""
        out = {}
        for f, v in self.importances.items():
            m = sum(v) / len(v)
            out[f] = math.sqrt(sum((x - m) ** 2 for x in v) / len(v))
        return out


def permutation_importance(
    model: Any,
    source: Any,
    *,
    connection: Any = None,
    n_repeats: int = 5,
    seed: int = 1,
    weight: str | bool = True,
) -> PermutationImportance:
    """Each feature's permutation importance on ``source`` (a table, query, path or
    DataFrame holding the target), shuffled and scored in the engine.

    ``model``: a tree (``Model``) or a forest or boosting (``Ensemble``: trained, or imported
    from scikit-learn, LightGBM or XGBoost). ``n_repeats`` shuffles per feature, each by
    ``MD5`` of ``seed``, the repeat, the feature and the row's position: the same numbers on
    every engine and run. The score is the accuracy (R² for regression), weighted as
    ``Model.evaluate`` weighs (``weight``: True the model's training weight column, if any,
    False every row 1, or a column); rows with a NULL target are left out.

    Examples
    --------
    >>> import sqltree
    >>> model = sqltree.train("examples/data/golf.csv", target="play")
    >>> result = sqltree.permutation_importance(model, "examples/data/golf.csv", n_repeats=2)
    >>> result.baseline, result.mean["temperature"]
    (1.0, 0.0)
    """
    if isinstance(n_repeats, bool) or not isinstance(n_repeats, int) or n_repeats < 1:
        raise OptionError(f"n_repeats must be a whole number >= 1, not {n_repeats!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise OptionError(f"seed must be a whole number, not {seed!r}")
    tree = hasattr(model, "root")
    tested = ({n.split.feature for n in model.root.walk() if n.split is not None} if tree
              else set(model.used_features()))
    weight_column = model_weight(model, weight)
    with session(connection) as (engine, shared):
        relation = resolve_relation(source, engine)
        schema = engine.columns(relation)
        names = [n for n, _ in schema]
        read = [model.target, *([weight_column] if weight_column else []), *sorted(tested)]
        missing = [c for c in read if c not in names]
        if missing:
            raise DataError(f"columns the evaluation reads are not in the source: {missing}")
        number = "__sqltree_row"
        while number in names:
            number = "_" + number
        order = [row_hash(schema, seed, None)]
        order += [k for k in (order_key(quoted(n), t) for n, t in schema) if k]
        # Read inline by each evaluation (a read-only connection has no temporary tables).
        numbered = exp.Select(expressions=[
            *[quoted(n) for n in names],
            exp.Alias(this=exp.Window(this=exp.RowNumber(), order=exp.Order(expressions=[
                exp.Ordered(this=o, nulls_first=True) for o in order])),
                alias=exp.to_identifier(number, quoted=True)),
        ]).from_(relation.copy(), copy=False)
        plain = exp.Select(expressions=[quoted(n) for n in names]).from_(relation.copy())
        if tree:
            def score(rows: exp.Select) -> float:
                return _evaluated(model.evaluate(rows, connection=shared, weight=weight))
        else:
            model._check_source(dict(schema), engine, target=True)
            score = _ScoringQuery(model, engine, names, weight_column).score
        baseline = score(plain)
        result = PermutationImportance(baseline)
        for feature in model.feature_names:
            if feature not in tested:
                result.importances[feature] = [0.0] * n_repeats
                continue
            result.importances[feature] = [
                baseline - score(_shuffled(numbered, names, feature, number,
                                           f"{seed}|{r}|{feature}|"))
                for r in range(n_repeats)
            ]
    return result


def _evaluated(evaluation: Any) -> float:
    return float(evaluation.r2 if hasattr(evaluation, "r2") else evaluation.accuracy)


class _ScoringQuery:
    """The score of a model that compiles to a scoring query (``scoring_query(relation,
    columns, column=, dialect=)``: an ``Ensemble``) on a query's rows, from one aggregate
    query over it: the weighted accuracy, or R² (the target's weighted mean and total sum of
    squares come from the first rows scored, the unshuffled source, whose target every
    shuffle keeps)."""

    def __init__(self, model: Any, engine: Any, names: list[str], weight: str | None) -> None:
        self.model, self.engine, self.weight = model, engine, weight
        taken = {n.lower() for n in names}
        self.predicted = "__sqltree_prediction"
        while self.predicted in taken:
            self.predicted = "_" + self.predicted
        self.total_squares: float | None = None

    def score(self, rows: exp.Select) -> float:
        model, y = self.model, quoted(self.model.target)
        w: exp.Expression = quoted(self.weight) if self.weight else dnum(1.0)
        kept = [model.target, *([self.weight] if self.weight else [])]
        scored = model.scoring_query(
            exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier(
                "permuted", quoted=True))),
            kept, column=self.predicted, dialect=self.engine.dialect)
        p = quoted(self.predicted)
        bad = exp.Or(this=exp.Is(this=w.copy(), expression=exp.Null()),
                     expression=exp.LT(this=w.copy(), expression=dnum(0.0)))
        sums: list[exp.Expression] = [
            exp.Sum(this=w.copy()),
            exp.Sum(this=_case(bad, dnum(1.0))),
        ]
        if model.is_regression:
            error = exp.Sub(this=y.copy(), expression=p)
            sums.append(exp.Sum(this=exp.Mul(this=w.copy(), expression=exp.Mul(
                this=exp.Paren(this=error), expression=exp.Paren(this=error.copy())))))
            sums.append(exp.Sum(this=exp.Mul(this=w.copy(), expression=y.copy())))
        else:
            sums.append(exp.Sum(this=_case(exp.EQ(this=p, expression=y.copy()), w.copy())))
        query = exp.Select(expressions=sums).from_(exp.Subquery(
            this=scored, alias=exp.TableAlias(this=exp.to_identifier("s", quoted=True))
        )).where(exp.Not(this=exp.Is(this=y.copy(), expression=exp.Null())))
        with collector_paused():
            ((total, bad_rows, *figures),) = self.engine.execute(query)
        if bad_rows:
            raise DataError(f"{int(bad_rows)} rows have a NULL or negative weight in "
                            f"{self.weight!r}")
        if not total:
            raise DataError("the source has no rows with a known target (and a positive "
                            "weight) to score")
        if not model.is_regression:
            return float(figures[0]) / float(total)
        if self.total_squares is None:
            self.total_squares = self._total_squares(rows, float(figures[1]) / float(total))
        if self.total_squares <= 0:
            return 0.0
        return 1.0 - float(figures[0]) / self.total_squares

    def _total_squares(self, rows: exp.Select, mean: float) -> float:
        y = quoted(self.model.target)
        w: exp.Expression = quoted(self.weight) if self.weight else dnum(1.0)
        gap = exp.Paren(this=exp.Sub(this=y, expression=dnum(mean)))
        query = exp.Select(expressions=[exp.Sum(this=exp.Mul(this=w, expression=exp.Mul(
            this=gap, expression=gap.copy())))]).from_(_aliased(rows, "t")).where(
            exp.Not(this=exp.Is(this=y.copy(), expression=exp.Null())))
        ((total,),) = self.engine.execute(query)
        return float(total or 0.0)


def _case(condition: exp.Expression, value: exp.Expression) -> exp.Expression:
    """``CASE WHEN condition THEN value ELSE 0.0 END``."""
    return exp.Case(ifs=[exp.If(this=condition, true=value)], default=dnum(0.0))


def _aliased(rows: exp.Expression, alias: str) -> exp.Expression:
    name = exp.TableAlias(this=exp.to_identifier(alias, quoted=True))
    if isinstance(rows, exp.Table):
        return exp.Table(this=rows.this.copy(), db=rows.args.get("db"), alias=name)
    return exp.Subquery(this=rows.copy(), alias=name)


def _shuffled(numbered: exp.Expression, names: Sequence[str], feature: str, number: str,
              salt: str) -> exp.Select:
    """The numbered rows with ``feature`` taken from the row whose number comes at the same
    place in the order of ``MD5(salt || number)``."""
    key = exp.MD5(this=exp.DPipe(this=exp.Literal.string(salt), expression=exp.cast(
        quoted(number), exp.DataType.build("VARCHAR")), safe=True))
    moved = exp.Select(expressions=[
        exp.Alias(this=quoted(feature), alias=exp.to_identifier("v", quoted=True)),
        exp.Alias(this=exp.Window(this=exp.RowNumber(), order=exp.Order(expressions=[
            exp.Ordered(this=key), exp.Ordered(this=quoted(number))])),
            alias=exp.to_identifier("n", quoted=True)),
    ]).from_(_aliased(numbered, "q"))
    columns = [exp.Alias(this=exp.column("v", "s", quoted=True),
                         alias=exp.to_identifier(n, quoted=True)) if n == feature
               else exp.column(n, "r", quoted=True) for n in names]
    return exp.Select(expressions=columns).from_(_aliased(numbered, "r")).join(
        exp.Subquery(this=moved, alias=exp.TableAlias(this=exp.to_identifier("s", quoted=True))),
        on=exp.EQ(this=exp.column(number, "r", quoted=True),
                  expression=exp.column("n", "s", quoted=True)))
