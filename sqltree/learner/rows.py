"""How training rows become the learner's codes and additive statistics, the same way in SQL
and in numpy.

Every feature becomes a small integer code (``0`` unknown, ``1..`` a continuous feature's
quantile bin or a nominal feature's value), and every row carries the statistics it adds to
a histogram. Statistics are whole numbers: a weight or target is multiplied by ``2**bits`` and
rounded (``floor(x * 2**bits + 0.5)``, exact on every engine) where it is not one already, with
``bits`` chosen so that every sum stays below ``2**53``. A sum of whole-number doubles below
that bound is exact in any order, so every engine, every plan and numpy get the same sums, and
a child's histogram taken as its parent's less its sibling's is exact too.

Bootstrap counts come from the same integer arithmetic on both sides: a row's number (its rank
in the order of its codes, so the same data in any order gets the same numbers) is hashed with
the tree's constants by two rounds of ``(x * a + b) mod p`` (products stay below ``2**62``, in
BIGINT on every engine), and the count is the Poisson (or Bernoulli) quantile of the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

PRIME = 2_147_483_647
"""The modulus of the row hash (2**31 - 1): products of two residues stay below 2**62."""

MAX_COUNT = 12
"""The largest bootstrap count a row can draw (Poisson(1) exceeds it with probability 1e-10)."""

EXACT = 2.0**53


def scale_bits(bound: float, n_rows: int) -> int:
    """Bits of fraction for a column whose per-row magnitude is at most ``bound``: every sum
    of ``n_rows`` rows (times a bootstrap count) stays an exact double."""
    if bound <= 0:
        return 0
    room = EXACT / (max(n_rows, 1) * MAX_COUNT * bound)
    if not math.isfinite(room):
        return 40
    return max(0, min(40, math.floor(math.log2(room)) - 1))


def quantize(values: np.ndarray, bits: int) -> np.ndarray:
    return np.floor(values * (2.0**bits) + 0.5)


def tree_constants(seed: int, n_trees: int) -> np.ndarray:
    """Per tree, the four constants of its row hash (``a, b, c, d``, residues mod PRIME)."""
    rng = np.random.default_rng([int(seed), 0x5EED])
    return rng.integers(1, PRIME, size=(n_trees, 4), dtype=np.int64)


def row_hash(rid: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``((((rid a + b) mod p)^2 mod p) c + d) mod p`` for one tree's constants ``k``."""
    a, b, c, d = (int(x) for x in k)
    h = (rid.astype(np.int64) % PRIME * a + b) % PRIME
    h = (h * h) % PRIME
    return (h * c + d) % PRIME


@dataclass(frozen=True)
class Sampling:
    """How each tree draws its rows: ``bootstrap`` Poisson counts of mean ``fraction``, or
    each row once with probability ``fraction``; every row once when ``fraction`` is 1 and
    not ``bootstrap``."""

    bootstrap: bool = True
    fraction: float = 1.0

    @property
    def everything(self) -> bool:
        return not self.bootstrap and self.fraction >= 1.0

    def thresholds(self) -> list[int]:
        """Hash values below ``thresholds[k]`` (and at or above the one before) draw count k."""
        if not self.bootstrap:
            return [round((1.0 - self.fraction) * PRIME)]
        lam = self.fraction
        out, cdf, term = [], 0.0, math.exp(-lam)
        for k in range(MAX_COUNT):
            cdf += term
            out.append(min(PRIME, math.ceil(cdf * PRIME)))
            term *= lam / (k + 1)
        return out

    def counts(self, hashed: np.ndarray) -> np.ndarray:
        """The count each hashed row draws (numpy's side of the SQL ``CASE``)."""
        return np.searchsorted(np.asarray(self.thresholds(), dtype=np.int64), hashed,
                               side="right").astype(np.float64)
