"""Reading large trees: ``max_depth`` for text, rules and DOT; pictures drawn by Graphviz and
matplotlib; the model's summary; and the ``show``, ``rules`` and ``dot`` flags for them."""

from __future__ import annotations

import json
import sys

import matplotlib
import pytest

import sqltree
from sqltree import export, pictures
from sqltree.cli import main
from sqltree.errors import OptionError, UnsupportedError
from sqltree.tree import Node, Split
from sqltree.version import __version__
from tests.helpers import GOLF, mixed_table, read_csv

matplotlib.use("Agg")

GOLF_DEPTH_1 = """\
outlook = overcast: yes (4.0)
outlook = rainy: yes (5.0/2.0) [cut: 2 leaves]
outlook = sunny: no (5.0/2.0) [cut: 2 leaves]

Number of Leaves  : \t5

Size of the tree : \t8
"""

GOLF_RULES_DEPTH_1 = """\
leaf 1: IF outlook = overcast THEN yes  (coverage 4.0, confidence 1.000)
node 2: IF outlook = rainy THEN yes  (coverage 5.0, confidence 0.600) [cut: 2 leaves]
node 3: IF outlook = sunny THEN no  (coverage 5.0, confidence 0.600) [cut: 2 leaves]
"""


@pytest.fixture(scope="module")
def golf() -> sqltree.Model:
    return sqltree.train(read_csv(GOLF), target="play")


@pytest.fixture(scope="module")
def golf_file(tmp_path_factory, golf):
    path = tmp_path_factory.mktemp("models") / "golf.json"
    golf.save(path)
    return path


def chain(depth: int) -> Node:
    """``x <= i`` to a leaf, else deeper, ``depth`` tests deep."""
    root = node = Node([1.0, 1.0], [0.5, 0.5])
    for i in range(depth):
        deeper = Node([1.0, 1.0], [0.5, 0.5], node_id=2 * i + 2)
        node.split = Split("x", "continuous", float(i))
        node.children = [Node([1.0, 0.0], [1.0, 0.0], node_id=2 * i + 1), deeper]
        node.shares = [0.5, 0.5]
        node = deeper
    node.counts, node.proba = [0.0, 1.0], [0.0, 1.0]
    return root


# -- max_depth ----------------------------------------------------------------------------------
def test_text_cut_at_a_depth(golf):
    assert golf.text(max_depth=1) == GOLF_DEPTH_1
    assert golf.text(max_depth=0).startswith(": yes (14.0/5.0) [cut: 5 leaves]\n\n")
    assert golf.text(max_depth=2) == golf.text() == golf.text(max_depth=50)


def test_rules_cut_at_a_depth_with_ids(golf):
    assert golf.rules(max_depth=1, ids=True) == GOLF_RULES_DEPTH_1
    rules = export.rule_list(golf, max_depth=1)
    assert [r.cut for r in rules] == [0, 2, 2]
    assert sum(r.coverage for r in rules) == 14.0
    ids = [line.split(":")[0] for line in golf.rules(ids=True).splitlines()]
    assert ids == [f"leaf {n.node_id}" for n in golf.root.leaves()]


def test_rule_ids_are_the_leaves_the_leaf_sql_gives(golf):
    import duckdb

    got = duckdb.connect().execute(
        f"SELECT {golf.to_sql(output='leaf')} "
        f"FROM read_csv('{GOLF}', auto_type_candidates=['VARCHAR'])").fetchall()
    rules = {r.leaf.node_id: r for r in export.rule_list(golf)}
    for (leaf,), row in zip(got, read_csv(GOLF).to_dict("records")):
        assert leaf == golf.leaf_row(row)
        rule = rules[leaf]
        assert all(row[c.split(" = ")[0]] == c.split(" = ")[1] for c in rule.conditions)
        assert rule.label == row["play"]  # golf's leaves are pure


def test_dot_cut_at_a_depth(golf):
    dot = golf.graphviz(max_depth=1)
    assert dot.count("style=dashed") == 2 and dot.count("->") == 3
    assert '[label="windy\\nyes (5.0/2.0)\\nno 2 | yes 3\\n[cut: 2 leaves]" shape=box ' \
           'style=dashed];' in dot
    assert export.graphviz(golf, max_depth=0).count("->") == 0


def test_a_deep_tree_prints_only_its_top(tmp_path):
    root = chain(3000)
    lines = export.text(root, ["a", "b"], summary=False, max_depth=10).splitlines()
    assert len(lines) == 20
    assert lines[-1] == "|   " * 9 + "x > 9: a (2.0/1.0) [cut: 2991 leaves]"
    rules = export.rule_list(root, ["a", "b"], max_depth=10)
    assert len(rules) == 11 and rules[-1].cut == 2991
    dot = export.graphviz(root, ["a", "b"], max_depth=10)
    assert dot.count("->") == 20 and dot.count("style=dashed") == 1
    ax = pictures.plot(root, ["a", "b"], max_depth=10)
    assert len(ax.texts) == 21 + 20  # 21 nodes, 20 edge labels


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_max_depth_must_be_a_whole_number(golf, bad):
    for call in (golf.text, golf.rules, golf.graphviz, golf.plot):
        with pytest.raises(OptionError, match="max_depth must be a whole number >= 0"):
            call(max_depth=bad)


# -- Graphviz -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "start"), [
    ("tree.svg", b"<?xml"), ("tree.png", b"\x89PNG"), ("tree.pdf", b"%PDF"),
    ("tree.dot", b'digraph "Tree"'),
])
def test_render_writes_each_format(tmp_path, golf, name, start):
    pictures.render(golf.graphviz(), tmp_path / name)
    assert (tmp_path / name).read_bytes().startswith(start)


def test_render_says_what_is_missing(tmp_path, golf, monkeypatch):
    with pytest.raises(OptionError, match=r"name a \.dot, \.svg, \.png or \.pdf file"):
        pictures.render(golf.graphviz(), tmp_path / "tree.xlsx")
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot program to be found
    with pytest.raises(UnsupportedError, match=r"needs Graphviz's dot program.*apt-get install "
                                               r"graphviz"):
        pictures.render(golf.graphviz(), tmp_path / "tree.svg")
    monkeypatch.setitem(sys.modules, "graphviz", None)
    with pytest.raises(UnsupportedError, match=r"needs the graphviz Python package: pip "
                                               r"install -e '\.\[graphviz\]' in a clone"):
        pictures.render(golf.graphviz(), tmp_path / "tree.png")
    assert not (tmp_path / "tree.png").exists()


# -- matplotlib ---------------------------------------------------------------------------------
def test_plot_draws_every_node_and_edge(tmp_path, golf):
    ax = golf.plot()
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == 8 + 7
    assert "outlook\nyes (14.0/5.0)\nno 5 | yes 9" in texts and "= overcast" in texts
    assert len(ax.lines) == 7
    ax.figure.savefig(tmp_path / "golf.png")
    assert (tmp_path / "golf.png").read_bytes().startswith(b"\x89PNG")


def test_plot_on_given_axes_with_cut_subtrees(golf):
    import matplotlib.pyplot as plt

    _, ax = plt.subplots()
    assert golf.plot(ax=ax, max_depth=1) is ax
    cut = [t for t in ax.texts if "[cut: 2 leaves]" in t.get_text()]
    assert len(cut) == 2 and all(t.get_bbox_patch().get_linestyle() == "--" for t in cut)
    plt.close("all")


def test_plot_needs_matplotlib(golf, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(UnsupportedError, match=r"plot\(\) needs matplotlib: pip install "
                                               r"-e '\.\[plot\]' in a clone"):
        golf.plot()


# -- summary ------------------------------------------------------------------------------------
def test_summary(golf):
    lines = golf.summary().splitlines()
    assert lines[0] == "target         play (2 classes)"
    assert lines[1] == "source         the DataFrame: 14 rows, 4 features (4 nominal)"
    assert lines[2] == "class balance  no 5 (35.7%), yes 9 (64.3%)"
    assert lines[3] == ("algorithm      c4.5: min_cases=2.0, min_samples_split=0.0, "
                        "min_gain=0.0, missing=fractional, pruning=c4.5, cf=0.25, "
                        "subtree_raising=True")
    assert lines[4] == "tree           5 leaves, 8 nodes, depth 2; tests outlook, windy, humidity"
    assert lines[5].startswith("training       ") and " s on duckdb: " in lines[5]
    assert f"{golf.stats['queries']} queries" in lines[5]
    assert lines[6] == f"sqltree        {__version__}"


def test_summary_of_cart_with_weights_and_of_an_old_file(tmp_path):
    frame = read_csv(GOLF).assign(w=[1.0, 2.0] * 7, temperature=range(14))
    model = sqltree.train(frame, target="play", algorithm="cart", weight="w", max_depth=2)
    text = model.summary()
    assert ("the DataFrame: 14 rows, 4 features (1 continuous, 3 nominal); weight column 'w', "
            "total 21") in text
    from_file = sqltree.train(str(GOLF), target="play").summary()
    assert f"source         file {str(GOLF)!r}: 14 rows" in from_file
    assert "algorithm      cart: max_depth=2, min_samples_split=0.0, weight=w, criterion=gini" \
           in text
    document = model.to_dict()
    document["stats"] = {}
    old = sqltree.Model.from_dict(document)
    assert "training       not recorded" in old.summary()
    assert f"{__version__} (the version that trained it was not recorded)" in old.summary()
    document["stats"] = {"sqltree_version": "0.0.9"}
    assert f"trained with 0.0.9, read by {__version__}" in sqltree.Model.from_dict(
        document).summary()


# -- the command line ---------------------------------------------------------------------------
def cli(capsys, *args) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def test_show_rules_dot_cut_at_a_depth(capsys, golf_file, golf):
    assert cli(capsys, "show", golf_file, "--max-depth", "1") == (0, GOLF_DEPTH_1 + "\n", "")
    assert cli(capsys, "rules", golf_file, "--max-depth", "1", "--ids") == (
        0, GOLF_RULES_DEPTH_1 + "\n", "")
    assert cli(capsys, "dot", golf_file, "--max-depth", "1") == (
        0, golf.graphviz(max_depth=1) + "\n", "")
    assert cli(capsys, "show", golf_file, "--summary")[1] == golf.summary() + "\n"


def test_dot_draws_a_picture(capsys, golf_file, tmp_path):
    status, out, err = cli(capsys, "dot", golf_file, "-o", tmp_path / "tree.png")
    assert (status, out, err) == (0, "", f"wrote {tmp_path / 'tree.png'}\n")
    assert (tmp_path / "tree.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(("args", "message"), [
    (["dot", "MODEL", "-o", "tree.xlsx"], "trees are written as .dot or .gv or .svg or .png"),
    (["dot", "nosuch.json", "-o", "tree.xlsx"], "trees are written as .dot or .gv or .svg"),
    (["show", "MODEL", "--max-depth", "-1"], "expected a whole number >= 0, not '-1'"),
    (["rules", "MODEL", "--max-depth", "two"], "expected a whole number >= 0, not 'two'"),
    (["show", "MODEL", "--summary", "--max-depth", "2"], "--summary prints no tree"),
])
def test_reading_flag_errors_are_one_line(capsys, golf_file, tmp_path, args, message):
    args = [golf_file if a == "MODEL" else a for a in args]
    status, out, err = cli(capsys, *args)
    assert status == 2 and out == "" and message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "tree.xlsx").exists()


def test_a_saved_model_says_which_version_trained_it(golf_file):
    document = json.loads(golf_file.read_text())
    assert document["stats"]["sqltree_version"] == __version__


def test_a_regression_tree_cut_drawn_and_summarised(tmp_path):
    frame = mixed_table(500).drop(columns=["label"]).assign(t=lambda d: d.b * 2)
    model = sqltree.train(frame, target="t", algorithm="cart", criterion="squared_error",
                          max_depth=3)
    first = model.text(max_depth=1).splitlines()[0]
    assert first.startswith("b <= ") and ": value " in first and first.endswith(" leaves]")
    rules = model.rules(max_depth=1, ids=True).splitlines()
    assert len(rules) == 2 and all("THEN value " in r and "[cut: " in r for r in rules)
    dot = model.graphviz(max_depth=1)
    assert dot.count("style=dashed") == 2 and "value 100.128 (weight 500.0)" in dot
    assert len(model.plot(max_depth=1).texts) == 3 + 2
    lines = model.summary().splitlines()
    assert lines[0] == "target         t (regression)"
    mean, sd = frame["t"].mean(), frame["t"].std(ddof=0)
    assert lines[2] == f"target values  mean {mean:.2f}, sd {sd:.2f}"


def test_filled_pictures_cut_at_a_depth(golf, capsys, golf_file, tmp_path):
    dot = golf.graphviz(max_depth=1, filled=True)
    cut = [line for line in dot.splitlines() if "[cut: " in line]
    assert len(cut) == 2 and all('shape=box style="filled,dashed" fillcolor="#' in c
                                 for c in cut)
    ax = golf.plot(filled=True)
    faces = {t.get_bbox_patch().get_facecolor() for t in ax.texts if "(" in t.get_text()}
    assert len(faces) > 2  # class colours of different strengths, not all white
    status, _, _ = cli(capsys, "dot", golf_file, "--filled", "--max-depth", "1", "-o",
                       tmp_path / "tree.png")
    assert status == 0 and (tmp_path / "tree.png").read_bytes().startswith(b"\x89PNG")
