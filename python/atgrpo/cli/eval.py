"""`atgrpo-eval`: run local model folders on a task's evaluation set; report accuracy and pass@k.

    atgrpo-eval --task code --model /models/qwen3-1.7b --prompts paper                 # greedy, shipped set
    atgrpo-eval --task math --dataset gsm8k/test.jsonl --format gsm8k --limit 200 --model M --roles reasoner
    atgrpo-eval --task code --model M --role-model tester=/models/tester --samples 8 --k 1,4,8 --out r.json
    atgrpo-eval --task math --dataset gsm8k/test.jsonl --limit 20 --model M --team reasoner=3,tool=1,judge=1 \
        --transcripts team.jsonl
    atgrpo-eval envs/sudoku/task.toml --model M --seeds 100                              # games: eval seeds

The workflow is the training one (`make_workflow`), with the roles of the config or `--roles`
(one role: the single-agent baseline), or a team of several agents per role with `--team` (math:
`reasoner=N,tool=M,judge=1`; see docs/code-and-math.md "Teams"). Greedy decoding (default) rolls out one episode per problem;
`--samples n` rolls out n independent episodes (parallel sampling) at `--temperature` and reports
pass@k for each `--k` (unbiased estimator, k <= n). Accuracy is the mean success over all episodes
(pass@1). Problems: code/math use the eval dataset (`--dataset`, default the task pack's set), games
use held-out seeds 0..seeds-1 of the "eval" split. Rollouts use the torch engine, or vLLM with
`--engine vllm`.
Results are printed as a table and, with `--out`, written as JSON; `--transcripts PATH` writes what
every agent said on each problem as JSONL (`atgrpo.cli.transcripts`). For games the table also counts
the failed episodes that came back to a state they had stood on, or stayed on it (`revisited`):
under greedy decoding a team that does so is usually caught in a loop. In program mode
(`task.tool_mode = "program"`) the table and JSON (`tool`) put beside the accuracy what the tool
agent's programs did alone: the shares of its answers whose program ran, solved the level by itself,
printed nothing parseable, timed out, crashed or did not compile. Exit status 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from atgrpo.cli.transcripts import Recorder, revisited, write_jsonl
from atgrpo.config import GAME_TASKS, RunConfig, load_config
from atgrpo.errors.data import DatasetFileError
from atgrpo.errors.runtime import EvalError, ModelImportError


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise EvalError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="atgrpo-eval", description=__doc__.split("\n\n")[0])
    p.add_argument("config", nargs="?", default=None, help="run or task config TOML (default: built-in defaults)")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="config override; repeatable"
    )
    p.add_argument("--task", choices=["planpath", "sokoban", "sudoku", "code", "math"])
    p.add_argument("--roles", help="comma-separated roles in turn order (one role: single-agent baseline)")
    p.add_argument("--team", help="agents per role, e.g. reasoner=3,tool=1,judge=1 (math; replaces --roles)")
    p.add_argument(
        "--model", help="HF-format folder for every role without --role-model (@smollm2: the cached SmolLM2)"
    )
    p.add_argument(
        "--role-model",
        action="append",
        default=[],
        metavar="ROLE=PATH",
        help="a folder for one role or one agent of a team (reasoner_2); repeatable",
    )
    p.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="[ROLE=]PATH",
        help="a peft LoRA adapter (a checkpoint's <policy>/adapter) merged into the role's model, or every role's without ROLE; repeatable",
    )
    p.add_argument("--dataset", help="code/math problem file (default: the task pack's problems.jsonl)")
    p.add_argument("--format", default=None, help="dataset format (default: auto)")
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N problems")
    p.add_argument("--seeds", type=int, default=None, help="games: number of eval seeds (default: run.eval_seeds)")
    p.add_argument("--samples", type=int, default=1, help="episodes per problem; >1 samples at --temperature")
    p.add_argument("--k", default=None, help="comma-separated k values for pass@k (default: 1 and n)")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--turns", type=int, default=None)
    p.add_argument("--prompts", choices=["compact", "compact_turn", "paper"], default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--engine", choices=["torch", "vllm"], default="torch", help="rollout engine (default torch)")
    p.add_argument(
        "--dtype",
        default=None,
        choices=["float32", "bfloat16", "float16"],
        help="engine dtype (default: the config's rollout.dtype, else its train.dtype)",
    )
    p.add_argument("--batch", type=int, default=16, help="problems per workflow call")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument(
        "--transcripts", metavar="PATH", help="write every problem's transcript (all agents' turns, verdict) as JSONL"
    )
    return p


def eval_config(args: argparse.Namespace) -> tuple[RunConfig, dict[str, str]]:
    """The run config to evaluate with, and role -> model folder."""
    try:
        base = load_config(args.config, args.overrides)
    except (ValueError, OSError) as exc:
        raise EvalError(f"config error: {exc}") from exc
    data: dict[str, Any] = base.model_dump()
    task = data["task"]
    if args.task and args.task != task["task"]:
        task["task"] = args.task
        task["roles"] = None  # the new task's default roles
        task["team"] = None
        task["env"] = None  # and its default env parameters
    if args.roles and args.team:
        raise EvalError("--roles and --team both name the agents: give one")
    if args.roles:
        task["roles"] = [r.strip() for r in args.roles.split(",") if r.strip()]
        task["team"] = None
    if args.team:
        task["roles"], task["team"] = None, parse_team(args.team)
    for key, val in (
        ("dataset", args.dataset),
        ("eval_dataset", args.dataset),
        ("dataset_format", args.format),
        ("turns", args.turns),
        ("prompts", args.prompts),
    ):
        if val is not None:
            task[key] = val
    if args.samples < 1:
        raise EvalError("--samples must be >= 1")
    ro = data["rollout"]
    ro.update(k=args.samples, sampling="parallel", grouping="agent_turn", device=args.device, engine=args.engine)
    if args.top_p is not None and not 0.0 < args.top_p <= 1.0:
        raise EvalError("--top-p must be in (0, 1]")
    for key, val in (("temperature", args.temperature), ("max_new_tokens", args.max_new_tokens)):
        if val is not None:
            ro[key] = val
    try:
        task_cfg = RunConfig.model_validate({"task": task}).task
    except ValueError as exc:
        raise EvalError(f"config error: {exc}") from exc
    roles = task_cfg.roles or []
    names_ok = list(dict.fromkeys([*roles, *(a.name for a in task_cfg.agents())]))
    folders: dict[str, str] = {}
    for item in args.role_model:
        role, sep, path = item.partition("=")
        if not sep or role not in names_ok or not path:
            raise EvalError(f"--role-model {item!r}: expected ROLE=PATH with ROLE one of {names_ok}")
        folders[role] = path
    for role in roles:
        if role not in folders:
            default = (
                args.model or base.policies[base.role_policy[role]].path if role in base.role_policy else args.model
            )
            if not default:
                raise EvalError(f"no model for role {role!r}: pass --model or --role-model {role}=PATH")
            folders[role] = default
    folders = {role: model_folder(path) for role, path in folders.items()}
    for role, path in folders.items():
        if not Path(path, "config.json").is_file():
            raise EvalError(f"model folder for {role!r} not found or not HF format (no config.json): {path}")
    folders = with_adapters(folders, args.adapter, names_ok)
    paths = sorted(set(folders.values()))
    names = {path: f"m{i}" for i, path in enumerate(paths)}
    data["policies"] = {names[p]: {"path": p} for p in paths}
    data["role_policy"] = {r: names[path] for r, path in folders.items()}
    try:
        return RunConfig.model_validate(data), folders
    except ValueError as exc:
        raise EvalError(f"config error: {exc}") from exc


def model_folder(path: str) -> str:
    """A `--model` or config path as a folder: `~` expanded, `@smollm2` built into the cache if needed."""
    if not path.startswith("@"):
        return str(Path(path).expanduser())
    # atgrpo.models imports torch and transformers: only an alias, which may have to be built, pays for them.
    from atgrpo.models.importer import resolve_model_path

    return str(resolve_model_path(path))


def with_adapters(folders: dict[str, str], specs: list[str], names_ok: list[str]) -> dict[str, str]:
    """`folders` with each `--adapter [ROLE=]PATH` merged into its role's model (every role's without
    ROLE), in a temporary folder per (model, adapter) (`models.adapters.merge_into_folder`)."""
    import tempfile

    merged: dict[tuple[str, str], str] = {}
    out = dict(folders)
    for spec in specs:
        role, sep, path = spec.partition("=")
        if sep and role not in names_ok:
            raise EvalError(f"--adapter {spec!r}: expected [ROLE=]PATH with ROLE one of {names_ok}")
        path = path if sep else spec
        if not Path(path, "adapter_config.json").is_file():
            raise EvalError(f"--adapter {spec!r}: no peft adapter there (adapter_config.json)")
        for r in [role] if sep else list(out):
            key = (folders[r], str(Path(path).resolve()))
            if key not in merged:
                # Imported here, after every check above: it imports torch.
                from atgrpo.models.adapters import merge_into_folder

                merged[key] = str(merge_into_folder(key[0], key[1], tempfile.mkdtemp(prefix="atgrpo-merged-")))
            out[r] = merged[key]
    return out


def parse_team(spec: str) -> dict[str, int]:
    """`reasoner=3,tool=1,judge=1` -> {"reasoner": 3, "tool": 1, "judge": 1}."""
    team: dict[str, int] = {}
    for item in (x.strip() for x in spec.split(",")):
        role, sep, count = item.partition("=")
        if not sep or not role.strip() or not count.strip().isdigit() or role.strip() in team:
            raise EvalError(
                f"--team {spec!r}: expected ROLE=COUNT,... with each role once (e.g. reasoner=3,tool=1,judge=1)"
            )
        team[role.strip()] = int(count)
    return team


def ks_of(spec: str | None, n: int) -> list[int]:
    if spec is None:
        return sorted({1, n})
    try:
        ks = sorted({int(x) for x in spec.split(",") if x.strip()})
    except ValueError as exc:
        raise EvalError(f"--k {spec!r}: expected comma-separated integers") from exc
    if not ks or ks[0] < 1 or ks[-1] > n:
        raise EvalError(f"--k {spec!r}: every k must be in 1..{n} (the number of samples)")
    return ks


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    cfg, folders = eval_config(args)
    n = args.samples
    ks = ks_of(args.k, n)
    dataset = cfg.task.eval_dataset or cfg.task.dataset  # what `problems("eval")` reads
    if cfg.task.task not in GAME_TASKS and dataset and not Path(dataset).is_file():
        raise DatasetFileError(dataset, "no such file")
    # After the checks above, so that a bad argument or a missing file is reported before the
    # seconds these take to import (torch, transformers, the engines).
    from dataclasses import replace

    from atgrpo.engines.factory import open_engine, rollout_dtype, training_sampling
    from atgrpo.units import cut_units, roll_out_units
    from atgrpo.workflows.base import PolicyHandle
    from atgrpo.workflows.factory import make_workflow

    greedy = n == 1 and args.temperature is None
    wf = make_workflow(cfg)
    # Games are always recorded: the summary counts the failures that came back to a state.
    recorder = Recorder() if args.transcripts or cfg.task.task in GAME_TASKS else None
    wf.on_step = recorder  # type: ignore[attr-defined]
    probs = None
    try:
        if cfg.task.task in GAME_TASKS:
            count = args.seeds if args.seeds is not None else cfg.run.eval_seeds
            ids = [f"seed-{i}" for i in range(count)]
        else:
            probs = wf.problems("eval")  # type: ignore[union-attr]
            count = len(probs) if args.limit is None else min(args.limit, len(probs))
            ids = [p.id for p in probs[:count]]
        if count < 1:
            raise EvalError("nothing to evaluate (0 problems)")
        handles = {}
        for name, pc in cfg.policies.items():
            engine, tok = open_engine(
                pc.path or "",
                cfg.rollout,
                policy=name,
                dtype=args.dtype or rollout_dtype(cfg),
                version=0,
                engines_per_process=len(cfg.policies),
            )
            handles[name] = PolicyHandle(engine=engine, tokenizer=tok)
        sampling = replace(training_sampling(cfg.rollout), top_p=1.0 if args.top_p is None else args.top_p)
        # Problems are envs of one evaluation step, cut into units of --batch as the hub cuts a step.
        units = cut_units(
            0, 0, list(range(count)), max(1, args.batch), split="eval", versions={p: 0 for p in handles}, greedy=greedy
        )
        t0 = time.perf_counter()
        rollout = roll_out_units(wf, handles, units, sampling, run_id="eval", run_seed=args.seed)
        envs = rollout.envs
        wall = time.perf_counter() - t0
        correct = [0] * count
        for env in envs:
            correct[env.env] += int(env.success)
        records = recorder.records(probs, ids, envs) if recorder is not None else []
        if args.transcripts:
            write_jsonl(args.transcripts, records)
    finally:
        close = getattr(wf, "close", None)
        if close is not None:
            close()
    pass_at = {str(k): sum(pass_at_k(n, c, k) for c in correct) / count for k in ks}
    return {
        "task": cfg.task.task,
        "roles": list(cfg.task.roles or []),
        "agents": [a.name for a in cfg.task.agents()],
        "models": folders,
        "dataset": cfg.task.eval_dataset or cfg.task.dataset if cfg.task.task not in GAME_TASKS else None,
        "problems": count,
        "samples_per_problem": n,
        "decoding": "greedy" if greedy else "sampled",
        "temperature": None if greedy else cfg.rollout.temperature,
        "accuracy": sum(correct) / (count * n),
        "solved": sum(correct),
        "pass_at_k": pass_at,
        "wall_s": wall,
        "per_problem": [{"id": i, "correct": c, "samples": n} for i, c in zip(ids, correct)],
        "failed_revisiting": (
            sum(1 for r in records if not r["correct"] and revisited(r)) if cfg.task.task in GAME_TASKS else None
        ),
        # Program mode only (absent otherwise): what the tool's programs did alone, beside accuracy.
        **({"tool": rollout.tool_programs.metrics()} if rollout.tool_programs.answers else {}),
    }


def tool_rows(tool: dict[str, float] | None) -> list[tuple[str, str]]:
    """Program mode's rows, under the team's accuracy: the tool agent's programs alone (the shares of
    `ToolPrograms.metrics`, over every tool answer of every turn)."""
    if not tool:
        return []
    share = {k: f"{100 * v:.1f}%" for k, v in tool.items()}
    return [
        ("tool alone", f"{share['alone_success']} of {int(tool['programs'])} tool answers solve the level"),
        (
            "tool programs",
            f"ran {share['program_ran']}, unparseable {share['unparseable']}, timed out {share['timed_out']}, "
            f"crashed {share['crashed']}, no compile {share['no_compile']}",
        ),
    ]


def format_table(res: dict[str, Any]) -> str:
    rows = [
        ("task", res["task"]),
        ("roles", ", ".join(res["roles"])),
        ("agents", str(len(res["agents"]))),
        ("models", ", ".join(f"{r}={p}" for r, p in res["models"].items())),
        ("problems", str(res["problems"])),
        ("decoding", f"{res['decoding']}, {res['samples_per_problem']} per problem"),
        ("accuracy", f"{100 * res['accuracy']:.1f}%"),
        *tool_rows(res.get("tool")),
        *((f"pass@{k}", f"{100 * v:.1f}%") for k, v in res["pass_at_k"].items()),
        ("time", f"{res['wall_s']:.1f}s"),
    ]
    if res.get("failed_revisiting") is not None:
        failed = res["problems"] * res["samples_per_problem"] - res["solved"]
        came_back = f"{res['failed_revisiting']} of {failed} failed episodes came back to a state they had stood on"
        rows.insert(-1, ("revisits", came_back))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from atgrpo.cli.common import setup_logging

    setup_logging("eval")
    try:
        res = evaluate(args)
    except (EvalError, FileNotFoundError, ModelImportError) as exc:
        print(f"atgrpo-eval: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a dataset or data error (typed errors of atgrpo.data) reported, not a traceback
        from atgrpo.errors import AtgrpoError

        if isinstance(exc, AtgrpoError):
            print(f"atgrpo-eval: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
        raise
    print(format_table(res))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
