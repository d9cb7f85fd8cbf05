"""Rows out of a dataset file, each with the place it came from; and the loop every loader shares.

Files: `.jsonl` / `.jsonl.gz` (one JSON object per line, blank lines ignored), `.json` / `.json.gz` (a JSON
array of objects, or JSONL under a .json name), `.parquet` (needs pyarrow, imported only then).
A row that cannot be decoded is yielded with its problem instead of data, so one bad line costs one record,
not the file; only an unreadable file raises here. Rows stream: a JSONL file is never held in memory whole.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

from atgrpo.data.errors import DatasetFileError, DatasetRecordError
from atgrpo.data.records import P, ProblemSet, SkippedRecord

OnError = Literal["raise", "skip"]

_json = msgspec.json.Decoder()


class RecordProblem(Exception):
    """Raised by converters for a malformed record; the loop turns it into a located error or a skip."""


@dataclass(frozen=True)
class Row:
    where: str
    """`path:line` for JSONL, `path[record i]` for JSON arrays and parquet (i counts from 0)."""
    index: int
    """Ordinal of the row in the file, counting from 0 (bad rows included)."""
    data: dict[str, Any] | None
    problem: str | None = None


def _open_bytes(path: Path):
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def _kind(path: Path) -> str:
    name = path.name.lower()
    for suffix, kind in (
        (".jsonl.gz", "jsonl"),
        (".jsonl", "jsonl"),
        (".json.gz", "json"),
        (".json", "json"),
        (".parquet", "parquet"),
        (".ndjson", "jsonl"),
    ):
        if name.endswith(suffix):
            return kind
    raise DatasetFileError(str(path), "unknown file type (expected .jsonl, .jsonl.gz, .json, .json.gz or .parquet)")


def _as_row(where: str, index: int, value: Any) -> Row:
    if not isinstance(value, dict):
        return Row(where, index, None, f"expected a JSON object, got {type(value).__name__}")
    return Row(where, index, value)


def _jsonl_rows(path: Path, fh) -> Iterator[Row]:
    index = 0
    for lineno, raw in enumerate(fh, start=1):
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            value = _json.decode(raw)
        except msgspec.DecodeError as e:
            yield Row(where, index, None, f"invalid JSON ({e})")
        else:
            yield _as_row(where, index, value)
        index += 1


def _json_rows(path: Path) -> Iterator[Row]:
    with _open_bytes(path) as fh:
        head = fh.read(4096)
        first = head.lstrip()[:1]
        if first != b"[":
            # JSONL stored under a .json name (common for dataset dumps)
            rest = fh.read()
            yield from _jsonl_rows(path, (head + rest).splitlines())
            return
        data = head + fh.read()
    try:
        value = _json.decode(data)
    except msgspec.DecodeError as e:
        raise DatasetFileError(str(path), f"not a valid JSON array ({e})") from None
    if not isinstance(value, list):
        raise DatasetFileError(str(path), "top-level JSON must be an array of records")
    for i, item in enumerate(value):
        yield _as_row(f"{path}[record {i}]", i, item)


def _parquet_rows(path: Path) -> Iterator[Row]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetFileError(
            str(path), "reading parquet needs pyarrow (pip install 'atgrpo[parquet]'), or convert it to JSONL"
        ) from None
    try:
        pf = pq.ParquetFile(path)
        i = 0
        for batch in pf.iter_batches(batch_size=256):
            for item in batch.to_pylist():
                yield _as_row(f"{path}[record {i}]", i, item)
                i += 1
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid derives from ValueError
        raise DatasetFileError(str(path), f"not a readable parquet file ({e})") from None


def iter_rows(path: str | Path) -> Iterator[Row]:
    """Every row of the file, in order. Raises `DatasetFileError` only for a file that cannot be read."""
    path = Path(path)
    kind = _kind(path)
    if not path.is_file():
        raise DatasetFileError(str(path), "no such file")
    try:
        if kind == "jsonl":
            with _open_bytes(path) as fh:
                yield from _jsonl_rows(path, fh)
        elif kind == "json":
            yield from _json_rows(path)
        else:
            yield from _parquet_rows(path)
    except (gzip.BadGzipFile, zlib.error, EOFError) as e:
        raise DatasetFileError(str(path), f"corrupt gzip data ({e})") from None


def first_row(path: str | Path) -> dict[str, Any]:
    """The first decodable row (for format detection)."""
    for row in iter_rows(path):
        if row.data is not None:
            return row.data
    raise DatasetFileError(str(path), "no readable record in the file")


def load_rows(
    path: str | Path,
    fmt: str,
    convert: Callable[[dict[str, Any], int], P],
    *,
    on_error: OnError = "raise",
    limit: int | None = None,
) -> ProblemSet[P]:
    """Convert every row with `convert(record, row_index)`; ids must be unique. A bad record raises `DatasetRecordError`
    naming its place, or with `on_error="skip"` is counted in `ProblemSet.skipped` and left out."""
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
    problems: list[P] = []
    skipped: list[SkippedRecord] = []
    seen: dict[str, str] = {}
    for row in iter_rows(path):
        if limit is not None and len(problems) >= limit:
            break
        try:
            if row.data is None:
                raise RecordProblem(row.problem)
            problem = convert(row.data, row.index)
            if problem.id in seen:
                raise RecordProblem(f"duplicate id {problem.id!r} (first at {seen[problem.id]})")
        except RecordProblem as e:
            reason = str(e)
        except msgspec.ValidationError as e:
            reason = f"invalid record: {e}"
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            # A converter should say what is wrong itself; this is the safety net, never a bare KeyError.
            reason = f"malformed record ({type(e).__name__}: {e})"
        else:
            seen[problem.id] = row.where
            problems.append(problem)
            continue
        if on_error == "raise":
            raise DatasetRecordError(row.where, reason)
        skipped.append(SkippedRecord(row.where, reason))
    return ProblemSet(Path(path), fmt, tuple(problems), tuple(skipped))


# Field access helpers for converters: each names the field it complains about.


def need(rec: dict[str, Any], *names: str) -> Any:
    """Value of the first of `names` present and not null; `RecordProblem` if none is."""
    for n in names:
        if rec.get(n) is not None:
            return rec[n]
    if len(names) == 1:
        raise RecordProblem(f"missing field {names[0]!r}")
    raise RecordProblem(f"missing field: none of {', '.join(repr(n) for n in names)}")


def need_str(rec: dict[str, Any], *names: str, allow_empty: bool = False) -> str:
    v = need(rec, *names)
    name = next(n for n in names if rec.get(n) is not None)
    if not isinstance(v, str):
        raise RecordProblem(f"field {name!r} must be a string, got {type(v).__name__}")
    if not allow_empty and not v.strip():
        raise RecordProblem(f"field {name!r} is empty")
    return v


def opt_str(rec: dict[str, Any], *names: str) -> str:
    for n in names:
        v = rec.get(n)
        if v is None:
            continue
        if not isinstance(v, str):
            raise RecordProblem(f"field {n!r} must be a string, got {type(v).__name__}")
        return v
    return ""


def need_id(rec: dict[str, Any], *names: str) -> str:
    v = need(rec, *names)
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise RecordProblem(f"id field must be a string or integer, got {type(v).__name__}")
    s = str(v).strip()
    if not s:
        raise RecordProblem("id is empty")
    return s


def str_list(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise RecordProblem(f"field {name!r} must be a list of strings")
    return value


def json_field(rec: dict[str, Any], name: str) -> Any:
    """A field stored as a JSON string (HF exports do that) or already decoded."""
    v = need(rec, name)
    if isinstance(v, str):
        if not v.strip():
            raise RecordProblem(f"field {name!r} is empty")
        try:
            return _json.decode(v)
        except msgspec.DecodeError as e:
            raise RecordProblem(f"field {name!r} is not valid JSON ({e})") from None
    return v


def scalar_meta(rec: dict[str, Any], *names: str) -> dict[str, Any]:
    """The named fields that are present, kept if scalar; lists of scalars become comma-joined text."""
    out: dict[str, Any] = {}
    for n in names:
        v = rec.get(n)
        if v is None:
            continue
        if isinstance(v, list) and all(isinstance(x, (str, int, float)) for x in v):
            v = ", ".join(str(x) for x in v)
        if isinstance(v, (str, int, float, bool)):
            out[n] = v
    return out
