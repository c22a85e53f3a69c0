"""Model files: read a saved model's JSON and check all of it before it becomes a ``Model``.

A model file is read by code that walks the tree, compiles it to SQL and prints it; a file
edited by hand, truncated, or written by something else must not reach that code as a cycle
(a walk that never ends), a child index out of range or a count that is a string. So
``validate`` checks the whole document first, in one pass over it and without recursion (a
tree may be thousands of levels deep), and raises ``ModelFileError`` saying what is wrong and
where: ``node 7: child 12 is out of range (the tree has 9 nodes)``.

Nodes are named by their position in the file's ``tree`` list, which is what child indexes
refer to; a node's ``id`` is added when it differs.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence, Set
from typing import Any, NoReturn

from .dates import PARTS as DATE_PARTS
from .errors import ModelFileError
from .tree import CONTINUOUS, NOMINAL

FORMAT = "sqltree-model"
FORMAT_VERSION = 3
"""The newest version this sqltree writes. Version 2 added the task (regression trees) and
the optional node fields from growth, version 3 the date features (``date_column`` and
``date_part`` of a feature); a model that uses none of them is written as the oldest version
that holds it, so that older readers still load it."""

REQUIRED = ("target", "classes", "features", "tree")
FEATURE_FIELDS = {"name", "kind", "sql_type", "values"}
DATE_FIELDS = {"date_column", "date_part"}
"""A date feature's fields (version 3): the date column and the part it is computed from."""
VERSION_1_NODE_FIELDS = {
    "id", "counts", "proba", "split", "shares", "unknown_branch", "children",
}
NODE_FIELDS = VERSION_1_NODE_FIELDS | {
    # optional, from growth (CART)
    "n_samples", "impurity", "improvement", "tied",
    # regression trees: every node's weighted mean target
    "value",
}
TASKS = ("classification", "regression")
TEST_FIELDS = ("split", "shares", "unknown_branch", "children")
SPLIT_FIELDS = {
    CONTINUOUS: {"feature", "kind", "threshold"},
    NOMINAL: {"feature", "kind", "groups"},
}
KINDS = (CONTINUOUS, NOMINAL)
FINITE = sys.float_info.max
MAX_WEIGHT = 1e300
TOLERANCE = 1e-6
"""How far a node's probabilities, or a test's shares, may add up from 1, and a probability
from its count's share of the node's counts (float rounding, far below any real difference)."""
"""The most a node's counts may add up to: far above any sum of row weights, and low enough
that arithmetic on weights (percentages, error estimates) stays finite."""


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON document in the file at ``path``.

    A file that is not UTF-8 text or not complete JSON raises ``ModelFileError`` naming the
    file; a file that cannot be opened raises the ``OSError`` as ``open`` does.
    """
    name = os.fspath(path)
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        # utf-8-sig: a byte-order mark some editors add is not an error
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ModelFileError(
            f"{name}: not a model file: not UTF-8 text (byte {e.start} is {raw[e.start]:#04x})"
        ) from None
    if not text.strip():
        raise ModelFileError(f"{name}: not a model file: the file is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        # a string still open at the end of the file is the other sign of a cut
        if not text[e.pos:].strip() or e.msg.startswith("Unterminated string"):
            raise ModelFileError(
                f"{name}: not a model file: the JSON ends early (is the file truncated?)"
            ) from None
        raise ModelFileError(
            f"{name}: not a JSON model file: {e.msg} (line {e.lineno}, column {e.colno})"
        ) from None
    except (ValueError, RecursionError) as e:
        # json raises these for integers of thousands of digits and for lists nested
        # deeper than its parser's stack: neither is a model.
        raise ModelFileError(f"{name}: not a model file: {e}") from None


def validate(data: Any) -> None:
    """Check that ``data`` is a model's ``to_dict`` form; raise ``ModelFileError`` if not.

    Checked: format name and version; the type of every field; classes, a list of distinct
    values of one type; features with distinct names and a known kind; the tree a tree (every
    node but the root the child of exactly one node, all reachable from the root, child
    indexes in range); every node's counts (finite, non-negative, adding up to at most
    ``MAX_WEIGHT``) and probabilities (between 0 and 1, adding up to 1, the counts' shares
    where there are counts), one per class; distinct node ids; every split on a feature of the
    model, of that feature's kind, with a finite threshold or branch values of the feature's
    type, and one child and one share (a fraction) per branch, the shares adding up to 1.
    A regression model (``task`` "regression") has no classes, one count per node (its
    weight) and a finite ``value`` on every node. A date feature (version 3) names its date
    column and one of ``dates.PARTS``.
    Fields outside the tree that this version does not know are ignored.
    """
    if not isinstance(data, dict):
        _fail("not a sqltree model file", f"the JSON document is {_type(data)}, not an object")
    if data.get("format") != FORMAT:
        found = f"format {_show(data['format'])}" if "format" in data else "no 'format' field"
        _fail("not a sqltree model file", f"{found}; expected {FORMAT!r}")
    version = data.get("version")
    if not _is_int(version) or not 1 <= version <= FORMAT_VERSION:
        _fail(
            f"model file version {_show(version)}",
            f"not supported (this sqltree reads versions 1 to {FORMAT_VERSION})",
        )
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        _fail("model file", f"missing field(s) {', '.join(map(repr, missing))}")
    target = data["target"]
    if not _is_text(target) or not target:
        _fail("target", f"is {_type(target)}; expected a column name")
    for name in ("options", "stats"):
        if name in data and not isinstance(data[name], dict):
            _fail(name, f"is {_type(data[name])}; expected an object")
    task = data.get("task", "classification")
    if version == 1 and "task" in data:
        _fail("task", "is a field of version 2 files; this file says version 1")
    if task not in TASKS:
        _fail("task", f"is {_show(task)}; expected one of {', '.join(map(repr, TASKS))}")
    regression = task == "regression"
    if regression:
        if data["classes"] != []:
            _fail("classes", "of a regression model must be an empty list")
        n_classes = 1  # a node's counts: its weight
    else:
        n_classes = _check_classes(data["classes"])
    features = _check_features(data["features"], dated=version >= 3)
    known = NODE_FIELDS if version >= 2 else VERSION_1_NODE_FIELDS
    _check_tree(data["tree"], n_classes, features, regression, known)


def format_version(data: dict[str, Any]) -> int:
    """The oldest format version that can hold the ``to_dict`` document ``data``."""
    if any(f.keys() & DATE_FIELDS for f in data["features"]):
        return 3
    if "task" in data or any(item.keys() - VERSION_1_NODE_FIELDS for item in data["tree"]):
        return 2
    return 1


# -- classes and features --------------------------------------------------------------------------
class _Feature:
    __slots__ = ("domain", "kind", "value_type")

    def __init__(self, kind: str, value_type: str | None, domain: set[Any]) -> None:
        self.kind = kind
        self.value_type = value_type  # "boolean", "number" or "text"; None: no values listed
        self.domain = domain


def _check_classes(classes: Any) -> int:
    if not isinstance(classes, list):
        _fail("classes", f"is {_type(classes)}; expected a list of class labels")
    if not classes:
        _fail("classes", "is empty")
    _check_values("classes", classes)
    return len(classes)


def _check_features(features: Any, dated: bool = True) -> dict[str, _Feature]:
    if not isinstance(features, list):
        _fail("features", f"is {_type(features)}; expected a list of features")
    out: dict[str, _Feature] = {}
    for i, f in enumerate(features):
        where = f"feature {i}"
        if not isinstance(f, dict):
            _fail(where, f"is {_type(f)}; expected an object")
        if f.keys() & DATE_FIELDS and not dated:
            _fail(where, "date_column and date_part are fields of version 3 files; this file "
                         "says an older version")
        _known_fields(where, f, FEATURE_FIELDS | DATE_FIELDS)
        for key in ("name", "kind", "sql_type"):
            if key not in f:
                _fail(where, f"missing field {key!r}")
            if not _is_text(f[key]) or not f[key]:
                _fail(where, f"{key} is {_type(f[key])}; expected a non-empty string")
        name = f["name"]
        where = f"feature {i} ({name!r})"
        if name in out:
            _fail(where, "is listed twice")
        if f["kind"] not in KINDS:
            _fail(where, f"kind {f['kind']!r} is neither {CONTINUOUS!r} nor {NOMINAL!r}")
        values = f.get("values", [])
        if not isinstance(values, list):
            _fail(where, f"values is {_type(values)}; expected a list")
        value_type = _check_values(f"{where}: values", values)
        if f["kind"] == CONTINUOUS and value_type not in (None, "number"):
            _fail(where, f"is continuous but its values are {value_type}")
        _check_date_fields(where, f)
        out[name] = _Feature(f["kind"], value_type, set(values))
    return out


def _check_date_fields(where: str, f: dict[str, Any]) -> None:
    """A date feature names its date column and one of ``dates.PARTS``, and is numbers."""
    if not f.keys() & DATE_FIELDS:
        return
    if not f.keys() >= DATE_FIELDS:
        _fail(where, "a date feature has both date_column and date_part")
    if not _is_text(f["date_column"]) or not f["date_column"]:
        _fail(where, f"date_column is {_type(f['date_column'])}; expected a column name")
    if f["date_part"] not in DATE_PARTS:
        _fail(where, f"date_part is {_show(f['date_part'])}; expected one of "
                     f"{', '.join(map(repr, DATE_PARTS))}")
    if f.get("values") and _check_values(where, f["values"]) != "number":
        _fail(where, "is a date feature but its values are not numbers")


def _check_values(where: str, values: list[Any]) -> str | None:
    """The type the values share ("boolean", "number" or "text"); distinct, finite, scalar."""
    first: str | None = None
    seen: set[Any] = set()
    for v in values:
        kind = _scalar_type(v)
        if kind is None:
            _fail(where, f"{_show(v)} is not a finite number, text or true/false")
        if first is None:
            first = kind
        elif kind != first:
            _fail(where, f"mixes {first} and {kind} ({_show(v)})")
        if v in seen:
            _fail(where, f"{_show(v)} is listed twice")
        seen.add(v)
    return first


# -- the tree --------------------------------------------------------------------------------------
def _check_tree(
    tree: Any, n_classes: int, features: dict[str, _Feature], regression: bool,
    known: Set[str],
) -> None:
    if not isinstance(tree, list):
        _fail("tree", f"is {_type(tree)}; expected a list of nodes")
    if not tree:
        _fail("tree", "is empty: a model has at least a root")
    n = len(tree)
    parent = [-1] * n
    ids: dict[int, int] = {}
    # a file either numbers every node or none (they are then numbered by their place)
    numbered = any(isinstance(item, dict) and "id" in item for item in tree)
    for i, item in enumerate(tree):
        where = _node_name(i, item)
        if not isinstance(item, dict):
            _fail(where, f"is {_type(item)}; expected an object")
        _known_fields(where, item, known)
        if numbered and "id" not in item:
            _fail(where, "has no id, where the other nodes have theirs")
        node_id = item.get("id", i)
        if not _is_int(node_id) or node_id < 0:
            _fail(where, f"id is {_show(node_id)}; expected a whole number >= 0")
        if "id" in item and ids.setdefault(node_id, i) != i:
            _fail(where, f"id {node_id} is also the id of node {ids[node_id]}")
        for key in ("counts", "proba"):
            if key not in item:
                _fail(where, f"missing field {key!r}")
            _check_distribution(where, key, item[key], n_classes)
        if not regression:
            _check_proba(where, item["counts"], item["proba"])
        _check_growth_fields(where, item)
        if regression and not _is_number(item.get("value")):
            _fail(where, f"value is {_show(item.get('value'))}; a regression tree's node "
                         "needs a finite number")
        if "split" not in item:
            # a leaf: the fields of a test, if present at all, must be empty
            for key in TEST_FIELDS[1:]:
                if key in item and item[key] != ([] if key != "unknown_branch" else None):
                    _fail(where, f"is a leaf (no split) but has {key} {_show(item[key])}")
            continue
        children = _check_test(where, item, features)
        for c in children:
            if not _is_int(c):
                _fail(where, f"child {_show(c)} is not a node index")
            if not 0 <= c < n:
                _fail(where, f"child {c} is out of range (the tree has {n} nodes)")
            if c == 0:
                _fail(where, "child 0 is the root: the tree would be a cycle")
            if c == i:
                _fail(where, f"child {c} is the node itself: the tree would be a cycle")
            if parent[c] >= 0:
                _fail(where, f"child {c} is already a child of node {parent[c]}")
            parent[c] = i
    _check_reachable(tree, parent)


def _check_distribution(where: str, key: str, values: Any, n_classes: int) -> None:
    if not isinstance(values, list):
        _fail(where, f"{key} is {_type(values)}; expected a list of numbers")
    if len(values) != n_classes:
        _fail(where, f"{key} has {len(values)} numbers; expected one per class ({n_classes})")
    high = 1.0 if key == "proba" else FINITE
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= high:
            bounds = "between 0 and 1" if key == "proba" else "finite and >= 0"
            _fail(where, f"{key} holds {_show(v)}; expected numbers {bounds}")
    if key == "counts" and sum(values) > MAX_WEIGHT:
        _fail(where, f"counts add up to {sum(values):g}, more than a weight can be "
                     f"({MAX_WEIGHT:g})")


def _check_proba(where: str, counts: list[float], proba: list[float]) -> None:
    """Probabilities add up to 1 and, where training weight reached the node, are its counts'
    shares (a node no weight reached keeps its parent's)."""
    if abs(sum(proba) - 1.0) > TOLERANCE:
        _fail(where, f"proba adds up to {sum(proba):.6g}; probabilities add up to 1")
    total = sum(counts)
    if total > 0 and any(abs(p - c / total) > TOLERANCE for c, p in zip(counts, proba)):
        def listed(xs: list[float]) -> str:
            return "[" + ", ".join(f"{x:.6g}" for x in xs) + "]"

        _fail(where, f"proba {listed(proba)} disagrees with counts {listed(counts)}, whose "
                     f"shares they should be")


def _check_growth_fields(where: str, item: dict[str, Any]) -> None:
    """The optional numbers a node keeps from growth: a row count, an impurity, an
    improvement, and whether a tie was broken there."""
    n = item.get("n_samples")
    if n is not None and (not _is_int(n) or n < 0):
        _fail(where, f"n_samples is {_show(n)}; expected a whole number >= 0")
    impurity = item.get("impurity")
    if impurity is not None and (not _is_number(impurity) or impurity < 0):
        _fail(where, f"impurity is {_show(impurity)}; expected a finite number >= 0")
    improvement = item.get("improvement")
    if improvement is not None and not _is_number(improvement):
        _fail(where, f"improvement is {_show(improvement)}; expected a finite number")
    if not isinstance(item.get("tied", False), bool):
        _fail(where, f"tied is {_show(item['tied'])}; expected true or false")


def _check_test(where: str, item: dict[str, Any], features: dict[str, _Feature]) -> list[Any]:
    """Check a node's split, shares and unknown branch; return its children, unchecked."""
    split = item["split"]
    if not isinstance(split, dict):
        _fail(where, f"split is {_type(split)}; expected an object")
    kind = split.get("kind")
    if kind not in KINDS:
        _fail(where, f"split kind {_show(kind)} is neither {CONTINUOUS!r} nor {NOMINAL!r}")
    name = split.get("feature")
    if not isinstance(name, str):
        what = "missing" if "feature" not in split else _type(name)
        _fail(where, f"split feature is {what}; expected a feature name")
    feature = features.get(name)
    if feature is None:
        _fail(where, f"split feature {name!r} is not among the model's features")
    if feature.kind != kind:
        _fail(where, f"split on {name!r} is {kind} but the feature is {feature.kind}")
    _known_fields(f"{where}: split", split, SPLIT_FIELDS[kind])
    if kind == CONTINUOUS:
        if "threshold" not in split:
            _fail(where, "a continuous split has no 'threshold'")
        threshold = split["threshold"]
        if not _is_number(threshold):
            _fail(where, f"threshold is {_show(threshold)}; expected a finite number")
        branches = 2
    else:
        if "groups" not in split:
            _fail(where, "a nominal split has no 'groups'")
        branches = _check_groups(where, split["groups"], name, feature)
    for key in ("children", "shares"):
        if key not in item:
            _fail(where, f"has a split but no {key!r}")
        if not isinstance(item[key], list):
            _fail(where, f"{key} is {_type(item[key])}; expected a list")
        if len(item[key]) != branches:
            _fail(where, f"{key} has {len(item[key])} entries; the split has {branches} branches")
    for share in item["shares"]:
        if not _is_number(share) or not 0 <= share <= 1:
            _fail(where, f"shares holds {_show(share)}; expected fractions between 0 and 1")
    if abs(sum(item["shares"]) - 1.0) > TOLERANCE:
        _fail(where, f"shares add up to {sum(item['shares']):.6g}; a test's shares add up to 1")
    unknown = item.get("unknown_branch")
    if unknown is not None and (not _is_int(unknown) or not 0 <= unknown < branches):
        _fail(where, f"unknown_branch {_show(unknown)} is not null or a branch 0..{branches - 1}")
    children: list[Any] = item["children"]
    return children


def _check_groups(where: str, groups: Any, name: str, feature: _Feature) -> int:
    if not isinstance(groups, list) or not groups:
        _fail(where, f"groups is {_type(groups)}; expected a list of lists of values")
    value_type = feature.value_type
    seen: set[Any] = set()
    for group in groups:
        # A branch may list no value: CART's branch for unknown values alone.
        if not isinstance(group, list):
            _fail(where, f"groups holds {_show(group)}; expected lists of values")
        for v in group:
            kind = _scalar_type(v)
            if kind is None:
                _fail(where, f"branch value {_show(v)} is not a finite number, text or true/false")
            if value_type is None:
                value_type = kind  # a feature that lists no values: the split's own type
            if kind != value_type:
                _fail(where, f"branch value {_show(v)} is {kind}; {name!r} values are {value_type}")
            if feature.domain and v not in feature.domain:
                _fail(where, f"branch value {_show(v)} is not among the values of {name!r}")
            if v in seen:
                _fail(where, f"branch value {_show(v)} is in two branches")
            seen.add(v)
    return len(groups)


def _check_reachable(tree: Sequence[Any], parent: list[int]) -> None:
    # Every node but the root has at most one parent and the root none, so a walk from the
    # root meets each node at most once. A node it does not meet hangs, through its parents,
    # from a node that is no node's child, or from a cycle.
    reached = [False] * len(tree)
    reached[0] = True
    stack = [0]
    while stack:
        for c in tree[stack.pop()].get("children", []):
            reached[c] = True
            stack.append(c)
    if all(reached):
        return
    node = reached.index(False)
    seen = {node}
    while parent[node] >= 0 and parent[node] not in seen:
        node = parent[node]
        seen.add(node)
    if parent[node] < 0:
        _fail(_node_name(node, tree[node]), "is not reachable from the root (no node's child)")
    _fail(_node_name(node, tree[node]), "is on a cycle of nodes the root does not reach")


# -- small helpers ---------------------------------------------------------------------------------
def _fail(where: str, what: str) -> NoReturn:
    # "classes is an object; ...", "node 7: child 12 is out of range"
    raise ModelFileError(f"{where} {what}" if what.startswith("is ") else f"{where}: {what}")


def _known_fields(where: str, item: dict[str, Any], known: Set[str]) -> None:
    if item.keys() <= known:
        return
    unknown = sorted(str(k) for k in item if k not in known)
    newer = " (fields of version 2 files; this file says version 1)" if all(
        k in NODE_FIELDS for k in unknown) else ""
    _fail(where, f"unknown field(s) {', '.join(map(repr, unknown))}{newer}")


def _node_name(i: int, item: Any) -> str:
    node_id = item.get("id") if isinstance(item, dict) else None
    if _is_int(node_id) and node_id != i:
        return f"node {i} (id {node_id})"
    return f"node {i}"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    """A JSON number that is finite as a float (Python compares huge integers exactly)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and -FINITE <= v <= FINITE


def _scalar_type(v: Any) -> str | None:
    if isinstance(v, bool):
        return "boolean"
    if _is_number(v):
        return "number"
    if _is_text(v):
        return "text"
    return None


def _is_text(v: Any) -> bool:
    # JSON may escape a lone surrogate ("\ud800"): a str Python cannot write back as UTF-8
    if not isinstance(v, str):
        return False
    if v.isascii():
        return True
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true/false"
    if isinstance(v, (int, float)):
        return f"the number {_show(v)}"
    if isinstance(v, str):
        return f"the text {_show(v)}"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _show(v: Any) -> str:
    """A value for a message, cut short: a file may hold a string of a megabyte."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[...]" if v else "[]"
    if isinstance(v, dict):
        return "{...}" if v else "{}"
    text = json.dumps(v) if isinstance(v, str) else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
