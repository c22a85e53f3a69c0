"""Choosing, for each class, the subset of its rules with the shortest description, ordering
the classes and choosing the default class (C4.5rules, release 8).

Everything here is arithmetic on the training rows grouped by class and by the set of rules
that fire on them (``counts.Counter.patterns``); no SQL.

The description of a class's subset is ``CODE_WEIGHT * theory bits + exception bits``:

- a rule's bits are its conditions' bits, plus ``log2(conditions)`` for their number, less
  ``log2(conditions!)`` for the orders they could be written in; a subset's theory bits are
  its rules' bits less ``log2(rules!)`` for their orders. A condition costs the bits to name
  its feature (``attribute_bits``: the entropy of the features' shares of all value bits)
  and the bits of its value: for a nominal feature the entropy of its known values'
  frequencies, for a continuous one ``1 + log2(distinct values) / 2`` (0 with one value), for
  a condition on a subset of values (CART's tests) the number of the feature's values;
- the exception bits are C4.5rules' ``ExceptionBits``: ``log2(rows)`` plus the bits of the
  false positives among the rows the subset covers and of the false negatives among the
  others, each coded with a rate of half the errors on the side that has more rows and the
  side's own errors on the other (Quinlan 1995, not the book's encoding).

``CODE_WEIGHT`` is C4.5rules' 0.5 (its ``REDUNDANCY`` 1). With at most ``EXHAUSTIVE`` rules
for a class every subset is tried; beyond that, as C4.5rules' default search, eleven hill
climbs start from random subsets that hold each rule with probability 0, 0.1, ..., 1, each
adding or removing the rule that shortens the description most until none does. The random
subsets come from Python's ``random.Random(seed)``, so the choice is the same on every run.
The shortest description met anywhere wins (the first of equals).

Classes are then ordered by their false positives (rows not covered by the rules of classes
already placed that the class's rules cover but are of another class, fewest first; ties to
the class listed first), and within a class the rules by their pessimistic error rate (lowest
first). The default class is the one with most rows no rule covers (ties to the class with
more rows, then to the class listed first).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .conditions import Condition

CODE_WEIGHT = 0.5
EXHAUSTIVE = 10


def log2(x: float) -> float:
    """C4.5's ``Log``: 0 for ``x <= 0``."""
    return math.log2(x) if x > 0 else 0.0


def log2_factorial(n: int) -> float:
    return math.lgamma(n + 1) / math.log(2) if n > 1 else 0.0


# -- coding ------------------------------------------------------------------------------------
@dataclass
class Coding:
    """Bits of a condition: ``attribute_bits`` to name a feature, ``value_bits[feature]`` for
    its value, ``n_values[feature]`` for a subset test."""

    attribute_bits: float
    value_bits: dict[str, float]
    n_values: dict[str, int]

    @classmethod
    def from_counts(cls, rows: float, frequencies: dict[str, list[float]],
                    distinct: dict[str, int]) -> Coding:
        """From each nominal feature's known-value counts and each continuous feature's
        number of distinct values over ``rows`` rows (C4.5rules' ``FindTestCodes``)."""
        bits: dict[str, float] = {}
        for name, counts in frequencies.items():
            bits[name] = sum(f / rows * (log2(rows) - log2(f)) for f in counts if f > 0)
        for name, cuts in distinct.items():
            bits[name] = 1 + log2(cuts) / 2 if cuts > 1 else 0.0
        total = sum(bits.values())
        attribute = 0.0
        for b in bits.values():
            p = b / total if total > 0 else 0.0
            if p > 0:
                attribute -= p * math.log2(p)
        n_values = {name: len(counts) for name, counts in frequencies.items()}
        return cls(attribute, bits, n_values)

    def condition_bits(self, c: Condition) -> float:
        if c.subset:
            return self.attribute_bits + self.n_values.get(c.feature, 0)
        return self.attribute_bits + self.value_bits.get(c.feature, 0.0)

    def rule_bits(self, conditions: Sequence[Condition]) -> float:
        n = len(conditions)
        return (sum(self.condition_bits(c) for c in conditions) + log2(n)
                - log2_factorial(n))


def _biased(n: np.ndarray, e: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Bits for ``e`` errors among ``n`` coded at the rate ``expected / n`` (C4.5rules'
    ``Biased``), elementwise."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = expected / n
        bits = -e * np.log2(rate) - (n - e) * np.log2(1 - rate)
    none = np.where(np.abs(e) < 1e-9, 0.0, 1e6)
    every = np.where(np.abs(e - n) < 1e-9, 0.0, 1e6)
    return np.where(expected <= 1e-6, none, np.where(expected >= n - 1e-6, every, bits))


def exception_bits(rows: float, fires: Any, fp: Any, fn: Any) -> Any:
    """Bits to say which of ``rows`` rows are false positives among the ``fires`` covered
    and false negatives among the others (C4.5rules' ``ExceptionBits``); elementwise over
    arrays, a float for numbers."""
    fires, fp, fn = (np.asarray(x, dtype=np.float64) for x in (fires, fp, fn))
    rest = rows - fires
    half = 0.5 * (fp + fn)
    more = fires > 0.5 * rows
    bits = log2(rows) + np.where(
        more, _biased(fires, fp, half) + _biased(rest, fn, fn),
        _biased(fires, fp, fp) + _biased(rest, fn, half))
    return float(bits) if bits.ndim == 0 else bits


# -- the training rows as patterns -------------------------------------------------------------
@dataclass
class Patterns:
    """Groups of training rows: class index (-1: not a model class), weight, and which rules
    fire on them (``fires[group, rule]``)."""

    label: np.ndarray
    weight: np.ndarray
    fires: np.ndarray

    @classmethod
    def of(cls, groups: Sequence[tuple[int, int, float]], n_rules: int) -> Patterns:
        label = np.array([g[0] for g in groups], dtype=np.int64)
        weight = np.array([g[2] for g in groups], dtype=np.float64)
        fires = np.zeros((len(groups), n_rules), dtype=bool)
        for i, (_, bits, _) in enumerate(groups):
            j = 0
            while bits:
                if bits & 1:
                    fires[i, j] = True
                bits >>= 1
                j += 1
        return cls(label, weight, fires)

    @property
    def rows(self) -> float:
        return float(self.weight.sum())


# -- one class's subset ------------------------------------------------------------------------
class _Cover:
    """C4.5rules' ``CoverClass`` for one class: the values of adding or removing each rule."""

    def __init__(self, patterns: Patterns, focus: int, bits: np.ndarray,
                 fires: np.ndarray) -> None:
        self.rows = patterns.rows
        # Only whether a group is of the class and which of the class's rules fire on it
        # matter here: groups alike in both are merged, their weights added.
        keys = np.column_stack([patterns.label == focus, fires])
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)
        self.w = np.bincount(inverse.ravel(), weights=patterns.weight, minlength=len(unique))
        self.focus = unique[:, 0]
        self.fires = unique[:, 1:]
        self.bits = bits
        self.best_value = math.inf
        self.best: np.ndarray = np.zeros(len(bits), dtype=bool)
        self.evaluations = 0

    def value(self, rule_in: np.ndarray) -> np.ndarray:
        """Each rule's value (bits saved by removing it if in, by adding it if out); the
        description's length is remembered if it is the shortest so far."""
        self.evaluations += 1
        covered = self.fires[:, rule_in].sum(axis=1)
        any_cover = covered > 0
        w, focus = self.w, self.focus
        sum_cover = float(w[any_cover].sum())
        fp = float(w[any_cover & ~focus].sum())
        fn = float(w[~any_cover & focus].sum())
        alone = (covered == 0)[:, None] | ((covered == 1)[:, None] & rule_in[None, :])
        eligible = self.fires & alone
        right = (eligible * (w * focus)[:, None]).sum(axis=0)
        wrong = (eligible * (w * ~focus)[:, None]).sum(axis=0)
        selected = int(rule_in.sum())
        rule_bits = float(self.bits[rule_in].sum()) - log2_factorial(selected)
        base = CODE_WEIGHT * rule_bits + exception_bits(self.rows, sum_cover, fp, fn)
        # each rule in: the bits without it; each rule out: the bits with it
        without = exception_bits(self.rows, sum_cover - right - wrong, fp - wrong,
                                 fn + right) + CODE_WEIGHT * (
            rule_bits - self.bits + log2(selected))
        with_it = exception_bits(self.rows, sum_cover + right + wrong, fp + wrong,
                                 fn - right) + CODE_WEIGHT * (
            rule_bits + self.bits - log2(selected + 1))
        values = np.where(rule_in, without - base, base - with_it)
        if base < self.best_value:
            self.best_value = base
            self.best = rule_in.copy()
        return values

    def exhaustive(self) -> None:
        n = len(self.bits)
        for m in range(1 << n):
            self.value(np.array([(m >> i) & 1 == 1 for i in range(n)], dtype=bool))

    def hill_climb(self, rule_in: np.ndarray) -> None:
        for _ in range(10 * len(self.bits) + 100):
            values = self.value(rule_in)
            delta = np.where(rule_in, -values, values)
            r = int(np.argmax(delta))
            if not delta[r] > 0:
                return
            rule_in[r] = not rule_in[r]

    def spot_search(self, rng: random.Random) -> None:
        for trial in range(11):
            p = trial / 10
            self.hill_climb(np.array([rng.random() < p for _ in self.bits], dtype=bool))


@dataclass
class Selection:
    """The chosen rules in order (indices into the candidates), the default class, each
    class's false positives when it was placed, and the subsets' description lengths."""

    order: list[int]
    default: int
    false_positives: dict[int, float]
    bits: dict[int, float]
    searched: dict[int, str]


def select(rule_labels: Sequence[int], rule_errors: Sequence[float],
           rule_bits: Sequence[float], patterns: Patterns, class_totals: Sequence[float],
           seed: int = 1) -> Selection:
    """C4.5rules' ``ConstructRuleset``: a subset per class, the classes' order, the
    default class."""
    n_classes = len(class_totals)
    labels = np.array(rule_labels, dtype=np.int64)
    bits = np.array(rule_bits, dtype=np.float64)
    chosen = np.zeros(len(labels), dtype=bool)
    rng = random.Random(seed)
    description: dict[int, float] = {}
    searched: dict[int, str] = {}
    for c in range(n_classes):
        mine = np.flatnonzero(labels == c)
        if not len(mine):
            continue
        cover = _Cover(patterns, c, bits[mine], patterns.fires[:, mine])
        if len(mine) <= EXHAUSTIVE:
            cover.exhaustive()
            searched[c] = "exhaustive"
        else:
            cover.spot_search(rng)
            searched[c] = f"hill climbing ({cover.evaluations} subsets)"
        chosen[mine[cover.best]] = True
        description[c] = cover.best_value
    order: list[int] = []
    covered = np.zeros(len(patterns.weight), dtype=bool)
    placed: set[int] = set()
    false_positives: dict[int, float] = {}
    for _ in range(n_classes):
        fps = {}
        for c in range(n_classes):
            if c in placed:
                continue
            mine = np.flatnonzero(chosen & (labels == c))
            hit = patterns.fires[:, mine].any(axis=1) & ~covered & (patterns.label != c)
            fps[c] = float(patterns.weight[hit].sum())
        best = min(fps, key=lambda c: (fps[c], c))
        placed.add(best)
        false_positives[best] = fps[best]
        mine = sorted(np.flatnonzero(chosen & (labels == best)).tolist(),
                      key=lambda r: (rule_errors[r], r))
        for r in mine:
            order.append(r)
            covered |= patterns.fires[:, r]
    uncovered = [float(patterns.weight[~covered & (patterns.label == c)].sum())
                 for c in range(n_classes)]
    default = 0
    for c in range(1, n_classes):
        if (uncovered[c] > uncovered[default]
                or (uncovered[c] == uncovered[default]
                    and class_totals[c] > class_totals[default])):
            default = c
    return Selection(order, default, false_positives, description, searched)


# -- the training evaluation -------------------------------------------------------------------
@dataclass
class RuleUse:
    """C4.5rules' evaluation of an ordered rule set on its training rows: per rule (in
    order) the weight it classifies (the first rule that fires), how much of it wrongly, and
    its advantage: rows it gets right that the next rule (or the default) would get wrong,
    and the other way round. ``matrix[actual][predicted]`` over the model's classes."""

    used: list[float]
    wrong: list[float]
    gain: list[float]
    loss: list[float]
    matrix: list[list[float]]
    rows: float
    errors: float


def training_use(order: Sequence[int], rule_labels: Sequence[int], default: int,
                 patterns: Patterns, n_classes: int) -> RuleUse:
    """How the ordered rules classify the training patterns."""
    n = len(order)
    used, wrong, gain, loss = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
    matrix = [[0.0] * n_classes for _ in range(n_classes)]
    fires = patterns.fires[:, list(order)] if n else np.zeros((len(patterns.weight), 0), bool)
    labels = [rule_labels[r] for r in order]
    rows = errors = 0.0
    for g in range(len(patterns.weight)):
        actual, w = int(patterns.label[g]), float(patterns.weight[g])
        hits = np.flatnonzero(fires[g])
        first = int(hits[0]) if len(hits) else None
        predicted = labels[first] if first is not None else default
        rows += w
        if predicted != actual:
            errors += w
        if actual >= 0:
            matrix[actual][predicted] += w
        if first is None:
            continue
        used[first] += w
        if predicted != actual:
            wrong[first] += w
        other = labels[int(hits[1])] if len(hits) > 1 else default
        if predicted == actual and other != actual:
            gain[first] += w
        elif predicted != actual and other == actual:
            loss[first] += w
    return RuleUse(used, wrong, gain, loss, matrix, rows, errors)
