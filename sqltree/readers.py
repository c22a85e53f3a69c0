"""Files that sqltree reads itself, into a pandas DataFrame that the engine then loads: Weka's
ARFF. The engines read Parquet, CSV and JSON on their own (``Engine.relation_for_path``).

``FILE_READERS`` maps a file name's ending to its reader; ``reader_for`` finds the reader of a
path, and ``dataset.resolve_relation`` hands the frame to ``Engine.relation_for_dataframe``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .errors import DataError, UnsupportedError, install_hint

__all__ = ["FILE_READERS", "read_arff", "reader_for"]


def read_arff(path: str | os.PathLike[str]) -> Any:
    """A dense ARFF file as a pandas DataFrame, with ``liac-arff``.

    Nominal attributes become pandas Categoricals whose categories are the declared values in
    declaration order (on DuckDB an ``ENUM`` of them: the declaration is kept with the data),
    numeric and real attributes floats, integer attributes integers, string
    attributes text; ``?`` is a missing value (NULL). Names are as declared, quotes removed
    (``'my attr'`` is the column ``my attr``). Training reads a nominal feature's values from
    the rows, as for any other source, so the tree is the one a CSV of the same rows gives.
    """
    try:
        import arff
    except ImportError:
        raise UnsupportedError(
            f"reading {os.fspath(path)!r} needs liac-arff: {install_hint('arff')}"
        ) from None
    import pandas as pd

    try:
        with open(path, encoding="utf-8") as fh:
            document = arff.load(_header_comments_cut(fh))
    except UnicodeDecodeError as e:
        raise DataError(f"{os.fspath(path)!r} is not UTF-8 text: {e}") from None
    except arff.ArffException as e:
        raise DataError(f"{os.fspath(path)!r} is not an ARFF file sqltree can read: {e}") from None
    names = [name for name, _ in document["attributes"]]
    frame = pd.DataFrame.from_records(document["data"], columns=names)
    for name, kind in document["attributes"]:
        frame[name] = _typed(frame[name], kind, pd)
    return frame


def _header_comments_cut(lines: Any) -> Any:
    """The lines with each header line's trailing ``% comment`` cut off (outside quotes), as
    Weka reads them (``@attribute total {low, high} % low < 100``); liac-arff takes only
    whole-line comments. The data section passes as it is."""
    in_data = False
    for line in lines:
        if not in_data:
            line = _cut_comment(line)
            in_data = line.strip().lower().startswith("@data")
        yield line


def _cut_comment(line: str) -> str:
    quote = None
    escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif quote is not None:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "%" and i > 0:
            return line[:i].rstrip() + "\n"
    return line


def _typed(column: Any, kind: Any, pd: Any) -> Any:
    if isinstance(kind, list):
        return pd.Categorical(column, categories=[str(v) for v in kind])
    kind = str(kind).upper()
    if kind == "INTEGER":
        # liac-arff gives floats; an integer attribute holds whole numbers or '?'
        return pd.array(column, dtype="Float64").astype("Int64")
    if kind in ("NUMERIC", "REAL"):
        return pd.array(column, dtype="Float64")
    return column.astype(object).where(column.notna(), None)


FILE_READERS: dict[str, Callable[[str], Any]] = {".arff": read_arff}
"""File endings sqltree reads itself (lower case) -> reader returning a pandas DataFrame."""


def reader_for(path: str) -> Callable[[str], Any] | None:
    """The reader of ``path`` by its ending, or None where the engine reads the file."""
    lower = path.lower()
    for ending, reader in FILE_READERS.items():
        if lower.endswith(ending):
            return reader
    return None
