"""A level's features scored side by side, a thread each.

numpy lets go of the interpreter lock in its sorts, counts, running sums and logarithms over
large arrays, so one feature's groups and cuts computed in a thread run beside another
feature's on another core. Each feature's result is its own and they are put together in the
features' order: the rows, and so the tree, do not depend on which thread finished first.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

PARALLEL_MIN_ROWS = 20_000
"""Levels of fewer rows score their features one after another: their arrays are small
enough that numpy keeps the lock for most operations, and a thread's start costs more than
it gains."""


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def each_feature(work: Callable[[T], R], features: Sequence[T], rows: int,
                 workers: int | None = None) -> list[R]:
    """``[work(f) for f in features]``, computed by up to ``workers`` threads (default: the
    cores) when the level has at least ``PARALLEL_MIN_ROWS`` rows."""
    n = min(workers or cores(), len(features))
    if n <= 1 or rows < PARALLEL_MIN_ROWS:
        return [work(f) for f in features]
    with ThreadPoolExecutor(n, thread_name_prefix="sqltree-feature") as pool:
        return list(pool.map(work, features))
