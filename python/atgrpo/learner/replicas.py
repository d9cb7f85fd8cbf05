"""Do the learner's ranks hold the same weights? Compared by a fingerprint computed where the
weights lie (on the GPU: no copy to the host), with one all_gather.

Fingerprint: per tensor (in name order), the sum of its elements' bit patterns read as signed
integers of their width (bf16 as int16, fp32 as int32, ...), accumulated in int64. Integer addition
is exact and associative (it wraps mod 2^64 in the worst case), so every device, kernel and
reduction order gives the same value for the same bytes: equal replicas always agree, and a drift
of any single element changes its tensor's sum. It is a sum, not a hash: changes that cancel
exactly (two elements swapped) would pass, which replicas drifting apart do not produce.
Cost: one pass over the weights on their device, summed in slices of `SLICE` elements so that the
int64 copy of a slice is the only temporary (128 MiB).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.distributed as dist

SLICE = 1 << 24
"""Elements summed at once: the int64 temporary of one slice is 128 MiB."""

_INT_OF_WIDTH = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits_sum(t: torch.Tensor) -> torch.Tensor:
    flat = t.detach().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    ints = flat.view(_INT_OF_WIDTH.get(flat.element_size(), torch.int64))
    total = torch.zeros((), dtype=torch.int64, device=t.device)
    for start in range(0, ints.numel(), SLICE):
        total += ints[start : start + SLICE].sum(dtype=torch.int64)
    return total


def fingerprint(tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """int64 vector, one entry per tensor in sorted name order, on the tensors' device."""
    names = sorted(tensors)
    if not names:
        return torch.zeros(0, dtype=torch.int64)
    return torch.stack([_bits_sum(tensors[n]) for n in names])


def differing_tensors(tensors: Mapping[str, torch.Tensor], device: torch.device, group=None) -> list[str]:
    """Names of the tensors whose fingerprint is not the same on every rank of `group` (the default
    process group: every rank calls this, with the same names). `device`: where the collective's
    tensor must be (`atgrpo.devices.collective_device`: NCCL takes CUDA tensors only)."""
    mine = fingerprint(tensors).to(device)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    rows = torch.stack(every).cpu()  # a few hundred integers
    names = sorted(tensors)
    return [names[i] for i in range(len(names)) if bool((rows[:, i] != rows[0, i]).any())]


__all__ = ["SLICE", "differing_tensors", "fingerprint"]
