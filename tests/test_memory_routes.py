"""The memory plan's routing of a level's rows (``algorithms.memory.routes``), against the
plain definitions: each row's key for its node's test, and the next level's rows."""

from __future__ import annotations

import numpy as np
import pytest

from sqltree.algorithms.memory import routes
from sqltree.algorithms.memory.level import Level


def _level(rng: np.random.Generator, rows: int, nodes: int) -> Level:
    """Rows spread over ``nodes`` nodes in no order, a continuous column with unknown values
    and a nominal one of codes 0-4."""
    x = np.empty((rows, 2), order="F")
    x[:, 0] = rng.normal(size=rows).round(1)
    x[rng.random(rows) < 0.1, 0] = np.nan
    x[:, 1] = rng.integers(0, 5, rows)
    return Level(node=rng.integers(0, nodes, rows) * 3 + 1, w=rng.random(rows) + 0.5,
                 y=rng.integers(0, 3, rows).astype(np.int8), x=x, column={0: 0, 1: 1})


def _tests_and_routes(rng: np.random.Generator, nodes: int
                      ) -> tuple[list[tuple[int, int, float | None]],
                                 list[tuple[int, int, int, float]]]:
    """A test for two nodes in three (a cut or a nominal split), and routes to children
    numbered against the nodes' order; an unknown value goes to every child."""
    tests, out = [], []
    child = 10 * nodes
    for node in range(1, 3 * nodes, 3):
        if rng.random() < 1 / 3:
            continue
        if rng.random() < 0.5:
            tests.append((node, 0, round(float(rng.normal()), 1)))
            keys = [0, 1]
        else:
            tests.append((node, 1, None))
            keys = list(range(5))
        children = []
        for key in keys:
            child -= 1  # children numbered downwards: their order is not the parents'
            children.append(child)
            out.append((node, key, child, 1.0))
        out += [(node, -1, c, 1.0 / len(children)) for c in children]
    return tests, out


def _plain_keys(level: Level, tests: list[tuple[int, int, float | None]]) -> np.ndarray:
    keys = np.full(len(level.node), routes.NO_TEST)
    for node, attr, threshold in tests:
        at = level.node == node
        v = level.x[at, level.column[attr]]
        key = v if threshold is None else (v > threshold).astype(np.float64)
        keys[at] = np.where(np.isnan(v), -1, key)
    return keys


@pytest.mark.parametrize("block", [1, 7, 1 << 20])
def test_keys_and_next_level_by_blocks_and_by_node(monkeypatch, block):
    """Keys a block of rows at a time equal each node's test applied to its rows; the next
    level by node holds the rows of the next level in row order, sorted stably by node."""
    monkeypatch.setattr(routes, "ROW_BLOCK", block)
    rng = np.random.default_rng(block)
    level = _level(rng, 500, 40)
    tests, to = _tests_and_routes(rng, 40)
    keys = routes.row_keys(level, tests, workers=2)
    assert (keys == _plain_keys(level, tests)).all()

    plain = routes.partition(level, tests, to, workers=2)
    by_node = routes.partition(level, tests, to, keys, workers=2, by_node=True)
    order = np.argsort(plain.node, kind="stable")
    for name in ("node", "w", "y", "base"):
        assert (getattr(by_node, name) == getattr(plain, name)[order]).all(), name
    # every row of a tested node, once per routed child
    routed = {(n, k): [c for n2, k2, c, _ in to if (n2, k2) == (n, k)] for n, k, _, _ in to}
    expected = sum(len(routed.get((n, k), [])) for n, k in zip(level.node, keys, strict=True))
    assert len(plain.node) == expected


@pytest.mark.parametrize("size", [3, 1 << 16, (1 << 16) + 1, 1 << 24])
def test_stable_order_of_many_keys(size):
    """Keys of up to 16 bits sort in one pass, more in two: numpy's stable order either way."""
    key = np.random.default_rng(size).integers(0, size, 200_000)
    assert (routes.stable_order(key, size) == np.argsort(key, kind="stable")).all()
