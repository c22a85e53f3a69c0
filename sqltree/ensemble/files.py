"""Opening model files: a sqltree tree, a sqltree ensemble, LightGBM's text model, XGBoost's
JSON model.

``load`` opens what ``Model.save`` and ``Ensemble.save`` write (``sqltree.load``);
``read_any`` also reads the libraries' own files (``sqltree sql --from model.txt``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import ModelFileError
from ..model import Model
from ..model import load as load_tree
from ..model_file import read_json
from .model import FORMAT, Ensemble


def load(path: str | os.PathLike[str]) -> Model | Ensemble:
    """Read a model written by ``Model.save`` or ``Ensemble.save``; any other file raises
    ModelFileError naming it."""
    data = read_json(path)
    if isinstance(data, dict) and data.get("format") == FORMAT:
        try:
            return Ensemble.from_dict(data)
        except ModelFileError as e:
            raise ModelFileError(f"{os.fspath(path)}: {e}") from None
    return load_tree(path)


def read_any(path: str | os.PathLike[str]) -> Model | Ensemble:
    """A sqltree model or ensemble file, a LightGBM text model (``Booster.save_model``) or an
    XGBoost JSON model (``Booster.save_model("model.json")``), told apart by content."""
    with open(path, "rb") as fh:
        raw = fh.read()
    text = raw.decode("utf-8-sig", errors="replace")
    head = text.lstrip()[:200]
    if head.startswith(("tree\n", "tree\r\n")) or "\nversion=v" in head:
        from .importers import from_lightgbm

        return from_lightgbm(text)
    if head.startswith("{"):
        try:
            data: Any = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict) and "learner" in data:
            from .importers import from_xgboost

            return from_xgboost(text)
    return load(path)
