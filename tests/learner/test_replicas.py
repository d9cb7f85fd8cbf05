"""Replica fingerprints: exact integer sums of the weights' bit patterns, the same whatever the
order of summation, different for any drifted element; two ranks over gloo agree on equal weights
and name the tensor where one rank drifted."""

from __future__ import annotations

import os

import pytest
import torch
from spawned_ranks import spawn_ranks

from atgrpo.learner import replicas
from atgrpo.learner.distributed import free_port
from atgrpo.learner.replicas import differing_tensors, fingerprint
from atgrpo.transport.tensors import DTYPES

GEN = torch.Generator().manual_seed(0)  # every rank (a spawned process) builds the same weights
WEIGHTS = {
    "b.weight": torch.randn(33, 7, generator=GEN).bfloat16(),
    "a.weight": torch.randn(5, 3, generator=GEN),
    "mask": torch.tensor([True, False, True]),
    "steps": torch.tensor([3, -4], dtype=torch.int64),
}


def test_a_fingerprint_is_the_exact_integer_sum_of_each_tensors_bits_in_name_order():
    got = fingerprint(WEIGHTS)
    assert got.dtype == torch.int64 and got.shape == (len(WEIGHTS),)
    for value, name in zip(got.tolist(), sorted(WEIGHTS)):
        t = WEIGHTS[name].reshape(-1)
        t = t.view(torch.uint8) if t.dtype == torch.bool else t
        width = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
        assert value == sum(int(x) for x in t.view(width).tolist()), name  # Python ints: exact


def test_slicing_and_order_change_nothing_and_any_single_element_changes_its_entry(monkeypatch):
    big = {"w": torch.randn(1000, dtype=torch.float32), "v": torch.randn(77, dtype=torch.bfloat16)}
    whole = fingerprint(big)
    monkeypatch.setattr(replicas, "SLICE", 7)  # many slices: integer sums do not care
    assert torch.equal(fingerprint(big), whole)
    assert torch.equal(fingerprint({"v": big["v"], "w": big["w"].flip(0).flip(0)}), whole)
    for i in (0, 500, 999):
        drifted = big["w"].clone()
        drifted[i] = torch.nextafter(drifted[i], torch.tensor(float("inf")))  # one ulp
        step = int(drifted.view(torch.int32)[i]) - int(big["w"].view(torch.int32)[i])  # +-1: sign-magnitude
        assert abs(step) == 1
        assert fingerprint({**big, "w": drifted}).tolist() == [whole[0].item(), whole[1].item() + step]  # v, w


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_every_wire_dtype_has_a_fingerprint(name):
    t = torch.zeros(6, dtype=DTYPES[name])
    assert fingerprint({"t": t}).tolist() == [0]
    assert fingerprint({}).shape == (0,)


def _rank(rank: int, port: int, failures) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        weights = {k: v.clone() for k, v in WEIGHTS.items()}
        assert differing_tensors(weights, torch.device("cpu")) == []
        if rank == 1:
            weights["a.weight"][2, 1] += 1e-3
        assert differing_tensors(weights, torch.device("cpu")) == ["a.weight"]
    except BaseException as exc:  # reported to the test process
        failures.put(f"rank {rank}: {type(exc).__name__}: {exc}")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.integration
def test_two_ranks_agree_on_equal_weights_and_name_the_tensor_that_drifted():
    spawn_ranks(_rank, 2, free_port())
