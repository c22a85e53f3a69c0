"""Exporters: J48-style text, IF-THEN rules, Graphviz DOT."""

from __future__ import annotations

import shutil
import subprocess

import pytest

import sqltree
from sqltree import export
from sqltree.tree import Node, Split
from tests.conftest import unavailable
from tests.helpers import GOLF, GOLF_NUMERIC, GOLF_TREE, read_csv


def render_svg(dot: str) -> str:
    """Graphviz's SVG of ``dot`` (a missing ``dot`` program skips locally, fails under CI)."""
    if shutil.which("dot") is None:
        unavailable("graphviz (the dot program) is not installed")
    return subprocess.run(
        ["dot", "-Tsvg"], input=dot, capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture(scope="module")
def golf() -> sqltree.Model:
    return sqltree.train(read_csv(GOLF), target="play")


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (75.0, "75"),
        (0.6, "0.6"),
        (1.51732, "1.51732"),
        (0.12345678, "0.123457"),
        (-1.5, "-1.5"),
        (1e-7, "0"),
        (2.5e-6, "0.000003"),
        (123456789.125, "123456789.125"),
    ],
)
def test_weka_number(x: float, text: str) -> None:
    assert export.weka_number(x) == text


def test_text_is_j48s(golf: sqltree.Model) -> None:
    assert export.text(golf) == GOLF_TREE
    assert export.text(golf.root, golf.classes) == GOLF_TREE
    assert export.text(golf, summary=False) == GOLF_TREE.split("\n\n")[0]


def test_text_of_a_single_leaf_and_of_errors() -> None:
    root = Node(counts=[9.0, 5.0], proba=[9 / 14, 5 / 14])
    assert export.text(root, ["yes", "no"], summary=False) == ": yes (14.0/5.0)"
    fractional = Node(counts=[2.3333333, 0.6666667], proba=[0.78, 0.22])
    assert export.text(fractional, ["a", "b"], summary=False) == ": a (3.0/0.67)"


def test_thresholds_print_as_observed_values() -> None:
    model = sqltree.train(read_csv(GOLF_NUMERIC), target="play")
    text = export.text(model)
    assert "humidity <= 80" in text or "humidity <= 75" in text
    exact = export.text(model, decimals=None)
    assert "<= 80.0" in exact or "<= 75.0" in exact


def test_rules(golf: sqltree.Model) -> None:
    rules = export.rule_list(golf)
    assert len(rules) == 5
    first = rules[0]
    assert first.conditions == ["outlook = overcast"] and first.label == "yes"
    assert first.coverage == 4.0 and first.confidence == 1.0
    text = export.rules(golf)
    assert "IF outlook = sunny AND humidity = high THEN no  (coverage 3.0, confidence 1.000)" in (
        text
    )
    assert text.count("\n") == 5
    lone = Node(counts=[9.0, 5.0], proba=[9 / 14, 5 / 14])
    assert export.rules(lone, ["yes", "no"]) == (
        "IF TRUE THEN yes  (coverage 14.0, confidence 0.643)\n"
    )


def test_rules_for_subsets_and_thresholds() -> None:
    root = Node([3.0, 3.0], [0.5, 0.5], Split("colour", "nominal", groups=[["red", "it's"],
                                                                           ["blue"]]),
                [Node([3.0, 0.0], [1.0, 0.0]),
                 Node([0.0, 3.0], [0.0, 1.0], Split("size", "continuous", threshold=2.5),
                      [Node([0.0, 2.0], [0.0, 1.0]), Node([0.0, 1.0], [0.0, 1.0])])])
    lines = export.rules(root, ["p", "q"]).splitlines()
    assert lines[0].startswith("IF colour in {red, it's} THEN p")
    assert lines[2].startswith("IF colour = blue AND size > 2.5 THEN q")


def test_graphviz(golf: sqltree.Model) -> None:
    dot = export.graphviz(golf)
    assert dot.startswith('digraph "Tree" {')
    assert dot.count("->") == 7 and dot.count("shape=box") == 5
    assert 'label="= overcast"' in dot
    # every node: its test, the class with weight/errors, the class distribution
    assert 'N0 [label="outlook\\nyes (14.0/5.0)\\nno 5 | yes 9"];' in dot
    assert 'label="yes (4.0)\\nno 0 | yes 4" shape=box' in dot
    svg = render_svg(dot)
    assert "<svg" in svg and svg.count('class="node"') == 8


def test_graphviz_escapes_quotes() -> None:
    root = Node([1.0, 1.0], [0.5, 0.5], Split('say "hi"', "nominal", groups=[["a\\b"], ["c"]]),
                [Node([1.0, 0.0], [1.0, 0.0]), Node([0.0, 1.0], [0.0, 1.0])])
    dot = export.graphviz(root, ['x"y', "z"])
    assert 'label="say \\"hi\\"\\n' in dot and 'label="= a\\\\b"' in dot
    svg = render_svg(dot)
    # Graphviz reads the escaped label back as the original text.
    assert "say &quot;hi&quot;" in svg and "= a\\b" in svg and "x&quot;y (1.0)" in svg


def test_exporters_print_trees_of_any_depth():
    def leaf(counts: list[float]) -> Node:
        return Node(counts=counts, proba=[c / sum(counts) for c in counts])

    depth = 3000  # far beyond Python's recursion limit
    root = node = Node([1.0, 1.0], [0.5, 0.5])
    for i in range(depth):
        right = Node([1.0, 1.0], [0.5, 0.5])
        node.split = Split("x", "continuous", float(i))
        node.children = [leaf([1.0, 0.0] if i % 2 else [0.0, 1.0]), right]
        node = right
    node.counts, node.proba = [1.0, 0.0], [1.0, 0.0]
    text = export.text(root, ["a", "b"], summary=False).splitlines()
    assert len(text) == 2 * depth
    assert text[-1] == "|   " * (depth - 1) + f"x > {depth - 1}: a (1.0)"
    rules = export.rule_list(root, ["a", "b"])
    assert len(rules) == depth + 1 and len(rules[-1].conditions) == depth
    dot = export.graphviz(root, ["a", "b"]).splitlines()
    assert sum("->" in line for line in dot) == 2 * depth
    # as before: a test's edge follows its child's subtree, so the root's second edge is last
    assert dot[-2] == '  N0 -> N2 [label="> 0"];'
    assert f'  N{2 * depth - 2} -> N{2 * depth} [label="> {depth - 1}"];' in dot
