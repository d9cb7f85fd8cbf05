"""LoRA policies under DeepSpeed (ZeRO 0-2, a world of one on CPU), and the KL reference of a LoRA
policy (the base with the adapters off) in both backends.

Two policies share one PeftModel; each has its own DeepSpeed engine over an `AdapterModule`.
One step of one policy must move its adapter as TorchBackend would and leave the base and the
other policy's adapter bit for bit as they were.
"""

from __future__ import annotations

import pytest
import torch
from deepspeed_cases import make_steps, total_tokens
from test_deepspeed import assert_metrics_close, ds_backend, world_of_one  # noqa: F401  (fixture)
from test_lora import lora_config, plan, randomise
from test_lora_warmstart import warm_config
from test_precision import linear_output_dtypes, see_outer_autocast_as_on_a_gpu

from atgrpo.errors import CheckpointLoadError
from atgrpo.learner.backends import TorchBackend, make_backend
from atgrpo.learner.logprobs import loss_inputs, token_logprobs
from atgrpo.learner.lora import AdapterReference, load_shared_bases
from atgrpo.learner.trainer import Trainer, loss_config
from atgrpo.models.folder import load_model
from atgrpo.paths import policy_dir
from atgrpo.warmstart.prepare import prepare_models

LR = 1e-3
FP32_EPS = torch.finfo(torch.float32).eps
POLICIES = ("a", "b")


def group(cfg, backend: str, zero_stage: int = 0, dtype: str = "float32"):
    """Both policies' backends on one freshly loaded shared base, adapters randomised (seeds 1, 2)
    before any backend takes them (ZeRO copies its fp32 masters at initialisation)."""
    adapters = load_shared_bases(cfg, {p: policy_dir(cfg, p) for p in POLICIES}, "cpu")
    for seed, p in enumerate(POLICIES, start=1):
        randomise(adapters[p], seed)
    train = cfg.train.model_copy(update={"backend": backend, "zero_stage": zero_stage, "dtype": dtype})
    return {
        p: make_backend(
            adapters[p].model,
            train,
            cfg.policies[p].lr,
            cfg.policies[p].weight_decay,
            loss_config(cfg),
            adapter=adapters[p],
        )
        for p in POLICIES
    }


def frozen_state(model) -> dict[str, torch.Tensor]:
    """Every tensor of the shared model, base and adapters, copied."""
    return {k: v.clone() for k, v in model.state_dict().items()}


def close_to_fp32_rounding(
    got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], start: dict[str, torch.Tensor]
) -> None:
    """Adam's first step moves each entry by lr * g / (|g| + eps): rounding in the gradient (another
    summation order under ZeRO) barely changes it, so the two updates agree to a few fp32 roundings
    of the values involved, |w| and lr. A wrong or missing gradient moves an entry by ~lr instead."""
    assert got.keys() == want.keys()
    for k in want:
        tol = 8 * FP32_EPS * (start[k].abs() + LR)
        assert ((got[k] - want[k]).abs() <= tol).all(), (k, (got[k] - want[k]).abs().max())
        assert ((want[k] - start[k]).abs() > 0.5 * LR).float().mean() > 0.9, k  # the step moved (nearly) every entry


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_one_step_matches_torch_and_touches_nothing_else(world_of_one, tmp_path, stage):
    cfg = lora_config(tmp_path, **{"policies.a.lr": LR, "policies.b.lr": LR})
    steps = make_steps(policy_dir(cfg, "a"))
    work = {"a": steps[0][:2], "b": steps[1][:2]}  # two micro-batches each: accumulation, in little time
    ref, ds = group(cfg, "torch"), group(cfg, "deepspeed", stage)
    shared = ds["a"].model
    assert ds["b"].model is shared and {id(p) for p in ds["a"].engine.module.parameters()} == {
        id(p) for p in ds["a"].adapter.parameters()
    }  # the engine owns the adapter, not the base
    for p, other in (("a", "b"), ("b", "a")):
        start = {k: v.clone() for k, v in ds[p].export_weights().items()}
        before = frozen_state(shared)
        want = ref[p].train_step(work[p], total_tokens(work[p]))
        got = ds[p].train_step(work[p], total_tokens(work[p]))
        assert_metrics_close(got, want)  # loss, and grad_norm: the gradient's scale
        close_to_fp32_rounding(ds[p].export_weights(), ref[p].export_weights(), start)
        moved = {k for k, v in frozen_state(shared).items() if not torch.equal(v, before[k])}
        # its own adapter only: the base and the other policy's adapter are bit for bit as they were
        assert moved and all(f".{ds[p].adapter.name}." in k for k in moved), sorted(moved)[:4]
        assert not any(f".{ds[other].adapter.name}." in k for k in moved)


def test_bf16_lora_computes_in_bf16_where_deepspeed_turns_autocast_off(world_of_one, tmp_path, monkeypatch):
    """A LoRA policy's engine computes its fp32 base and adapter under autocast at every stage; on
    a GPU DeepSpeed's engine turned that autocast off (`test_precision`, the same stand-in)."""
    see_outer_autocast_as_on_a_gpu(monkeypatch)
    cfg = lora_config(tmp_path)
    ds = group(cfg, "deepspeed", 2, "bfloat16")
    seen = linear_output_dtypes(ds["a"].model)  # the shared base's layers and the adapters'
    work = make_steps(policy_dir(cfg, "a"))[0][:1]
    ds["a"].train_step(work, total_tokens(work))
    assert seen and set(seen) == {torch.bfloat16}


def test_streamed_steps_of_the_group_interleave(world_of_one, tmp_path):
    """The trainer accumulates each policy's chunks in turn (a streamed step): a's backward, then
    b's, then a's again, and only then the updates. Each engine must still apply its own gradient."""
    cfg = lora_config(tmp_path, **{"policies.a.lr": LR, "policies.b.lr": LR})
    steps = make_steps(policy_dir(cfg, "a"))
    work = {"a": steps[0], "b": steps[2]}
    ref, ds = group(cfg, "torch"), group(cfg, "deepspeed", 2)
    start = {p: {k: v.clone() for k, v in ds[p].export_weights().items()} for p in POLICIES}
    for half in (slice(0, 2), slice(2, None)):
        for p in POLICIES:
            ds[p].accumulate(work[p][half])
    for p in POLICIES:
        assert_metrics_close(
            ds[p].finish_step(total_tokens(work[p])), ref[p].train_step(work[p], total_tokens(work[p]))
        )
        close_to_fp32_rounding(ds[p].export_weights(), ref[p].export_weights(), start[p])


def test_checkpoint_round_trip_is_exact_and_refuses_a_swapped_folder(world_of_one, tmp_path):
    cfg = lora_config(tmp_path, **{"policies.b.lora": "{r=4, alpha=8.0}"})  # same shapes: a swap would load silently
    steps = make_steps(policy_dir(cfg, "a"))
    run = group(cfg, "deepspeed", 1)
    for p, mbs in zip(POLICIES, steps):
        run[p].train_step(mbs, total_tokens(mbs))
        run[p].save_checkpoint(tmp_path / "ck" / p)
    saved = {p: {k: v.clone() for k, v in run[p].weight_state().items()} for p in POLICIES}
    for p in POLICIES:  # what the resumed run must reproduce: the optimizer state matters too
        run[p].train_step(steps[2], total_tokens(steps[2]))
    want = {p: run[p].weight_state() for p in POLICIES}

    resumed = group(cfg, "deepspeed", 1)  # other random adapters until loaded
    for p in POLICIES:
        resumed[p].load_checkpoint(tmp_path / "ck" / p)
        assert all(torch.equal(resumed[p].weight_state()[k], v) for k, v in saved[p].items()), p
    for p in POLICIES:
        resumed[p].train_step(steps[2], total_tokens(steps[2]))
        assert all(torch.equal(resumed[p].weight_state()[k], v) for k, v in want[p].items()), p
    with pytest.raises(CheckpointLoadError, match="adapter of 'a'"):
        resumed["b"].load_checkpoint(tmp_path / "ck" / "a")
    full = ds_backend(policy_dir(cfg, "a"), 1, 1.0)
    full.save_checkpoint(tmp_path / "ck" / "full")
    with pytest.raises(CheckpointLoadError, match="full model"):
        resumed["a"].load_checkpoint(tmp_path / "ck" / "full")
    with pytest.raises(CheckpointLoadError, match="adapter of 'b'"):
        full.load_checkpoint(tmp_path / "ck" / "b")


def test_zero3_with_lora_is_refused(tmp_path):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="ZeRO-3 partitions parameters through hooks"):
        lora_config(tmp_path, **{"train.backend": "'deepspeed'", "train.zero_stage": 3})
    cfg = lora_config(tmp_path)
    adapters = load_shared_bases(cfg, {p: policy_dir(cfg, p) for p in POLICIES}, "cpu")
    train = cfg.train.model_copy(update={"backend": "deepspeed", "zero_stage": 3})
    with pytest.raises(ValueError, match="ZeRO-3 partitions parameters through hooks"):  # before any collective
        make_backend(adapters["a"].model, train, LR, 0.0, loss_config(cfg), adapter=adapters["a"])


@pytest.mark.parametrize("backend", ["torch", "deepspeed"])
def test_kl_reference_is_the_base_with_adapters_off(world_of_one, tmp_path, backend):
    cfg = lora_config(
        tmp_path,
        **{
            "train.kl_coef": 0.5,
            "train.backend": f"'{backend}'",
            "train.zero_stage": 2,
            "policies.a.lr": LR,
        },
    )
    trainer = Trainer(cfg)  # peft's start: B = 0, each policy is the base
    be = trainer.backends["a"]
    assert (type(be) is TorchBackend) == (backend == "torch") and be.ref_model is not None
    base = load_model(policy_dir(cfg, "a")).eval()  # a copy of the base, loaded on its own
    base_before = {k: v.clone() for k, v in base.state_dict().items()}
    steps = make_steps(policy_dir(cfg, "a"))
    mb = steps[1][0]
    lcfg = loss_config(cfg)

    def kl_and_ref():
        be.adapter.activate()
        policy = be.engine if backend == "deepspeed" else be.model
        with torch.no_grad():
            got = loss_inputs(policy, mb, lcfg, be.ref_model)
        rows = mb.loss_mask[:, 1:]
        want, _ = token_logprobs(base, mb, lcfg.temperature, rows=rows)
        torch.testing.assert_close(got.ref_logp, want)  # one computation on equal weights: fp32 rounding at most
        log_r = (got.ref_logp - got.logp)[rows]
        return float((log_r.exp() - log_r - 1).sum())

    assert kl_and_ref() == 0.0  # B = 0: the adapter adds exact zeros
    for i in range(3):
        trainer.train(plan({"a": steps[i][:2]}))  # b takes empty steps
    assert kl_and_ref() > 0.0  # the policy left its reference, which stayed the base
    shared = {
        k.replace(".base_layer.", "."): v
        for k, v in be.model.get_base_model().state_dict().items()
        if ".lora_" not in k
    }
    assert all(torch.equal(shared[k], v) for k, v in base_before.items())  # the base never moved


@pytest.mark.parametrize("backend", ["torch", "deepspeed"])
def test_kl_reference_of_a_warm_started_adapter_stays_that_adapter(world_of_one, tmp_path, backend):
    """A warm-started adapter's reference is the adapter as warm-started (learner.lora.AdapterReference),
    also when DeepSpeed owns the adapter's parameters: equal to the policy at the start, unmoved by steps."""
    cfg = warm_config(
        tmp_path, "train.kl_coef=0.5", f"train.backend='{backend}'", "train.zero_stage=2", f"policies.a.lr={LR}"
    )
    prepare_models(cfg)
    trainer = Trainer(cfg)
    be = trainer.backends["a"]
    assert isinstance(be.ref_model, AdapterReference)
    steps = make_steps(policy_dir(cfg, "a"))
    mb = steps[1][0]
    lcfg = loss_config(cfg)
    rows = mb.loss_mask[:, 1:]

    def ref_and_policy():
        be.adapter.activate()
        with torch.no_grad():
            got = loss_inputs(be.engine if backend == "deepspeed" else be.model, mb, lcfg, be.ref_model)
        return got.ref_logp[rows], got.logp[rows]

    ref0, start = ref_and_policy()
    torch.testing.assert_close(ref0, start)  # the reference is where the policy starts
    for i in range(3):
        trainer.train(plan({"a": steps[i][:2]}))
    ref1, now = ref_and_policy()
    assert (now - start).abs().max() > 1e-4  # the policy moved ...
    assert torch.equal(ref1, ref0)  # ... its reference did not
