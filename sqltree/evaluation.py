"""Evaluate a tree where the data lives: one ``GROUP BY actual, predicted`` query.

The query scores the source with the compiled SQL (``compiler.scoring.build_scoring_query``:
the label and every class probability, C4.5's unknown values spread as in ``predict``) and
groups the rows by actual and predicted class. Each group brings back its rows, its weight and three
weighted sums over its rows: the probability of the actual class, its logarithm (clipped to
``[eps, 1 - eps]`` as scikit-learn's ``log_loss`` clips) and the sum of squared class
probabilities. Everything else is arithmetic on those few numbers in Python: the confusion
matrix, accuracy, Cohen's kappa, per-class precision / recall / F1 / support, their averages,
log loss and Weka's error measures (mean absolute and root mean squared error of the class
probabilities, and both relative to the training class distribution).

Rows with a NULL target form a group of their own and are counted, not evaluated.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from sqlglot import exp

from . import compiler, dates
from .compiler.blocks import column, dnum, literal
from .compiler.scoring import Names, build_scoring_query
from .dataset import resolve_relation, sort_key
from .engines import get_engine
from .errors import DataError, OptionError
from .source_check import check_source
from .tree import Node, Value, format_value, scoring_tree

EPS = sys.float_info.epsilon
"""Probabilities are clipped to ``[EPS, 1 - EPS]`` before the logarithm (scikit-learn's
``log_loss`` clips to the machine epsilon of float64 the same way)."""

_GROUP_COLUMNS = ("actual", "predicted", "rows", "weight", "p_actual", "log_p", "p_squared",
                  "bad_weights")


class Scorable(Protocol):
    """What evaluation needs of a model (``sqltree.Model`` has it)."""

    root: Node
    classes: list[Value]
    target: str
    options: dict[str, Any]


@dataclass(frozen=True)
class ClassFigures:
    """One class's row of the detailed table: rates and counts (weights) for that class."""

    label: Value
    tp_rate: float
    fp_rate: float
    precision: float
    recall: float
    f1: float
    support: float


@dataclass
class Evaluation:
    """How well a tree classifies a source, from the counts one SQL query returned.

    Attributes
    ----------
    classes : list
        The classes of the matrix, in sqltree's order: the model's classes and any other class
        the source holds.
    matrix : list of list of float
        ``matrix[i][j]``: weight of the rows of class ``classes[i]`` predicted as
        ``classes[j]``.
    rows : int
        Rows evaluated (rows with a known class).
    rows_null_target : int
        Rows left out because their class is NULL.
    weight : str or None
        The weight column every count is a sum of (None: each row counts 1).
    sum_p_actual, sum_log_p, sum_p_squared : float
        Weighted sums over the rows of the probability given to the actual class, of its
        clipped natural logarithm, and of the squared class probabilities.
    sum_prior_abs, sum_prior_sq : float
        The same rows' absolute and squared errors had every row been given the training
        class distribution (with one added to every class, as Weka counts it): the
        denominators of the relative errors.
    title : str
        The heading ``str()`` prints.
    """

    classes: list[Value]
    matrix: list[list[float]]
    rows: int
    rows_null_target: int
    weight: str | None
    sum_p_actual: float
    sum_log_p: float
    sum_p_squared: float
    sum_prior_abs: float
    sum_prior_sq: float
    title: str = "Evaluation"
    extra: dict[str, Any] = field(default_factory=dict)
    """Facts about what was evaluated (the source, the fold), kept in ``to_dict``."""
    unseen_classes: list[Value] = field(default_factory=list)
    """Classes the source holds that the model was not trained on (so never predicts): they
    have rows of the matrix, and ``str()`` and ``to_dict`` name them with their weight."""

    scores: list[tuple[Value, tuple[float, ...], float]] = field(default_factory=list)
    """Weight per (actual class, probability vector): what the ROC and precision-recall
    areas are computed from (the probabilities of ``score_classes``, in that order)."""
    score_classes: list[Value] = field(default_factory=list)
    """The classes of each probability vector in ``scores``: the model's."""

    @property
    def unseen_weight(self) -> float:
        """Total weight of the rows whose class the model was not trained on."""
        unseen = {_key(c) for c in self.unseen_classes}
        return float(sum(self._support(i) for i, c in enumerate(self.classes)
                         if _key(c) in unseen))

    # -- totals ------------------------------------------------------------------------------
    @property
    def total(self) -> float:
        """Total weight evaluated (the number of rows when there is no weight column)."""
        return float(sum(sum(r) for r in self.matrix))

    @property
    def correct(self) -> float:
        return float(sum(self.matrix[i][i] for i in range(len(self.classes))))

    @property
    def accuracy(self) -> float:
        return self.correct / self.total

    @property
    def error_rate(self) -> float:
        return 1.0 - self.accuracy

    @property
    def kappa(self) -> float:
        """Cohen's kappa of the (weighted) confusion matrix; 1 where chance agreement is
        already perfect (one class, always predicted), as Weka reports it."""
        n = self.total
        chance = sum(self._support(i) * self._predicted(i) for i in range(len(self.classes)))
        chance /= n * n
        if chance >= 1.0:
            return 1.0
        return (self.correct / n - chance) / (1.0 - chance)

    @property
    def matthews_correlation(self) -> float:
        """Matthews correlation coefficient of the (weighted) confusion matrix, for any number
        of classes (scikit-learn's ``matthews_corrcoef``; 0 where it is undefined)."""
        k = len(self.classes)
        n, correct = self.total, self.correct
        actual = [self._support(i) for i in range(k)]
        predicted = [self._predicted(i) for i in range(k)]
        covariance = correct * n - sum(a * p for a, p in zip(actual, predicted))
        spread_p = n * n - sum(p * p for p in predicted)
        spread_a = n * n - sum(a * a for a in actual)
        if spread_p * spread_a == 0:
            return 0.0
        return covariance / math.sqrt(spread_p * spread_a)

    @property
    def balanced_accuracy(self) -> float:
        """The mean recall of the classes the source holds (scikit-learn's
        ``balanced_accuracy_score``)."""
        recalls = [self.matrix[i][i] / self._support(i) for i in range(len(self.classes))
                   if self._support(i) > 0]
        return sum(recalls) / len(recalls)

    # -- ranking -------------------------------------------------------------------------------
    def _class_scores(self, c: int) -> list[tuple[float, float, float]]:
        """(probability of ``score_classes[c]``, positive weight, negative weight) per
        distinct probability, ascending."""
        label = _key(self.score_classes[c])
        by_score: dict[float, list[float]] = {}
        for actual, probs, w in self.scores:
            pair = by_score.setdefault(probs[c], [0.0, 0.0])
            pair[0 if _key(actual) == label else 1] += w
        return sorted((s, pos, neg) for s, (pos, neg) in by_score.items())

    def roc_auc_by_class(self) -> dict[Value, float | None]:
        """Each class's area under the ROC curve, that class against the rest (the
        probability that a row of the class scores above one of another, ties counting
        half: scikit-learn's ``roc_auc_score``); None without rows of the class or others."""
        out: dict[Value, float | None] = {}
        for c, label in enumerate(self.score_classes):
            points = self._class_scores(c)
            positive = sum(p for _, p, _ in points)
            negative = sum(n for _, _, n in points)
            if positive <= 0 or negative <= 0:
                out[label] = None
                continue
            below = area = 0.0
            for _, pos, neg in points:
                area += pos * (below + 0.5 * neg)
                below += neg
            out[label] = area / (positive * negative)
        return out

    def pr_auc_by_class(self) -> dict[Value, float | None]:
        """Each class's area under the precision-recall curve, that class against the rest,
        as average precision (scikit-learn's ``average_precision_score``); None without rows
        of the class."""
        out: dict[Value, float | None] = {}
        for c, label in enumerate(self.score_classes):
            points = self._class_scores(c)
            positive = sum(p for _, p, _ in points)
            if positive <= 0:
                out[label] = None
                continue
            tp = fp = recall = area = 0.0
            for _, pos, neg in reversed(points):
                tp, fp = tp + pos, fp + neg
                if tp + fp > 0:
                    area += (tp / positive - recall) * (tp / (tp + fp))
                recall = tp / positive
            out[label] = area
        return out

    def _weighted(self, by_class: dict[Value, float | None]) -> float | None:
        """The classes' figures weighted by their weight in the source (Weka's weighted
        average, scikit-learn's ``average="weighted"``), over the classes that have one."""
        support = {_key(c): self._support(i) for i, c in enumerate(self.classes)}
        pairs = [(v, support.get(_key(c), 0.0)) for c, v in by_class.items() if v is not None]
        total = sum(w for _, w in pairs)
        return sum(v * w for v, w in pairs) / total if total > 0 else None

    @property
    def roc_auc(self) -> float | None:
        """Area under the ROC curve: of the second class for two classes, else one class
        against the rest, weighted by the classes' weights (None when undefined)."""
        if len(self.score_classes) == 2:
            return self.roc_auc_by_class()[self.score_classes[1]]
        return self._weighted(self.roc_auc_by_class())

    @property
    def pr_auc(self) -> float | None:
        """Area under the precision-recall curve (average precision): of the second class for
        two classes, else weighted over the classes as ``roc_auc``."""
        if len(self.score_classes) == 2:
            return self.pr_auc_by_class()[self.score_classes[1]]
        return self._weighted(self.pr_auc_by_class())

    def threshold_curve(self) -> list[dict[str, float]]:
        """For two classes, one row per distinct probability ``t`` of the second (positive)
        class, highest first: predicting it where its probability is at least ``t`` gives
        these weights of true and false positives and negatives, precision, recall and false
        positive rate (Weka's threshold curve)."""
        positive = self._two_classes("threshold_curve")
        points = self._class_scores(positive)
        pos_total = sum(p for _, p, _ in points)
        neg_total = sum(n for _, _, n in points)
        rows, tp, fp = [], 0.0, 0.0
        for s, pos, neg in reversed(points):
            tp, fp = tp + pos, fp + neg
            rows.append({"threshold": s, "tp": tp, "fp": fp, "fn": pos_total - tp,
                         "tn": neg_total - fp, "precision": _ratio(tp, tp + fp),
                         "recall": _ratio(tp, pos_total), "fp_rate": _ratio(fp, neg_total)})
        return rows

    def at_threshold(self, threshold: float) -> Evaluation:
        """The evaluation had the second (positive) class been predicted where its
        probability is at least ``threshold`` (two classes only); the probability figures
        stay."""
        positive = self._two_classes("a threshold")
        if not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            raise OptionError(f"threshold must be a probability in [0, 1], not {threshold!r}")
        index = {_key(c): i for i, c in enumerate(self.classes)}
        yes, no = (index[_key(self.score_classes[i])] for i in (positive, 1 - positive))
        k = len(self.classes)
        matrix = [[0.0] * k for _ in range(k)]
        for actual, probs, w in self.scores:
            matrix[index[_key(actual)]][yes if probs[positive] >= threshold else no] += w
        return replace(self, matrix=matrix, extra={**self.extra, "threshold": threshold})

    def _two_classes(self, what: str) -> int:
        if len(self.score_classes) != 2:
            raise OptionError(f"{what} needs a model of two classes; this one has "
                              f"{len(self.score_classes)}")
        return 1

    # -- probabilities -----------------------------------------------------------------------
    @property
    def log_loss(self) -> float:
        """Mean negative log-likelihood of the actual classes (natural log; a class the model
        does not know has probability 0, clipped to ``EPS``)."""
        return -self.sum_log_p / self.total

    @property
    def _sum_abs(self) -> float:  # Σ w Σ_c |p_c - y_c|, where the p_c add up to 1
        return 2.0 * (self.total - self.sum_p_actual)

    @property
    def _sum_sq(self) -> float:  # Σ w Σ_c (p_c - y_c)²
        return max(0.0, self.sum_p_squared - 2.0 * self.sum_p_actual + self.total)

    @property
    def mean_absolute_error(self) -> float:
        """Weka's: the mean over rows of the mean over classes of ``|p_c - y_c|``."""
        return self._sum_abs / (len(self.classes) * self.total)

    @property
    def root_mean_squared_error(self) -> float:
        """Weka's: the root of the mean over rows and classes of ``(p_c - y_c)²``."""
        return math.sqrt(self._sum_sq / (len(self.classes) * self.total))

    @property
    def relative_absolute_error(self) -> float | None:
        """Absolute error in percent of the training class distribution's (None if that is 0)."""
        return 100.0 * self._sum_abs / self.sum_prior_abs if self.sum_prior_abs > 0 else None

    @property
    def root_relative_squared_error(self) -> float | None:
        """Root squared error in percent of the training class distribution's."""
        if self.sum_prior_sq <= 0:
            return None
        return 100.0 * math.sqrt(self._sum_sq / self.sum_prior_sq)

    # -- per class ---------------------------------------------------------------------------
    def _support(self, i: int) -> float:
        return float(sum(self.matrix[i]))

    def _predicted(self, i: int) -> float:
        return float(sum(row[i] for row in self.matrix))

    def per_class(self) -> list[ClassFigures]:
        """Each class's TP and FP rate, precision, recall, F1 and support; a ratio whose
        denominator is 0 is 0, as scikit-learn reports it by default."""
        out = []
        n = self.total
        for i, label in enumerate(self.classes):
            tp = self.matrix[i][i]
            support, predicted = self._support(i), self._predicted(i)
            fp, fn = predicted - tp, support - tp
            out.append(ClassFigures(
                label=label,
                tp_rate=_ratio(tp, support),
                fp_rate=_ratio(fp, n - support),
                precision=_ratio(tp, predicted),
                recall=_ratio(tp, support),
                f1=_ratio(2 * tp, 2 * tp + fp + fn),
                support=support,
            ))
        return out

    def weighted_average(self) -> ClassFigures:
        """Per-class figures averaged with the classes' supports as weights."""
        figures = self.per_class()
        return _average(figures, [f.support for f in figures], "weighted avg")

    def macro_average(self) -> ClassFigures:
        """Per-class figures averaged over the classes that occur or are predicted (the
        classes scikit-learn's ``average="macro"`` takes when it is not given labels)."""
        figures = self.per_class()
        seen = [1.0 if self._support(i) > 0 or self._predicted(i) > 0 else 0.0
                for i in range(len(figures))]
        return _average(figures, seen, "macro avg")

    # -- output ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every figure, plain JSON types (classes as the engine returned them)."""
        def figures(f: ClassFigures) -> dict[str, Any]:
            return {k: v for k, v in asdict(f).items() if k != "label"}

        return {
            "title": self.title,
            **self.extra,
            "rows": self.rows,
            "rows_null_target": self.rows_null_target,
            "weight_column": self.weight,
            "total_weight": self.total,
            "classes": list(self.classes),
            "unseen_classes": list(self.unseen_classes),
            "unseen_weight": self.unseen_weight,
            "confusion_matrix": [list(r) for r in self.matrix],
            "correct": self.correct,
            "accuracy": self.accuracy,
            "error_rate": self.error_rate,
            "kappa": self.kappa,
            "matthews_correlation": self.matthews_correlation,
            "balanced_accuracy": self.balanced_accuracy,
            "roc_auc": self.roc_auc,
            "pr_auc": self.pr_auc,
            "roc_auc_by_class": [{"class": c, "area": v}
                                 for c, v in self.roc_auc_by_class().items()],
            "pr_auc_by_class": [{"class": c, "area": v}
                                for c, v in self.pr_auc_by_class().items()],
            "log_loss": self.log_loss,
            "mean_absolute_error": self.mean_absolute_error,
            "root_mean_squared_error": self.root_mean_squared_error,
            "relative_absolute_error": self.relative_absolute_error,
            "root_relative_squared_error": self.root_relative_squared_error,
            "per_class": [{"class": f.label, **figures(f)} for f in self.per_class()],
            "weighted_avg": figures(self.weighted_average()),
            "macro_avg": figures(self.macro_average()),
            "sums": {"p_actual": self.sum_p_actual, "log_p": self.sum_log_p,
                     "p_squared": self.sum_p_squared, "prior_abs": self.sum_prior_abs,
                     "prior_sq": self.sum_prior_sq},
        }

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, default=str)

    def __getitem__(self, key: str) -> Any:
        """The figure ``to_dict()`` names ``key``: ``evaluation["accuracy"]``, as the dict
        an ensemble's evaluation used to return is read."""
        return self.to_dict()[key]

    def __str__(self) -> str:
        return report(self)

    def titled(self, title: str) -> Evaluation:
        """The same figures under another heading."""
        return replace(self, title=title)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def _average(figures: Sequence[ClassFigures], weights: Sequence[float], label: str
             ) -> ClassFigures:
    total = sum(weights)

    def mean(name: str) -> float:
        if total <= 0:
            return 0.0
        return sum(getattr(f, name) * w for f, w in zip(figures, weights)) / total

    return ClassFigures(
        label=label, tp_rate=mean("tp_rate"), fp_rate=mean("fp_rate"),
        precision=mean("precision"), recall=mean("recall"), f1=mean("f1"),
        support=sum(f.support for f in figures),
    )


# -- the query ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScoredColumns:
    """The columns a scoring query hands the evaluation's aggregate: the target and the
    weight column kept from the source, the predicted class and one probability per class,
    named so that neither can take the place of a kept column (``Names``)."""

    target: str
    weight: str | None
    n_classes: int

    @property
    def kept(self) -> list[str]:
        return [self.target, *([self.weight] if self.weight else [])]

    @property
    def names(self) -> Names:
        return Names.avoiding(self.kept)

    @property
    def predicted(self) -> str:
        return self.names.prefix + "predicted"

    @property
    def probas(self) -> list[str]:
        return [f"{self.names.prefix}p{c}" for c in range(self.n_classes)]

    @property
    def alias(self) -> str:
        """The scoring query's alias in the aggregate over it."""
        return self.names.prefix + "scored"


def build_evaluation_query(
    root: Node,
    classes: Sequence[Value],
    relation: exp.Expression,
    target: str,
    weight: str | None = None,
    *,
    expand: bool = False,
) -> exp.Select:
    """``build_groups_query`` over the tree's compiled scoring query of ``relation``: a tree
    gives few distinct probability vectors (about one per leaf), so few groups.

    ``expand`` spreads C4.5's unknown values by copies of the rows (DuckDB) instead of the
    closed form, as ``Model.predict`` does (see ``compiler.scoring.build_scoring_query``).
    """
    scored = ScoredColumns(target, weight, len(classes))
    query = build_scoring_query(root, classes, relation, scored.kept, scored.predicted,
                                scored.probas, expand=expand, ordered=False)
    return build_groups_query(query, classes, scored)


def build_groups_query(query: exp.Select, classes: Sequence[Value],
                       scored: ScoredColumns) -> exp.Select:
    """``SELECT actual, predicted, COUNT(*), SUM(w), SUM(w * p_actual), ..., p_0, ..., p_k
    GROUP BY actual, predicted, p_0, ..., p_k`` over ``query``, any model's scoring query
    that gives the columns ``scored`` names (a tree's, an ensemble's): the rows of
    ``from_groups``. The weights of each probability vector per actual class give the ROC and
    precision-recall areas.
    """
    target, weight, nm, s = scored.target, scored.weight, scored.names, scored.alias
    actual = column(target, s)
    w = (exp.cast(column(weight, s), exp.DataType.build("DOUBLE")) if weight
         else dnum(1.0))
    p = [column(name, s) for name in scored.probas]
    p_actual = exp.Case(
        ifs=[exp.If(this=exp.EQ(this=actual.copy(), expression=literal(c)),
                    true=p[i].copy()) for i, c in enumerate(classes)],
        default=dnum(0.0),
    )
    clipped = exp.Least(this=exp.Greatest(this=p_actual.copy(), expressions=[
        dnum(EPS)]), expressions=[dnum(1.0 - EPS)])
    squares = dnum(0.0)
    for pc in p:
        squares = exp.Add(this=squares, expression=exp.Mul(this=pc.copy(), expression=pc.copy()))

    def weighted_sum(e: exp.Expression) -> exp.Expression:
        return exp.Sum(this=exp.Mul(this=w.copy(), expression=exp.paren(e, copy=False)))

    bad = (exp.or_(w.copy().is_(exp.null()), exp.LT(this=w.copy(), expression=dnum(0.0)))
           if weight else exp.false())
    outputs = [
        actual.copy(),
        column(scored.predicted, s),
        exp.Count(this=exp.Star()),
        exp.Sum(this=w.copy()),
        weighted_sum(p_actual),
        weighted_sum(exp.Ln(this=clipped)),
        weighted_sum(squares),
        exp.Sum(this=exp.Case(ifs=[exp.If(this=bad, true=exp.Literal.number(1))],
                              default=exp.Literal.number(0))),
    ]
    select = exp.Select(expressions=[
        exp.Alias(this=e, alias=nm.ident(name)) for e, name in zip(outputs, _GROUP_COLUMNS)
    ] + [pc.copy() for pc in p])  # by probabilities too: the ROC and precision-recall areas
    select = select.from_(exp.Subquery(this=query, alias=exp.TableAlias(
        this=exp.to_identifier(s, quoted=True))), copy=False)
    return select.group_by(actual.copy(), column(scored.predicted, s),
                           *[pc.copy() for pc in p], copy=False)


# -- evaluate ----------------------------------------------------------------------------------
def model_weight(model: Scorable, weight: str | bool) -> str | None:
    """The weight column an evaluation uses: the model's training weight for ``True``."""
    if weight is True:
        return model.options.get("weight") or None
    if weight is False:
        return None
    if not isinstance(weight, str) or not weight:
        raise OptionError(f"weight must be True, False or a column name, not {weight!r}")
    return weight


def evaluate(
    model: Scorable,
    source: Any,
    *,
    connection: Any = None,
    weight: str | bool = True,
    title: str = "Evaluation",
    unknown: str = "fractional",
    threshold: float | None = None,
) -> Evaluation:
    """Evaluate ``model`` on ``source`` in the engine (see ``Model.evaluate``)."""
    check_options(model.classes, title, threshold)
    root = scoring_tree(model.root, unknown)
    weight_column = model_weight(model, weight)
    engine = get_engine(connection)
    try:
        relation = resolve_relation(source, engine)
        tested = sorted({n.split.feature for n in model.root.walk() if n.split is not None})
        relation, schema = dates.for_scoring(getattr(model, "features", ()), tested, relation,
                                             engine.columns(relation), engine.dialect)
        names = [n for n, _ in schema]
        needed = {model.target: "the target", **({weight_column: "the weight column"}
                                                if weight_column else {})}
        for name, what in needed.items():
            if name not in names:
                raise DataError(f"{what} {name!r} is not in the source; columns: {names}")
        missing = [f for f in tested if f not in names]
        if missing:
            raise DataError(f"columns the tree tests are not in the source: {missing}")
        check_source(model, dict(schema), engine, target=True)
        query = build_evaluation_query(
            root, model.classes, relation, model.target, weight_column,
            expand=engine.VECTORIZED,
        )
        with compiler.collector_paused():
            rows = engine.execute(query)
    finally:
        engine.cleanup()
    evaluation = from_groups(rows, model.classes, model.root.counts, weight_column, title)
    return evaluation if threshold is None else evaluation.at_threshold(threshold)


def check_options(classes: Sequence[Value], title: str, threshold: float | None) -> None:
    """Refuse a title that is not text, and a threshold that is not a probability or is
    given for a model of other than two classes, before any query."""
    if threshold is not None and len(classes) != 2:
        raise OptionError(f"threshold= needs a model of two classes; this one has "
                          f"{len(classes)}")
    if threshold is not None and (not isinstance(threshold, (int, float))
                                  or not 0.0 <= threshold <= 1.0):
        raise OptionError(f"threshold must be a probability in [0, 1], not {threshold!r}")
    if not isinstance(title, str):
        raise OptionError(f"title must be text, not {title!r}")


def from_groups(
    groups: Sequence[Sequence[Any]],
    model_classes: Sequence[Value],
    training_counts: Sequence[float] | None,
    weight: str | None,
    title: str = "Evaluation",
) -> Evaluation:
    """An ``Evaluation`` from the rows of ``build_groups_query``.

    ``training_counts`` (the model's class weights in training) give the prior that the
    relative errors compare with: each class's weight plus one, as Weka counts it. None (a
    model that did not record them, such as an ensemble) leaves the relative errors unknown.
    """
    n = len(_GROUP_COLUMNS)
    # Added up in one order whatever order the engine returns the groups in: float sums
    # depend on it, and the same evaluation must print the same figures every time.
    groups = sorted(groups, key=lambda g: (
        (0, (0, 0)) if g[0] is None else (1, sort_key(g[0])),
        (0, (0, 0)) if g[1] is None else (1, sort_key(g[1])),
        tuple(-1.0 if x is None else float(x) for x in g[n:])))
    records = [dict(zip(_GROUP_COLUMNS, g)) for g in groups]
    scores = [(g[0], tuple(float(x) for x in g[n:]), float(g[3])) for g in groups
              if g[0] is not None and len(g) > n]
    bad = sum(int(r["bad_weights"] or 0) for r in records)
    if bad:
        raise DataError(f"{bad} rows have a NULL or negative weight in {weight!r}")
    null_rows = sum(int(r["rows"]) for r in records if r["actual"] is None)
    labelled = [r for r in records if r["actual"] is not None]
    if not labelled:
        raise DataError("the source has no rows with a known class to evaluate")
    known = {_key(c) for c in model_classes}
    others = {_key(r["actual"]): r["actual"] for r in labelled if _key(r["actual"]) not in known}
    classes = sorted([*model_classes, *others.values()], key=sort_key)
    index = {_key(c): i for i, c in enumerate(classes)}
    k = len(classes)
    matrix = [[0.0] * k for _ in range(k)]
    sums = {"p_actual": 0.0, "log_p": 0.0, "p_squared": 0.0}
    for r in labelled:
        matrix[index[_key(r["actual"])]][index[_key(r["predicted"])]] += float(r["weight"])
        for name in sums:
            sums[name] += float(r[name])
    prior_abs, prior_sq = (0.0, 0.0) if training_counts is None else _prior_errors(
        classes, matrix, model_classes, training_counts)
    unseen = sorted(others.values(), key=sort_key)
    evaluation = Evaluation(
        classes=classes, matrix=matrix, rows=sum(int(r["rows"]) for r in labelled),
        rows_null_target=null_rows, weight=weight, sum_p_actual=sums["p_actual"],
        sum_log_p=sums["log_p"], sum_p_squared=sums["p_squared"], sum_prior_abs=prior_abs,
        sum_prior_sq=prior_sq, title=title, unseen_classes=unseen,
        scores=scores, score_classes=list(model_classes),
    )
    if unseen:
        warnings.warn(
            f"{_weight_text(evaluation.unseen_weight)} rows hold classes the model was not "
            f"trained on ({_labels(unseen)}); they count as errors", stacklevel=4,
        )
    return evaluation


def _labels(values: Sequence[Value], most: int = 5) -> str:
    shown = ", ".join(format_value(v) for v in values[:most])
    return shown + (f" and {len(values) - most} more" if len(values) > most else "")


def _key(value: Value) -> tuple[int, Any]:
    """A dictionary key that keeps True apart from 1 (Python takes them as equal)."""
    return sort_key(value)


def _prior_errors(
    classes: Sequence[Value],
    matrix: Sequence[Sequence[float]],
    model_classes: Sequence[Value],
    training_counts: Sequence[float],
) -> tuple[float, float]:
    """Σ w Σ_c |q_c - y_c| and Σ w Σ_c (q_c - y_c)² for the prior ``q`` (training weights of
    the classes plus one each, normalised), which depend on the actual classes only."""
    trained = {_key(c): float(w) for c, w in zip(model_classes, training_counts)}
    counts = [trained.get(_key(c), 0.0) + 1.0 for c in classes]
    q = [c / sum(counts) for c in counts]
    squares = sum(x * x for x in q)
    prior_abs = prior_sq = 0.0
    for i, row in enumerate(matrix):
        w = sum(row)
        prior_abs += w * 2.0 * (1.0 - q[i])
        prior_sq += w * (1.0 - 2.0 * q[i] + squares)
    return prior_abs, prior_sq


def combine(parts: Sequence[Evaluation], title: str = "Evaluation") -> Evaluation:
    """The pooled evaluation of disjoint parts (cross-validation folds): their matrices and
    sums added up over the union of their classes."""
    keyed: dict[tuple[int, Any], Value] = {}
    for part in parts:
        for c in part.classes:
            keyed.setdefault(_key(c), c)
    classes = sorted(keyed.values(), key=sort_key)
    index = {_key(c): i for i, c in enumerate(classes)}
    k = len(classes)
    matrix = [[0.0] * k for _ in range(k)]
    for part in parts:
        at = [index[_key(c)] for c in part.classes]
        for i, row in enumerate(part.matrix):
            for j, w in enumerate(row):
                matrix[at[i]][at[j]] += w
    weights = {part.weight for part in parts}
    return Evaluation(
        classes=classes, matrix=matrix, rows=sum(p.rows for p in parts),
        rows_null_target=sum(p.rows_null_target for p in parts),
        weight=weights.pop() if len(weights) == 1 else None,
        sum_p_actual=sum(p.sum_p_actual for p in parts),
        sum_log_p=sum(p.sum_log_p for p in parts),
        sum_p_squared=sum(p.sum_p_squared for p in parts),
        sum_prior_abs=sum(p.sum_prior_abs for p in parts),
        sum_prior_sq=sum(p.sum_prior_sq for p in parts),
        title=title,
        unseen_classes=sorted({_key(c): c for p in parts for c in p.unseen_classes}.values(),
                              key=sort_key),
        **_pooled_scores(parts),
    )


def _pooled_scores(parts: Sequence[Evaluation]) -> dict[str, Any]:
    """The parts' score groups over the union of their models' classes (a class a part's
    model did not know has probability 0 there)."""
    keyed = {_key(c): c for part in parts for c in part.score_classes}
    classes = sorted(keyed.values(), key=sort_key)
    scores = []
    for part in parts:
        at = {_key(c): i for i, c in enumerate(part.score_classes)}
        for actual, probs, w in part.scores:
            scores.append((actual, tuple(probs[at[_key(c)]] if _key(c) in at else 0.0
                                         for c in classes), w))
    return {"scores": scores, "score_classes": classes}


# -- text ----------------------------------------------------------------------------------------
def weka_number(value: float, width: int = 12, decimals: int = 4) -> str:
    """A number as Weka's ``Utils.doubleToString(value, width, decimals)`` writes it (3.6):
    rounded half away from zero, trailing zeros dropped, the decimal point at a fixed column of
    a ``width``-character field."""
    scaled = value * 10**decimals
    units = int(scaled + 0.5) if scaled > 0 else -int(abs(scaled) + 0.5)
    whole = f"{'-' if units < 0 else ''}{abs(units) // 10**decimals}"
    fraction = f"{abs(units) % 10**decimals:0{decimals}d}".rstrip("0") if decimals else ""
    if decimals == 0:
        return whole.rjust(width)
    offset = width - decimals - 1 - len(whole)
    if offset < 0:
        return whole + ("." + fraction if fraction else "")
    return " " * offset + whole + ("." + fraction if fraction else "").ljust(decimals + 1)


def _summary_line(label: str, value: float | None, unit: str = "") -> str:
    shown = "?".rjust(8).ljust(12) if value is None else weka_number(value)
    return f"{label:<35}{shown}{' ' + unit if unit else ''}"


def _weight_text(w: float) -> str:
    return str(int(w)) if float(w).is_integer() else f"{w:.2f}"


def class_ids(n: int, width: int) -> list[str]:
    """Weka's short class names: a..z, then two letters, right-aligned in ``width``."""
    out = []
    for num in range(n):
        chars = []
        while True:
            chars.append(chr(ord("a") + num % 26))
            num = num // 26 - 1
            if num < 0:
                break
        out.append("".join(reversed(chars)).rjust(width))
    return out


def confusion_text(classes: Sequence[Value], matrix: Sequence[Sequence[float]]) -> str:
    """The confusion matrix as Weka's ``toMatrixString`` lays it out."""
    k = len(classes)
    cells = [abs(x) for row in matrix for x in row]
    largest = max(cells, default=0.0)
    fractional = any(abs(x - round(x)) >= 0.01 for x in cells)
    digits = int(math.log10(largest)) if largest > 0 else 0
    width = 1 + max(digits + (3 if fractional else 0), int(math.log(k) / math.log(26)))
    ids = class_ids(k, width)
    head = "".join(
        f" {i.strip().rjust(width - 3)}   " if fractional else f" {i}" for i in ids
    )
    lines = [head + "   <-- classified as"]
    for i, row in enumerate(matrix):
        values = "".join(" " + weka_number(x, width, 2 if fractional else 0) for x in row)
        lines.append(f"{values} | {ids[i]} = {format_value(classes[i])}")
    return "\n".join(lines)


def details_text(evaluation: Evaluation) -> str:
    """Per-class rates, precision, recall, F1 and support, and their averages."""
    header = (f"{'':<15}{'TP Rate':>7}  {'FP Rate':>7}  {'Precision':>9}  {'Recall':>6}  "
              f"{'F1-score':>8}  {'Support':>9}  Class")
    lines = [header]

    def line(name: str, f: ClassFigures, label: str) -> str:
        return (f"{name:<15}{f.tp_rate:>7.3f}  {f.fp_rate:>7.3f}  {f.precision:>9.3f}  "
                f"{f.recall:>6.3f}  {f.f1:>8.3f}  {_weight_text(f.support):>9}  {label}"
                ).rstrip()

    for f in evaluation.per_class():
        lines.append(line("", f, format_value(f.label)))
    lines.append(line("Weighted Avg.", evaluation.weighted_average(), ""))
    lines.append(line("Macro Avg.", evaluation.macro_average(), ""))
    return "\n".join(lines)


def report(evaluation: Evaluation) -> str:
    """Weka's evaluation block: the summary (its lines and number format, plus log loss),
    the detailed accuracy by class, and the confusion matrix."""
    e = evaluation
    summary = [
        _summary_line("Correctly Classified Instances", e.correct)
        + "     " + weka_number(100 * e.accuracy) + " %",
        _summary_line("Incorrectly Classified Instances", e.total - e.correct)
        + "     " + weka_number(100 * e.error_rate) + " %",
        _summary_line("Kappa statistic", e.kappa),
        _summary_line("Mean absolute error", e.mean_absolute_error),
        _summary_line("Root mean squared error", e.root_mean_squared_error),
        _summary_line("Relative absolute error", e.relative_absolute_error, "%"),
        _summary_line("Root relative squared error", e.root_relative_squared_error, "%"),
        _summary_line("Log loss", e.log_loss),
        _summary_line("Matthews correlation", e.matthews_correlation),
        _summary_line("Balanced accuracy", e.balanced_accuracy),
        _summary_line("ROC area", e.roc_auc),
        _summary_line("PRC area", e.pr_auc),
        _summary_line("Total Number of Instances", e.total),
    ]
    if e.rows_null_target:
        summary.append(f"{'Rows with a NULL class (left out)':<35}{e.rows_null_target:>8}")
    if e.unseen_classes:
        summary.append(f"{'Rows of classes not in the model':<35}"
                       f"{_weight_text(e.unseen_weight):>8} ({_labels(e.unseen_classes)})")
    if e.weight:
        summary.append(f"{'Weights from column':<35}{'':>4}{e.weight}")
    return "\n\n".join([
        f"=== {e.title} ===",
        "\n".join(s.rstrip() for s in summary),
        "=== Detailed Accuracy By Class ===",
        details_text(e),
        "=== Confusion Matrix ===",
        confusion_text(e.classes, e.matrix),
    ])
