"""Every tensor a learner step creates or receives goes to the model's device.

The model sits on `meta` (see `meta_device.py`): any micro-batch field, mask, index or collective
buffer left on the CPU raises, as it would beside a model on CUDA. The rank-0 packer makes CPU
micro-batches, as it does in a run, in both layouts. The last test shows the check is real: with
`MicroBatch.to` disabled, the same step fails.
"""

from __future__ import annotations

import pytest
import torch
from meta_device import MetaReads

from atgrpo.config import load_config
from atgrpo.learner.batching import pair_microbatches
from atgrpo.learner.checkpoints import RunState
from atgrpo.learner.microbatch import MicroBatch
from atgrpo.learner.packing import OptimizerStep, RankPlan
from atgrpo.learner.trainer import ADAPTER_DIR, Trainer
from atgrpo.warmstart.prepare import prepare_models

META = torch.device("meta")


def _config(tmp_path, share_prefix: bool):
    return load_config(
        None,
        [
            f"run.out_dir={str(tmp_path)!r}",
            "warmstart.steps=0",
            f"train.share_prefix={str(share_prefix).lower()}",
            "policies.shared.tiny.hidden_size=32",
            "policies.shared.tiny.intermediate_size=64",
            "policies.shared.tiny.num_layers=1",
            "policies.shared.tiny.num_heads=2",
            "policies.shared.tiny.num_kv_heads=1",
            "train.entropy_coef=0.01",
            "train.kl_coef=0.01",
        ],
    )


def _plan(trainer: Trainer, share_prefix: bool) -> RankPlan:
    pairs = [([5, 6, 7], [8, 9]), ([5, 6, 7], [10, 11, 12]), ([4, 3], [2])]
    mbs = pair_microbatches(pairs, max_tokens=64, pad_id=trainer.pad_ids["shared"], share_prefix=share_prefix)
    assert all(mb.input_ids.device.type == "cpu" for mb in mbs)
    return RankPlan({"shared": [OptimizerStep(mbs, sum(mb.num_tokens for mb in mbs))]})


@pytest.mark.parametrize("share_prefix", [False, True])
def test_a_step_and_a_publish_run_with_the_model_on_another_device(tmp_path, share_prefix):
    cfg = _config(tmp_path, share_prefix)
    prepare_models(cfg, device=torch.device("cpu"))
    with MetaReads():
        trainer = Trainer(cfg, device=META)
        assert all(p.device == META for p in trainer.backends["shared"].model.parameters())
        metrics = trainer.train(_plan(trainer, share_prefix))
        weights, _ = trainer.export()
    assert metrics["learner/shared/version"] == 1.0
    assert weights["shared"] and all(t.device.type == "cpu" for t in weights["shared"].values())


def test_a_micro_batch_left_on_the_cpu_is_caught(tmp_path, monkeypatch):
    cfg = _config(tmp_path, False)
    prepare_models(cfg, device=torch.device("cpu"))
    monkeypatch.setattr(MicroBatch, "to", lambda self, device: self)
    with MetaReads():
        trainer = Trainer(cfg, device=META)
        with pytest.raises(RuntimeError, match="device"):
            trainer.train(_plan(trainer, False))


def test_a_lora_checkpoint_is_written_with_the_base_on_another_device(tmp_path):
    """The merged model of a LoRA checkpoint is built on the host: the base lies on the learner's
    device and the adapter's exported tensors on the CPU (on an H200 the old merge raised)."""
    cfg = load_config(
        None,
        [
            f"run.out_dir={str(tmp_path / 'run')!r}",
            "warmstart.steps=0",
            "policies.shared.lora={r=4, alpha=8.0}",
            "policies.shared.tiny={hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1}",
        ],
    )
    prepare_models(cfg, device=torch.device("cpu"))
    with MetaReads():
        trainer = Trainer(cfg, device=META)
        folder = trainer.checkpoint(tmp_path / "ck", RunState(1, dict(trainer.versions), None), rank0=True)
    assert (folder / "shared" / "model" / "config.json").is_file()
    assert (folder / "shared" / ADAPTER_DIR / "adapter_config.json").is_file()
