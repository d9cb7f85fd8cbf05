"""Stored results of a learning suite: one JSON file per published table (docs/results/*.json), and
the table text rebuilt from it alone (`atgrpo-bench learning report NAME`).

Invariants:
- A stored table holds, per arm and seed, what the table shows (start and final held-out success,
  steps, the late mean) and, where the runner wrote it, the curve, RL minutes, the machine's CPU
  model and core count, the commit, the resolved config's digest and the bench session (one call of
  `atgrpo-bench learning`). Fractions, not percents.
- `render` is a pure function of the stored table: the text in README and docs is its output,
  checked by tests/bench/learning/test_learning_tables.py, so a table cannot drift from its data.
- Provenance goes into the table itself: an arm whose runs came from another config, machine or
  round carries a note, printed as a numbered footnote beside its name. RL minutes, and the
  equal-wall-time view, are printed only when every run of the table ran on one machine in one
  session; else they compare machines or days and are left out.
- Statistics are `stats.py`'s (separation rule there).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from atgrpo.bench.learning.stats import LATE_EVALS, SEPARATION_Z, mean_sd, paired, pct, summarize, value_at
from atgrpo.bench.learning.stats import verdict as verdict_of

FORMAT = 1
"""Version of the stored file's layout; a file of another version is refused."""


@dataclass
class StoredRun:
    """One seed of one arm."""

    start: float
    final: float
    steps: int
    late: float | None
    """Mean held-out success over the last `LATE_EVALS` evaluations after the start one (None:
    not published per seed for a transcribed table)."""
    curve: list[tuple[int, float, float]] | None = None
    """(step, minutes of RL, success) of each evaluation; None where not kept."""
    rl_min: float | None = None
    wall_s: float | None = None
    cpu: str | None = None
    cores: int | None = None
    commit: str | None = None
    config_digest: str | None = None
    """sha256 of the run's resolved config.toml (the first 16 hex digits)."""
    prompts_digest: str | None = None
    session: str | None = None
    """Which `atgrpo-bench learning` call ran it (its start time and pid): one session, one sitting."""

    @property
    def gain(self) -> float:
        return self.final - self.start


@dataclass
class StoredArm:
    runs: dict[int, StoredRun]
    provenance: str | None = None
    """Where this arm's runs differ from the table's (another config, machine or round); None: they do not."""


@dataclass
class StoredTable:
    name: str
    suite: str
    reference: str
    command: str
    """The command that made (or would remake) the table's runs."""
    source: str
    """Where the numbers come from: a runner's call, or a transcription (with the commit)."""
    arms: dict[str, StoredArm]
    notes: list[str] = field(default_factory=list)
    format: int = FORMAT


def load(path: Path) -> StoredTable:
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: stored-results format {data.get('format')!r}, this atgrpo reads {FORMAT}")
    arms = {}
    for name, arm in data["arms"].items():
        runs = {}
        for seed, run in arm["runs"].items():
            curve = run.get("curve")
            runs[int(seed)] = StoredRun(**{**run, "curve": None if curve is None else [tuple(p) for p in curve]})
        arms[name] = StoredArm(runs, arm.get("provenance"))
    return StoredTable(**{**{k: v for k, v in data.items() if k != "arms"}, "arms": arms})


def dump(table: StoredTable, path: Path) -> None:
    data = asdict(table)
    data["arms"] = {
        name: {"provenance": arm.provenance, "runs": {str(s): asdict(r) for s, r in sorted(arm.runs.items())}}
        for name, arm in table.arms.items()
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def one_sitting(table: StoredTable) -> bool:
    """Every run has its RL minutes and ran in one session on one machine."""
    runs = [r for arm in table.arms.values() for r in arm.runs.values()]
    keys = {(r.session, r.cpu, r.cores) for r in runs}
    return bool(runs) and all(r.rl_min is not None and r.session for r in runs) and len(keys) == 1


def _equal_wall_time(table: StoredTable) -> tuple[str, float, dict[str, float]] | None:
    """(fastest training arm, its mean RL minutes T, each arm's mean success at T), from the curves."""
    arms = table.arms
    training = {a: arm for a, arm in arms.items() if any(r.steps > 0 for r in arm.runs.values())}
    if not training or any(r.curve is None for arm in arms.values() for r in arm.runs.values()):
        return None
    mean_min = {a: math.fsum(r.rl_min or 0.0 for r in arm.runs.values()) / len(arm.runs) for a, arm in training.items()}
    fastest = min(mean_min, key=mean_min.__getitem__)
    t = mean_min[fastest]
    at = {
        a: math.fsum(value_at(r.curve or [], t) for r in arm.runs.values()) / len(arm.runs) for a, arm in arms.items()
    }
    return fastest, t, at


def render(table: StoredTable, data_path: str) -> str:
    """The table, its footnotes and the paired differences against the reference, as Markdown."""
    timed = one_sitting(table)
    notes: list[str] = []
    head = "| arm | seeds | final | min | max | per seed | gain | min | max | per seed | steps |"
    head += " RL min |" if timed else ""
    head += f" late (last {LATE_EVALS} evals) | per seed |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for name, arm in table.arms.items():
        seeds = sorted(arm.runs)
        runs = [arm.runs[s] for s in seeds]
        label = name
        if arm.provenance:
            if arm.provenance not in notes:
                notes.append(arm.provenance)
            label += f" [{notes.index(arm.provenance) + 1}]"
        final, gain = summarize([r.final for r in runs]), summarize([r.gain for r in runs])
        lates = [r.late for r in runs]
        late_cells = "n/a | n/a"
        if all(v is not None for v in lates):
            late_cells = f"{mean_sd(summarize(lates))} | {', '.join(pct(v) for v in lates)}"  # type: ignore[arg-type]
        steps = summarize([float(r.steps) for r in runs])
        row = (
            f"| {label} | {len(runs)} | {mean_sd(final)} | {pct(final.min)} | {pct(final.max)} | "
            f"{', '.join(pct(r.final) for r in runs)} | {mean_sd(gain)} | {pct(gain.min)} | {pct(gain.max)} | "
            f"{', '.join(pct(r.gain) for r in runs)} | {steps.mean:.0f} |"
        )
        if timed:
            row += f" {summarize([r.rl_min or 0.0 for r in runs]).mean:.1f} |"
        lines.append(row + f" {late_cells} |")
    lines.append("")
    lines += [f"- [{i}] {note}" for i, note in enumerate(notes, 1)]
    data = f"- Data: `{data_path}`, {table.source}."
    if not timed:
        data += " RL minutes are not compared: the runs did not all run on one machine in one session."
    lines += [data, *(f"- {note}" for note in table.notes)]
    arms = table.arms
    if table.reference in arms and len(arms) > 1:
        ref = arms[table.reference].runs
        lines += [
            "",
            f"Paired differences, arm minus `{table.reference}` on the same seeds (points); arms separate when "
            f"|mean| > {SEPARATION_Z:g} sd/√n (n ≥ 2):",
            "",
            "| arm | seeds | final: mean ± sd | verdict | gain: mean ± sd | verdict | late: mean ± sd | verdict |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, arm in arms.items():
            if name == table.reference:
                continue
            cells = []
            for key in ("final", "gain", "late"):
                mine = {s: v for s, r in arm.runs.items() if (v := _value(r, key)) is not None}
                theirs = {s: v for s, r in ref.items() if (v := _value(r, key)) is not None}
                if key == "late" and (len(mine) < len(arm.runs) or len(theirs) < len(ref)):
                    cells.append("n/a | not kept per seed")
                    continue
                p = paired(mine, theirs)
                cells.append("n/a | no common seeds" if p is None else f"{pct(p.mean)} ± {pct(p.sd)} | {verdict_of(p)}")
            seeds = len(set(arm.runs) & set(ref))
            lines.append(f"| {name} | {seeds} | {' | '.join(cells)} |")
    wall = _equal_wall_time(table) if timed else None
    if wall is not None and len(arms) > 1:
        fastest, t, at = wall
        lines += [
            "",
            f"Equal wall time: success (%) each arm had reached at {t:.1f} min of RL, the mean of the fastest "
            f"training arm (`{fastest}`): " + ", ".join(f"{a} {pct(v)}" for a, v in at.items()),
        ]
    return "\n".join(lines) + "\n"


def render_summary(table: StoredTable, data_path: str) -> str:
    """The short form (README): final, gain and late as mean ± sd per arm, and the final's paired
    difference against the reference with its verdict; provenance footnotes as in `render`."""
    notes: list[str] = []
    ref = table.arms[table.reference].runs
    lines = [
        f"| arm | seeds | final | gain | late | final − `{table.reference}` | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, arm in table.arms.items():
        runs = list(arm.runs.values())
        label = name
        if arm.provenance:
            if arm.provenance not in notes:
                notes.append(arm.provenance)
            label += f" [{notes.index(arm.provenance) + 1}]"
        lates = [r.late for r in runs]
        late = mean_sd(summarize(lates)) if all(v is not None for v in lates) else "n/a"  # type: ignore[arg-type]
        diff = "" if name == table.reference else "n/a | no common seeds"
        if (
            name != table.reference
            and (p := paired({s: r.final for s, r in arm.runs.items()}, {s: r.final for s, r in ref.items()}))
            is not None
        ):
            diff = f"{pct(p.mean)} ± {pct(p.sd)} | {verdict_of(p)}"
        cells = f"{mean_sd(summarize([r.final for r in runs]))} | {mean_sd(summarize([r.gain for r in runs]))} | {late}"
        lines.append(f"| {label} | {len(runs)} | {cells} | {diff or '|'} |")
    lines.append("")
    lines += [f"- [{i}] {note}" for i, note in enumerate(notes, 1)]
    lines.append(f"- Data: `{data_path}`, {table.source}.")
    return "\n".join(lines) + "\n"


def _value(run: StoredRun, key: str) -> float | None:
    return {"final": run.final, "gain": run.gain, "late": run.late}[key]


def curves(table: StoredTable) -> dict[str, dict[int, list[tuple[int, float, float]]]]:
    """The kept curves, arm -> seed -> curve (empty where none was kept)."""
    return {a: {s: r.curve for s, r in arm.runs.items() if r.curve} for a, arm in table.arms.items()}


__all__ = [
    "FORMAT",
    "StoredArm",
    "StoredRun",
    "StoredTable",
    "curves",
    "dump",
    "load",
    "one_sitting",
    "render",
    "render_summary",
]
