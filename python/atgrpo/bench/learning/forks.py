"""`atgrpo-bench learning forks RUN_DIR`: how a program-mode run's tool model weighs each strategy.

For held-out levels (seeds 0..N-1 of the eval split, the first turn's prompt), the probability the
tool agent's model gives the exact program each strategy of the warm start's family writes for that
level (`warmstart.program_demos`), at temperature 1 and at the run's rollout temperature, and the
share of levels whose greedy decoding is that program token for token. Medians over the levels.

It says which branch greedy evaluation follows and how often RL's samples take the correct one, so a
warm-start mix (`warmstart.program_mix`) and an RL recipe can be judged without a run: the
warm-started model (`models/<policy>`) and every checkpoint the run kept, in step order. Printed as
a table, written as JSON with `--json`. docs/learning.md reads Sudoku's trials 10 and 11 with it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from atgrpo.config import RunConfig, load_config

TOOL = "tool"


def models_of(run: Path, cfg: RunConfig) -> list[tuple[str, Path]]:
    """(label, model folder) of the tool's policy: the warm-started one, then each complete
    checkpoint's in step order (a half-written one is not read)."""
    from atgrpo.learner.checkpoints import latest_checkpoint
    from atgrpo.learner.retention import list_entries

    policy = cfg.agent_policy()[TOOL]
    root = run / "checkpoints"
    latest = latest_checkpoint(root)
    entries = sorted(
        (e for e in list_entries(root, latest.name if latest else None) if e.complete), key=lambda e: e.step
    )
    found = [("warm start", run / "models" / policy)]
    found += [(f"step {e.step}", root / e.name / policy / "model") for e in entries]
    return [(label, folder) for label, folder in found if (folder / "config.json").is_file()]


def strategy_odds(cfg: RunConfig, model_dir: Path, levels: int) -> dict[str, dict[str, float]]:
    """Strategy -> {p_t1, p_rollout, greedy_exact, tokens}: medians (greedy: the share) over levels."""
    import numpy as np
    import torch

    from atgrpo.envs.pool import EnvPool
    from atgrpo.models.folder import load_model, load_tokenizer
    from atgrpo.warmstart.program_demos import strategy_program
    from atgrpo.warmstart.program_mix import mix_of
    from atgrpo.workflows.games import GameWorkflow

    wf = GameWorkflow(cfg)
    model, tok = load_model(model_dir, device="cpu"), load_tokenizer(model_dir)
    model.eval()
    pool = EnvPool(wf.task, levels, **wf.env_config)
    temperature = cfg.rollout.temperature
    compact = wf.templates.style != "paper"
    per: dict[str, dict[str, list[float]]] = {}
    try:
        ids = np.arange(levels)
        pool.reset(ids, ids, "eval")
        for obs in pool.render(ids):
            prompt = wf.encode(tok, wf.prompt_text(TOOL, obs, 0, None), TOOL)
            for strategy in mix_of(cfg.task.task):
                program = strategy_program(cfg.task.task, obs, strategy, compact=compact)
                target = tok.encode(program, add_special_tokens=False) + [tok.eos_token_id]
                with torch.no_grad():
                    logits = model(torch.tensor([prompt + target])).logits[0, len(prompt) - 1 : -1].float()
                want = torch.tensor(target)[:, None]
                row = per.setdefault(strategy, {"p_t1": [], "p_rollout": [], "greedy_exact": [], "tokens": []})
                row["p_t1"].append(torch.log_softmax(logits, -1).gather(1, want).sum().exp().item())
                row["p_rollout"].append(torch.log_softmax(logits / temperature, -1).gather(1, want).sum().exp().item())
                row["greedy_exact"].append(float(bool((logits.argmax(-1) == want[:, 0]).all())))
                row["tokens"].append(float(len(target)))
    finally:
        pool.close()
        wf.close()
    return {
        s: {k: (statistics.fmean(v) if k == "greedy_exact" else statistics.median(v)) for k, v in row.items()}
        for s, row in per.items()
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="atgrpo-bench learning forks", description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="a program-mode run folder (its config.toml, models/, checkpoints/)")
    parser.add_argument("--levels", type=int, default=40, help="held-out levels (eval seeds 0..N-1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.levels < 1:
        parser.error(f"--levels must be at least 1, got {args.levels}")
    config = args.run / "config.toml"
    if not config.is_file():
        print(f"atgrpo-bench learning forks: {args.run}: no config.toml (not a run folder)", file=sys.stderr)
        return 1
    try:
        cfg = load_config(config)
    except (OSError, ValueError) as exc:  # unreadable, not TOML, or not a valid run config
        print(f"atgrpo-bench learning forks: {config}: {exc}", file=sys.stderr)
        return 1
    if cfg.task.tool_mode != "program" or TOOL not in (cfg.task.roles or []):
        print(f"atgrpo-bench learning forks: {config} is not a program-mode run with a tool agent", file=sys.stderr)
        return 1
    models = models_of(args.run, cfg)
    if not models:
        print(f"atgrpo-bench learning forks: {args.run}: no model folder kept", file=sys.stderr)
        return 1
    figures = {label: strategy_odds(cfg, folder, args.levels) for label, folder in models}
    t = cfg.rollout.temperature
    print(f"| model | strategy | tokens | p (T=1) | p (T={t:g}) | greedy is it |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, odds in figures.items():
        for strategy, f in odds.items():
            print(
                f"| {label} | {strategy} | {f['tokens']:.0f} | {f['p_t1']:.3f} | {f['p_rollout']:.3f} | "
                f"{f['greedy_exact']:.0%} |"
            )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"run": str(args.run), "levels": args.levels, "models": figures}, indent=1))
    return 0
