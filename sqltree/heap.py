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

    Called before sqltree makes its own DuckDB database, whose threads are then the first
    ones (glibc fixes its limit once there are more than eight arenas, after which this has
    no effect). On the 1M benchmark file (C4.5, two threads, two rounds of one run each)
    ``max_depth=10`` peaked at 1,583 and 1,663 MB against 2,023 and 1,834 MB with an arena
    per thread, and the no-option call at 1,806 and 1,661 MB against 2,061 and 2,012 MB; both
    ran 5-10% faster. DuckDB's own statements were as fast (the binned tables plan: 16.8 and
    17.0 s against 15.7 and 16.8 s). Left alone where the user set ``MALLOC_ARENA_MAX``, and
    off glibc (musl, macOS, Windows)."""
    if "MALLOC_ARENA_MAX" in os.environ or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_ARENA_MAX, SHARED_ARENAS))
