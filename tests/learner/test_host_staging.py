"""Host staging of exported weights: CPU weights take the plain copy; weights "on a GPU" (a stand-in
device check on CPU) go through pooled buffers that are reused only once nothing refers to them."""

from __future__ import annotations

import numpy as np
import torch

from atgrpo.learner.host_staging import HostStager
from atgrpo.transport.tensors import weights_to_messages

WEIGHTS = {"w": torch.randn(4, 3), "b": torch.randn(3), "step": torch.tensor([7])}


class FakeGpu:
    """Stand-ins for the GPU facts: every tensor counts as on a GPU; allocations and syncs are counted."""

    def __init__(self) -> None:
        self.allocated = 0
        self.syncs = 0

    def stager(self, **kwargs) -> HostStager:
        def allocate(shape, dtype):
            self.allocated += 1
            return torch.empty(shape, dtype=dtype)

        def synchronize(devices):
            self.syncs += 1

        return HostStager(on_gpu=lambda t: True, allocate=allocate, synchronize=synchronize, **kwargs)


def _same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> bool:
    return list(got) == list(want) and all(
        g.dtype == w.dtype and g.is_contiguous() and torch.equal(g, w) for g, w in zip(got.values(), want.values())
    )


def test_cpu_weights_take_the_plain_copy_and_nothing_is_pooled():
    stager = HostStager(allocate=lambda shape, dtype: (_ for _ in ()).throw(AssertionError("pinned on CPU")))
    got = stager.to_host(WEIGHTS)
    assert _same(got, WEIGHTS)
    assert all(g.data_ptr() != w.data_ptr() for g, w in zip(got.values(), WEIGHTS.values()))  # copies
    half = stager.to_host(WEIGHTS, torch.bfloat16)
    assert half["w"].dtype == torch.bfloat16 and half["step"].dtype == torch.int64  # floats only
    assert torch.equal(half["w"], WEIGHTS["w"].bfloat16())
    assert stager.pinned_exports == 0 and stager._sets == []


def test_gpu_weights_go_through_buffers_reused_only_once_nothing_refers_to_them():
    gpu = FakeGpu()
    stager = gpu.stager()
    first = stager.to_host(WEIGHTS)
    assert _same(first, WEIGHTS) and gpu.allocated == 3 and gpu.syncs == 1
    second = stager.to_host(WEIGHTS)  # the first export is still held: a second set
    assert gpu.allocated == 6 and {t.data_ptr() for t in first.values()}.isdisjoint(
        t.data_ptr() for t in second.values()
    )
    ptrs = [t.data_ptr() for t in first.values()]
    del first
    changed = {k: v + 1 if v.is_floating_point() else v for k, v in WEIGHTS.items()}
    third = stager.to_host(changed)  # the first set is free again: reused, nothing new pinned
    assert gpu.allocated == 6 and [t.data_ptr() for t in third.values()] == ptrs
    assert _same(third, changed) and _same(second, WEIGHTS)  # the held export was not overwritten
    assert stager.pinned_exports == 3 and gpu.syncs == 3


def test_a_buffer_the_hub_still_sends_from_is_never_reused():
    gpu = FakeGpu()
    stager = gpu.stager(max_sets=1)
    exported = stager.to_host(WEIGHTS)
    messages = weights_to_messages("p", 1, exported)  # zero-copy views of the buffers, as the hub keeps them
    frame = np.frombuffer(messages[0][1], dtype=np.float32).copy()
    del exported
    again = stager.to_host({k: v * 0 for k, v in WEIGHTS.items()})  # the set is in use: the plain path
    assert stager.pinned_exports == 1 and gpu.allocated == 3
    assert np.array_equal(np.frombuffer(messages[0][1], dtype=np.float32), frame)  # untouched
    assert all(float(t.abs().sum()) == 0 for t in again.values())
    del messages
    stager.to_host(WEIGHTS)  # now only the pool refers to it
    assert stager.pinned_exports == 2 and gpu.allocated == 3


def test_another_layout_gets_its_own_buffers_and_a_failed_pin_falls_back_to_a_plain_copy():
    gpu = FakeGpu()
    stager = gpu.stager()
    stager.to_host(WEIGHTS)
    stager.to_host(WEIGHTS, torch.bfloat16)  # other dtypes: another set
    assert len(stager._sets) == 2 and gpu.allocated == 6

    def no_pinning(shape, dtype):
        raise RuntimeError("cudaHostAlloc failed: out of memory")

    failing = HostStager(on_gpu=lambda t: True, allocate=no_pinning, synchronize=lambda d: None)
    assert _same(failing.to_host(WEIGHTS), WEIGHTS)
    assert failing.pinned_exports == 0 and failing.max_sets == 0  # it does not try again
