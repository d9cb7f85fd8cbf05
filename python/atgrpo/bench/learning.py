"""`atgrpo-bench learning SUITE`: arms x seeds of `atgrpo-train` runs, a table over seeds, paired
differences against a reference arm, an equal-wall-time view and curves (docs/learning.md).

    atgrpo-bench learning ordering                    # SA+GRPO .. MAS+AT-GRPO, 3 seeds
    atgrpo-bench learning grouping --seeds 0,1        # two seeds only
    atgrpo-bench learning alpha --only alpha0,alpha1 --steps 100
    atgrpo-bench learning smollm2                     # SmolLM2: full fine-tuning vs LoRA per role, 2 seeds
    atgrpo-bench learning                             # the suite `staleness` (k=0 vs k=1, equal wall time)
    atgrpo-bench learning report ordering             # the published table, rebuilt from docs/results/ordering.json
    atgrpo-bench learning steps RUN_DIR ...           # where each run's step time went (its metrics.jsonl)
    atgrpo-bench learning warmstart CONFIG --lr 1e-3  # a LoRA recipe's adapter warm start over lr and steps

Invariants:
- Every run is `atgrpo-train` as a user runs it (a subprocess, a config file and `--set`
  overrides), in its own out_dir `<out>/<suite>/<arm>/seed<s>/`; one run at a time (2 cores).
  Arms that are the same run in several suites (the default, trajectory GRPO) share one out_dir,
  `<out>/shared/<key>-<digest of the command>/seed<s>/`, and are run once.
- A run whose `eval.json` exists is read back, never rerun (resume), if its resolved config is still
  the one its command makes (`check_same_run`); else the suite stops and says which keys differ.
  A run cut off before its end has no `eval.json` and is run again: `atgrpo-train` itself resumes
  it from its last checkpoint.
- The seed changes `run.seed` and, for the built tiny models, each policy's `tiny.seed` too.
- Step-budget suites give every arm the same `run.steps` and no time limit; wall time is reported
  beside. `staleness` is a time-budget suite (same minutes of RL, steps as many as fit).
- Runs compute with AVX2 kernels (`CPU_ISA_PIN`) unless the caller's environment picks an
  instruction set: the same seed then learns the same on AVX2-only and AVX-512 machines.
- Results: `<out>/<suite>/results.json` (the stored format of `learning_results.py`: per arm and
  seed the curve, final, gain, late, steps, RL minutes, CPU model and core count, commit, resolved
  config digest and bench session; copy it to docs/results/ to publish a table), `summary.json`,
  `table.md` (rebuilt from results.json alone by `atgrpo-bench learning report FILE`) and
  `curves.png`; the statistics are `learning_stats.py`'s (separation rule there).
- The prompt templates are part of a run: their digest (`prompts_digest`) is in a shared run's
  folder name and in each run's wall.json, and a finished run whose templates have changed since is
  not read back.
- A variant (`--steps` other than the suite's, or any `--set`) is another set of runs with its own
  folders and its own table, `<out>/<suite>-<digest>/`: it never reads back, nor overwrites, the
  suite's own runs or table.
"""

from __future__ import annotations

import argparse
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

from atgrpo.bench.learning_plot import Curve, plot_suite
from atgrpo.bench.learning_report import report
from atgrpo.config import load_config
from atgrpo.errors import LearningSuiteError
from atgrpo.metrics import read_metrics

ROOT = Path("bench-results") / "learning"
CONFIGS = Path(__file__).resolve().parents[3] / "envs" / "planpath"
"""The shipped configs (the arms' `config` files), found from the source tree as the prompts are."""
STORED = Path(__file__).resolve().parents[3] / "docs" / "results"
"""The published tables' data (`atgrpo-bench learning report`)."""


@dataclass(frozen=True)
class Arm:
    name: str
    sets: tuple[str, ...] = ()
    """`--set` overrides of this arm (beside the suite's and the run's own)."""
    config: str | None = None
    """A config file under `envs/planpath/`; None: the built-in defaults (the demo, `train.toml`)."""
    doc: str = ""
    shared: str | None = None
    """Runs of this arm are the same runs as every other arm with this key (same config, same
    overrides): they live in `<out>/shared/<key>-<digest>/seed<s>/` and are run once for all suites."""
    policies: tuple[str, ...] = ("shared",)
    """The arm's policies; in a suite with `model_seed`, each built model's `tiny.seed` is the run's seed."""


@dataclass(frozen=True)
class Suite:
    name: str
    arms: tuple[Arm, ...]
    reference: str
    """The arm the others are compared with, seed by seed."""
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int | None = 100
    """RL steps of every arm (no time limit); None: a time-budget suite or the config's own steps."""
    sets: tuple[str, ...] = ()
    """Overrides of every run of the suite."""
    model_seed: bool = True
    """The seed also changes each built policy's `tiny.seed` (False for a pretrained model)."""
    doc: str = ""


SA = ('task.roles=["plan"]',)
SUITES = {
    s.name: s
    for s in (
        Suite(
            "ordering",
            (
                Arm(
                    "sa_grpo",
                    (*SA, 'rollout.sampling="parallel"', 'rollout.grouping="trajectory"'),
                    doc="one role (plan), K parallel episodes, trajectory groups: single agent + GRPO",
                ),
                Arm("sa_atgrpo", SA, doc="one role (plan), tree sampling, (env, agent, turn) groups"),
                Arm("mas_prompt", ("run.steps=0",), doc="tool + plan, the warm-started model evaluated with no RL"),
                Arm(
                    "mas_trajectory",
                    (),
                    "train_trajectory.toml",
                    doc="tool + plan, parallel sampling, trajectory groups",
                    shared="trajectory",
                ),
                Arm(
                    "mas_atgrpo",
                    (),
                    doc="tool + plan, the default: tree sampling, (env, agent, turn) groups",
                    shared="default",
                ),
                Arm(
                    "mas_atgrpo_roles",
                    ('role_policy={tool="tool",plan="plan"}',),
                    policies=("tool", "plan"),
                    doc="tool + plan, one policy per role (each warm-started on its own role's demos), AT-GRPO",
                ),
            ),
            reference="mas_atgrpo",
            doc="the paper's ordering on the default demo",
        ),
        Suite(
            "grouping",
            (
                Arm(
                    "trajectory",
                    (),
                    "train_trajectory.toml",
                    doc="one group per env, K parallel episodes",
                    shared="trajectory",
                ),
                Arm(
                    "agent",
                    ('rollout.grouping="agent"',),
                    doc="key (env, agent): all turns of one agent, tree sampling",
                ),
                Arm("turn", ('rollout.grouping="turn"',), doc="key (env, turn): all agents of one turn, tree sampling"),
                Arm("agent_turn", (), doc="key (env, agent, turn): AT-GRPO, the default", shared="default"),
            ),
            reference="agent_turn",
            doc="the paper's grouping ablation on the default demo",
        ),
        Suite(
            "alpha",
            tuple(
                Arm(
                    f"alpha{a:g}".replace(".", "_"),
                    () if a == 1.0 else (f"task.env.alpha={a}",),
                    doc=f"reward = {a:g} * team + local",
                    shared="default" if a == 1.0 else None,
                )
                for a in (0.0, 0.5, 1.0)
            ),
            reference="alpha1",
            doc="the mix of team and local reward (task.env.alpha) on the default demo",
        ),
        Suite(
            "smollm2",
            (
                Arm("smollm2", (), "train_smollm2.toml", doc="SmolLM2-135M, 4x4 Plan-Path, its own time limit"),
                Arm(
                    "smollm2_lora",
                    (),
                    "train_smollm2_lora.toml",
                    policies=("tool", "plan"),
                    doc="the same task and time limit, one LoRA adapter per role on one frozen SmolLM2 base (docs/lora.md)",
                ),
            ),
            reference="smollm2",
            seeds=(0, 1),
            steps=None,
            model_seed=False,
            doc="the real-model recipe: full fine-tuning against a LoRA adapter per role",
        ),
        Suite(
            "staleness",
            (
                Arm("k0", ("train.max_staleness=0",), doc="strict on-policy streaming"),
                Arm("k1", ("train.max_staleness=1",), doc="pipelined, samples up to one version old"),
            ),
            reference="k0",
            seeds=(0,),
            steps=None,
            doc="k=1 against k=0 at equal wall time (10 minutes of RL each)",
            # A time budget has no step horizon for the default's lr decay: the constant lr its table was made with.
            sets=(
                "run.steps=100000",
                "run.time_limit_s=600",
                "run.checkpoint_every=0",
                "policies.shared.lr=1e-4",
                'policies.shared.lr_schedule="constant"',
            ),
        ),
    )
}


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


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def prompts_digest() -> str:
    """Digest of every prompt template file of the suites' task (path and bytes): a run's prompts
    are part of what makes it, as its config is."""
    root = CONFIGS / "prompts"
    h = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes() + b"\0")
    return h.hexdigest()[:10]


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


def variant_overrides(suite: Suite, steps: int | None, extra: list[str] | None) -> list[str]:
    """What makes a call a variant of the suite, as said under its table: `--steps N` where N is not
    the suite's own budget, and each `--set`. Empty: the suite's own runs."""
    budget = steps if steps is not None else suite.steps
    return ([f"--steps {budget}"] if budget != suite.steps else []) + [f"--set {e}" for e in extra or []]


def variant(suite: Suite, steps: int | None, extra: list[str] | None) -> str:
    """The folder suffix of a run or table: empty for the suite's own settings, else "-<digest>" of
    the step budget and overrides, so a run or a table made with another `--steps` or any `--set`
    never lands where (or is read back as) one of the suite's own."""
    if not variant_overrides(suite, steps, extra):
        return ""
    return "-" + _digest([f"steps={steps if steps is not None else suite.steps}", *(extra or [])])


def run_dir(
    out: Path, suite: Suite, arm: Arm, seed: int, steps: int | None = None, extra: list[str] | None = None
) -> Path:
    """Where one run writes: its own folder (with the variant's digest under `--steps`/`--set`),
    or for a shared arm the folder of its key and of a digest of its whole command (config file and
    overrides but the out_dir), so only identical runs are shared, whatever `--steps` or `--set` said."""
    if arm.shared is None:
        return out / suite.name / f"{arm.name}{variant(suite, steps, extra)}" / f"seed{seed}"
    what = [arm.config or "", *run_sets(suite, arm, -1, Path("OUT"), steps, list(extra or []))]  # any seed: one folder
    what.append(f"prompts={prompts_digest()}")
    return out / "shared" / f"{arm.shared}-{_digest(what)}" / f"seed{seed}"


def report_dir(out: Path, suite: Suite, steps: int | None = None, extra: list[str] | None = None) -> Path:
    """Where a suite's table, summary.json and curves go: `<out>/<suite>/`, or `<out>/<suite>-<digest>/`
    for a variant, so a trial with other settings never overwrites the suite's own table."""
    return out / f"{suite.name}{variant(suite, steps, extra)}"


def run_sets(suite: Suite, arm: Arm, seed: int, out_dir: Path, steps: int | None, extra: list[str]) -> list[str]:
    """The `--set` overrides of one run, in order (a later one of the same key wins)."""
    sets = [f"run.out_dir={json.dumps(str(out_dir))}", f"run.seed={seed}", "metrics.tensorboard=false"]
    if suite.model_seed:
        sets += [f"policies.{p}.tiny.seed={seed}" for p in arm.policies]
    sets += suite.sets
    if suite.name == "staleness" and len(os.sched_getaffinity(0)) >= 2:
        sets += ["launch.learner_cpus=[0]", "launch.actor_cpus=[1]"]  # as on separate accelerators
    steps = steps if steps is not None else suite.steps
    if steps is not None:
        sets += [f"run.steps={steps}"] + (["run.time_limit_s=0"] if suite.name != "smollm2" else [])
    return [*sets, *arm.sets, *extra]  # the arm's own last but the caller's: run.steps=0 of mas_prompt wins


def command(suite: Suite, arm: Arm, seed: int, out_dir: Path, steps: int | None, extra: list[str]) -> list[str]:
    """The `atgrpo-train` command line of one run (printed, and run as is)."""
    exe = shutil.which("atgrpo-train")
    cmd = [exe] if exe else [sys.executable, "-m", "atgrpo.cli.train"]
    if arm.config is not None:
        cmd.append(str(CONFIGS / arm.config))
    for s in run_sets(suite, arm, seed, out_dir, steps, extra):
        cmd += ["--set", s]
    return cmd


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


def check_same_run(folder: Path, suite: Suite, arm: Arm, seed: int, steps: int | None, extra: list[str]) -> None:
    """Refuse to read back a finished run that its command would no longer make: its folder is named
    by the command, not by the config the command resolves to, so a default changed since (or an
    arm's config file edited) would otherwise table an old run as today's. Same run = the changes a
    resume accepts (`config_changes`), less the folder's own path."""
    from atgrpo.learner.checkpoints import config_changes  # torch: only when a run is read back

    made = folder / "config.toml"
    if not made.is_file():
        raise LearningSuiteError(f"{folder} has eval.json but no config.toml: which config made it is unknown")
    config = str(CONFIGS / arm.config) if arm.config is not None else None
    today = load_config(config, run_sets(suite, arm, seed, folder.resolve(), steps, extra))
    try:
        then = load_config(made)
    except ValueError as exc:  # not TOML, not UTF-8, or not a valid config
        raise LearningSuiteError(
            f"{made} cannot be read as a run config ({exc}); move {folder} away to run it again"
        ) from exc
    changed = [k for k in config_changes(then, today) if k != "run.out_dir"]
    wall = folder / "wall.json"
    made_with = json.loads(wall.read_text()).get("prompts_digest") if wall.is_file() else None
    if made_with is not None and made_with != prompts_digest():
        changed.append(f"the prompt templates ({CONFIGS / 'prompts'})")
    if changed:
        raise LearningSuiteError(
            f"{folder} holds a run made with another config than `{arm.name}` makes today ({', '.join(changed)} "
            f"differ from {made}): atgrpo's defaults or the arm changed since; move the folder away to run it again"
        )


def run_one(cmd: list[str], out_dir: Path, timeout_s: float, session: str = "") -> None:
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
        "prompts_digest": prompts_digest(),
        **machine(),
    }
    (out_dir / "wall.json").write_text(json.dumps(wall))


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
    results: dict[str, dict[int, RunResult]] = {}
    missing: list[str] = []
    session = f"{time.strftime('%Y-%m-%dT%H:%M:%S')}-{os.getpid()}"  # this call: runs it makes share one sitting
    for arm in arms:
        for seed in seeds if seeds is not None else suite.seeds:
            folder = run_dir(out, suite, arm, seed, steps, extra)
            if not (folder / "eval.json").exists() and not run_missing:
                missing.append(f"{arm.name} seed {seed}")
                continue
            if not (folder / "eval.json").exists():
                cmd = command(suite, arm, seed, folder.resolve(), steps, list(extra or []))
                print(f"[{suite.name}] {arm.name} seed {seed}: running", flush=True)
                run_one(cmd, folder, timeout_s, session)
            else:
                check_same_run(folder, suite, arm, seed, steps, list(extra or []))
                print(f"[{suite.name}] {arm.name} seed {seed}: done before, read back", flush=True)
            results.setdefault(arm.name, {})[seed] = read_run(folder)
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


def report_main(argv: list[str]) -> int:
    """`atgrpo-bench learning report [NAME|FILE ...]`: each stored table rebuilt from its data alone
    (printed; with `--out`, written as `<name>.md` and, where curves were kept, `<name>_curves.png`)."""
    from atgrpo.bench.learning_results import curves, load, render

    parser = argparse.ArgumentParser(prog="atgrpo-bench learning report", description=report_main.__doc__)
    parser.add_argument("names", nargs="*", help=f"stored tables (names under {STORED}, or .json files; default: all)")
    parser.add_argument("--out", type=Path, default=None, help="also write each table (and its curves) here")
    args = parser.parse_args(argv)
    files = [Path(n) if n.endswith(".json") else STORED / f"{n}.json" for n in args.names] or sorted(
        STORED.glob("*.json")
    )
    for file in files:
        if not file.is_file():
            known = ", ".join(p.stem for p in sorted(STORED.glob("*.json")))
            print(f"atgrpo-bench learning report: no stored table {file} (stored: {known})", file=sys.stderr)
            return 1
        table = load(file)
        shown = f"docs/results/{file.name}" if file.parent.resolve() == STORED.resolve() else str(file)
        text = render(table, shown)
        print(f"<!-- {table.name}: {table.command} -->\n{text}")
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{table.name}.md").write_text(text)
            kept = curves(table)
            if any(kept.values()):
                plot_suite(kept, args.out / f"{table.name}_curves.png", table.name)
            else:
                print(f"{table.name}: no curves kept, no plot")
    return 0


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        return report_main(argv[1:])
    if argv[:1] == ["steps"]:
        from atgrpo.bench.learning_steps import main as steps_main

        return steps_main(argv[1:])
    if argv[:1] == ["warmstart"]:
        from atgrpo.bench.learning_warmstart import main as warmstart_main

        return warmstart_main(argv[1:])
    parser = argparse.ArgumentParser(prog="atgrpo-bench learning", description=__doc__.split("\n")[0])
    parser.add_argument(
        "suite", nargs="?", default="staleness", choices=list(SUITES), help="which suite (default staleness)"
    )
    parser.add_argument("--seeds", type=_ints, default=None, help="comma-separated seeds (default: the suite's)")
    parser.add_argument("--steps", type=int, default=None, help="RL steps of every arm (default: the suite's)")
    parser.add_argument(
        "--only", type=lambda t: tuple(x for x in t.split(",") if x), default=(), help="comma-separated arms"
    )
    parser.add_argument("--out", type=Path, default=ROOT, help=f"results root (default {ROOT})")
    parser.add_argument(
        "--set", dest="sets", action="append", default=[], help="an override for every run (repeatable)"
    )
    parser.add_argument("--print-commands", action="store_true", help="print each run's command and exit")
    parser.add_argument("--no-run", action="store_true", help="table the finished runs only; start none")
    args = parser.parse_args(argv)
    suite = SUITES[args.suite]
    if args.print_commands:
        import shlex

        for arm in suite.arms:
            if args.only and arm.name not in args.only:
                continue
            for seed in args.seeds or suite.seeds:
                folder = run_dir(args.out, suite, arm, seed, args.steps, args.sets)
                print(shlex.join(command(suite, arm, seed, folder, args.steps, args.sets)))
        return 0
    try:
        summary = run_suite(
            suite,
            out=args.out,
            seeds=args.seeds,
            steps=args.steps,
            only=args.only,
            extra=args.sets,
            run_missing=not args.no_run,
        )
    except LearningSuiteError as exc:
        print(f"atgrpo-bench learning: {exc}", file=sys.stderr)
        return 1
    print(summary["table"])
    print(
        f"\nwrote {report_dir(args.out, suite, args.steps, args.sets)}/results.json, summary.json, table.md, curves.png"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
