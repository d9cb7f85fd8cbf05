"""Errors the dataset loaders raise (`atgrpo.data`). All derive from `AtgrpoError`.

A loader never lets a bare `KeyError`/`TypeError` escape: a file it cannot read at all is a
`DatasetFileError`; one record it cannot turn into a problem is a `DatasetRecordError` that names the
file and line (or record index, for JSON arrays and parquet) and says what is wrong with it.

A leaf module (only the extension's base class), so that `atgrpo.errors` loads no data loader.
"""

from __future__ import annotations

from atgrpo._core import AtgrpoError


class DatasetError(AtgrpoError):
    """Base class of every dataset loading error."""


class DatasetFileError(DatasetError):
    """The file as a whole cannot be read: missing, not gzip, not JSON, unknown suffix, no pyarrow."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class DatasetRecordError(DatasetError):
    """One record is malformed. `where` is `path:line` (JSONL) or `path[record i]` (JSON array, parquet)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


class UnknownFormatError(DatasetError):
    """A format name that no loader handles, or `format="auto"` could not tell which one a file is."""
