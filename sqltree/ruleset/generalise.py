"""Generalising each leaf's rule by dropping conditions (C4.5rules' rule pruning).

A leaf's rule is its path's conditions and the leaf's class. In each round, for every rule
still being generalised, the engine counts (one grouped query for all of them, see
``counts.Counter.round_counts``) the rows that satisfy all of its conditions and, for each
condition, the rows that satisfy all of the others. Each candidate's pessimistic error rate
is ``(E + add_errs(N, E, cf)) / N`` for ``N`` rows covered of which ``E`` are not of the
rule's class: C4.5's upper confidence limit, the one J48's pruning uses
(``criteria.add_errs``). The condition whose removal gives the lowest rate (the last of
equals, as C4.5rules) is dropped when that rate is not above the rule's own; a rule ends in
the first round where no condition is dropped.

Then, as C4.5rules: a rule that lost every condition, covers no row, or whose rate is not
below ``1 - (rows of its class + 1) / (rows + 2)`` (the default error) is dropped; so is one
whose rate is above 0.7, which C4.5rules never lets fire; and of rules with the same class
and the same conditions, the first stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .. import progress as reporting
from ..criteria import add_errs
from .conditions import Condition
from .counts import Counter

NEVER_FIRES = 0.7
"""A rule with a pessimistic error rate above this never fires in C4.5rules: it is dropped."""

SAME = 1e-12
"""Error rates closer than this are equal (sums of weights may differ in their last bits)."""


@dataclass(frozen=True)
class Rule:
    """``IF conditions THEN classes[label]``, with what the training rows say of it.

    Attributes
    ----------
    conditions : tuple of Condition
        All must hold (an unknown value satisfies none).
    label : int
        The index of the class it predicts, in the model's ``classes``.
    error : float
        The pessimistic error rate on the training rows it covers (C4.5rules' ``Error``;
        ``1 - error`` is the estimated accuracy it prints).
    coverage : float
        Training weight (rows) satisfying every condition.
    errors : float
        Of those, the weight not of the rule's class.
    leaf : int
        The id of the leaf whose path it generalises.
    """

    conditions: tuple[Condition, ...]
    label: int
    error: float
    coverage: float
    errors: float
    leaf: int


@dataclass
class GeneraliseStats:
    """What generalisation did: rules in and out, conditions dropped, queries."""

    leaves: int = 0
    rounds: int = 0
    dropped_conditions: int = 0
    emptied: int = 0  # rules that lost every condition, or covered no row
    inaccurate: int = 0  # not better than the default error, or never firing
    merged: int = 0  # duplicates of an earlier rule
    kept: int = 0


def pessimistic_rate(counts: Sequence[float], label: int, cf: float, default: float) -> float:
    """C4.5rules' pessimistic error rate of a rule covering rows with these class weights
    (``default`` where it covers none)."""
    total = float(sum(counts))
    if total <= 0:
        return default
    errors = total - counts[label]
    return (errors + add_errs(total, errors, cf)) / total


def default_error(totals: Sequence[float], label: int) -> float:
    """``1 - (rows of the class + 1) / (rows + 2)``: a rule must do better than this."""
    return 1.0 - (totals[label] + 1.0) / (sum(totals) + 2.0)


@dataclass
class _Pending:
    conditions: list[Condition]
    label: int
    leaf: int


def generalise(
    leaves: Sequence[tuple[int, int, tuple[Condition, ...]]],
    counter: Counter,
    cf: float = 0.25,
) -> tuple[list[Rule], GeneraliseStats]:
    """Generalise the rules of ``leaves`` (``(leaf id, class index, conditions)``), in the
    engine behind ``counter``; the kept rules in the leaves' order, merged."""
    stats = GeneraliseStats(leaves=len(leaves))
    finished: dict[int, Rule] = {}
    pending = [(i, _Pending(list(c), label, leaf)) for i, (leaf, label, c) in enumerate(leaves)
               if c]
    stats.emptied += sum(1 for _, _, c in leaves if not c)
    with reporting.phase("rules", f"generalising {len(pending):,} rules") as phase:
        while pending:
            stats.rounds += 1
            counts, totals = counter.round_counts([p.conditions for _, p in pending])
            still = []
            for (i, p), per_d in zip(pending, counts):
                default = default_error(totals, p.label)
                rates = [pessimistic_rate(c, p.label, cf, default) for c in per_d]
                best = 0
                for d in range(1, len(rates)):
                    if best == 0 or rates[d] <= rates[best] + SAME:
                        best = d
                if best and rates[best] <= rates[0] + SAME:
                    del p.conditions[best - 1]
                    stats.dropped_conditions += 1
                    if p.conditions:
                        still.append((i, p))
                    else:
                        stats.emptied += 1
                    continue
                covered = float(sum(per_d[0]))
                if covered <= 0:
                    stats.emptied += 1
                elif rates[0] >= default or rates[0] > NEVER_FIRES:
                    stats.inaccurate += 1
                else:
                    finished[i] = Rule(tuple(p.conditions), p.label, rates[0], covered,
                                       covered - per_d[0][p.label], p.leaf)
            phase.step(f"round {stats.rounds}: {len(still):,} rules still generalising")
            pending = still
        rules: list[Rule] = []
        seen: set[tuple[frozenset[Condition], int]] = set()
        for i in sorted(finished):
            r = finished[i]
            key = (frozenset(r.conditions), r.label)
            if key in seen:
                stats.merged += 1
                continue
            seen.add(key)
            rules.append(r)
        stats.kept = len(rules)
        phase.done(f"{stats.kept:,} rules from {stats.leaves:,} leaves in {stats.rounds} "
                   f"rounds, {phase.seconds:.2f} s")
    return rules, stats
