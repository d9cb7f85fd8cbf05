"""Where a run keeps its files, in one place: `out_dir/` holds everything of a run.

- `models/<policy>/`  the policy's initial HF folder (built tiny model, warm-started) unless
  `policies.<p>.path` names one; actors read its config and tokenizer, weights come over the wire.
  A LoRA policy's is its frozen base (never warm-started: the adapter is).
- `adapters/<policy>/`  a LoRA policy's warm-started adapter (peft's format), its version 0.
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
    model the learner warm-starts (`warmstart.pretrained`), whose source folder stays untouched.
    A LoRA policy's base is never trained, so a path base is always used where it is."""
    pc = cfg.policies[policy]
    if pc.path and (not cfg.warmstart.pretrained or pc.lora is not None):
        return resolve_model_path(pc.path)
    return out_dir(cfg) / "models" / policy


def warm_adapter_dir(cfg: RunConfig, policy: str) -> Path:
    """Where a LoRA policy's warm-started adapter is kept (peft's folder format): the adapter the
    learner starts it from, if the folder exists (`warmstart.prepare`)."""
    return out_dir(cfg) / "adapters" / policy


def source_model_dir(cfg: RunConfig, policy: str) -> Path | None:
    """The folder a policy starts from: its configured path, or None for the built tiny model."""
    path = cfg.policies[policy].path
    return resolve_model_path(path) if path else None


def checkpoints_dir(cfg: RunConfig) -> Path:
    return out_dir(cfg) / "checkpoints"
