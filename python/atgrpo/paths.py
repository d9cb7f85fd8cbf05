"""Where a run keeps its files, in one place: `out_dir/` holds everything of a run.

- `models/<policy>/`  the policy's initial HF folder (built tiny model, warm-started) unless
  `policies.<p>.path` names one; actors read its config and tokenizer, weights come over the wire.
- `checkpoints/step_<n>/`  resumable checkpoints; `checkpoints/latest` names the newest complete one.
- `metrics.jsonl`, `tb/`, `learning_curve.png`, `eval.json`.
"""

from __future__ import annotations

from pathlib import Path

from atgrpo.config import RunConfig
from atgrpo.models.importer import resolve_model_path


def out_dir(cfg: RunConfig) -> Path:
    return Path(cfg.run.out_dir)


def policy_dir(cfg: RunConfig, policy: str) -> Path:
    """The policy's initial folder: `policies.<p>.path` itself (`~` expanded; `@smollm2` is the cached
    SmolLM2 import, built on first use), or `out_dir/models/<p>` for a built model and for a path
    model the learner warm-starts (`warmstart.pretrained`), whose source folder stays untouched."""
    path = cfg.policies[policy].path
    if path and not cfg.warmstart.pretrained:
        return resolve_model_path(path)
    return out_dir(cfg) / "models" / policy


def source_model_dir(cfg: RunConfig, policy: str) -> Path | None:
    """The folder a policy starts from: its configured path, or None for the built tiny model."""
    path = cfg.policies[policy].path
    return resolve_model_path(path) if path else None


def checkpoints_dir(cfg: RunConfig) -> Path:
    return out_dir(cfg) / "checkpoints"
