"""Where a run keeps its files, in one place: `out_dir/` holds everything of a run.

- `models/<policy>/`  the policy's initial HF folder (built tiny model, warm-started) unless
  `policies.<p>.path` names one; actors read its config and tokenizer, weights come over the wire.
- `checkpoints/step_<n>/`  resumable checkpoints; `checkpoints/latest` names the newest complete one.
- `metrics.jsonl`, `tb/`, `learning_curve.png`, `eval.json`.
"""

from __future__ import annotations

from pathlib import Path

from atgrpo.config import RunConfig


def out_dir(cfg: RunConfig) -> Path:
    return Path(cfg.run.out_dir)


def policy_dir(cfg: RunConfig, policy: str) -> Path:
    path = cfg.policies[policy].path
    return Path(path) if path else out_dir(cfg) / "models" / policy


def checkpoints_dir(cfg: RunConfig) -> Path:
    return out_dir(cfg) / "checkpoints"
