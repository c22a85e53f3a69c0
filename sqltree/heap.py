"""The C allocator: threads that share its arenas, so that memory freed by one is reused by
another, and free memory given back to the system between levels of growth.

glibc's ``malloc`` gives each new thread an arena of its own (up to eight per core), and an
arena keeps the memory freed into it for reuse by its own threads. DuckDB's threads and the
memory plan's numpy threads (``parallel``) each made one, and a level's
arrays, made by one thread and freed by another, were held in several arenas at once.

What a level frees stays in the arena for later arrays, but the grown tree's nodes are Python
objects, which Python allocates elsewhere (``obmalloc``'s own pages): the memory a level's
arrays freed is never theirs, and the fit's peak is at its last levels, where the tree is
largest.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
from typing import Any

M_ARENA_MAX = -8
"""glibc's ``mallopt`` parameter for the most arenas its ``malloc`` makes."""

SHARED_ARENAS = 1
"""The arenas that the process's threads share (``share_arenas``)."""


def share_arenas() -> bool:
    """Have threads made from now on allocate from the arenas that exist, not an arena each:
    glibc's ``mallopt(M_ARENA_MAX, SHARED_ARENAS)`` for the whole process, as the environment
    variable ``MALLOC_ARENA_MAX`` does; True where it was set.

    Called before sqltree makes its own DuckDB database, whose threads are then among the
    first (glibc fixes its limit once there are more than eight arenas; importing pandas
    makes a second one). On the 1M benchmark file (C4.5, ``max_depth=10``, two threads,
    three runs each) the fit peaked at 1,766-1,843 MB against 2,053-2,130 MB with glibc's
    default, in 21.2-24.2 s against 21.5-23.6 s; DuckDB's own statements were as fast (the
    binned tables plan with ``MALLOC_ARENA_MAX=1``: 16.8 and 17.0 s against 15.7 and
    16.8 s). Left alone where the user set ``MALLOC_ARENA_MAX``, and off glibc (musl, macOS,
    Windows)."""
    if "MALLOC_ARENA_MAX" in os.environ or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_ARENA_MAX, SHARED_ARENAS))


def give_back() -> bool:
    """Give the free memory of glibc's arenas back to the system (``malloc_trim(0)``); True
    where that was done (glibc only).

    Called after each level of growth: the arrays a level frees stay in the arena otherwise,
    beside the tree that the next levels add. On the 1M benchmark file (the no-option call)
    the fit peaked at 1,333-1,370 MB in three runs against 1,328-1,624 MB in five without,
    and at 1,239-1,280 MB (three runs) against 1,247-1,433 MB (five) with sqltree's DuckDB
    settings (``engines.duckdb.new_database``), for about 6 ms a level."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, looked up once; None off glibc."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
