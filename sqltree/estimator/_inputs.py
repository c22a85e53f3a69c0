"""Input validation for the estimators: scikit-learn's contract, sqltree's feature roles.

Arrays and lists go through scikit-learn's own ``validate_data`` (so every message is the one
scikit-learn users know). A DataFrame keeps its column types (numbers are continuous; text,
booleans, categories and other object columns are nominal), so only its names and width go
through ``validate_data``, and the same checks are made column by column: converting a wide
mixed frame to one object array would cost more than the fit on large data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.utils import check_array, column_or_1d
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_consistent_length, validate_data

ARRAY_NAME = "x{}"
"""Column names given to the features of an array (the compiled SQL reads these columns)."""

_TEXT_OBJECTS = {"string", "empty"}
_NUMBER_OBJECTS = {"floating", "integer", "mixed-integer-float", "decimal", "boolean", "empty"}


def frame_of(est: Any, X: Any, *, reset: bool) -> pd.DataFrame:
    """``X`` as a DataFrame whose column names are the model's feature names.

    Sets (``reset``) or checks ``n_features_in_`` and ``feature_names_in_`` as scikit-learn
    does, refusing sparse, complex, infinite, empty and 1-d input with its messages.
    """
    if isinstance(X, pd.DataFrame):
        validate_data(est, X, reset=reset, skip_check_array=True)
        _check_frame(X, type(est).__name__)
        if reset:
            est._feature_columns = [str(c) for c in X.columns]
        frame = X
        if list(frame.columns) != est._feature_columns:
            frame = frame.set_axis(est._feature_columns, axis=1)
        return _normalise_objects(frame)
    arr = validate_data(est, X, reset=reset, dtype=None, ensure_all_finite="allow-nan")
    if arr.dtype.kind in "biu":
        arr = arr.astype(np.float64)
    if reset:
        est._feature_columns = [ARRAY_NAME.format(i) for i in range(arr.shape[1])]
    frame = pd.DataFrame(arr, columns=est._feature_columns, copy=False)
    if arr.dtype.kind in "OSU":
        frame = _normalise_objects(frame.astype(object) if arr.dtype.kind != "O" else frame)
    return frame


def _check_frame(X: pd.DataFrame, name: str) -> None:
    """The checks ``check_array`` makes, per column: no sparse or complex columns, at least
    one row and one column, no infinity."""
    n_rows, n_cols = X.shape
    if n_rows < 1:
        raise ValueError(
            f"Found array with 0 sample(s) (shape={X.shape}) while a minimum of 1 is "
            f"required by {name}."
        )
    if n_cols < 1:
        raise ValueError(
            f"Found array with 0 feature(s) (shape={X.shape}) while a minimum of 1 is "
            f"required by {name}."
        )
    for column, dtype in X.dtypes.items():
        if isinstance(dtype, pd.SparseDtype):
            raise TypeError(
                f"Sparse data was passed for X (column {column!r}), but dense data is "
                "required. Use '.sparse.to_dense()' to convert the frame."
            )
        if dtype.kind == "c":
            raise ValueError("Complex data not supported")
        if dtype.kind == "f" and np.isinf(X[column].to_numpy(dtype=np.float64)).any():
            raise ValueError(f"Input X contains infinity (column {column!r}).")


def _normalise_objects(frame: pd.DataFrame) -> pd.DataFrame:
    """Object columns hold text, numbers or booleans, never both text and numbers (the engine
    would make such a column text, and a number would no longer find its branch); a NaN in
    them is a missing value (NULL)."""
    out = frame
    for column in [c for c, d in frame.dtypes.items() if d.kind == "O" and d.name == "object"]:
        series = frame[column]
        kind = pd.api.types.infer_dtype(series, skipna=True)
        if kind in _TEXT_OBJECTS or kind in _NUMBER_OBJECTS:
            if series.isna().any():
                if out is frame:
                    out = frame.copy()
                out[column] = series.astype(object).where(series.notna(), None)
            continue
        bad = next(
            (v for v in series if not _is_missing(v) and not isinstance(v, (str, bool, int,
                                                                             float))),
            None,
        )
        if bad is not None:
            raise TypeError(
                f"feature {column!r} holds a {type(bad).__name__} ({bad!r}); a feature value "
                "must be a string or a number (or a boolean)"
            )
        raise TypeError(
            f"feature {column!r} mixes text with numbers or booleans; give it one type "
            "(text for a nominal feature, numbers for a continuous one)"
        )
    return out


def _is_missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def labels_of(est: Any, y: Any, n_rows: int) -> np.ndarray:
    """``y`` as a 1-d array of class labels, with scikit-learn's checks and messages."""
    y = _one_column(est, y, n_rows, None)
    check_classification_targets(y)
    return y


def targets_of(est: Any, y: Any, n_rows: int) -> np.ndarray:
    """``y`` as a 1-d float64 array of finite numbers, with scikit-learn's checks and
    messages."""
    return _one_column(est, y, n_rows, np.float64)


def _one_column(est: Any, y: Any, n_rows: int, dtype: Any) -> np.ndarray:
    if y is None:
        raise ValueError(
            f"This {type(est).__name__} estimator requires y to be passed, but the target y "
            "is None."
        )
    y = column_or_1d(y, warn=True)
    y = check_array(y, ensure_2d=False, dtype=dtype, input_name="y", estimator=est)
    check_consistent_length(np.empty((n_rows, 0)), y)
    return y


def weights_of(sample_weight: Any, n_rows: int) -> np.ndarray | None:
    """Sample weights as float64, or None; negative, non-finite or all-zero weights refused."""
    if sample_weight is None:
        return None
    if np.isscalar(sample_weight):
        return np.full(n_rows, float(sample_weight))
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.ndim != 1:
        raise ValueError("Sample weights must be 1D array or scalar")
    if w.shape != (n_rows,):
        raise ValueError(f"sample_weight.shape == {w.shape}, expected {(n_rows,)}!")
    if not np.isfinite(w).all():
        raise ValueError("Input sample_weight contains NaN or infinity.")
    if (w < 0).any():
        raise ValueError("Negative values in data passed to `sample_weight`")
    if not (w > 0).any():
        raise ValueError("Sample weights must contain at least one non-zero number.")
    return w


def nominal_columns(frame: pd.DataFrame, declared: Sequence[str] | None) -> list[str]:
    """Columns trained as nominal: those declared, and every column that is not numeric."""
    out = [str(c) for c in (declared or [])]
    unknown = [c for c in out if c not in frame.columns]
    if unknown:
        raise ValueError(f"nominal names columns that X does not have: {unknown}")
    for column, dtype in frame.dtypes.items():
        numeric = dtype.kind in "iuf" and not pd.api.types.is_bool_dtype(dtype)
        if not numeric and column not in out:
            out.append(str(column))
    return out


def unused_name(base: str, taken: Sequence[str]) -> str:
    """``base``, or ``base_1``, ``base_2``... : a column name no feature has (ignoring case)."""
    lowered = {t.lower() for t in taken}
    name, i = base, 0
    while name.lower() in lowered:
        i += 1
        name = f"{base}_{i}"
    return name
