"""Running a learning suite: every arm x seed run (or read back), one at a time, then the report.

Invariants:
- Every run is `atgrpo-train` as a user runs it (a subprocess, a config file and `--set`
  overrides, `runs.command`), in the folder `runs.run_dir` names; one run at a time (2 cores).
- A run whose `eval.json` exists is read back, never rerun (resume), if its resolved config is still
  the one its command makes (`runs.check_same_run`); else the suite stops and says which keys differ.
  A run cut off before its end has no `eval.json` and is run again: `atgrpo-train` itself resumes
  it from its last checkpoint.
- An arm with `start_of` is not run: it is the start evaluation of its source arm's run of the same
  seed (made first if missing), once `runs.check_start_of` finds the two configs differ in RL
  settings alone; it has no folder, nor transcripts, of its own.
- Runs compute with AVX2 kernels (`CPU_ISA_PIN`) unless the caller's environment picks an
  instruction set: the same seed then learns the same on AVX2-only and AVX-512 machines.
- Each run leaves `wall.json` beside its own files: its wall time, the kernels' instruction set, the
  bench session, the prompts' digest, and the machine (CPU model, cores, commit).
- In a suite with `transcripts = n`, each run also keeps `transcripts.jsonl`: what every agent said on
  the first n held-out levels, written by `atgrpo-eval --transcripts` (the one transcript writer) on
  the run's final checkpoint with the run's own config, greedy, as its evaluations decode. A finished
  run without the file gets it when the suite is next run (not under `--no-run`, which starts nothing).
- Results: `<out>/<suite>/results.json` (the stored format of `results.py`: per arm and seed the
  curve, final, gain, late, steps, RL minutes, CPU model and core count, commit, resolved config
  digest and bench session; copy it to docs/results/ to publish a table), `summary.json`,
  `table.md` (rebuilt from results.json alone by `atgrpo-bench learning report FILE`) and
  `curves.png`; the statistics are `stats.py`'s (separation rule there).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from atgrpo.bench.learning.plot import Curve, plot_suite
from atgrpo.bench.learning.report import report
from atgrpo.bench.learning.runs import (
    check_same_run,
    check_start_of,
    command,
    prompts_digest,
    report_dir,
    run_dir,
    variant_overrides,
)
from atgrpo.bench.learning.suites import CONFIGS, Arm, Suite
from atgrpo.config import load_config
from atgrpo.errors import LearningSuiteError
from atgrpo.metrics import read_metrics

ROOT = Path("bench-results") / "learning"
"""Where the suites' runs and tables go unless `--out` says otherwise."""


@dataclass
class RunResult:
    """What one finished run left: its eval.json, its held-out curve and its wall time."""

    start: float
    end: float
    steps: int
    wall_s: float
    """Whole `atgrpo-train` process, warm start and evaluations included (of its last session only,
    if the bench was interrupted and the run resumed from a checkpoint)."""
    curve: Curve = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    """Where and how it ran (wall.json): cpu, cores, commit, session, config_digest, prompts_digest."""

    @property
    def gain(self) -> float:
        return self.end - self.start


def machine() -> dict:
    """The CPU model, the cores this process may use, and the source tree's commit (None outside git)."""
    cpu = None
    try:
        cpu = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            None,
        )
    except OSError:
        pass
    try:
        commit = (
            subprocess.run(
                ["git", "-C", str(CONFIGS), "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "commit": commit}


def held_out_curve(rows: list[dict]) -> Curve:
    """(step, minutes of RL, success) of each held-out evaluation, from a run's metrics rows.

    A resumed run's file holds the rows of every session, and a session cut off after its last
    checkpoint left rows for steps that the next session did again; only the last row of each step
    counts. Minutes are the sums of the steps' and the later evaluations' own durations
    (`time/step_s`, `time/eval_s`), not differences of timestamps, so the hours a run lay stopped
    between sessions are not counted as RL time (for an uninterrupted run the two agree within
    the checkpoints' seconds). A row without its duration is a KeyError."""
    last: dict[tuple[int, bool], dict] = {}
    for r in rows:
        last[(int(r["step"]), "eval/success" in r)] = r  # a later session's row replaces an earlier one's
    curve: Curve = []
    minutes = 0.0
    for (step, is_eval), r in sorted(last.items()):  # a step's training row before its evaluation
        if is_eval:
            minutes += (r["time/eval_s"] if curve else 0.0) / 60.0  # the start evaluation is t = 0
            curve.append((step, minutes, float(r["eval/success"])))
        elif curve:
            minutes += r["time/step_s"] / 60.0
    return curve


def read_run(out_dir: Path) -> RunResult:
    """A finished run's results, from its eval.json, metrics.jsonl and the bench's wall.json."""
    summary = json.loads((out_dir / "eval.json").read_text())
    if summary.get("eval_start") is None or summary.get("eval_end") is None:
        raise LearningSuiteError(f"{out_dir / 'eval.json'} has no start or end evaluation (run.eval_seeds = 0?)")
    rows = read_metrics(out_dir / "metrics.jsonl")
    try:
        curve = held_out_curve(rows)
    except KeyError as exc:  # every step and evaluation row of atgrpo-train has its duration
        raise LearningSuiteError(f"{out_dir / 'metrics.jsonl'}: a row has no {exc.args[0]!r}") from exc
    wall = out_dir / "wall.json"
    meta = json.loads(wall.read_text()) if wall.exists() else {}
    wall_s = meta["wall_s"] if "wall_s" in meta else (rows[-1]["time"] - rows[0]["time"] if rows else 0.0)
    keep = ("cpu", "cores", "commit", "session", "prompts_digest")
    meta = {k: meta.get(k) for k in keep}
    config = out_dir / "config.toml"
    meta["config_digest"] = hashlib.sha256(config.read_bytes()).hexdigest()[:16] if config.is_file() else None
    return RunResult(
        float(summary["eval_start"]), float(summary["eval_end"]), int(summary["steps"]), float(wall_s), curve, meta
    )


def start_of(run: RunResult, source: str) -> RunResult:
    """A prompt-only arm's result measured on `run` (`Arm.start_of`): its start evaluation as start
    and end, no RL step. Its wall is `run`'s less its RL minutes (the warm start, the start
    evaluation and the process around them), close to what the prompt-only run itself takes."""
    first = run.curve[:1]
    rl_s = run.curve[-1][1] * 60.0 if run.curve else 0.0
    meta = {**run.meta, "start_of": source}
    return RunResult(run.start, run.start, 0, max(run.wall_s - rl_s, 0.0), list(first), meta)


CPU_ISA_PIN = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
"""Every run computes with AVX2 kernels (torch's own, MKL's, oneDNN's) unless the caller's environment
sets these itself. The kernels' reduction order follows the instruction set, and RL amplifies a
last-bit difference: seed 0's warm start evaluated 16.5% with the AVX-512 kernels of one machine and
18.0% with AVX2 ones, on that machine and on an AVX2-only one, and the runs part from there
(docs/learning.md). Pinned, a suite's runs compare across the machines CI and users have."""


def run_env(base: Mapping[str, str]) -> dict[str, str]:
    """The environment of one run: the caller's, less OMP_NUM_THREADS (the run sets its own threads),
    with the CPU instruction set pinned where the caller has not chosen one."""
    env = {k: v for k, v in base.items() if k != "OMP_NUM_THREADS"}
    for key, value in CPU_ISA_PIN.items():
        env.setdefault(key, value)
    return env


def run_one(cmd: list[str], out_dir: Path, timeout_s: float, session: str = "", task_pack: Path = CONFIGS) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    env = run_env(os.environ)
    t0 = time.monotonic()
    with open(out_dir / "bench.log", "ab") as log:
        done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout_s, check=False)
    if done.returncode != 0 or not (out_dir / "eval.json").exists():
        raise LearningSuiteError(f"run in {out_dir} failed (exit {done.returncode}); see {out_dir / 'bench.log'}")
    isa = {k: env[k] for k in CPU_ISA_PIN}
    wall = {
        "wall_s": time.monotonic() - t0,
        "cpu_isa": isa,
        "session": session,
        "prompts_digest": prompts_digest(task_pack),
        **machine(),
    }
    (out_dir / "wall.json").write_text(json.dumps(wall))


TRANSCRIPTS = "transcripts.jsonl"
"""A run's transcripts of held-out episodes (`atgrpo.cli.transcripts`' records), beside its eval.json."""


def transcripts_args(out_dir: Path, episodes: int) -> list[str]:
    """`atgrpo-eval`'s arguments that write `out_dir`'s transcripts: the run's own config.toml, each role's
    policy as the run's final checkpoint holds it, the first `episodes` held-out levels."""
    cfg = load_config(out_dir / "config.toml")
    latest = out_dir / "checkpoints" / "latest"  # every run checkpoints its last step, step 0 included
    args = [str(out_dir / "config.toml"), "--seeds", str(episodes), "--transcripts", str(out_dir / TRANSCRIPTS)]
    for role, policy in cfg.role_policy.items():
        args += ["--role-model", f"{role}={latest / policy / 'model'}"]
    return args


def keep_transcripts(out_dir: Path, episodes: int, timeout_s: float) -> None:
    """Write `out_dir/transcripts.jsonl` (`transcripts_args`), its output appended to the run's bench.log."""
    exe = shutil.which("atgrpo-eval")
    cmd = [exe] if exe else [sys.executable, "-m", "atgrpo.cli.eval"]
    cmd += transcripts_args(out_dir, episodes)
    with open(out_dir / "bench.log", "ab") as log:
        try:
            done = subprocess.run(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=run_env(os.environ), timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:  # run() has killed it
            raise LearningSuiteError(
                f"transcripts of {out_dir}: atgrpo-eval did not finish in {timeout_s:.0f} s; see {out_dir / 'bench.log'}"
            ) from None
    if done.returncode != 0 or not (out_dir / TRANSCRIPTS).is_file():
        raise LearningSuiteError(
            f"transcripts of {out_dir} failed (exit {done.returncode}); see {out_dir / 'bench.log'}"
        )


def run_suite(
    suite: Suite,
    *,
    out: Path = ROOT,
    seeds: tuple[int, ...] | None = None,
    steps: int | None = None,
    only: tuple[str, ...] = (),
    extra: list[str] | None = None,
    timeout_s: float = 4 * 3600,
    run_missing: bool = True,
) -> dict:
    """Run (or read back) every arm x seed of `suite`, one at a time, then write and return the report.
    `run_missing=False` (`--no-run`): table the finished runs only, start none; the report lists
    the runs it lacks under `missing`."""
    unknown = set(only) - {a.name for a in suite.arms}
    if unknown:
        raise LearningSuiteError(
            f"--only: no arm {sorted(unknown)} in suite {suite.name!r}; its arms: {[a.name for a in suite.arms]}"
        )
    arms = [a for a in suite.arms if not only or a.name in only]
    by_name = {a.name: a for a in suite.arms}
    results: dict[str, dict[int, RunResult]] = {}
    missing: list[str] = []
    session = f"{time.strftime('%Y-%m-%dT%H:%M:%S')}-{os.getpid()}"  # this call: runs it makes share one sitting

    def finished(arm: Arm, seed: int) -> Path | None:
        """The folder of `arm`'s finished run of `seed`: run now if missing (None under --no-run),
        else checked to be the run its command makes; with its transcripts."""
        folder = run_dir(out, suite, arm, seed, steps, extra)
        if not (folder / "eval.json").exists() and not run_missing:
            return None
        if not (folder / "eval.json").exists():
            cmd = command(suite, arm, seed, folder.resolve(), steps, list(extra or []))
            print(f"[{suite.name}] {arm.name} seed {seed}: running", flush=True)
            run_one(cmd, folder, timeout_s, session, suite.configs)
        else:
            check_same_run(folder, suite, arm, seed, steps, list(extra or []))
            print(f"[{suite.name}] {arm.name} seed {seed}: done before, read back", flush=True)
        if suite.transcripts and run_missing and not (folder / TRANSCRIPTS).is_file():
            print(
                f"[{suite.name}] {arm.name} seed {seed}: transcripts of {suite.transcripts} held-out episodes",
                flush=True,
            )
            keep_transcripts(folder, suite.transcripts, timeout_s)
        return folder

    for arm in arms:
        for seed in seeds if seeds is not None else suite.seeds:
            source = by_name[arm.start_of] if arm.start_of is not None else arm
            folder = finished(source, seed)
            if folder is None:
                missing.append(f"{arm.name} seed {seed}")
                continue
            if arm.start_of is None:
                results.setdefault(arm.name, {})[seed] = read_run(folder)
                continue
            check_start_of(folder, suite, arm, seed, steps, list(extra or []))
            print(f"[{suite.name}] {arm.name} seed {seed}: the start evaluation of {source.name}'s run", flush=True)
            results.setdefault(arm.name, {})[seed] = start_of(read_run(folder), source.name)
    if not results:
        raise LearningSuiteError(
            f"suite {suite.name!r}: no finished run to table under {out} (missing: {', '.join(missing)})"
        )
    where = report_dir(out, suite, steps, extra)
    variant_sets = variant_overrides(suite, steps, extra)
    summary = report(
        suite.name,
        suite.reference,
        results,
        where,
        missing,
        overrides=variant_sets,
        command=" ".join(["atgrpo-bench learning", suite.name, *variant_sets]),
    )
    plot_suite(
        {a: {s: r.curve for s, r in runs.items()} for a, runs in results.items()}, where / "curves.png", suite.name
    )
    return summary
