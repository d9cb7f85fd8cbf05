"""A run's identity in a learning suite: its folder, its `atgrpo-train` command, and whether a
finished run found there is still the run that command makes.

Invariants:
- Every run has its own out_dir `<out>/<suite>/<arm>/seed<s>/`. Arms that are the same run in
  several suites (a `shared` key, e.g. the default) share one out_dir,
  `<out>/shared/<key>-<digest of the command>/seed<s>/`, and are run once: only identical commands
  (config file and overrides, the out_dir left out) land in one folder.
- A variant (`--steps` other than the suite's, or any `--set`) is another set of runs with its own
  folders and its own table, `<out>/<suite>-<digest>/`: it never reads back, nor overwrites, the
  suite's own runs or table.
- The prompt templates are part of a run: their digest (`prompts_digest`) is in a shared run's
  folder name and in each run's wall.json, and a finished run whose templates have changed since is
  not read back (`check_same_run`).
- A finished run is read back only if its resolved config is still the one its command makes
  (`check_same_run`): a folder is named by the command, not by what the command resolves to.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from atgrpo.bench.learning.suites import CONFIGS, RL_ONLY, Arm, Suite
from atgrpo.cli.common import BUILT_IN
from atgrpo.config import RunConfig, load_config
from atgrpo.errors import LearningSuiteError


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def prompts_digest(task_pack: Path = CONFIGS) -> str:
    """Digest of every prompt template file of a suite's task pack (path and bytes): a run's prompts
    are part of what makes it, as its config is."""
    root = task_pack / "prompts"
    h = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes() + b"\0")
    return h.hexdigest()[:10]


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
    what.append(f"prompts={prompts_digest(suite.configs)}")
    return out / "shared" / f"{arm.shared}-{_digest(what)}" / f"seed{seed}"


def report_dir(out: Path, suite: Suite, steps: int | None = None, extra: list[str] | None = None) -> Path:
    """Where a suite's table, summary.json and curves go: `<out>/<suite>/`, or `<out>/<suite>-<digest>/`
    for a variant, so a trial with other settings never overwrites the suite's own table."""
    return out / f"{suite.name}{variant(suite, steps, extra)}"


def run_sets(suite: Suite, arm: Arm, seed: int, out_dir: Path, steps: int | None, extra: list[str]) -> list[str]:
    """The `--set` overrides of one run, in order (a later one of the same key wins)."""
    sets = [*arm.base_sets, f"run.out_dir={json.dumps(str(out_dir))}", f"run.seed={seed}", "metrics.tensorboard=false"]
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
    config = suite.config_file(arm)
    cmd.append(str(config if config is not None else BUILT_IN))  # no file would be the program demo
    for s in run_sets(suite, arm, seed, out_dir, steps, extra):
        cmd += ["--set", s]
    return cmd


def _changes_from_command(
    then: RunConfig, folder: Path, suite: Suite, arm: Arm, seed: int, steps: int | None, extra: list[str]
) -> list[str]:
    """The keys (`config_changes`: those a resume may not change) in which `then`, the config a run
    in `folder` was made with, differs from what `arm`'s command for `seed` makes today there, less
    the folder's own path."""
    from atgrpo.learner.checkpoints import config_changes  # torch: only when a run is read back

    today = load_config(suite.config_file(arm), run_sets(suite, arm, seed, folder.resolve(), steps, extra))
    return [k for k in config_changes(then, today) if k != "run.out_dir"]


def check_same_run(folder: Path, suite: Suite, arm: Arm, seed: int, steps: int | None, extra: list[str]) -> None:
    """Refuse to read back a finished run that its command would no longer make: its folder is named
    by the command, not by the config the command resolves to, so a default changed since (or an
    arm's config file edited) would otherwise table an old run as today's. Same run = the changes a
    resume accepts (`config_changes`), less the folder's own path."""
    made = folder / "config.toml"
    if not made.is_file():
        raise LearningSuiteError(f"{folder} has eval.json but no config.toml: which config made it is unknown")
    try:
        then = load_config(made)
    except ValueError as exc:  # not TOML, not UTF-8, or not a valid config
        raise LearningSuiteError(
            f"{made} cannot be read as a run config ({exc}); move {folder} away to run it again"
        ) from exc
    changed = _changes_from_command(then, folder, suite, arm, seed, steps, extra)
    wall = folder / "wall.json"
    made_with = json.loads(wall.read_text()).get("prompts_digest") if wall.is_file() else None
    if made_with is not None and made_with != prompts_digest(suite.configs):
        changed.append(f"the prompt templates ({suite.configs / 'prompts'})")
    if changed:
        raise LearningSuiteError(
            f"{folder} holds a run made with another config than `{arm.name}` makes today ({', '.join(changed)} "
            f"differ from {made}): atgrpo's defaults or the arm changed since; move the folder away to run it again"
        )


def check_start_of(source: Path, suite: Suite, arm: Arm, seed: int, steps: int | None, extra: list[str]) -> None:
    """Refuse to measure `arm` (a `start_of` arm) on the finished run in `source` unless that run's
    config is the one `arm`'s own command would make but for `RL_ONLY` keys: then its warm start
    and start evaluation are the ones `arm`'s run would have made. `source` has passed
    `check_same_run` (or was just made), so its config.toml reads."""
    then = load_config(source / "config.toml")
    changed = [k for k in _changes_from_command(then, source, suite, arm, seed, steps, extra) if k not in RL_ONLY]
    if changed:
        raise LearningSuiteError(
            f"`{arm.name}` is measured on `{arm.start_of}`'s run in {source}, but their configs differ in "
            f"{', '.join(changed)}, not only in {', '.join(RL_ONLY)}: its start evaluation is not `{arm.name}`'s run"
        )
