"""The process's threads share the C allocator's arenas once sqltree makes its own database."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from sqltree import heap

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

FIT_IN_THREADS = """
import ctypes
import numpy as np
import pandas as pd
import sqltree
from sqltree import parallel

parallel.PARALLEL_MIN_ROWS = 0
parallel.cores = lambda: 4
rng = np.random.default_rng(0)
frame = pd.DataFrame({f"x{i}": rng.normal(size=3000) for i in range(6)})
frame["y"] = np.where(frame.x0 + rng.normal(size=3000) > 0, "a", "b")
sqltree.train(frame, "y", plan="memory", algorithm="c4.5")
sqltree.train(frame, "y", plan="tables", algorithm="c4.5", max_depth=3)
ctypes.CDLL(None).malloc_stats()
"""


def _arenas(env: dict[str, str]) -> int:
    """The arenas of a new process that fits a tree in four numpy threads and on DuckDB."""
    done = subprocess.run([sys.executable, "-c", FIT_IN_THREADS], env=env, check=True,
                          capture_output=True, text=True)
    return sum(line.startswith("Arena ") for line in done.stderr.splitlines())


@glibc
def test_threads_of_a_fit_share_the_arenas_that_exist():
    """DuckDB's threads and four numpy threads: an arena or two (one made while pandas was
    imported), where glibc's default gives them one each."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    assert _arenas(env) <= 2
    assert _arenas({**env, "MALLOC_ARENA_MAX": "64"}) > 4


def test_a_users_arena_setting_is_left_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert heap.share_arenas() is False


@glibc
def test_shared_arenas_are_set_through_mallopt(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert heap.share_arenas() is True


GIVE_BACK = """
from sqltree import heap

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6

blocks = [bytes(64 * 1024) for _ in range(4000)]  # 262 MB from the heap, below mmap's size
last = blocks[-1]
del blocks
held = rss()
heap.give_back()
print(held - rss())
"""


@glibc
def test_free_memory_goes_back_to_the_system():
    """What was freed into the heap, kept there by glibc, is given back."""
    done = subprocess.run([sys.executable, "-c", GIVE_BACK], check=True, capture_output=True,
                          text=True)
    assert float(done.stdout) > 131  # MB: at least half
