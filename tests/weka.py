"""A harness that runs Weka's J48 on the same rows as sqltree and parses what it prints.

Both sides must see the same data in the same order of values: ``read_arff`` loads an ARFF
file into pandas, ``write_arff`` writes a frame back with every nominal domain reduced to the
values that occur and sorted as sqltree sorts them (code point order), so J48's branch order,
its class order (which breaks ties between equally frequent classes) and sqltree's agree.

``run_j48`` returns the printed tree, its leaf count and size, the accuracy on the training
set and under Weka's stratified 10-fold cross-validation, and the training-set predictions.
``weka_folds`` reproduces Weka's fold assignment (java.util.Random with seed 1, randomize,
stratify, testCV), so sqltree can be cross-validated on exactly the folds J48 used.
"""

from __future__ import annotations

import csv
import math
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from sqltree.dataset import Dataset, describe
from sqltree.engines.base import Engine

WEKA_JAR = os.environ.get("WEKA_JAR", "/usr/share/java/weka.jar")
EXAMPLES = Path(os.environ.get("WEKA_EXAMPLES", "/usr/share/doc/weka/examples"))
DATA = Path(__file__).parent / "data"


def have_weka() -> bool:
    return shutil.which("java") is not None and os.path.exists(WEKA_JAR)


def example(name: str) -> Path:
    """An ARFF data set: shipped in tests/data (copies of the examples of the Debian weka
    package, with their citation headers), else from Weka's examples folder."""
    local = DATA / f"{name}.arff"
    return local if local.exists() else EXAMPLES / f"{name}.arff"


# -- ARFF --------------------------------------------------------------------------------------
@dataclass
class Arff:
    relation: str
    frame: pd.DataFrame
    nominal: dict[str, list[str]]  # declared domains, in declaration order
    target: str  # the last attribute, Weka's default class


def _split_list(text: str) -> list[str]:
    reader = csv.reader([text], quotechar="'", skipinitialspace=True, escapechar="\\")
    return [v.strip() for v in next(reader)]


def read_arff(path: str | os.PathLike[str]) -> Arff:
    """Read a dense ARFF file: nominal columns as strings, numeric as floats, ``?`` as missing."""
    names: list[str] = []
    nominal: dict[str, list[str]] = {}
    relation = ""
    rows: list[list[str]] = []
    in_data = False
    with open(path, encoding="utf-8", errors="replace") as handle:
        for raw in handle:
            line = raw.strip()
            if not line or line.startswith("%"):
                continue
            if in_data:
                rows.append(_split_list(line))
                continue
            lower = line.lower()
            if lower.startswith("@relation"):
                relation = line.split(None, 1)[1].strip("'\"")
            elif lower.startswith("@attribute"):
                rest = line.split(None, 1)[1]
                if rest[0] in "'\"":
                    end = rest.index(rest[0], 1)
                    name, kind = rest[1:end], rest[end + 1 :].strip()
                else:
                    name, kind = rest.split(None, 1)
                names.append(name)
                if kind.startswith("{"):
                    nominal[name] = _split_list(kind[1 : kind.rindex("}")])
            elif lower.startswith("@data"):
                in_data = True
    columns: dict[str, list[Any]] = {}
    for i, name in enumerate(names):
        values = [r[i] for r in rows]
        if name in nominal:
            columns[name] = [None if v == "?" else v for v in values]
        else:
            columns[name] = [math.nan if v == "?" else float(v) for v in values]
    frame = pd.DataFrame(columns)
    for name in nominal:
        frame[name] = frame[name].astype(object)
    return Arff(relation, frame, nominal, names[-1])


def _quote(value: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_.\-<>=/+]+", value) and value != "?":
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _number(x: float) -> str:
    return repr(float(x))


def write_arff(frame: pd.DataFrame, path: str | os.PathLike[str], target: str) -> None:
    """Write ``frame`` as ARFF with the target last and sorted, observed-only nominal domains."""
    columns = [c for c in frame.columns if c != target] + [target]
    lines = ["@relation sqltree", ""]
    nominal = {}
    for c in columns:
        if frame[c].dtype == object or str(frame[c].dtype) in ("str", "string"):
            domain = sorted({str(v) for v in frame[c] if isinstance(v, str)})
            nominal[c] = domain
            lines.append(f"@attribute {_quote(c)} {{{','.join(_quote(v) for v in domain)}}}")
        else:
            lines.append(f"@attribute {_quote(c)} numeric")
    lines += ["", "@data"]
    for row in frame[columns].itertuples(index=False, name=None):
        out = []
        for c, v in zip(columns, row, strict=True):
            if v is None or (isinstance(v, float) and math.isnan(v)):
                out.append("?")
            elif c in nominal:
                out.append(_quote(str(v)))
            else:
                out.append(_number(v))
        lines.append(",".join(out))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


# -- running J48 -------------------------------------------------------------------------------
@dataclass
class J48Result:
    tree_text: str  # the tree lines exactly as printed, without the header
    leaves: int
    size: int
    train_correct: float
    train_total: float
    cv_correct: float
    cv_total: float
    predictions: list[int] = field(default_factory=list)  # training set: predicted class index
    distributions: list[list[float]] = field(default_factory=list)
    cv_predictions: list[int] = field(default_factory=list)  # class index, Weka's fold order

    @property
    def train_accuracy(self) -> float:
        return self.train_correct / self.train_total

    @property
    def cv_accuracy(self) -> float:
        return self.cv_correct / self.cv_total


def _java(args: list[str]) -> str:
    cmd = ["java", "-Xmx512m", "-cp", WEKA_JAR, "weka.classifiers.trees.J48", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"J48 failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def run_j48(
    arff: str | os.PathLike[str],
    options: Sequence[str] = (),
    *,
    predictions: bool = True,
    cv_predictions: bool = False,
) -> J48Result:
    """Run J48 with ``options`` (e.g. ``["-U"]``) on ``arff``.

    One run prints the tree and the training and 10-fold cross-validation accuracy (add
    ``-no-cv`` to skip the latter); ``predictions`` adds a run that scores the training set
    (class indexes and distributions), ``cv_predictions`` one that lists the predictions made
    under cross-validation, fold by fold.
    """
    path = os.fspath(arff)
    report = _java([*options, "-t", path])
    tree_text, leaves, size = parse_tree_report(report)
    train = _correct(report, "=== Error on training data ===")
    cv = _correct(report, "=== Stratified cross-validation ===")
    result = J48Result(tree_text, leaves, size, train[0], train[1], cv[0], cv[1])
    if predictions:
        out = _java([*options, "-t", path, "-T", path, "-p", "0", "-distribution"])
        result.predictions, result.distributions = _parse_predictions(
            out, "=== Predictions on test data ==="
        )
    if cv_predictions:
        out = _java([*options, "-t", path, "-p", "0"])
        result.cv_predictions, _ = _parse_predictions(
            out, "=== Predictions under cross-validation ==="
        )
    return result


def parse_tree_report(report: str) -> tuple[str, int, int]:
    """The tree lines, number of leaves and size from J48's printed model."""
    match = re.search(
        r"J48 (?:un)?pruned tree\n-+\n\n?(.*?)\n\nNumber of Leaves  : \t(\d+)\n\n"
        r"Size of the tree : \t(\d+)",
        report,
        re.S,
    )
    if not match:
        raise ValueError("no tree in J48's output:\n" + report[:2000])
    return match.group(1).strip("\n"), int(match.group(2)), int(match.group(3))


def _correct(report: str, section: str) -> tuple[float, float]:
    if section not in report:
        return math.nan, math.nan
    part = report.split(section, 1)[1]
    correct = re.search(r"Correctly Classified Instances\s+([\d.]+)", part)
    total = re.search(r"Total Number of Instances\s+([\d.]+)", part)
    assert correct and total
    return float(correct.group(1)), float(total.group(1))


def _parse_predictions(text: str, section: str) -> tuple[list[int], list[list[float]]]:
    part = text.split(section, 1)[1]
    labels, dists = [], []
    for line in part.splitlines():
        # Weka truncates long labels, so read the 1-based class indexes instead.
        m = re.match(r"^\s*\d+\s+(\d+):.*?\s(\d+):", line)
        if not m:
            continue
        labels.append(int(m.group(2)) - 1)
        last = line.split()[-1]
        if "," in last:
            dists.append([float(x.lstrip("*")) for x in last.split(",")])
    return labels, dists


# -- parsing a printed tree --------------------------------------------------------------------
@dataclass
class Line:
    depth: int
    attribute: str
    op: str
    value: str
    label: str | None = None
    weight: float | None = None
    errors: float | None = None


_LINE = re.compile(
    r"^(?P<bars>(?:\|   )*)(?P<attr>.+?) (?P<op><=|>|=) (?P<value>.+?)"
    r"(?:: (?P<label>\S+) \((?P<w>[\d.]+)(?:/(?P<e>[\d.]+))?\))?$"
)


def parse_tree_lines(text: str) -> list[Line]:
    """J48-style tree text as a list of tests (leaf tests carry their label and weights)."""
    out = []
    for raw in text.splitlines():
        m = _LINE.match(raw)
        if not m:
            raise ValueError(f"cannot parse tree line {raw!r}")
        out.append(
            Line(
                depth=len(m.group("bars")) // 4,
                attribute=m.group("attr"),
                op=m.group("op"),
                value=m.group("value"),
                label=m.group("label"),
                weight=float(m.group("w")) if m.group("w") else None,
                errors=float(m.group("e")) if m.group("e") else 0.0 if m.group("w") else None,
            )
        )
    return out


# -- Weka's cross-validation folds -------------------------------------------------------------
class JavaRandom:
    """java.util.Random: the 48-bit linear congruential generator Weka draws folds from."""

    def __init__(self, seed: int) -> None:
        self.seed = (seed ^ 0x5DEECE66D) & ((1 << 48) - 1)

    def _next(self, bits: int) -> int:
        self.seed = (self.seed * 0x5DEECE66D + 0xB) & ((1 << 48) - 1)
        value = self.seed >> (48 - bits)
        return value - (1 << bits) if value >= 1 << (bits - 1) else value

    def next_int(self, bound: int) -> int:
        if bound & -bound == bound:  # a power of two
            return (bound * (self._next(31) & 0x7FFFFFFF)) >> 31
        while True:
            bits = self._next(31) & 0x7FFFFFFF
            value = bits % bound
            if bits - value + (bound - 1) < (1 << 31):
                return value


def weka_folds(classes: list[Any], folds: int = 10, seed: int = 1) -> list[list[int]]:
    """Row indices of each test fold, in the order Weka evaluates them (-x folds -s seed)."""
    order = list(range(len(classes)))
    rng = JavaRandom(seed)
    for j in range(len(order) - 1, 0, -1):  # Instances.randomize
        k = rng.next_int(j + 1)
        order[j], order[k] = order[k], order[j]
    # Instances.stratify: group equal classes (a selection pass), then deal out round robin.
    index = 1
    while index < len(order):
        first = classes[order[index - 1]]
        for j in range(index, len(order)):
            if classes[order[j]] == first:
                order[index], order[j] = order[j], order[index]
                index += 1
        index += 1
    dealt = []
    for start in range(folds):
        dealt.extend(order[start::folds])
    n = len(dealt)
    out = []
    for fold in range(folds):
        size = n // folds
        if fold < n % folds:
            size += 1
            offset = fold
        else:
            offset = n % folds
        first = fold * (n // folds) + offset
        out.append(dealt[first : first + size])
    return out


# -- sqltree on a subset of rows, with the whole data set's domains ----------------------------
def describe_like_weka(
    frame: pd.DataFrame, target: str, engine: Engine, whole: pd.DataFrame
) -> Dataset:
    """Describe ``frame`` (e.g. a cross-validation training fold) with the nominal domains and
    classes of ``whole``: Weka keeps the ARFF header's domains in every fold, so a value that a
    fold lacks still gets its (empty) branch, and a fold lacking a class still has it."""
    data = describe(frame, engine, target)
    for f in data.features:
        if f.kind == "nominal":
            f.values = sorted({v for v in whole[f.name] if isinstance(v, str)})
    classes = sorted({v for v in whole[target] if isinstance(v, str)})
    weights = dict(zip(data.classes, data.class_weights, strict=True))
    data.classes = classes
    data.class_weights = [weights.get(c, 0.0) for c in classes]
    return data
