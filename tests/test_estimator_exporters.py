"""scikit-learn's exporters on sqltree's estimators, and the filled DOT of sqltree's own.

Where sqltree grows the same tree as scikit-learn, scikit-learn's ``export_text``,
``export_graphviz`` and ``plot_tree`` print the same thing for both.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("sklearn")
from sklearn import datasets
from sklearn import tree as sktree
from sklearn.tree import DecisionTreeClassifier as SKTree

import sqltree
from sqltree import export
from sqltree.estimator import C45Classifier, DecisionTreeClassifier, export_graphviz
from tests.cart_oracle import sklearn_match

NAMES = ["sepal length", "sepal width", "petal length", "petal width"]
CLASSES = ["setosa", "versicolor", "virginica"]


@pytest.fixture(scope="module")
def pair():
    """sqltree's CART and the scikit-learn tree identical to it, on iris."""
    X, y = datasets.load_iris(return_X_y=True)
    X = X.astype(np.float32).astype(np.float64)
    ours = DecisionTreeClassifier(max_depth=3).fit(X, y)
    verdict, seed = sklearn_match(lambda s: SKTree(random_state=s, max_depth=3), X, y, ours)
    assert verdict == "identical"
    return ours, SKTree(random_state=seed, max_depth=3).fit(X, y)


@pytest.mark.parametrize(
    "options",
    [{}, {"feature_names": NAMES}, {"show_weights": True, "decimals": 3}, {"max_depth": 1},
     {"class_names": CLASSES, "spacing": 2}],
)
def test_sklearn_export_text(pair, options):
    ours, theirs = pair
    assert sktree.export_text(ours, **options) == sktree.export_text(theirs, **options)


@pytest.mark.parametrize(
    "options",
    [{}, {"filled": True, "feature_names": NAMES, "class_names": CLASSES},
     {"proportion": True, "rounded": True, "node_ids": True, "max_depth": 1},
     {"label": "root", "impurity": False, "precision": 2, "filled": True}],
)
def test_sklearn_export_graphviz(pair, options):
    ours, theirs = pair
    assert sktree.export_graphviz(ours, **options) == sktree.export_graphviz(theirs, **options)


def _plotted(est) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import Annotation

    fig, ax = plt.subplots()
    try:
        sktree.plot_tree(est, ax=ax, filled=True, feature_names=NAMES, class_names=CLASSES)
        drawn = [a for a in ax.get_children() if isinstance(a, Annotation)]
        return [
            f"{a.get_text()}|{a.xyann}|{box.get_facecolor() if box else None}"
            for a in drawn
            for box in [a.get_bbox_patch()]
        ]
    finally:
        plt.close(fig)


def test_sklearn_plot_tree(pair):
    pytest.importorskip("matplotlib")
    ours, theirs = pair
    drawn = _plotted(ours)
    assert drawn == _plotted(theirs)
    assert sum("samples = " in d for d in drawn) == ours.tree_.node_count


def test_sklearn_exporters_on_c45_binary_tree():
    X, y = datasets.load_iris(return_X_y=True)
    clf = C45Classifier().fit(X, y)
    text = sktree.export_text(clf, feature_names=NAMES)
    assert text.startswith("|--- petal width <= 0.60\n|   |--- class: 0\n")
    dot = sktree.export_graphviz(clf, filled=True)
    assert "entropy = " in dot and dot.count("->") == clf.tree_.node_count - 1
    assert clf.tree_.n_leaves == clf.model_.n_leaves
    np.testing.assert_array_equal(clf.tree_.weighted_n_node_samples[0], 150.0)


def test_multiway_tree_has_no_tree_arrays_and_says_why():
    golf = pd.read_csv("examples/data/golf.csv", dtype={"windy": str})
    X, y = golf.drop(columns="play"), golf["play"]
    clf = C45Classifier().fit(X, y)
    with pytest.raises(AttributeError, match="more than two branches"):
        _ = clf.tree_
    with pytest.raises(AttributeError, match="more than two branches"):
        sktree.export_text(clf)
    text = sqltree.estimator.export_text(clf, show_weights=True)
    assert text.splitlines()[:4] == [
        "|--- outlook = overcast",
        "|   |--- weights: [0.00, 4.00] class: yes",
        "|--- outlook = rainy",
        "|   |--- windy = false",
    ]
    dot = export_graphviz(clf, filled=True)
    assert 'label="= sunny"' in dot and "fillcolor=" in dot
    assert dot.count("->") == clf.model_.n_nodes - 1


# -- filled DOT ------------------------------------------------------------------------------
def test_sqltree_graphviz_filled_matches_sklearn_colours(pair):
    ours, theirs = pair
    ours_dot = export_graphviz(ours, filled=True)
    theirs_dot = sktree.export_graphviz(theirs, filled=True)
    colours = re.compile(r'fillcolor="(#[0-9a-f]{6})"')
    assert colours.findall(ours_dot) == colours.findall(theirs_dot)
    assert 'style="filled", color="black"' in ours_dot


def test_fill_color_by_purity():
    palette = export.class_colors(3)
    assert export.fill_color([1.0, 0.0, 0.0], palette) == "#{:02x}{:02x}{:02x}".format(*palette[0])
    assert export.fill_color([0.5, 0.5, 0.0], palette) == "#ffffff"
    half = export.fill_color([0.0, 0.75, 0.25], palette)  # (0.75 - 0.25) / 0.75 of the colour
    expected = [round(2 / 3 * c + 1 / 3 * 255) for c in palette[1]]
    assert half == "#" + "".join(f"{c:02x}" for c in expected)


def test_model_graphviz_filled():
    model = sqltree.train("examples/data/golf.csv", target="play")
    plain = model.graphviz()
    filled = model.graphviz(filled=True)
    assert "fillcolor" not in plain
    nodes = [line for line in filled.splitlines() if "[label=" in line and "->" not in line]
    assert len(nodes) == model.n_nodes
    assert all("style=filled fillcolor=\"#" in line for line in nodes)
    # a pure leaf has its class's full colour
    yes = "#{:02x}{:02x}{:02x}".format(*export.class_colors(2)[model.classes.index("yes")])
    assert any(f'"yes (4.0)\\nno 0 | yes 4" shape=box style=filled fillcolor="{yes}"' in n
               for n in nodes)


def test_cli_dot_filled(tmp_path, capsys):
    from sqltree.cli import main

    model = sqltree.train("examples/data/golf.csv", target="play")
    path = tmp_path / "golf.json"
    model.save(path)
    assert main(["dot", str(path), "--filled"]) == 0
    out = capsys.readouterr().out
    assert out == model.graphviz(filled=True) + "\n"
    assert main(["dot", str(path)]) == 0
    assert "fillcolor" not in capsys.readouterr().out
