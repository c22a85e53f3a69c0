"""The losses of gradient boosting, each written once with its numpy and its SQL form.

A loss turns a row's target and raw scores into the gradient and hessian its trees sum
(Newton boosting), gives the raw score before any tree, and measures itself. ``y`` is the
class index (classification) or the target; ``scores`` one raw score per output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from sqlglot import exp

from ..sqlexpr import case, num


def _sigmoid_sql(s: exp.Expression) -> exp.Expression:
    return exp.Div(this=num(1.0), expression=exp.paren(
        num(1.0) + exp.func("EXP", exp.Neg(this=exp.paren(s)))))


def _softplus_sql(s: exp.Expression) -> exp.Expression:
    """``log(1 + exp(s))`` without overflow: ``max(s, 0) + log(1 + exp(-|s|))``."""
    positive = case((exp.GT(this=s.copy(), expression=num(0)), s.copy()), default=num(0.0))
    return exp.paren(positive + exp.func("LN", num(1.0) + exp.func(
        "EXP", exp.Neg(this=exp.Abs(this=s.copy())))))


def _softplus(s: np.ndarray) -> np.ndarray:
    return np.maximum(s, 0.0) + np.log1p(np.exp(-np.abs(s)))


@dataclass(frozen=True)
class Loss:
    """What boosting asks of a loss."""

    name: ClassVar[str]
    link: ClassVar[str]
    n_classes: int = 0

    @property
    def n_outputs(self) -> int:
        return self.n_classes if self.n_classes > 2 else 1

    def base_score(self, summary: np.ndarray) -> list[float]:
        """The raw scores before any tree, from the training rows' class shares (classes) or
        their weighted mean (a target)."""
        raise NotImplementedError

    def gradients(self, y: np.ndarray, scores: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per output, each row's (gradient, hessian)."""
        raise NotImplementedError

    def gradients_sql(self, y: exp.Expression, scores: list[exp.Expression]
                      ) -> list[tuple[exp.Expression, exp.Expression]]:
        raise NotImplementedError

    def loss(self, y: np.ndarray, scores: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def loss_sql(self, y: exp.Expression, scores: list[exp.Expression]) -> exp.Expression:
        raise NotImplementedError


@dataclass(frozen=True)
class SquaredError(Loss):
    """``(y - s)^2 / 2``: gradient ``s - y``, hessian 1."""

    name: ClassVar[str] = "squared_error"
    link: ClassVar[str] = "identity"

    def base_score(self, summary: np.ndarray) -> list[float]:
        return [float(summary[0])]

    def gradients(self, y, scores):
        return [(scores[:, 0] - y, np.ones(len(y)))]

    def gradients_sql(self, y, scores):
        return [(exp.paren(scores[0].copy() - y.copy()), num(1.0))]

    def loss(self, y, scores):
        r = y - scores[:, 0]
        return 0.5 * r * r

    def loss_sql(self, y, scores):
        r = exp.paren(y.copy() - scores[0].copy())
        return num(0.5) * r * r.copy()


@dataclass(frozen=True)
class PoissonLoss(Loss):
    """Poisson deviance's half, ``exp(s) - y s``: gradient ``exp(s) - y``, hessian ``exp(s)``."""

    name: ClassVar[str] = "poisson"
    link: ClassVar[str] = "exp"

    def base_score(self, summary):
        return [math.log(max(float(summary[0]), 1e-300))]

    def gradients(self, y, scores):
        e = np.exp(scores[:, 0])
        return [(e - y, e)]

    def gradients_sql(self, y, scores):
        e = exp.func("EXP", scores[0].copy())
        return [(exp.paren(e - y.copy()), e.copy())]

    def loss(self, y, scores):
        return np.exp(scores[:, 0]) - y * scores[:, 0]

    def loss_sql(self, y, scores):
        return exp.func("EXP", scores[0].copy()) - y.copy() * scores[0].copy()


@dataclass(frozen=True)
class BinaryLogLoss(Loss):
    """Log loss of the second class: ``p = sigmoid(s)``, gradient ``p - y``, hessian
    ``p (1 - p)``."""

    name: ClassVar[str] = "log_loss"
    link: ClassVar[str] = "sigmoid"

    def base_score(self, summary):
        p = min(max(float(summary[1]), 1e-15), 1 - 1e-15)
        return [math.log(p / (1 - p))]

    def gradients(self, y, scores):
        p = 1.0 / (1.0 + np.exp(-scores[:, 0]))
        return [(p - (y == 1), p * (1.0 - p))]

    def gradients_sql(self, y, scores):
        p = _sigmoid_sql(scores[0])
        one = case((exp.EQ(this=y.copy(), expression=num(1)), num(1.0)), default=num(0.0))
        return [(exp.paren(p - one), exp.paren(p.copy() * exp.paren(num(1.0) - p.copy())))]

    def loss(self, y, scores):
        return _softplus(scores[:, 0]) - (y == 1) * scores[:, 0]

    def loss_sql(self, y, scores):
        one = case((exp.EQ(this=y.copy(), expression=num(1)), num(1.0)), default=num(0.0))
        return _softplus_sql(scores[0]) - one * scores[0].copy()


@dataclass(frozen=True)
class MulticlassLogLoss(Loss):
    """Softmax over one score per class: gradient ``p_k - [y = k]``, hessian
    ``p_k (1 - p_k)`` (scikit-learn's)."""

    name: ClassVar[str] = "log_loss"
    link: ClassVar[str] = "softmax"

    def base_score(self, summary):
        return [float(v) for v in np.log(np.clip(summary, 1e-15, None))]

    def _proba(self, scores: np.ndarray) -> np.ndarray:
        top = scores.max(axis=1, keepdims=True)
        e = np.exp(scores - top)
        return e / e.sum(axis=1, keepdims=True)

    def gradients(self, y, scores):
        p = self._proba(scores)
        return [(p[:, k] - (y == k), p[:, k] * (1.0 - p[:, k])) for k in range(self.n_classes)]

    def _proba_sql(self, scores: list[exp.Expression]) -> list[exp.Expression]:
        top = exp.func("GREATEST", *[s.copy() for s in scores])
        es = [exp.func("EXP", exp.paren(s.copy() - top.copy())) for s in scores]
        total = exp.paren(es[0].copy())
        for e in es[1:]:
            total = exp.paren(total + e.copy())
        return [exp.Div(this=e, expression=total.copy()) for e in es]

    def gradients_sql(self, y, scores):
        out = []
        for k, p in enumerate(self._proba_sql(scores)):
            one = case((exp.EQ(this=y.copy(), expression=num(k)), num(1.0)), default=num(0.0))
            out.append((exp.paren(p - one), exp.paren(p.copy() * exp.paren(num(1.0) - p.copy()))))
        return out

    def loss(self, y, scores):
        top = scores.max(axis=1)
        lse = top + np.log(np.exp(scores - top[:, None]).sum(axis=1))
        return lse - scores[np.arange(len(y)), y.astype(np.int64)]

    def loss_sql(self, y, scores):
        top = exp.func("GREATEST", *[s.copy() for s in scores])
        total = exp.func("EXP", exp.paren(scores[0].copy() - top.copy()))
        for s in scores[1:]:
            total = total + exp.func("EXP", exp.paren(s.copy() - top.copy()))
        own = case(*[(exp.EQ(this=y.copy(), expression=num(k)), s.copy())
                     for k, s in enumerate(scores)], default=num(0.0))
        return exp.paren(top + exp.func("LN", total)) - own


def loss_for(name: str, *, task: str, n_classes: int) -> Loss:
    """The loss called ``name`` ("auto" chooses by the task and classes)."""
    from ..errors import OptionError

    if task == "classification":
        if name not in ("auto", "log_loss"):
            raise OptionError(f"a classifier's loss is 'log_loss', not {name!r}")
        return BinaryLogLoss(2) if n_classes == 2 else MulticlassLogLoss(n_classes)
    table = {"squared_error": SquaredError, "poisson": PoissonLoss}
    if name == "auto":
        name = "squared_error"
    if name not in table:
        raise OptionError(f"a regressor's loss is one of {', '.join(table)}, not {name!r}")
    return table[name]()
