"""TOML in and out for run configs, with no dependency beyond the standard library.

`read_toml_file` reads a file (its table and its text); `apply_overrides` applies `section.key=value`
overrides to a table (values in TOML syntax, a bare word is a string). `to_toml` writes the value
types a config holds (str, int, float, bool, lists of those, nested tables); None values are left
out, which `load_config` reads back as their default.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def read_toml_file(path: str | Path | None = None) -> tuple[dict[str, Any], str]:
    """The raw table of a TOML file and its text, read once (empty for None)."""
    if path is None:
        return {}, ""
    text = Path(path).read_bytes().decode()  # UTF-8, strict: what tomllib.load itself decodes with
    return tomllib.loads(text), text


def apply_overrides(data: dict[str, Any], overrides: list[str] | None = None) -> dict[str, Any]:
    """`data` with the overrides applied in order (in place; returned for chaining)."""
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r} is not of the form section.key=value")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw  # a bare word is a string
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {item!r}: {part} is not a section")
        node[leaf] = value
    return data


def _key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else _string(name)


def _string(s: str) -> str:
    # JSON escapes are valid TOML basic-string escapes; DEL must be escaped in TOML but not in JSON.
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)  # shortest round-trip form; "1e-06" and "1e+16" are valid TOML floats
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items() if x is not None) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _table(lines: list[str], path: list[str], table: dict[str, Any]) -> None:
    scalars = {k: v for k, v in table.items() if v is not None and not isinstance(v, dict)}
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    if path and (scalars or not tables):
        lines.append("")
        lines.append("[" + ".".join(_key(p) for p in path) + "]")
    lines.extend(f"{_key(k)} = {_value(v)}" for k, v in scalars.items())
    for name, sub in tables.items():
        _table(lines, [*path, name], sub)


def to_toml(data: dict[str, Any], header: str = "") -> str:
    """`data` (str keys; str, int, float, bool, list and dict values; None left out) as a TOML document."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    _table(lines, [], data)
    return "\n".join(lines).lstrip("\n") + "\n"
