"""Which device a process computes on: the one place that turns `train.device` / `rollout.device`
and a rank into a `torch.device`, and a device into the process group's backend.

Rules (each one a failure the review of the first GPU run found):
- `"cpu"` is the CPU, whatever GPUs the host has; its process group is gloo, never NCCL.
- `"cuda"` is GPU `LOCAL_RANK` of the GPUs this process sees: rank r of a torchrun job takes
  `cuda:r`, one process takes `cuda:0`. `launch.learner_devices` / `launch.actor_devices` choose
  which physical GPUs a process sees (`CUDA_VISIBLE_DEVICES`), so "cuda" is all a config needs.
- `"cuda:N"` names one GPU. In a job of several ranks that would put every rank on GPU N, so it
  is refused there.
- `"meta"` computes nothing (no data). Tests use it to prove that every tensor a step creates
  follows the model to its device: torch refuses to mix meta and CPU tensors in one op.

The tensors of collectives live where the backend wants them (`collective_device`): NCCL takes
CUDA tensors only, gloo CPU tensors.
"""

from __future__ import annotations

import os

import torch

from atgrpo.config.sections import DEVICE_PATTERN
from atgrpo.errors import PlacementError


def _parse(spec: str, setting: str) -> tuple[str, int | None]:
    if not DEVICE_PATTERN.fullmatch(spec):
        raise PlacementError(f"{setting} = {spec!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    kind, _, index = spec.partition(":")
    return kind, int(index) if index else None


def resolve_device(
    spec: str, *, local_rank: int = 0, world_size: int = 1, setting: str = "train.device"
) -> torch.device:
    """The device of this process for `spec` (a `train.device` / `rollout.device` value).

    Raises `PlacementError`, naming `setting` and the numbers, for a GPU that is not there or a
    `cuda:N` shared by every rank of a job."""
    kind, index = _parse(spec, setting)
    if kind != "cuda":
        return torch.device(kind)
    if index is not None and world_size > 1:
        raise PlacementError(
            f"{setting} = {spec!r} would put all {world_size} ranks on GPU {index}; use {setting} = 'cuda' "
            f"(rank r computes on cuda:LOCAL_RANK) and choose the GPUs with launch.learner_devices or CUDA_VISIBLE_DEVICES"
        )
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    want = index if index is not None else local_rank
    if want >= visible:
        seen = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={seen})" if seen is not None else ""
        raise PlacementError(
            f"{setting} = {spec!r} needs GPU {want} (local rank {local_rank}), but this process sees {visible} GPU(s){where}"
        )
    return torch.device("cuda", want)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of a model's parameters (where its inputs must be)."""
    return next(model.parameters()).device


def collective_backend(device: torch.device) -> str:
    """The process-group backend for ranks computing on `device`: NCCL for CUDA, gloo otherwise."""
    return "nccl" if device.type == "cuda" else "gloo"


def collective_device(device: torch.device) -> torch.device:
    """Where the tensors of a collective among ranks on `device` must be (NCCL: that GPU; gloo: CPU)."""
    return device if device.type == "cuda" else torch.device("cpu")


def activate(device: torch.device) -> None:
    """Make `device` the current CUDA device of this process (a no-op off CUDA), so that CUDA calls
    without a device (NCCL's communicator, `torch.cuda.current_device()`) use the rank's own GPU."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


__all__ = ["activate", "collective_backend", "collective_device", "model_device", "resolve_device"]
