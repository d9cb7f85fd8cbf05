"""The warm start of LoRA policies trains their adapters on their own roles' demonstrations, never the
shared base; the learner starts each adapter from its warm start (version 0), its KL reference is that
adapter, and a resumed run gets the adapter back exactly. One smoke on real SmolLM2 weights."""

from __future__ import annotations

import json

import pytest
import torch
from deepspeed_cases import make_steps, total_tokens

from atgrpo.config import load_config
from atgrpo.learner.backends.base import kl_reference
from atgrpo.learner.batching import pair_microbatches
from atgrpo.learner.checkpoints import RunState
from atgrpo.learner.logprobs import token_logprobs
from atgrpo.learner.lora import AdapterReference, BaseReference
from atgrpo.learner.packing import OptimizerStep, RankPlan
from atgrpo.learner.trainer import Trainer
from atgrpo.models.adapters import ADAPTER_WEIGHTS, read_adapter
from atgrpo.models.folder import load_model
from atgrpo.models.peft_models import base_state
from atgrpo.models.tiny import build_tiny_model
from atgrpo.paths import policy_dir, warm_adapter_dir
from atgrpo.warmstart import demos, prepare
from atgrpo.warmstart.prepare import prepare_models

TINY = "{hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2, num_kv_heads=1}"


def warm_config(tmp_path, *extra: str, b_lora: bool = True):
    """Two LoRA policies (plan -> a, tool -> b) on one built tiny base, warm-started for 3 steps
    (`b_lora` False: b is a full policy)."""
    return load_config(
        None,
        [
            f"run.out_dir='{tmp_path / 'run'}'",
            "warmstart.steps=3",
            "warmstart.batch_size=4",
            "warmstart.lr=1e-2",
            "role_policy={plan='a', tool='b'}",
            f"policies.a.tiny={TINY}",
            f"policies.b.tiny={TINY}",
            "policies.a.lora={r=4, alpha=8.0}",
            *(["policies.b.lora={r=4, alpha=8.0}"] if b_lora else []),
            *extra,
        ],
    )


def built_base(cfg, p, tmp_path):
    """The tiny base as built, never warm-started: the reference the saved base must equal bit for bit."""
    folder = tmp_path / f"built-{p}"
    build_tiny_model(cfg.policies[p].tiny, folder)
    return load_model(folder).state_dict()


def same(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_lora_warm_start_is_no_longer_refused():
    cfg = load_config(None, ["policies.shared.lora={}"])  # planpath warm-starts by default: the adapter now
    assert cfg.warmstart.steps > 0 and cfg.policies["shared"].lora is not None


def test_warm_start_trains_each_adapter_on_its_own_roles_and_never_the_base(tmp_path, monkeypatch):
    cfg = warm_config(tmp_path)
    asked: list[tuple[str, ...]] = []
    make = demos.make_demos

    def spy(*args, roles=None, **kwargs):
        asked.append(tuple(roles))
        return make(*args, roles=roles, **kwargs)

    monkeypatch.setattr(demos, "make_demos", spy)
    prepare_models(cfg)
    assert asked == [("plan",)] * 3 + [("tool",)] * 3  # a: the plan role's demos, b: the tool role's
    for p in ("a", "b"):  # the base folder is the built model, bit for bit
        assert same(load_model(policy_dir(cfg, p)).state_dict(), built_base(cfg, p, tmp_path)), p
    adapters = {p: read_adapter(warm_adapter_dir(cfg, p))[1] for p in ("a", "b")}
    for p, tensors in adapters.items():
        b_mats = [t for k, t in tensors.items() if ".lora_B." in k]
        assert b_mats and all(t.abs().max() > 0 for t in b_mats), p  # moved from peft's B = 0
    a, b = adapters["a"], adapters["b"]
    assert set(a) == set(b) and all(not torch.equal(a[k], b[k]) for k in a if ".lora_B." in k)

    # The learner starts from them: the base as built, each adapter exactly as saved (version 0).
    trainer = Trainer(cfg)
    model = trainer.backends["a"].model
    assert trainer.backends["b"].model is model
    want_base = built_base(cfg, "a", tmp_path)
    got_base = base_state(model)
    assert set(got_base) == set(want_base) and all(torch.equal(got_base[k], want_base[k]) for k in want_base)
    weights, _ = trainer.export()  # what the hub publishes as version 0
    for p in ("a", "b"):
        assert same(trainer.backends[p].weight_state(), adapters[p]) and same(weights[p], adapters[p]), p


def test_a_second_prepare_keeps_the_warm_start_and_a_resume_restores_the_adapter(tmp_path, monkeypatch):
    cfg = warm_config(tmp_path)
    prepare_models(cfg)
    saved = (warm_adapter_dir(cfg, "a") / ADAPTER_WEIGHTS).read_bytes()
    monkeypatch.setattr(prepare, "warm_start", lambda *a, **k: pytest.fail("warm-started twice"))
    prepare_models(cfg)  # a restarted run: the folders are there, nothing is trained again
    assert (warm_adapter_dir(cfg, "a") / ADAPTER_WEIGHTS).read_bytes() == saved

    trainer = Trainer(cfg)
    steps = make_steps(policy_dir(cfg, "a"))
    trainer.train(
        RankPlan(
            {
                "a": [OptimizerStep(steps[0], total_tokens(steps[0]))],
                "b": [OptimizerStep(steps[1], total_tokens(steps[1]))],
            }
        )
    )
    folder = trainer.checkpoint(tmp_path / "ck", RunState(1, dict(trainer.versions), None), rank0=True)
    trained = {p: {k: v.clone() for k, v in trainer.backends[p].weight_state().items()} for p in ("a", "b")}
    start = read_adapter(warm_adapter_dir(cfg, "a"))[1]
    assert not same(trained["a"], start)  # the step moved it away from the warm start

    resumed = Trainer(cfg)  # starts from the warm start, then the checkpoint replaces it
    assert same(resumed.backends["a"].weight_state(), start)
    assert resumed.load(folder).versions == {"a": 1, "b": 1}
    for p in ("a", "b"):
        assert same(resumed.backends[p].weight_state(), trained[p]), p


def test_mixed_group_warm_starts_the_full_model_and_the_adapter(tmp_path):
    cfg = warm_config(tmp_path, b_lora=False)
    assert cfg.policies["b"].lora is None
    prepare_models(cfg)
    assert same(load_model(policy_dir(cfg, "a")).state_dict(), built_base(cfg, "a", tmp_path))
    assert not same(load_model(policy_dir(cfg, "b")).state_dict(), built_base(cfg, "b", tmp_path))  # trained in full
    assert (warm_adapter_dir(cfg, "a") / ADAPTER_WEIGHTS).is_file() and not warm_adapter_dir(cfg, "b").exists()
    trainer = Trainer(cfg)
    assert trainer.backends["a"].adapter is not None and trainer.backends["b"].adapter is None


def logps(model, ids):
    (mb,) = pair_microbatches([(ids[:4], ids[4:])], max_tokens=64, pad_id=0)
    with torch.no_grad():
        return token_logprobs(model, mb, 1.0)[0]


def test_kl_reference_of_a_warm_started_adapter_is_that_adapter(tmp_path):
    cfg = warm_config(tmp_path, "train.kl_coef=0.1")
    prepare_models(cfg)
    trainer = Trainer(cfg)
    be = trainer.backends["a"]
    assert isinstance(be.ref_model, AdapterReference)
    ids = [5, 9, 13, 21, 7, 3, 11, 8]
    be.adapter.activate()
    be.model.eval()
    start = logps(be.model, ids)
    torch.testing.assert_close(logps(be.ref_model, ids), start, rtol=0, atol=0)
    with be.model.disable_adapter():
        base = logps(be.model, ids)
    assert (start - base).abs().max() > 1e-4  # the warm start matters: the base would be another reference
    steps = make_steps(policy_dir(cfg, "a"))
    trainer.train(
        RankPlan(
            {
                "a": [OptimizerStep(steps[0], total_tokens(steps[0]))],
                "b": [OptimizerStep([], 1)],
            }
        )
    )
    be.model.eval()
    be.adapter.activate()
    assert (logps(be.model, ids) - start).abs().max() > 1e-6  # the policy moved ...
    torch.testing.assert_close(logps(be.ref_model, ids), start, rtol=0, atol=0)  # ... its reference did not
    # The reference forward leaves the policy's adapter active and trainable, its own copy frozen.
    assert list(be.model.active_adapters) == [be.adapter.name]
    assert all(p.requires_grad for p in be.adapter.parameters())
    assert not any(p.requires_grad for n, p in be.model.named_parameters() if ".ref_" in n)
    # The reference's copy is never published: the export is the adapter's tensors alone.
    assert set(trainer.export()[0]["a"]) == set(read_adapter(warm_adapter_dir(cfg, "a"))[1])
    # Without a warm start the reference stays the base with the adapters off.
    cold = warm_config(tmp_path / "cold", "train.kl_coef=0.1", "warmstart.steps=0")
    prepare_models(cold)
    cold_trainer = Trainer(cold)
    assert isinstance(cold_trainer.backends["a"].ref_model, BaseReference)
    assert isinstance(
        kl_reference(
            cold_trainer.backends["a"].model,
            cold_trainer.backends["a"].adapter,
            torch.float32,
        ),
        BaseReference,
    )


@pytest.mark.integration
def test_smollm2_adapter_warm_start_moves_lora_b(smollm2, tmp_path):
    """A few warm-start steps of an adapter on the real SmolLM2 weights (shared-prefix layout, real
    vocabulary): lora_B leaves zero, and the base folder (the imported model) is used as it is."""
    cfg = load_config(
        None,
        [
            f"run.out_dir='{tmp_path / 'run'}'",
            f"policies.shared.path={json.dumps(str(smollm2))}",
            "policies.shared.lora={r=8, alpha=16.0}",
            "warmstart.pretrained=true",
            "warmstart.steps=2",
            "warmstart.batch_size=2",
            "warmstart.lr=3e-3",
            "task.prompts='compact'",
            "task.turns=1",
            "task.env={width=4, height=4}",
        ],
    )
    assert policy_dir(cfg, "shared") == smollm2  # no copy of the base: it is never trained
    prepare_models(cfg)
    tensors = read_adapter(warm_adapter_dir(cfg, "shared"))[1]
    b_mats = [t for k, t in tensors.items() if ".lora_B." in k]
    assert b_mats and all(t.abs().max() > 0 for t in b_mats)
    assert not (tmp_path / "run" / "models").exists()
