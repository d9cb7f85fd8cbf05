"""Benchmark rows, the printed table and the JSON file.

Every figure is reported beside a reference measured in the same run, as a ratio, because the
machines are shared and noisy: absolute numbers drift, ratios measured side by side much less.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable


@dataclass
class BenchRow:
    """One measured figure and its in-run reference.

    `higher_is_better` says how `ratio` is oriented: the ratio is always "how many times better than
    the reference" (value/reference for throughputs, reference/value for latencies).
    """

    suite: str
    name: str
    value: float
    unit: str
    reference_name: str
    reference_value: float
    higher_is_better: bool = True
    target: str = ""
    target_met: bool | None = None
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        if self.value <= 0 or self.reference_value <= 0:
            return float("nan")
        if self.higher_is_better:
            return self.value / self.reference_value
        return self.reference_value / self.value


def median_time(fn: Callable[[], object], repeats: int, inner: int = 1) -> float:
    """Median wall time in seconds of one call of `fn`, over `repeats` timings of `inner` calls."""
    fn()  # warm-up: first calls pay for allocation and caches
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def format_value(value: float) -> str:
    if value == 0 or not (value == value):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:.2f}M"
    if magnitude >= 1e3:
        return f"{value / 1e3:.1f}k"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def print_table(rows: list[BenchRow]) -> None:
    headers = ["suite", "benchmark", "value", "unit", "reference", "ref value", "ratio", "target"]
    table = [
        [
            r.suite,
            r.name,
            format_value(r.value),
            r.unit,
            r.reference_name,
            format_value(r.reference_value),
            f"{r.ratio:.1f}x",
            ("" if r.target_met is None else ("met " if r.target_met else "MISSED ")) + r.target,
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print("  ".join("-" * w for w in widths))
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


def write_json(rows: list[BenchRow], path: Path) -> None:
    payload = {
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "rows": [{**asdict(r), "ratio": r.ratio} for r in rows],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2))
