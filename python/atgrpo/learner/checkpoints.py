"""Run state on disk: resumable checkpoints, the `latest` link, RNG state and the resolved config.

Layout under `out_dir/checkpoints/`:
- `step_<n>/<policy>/` the backend's model and optimizer state (every rank writes its part), and
  `<policy>/model/` the weights as an HF folder that `atgrpo-eval`, transformers and vLLM load.
- `step_<n>/state.json` step, versions, the step-0 evaluation; `step_<n>/rng.pt` the Python, numpy,
  torch CPU and (where this process uses CUDA) per-device CUDA RNG states of rank 0.
- `step_<n>/COMPLETE` written once every rank's part is on disk, just before `latest` moves to it;
  `step_<n>/KEEP` (made by the user) exempts it from retention (`learner.retention`).
- `latest` a relative symlink to the newest complete `step_<n>`, replaced atomically once everything
  else of that checkpoint is written, so `checkpoints/latest/<policy>/model` is a usable path and a
  crash mid-write leaves the previous checkpoint current.
- `.step_<n>.deleting` a checkpoint being removed by retention (never a checkpoint any more).

CUDA RNG states: saved and restored only in a process where CUDA is available and initialised (a
learner on `cuda` has initialised it before any checkpoint is read or written; a CPU learner on a
GPU host never creates a CUDA context for this). A checkpoint written without CUDA loads with CUDA
and leaves the CUDA generators as seeded; one written with CUDA loads without it, ignoring them.
Where the device count differs, device i gets the saved state i for the devices both have, the
others keep their seeds, and a warning says the resume is not bit-exact (placement is a resumable
change, so refusing would strand the run).

`out_dir/config.toml` is the resolved config of the run. A resumed run compares its config with it
and refuses to go on with a different one (`ConfigChangedError`) unless the difference is in the
schedule and plumbing (`RESUMABLE_CHANGES`) or `run.allow_config_change` is set.
"""

from __future__ import annotations

import json
import logging
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

log = logging.getLogger("atgrpo.learner")

LATEST = "latest"
COMPLETE = "COMPLETE"
"""File inside `step_<n>/`: every rank's part of the checkpoint is on disk (`mark_latest` writes it)."""
KEEP = "KEEP"
"""File inside `step_<n>/`, made by the user: retention never removes this checkpoint."""
RESUMABLE_CHANGES = (
    "run.steps",
    "run.time_limit_s",
    "run.eval_every",
    "run.checkpoint_every",
    "run.resume",
    "run.allow_config_change",
    "run.keep_checkpoints",
    "run.keep_checkpoint_steps",
    "train.streaming",
    "launch.",
    "metrics.",
    "transport.",
)
"""Config keys (or section prefixes) a resumed run may change: how long and where it runs and what
it keeps on disk, not what it learns (streaming trains the same update as the batch path)."""


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
    """Mark `folder` complete, then point `latest` at it atomically (a new link renamed over the old one)."""
    (folder / COMPLETE).touch()
    tmp = folder.parent / f".{LATEST}.tmp"
    tmp.unlink(missing_ok=True)
    os.symlink(folder.name, tmp)
    os.replace(tmp, folder.parent / LATEST)


def mark_incomplete(folder: Path) -> None:
    """Rank 0, before a step is written again (after a resume): until `mark_latest`, the folder is not
    a complete checkpoint, whatever an earlier write of it left."""
    (folder / COMPLETE).unlink(missing_ok=True)


def write_state(folder: Path, state: RunState) -> None:
    """Rank 0: the run state and RNG states, beside the backends' checkpoint in `folder`."""
    (folder / "state.json").write_text(
        json.dumps({"step": state.step, "versions": state.versions, "eval_start": state.eval_start})
    )
    rng: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.random.get_rng_state(),
    }
    if _uses_cuda():
        rng["cuda"] = torch.cuda.get_rng_state_all()  # CPU byte tensors, one per visible device
    torch.save(rng, folder / "rng.pt")


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
    _restore_cuda_rng(rng.get("cuda"), folder)
    return RunState(int(data["step"]), {p: int(v) for p, v in data["versions"].items()}, data.get("eval_start"))


def _uses_cuda() -> bool:
    """CUDA is here and this process has initialised it (asking for its RNG states otherwise would
    create a CUDA context on every visible device)."""
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _restore_cuda_rng(states: list[torch.Tensor] | None, folder: Path) -> None:
    """The CUDA part of `read_state` (the rules are in the module docstring)."""
    if not _uses_cuda():
        if states:
            log.info("%s holds CUDA RNG states; this process does not use CUDA, so they are not restored", folder)
        return
    if not states:
        log.info("%s was written without CUDA: the CUDA RNGs keep their seeds", folder)
        return
    count = torch.cuda.device_count()
    if len(states) != count:
        log.warning(
            "%s holds CUDA RNG states of %d devices, this process sees %d: the first %d are restored, "
            "so this resume is not bit-exact",
            folder,
            len(states),
            count,
            min(count, len(states)),
        )
    torch.cuda.set_rng_state_all(states[:count])


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
    """Keys whose values differ between two configs, less the ones a resume may change. `run.steps`
    is not one of those under a decaying lr schedule: it is the decay's horizon, so it sets every
    update's lr (`learner.lr_schedule`)."""
    a, b = _flatten(old.model_dump()), _flatten(new.model_dump())
    changed = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    decays = any(pc.lr_schedule != "constant" for cfg in (old, new) for pc in cfg.policies.values())

    def resumable(key: str) -> bool:
        if key == "run.steps" and decays:
            return False
        return any(key == r or (r.endswith(".") and key.startswith(r)) for r in RESUMABLE_CHANGES)

    return [k for k in changed if not resumable(k)]


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
    "COMPLETE",
    "KEEP",
    "RunState",
    "check_and_write_config",
    "config_changes",
    "export_model_folder",
    "latest_checkpoint",
    "mark_incomplete",
    "mark_latest",
    "read_state",
    "step_folder",
    "write_state",
]
