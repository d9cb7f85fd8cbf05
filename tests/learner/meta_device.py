"""A second device on a CPU-only machine: torch's `meta` device, made readable.

Meta tensors have shapes and no data, and torch refuses to mix them with CPU tensors in one op
("Tensor on device cpu is not on the expected device meta"), just as it refuses CPU tensors beside
a model on CUDA. A learner whose model is on `meta` therefore fails on any tensor a step leaves on
the CPU. `MetaReads` lets the rest of the step run: a meta scalar read on the host (`.item()`,
`float()`, `bool()`) gives 0, and a copy of a meta tensor to the CPU gives zeros of its shape
(what publishing weights does). Values are meaningless; only devices are checked.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten


class MetaReads(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        src = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if src is not None and src.device.type == "meta":
            if func is _aten._local_scalar_dense.default:
                return False if src.dtype == torch.bool else (0.0 if src.is_floating_point() else 0)
            target = kwargs.get("device")
            if func is _aten._to_copy.default and target is not None and torch.device(target).type != "meta":
                return torch.zeros(src.shape, dtype=kwargs.get("dtype") or src.dtype, device=target)
        return func(*args, **kwargs)


__all__ = ["MetaReads"]
