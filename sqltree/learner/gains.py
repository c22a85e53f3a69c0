"""Each split criterion, written once, over additive statistics.

A node's statistics are a few sums over its rows (a vector along the last axis of an array):

- classification: ``[rows, w_0, ..., w_{K-1}]`` (weighted class counts);
- regression: ``[rows, w, w*y, w*y*y]``;
- Newton boosting: ``[rows, h, g]`` (weighted hessian and gradient sums).

Every criterion gives a node a *score* such that a split's gain is
``score(left) + score(right) - score(node)``: the decrease of the weighted impurity (Gini,
entropy, squared error, Poisson deviance) or XGBoost's Newton gain. The learner evaluates them
with numpy over the histograms the backends return, so every engine and the memory plan share
one definition and the same arithmetic on the same exact sums.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

ROWS = 0
"""Column of every statistics vector that counts rows (times their bootstrap counts)."""


class Criterion:
    """What a tree learner asks of a criterion."""

    name: ClassVar[str]
    regression: ClassVar[bool] = False

    def score(self, stats: np.ndarray) -> np.ndarray:
        """A node's score (larger is purer) from its statistics along the last axis."""
        raise NotImplementedError

    def weight(self, stats: np.ndarray) -> np.ndarray:
        """The weight a node holds (class weights' or target weights' sum, or the hessian's)."""
        raise NotImplementedError

    def value(self, stats: np.ndarray) -> np.ndarray:
        """A leaf's output vector: class probabilities, a mean, or a Newton step."""
        raise NotImplementedError

    def order_key(self, stats: np.ndarray, total: np.ndarray) -> np.ndarray:
        """The key that orders a nominal feature's values before its prefix splits are
        scored (exact for two classes, a mean, or a Newton step; a heuristic otherwise).
        ``stats``: (nodes, values, S); ``total``: (nodes, S)."""
        raise NotImplementedError

    def gain(self, left: np.ndarray, right: np.ndarray, node: np.ndarray) -> np.ndarray:
        return self.score(left) + self.score(right) - self.score(node)

    def tie_scale(self, root: np.ndarray) -> np.ndarray:
        """The unit of the tie tolerance for the trees whose roots hold ``root``: gains
        closer than ``TIE_TOLERANCE`` times this per unit of a node's weight tie. 0: only
        equal gains tie."""
        return np.zeros(root.shape[:-1])

    def is_pure(self, stats: np.ndarray) -> bool:
        """Whether a node (one statistics vector) has nothing left to split on."""
        return False


def _class_sum(stats: np.ndarray, power: int = 1) -> np.ndarray:
    """The sum of the class columns (or their squares) along the last axis, column by column:
    numpy's reduction over a last axis of two or three is several times slower."""
    out = stats[..., 1] ** power if power != 1 else stats[..., 1].copy()
    for k in range(2, stats.shape[-1]):
        out += stats[..., k] ** power if power != 1 else stats[..., k]
    return out


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


@dataclass(frozen=True)
class Gini(Criterion):
    """Weighted Gini impurity decrease: ``score = sum(w_k^2) / W - W``."""

    name: ClassVar[str] = "gini"

    def weight(self, stats: np.ndarray) -> np.ndarray:
        return _class_sum(stats)

    def score(self, stats: np.ndarray) -> np.ndarray:
        total = _class_sum(stats)
        return _ratio(_class_sum(stats, 2), total) - total

    def value(self, stats: np.ndarray) -> np.ndarray:
        w = stats[..., 1:]
        return _ratio(w, w.sum(axis=-1, keepdims=True))

    def is_pure(self, stats: np.ndarray) -> bool:
        return int(np.count_nonzero(stats[1:] > 0)) <= 1

    def tie_scale(self, root: np.ndarray) -> np.ndarray:
        # CART's: an impurity decrease per unit weight within TIE_TOLERANCE
        return np.ones(root.shape[:-1])

    def order_key(self, stats: np.ndarray, total: np.ndarray) -> np.ndarray:
        # the proportion of the node's heaviest class (Breiman's exact order for two classes)
        heaviest = np.argmax(total[..., 1:], axis=-1)
        share = np.take_along_axis(stats[..., 1:], heaviest[:, None, None], axis=-1)[..., 0]
        return _ratio(share, stats[..., 1:].sum(axis=-1))


@dataclass(frozen=True)
class Entropy(Gini):
    """Information gain in bits: ``score = sum(w_k log2(w_k / W)) = -W H``."""

    name: ClassVar[str] = "entropy"

    def score(self, stats: np.ndarray) -> np.ndarray:
        total = _class_sum(stats)
        safe_total = np.where(total > 0, total, 1.0)
        out = np.zeros(total.shape)
        for k in range(1, stats.shape[-1]):
            w = stats[..., k]
            with np.errstate(divide="ignore", invalid="ignore"):
                out += np.where(w > 0, w * np.log2(np.where(w > 0, w, 1.0) / safe_total), 0.0)
        return out


@dataclass(frozen=True)
class SquaredError(Criterion):
    """Weighted variance decrease: ``score = (sum w y)^2 / sum w``."""

    name: ClassVar[str] = "squared_error"
    regression: ClassVar[bool] = True

    def weight(self, stats: np.ndarray) -> np.ndarray:
        return stats[..., 1]

    def score(self, stats: np.ndarray) -> np.ndarray:
        s = stats[..., 2]
        return _ratio(s * s, stats[..., 1])

    def value(self, stats: np.ndarray) -> np.ndarray:
        return _ratio(stats[..., 2], stats[..., 1])[..., None]

    def is_pure(self, stats: np.ndarray) -> bool:
        # scikit-learn's rule (impurity at most 1e-7), relative to the target's square so that
        # the rounding of the whole-number sums cannot keep a constant node open
        w, s, ss = float(stats[1]), float(stats[2]), float(stats[3])
        if w <= 0:
            return True
        variance = ss / w - (s / w) ** 2
        return variance <= 1e-7 + 1e-9 * abs(ss / w)

    def order_key(self, stats: np.ndarray, total: np.ndarray) -> np.ndarray:
        return _ratio(stats[..., 2], stats[..., 1])

    def tie_scale(self, root: np.ndarray) -> np.ndarray:
        # CART's: the root's impurity, its weighted variance
        mean = _ratio(root[..., 2], root[..., 1])
        return np.maximum(_ratio(root[..., 3], root[..., 1]) - mean * mean, 0.0)


@dataclass(frozen=True)
class Poisson(SquaredError):
    """Poisson deviance decrease: ``score = S log(S / W)`` with ``S = sum w y`` (the
    ``sum w y log y`` terms cancel between a node and its children). A child whose target
    sums to zero would predict zero, which the deviance cannot score: such splits are
    refused, as scikit-learn refuses them."""

    name: ClassVar[str] = "poisson"

    def score(self, stats: np.ndarray) -> np.ndarray:
        s, w = stats[..., 2], stats[..., 1]
        ok = (s > 0) & (w > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(ok, s * np.log(np.where(ok, s, 1.0) / np.where(ok, w, 1.0)),
                            np.where(w > 0, -np.inf, 0.0))

    def tie_scale(self, root: np.ndarray) -> np.ndarray:
        # CART's is the root's half deviance per unit weight, which needs sum(w y log y); its
        # second-order term, variance / (2 mean), is of the same size
        return _ratio(super().tie_scale(root), 2.0 * _ratio(root[..., 2], root[..., 1]))


@dataclass(frozen=True)
class Newton(Criterion):
    """XGBoost's second-order gain: ``score = G^2 / (H + lambda) / 2``; a leaf's value is
    ``-G / (H + lambda)`` (the caller scales it by the learning rate)."""

    name: ClassVar[str] = "newton"
    regression: ClassVar[bool] = True
    l2: float = 0.0

    def weight(self, stats: np.ndarray) -> np.ndarray:
        return stats[..., 1]

    def score(self, stats: np.ndarray) -> np.ndarray:
        g = stats[..., 2]
        return 0.5 * _ratio(g * g, stats[..., 1] + self.l2)

    def value(self, stats: np.ndarray) -> np.ndarray:
        return (-_ratio(stats[..., 2], stats[..., 1] + self.l2))[..., None]

    def order_key(self, stats: np.ndarray, total: np.ndarray) -> np.ndarray:
        return _ratio(stats[..., 2], stats[..., 1] + self.l2)


CLASSIFICATION = {"gini": Gini, "entropy": Entropy}
REGRESSION = {"squared_error": SquaredError, "poisson": Poisson}


def criterion(name: str, *, task: str) -> Criterion:
    """The criterion called ``name`` for ``task`` ("classification" or "regression")."""
    table = CLASSIFICATION if task == "classification" else REGRESSION
    if name not in table:
        from ..errors import OptionError

        raise OptionError(
            f"criterion {name!r} is not one of {', '.join(sorted(table))} for {task}"
        )
    return table[name]()
