"""Float literals that SQLite reads back as the double they stand for.

SQLite turns decimal text into a double with its own routine, which is not correctly rounded:
measured on SQLite 3.40 over random doubles, Python's shortest text of about one double in 200
below 1e-250, and about one in 10,000 elsewhere, reads one unit in the last place off. A
threshold or a nominal value read one unit off sends the rows equal to it the other way, so the
SQL sent to SQLite, and ``to_sql("sqlite")``, write every float in a text this process's SQLite
reads exactly: the shortest text where that is exact (nearly always), else a longer or nudged
one, else, for the smallest magnitudes, an exact product ``(y * 2^-600)`` of two such texts
(scaling by a power of two loses nothing). Each text is checked by SQLite itself, once.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Iterator, Sequence

from sqlglot import exp

_SCALE = 600
"""Small magnitudes are written as ``x * 2**600`` times ``2**-600``."""

_BATCH = 500
"""Texts checked per statement (SQLite allows 2,000 result columns)."""

_EXACT: dict[str, exp.Expression | None] = {}
"""Text of a float literal -> what to write instead (None: SQLite reads the text exactly)."""

_checker: sqlite3.Connection | None = None
_lock = threading.Lock()


def exact_numbers(tree: exp.Expression) -> exp.Expression:
    """``tree`` with every float literal replaced, in place, by one SQLite reads exactly."""
    literals = [n for n in tree.find_all(exp.Literal) if _is_float(n)]
    _resolve(sorted({n.this for n in literals} - _EXACT.keys()))
    for node in literals:
        found = _EXACT[node.this]
        if found is None:
            continue
        if node is tree:
            return found.copy()
        node.replace(found.copy())
    return tree


def _is_float(node: exp.Literal) -> bool:
    if node.is_string or not any(c in node.this for c in ".eE"):
        return False
    try:
        return math.isfinite(float(node.this))
    except ValueError:
        return False


def _resolve(texts: list[str]) -> None:
    """Fill ``_EXACT`` for ``texts``: most read exactly as they are, checked in batches."""
    for i in range(0, len(texts), _BATCH):
        batch = texts[i:i + _BATCH]
        for text, read in zip(batch, _read([exp.Literal.number(t) for t in batch]), strict=True):
            _EXACT[text] = None if read == float(text) else _replacement(float(text))


def _replacement(x: float) -> exp.Expression | None:
    """A literal (or exact product) SQLite reads as ``x``; None if none is found."""
    text = _exact_text(x)
    if text is not None:
        return exp.Literal.number(text)
    if x < 1e-250:
        scaled, power = _exact_text(math.ldexp(x, _SCALE)), _exact_text(math.ldexp(1.0, -_SCALE))
        if scaled is not None and power is not None:
            product = exp.Paren(this=exp.Mul(this=exp.Literal.number(scaled),
                                             expression=exp.Literal.number(power)))
            if _read([product]) == [x]:
                return product
    return None


def _exact_text(x: float) -> str | None:
    """The first of ``_candidates(x)`` that SQLite reads as ``x``."""
    candidates = list(_candidates(x))
    reads = _read([exp.Literal.number(t) for t in candidates])
    for text, read in zip(candidates, reads, strict=True):
        if read == x:
            return text
    return None


def _candidates(x: float) -> Iterator[str]:
    """Texts Python reads as ``x``: the shortest, then 17, 20 and 25 significant digits, each
    also nudged by up to 3 in its last digit (SQLite's error has a direction)."""
    yield repr(x)
    for digits in (17, 20, 25):
        mantissa, exponent = (f"%.{digits - 1}e" % x).split("e")
        whole = int(mantissa.replace(".", ""))
        for nudge in (0, 1, -1, 2, -2, 3, -3):
            text = f"{whole + nudge}e{int(exponent) - digits + 1}"
            if float(text) == x:
                yield text


def _read(numbers: Sequence[exp.Expression]) -> list[float]:
    """What SQLite makes of each expression, as a double."""
    global _checker
    query = exp.select(*numbers).sql("sqlite")
    with _lock:
        if _checker is None:
            _checker = sqlite3.connect(":memory:", check_same_thread=False)
        (row,) = _checker.execute(query).fetchall()
    return [float(v) for v in row]
