"""Run state on disk: resumable checkpoints, the `latest` link, RNG state and the resolved config.

Layout under `out_dir/checkpoints/`:
- `step_<n>/<policy>/` the backend's model and optimizer state (every rank writes its part), and
  `<policy>/model/` the weights as an HF folder that `atgrpo-eval`, transformers and vLLM load.
- `step_<n>/state.json` step, versions, the step-0 evaluation; `step_<n>/rng.pt` the Python, numpy
  and torch RNG states of rank 0.
- `latest` a relative symlink to the newest complete `step_<n>`, replaced atomically once everything
  else of that checkpoint is written, so `checkpoints/latest/<policy>/model` is a usable path and a
  crash mid-write leaves the previous checkpoint current.

`out_dir/config.toml` is the resolved config of the run. A resumed run compares its config with it
and refuses to go on with a different one (`ConfigChangedError`) unless the difference is in the
schedule and plumbing (`RESUMABLE_CHANGES`) or `run.allow_config_change` is set.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from atgrpo.config import RunConfig, dump_config, load_config
from atgrpo.errors import ConfigChangedError
from atgrpo.models.folder import copy_model_files

LATEST = "latest"
RESUMABLE_CHANGES = ("run.steps", "run.time_limit_s", "run.eval_every", "run.checkpoint_every", "run.resume",
                     "run.allow_config_change", "train.streaming", "launch.", "metrics.", "transport.")
"""Config keys (or section prefixes) a resumed run may change: how long and where it runs, not what
it learns (streaming trains the same update as the batch path)."""


@dataclass
class RunState:
    """What rank 0 keeps besides the backends' state."""

    step: int
    versions: dict[str, int]
    eval_start: float | None
    """Held-out success before any training step, so a resumed run reports its improvement from the
    start of training, not from where it resumed."""


def step_folder(checkpoints: Path, step: int) -> Path:
    return checkpoints / f"step_{step:06d}"


def latest_checkpoint(checkpoints: Path) -> Path | None:
    """The newest complete checkpoint, or None. Reads the `latest` symlink (or, in runs written
    before it was a link, a text file naming the folder)."""
    marker = checkpoints / LATEST
    if marker.is_symlink():
        return checkpoints / os.readlink(marker)
    if marker.is_file():
        return checkpoints / marker.read_text().strip()
    return None


def mark_latest(folder: Path) -> None:
    """Point `latest` at `folder` atomically (a new link renamed over the old one)."""
    tmp = folder.parent / f".{LATEST}.tmp"
    tmp.unlink(missing_ok=True)
    os.symlink(folder.name, tmp)
    os.replace(tmp, folder.parent / LATEST)


def write_state(folder: Path, state: RunState) -> None:
    """Rank 0: the run state and RNG states, beside the backends' checkpoint in `folder`."""
    (folder / "state.json").write_text(json.dumps({"step": state.step, "versions": state.versions, "eval_start": state.eval_start}))
    torch.save(
        {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.random.get_rng_state()},
        folder / "rng.pt",
    )


def read_state(folder: Path) -> RunState:
    """The run state of a checkpoint, and restore the RNG states saved with it."""
    data = json.loads((folder / "state.json").read_text())
    rng = torch.load(folder / "rng.pt", weights_only=False)  # our own file: tuples and numpy arrays
    if "python" in rng:
        random.setstate(_as_tuples(rng["python"]))
        np.random.set_state(rng["numpy"])
        torch.random.set_rng_state(rng["torch"])
    else:  # checkpoints written before the Python and numpy states were restorable
        torch.random.set_rng_state(rng["torch_rng"])
    return RunState(int(data["step"]), {p: int(v) for p, v in data["versions"].items()}, data.get("eval_start"))


def _as_tuples(value: Any) -> Any:
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def export_model_folder(base: Path, tensors: dict[str, torch.Tensor], dest: Path) -> None:
    """`base`'s architecture and tokenizer with `tensors` as weights, saved as an HF folder at `dest`.

    The architecture is built on the meta device from `base`'s config: for a large model, reading its
    weights again at every checkpoint would cost more than the checkpoint."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(base, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(tensors, strict=False, assign=True)
    # Tied output embeddings are exported under one name only; anything else missing is a bug.
    tied = getattr(model, "_tied_weights_keys", None) or ()
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise RuntimeError(f"exported weights do not fit {base}: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.save_pretrained(dest)
    copy_model_files(base, dest)


# -- the resolved config ----------------------------------------------------------------------------


def config_file(out: Path) -> Path:
    return out / "config.toml"


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_changes(old: RunConfig, new: RunConfig) -> list[str]:
    """Keys whose values differ between two configs, less the ones a resume may change."""
    a, b = _flatten(old.model_dump()), _flatten(new.model_dump())
    changed = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return [k for k in changed if not any(k == r or (r.endswith(".") and k.startswith(r)) for r in RESUMABLE_CHANGES)]


def check_and_write_config(cfg: RunConfig, out: Path, resuming: bool) -> None:
    """Rank 0: refuse to resume with a config that changes what the run learns; then write `cfg`
    as the run's resolved config."""
    path = config_file(out)
    if resuming and path.is_file() and not cfg.run.allow_config_change:
        changed = config_changes(load_config(path), cfg)
        if changed:
            raise ConfigChangedError(
                f"resuming {out} with a different config: {', '.join(changed)} changed since {path} was written; "
                "restore them, use a new run.out_dir, or set run.allow_config_change = true"
            )
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(dump_config(cfg))
    os.replace(tmp, path)


__all__ = [
    "RunState", "check_and_write_config", "config_changes", "export_model_folder", "latest_checkpoint", "mark_latest",
    "read_state", "step_folder", "write_state",
]
