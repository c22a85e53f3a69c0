"""Work on large arrays side by side, a thread each: a level's features (their groups and
cuts, a boosted leaf's histogram), or a pruning round's disjoint subtrees (their recounts).

numpy lets go of the interpreter lock in its sorts, counts, running sums, gathers and
logarithms over large arrays, so one item's work in a thread runs beside another's on another
core. Each item's result is its own and they are put together in the items' order: the rows,
and so the tree, do not depend on which thread finished first.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

PARALLEL_MIN_ROWS = 20_000
"""Work over fewer rows runs one item after another: its arrays are small enough that numpy
keeps the lock for most operations, and handing an item to a thread costs more than it
gains."""


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def engine_workers(engine: Any) -> int | None:
    """Threads for numpy work on an engine's rows: the engine's own setting where it has one
    (DuckDB's ``threads``), else None (one per core)."""
    return getattr(engine, "threads", None)


def side_by_side(work: Callable[[T], R], items: Sequence[T], rows: int,
                 workers: int | None = None) -> list[R]:
    """``[work(item) for item in items]``, computed by up to ``workers`` threads (default: the
    cores) when the work covers at least ``PARALLEL_MIN_ROWS`` rows."""
    size = workers or cores()
    if min(size, len(items)) <= 1 or rows < PARALLEL_MIN_ROWS:
        return [work(item) for item in items]
    return list(_pool(size).map(work, items))


_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _pool(n: int) -> ThreadPoolExecutor:
    """The process's pool of ``n`` threads, made once and kept: a new thread takes the C
    allocator's next free arena, and threads made level after level (beside other libraries'
    threads, such as pyarrow's) spread a fit's arrays over arenas that each keep their freed
    memory. Measured on the 1M file (C4.5, ``max_depth=10``, after a ``pd.read_parquet``): a
    peak of 3.9-4.2 GB with a new pool per level, against 2.3-2.4 GB with these. Keyed by
    process too: a forked child has none of its parent's threads and makes its own."""
    key = (os.getpid(), n)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = ThreadPoolExecutor(n, thread_name_prefix="sqltree-numpy")
        return pool
