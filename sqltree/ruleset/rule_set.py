"""The rule set: build it from a tree and its training rows, print it, score with it in SQL."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlglot import exp
from sqlglot.errors import ErrorLevel

from .. import progress as reporting
from ..compiler import collector_paused
from ..compiler.blocks import column, literal
from ..dataset import resolve_relation, sort_key
from ..engines import get_engine
from ..engines.sqlite_numbers import exact_numbers
from ..errors import DataError, OptionError, UnsupportedError
from ..evaluation import EPS, Evaluation, confusion_text, from_groups, model_weight
from ..options import check_dialect
from ..tree import NOMINAL, Value, format_value
from .conditions import conjunction, leaf_paths
from .counts import Counter
from .generalise import GeneraliseStats, Rule, generalise
from .selection import Coding, Patterns, RuleUse, select, training_use

if TYPE_CHECKING:
    import pandas

    from ..evaluation import Scorable


def _w(x: float) -> str:
    """A weight as C4.5rules prints counts: whole numbers without decimals."""
    return f"{x:.0f}" if abs(x - round(x)) < 1e-9 else f"{x:.1f}"


@dataclass
class RuleSet:
    """An ordered list of rules and a default class, as C4.5rules makes from a tree.

    A row takes the class of the first rule whose conditions it satisfies, else the default
    class. A condition on an unknown value (NULL, or a nominal value the tree did not list) is
    not satisfied. ``str()`` prints the rules as C4.5rules does, each with its training
    coverage and estimated accuracy (one less its pessimistic error rate), then the default
    class and the evaluation on the training rows.

    Attributes
    ----------
    rules : list of Rule
        In the order they are tried.
    default : int
        Index of the default class.
    classes : list
        The model's classes (a rule's ``label`` indexes them).
    target : str
    cf : float
        The confidence of the pessimistic error estimates.
    training : RuleUse
        How the rules classify the training rows.
    stats : dict
        What generalisation and selection did (leaves, rounds, rules dropped and merged,
        the search used per class, queries).
    """

    rules: list[Rule]
    default: int
    classes: list[Value]
    target: str
    cf: float
    training: RuleUse
    weight: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    # -- structure ---------------------------------------------------------------------------
    @property
    def n_rules(self) -> int:
        return len(self.rules)

    @property
    def n_conditions(self) -> int:
        return sum(len(r.conditions) for r in self.rules)

    @property
    def default_class(self) -> Value:
        return self.classes[self.default]

    # -- text --------------------------------------------------------------------------------
    def __str__(self) -> str:
        return self.text()

    def text(self, decimals: int | None = 6) -> str:
        """The rules, the default class and the training evaluation, as C4.5rules prints
        them (rules numbered in the order they are tried)."""
        lines = [f"Rules from {self.stats.get('leaves', 0)} leaves (cf {self.cf:g}):", ""]
        for i, r in enumerate(self.rules, start=1):
            lines.append(f"Rule {i}: (covers {_w(r.coverage)}, {_w(r.errors)} wrong)")
            lines += [f"    {c.text(decimals)}" for c in r.conditions]
            lines.append(f"    ->  class {format_value(self.classes[r.label])}  "
                         f"[{100 * (1 - r.error):.1f}%]")
            lines.append("")
        lines.append(f"Default class: {format_value(self.default_class)}")
        lines += ["", self.training_text()]
        return "\n".join(lines) + "\n"

    def training_text(self) -> str:
        """C4.5rules' evaluation on training data: per rule its size, error estimate, the rows
        it classifies, how many wrongly, and its advantage over the next rule or default."""
        t = self.training
        size = f"weight {_w(t.rows)}" if self.weight else f"{_w(t.rows)} rows"
        lines = [f"Evaluation on training data ({size}):", "",
                 "Rule  Size  Error  Used  Wrong          Advantage",
                 "----  ----  -----  ----  -----          ---------"]
        for i, r in enumerate(self.rules):
            share = 100 * t.wrong[i] / t.used[i] if t.used[i] else 0.0
            advantage = f"{_w(t.gain[i] - t.loss[i])} ({_w(t.gain[i])}|{_w(t.loss[i])})"
            lines.append(
                f"{i + 1:>4}  {len(r.conditions):>4}  {100 * r.error:>4.1f}%  "
                f"{_w(t.used[i]):>4}  {_w(t.wrong[i]):>5} {f'({share:.1f}%)':<8}"
                f"{advantage:>12}  {format_value(self.classes[r.label])}"
            )
        share = 100 * t.errors / t.rows if t.rows else 0.0
        lines += ["", f"Tested {_w(t.rows)}, errors {_w(t.errors)} ({share:.1f}%)", "",
                  confusion_text(self.classes, t.matrix)]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"RuleSet(target={self.target!r}, n_rules={self.n_rules}, "
                f"n_conditions={self.n_conditions}, default={self.default_class!r})")

    # -- in Python ---------------------------------------------------------------------------
    def rule_of(self, row: dict[str, Any]) -> int | None:
        """The index of the first rule a row satisfies, None if none does."""
        for i, r in enumerate(self.rules):
            if all(c.holds(row) for c in r.conditions):
                return i
        return None

    def predict_row(self, row: dict[str, Any]) -> Value:
        """The class of one row (column name to value), as the SQL gives it."""
        i = self.rule_of(row)
        return self.classes[self.default if i is None else self.rules[i].label]

    # -- SQL ---------------------------------------------------------------------------------
    def to_expression(self, table: str | None = None) -> exp.Expression:
        """``CASE WHEN <rule 1> THEN class ... ELSE default END`` as a sqlglot expression."""
        ifs = [exp.If(this=conjunction(r.conditions, table), true=literal(self.classes[r.label]))
               for r in self.rules]
        default = literal(self.default_class)
        return exp.Case(ifs=ifs, default=default) if ifs else default

    def scoring_query(self, relation: exp.Expression, column_name: str = "prediction"
                      ) -> exp.Select:
        """``SELECT *, <CASE> AS prediction FROM relation``."""
        return exp.Select(expressions=[exp.Star(), exp.Alias(
            this=self.to_expression(), alias=exp.to_identifier(column_name, quoted=True))]
        ).from_(relation, copy=False)

    def to_sql(self, dialect: str = "duckdb", *, table: str | None = None,
               column: str = "prediction", pretty: bool = False) -> str:
        """The rule set as SQL for any sqlglot dialect: the CASE expression, or with
        ``table`` the query that adds it to the table's rows as ``column``."""
        check_dialect(dialect)
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 20_000))
        try:
            with collector_paused():
                expression = (self.to_expression() if table is None else
                              self.scoring_query(exp.to_table(table, dialect=dialect), column))
                if dialect == "sqlite":  # SQLite's text-to-double is not correctly rounded
                    expression = exact_numbers(expression)
                # built for this call: rendered without a copy
                return expression.sql(dialect=dialect, unsupported_level=ErrorLevel.RAISE,
                                      pretty=pretty, copy=False)
        finally:
            sys.setrecursionlimit(limit)

    def predict(self, source: Any, *, connection: Any = None, column: str = "prediction"
                ) -> pandas.DataFrame:
        """The source's rows with the rule set's class in ``column``, scored in the engine."""
        engine = get_engine(connection)
        try:
            relation = resolve_relation(source, engine)
            names = [n for n, _ in engine.columns(relation)]
            if column.lower() in {n.lower() for n in names}:
                raise DataError(f"the source already has a column {column!r}; choose "
                                "another column=")
            _check_columns(names, self._tested(), "columns the rules test")
            return engine.frame(self.scoring_query(relation, column))
        finally:
            engine.cleanup()

    def _tested(self) -> list[str]:
        return sorted({c.feature for r in self.rules for c in r.conditions})

    def evaluate(self, source: Any, *, connection: Any = None, weight: str | bool = True,
                 title: str = "Evaluation") -> Evaluation:
        """Evaluate the rule set on ``source`` with one ``GROUP BY actual, predicted`` query
        in the engine (as ``Model.evaluate``; a rule set gives each row one class, with
        probability 1)."""
        weight_column = self.weight if weight is True else _weight_column(weight)
        engine = get_engine(connection)
        try:
            relation = resolve_relation(source, engine)
            names = [n for n, _ in engine.columns(relation)]
            _check_columns(names, [self.target, *([weight_column] if weight_column else [])],
                           "columns the evaluation needs")
            _check_columns(names, self._tested(), "columns the rules test")
            rows = engine.execute(self._evaluation_query(relation, weight_column))
        finally:
            engine.cleanup()
        groups = []
        for actual, predicted, n, w, bad in rows:
            w = float(w or 0.0)
            right = actual is not None and sort_key(actual) == sort_key(predicted)
            p = 1.0 if right else 0.0
            groups.append((actual, predicted, n, w, w * p,
                           w * math.log(min(max(p, EPS), 1 - EPS)), w, bad))
        counts = [0.0] * len(self.classes)
        for i, c in enumerate(self.training.matrix):
            counts[i] = sum(c)
        return from_groups(groups, self.classes, counts, weight_column, title)

    def _evaluation_query(self, relation: exp.Expression, weight: str | None) -> exp.Select:
        inner = exp.Select(expressions=[
            exp.Alias(this=column(self.target), alias=exp.to_identifier("a", quoted=True)),
            exp.Alias(this=self.to_expression(), alias=exp.to_identifier("p", quoted=True)),
            exp.Alias(this=(exp.Cast(this=column(weight), to=exp.DataType.build("DOUBLE"))
                            if weight else exp.Literal.number(1)),
                      alias=exp.to_identifier("w", quoted=True)),
        ]).from_(relation, copy=False)
        a, p, w = (exp.column(n, quoted=True) for n in "apw")
        bad = (exp.or_(w.copy().is_(exp.null()), exp.LT(this=w.copy(),
                                                         expression=exp.Literal.number(0)))
               if weight else exp.false())
        return exp.Select(expressions=[
            a.copy(), p.copy(), exp.Count(this=exp.Star()), exp.Sum(this=w.copy()),
            exp.Sum(this=exp.Case(ifs=[exp.If(this=bad, true=exp.Literal.number(1))],
                                  default=exp.Literal.number(0))),
        ]).from_(exp.Subquery(this=inner, alias=exp.TableAlias(
            this=exp.to_identifier("s", quoted=True))), copy=False).group_by(
            a.copy(), p.copy(), copy=False)


def _weight_column(weight: str | bool) -> str | None:
    """A weight column named by the caller (False: count rows)."""
    if weight is False:
        return None
    if not isinstance(weight, str) or not weight:
        raise OptionError(f"weight must be True, False or a column name, not {weight!r}")
    return weight


def _check_columns(names: Sequence[str], needed: Sequence[str], what: str) -> None:
    missing = [n for n in needed if n not in names]
    if missing:
        raise DataError(f"{what} are not in the source: {missing}; columns: {list(names)}")


# -- building ----------------------------------------------------------------------------------
def build_rule_set(model: Scorable | Any, source: Any, *, connection: Any = None,
                   cf: float = 0.25, weight: str | bool = True, seed: int = 1) -> RuleSet:
    """C4.5rules on ``model``'s tree and its training rows ``source`` (see
    ``Model.rule_set``)."""
    if getattr(model, "is_regression", False):
        raise UnsupportedError("a regression tree has no classes to make rules for")
    if isinstance(cf, bool) or not isinstance(cf, int | float) or not 0 < cf < 1:
        raise OptionError(f"cf must be a number in (0, 1), not {cf!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise OptionError(f"seed must be a whole number, not {seed!r}")
    weight_column = model_weight(model, weight)
    classes = list(model.classes)
    leaves = [(leaf.node_id, leaf.label, conditions)
              for leaf, conditions in leaf_paths(model.root)]
    engine = get_engine(connection)
    start = f"C4.5rules from {len(leaves):,} leaves"
    try:
        with reporting.phase("rule set", start) as phase:
            relation = resolve_relation(source, engine)
            names = [n for n, _ in engine.columns(relation)]
            tested = sorted({c.feature for _, _, cs in leaves for c in cs})
            _check_columns(names, [model.target, *([weight_column] if weight_column else [])],
                           "columns the rule set needs")
            _check_columns(names, tested, "columns the tree tests")
            counter = Counter(engine, relation, model.target, classes, weight_column)
            rules, gstats = generalise(leaves, counter, cf)
            groups = counter.patterns([r.conditions for r in rules])
            patterns = Patterns.of(groups, len(rules))
            totals = [float(patterns.weight[patterns.label == c].sum())
                      for c in range(len(classes))]
            bits = _rule_bits(model, counter, rules, patterns.rows)
            chosen = select([r.label for r in rules], [r.error for r in rules], bits,
                            patterns, totals, seed)
            use = training_use(chosen.order, [r.label for r in rules], chosen.default,
                               patterns, len(classes))
            stats = {
                "leaves": gstats.leaves, "rounds": gstats.rounds,
                "dropped_conditions": gstats.dropped_conditions, "emptied": gstats.emptied,
                "inaccurate": gstats.inaccurate, "merged": gstats.merged,
                "candidates": len(rules), "rules": len(chosen.order),
                "search": {format_value(classes[c]): s for c, s in chosen.searched.items()},
                "seed": seed, "queries": counter.queries,
            }
            phase.done(f"{len(chosen.order):,} rules from {len(leaves):,} leaves, "
                       f"{phase.seconds:.2f} s", **{k: v for k, v in stats.items()
                                                     if k != "search"})
    finally:
        engine.cleanup()
    return RuleSet([rules[i] for i in chosen.order], chosen.default, classes, model.target,
                   float(cf), use, weight_column, stats)


def _rule_bits(model: Any, counter: Counter, rules: Sequence[Rule], rows: float
               ) -> list[float]:
    """Each rule's theory bits (``selection.Coding``); no query when there are no rules."""
    if not rules:
        return []
    nominal = [f.name for f in model.features if f.kind == NOMINAL]
    continuous = [f.name for f in model.features if f.kind != NOMINAL]
    frequencies, distinct = counter.coding(nominal, continuous)
    coding = Coding.from_counts(rows, frequencies, distinct)
    return [coding.rule_bits(r.conditions) for r in rules]


__all__ = ["GeneraliseStats", "Rule", "RuleSet", "build_rule_set"]
