"""LoRA policies in the learner: one frozen base for the group, adapters trained alone, exact resume."""

from __future__ import annotations

import pytest
import torch
from deepspeed_cases import make_steps, total_tokens

from atgrpo.config import load_config
from atgrpo.errors import CheckpointLoadError
from atgrpo.learner.backends import TorchBackend
from atgrpo.learner.checkpoints import RunState
from atgrpo.learner.lora import AdapterWeights, attach_adapters
from atgrpo.learner.packing import OptimizerStep, RankPlan
from atgrpo.learner.trainer import ADAPTER_DIR, Trainer, loss_config
from atgrpo.models.adapters import read_adapter
from atgrpo.models.folder import load_model
from atgrpo.paths import policy_dir
from atgrpo.warmstart.prepare import prepare_models

TINY = "{hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2, num_kv_heads=1}"


def lora_config(tmp_path, **extra):
    overrides = [
        f"run.out_dir='{tmp_path / 'run'}'",
        "warmstart.steps=0",
        "role_policy={plan='a', tool='b'}",
        f"policies.a.tiny={TINY}",
        f"policies.b.tiny={TINY}",
        "policies.a.lora={r=4, alpha=8.0}",
        "policies.b.lora={r=8, alpha=8.0, target_modules=['q_proj','v_proj','up_proj']}",
        *[f"{k}={v}" for k, v in extra.items()],
    ]
    cfg = load_config(None, overrides)
    prepare_models(cfg)
    return cfg


def randomise(weights: AdapterWeights, seed: int) -> None:
    """Non-zero B (peft starts it at 0), so both A and B get gradients and adapters differ."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in weights.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)


def plan(steps, final=True) -> RankPlan:
    return RankPlan({p: [OptimizerStep(mbs, total_tokens(mbs))] for p, mbs in steps.items()}, final)


def test_shared_base_held_once_and_only_adapters_train(tmp_path):
    cfg = lora_config(tmp_path)
    trainer = Trainer(cfg)
    a, b = trainer.backends["a"], trainer.backends["b"]
    assert isinstance(a, TorchBackend) and a.model is b.model  # one base module for the group
    randomise(a.adapter, 1)
    randomise(b.adapter, 2)
    base_before = {k: v.clone() for k, v in a.model.get_base_model().state_dict().items() if "lora_" not in k}
    frozen = [p for n, p in a.model.named_parameters() if "lora_" not in n]
    assert frozen and not any(p.requires_grad for p in frozen)
    for be in (a, b):  # the optimizer holds exactly the adapter's tensors
        in_opt = {id(p) for g in be.optimizer.param_groups for p in g["params"]}
        assert in_opt == {id(p) for p in be.adapter.parameters()}
    before = {p: {k: v.clone() for k, v in trainer.backends[p].weight_state().items()} for p in ("a", "b")}
    steps = make_steps(policy_dir(cfg, "a"))
    trainer.train(plan({"a": steps[0], "b": steps[1]}))
    after = {k: v for k, v in a.model.get_base_model().state_dict().items() if "lora_" not in k}
    assert all(torch.equal(after[k], v) for k, v in base_before.items())  # the base never moves
    for p in ("a", "b"):
        now = trainer.backends[p].weight_state()
        assert set(now) == set(before[p]) and all(".lora_" in k for k in now)
        assert all(not torch.equal(now[k], before[p][k]) for k in now)  # every A and B moved
    assert trainer.versions == {"a": 1, "b": 1}
    weights, _ = trainer.export()
    assert set(weights["a"]) == set(before["a"]) and set(weights["b"]) == set(before["b"])


def test_shared_base_trains_each_adapter_as_if_alone(tmp_path):
    """Two adapters on one base, trained in one step, equal each adapter trained on its own base."""
    cfg = lora_config(tmp_path)
    trainer = Trainer(cfg)
    for seed, p in enumerate(("a", "b")):
        randomise(trainer.backends[p].adapter, seed + 1)
    start = {p: {k: v.clone() for k, v in trainer.backends[p].weight_state().items()} for p in ("a", "b")}
    steps = make_steps(policy_dir(cfg, "a"))
    work = {"a": steps[0], "b": steps[2]}
    trainer.train(plan(work))
    for p in ("a", "b"):
        alone = attach_adapters(load_model(policy_dir(cfg, p)), cfg, [p])
        weights = AdapterWeights(alone, p)
        weights.load_state_dict(start[p])
        pc = cfg.policies[p]
        be = TorchBackend(
            alone,
            lr=pc.lr,
            weight_decay=pc.weight_decay,
            grad_clip=cfg.train.grad_clip,
            loss_cfg=loss_config(cfg),
            adapter=weights,
        )
        be.train_step(work[p], total_tokens(work[p]))
        shared = trainer.backends[p].weight_state()
        for k, v in weights.state_dict().items():
            # the same ops in the same order on the same values: bit for bit
            torch.testing.assert_close(shared[k], v, rtol=0, atol=0, msg=k)


def test_checkpoint_keeps_each_adapter_its_own_and_resumes_exactly(tmp_path):
    cfg = lora_config(tmp_path, **{"policies.b.lora": "{r=4, alpha=8.0}"})  # same shapes: a swap would load silently
    trainer = Trainer(cfg)
    randomise(trainer.backends["a"].adapter, 1)
    randomise(trainer.backends["b"].adapter, 2)
    steps = make_steps(policy_dir(cfg, "a"))
    trainer.train(plan({"a": steps[0], "b": steps[1]}))
    folder = trainer.checkpoint(tmp_path / "ck", RunState(1, dict(trainer.versions), None), rank0=True)
    saved = {p: {k: v.clone() for k, v in trainer.backends[p].weight_state().items()} for p in ("a", "b")}
    assert not torch.equal(saved["a"][next(iter(saved["a"]))], saved["b"][next(iter(saved["a"]))])
    for p in ("a", "b"):  # each adapter on its own in peft's format, the merged model beside it
        config, tensors = read_adapter(folder / p / ADAPTER_DIR)
        assert config["r"] == 4 and set(tensors) == set(saved[p])
        assert all(torch.equal(tensors[k], saved[p][k]) for k in tensors)
        assert (folder / p / "model" / "config.json").is_file()
    trainer.train(plan({"a": steps[2], "b": steps[0]}))  # what the resumed run must reproduce
    want = {p: {k: v.clone() for k, v in trainer.backends[p].weight_state().items()} for p in ("a", "b")}

    resumed = Trainer(cfg)
    assert resumed.load(folder).versions == {"a": 1, "b": 1}
    for p in ("a", "b"):
        assert all(torch.equal(resumed.backends[p].weight_state()[k], v) for k, v in saved[p].items()), p
    resumed.train(plan({"a": steps[2], "b": steps[0]}))  # optimizer state restored too: the same next step
    for p in ("a", "b"):
        assert all(torch.equal(resumed.backends[p].weight_state()[k], v) for k, v in want[p].items()), p
    with pytest.raises(CheckpointLoadError, match="adapter of 'a'"):  # a swapped folder is refused, not loaded
        resumed.backends["b"].load_checkpoint(folder / "a")


def test_merged_export_equals_peft_with_adapter(tmp_path):
    cfg = lora_config(tmp_path)
    trainer = Trainer(cfg)
    randomise(trainer.backends["b"].adapter, 3)
    folder = trainer.checkpoint(tmp_path / "ck", RunState(0, dict(trainer.versions), None), rank0=True)
    merged = load_model(folder / "b" / "model").eval()
    peft_model = trainer.backends["b"].model
    trainer.backends["b"].adapter.activate()
    ids = torch.tensor([[5, 9, 13, 21, 7, 3]])
    with torch.no_grad():
        want = peft_model.eval()(input_ids=ids).logits
        got = merged(input_ids=ids).logits
        base = load_model(policy_dir(cfg, "b")).eval()(input_ids=ids).logits
    assert (want - base).abs().max() > 100 * (want - got).abs().max()  # the adapter matters, and is merged
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
