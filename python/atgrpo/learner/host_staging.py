"""Weights copied to host memory for export: through reused pinned buffers where they lie on a GPU.

Why: a device-to-host copy into pageable memory goes through a driver-internal pinned bounce buffer,
one synchronous piece at a time; into pinned (page-locked) memory it is one DMA per tensor at full
link speed, queued back to back (`copy_(non_blocking=True)`) and waited for once. Pinning memory is
slow (the kernel locks every page), so the buffers are kept and reused by the next export of the
same layout (names, shapes, dtypes).

Invariants:
- CPU (or `meta`) weights take the plain path, exactly the copy export always made:
  `to(device="cpu", dtype=..., copy=True).contiguous()` per tensor. Nothing is pinned.
- A returned tensor is a view of a pooled buffer, and is never written to while anything still
  holds its memory: a buffer set is reused only when torch's storage use count says that nothing
  but the pool refers to it (the hub's snapshot of a version it still serves, libzmq sending it,
  a checkpoint writer: each holds a view or a numpy array of it, which count). Otherwise a new set
  is pinned, up to `MAX_SETS`; past that, or where pinning fails, the export takes the plain path.
- One synchronize per export, per device, before returning: the caller gets finished copies.

GPU-only and untested here (no GPU on the development machine): `pin_memory=True`, the
non-blocking copies and the stream synchronize. The choice of path, the pool's reuse rule and the
values are tested on CPU with a stand-in for the device check and the allocator.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import torch

log = logging.getLogger("atgrpo.learner")

MAX_SETS = 2
"""Pinned buffer sets kept per stager: with `transport.keep_versions = 1` the hub serves version v
from one while v+1 is exported into the other, so steady state pins no new memory."""

Layout = tuple[tuple[str, tuple[int, ...], torch.dtype], ...]


def _on_gpu(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"


def _pinned(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, pin_memory=True)


def _synchronize(devices: set[torch.device]) -> None:
    for device in devices:
        torch.cuda.current_stream(device).synchronize()


def _use_count(t: torch.Tensor) -> int | None:
    """How many tensors refer to `t`'s memory (torch's storage use count), None if torch can't say."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    return None if count is None else int(count(t.untyped_storage()._cdata))


class HostStager:
    """Host copies of weights for `export_weights`; one per backend (its buffers match its model)."""

    def __init__(
        self,
        *,
        max_sets: int = MAX_SETS,
        on_gpu: Callable[[torch.Tensor], bool] = _on_gpu,
        allocate: Callable[[tuple[int, ...], torch.dtype], torch.Tensor] = _pinned,
        synchronize: Callable[[set[torch.device]], None] = _synchronize,
    ) -> None:
        """`on_gpu`, `allocate` and `synchronize` are the GPU facts; tests stand them in on CPU."""
        self.max_sets = max_sets
        self._on_gpu = on_gpu
        self._allocate = allocate
        self._synchronize = synchronize
        self._sets: list[tuple[Layout, list[torch.Tensor], int]] = []
        """(layout, buffers, the buffers' use count when only the pool holds them)."""
        self.pinned_exports = 0
        """Exports that went through pinned buffers (the rest took the plain path)."""

    def to_host(
        self, tensors: Mapping[str, torch.Tensor], float_dtype: torch.dtype | None = None
    ) -> dict[str, torch.Tensor]:
        """Contiguous CPU copies of `tensors` by name, floating ones in `float_dtype` (None: as they are)."""
        items = [(k, v.detach()) for k, v in tensors.items()]
        dtypes = [float_dtype if float_dtype is not None and v.is_floating_point() else v.dtype for _, v in items]
        if not any(self._on_gpu(v) for _, v in items):
            return {k: v.to(device="cpu", dtype=dt, copy=True).contiguous() for (k, v), dt in zip(items, dtypes)}
        layout: Layout = tuple((k, tuple(v.shape), dt) for (k, v), dt in zip(items, dtypes))
        buffers = self._buffers(layout)
        if buffers is None:
            return {k: v.to(device="cpu", dtype=dt, copy=True).contiguous() for (k, v), dt in zip(items, dtypes)}
        devices = set()
        for (_, v), dt, buf in zip(items, dtypes, buffers):
            if self._on_gpu(v):
                devices.add(v.device)
            # Cast where the tensor lies (the GPU), then one DMA of the final bytes.
            buf.copy_(v.to(dt), non_blocking=True)
        self._synchronize(devices)
        self.pinned_exports += 1
        # Views: each one counts as a user of the buffer's memory for as long as it (or anything
        # made from it) lives, which is what `_free` checks before the buffer is written again.
        return {k: buf.view(buf.shape) for (k, _), buf in zip(items, buffers)}

    def _buffers(self, layout: Layout) -> list[torch.Tensor] | None:
        """A free buffer set of `layout`, a new one, or None (the plain path)."""
        for kept, buffers, idle in self._sets:
            if kept == layout and all(_use_count(b) == idle for b in buffers):
                return buffers
        if len(self._sets) >= self.max_sets or not hasattr(torch._C, "_storage_Use_Count"):
            return None
        try:
            buffers = [self._allocate(shape, dtype) for _, shape, dtype in layout]
        except RuntimeError as exc:  # out of pinnable memory: the copy still works, unpinned
            log.warning("could not pin %d tensors for export (%s); copying to pageable memory", len(layout), exc)
            self.max_sets = len(self._sets)
            return None
        idle = _use_count(buffers[0]) if buffers else 0
        self._sets.append((layout, buffers, idle or 0))
        return buffers


__all__ = ["MAX_SETS", "HostStager"]
