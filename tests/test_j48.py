"""sqltree's C4.5 against Weka's J48 (3.6) on Weka's own example data sets.

Each data set is written back as ARFF with sorted, observed-only nominal domains (see
tests/weka.py), so both sides see identical rows and value orders. Compared: the printed tree
(tests, thresholds, leaf labels, weights and errors to J48's two decimals), the number of
leaves and the size, unpruned (J48 -U: growth plus J48's collapse) and pruned (default J48:
-C 0.25 -M 2 with subtree raising), the class and class distribution predicted for every
training row, and on a small set every cross-validation prediction on Weka's own folds.
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from sqltree import export
from sqltree.algorithms import grow
from sqltree.dataset import describe
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.grower import GrowOptions
from sqltree.pruning import collapse, prune_c45
from sqltree.tree import Node
from tests.conftest import IN_CI
from tests.weka import (
    J48Result,
    describe_like_weka,
    example,
    have_weka,
    read_arff,
    run_j48,
    weka_folds,
    write_arff,
)

pytestmark = pytest.mark.weka

if not have_weka():
    if IN_CI:
        raise RuntimeError("CI needs java and weka.jar for the J48 comparison (see .ci/run)")
    pytest.skip("java or weka.jar is missing", allow_module_level=True)

# name -> what it exercises
DATASETS = {
    "weather.nominal": "nominal only",
    "contact-lenses": "nominal only, 3 classes",
    "vote": "nominal only, unknown values (392 of them)",
    "iris": "continuous only, 3 classes",
    "diabetes": "continuous only, 768 rows, thresholds 1e-3 apart",
    "weather.numeric": "mixed",
    "labor": "mixed, unknown values in most columns, subtree raising recounts",
    "breast-cancer": "nominal with unknown values, heavy pruning",
    "glass": "continuous, 6 classes, values 1e-5 apart (J48's cut gap)",
}
CV_DATASETS = ["weather.numeric"]  # 10 more trainings each: the small one keeps the file fast


@dataclass
class Case:
    name: str
    frame: pd.DataFrame
    target: str
    classes: list[str]
    unpruned: Node
    pruned: Node
    j48: J48Result
    j48_unpruned: J48Result


def _train(frame: pd.DataFrame, target: str, whole: pd.DataFrame | None = None) -> tuple:
    engine = DuckDBEngine()
    try:
        if whole is None:
            data = describe(frame, engine, target)
        else:
            data = describe_like_weka(frame, target, engine, whole)
        root, _ = grow(data, GrowOptions())
        unpruned = copy.deepcopy(root)
        collapse(unpruned)
        prune_c45(root, data)
        return data, unpruned, root
    finally:
        engine.cleanup()


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    folder: Path = tmp_path_factory.mktemp("arff")
    loaded = {}
    # Weka runs in background threads (one JVM each) while sqltree trains.
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = {}
        for name in DATASETS:
            arff = read_arff(example(name))
            path = folder / f"{name}.arff"
            write_arff(arff.frame, path, arff.target)
            loaded[name] = arff
            jobs[name] = (
                pool.submit(run_j48, path, [], cv_predictions=name in CV_DATASETS),
                pool.submit(run_j48, path, ["-U", "-no-cv"], predictions=False),
            )
        out = {}
        for name, arff in loaded.items():
            data, unpruned, pruned = _train(arff.frame, arff.target)
            out[name] = Case(
                name, arff.frame, arff.target, [str(c) for c in data.classes], unpruned, pruned,
                jobs[name][0].result(), jobs[name][1].result(),
            )
    return out


def _predict(root: Node, frame: pd.DataFrame) -> tuple[list[int], list[list[float]]]:
    labels, dists = [], []
    for row in frame.to_dict("records"):
        proba = root.predict_proba(row)
        best = 0
        for i, p in enumerate(proba):  # J48: the first class ahead by more than 1e-6
            if p - proba[best] > 1e-6:
                best = i
        labels.append(best)
        dists.append(proba)
    return labels, dists


@pytest.mark.parametrize("name", DATASETS)
def test_unpruned_tree_is_j48s(cases: dict[str, Case], name: str) -> None:
    case = cases[name]
    assert export.text(case.unpruned, case.classes, summary=False) == case.j48_unpruned.tree_text
    leaves, size = export._count(case.unpruned)
    assert (leaves, size) == (case.j48_unpruned.leaves, case.j48_unpruned.size)


@pytest.mark.parametrize("name", DATASETS)
def test_pruned_tree_is_j48s(cases: dict[str, Case], name: str) -> None:
    case = cases[name]
    assert export.text(case.pruned, case.classes, summary=False) == case.j48.tree_text
    leaves, size = export._count(case.pruned)
    assert (leaves, size) == (case.j48.leaves, case.j48.size)
    summary = export.text(case.pruned, case.classes)
    assert summary.endswith(
        f"\n\nNumber of Leaves  : \t{case.j48.leaves}\n\nSize of the tree : \t{case.j48.size}\n"
    )


@pytest.mark.parametrize("name", DATASETS)
def test_training_predictions_are_j48s(cases: dict[str, Case], name: str) -> None:
    case = cases[name]
    labels, dists = _predict(case.pruned, case.frame)
    assert labels == case.j48.predictions
    assert len(dists) == len(case.j48.distributions)
    for mine, theirs in zip(dists, case.j48.distributions, strict=True):
        assert mine == pytest.approx(theirs, abs=1.5e-3)  # J48 prints 3 decimals
    truth = [case.classes.index(str(v)) for v in case.frame[case.target]]
    correct = sum(a == b for a, b in zip(labels, truth, strict=True))
    assert correct == case.j48.train_correct


@pytest.mark.parametrize("name", CV_DATASETS)
def test_cross_validation_is_j48s(cases: dict[str, Case], name: str) -> None:
    """Every prediction of J48's stratified 10-fold cross-validation (seed 1), fold by fold."""
    case = cases[name]
    classes = list(case.frame[case.target])
    folds = weka_folds(classes)
    predicted: list[int] = []
    for test_rows in folds:
        train_rows = sorted(set(range(len(classes))) - set(test_rows))
        train = case.frame.iloc[train_rows].reset_index(drop=True)
        _, _, pruned = _train(train, case.target, whole=case.frame)
        labels, _ = _predict(pruned, case.frame.iloc[test_rows])
        predicted.extend(labels)
    assert predicted == case.j48.cv_predictions
    truth = [case.classes.index(str(classes[i])) for fold in folds for i in fold]
    assert sum(a == b for a, b in zip(predicted, truth, strict=True)) == case.j48.cv_correct


def test_weka_fold_order_matches_j48() -> None:
    """Weka's fold assignment (java.util.Random(1), randomize, stratify) is reproduced."""
    arff = read_arff(example("weather.numeric"))
    classes = list(arff.frame[arff.target])
    order = [classes[i] for fold in weka_folds(classes) for i in fold]
    # The actual classes J48 -p 0 lists under cross-validation, in order.
    assert order == ["no", "yes"] * 4 + ["no"] + ["yes"] * 5


@pytest.mark.parametrize("name", ["labor"])
def test_train_api_gives_j48s_tree(cases: dict[str, Case], name: str) -> None:
    """The public entry point, with its defaults, prints J48's default tree (labor exercises
    unknown values and subtree raising)."""
    import sqltree

    case = cases[name]
    model = sqltree.train(case.frame, target=case.target)
    assert model.text() == export.text(case.pruned, case.classes)
    assert export.text(model, summary=False) == case.j48.tree_text
    unpruned = sqltree.train(case.frame, target=case.target, pruning=None)
    assert export.text(unpruned, summary=False) == case.j48_unpruned.tree_text


# 20 rows where the average-gain rule decides the root: A has 7 values (>= 0.3 x 20), so J48
# leaves it out of the average (0.097, over B, C, X) but lets it win on gain ratio; averaging
# over all four candidates (0.073) would admit X, whose gain ratio is the highest.
MANY_VALUED = pd.DataFrame(
    [
        row.split()
        for row in [
            "a5 x p v 0", "a5 y r v 0", "a6 x p v 0", "a0 x q u 1", "a5 x p v 1",
            "a2 x q v 1", "a3 y p u 1", "a2 y p v 0", "a3 y p v 1", "a4 y r v 0",
            "a4 y p v 0", "a2 x p v 1", "a1 y r v 0", "a0 x q v 1", "a5 y r v 1",
            "a2 y q v 0", "a3 y q v 1", "a1 x q v 1", "a5 x p v 1", "a5 x r v 1",
        ]
    ],
    columns=["A", "B", "C", "X", "y"],
).astype(object)


def test_many_valued_nominals_as_j48(tmp_path: Path) -> None:
    """J48 leaves nominal attributes with at least 0.3 x N values out of the average gain
    (unless every attribute is one) but still lets them win on gain ratio."""
    arff = read_arff(example("weather.nominal"))
    frame = arff.frame.sort_values([arff.target, "outlook"]).reset_index(drop=True)
    frame.insert(0, "pair", [f"p{i // 2}" for i in range(len(frame))])
    frame.insert(1, "trio", [f"t{i // 3}" for i in range(len(frame))])
    for subset, target in (
        (MANY_VALUED, "y"),
        (frame, arff.target),
        (frame[["pair", "trio", "windy", arff.target]], arff.target),
    ):
        path = tmp_path / "many.arff"
        write_arff(subset, path, target)
        _, unpruned, pruned = _train(subset, target)
        classes = sorted(set(subset[target]))
        j48 = run_j48(path, ["-no-cv"], predictions=False)
        assert export.text(pruned, classes, summary=False) == j48.tree_text
        j48 = run_j48(path, ["-U", "-no-cv"], predictions=False)
        assert export.text(unpruned, classes, summary=False) == j48.tree_text


@pytest.mark.parametrize("name", ["labor"])  # also checked by hand: iris, glass, diabetes, vote
def test_pruning_options_are_j48s(tmp_path: Path, name: str) -> None:
    """J48 -S (no subtree raising), -C 0.1 and -C 0.5 (confidence), -M 5 (least cases)."""
    arff = read_arff(example(name))
    path = tmp_path / f"{name}.arff"
    write_arff(arff.frame, path, arff.target)
    engine = DuckDBEngine()
    try:
        data = describe(arff.frame, engine, arff.target)
        classes = [str(c) for c in data.classes]
        grown, _ = grow(data, GrowOptions())
        variants = [
            (["-S"], {"subtree_raising": False}),
            (["-C", "0.1"], {"cf": 0.1}),
            (["-C", "0.5"], {"cf": 0.5}),
        ]
        for options, kwargs in variants:
            root = copy.deepcopy(grown)
            prune_c45(root, data, **kwargs)
            j48 = run_j48(path, [*options, "-no-cv"], predictions=False)
            assert export.text(root, classes, summary=False) == j48.tree_text, options
        root, _ = grow(data, GrowOptions(min_cases=5))
        prune_c45(root, data)
        j48 = run_j48(path, ["-M", "5", "-no-cv"], predictions=False)
        assert export.text(root, classes, summary=False) == j48.tree_text
    finally:
        engine.cleanup()
