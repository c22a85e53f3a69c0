"""Permutation importance computed in the engine: each feature's values shuffled among the
rows by a hash, and the model evaluated on the shuffled rows, as scikit-learn's
``sklearn.inspection.permutation_importance`` does in memory.

The source's rows are numbered once, in the order of a hash of their values (as
``crossval`` deals them, the same on every engine), into a temporary table. A repeat of a
feature joins each row's number to the number its feature value is moved to, the order of
``MD5(seed | repeat | feature | number)``; the model is evaluated on that join with one
grouped query. Nothing but the evaluations' counts comes back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from .compiler.blocks import column as quoted
from .crossval import _session, order_key, row_hash
from .dataset import resolve_relation
from .errors import DataError, OptionError

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


def _score(evaluation: Any) -> float:
    return float(evaluation.r2 if hasattr(evaluation, "r2") else evaluation.accuracy)


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

    ``n_repeats`` shuffles per feature, each by ``MD5`` of ``seed``, the repeat, the feature
    and the row's position: the same numbers on every engine and run. The score is the
    evaluation's accuracy (R² for a regression tree), weighted as ``Model.evaluate`` weighs
    (``weight``).

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
    tested = {n.split.feature for n in model.root.walk() if n.split is not None}
    with _session(connection) as (engine, shared):
        relation = resolve_relation(source, engine)
        schema = engine.columns(relation)
        names = [n for n, _ in schema]
        missing = [c for c in [model.target, *sorted(tested)] if c not in names]
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
        baseline = _score(model.evaluate(plain, connection=shared, weight=weight))
        result = PermutationImportance(baseline)
        for feature in model.feature_names:
            if feature not in tested:
                result.importances[feature] = [0.0] * n_repeats
                continue
            result.importances[feature] = [
                baseline - _score(model.evaluate(
                    _shuffled(numbered, names, feature, number, f"{seed}|{r}|{feature}|"),
                    connection=shared, weight=weight))
                for r in range(n_repeats)
            ]
    return result


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
