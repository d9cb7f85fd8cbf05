"""`atgrpo-bench learning warmstart CONFIG`: a LoRA recipe's adapter warm start, swept over lr and step count.

A warm start that leaves the adapters far behind the full model's gives RL little to work with
(docs/lora.md), and a run costs half an hour, so the warm start is tuned on its own: for each
`--lr`, one warm start of every policy's adapter (`warmstart.prepare.train_adapters`, the run's own
code) up to the largest `--at`, the adapters kept after each count in `--at` (the adapters shorter
warm starts end with: the demos and the lr do not depend on the step count), then the team
evaluated greedily on the held-out levels with each count's adapters (`atgrpo-eval`'s `evaluate`).
Printed as a table; `--json` also writes it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from atgrpo.cli.eval import EvalError, build_parser, evaluate
from atgrpo.config import load_config
from atgrpo.config.lora import lora_bases, warm_starts_adapter
from atgrpo.devices import resolve_device
from atgrpo.models.adapters import write_adapter
from atgrpo.models.peft_models import AdapterWeights
from atgrpo.paths import policy_dir
from atgrpo.warmstart.prepare import prepare_models, train_adapters

LOSS_WINDOW = 10
"""The loss column: the mean over this many steps before the count (one batch a step is noisy)."""


def sweep(
    config: Path, lrs: list[float], at: list[int], seed: int, levels: int, out: Path, sets: list[str]
) -> list[dict]:
    """One row per (lr, step count): held-out greedy success of the team with those adapters, the
    mean warm-start loss of each policy's last steps before the count, and the warm start's wall."""
    rows = []
    for lr in dict.fromkeys(lrs):  # an lr given twice is swept once
        # One out_dir for every lr: a built tiny base is made once.
        cfg = load_config(
            config,
            [
                *sets,
                f"run.seed={seed}",
                f"warmstart.lr={lr}",
                f"warmstart.steps={max(at)}",
                f"run.out_dir={out / 'run'}",
            ],
        )
        not_lora = sorted(p for p in cfg.policies if not warm_starts_adapter(cfg, p))
        if not_lora:
            raise ValueError(
                f"{config}: policies {not_lora} do not warm-start a LoRA adapter (the sweep trains adapters only: "
                "every policy needs a `lora` section, a game task and, on a path base, warmstart.pretrained = true)"
            )
        prepare_models(cfg.model_copy(update={"warmstart": cfg.warmstart.model_copy(update={"steps": 0})}))
        kept = out / f"lr{lr:g}"

        def keep(p: str, n: int, adapter: AdapterWeights, kept: Path = kept, cfg=cfg) -> None:
            lora = cfg.policies[p].lora
            assert lora is not None  # checked above
            write_adapter(kept / f"step{n}" / p, lora, adapter.state_dict(), policy_dir(cfg, p))

        t0 = time.perf_counter()
        losses: dict[str, list[float]] = {}
        for group in lora_bases(cfg):
            losses |= train_adapters(cfg, group, group, resolve_device(cfg.train.device), keep, at=at)
        wall = time.perf_counter() - t0
        for n in sorted(set(at)):  # a count given twice is evaluated once
            argv = [str(config), "--seeds", str(levels), *(a for s in sets for a in ("--set", s))]
            for role, p in cfg.agent_policy().items():
                argv += ["--role-model", f"{role}={policy_dir(cfg, p)}", "--adapter", f"{role}={kept / f'step{n}' / p}"]
            res = evaluate(build_parser().parse_args(argv))
            rows.append(
                {
                    "lr": lr,
                    "steps": n,
                    "success": res["accuracy"],
                    "levels": res["problems"],
                    "loss": {p: window_mean(ls, n) for p, ls in sorted(losses.items())},
                    # Pro-rated: every warm-start step costs alike (one batch of the same size).
                    "warmstart_s": wall * n / max(at),
                }
            )
    return rows


def window_mean(losses: list[float], n: int) -> float:
    """Mean loss of the `LOSS_WINDOW` steps before count `n` (NaN before any step)."""
    window = losses[max(0, n - LOSS_WINDOW) : n]
    return statistics.fmean(window) if window else float("nan")


def count_list(text: str, kind: type) -> list:
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated {kind.__name__} values") from exc
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected one or more values >= 0")
    return values


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="atgrpo-bench learning warmstart", description=__doc__.split("\n")[0])
    parser.add_argument("config", type=Path, help="a run config whose policies are all LoRA (a game task)")
    parser.add_argument("--lr", type=lambda t: count_list(t, float), default=[1e-3], help="warm-start lrs (1e-3,3e-3)")
    parser.add_argument("--at", type=lambda t: count_list(t, int), default=[30, 60], help="step counts evaluated")
    parser.add_argument("--seed", type=int, default=0, help="run.seed: the demos and the adapters' initial draw")
    parser.add_argument("--levels", type=int, default=None, help="held-out levels (default: run.eval_seeds)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--out", type=Path, default=Path("bench-results/learning/warmstart"), help="adapters' folder")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    if max(args.at) < 1:  # else the config check below would blame the policies for a zero-step warm start
        parser.error("--at: the largest count must be at least 1 (count 0 is the untrained adapter)")
    try:
        levels = args.levels if args.levels is not None else load_config(args.config, args.sets).run.eval_seeds
        rows = sweep(args.config, args.lr, args.at, args.seed, levels, args.out, args.sets)
    except (OSError, ValueError, EvalError) as exc:
        print(f"atgrpo-bench learning warmstart: {exc}", file=sys.stderr)
        return 1
    print(
        "| warm-start lr | steps | held-out success | " + " | ".join(f"{p} loss" for p in rows[0]["loss"]) + " | wall |"
    )
    print("| --- | --- | --- |" + " --- |" * len(rows[0]["loss"]) + " --- |")
    for r in rows:
        loss = " | ".join(f"{v:.3f}" for v in r["loss"].values())
        print(
            f"| {r['lr']:g} | {r['steps']} | {100 * r['success']:.0f}% of {r['levels']} | {loss} | {r['warmstart_s']:.0f} s |"
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"config": str(args.config), "seed": args.seed, "rows": rows}, indent=1) + "\n")
    return 0
