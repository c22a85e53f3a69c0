"""Model files: every saved model loads back exactly, and anything else is a ModelFileError
that says what is wrong and where, never a raw exception, a hang or unbounded memory."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sqltree
from sqltree import Model, ModelFileError
from sqltree.model_file import read_json, validate
from tests.helpers import BUYS, GOLF, GOLF_NUMERIC, mixed_table


def _weighted(rows: int) -> pd.DataFrame:
    frame = mixed_table(rows, seed=3)
    return frame.assign(w=[0.5 + (i % 4) for i in range(rows)])


def _booleans() -> pd.DataFrame:
    # boolean and integer nominal values, integer classes, NULLs in a boolean feature
    rows = [(i % 3 == 0 if i % 7 else None, i % 5, float(i % 11), (i % 3) + (i % 5 > 2))
            for i in range(120)]
    return pd.DataFrame(rows, columns=["flag", "code", "x", "y"])


TRAINED = {
    "c45-nominal": lambda: sqltree.train(str(GOLF), target="play"),
    "c45-continuous": lambda: sqltree.train(str(GOLF_NUMERIC), target="play", pruning=None),
    "c45-nulls-weights": lambda: sqltree.train(
        _weighted(1500), target="label", weight="w", max_depth=5),
    "id3-nominal": lambda: sqltree.train(str(BUYS), target="buys_computer", algorithm="id3"),
    "id3-mixed": lambda: sqltree.train(mixed_table(800, seed=5), target="label",
                                       algorithm="id3", max_depth=4),
    "cart-nulls-weights": lambda: sqltree.train(
        _weighted(1500), target="label", weight="w", algorithm="cart", max_depth=5),
    "cart-booleans": lambda: sqltree.train(
        _booleans(), target="y", algorithm="cart", nominal=["code"], max_depth=4),
    "c45-booleans": lambda: sqltree.train(_booleans(), target="y", nominal=["code"]),
}


class Documents(dict):
    def __repr__(self) -> str:  # hypothesis prints a strategy's arguments
        return f"Documents({sorted(self)})"


@pytest.fixture(scope="module")
def documents() -> dict[str, dict[str, Any]]:
    """The ``to_dict`` documents of a few trained models, as a saved file holds them."""
    return Documents(
        (name, json.loads(json.dumps(make().to_dict()))) for name, make in TRAINED.items()
    )


def write(tmp_path, document: Any, name: str = "model.json"):
    path = tmp_path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


# -- valid files -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(TRAINED))
def test_save_load_save_is_byte_identical(tmp_path, documents, name):
    model = Model.from_dict(copy.deepcopy(documents[name]))
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    model.save(first)
    again = sqltree.load(first)
    again.save(second)
    assert first.read_bytes() == second.read_bytes()
    assert again.to_sql("postgres") == model.to_sql("postgres")


def test_the_trained_models_cover_the_format(documents):
    # what the round trip above exercises: both split kinds, both unknown routings, CART's
    # branch for unknown values alone, fractional weights, and non-text values and classes
    nodes = [n for d in documents.values() for n in d["tree"]]
    splits = [n["split"] for n in nodes if "split" in n]
    assert {s["kind"] for s in splits} == {"continuous", "nominal"}
    assert {n["unknown_branch"] is None for n in nodes if "split" in n} == {True, False}
    assert any([] in s["groups"] for s in splits if s["kind"] == "nominal")
    assert any(not float(c).is_integer() for n in nodes for c in n["counts"])
    values = {type(v) for s in splits if s["kind"] == "nominal" for g in s["groups"] for v in g}
    assert {str, bool, int} <= values
    assert {type(c) for d in documents.values() for c in d["classes"]} == {str, int}


def test_cart_nodes_keep_what_growth_measured_and_older_files_load(documents):
    # CART's nodes keep their row count and impurity (and splits their improvement); a file
    # written before they were kept has none of them and loads as it did.
    document = copy.deepcopy(documents["cart-nulls-weights"])
    nodes = document["tree"]
    assert all(isinstance(n["n_samples"], int) and n["impurity"] >= 0 for n in nodes)
    assert all("improvement" in n for n in nodes if "split" in n)
    assert not any("n_samples" in n for n in documents["c45-nominal"]["tree"])
    model = Model.from_dict(copy.deepcopy(document))
    for n in nodes:
        for key in ("n_samples", "impurity", "improvement", "tied"):
            n.pop(key, None)
    document["version"] = 1
    older = Model.from_dict(document)
    assert older.root.n_samples is None and older.root.improvement is None
    assert older.to_sql("duckdb") == model.to_sql("duckdb")
    assert older.text() == model.text()


def chain(depth: int) -> dict[str, Any]:
    """A model whose tree is a chain of ``depth`` tests, each with a leaf on its other side."""
    tree: list[dict[str, Any]] = []
    for i in range(depth):
        tree.append({
            "id": i, "counts": [1.0, float(depth - i)],
            "proba": [1.0 / (1 + depth - i), (depth - i) / (1 + depth - i)],
            "split": {"feature": "x", "kind": "continuous", "threshold": float(depth - i)},
            "shares": [0.5, 0.5], "unknown_branch": 0, "children": [i + 1, depth + 1 + i],
        })
    tree.append({"id": depth, "counts": [1.0, 0.0], "proba": [1.0, 0.0]})
    tree += [{"id": depth + 1 + i, "counts": [0.0, 1.0], "proba": [0.0, 1.0]}
             for i in range(depth)]
    return {
        "format": "sqltree-model", "version": 1, "target": "y", "classes": ["a", "b"],
        "features": [{"name": "x", "kind": "continuous", "sql_type": "DOUBLE", "values": []}],
        "options": {}, "stats": {}, "tree": tree,
    }


def test_a_depth_1000_chain_loads(tmp_path):
    path = write(tmp_path, chain(1000))
    model = sqltree.load(path)
    assert (model.depth, model.n_leaves) == (1000, 1001)
    assert model.predict_row({"x": 0.5}) == "a" and model.predict_row({"x": 2.5}) == "b"
    assert model.to_sql().startswith("CASE")


def test_validation_does_not_recurse(tmp_path):
    # far deeper than Python's recursion limit
    model = sqltree.load(write(tmp_path, chain(20_000)))
    assert model.depth == 20_000


def test_a_byte_order_mark_is_accepted(tmp_path, documents):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(documents["c45-nominal"]).encode())
    assert sqltree.load(path).classes == ["no", "yes"]


def test_unknown_fields_outside_the_tree_are_ignored(documents):
    document = copy.deepcopy(documents["c45-nominal"]) | {"written_by": "a later sqltree"}
    assert Model.from_dict(document).n_leaves == 5


def _set(path: tuple[Any, ...], value: Any):
    def apply(d: Any) -> None:
        for key in path[:-1]:
            d = d[key]
        d[path[-1]] = value
    return apply


def _delete(path: tuple[Any, ...]):
    def apply(d: Any) -> None:
        for key in path[:-1]:
            d = d[key]
        del d[path[-1]]
    return apply


# -- the reproductions of the issue ----------------------------------------------------------------
def test_a_child_pointing_back_to_the_root_is_refused(tmp_path, documents):
    # before: n_leaves and `sqltree show` walked the cycle until memory ran out
    document = copy.deepcopy(documents["c45-nominal"])
    document["tree"][2]["children"][0] = 0
    with pytest.raises(ModelFileError, match=r"node 2: child 0 is the root"):
        sqltree.load(write(tmp_path, document))


BROKEN = [  # (what the issue found, how to break a golf model, what the message says)
    ("JSON list", lambda d: [d], r"the JSON document is a list, not an object"),
    ("no tree", _delete(("tree",)), r"missing field\(s\) 'tree'"),
    ("child out of range", lambda d: d["tree"][0]["children"].__setitem__(1, 12),
     r"node 0: child 12 is out of range \(the tree has 8 nodes\)"),
    ("string counts", lambda d: d["tree"][1].__setitem__("counts", ["0", "4"]),
     r'node 1: counts holds "0"'),
    ("short proba", lambda d: d["tree"][4].__setitem__("proba", [1.0]),
     r"node 4 \(id 5\): proba has 1 numbers; expected one per class \(2\)"),
    ("groups text", lambda d: d["tree"][0]["split"].__setitem__("groups", "abc"),
     r'node 0: groups is the text "abc"'),
    ("dict classes", lambda d: d.__setitem__("classes", {"no": 0, "yes": 1}),
     r"classes is an object; expected a list"),
    ("unknown split kind", lambda d: d["tree"][0]["split"].__setitem__("kind", "oblique"),
     r'node 0: split kind "oblique" is neither'),
]


@pytest.mark.parametrize("case", BROKEN, ids=[c[0] for c in BROKEN])
def test_broken_files_of_the_issue(tmp_path, documents, case):
    _, breaker, message = case
    document = copy.deepcopy(documents["c45-nominal"])
    document = breaker(document) or document
    with pytest.raises(ModelFileError, match=message) as raised:
        sqltree.load(write(tmp_path, document))
    assert str(raised.value).startswith(str(tmp_path / "model.json") + ": ")
    with pytest.raises(ModelFileError, match=message):
        Model.from_dict(document)


# -- every rule, one broken field each -------------------------------------------------------------
ROOT_SPLIT = ("tree", 0, "split")
RULES = [
    (_set(("format",), "other"), r"not a sqltree model file: format \"other\""),
    (_set(("version",), 4), r"version 4: not supported \(this sqltree reads versions 1 to 3\)"),
    (_set(("version",), 0), r"version 0: not supported"),
    (_set(("version",), True), r"version true: not supported"),
    (_set(("target",), ""), r"target is the text \"\""),
    (_set(("options",), []), r"options is a list; expected an object"),
    (_set(("classes",), []), r"classes is empty"),
    (_set(("classes",), ["no", "no"]), r'classes: "no" is listed twice'),
    (_set(("classes",), ["no", 1]), r"classes: mixes text and number"),
    (_set(("classes",), ["no", None]), r"classes: null is not a finite number"),
    (_set(("classes",), [1.5, math.nan]), r"classes: nan is not a finite number"),
    (_set(("classes",), ["no", "\ud800"]), r"is not a finite number, text"),
    (_set(("features",), {}), r"features is an object; expected a list"),
    (_set(("features", 0, "kind"), "ordinal"), r"feature 0 \('outlook'\): kind 'ordinal'"),
    (_set(("features", 1, "name"), "outlook"), r"feature 1 \('outlook'\) is listed twice"),
    (_delete(("features", 0, "sql_type")), r"feature 0: missing field 'sql_type'"),
    (_set(("features", 0, "colour"), 1), r"feature 0: unknown field\(s\) 'colour'"),
    (_set(("features", 0, "values"), ["a", 1]), r"values: mixes text and number"),
    (_set(("features", 0, "kind"), "continuous"), r"is continuous but its values are text"),
    (_set(("tree",), []), r"tree is empty"),
    (_set(("tree",), {"0": {}}), r"tree is an object; expected a list of nodes"),
    (_set(("tree", 3), "leaf"), r"node 3 is the text \"leaf\"; expected an object"),
    (_set(("tree", 1, "weight"), 4.0), r"node 1: unknown field\(s\) 'weight'"),
    (_set(("tree", 1, "id"), -1), r"node 1 \(id -1\): id is -1"),
    (_delete(("tree", 1, "counts")), r"node 1: missing field 'counts'"),
    (_set(("tree", 1, "counts"), [0.0, -4.0]), r"node 1: counts holds -4.0"),
    (_set(("tree", 1, "counts"), [0.0, math.inf]), r"node 1: counts holds inf"),
    (_set(("tree", 1, "counts"), [0.0, 10**400]), r"node 1: counts holds 1000"),
    (_set(("tree", 1, "counts"), [0.0, True]), r"node 1: counts holds true"),
    (_set(("tree", 1, "proba"), [0.0, 1.5]), r"node 1: proba holds 1.5; expected numbers "
                                             r"between 0 and 1"),
    (_set(("tree", 1, "children"), [2]), r"node 1 is a leaf \(no split\) but has children"),
    (_set(("tree", 1, "unknown_branch"), 0), r"node 1 is a leaf \(no split\) but has unknown"),
    (_set(("tree", 1, "split"), None), r"node 1: split is null; expected an object"),
    (_set((*ROOT_SPLIT, "feature"), "weather"), r"node 0: split feature 'weather' is not among"),
    (_delete((*ROOT_SPLIT, "feature")), r"node 0: split feature is missing"),
    (_set((*ROOT_SPLIT, "threshold"), 3.0), r"node 0: split: unknown field\(s\) 'threshold'"),
    (_delete((*ROOT_SPLIT, "groups")), r"node 0: a nominal split has no 'groups'"),
    (_set((*ROOT_SPLIT, "groups"), [["overcast"], ["rainy"]]),
     r"node 0: children has 3 entries; the split has 2 branches"),
    (_set((*ROOT_SPLIT, "groups"), [["overcast"], ["rainy"], "sunny"]),
     r"node 0: groups holds \"sunny\"; expected lists of values"),
    (_set((*ROOT_SPLIT, "groups"), [["overcast"], ["rainy"], [["sunny"]]]),
     r"node 0: branch value \[...\] is not a finite number"),
    (_set((*ROOT_SPLIT, "groups"), [["overcast"], ["rainy"], [3]]),
     r"node 0: branch value 3 is number; 'outlook' values are text"),
    (_set((*ROOT_SPLIT, "groups"), [["overcast"], ["rainy"], ["cloudy"]]),
     r"node 0: branch value \"cloudy\" is not among the values of 'outlook'"),
    (_set((*ROOT_SPLIT, "groups"), [["overcast"], ["rainy", "sunny"], ["sunny"]]),
     r"node 0: branch value \"sunny\" is in two branches"),
    (_set(("tree", 0, "shares"), [0.5, 0.5]), r"node 0: shares has 2 entries"),
    (_set(("tree", 0, "shares"), [0.5, 0.5, "x"]), r"node 0: shares holds \"x\""),
    (_delete(("tree", 0, "shares")), r"node 0: has a split but no 'shares'"),
    (_set(("tree", 0, "unknown_branch"), 3), r"node 0: unknown_branch 3 is not null or a branch"),
    (_set(("tree", 0, "children"), [1, 2, 2]), r"node 0: child 2 is already a child of node 0"),
    (_set(("tree", 0, "children"), [1, 2, -1]), r"node 0: child -1 is out of range"),
    (_set(("tree", 0, "children"), [1, 2, 5.0]), r"node 0: child 5.0 is not a node index"),
    (_set(("tree", 2, "children"), [2, 4]), r"node 2: child 2 is the node itself"),
    (_set(("tree", 2, "children"), [5, 4]), r"node 2: child 5 is already a child of node 0"),
    (lambda d: d["tree"].append({"id": 8, "counts": [1.0, 0.0], "proba": [1.0, 0.0]}),
     r"node 8 is not reachable from the root \(no node's child\)"),
    (lambda d: d["tree"][3].pop("id"), r"node 3: has no id, where the other nodes have theirs"),
    # numbers that contradict each other
    (_set(("tree", 1, "proba"), [0.9, 0.9]), r"node 1: proba adds up to 1.8; probabilities "),
    (_set(("tree", 1, "proba"), [0.0, 0.0]), r"node 1: proba adds up to 0; "),
    (_set(("tree", 0, "proba"), [0.5, 0.5]),
     r"node 0: proba \[0.5, 0.5\] disagrees with counts \[5, 9\], whose shares"),
    (_set(("tree", 3, "id"), 1), r"node 3 \(id 1\): id 1 is also the id of node 1"),
    (_set(("tree", 0, "shares"), [0.0, 0.0, 0.0]),
     r"node 0: shares add up to 0; a test's shares add up to 1"),
    (_set(("tree", 0, "shares"), [1.0, 1.0, 1.0]), r"node 0: shares add up to 3"),
    (_set(("tree", 1, "n_samples"), -1), r"node 1: n_samples is -1; expected a whole number"),
    (_set(("tree", 1, "n_samples"), 2.5), r"node 1: n_samples is 2.5"),
    (_set(("tree", 1, "impurity"), "x"), r'node 1: impurity is "x"; expected a finite number'),
    (_set(("tree", 1, "impurity"), -0.5), r"node 1: impurity is -0.5"),
    (_set(("tree", 0, "improvement"), True), r"node 0: improvement is true"),
    (_set(("tree", 0, "improvement"), 1e400), r"node 0: improvement is inf"),
    (_set(("tree", 0, "tied"), "yes"), r'node 0: tied is "yes"; expected true or false'),
]


@pytest.mark.parametrize("case", RULES, ids=[c[1][:40] for c in RULES])
def test_each_rule_names_what_is_wrong_and_where(documents, case):
    breaker, message = case
    document = copy.deepcopy(documents["c45-nominal"])
    document["version"] = 2  # the newest: every field is known
    breaker(document)
    with pytest.raises(ModelFileError, match=message):
        Model.from_dict(document)


def test_a_continuous_split_needs_a_finite_threshold_on_a_continuous_feature(documents):
    document = documents["c45-continuous"]
    node = next(i for i, n in enumerate(document["tree"])
                if n.get("split", {}).get("kind") == "continuous")
    for value, message in [(math.inf, "threshold is inf"), ("75", 'threshold is "75"'),
                           (None, "threshold is null")]:
        broken = copy.deepcopy(document)
        broken["tree"][node]["split"]["threshold"] = value
        with pytest.raises(ModelFileError, match=rf"node {node}( \(id \d+\))?: {message}; "
                                                 "expected a finite"):
            Model.from_dict(broken)
    broken = copy.deepcopy(document)
    broken["tree"][node]["split"]["kind"] = "nominal"
    with pytest.raises(ModelFileError, match="split on 'humidity' is nominal but the feature"):
        Model.from_dict(broken)


def test_a_cycle_away_from_the_root_is_found(documents):
    # nodes 5 and 7 made each other's child: every node but the root still has one parent,
    # only a walk from the root can tell
    document = copy.deepcopy(documents["c45-nominal"])
    tree = document["tree"]
    tree[0]["children"] = [1, 2, 4]  # 5 (id 3) and its children 6, 7 lose their parent
    tree[2] = {k: v for k, v in tree[2].items() if k not in
               ("split", "shares", "unknown_branch", "children")}
    tree[7]["split"] = {"feature": "windy", "kind": "nominal", "groups": [["false"], ["true"]]}
    tree[7] |= {"shares": [0.5, 0.5], "unknown_branch": None, "children": [5, 3]}
    with pytest.raises(ModelFileError, match=r"node 5 \(id 3\) is on a cycle of nodes the root"):
        Model.from_dict(document)


# -- files that are not JSON -----------------------------------------------------------------------
@pytest.mark.parametrize("content, message", [
    (b"", "the file is empty"),
    (b"not json", r"not a JSON model file: Expecting value \(line 1, column 1\)"),
    (b'{"format": "sqltree-model", "version": 1, "tree": [{"id"',
     r"the JSON ends early \(is the file truncated\?\)"),
    (b'{"format": "sqltree-model", "version": 1, "tree": [{"id', r"is the file truncated\?"),
    ('{"format": "sqltree-model"}'.encode("utf-16"), r"not UTF-8 text \(byte 0 is 0xff\)"),
    (b'{"format": "caf\xe9"}', r"not UTF-8 text \(byte 15 is 0xe9\)"),
    (b"[" * 100_000 + b"]" * 100_000, "not a model file"),
    (b'{"version": 1' + b"0" * 5000 + b"}", "not a model file"),
], ids=["empty", "text", "truncated", "truncated-string", "utf-16", "latin-1", "deep",
        "long-integer"])
def test_files_that_are_not_json_name_the_file(tmp_path, content, message):
    path = tmp_path / "broken.json"
    path.write_bytes(content)
    with pytest.raises(ModelFileError, match=message) as raised:
        sqltree.load(path)
    assert str(raised.value).startswith(f"{path}: ")


def test_a_truncated_saved_model_names_the_file(tmp_path, documents):
    path = tmp_path / "model.json"
    Model.from_dict(copy.deepcopy(documents["cart-nulls-weights"])).save(path)
    whole = path.read_bytes()
    for cut in (len(whole) // 3, len(whole) - 3):
        path.write_bytes(whole[:cut])
        with pytest.raises(ModelFileError, match=rf"^{path}: .*(truncated|JSON)"):
            sqltree.load(path)


def test_a_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "missing.json")


# -- random damage: a ModelFileError or a model that works -----------------------------------------
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 12), st.integers(),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
    st.sampled_from(["continuous", "nominal", "no", "yes", "sunny", "x", "a", "d", "label",
                     "split", "children", "groups", "threshold", "counts", "proba", "shares",
                     "unknown_branch", "feature", "kind", "values", "id"]),
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=6,
)


def _places(document: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in the document, without recursion."""
    out: list[tuple[Any, Any]] = []
    stack = [document]
    while stack:
        item = stack.pop()
        keys = list(item) if isinstance(item, dict) else range(len(item))
        for key in keys:
            out.append((item, key))
            if isinstance(item[key], (dict, list)):
                stack.append(item[key])
    return out


@st.composite
def damaged(draw: st.DrawFn, documents: dict[str, dict[str, Any]]) -> Any:
    document = copy.deepcopy(documents[draw(st.sampled_from(sorted(documents)))])
    n_nodes = len(document["tree"])
    for _ in range(draw(st.integers(1, 3))):
        places = _places(document)
        container, key = places[draw(st.integers(0, len(places) - 1))]
        how = draw(st.sampled_from(["value", "copy", "index", "delete", "add", "number"]))
        if how == "value":
            container[key] = draw(JSON_VALUES)
        elif how == "copy":  # a value from elsewhere in the file: a plausible mistake
            other, other_key = places[draw(st.integers(0, len(places) - 1))]
            container[key] = copy.deepcopy(other[other_key])
        elif how == "index":  # a node index: cycles, shared children, orphans
            container[key] = draw(st.integers(-1, n_nodes))
        elif how == "delete":
            del container[key]
        elif how == "add" and isinstance(container, dict):
            container[draw(SCALARS.filter(lambda k: isinstance(k, str)))] = draw(JSON_VALUES)
        elif how == "add":
            container.insert(key, draw(JSON_VALUES))
        elif isinstance(container[key], (int, float)) and not isinstance(container[key], bool):
            container[key] = container[key] + draw(st.sampled_from([-1, 1, 0.5, -1e300, 1e308]))
    return document


def _rows(model: Model) -> pd.DataFrame:
    """A few rows over the features the tree tests: every listed value, numbers around every
    threshold, and NULLs."""
    tested = {n.split.feature for n in model.root.walk() if n.split}
    features = [f for f in model.features if f.name in tested]
    thresholds = [float(n.split.threshold) for n in model.root.walk()
                  if n.split and n.split.kind == "continuous"]
    columns = {}
    for f in features:
        pool: list[Any] = list(f.values) or ["?"]
        if f.kind == "continuous":
            pool = [t + d for t in thresholds[:5] for d in (-0.5, 0.0, 0.5)] or [0.0]
        columns[f.name] = [pool[i % len(pool)] if i % 4 else None for i in range(12)]
    return pd.DataFrame(columns)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_files_load_into_working_models_or_raise_model_file_error(documents, data):
    document = data.draw(damaged(documents))
    try:
        model = Model.from_dict(document)
    except ModelFileError:
        return
    # loaded: then everything a model file feeds must work
    assert model.n_leaves >= 1 and model.depth >= 0
    model.text(), model.rules(), model.graphviz()
    for dialect in ("duckdb", "postgres", "spark"):
        model.to_sql(dialect)
        model.to_sql(dialect, table="t", proba=True)
    rows = _rows(model)
    expected = [model.predict_row(r) for r in rows.to_dict("records")]
    assert all(label in model.classes for label in expected)
    names = [c.lower() for c in rows.columns]
    if rows.columns.size and len(set(names)) == len(names):  # DuckDB names ignore case
        scored = model.predict(rows, column="predicted by the test")
        assert list(scored["predicted by the test"]) == expected
    again = Model.from_dict(json.loads(json.dumps(model.to_dict())))
    assert again.to_dict() == model.to_dict()


def test_validate_accepts_what_to_dict_writes(documents):
    for document in documents.values():
        validate(Model.from_dict(copy.deepcopy(document)).to_dict())
