"""The C allocator's arenas: threads that share them, so that memory freed by one is reused by
another.

glibc's ``malloc`` gives each new thread an arena of its own (up to eight per core), and an
arena keeps the memory freed into it for reuse by its own threads. DuckDB's threads and the
memory plan's numpy threads (``algorithms.memory.parallel``) each made one, and a level's
arrays, made by one thread and freed by another, were held in several arenas at once.
"""

from __future__ import annotations

import ctypes
import os
import platform

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
