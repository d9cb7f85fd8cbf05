"""Mixed precision in both learner backends, the rollout dtype, and micro-batches on the model's device.

bf16 "mixed" means fp32 master weights and optimizer state, bf16 forward/backward, gradients
accumulated and clipped in fp32 (`learner.backends.base`). Tolerances are in units of bf16's unit
roundoff U = 2^-8 (8 significant bits, round to nearest). The bf16 paths run on CPU autocast and
DeepSpeed's CPU accelerator; the same code ran on CUDA only on the H200 and H100 of docs/gpus.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from deepspeed_cases import EXTRA_CONFIG, LOSS, WEIGHT_DECAY, choose_grad_clip, total_tokens
from test_deepspeed import model_dir, steps, world_of_one  # noqa: F401  (fixtures)

from atgrpo.config import RunConfig
from atgrpo.engines.factory import open_engine, rollout_dtype
from atgrpo.learner.backends import TorchBackend, base
from atgrpo.learner.backends.base import accumulate
from atgrpo.models.folder import load_model
from atgrpo.models.tied import tied_aliases

U = 2.0**-8
"""bf16 unit roundoff."""
SMALL_LR = 1e-6
"""An RL learning rate: an AdamW step (about lr per entry) is far below bf16's spacing at the
weights' scale (2^-15 ~ 3e-5 for |w| >= 2^-8), so a pure-bf16 update rounds back to the old weight."""
RESOLVED = 2.0**-8
"""Weights at least this large cannot move in bf16 by a step of ~SMALL_LR: half their spacing is 2^-16."""


def torch_backend(model_dir: Path, dtype: str, lr: float = SMALL_LR, grad_clip: float = 1e9) -> TorchBackend:
    return TorchBackend(
        load_model(model_dir), lr=lr, weight_decay=WEIGHT_DECAY, grad_clip=grad_clip, loss_cfg=LOSS, dtype=dtype
    )


def ds_backend(model_dir: Path, stage: int, dtype: str, lr: float = SMALL_LR, grad_clip: float = 1e9):
    from atgrpo.learner.backends.deepspeed_backend import DeepSpeedBackend

    return DeepSpeedBackend(
        load_model(model_dir),
        lr=lr,
        weight_decay=WEIGHT_DECAY,
        grad_clip=grad_clip,
        loss_cfg=LOSS,
        zero_stage=stage,
        timeout_s=60,
        extra_config=EXTRA_CONFIG,
        dtype=dtype,
    )


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().float().flatten() for t in tensors])


def masters(backend) -> torch.Tensor:
    """The fp32 master weights of either backend, flat, in parameter order."""
    if isinstance(backend, TorchBackend):
        return flat(backend.model.parameters()).clone()
    from deepspeed.utils import safe_get_full_fp32_param

    return flat(safe_get_full_fp32_param(p) for p in backend.engine.module.parameters()).clone()


def train(backend, steps) -> None:
    for mbs in steps:
        backend.train_step(mbs, total_tokens(mbs))


def test_bf16_gradients_accumulate_in_fp32_within_bf16_rounding(model_dir, steps):
    """The gradient of a step of 4 micro-batches under bf16 autocast lands in fp32 `.grad` and is
    the fp32 gradient up to bf16 compute rounding: every matmul rounds its operands to bf16
    (relative error <= U each); forward and backward chain a few of them on this one-layer model."""
    f, b = torch_backend(model_dir, "float32"), torch_backend(model_dir, "bfloat16")
    for backend in (f, b):
        backend.accumulate(steps[0])
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in b.model.parameters())
    gf, gb = flat(p.grad for p in f.model.parameters()), flat(p.grad for p in b.model.parameters())
    err = float((gb - gf).norm() / gf.norm())
    assert 0.0 < err <= 4 * U, err / U  # > 0: bf16 did compute


def assert_moves_as_fp32(w0: torch.Tensor, fp32_delta: torch.Tensor, delta: torch.Tensor) -> None:
    """`delta` (a mixed-precision run's) is `fp32_delta`, up to entries whose gradient is within
    bf16 compute rounding of zero: AdamW divides every entry by its own RMS, so such an entry's
    update can come out with the other sign (a difference of ~2 lr there, none elsewhere)."""
    big = w0.abs() >= RESOLVED
    moved_f = big & (fp32_delta.abs() >= SMALL_LR / 2)  # moved by the gradient, not by weight decay alone
    assert int(moved_f.sum()) > 1000
    # every resolved weight the fp32 run moved also moved under bf16 compute (pure bf16 moves none)
    assert bool((delta[moved_f] != 0).all())
    assert float((delta - fp32_delta).norm()) <= 0.25 * float(fp32_delta.norm())
    cos = float(delta @ fp32_delta / (delta.norm() * fp32_delta.norm()))
    assert cos >= 0.95


def test_torch_bf16_at_small_lr_moves_weights_as_fp32_does(model_dir, steps):
    f, b = torch_backend(model_dir, "float32"), torch_backend(model_dir, "bfloat16")
    w0 = masters(f)
    for backend in (f, b):
        train(backend, steps)
    assert_moves_as_fp32(w0, masters(f) - w0, masters(b) - w0)


def test_pure_bf16_adamw_would_not_learn(model_dir, steps):
    """The old torch path (bf16 parameters and AdamW state): resolved weights never move at lr 1e-6."""
    model = load_model(model_dir, dtype="bfloat16").train()
    opt = torch.optim.AdamW(model.parameters(), lr=SMALL_LR, weight_decay=WEIGHT_DECAY)
    w0 = flat(model.parameters()).clone()
    for mbs in steps:
        accumulate(model, mbs, LOSS, lambda loss: loss.backward(), {}, device=torch.device("cpu"))
        for p in model.parameters():
            p.grad.mul_(1.0 / total_tokens(mbs))
        opt.step()
        opt.zero_grad(set_to_none=True)
    delta = flat(model.parameters()) - w0
    assert int((delta[w0.abs() >= RESOLVED] != 0).sum()) == 0


def test_deepspeed_zero1_bf16_at_small_lr_moves_masters_as_fp32_does(world_of_one, model_dir, steps):
    f, b = torch_backend(model_dir, "float32"), ds_backend(model_dir, 1, "bfloat16")
    w0, m0 = masters(f), masters(b)
    # DeepSpeed's masters start from the bf16-rounded weights (it casts the module first)
    assert torch.equal(m0, w0.bfloat16().float())
    for backend in (f, b):
        train(backend, steps)
    assert_moves_as_fp32(w0, masters(f) - w0, masters(b) - m0)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_deepspeed_bf16_plan(world_of_one, model_dir, stage):
    """What DeepSpeed 0.19.8 builds for bf16 compute (`deepspeed_config`): fp32 masters and fp32
    gradient accumulation at every stage; never FP16_UnfusedOptimizer's bf16 accumulation."""
    b = ds_backend(model_dir, stage, "bfloat16")
    opt = b.engine.optimizer
    module_dtypes = {p.dtype for p in b.engine.module.parameters()}
    if stage == 0:
        assert type(opt) is torch.optim.AdamW and module_dtypes == {torch.float32}
        return
    assert module_dtypes == {torch.bfloat16}
    assert b.engine.communication_data_type == torch.float32
    if stage == 1:
        assert type(opt).__name__ == "BF16_Optimizer" and opt.grad_acc_dtype == torch.float32
        assert all(g.dtype == torch.float32 for g in opt.fp32_groups_gradients_flat)
    else:
        assert opt.gradient_accumulation_dtype == torch.float32
    assert all(p.dtype == torch.float32 for g in b.engine.basic_optimizer.param_groups for p in g["params"])


def see_outer_autocast_as_on_a_gpu(monkeypatch) -> None:
    """DeepSpeed's `autocast_if_enabled` asks `torch.is_autocast_enabled()` without a device, which
    answers for CUDA only: on a GPU it sees the learner's autocast and turns it off inside
    `engine.forward`. Make it see the CPU's too, so the CPU runs what a GPU runs."""
    real = torch.is_autocast_enabled
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda *a: real(*a) if a else real("cpu") or real("cuda"))


def linear_output_dtypes(module: torch.nn.Module) -> list[torch.dtype]:
    """The dtype of every output of the module's Linear layers, recorded from now on (not the
    output layer's: during a step it returns the fp32 scores, `output_head`)."""
    seen: list[torch.dtype] = []
    for name, m in module.named_modules():
        if type(m) is torch.nn.Linear and not name.endswith("lm_head"):
            m.register_forward_hook(lambda _m, _a, out: seen.append(out.dtype))
    return seen


def test_deepspeed_zero0_bf16_computes_in_bf16_where_deepspeed_turns_autocast_off(
    world_of_one, model_dir, steps, monkeypatch
):
    """ZeRO-0 computes fp32 parameters under autocast; on a GPU DeepSpeed's engine switched that
    autocast off and the step ran in fp32 (found on an H100: 5x slower, no bf16 gap)."""
    see_outer_autocast_as_on_a_gpu(monkeypatch)
    b = ds_backend(model_dir, 0, "bfloat16")
    seen = linear_output_dtypes(b.engine.module)
    b.train_step(steps[0], total_tokens(steps[0]))
    assert seen and set(seen) == {torch.bfloat16}
    assert not torch.is_autocast_enabled("cpu")  # entered inside the forward, and left again


def test_grad_norm_and_clipping_agree_across_backends_and_stages(world_of_one, model_dir, steps):
    """bf16 compute, one unclipped step and one clipped: every backend and ZeRO stage reports the
    norm of the normalised fp32 gradient (within bf16 compute rounding of each other: ZeRO 1-3 run a
    bf16 module, the others autocast), and the update applies exactly the clipped gradient."""
    grad_clip = choose_grad_clip(model_dir, steps)
    runs = {}
    for name in ("torch", 0, 1, 2, 3):
        b = (
            torch_backend(model_dir, "bfloat16", grad_clip=grad_clip)
            if name == "torch"
            else ds_backend(model_dir, name, "bfloat16", grad_clip=grad_clip)
        )
        client = b.optimizer if name == "torch" else b.engine.basic_optimizer
        applied: list[float] = []

        def record(opt, args, kwargs, applied=applied) -> None:  # runs after the backend's own pre-step hook
            grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
            applied.append(float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))))

        client.register_step_pre_hook(record)
        norms = [b.train_step(mbs, total_tokens(mbs))["grad_norm"] for mbs in steps[:2]]
        runs[name] = norms
        assert norms[0] < grad_clip < norms[1]
        assert applied[0] == pytest.approx(norms[0], rel=1e-5)  # not clipped: the gradient as reported
        assert applied[1] == pytest.approx(grad_clip, rel=1e-5)  # clipped to the threshold
    for name, norms in runs.items():
        for got, want in zip(norms, runs["torch"]):
            assert got == pytest.approx(want, rel=2 * U), name


def test_export_is_the_master_in_the_compute_dtype(model_dir, steps):
    b = torch_backend(model_dir, "bfloat16", lr=1e-3)
    b.train_step(steps[0], total_tokens(steps[0]))
    out = b.export_weights()
    for name, master in b.published_state().items():  # each tied tensor once (`models.tied`)
        assert master.dtype == torch.float32
        assert out[name].dtype == torch.bfloat16 and out[name].device.type == "cpu"
        assert torch.equal(out[name], master.bfloat16())
    assert {v.dtype for v in torch_backend(model_dir, "float32").export_weights().values()} == {torch.float32}


def test_backend_refuses_float16(model_dir):
    with pytest.raises(ValueError, match="compute dtype"):
        torch_backend(model_dir, "float16")


class _Stop(Exception):
    pass


def test_accumulate_moves_micro_batches_to_the_models_device(model_dir, steps, monkeypatch):
    """A model on `meta` (a device no micro-batch starts on): the loss sees every tensor of every
    micro-batch there, both layouts. The HF forward itself cannot run on meta, so the loss's input
    builder is replaced by a probe."""
    import numpy as np
    from test_shared_prefix import make_samples

    from atgrpo.learner.batching import build_microbatches

    samples = make_samples(3)
    prefixed = build_microbatches(samples, np.ones(len(samples)), max_tokens=64, pad_id=0, share_prefix=True)
    assert prefixed[0].prefix is not None
    b = TorchBackend(load_model(model_dir).to("meta"), lr=1e-3, weight_decay=0.0, grad_clip=1.0, loss_cfg=LOSS)
    seen: list[set[torch.device]] = []

    def probe(model, mb, cfg, ref_model, proximal=None):
        seen.append({t.device for t in mb.tensors().values()})
        raise _Stop

    monkeypatch.setattr(base, "loss_inputs", probe)
    for mbs in (steps[0][:1], prefixed[:1]):
        with pytest.raises(_Stop):
            b.accumulate(mbs)
    assert seen == [{torch.device("meta")}] * 2


def test_rollout_dtype_follows_train_unless_set(model_dir):
    cfg = RunConfig.model_validate({"train": {"dtype": "bfloat16"}})
    assert rollout_dtype(cfg) == "bfloat16"
    cfg = RunConfig.model_validate({"train": {"dtype": "float32"}, "rollout": {"dtype": "bfloat16"}})
    assert rollout_dtype(cfg) == "bfloat16"
    engine, _ = open_engine(model_dir, cfg.rollout, policy="p", dtype=rollout_dtype(cfg))
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    # fp32 weights from an fp32 learner are cast as the engine copies them in
    weights = torch_backend(model_dir, "float32").export_weights()
    engine.load_weights(1, weights)
    aliases = tied_aliases(engine.model)  # a tied head is published once, under the name it shares
    for name, p in engine.model.state_dict().items():
        assert torch.equal(p, weights[aliases.get(name, name)].to(p.dtype)), name
