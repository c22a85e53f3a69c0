"""Errors raised by sqltree. Every user-facing failure is a subclass of SqlTreeError."""

from __future__ import annotations


class SqlTreeError(Exception):
    """Base class of every error sqltree raises on purpose."""


class DataError(SqlTreeError, ValueError):
    """The training or scoring data cannot be used as given (empty, one class, bad column)."""


class UnsupportedError(SqlTreeError, TypeError):
    """A column type, source kind, option or connection that sqltree does not support."""


class ModelFileError(SqlTreeError, ValueError):
    """A model file that cannot be read (wrong format or version)."""
