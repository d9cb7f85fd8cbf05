"""`Trainer.export` on two ranks (gloo, torch backend): only rank 0 copies the weights to the host,
the ranks compare on-device fingerprints, and a replica that drifted is reported by every rank as
`learner/<p>/replica_mismatch` = 1."""

from __future__ import annotations

import os

import pytest
import torch
import torch.multiprocessing as mp
from spawned_ranks import spawn_ranks

from atgrpo.config import load_config
from atgrpo.learner.distributed import free_port
from atgrpo.learner.trainer import Trainer
from atgrpo.warmstart.prepare import prepare_models

pytestmark = pytest.mark.integration


def _config(tmp_path):
    return load_config(
        None,
        [
            f"run.out_dir={str(tmp_path)!r}",
            "warmstart.steps=0",
            "policies.shared.tiny.hidden_size=32",
            "policies.shared.tiny.intermediate_size=64",
            "policies.shared.tiny.num_layers=1",
            "policies.shared.tiny.num_heads=2",
            "policies.shared.tiny.num_kv_heads=1",
        ],
    )


def _rank(rank: int, port: int, out_dir: str, results, failures) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        trainer = Trainer(_config(out_dir), rank, 2)
        backend = trainer.backends["shared"]
        calls = []
        export_weights = backend.export_weights
        backend.export_weights = lambda **kw: calls.append(1) or export_weights(**kw)  # type: ignore[method-assign]
        weights, metrics = trainer.export()
        results.put(("agree", rank, sorted(weights), len(weights.get("shared", {})), metrics, len(calls)))
        if rank == 1:
            with torch.no_grad():
                next(backend.model.parameters()).view(-1)[0] += 1e-3
        _, metrics = trainer.export()
        results.put(("drifted", rank, metrics))
    except BaseException as exc:  # reported to the test process
        failures.put(f"rank {rank}: {type(exc).__name__}: {exc}")
    finally:
        torch.distributed.destroy_process_group()


def test_only_rank_0_exports_and_every_rank_sees_a_drifted_replica(tmp_path):
    prepare_models(_config(tmp_path), device=torch.device("cpu"))
    results = mp.get_context("spawn").Queue()
    spawn_ranks(_rank, 2, free_port(), str(tmp_path), results)
    got = {}
    while not results.empty():
        item = results.get()
        got[item[:2]] = item[2:]
    names0, count0, agree0, calls0 = got[("agree", 0)]
    names1, count1, agree1, calls1 = got[("agree", 1)]
    assert names0 == ["shared"] and count0 > 0 and calls0 == 1
    assert names1 == [] and count1 == 0 and calls1 == 0  # nothing copied to the host on rank 1
    assert agree0 == agree1 == {"learner/shared/replica_mismatch": 0.0}
    assert got[("drifted", 0)] == got[("drifted", 1)] == ({"learner/shared/replica_mismatch": 1.0},)
