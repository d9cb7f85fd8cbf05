"""Errors the dataset loaders raise. All derive from `atgrpo.errors.AtgrpoError`.

A loader never lets a bare `KeyError`/`TypeError` escape: a file it cannot read at all is a
`DatasetFileError`; one record it cannot turn into a problem is a `DatasetRecordError` that names the
file and line (or record index, for JSON arrays and parquet) and says what is wrong with it.

The classes are defined in the leaf module `atgrpo.errors.data` (so that `atgrpo.errors` loads no
loader) and re-exported here.
"""

from __future__ import annotations

from atgrpo.errors.data import DatasetError, DatasetFileError, DatasetRecordError, UnknownFormatError

__all__ = ["DatasetError", "DatasetFileError", "DatasetRecordError", "UnknownFormatError"]
