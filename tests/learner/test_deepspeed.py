"""DeepSpeedBackend on CPU over gloo, against a single-process TorchBackend on the whole batch.

In this process: a world of one (ZeRO 0-3: same weights and metrics as TorchBackend; an empty share;
checkpoint resume). In two real processes under `torch.distributed.run` (deepspeed_worker.py): each
rank trains its share of the micro-batches, and the ranks must agree exactly with each other and,
to fp32 rounding, with TorchBackend on the full batch (gradients are summed across ranks, not
averaged). Every child process has a timeout, so a hung collective fails the test.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from deepspeed_cases import (
    EXTRA_CONFIG,
    LOSS,
    LR,
    STREAM_CHUNKS,
    WEIGHT_DECAY,
    build_model,
    checksum,
    choose_grad_clip,
    make_steps,
    to_dicts,
    total_tokens,
)

from atgrpo.learner.backends import TorchBackend
from atgrpo.learner.distributed import ENV_KEYS, free_port
from atgrpo.learner.packing import OptimizerStep
from atgrpo.learner.proximal import train_policy_step
from atgrpo.models.folder import load_model

HERE = Path(__file__).resolve().parent
WORKER = HERE / "deepspeed_worker.py"
TWO_RANK_TIMEOUT_S = 600
STAGES = (0, 1, 2, 3)
ATOL, RTOL = 1e-2 * LR, 1e-5
"""Weights are compared after Adam steps. Adam divides each gradient entry by its own running RMS, so
the rounding of a different reduction order (ZeRO-3 partitions, oneDNN kernels that differ between
AVX2 and AVX-512/AMX machines) is not damped for entries whose gradient is near zero: measured up
to 1.6e-6 on weights of 0.06. A real error moves an entry by a sizable fraction of one Adam step
(~LR per step), far above 1% of it."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def steps(model_dir):
    return make_steps(model_dir)


@pytest.fixture(scope="module")
def grad_clip(model_dir, steps) -> float:
    return choose_grad_clip(model_dir, steps)


@pytest.fixture(scope="module")
def world_of_one():
    """This process as a world of one; the process group and the env defaults are undone afterwards."""
    saved = {k: os.environ.get(k) for k in (*ENV_KEYS, "DS_ACCELERATOR")}
    yield
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    groups = sys.modules.get("deepspeed.utils.groups")
    if groups is not None:  # DeepSpeed caches groups of the group just destroyed; the next module makes a new one
        groups._WORLD_GROUP = groups._DATA_PARALLEL_GROUP = groups._ZERO_PARAM_INTRA_PARALLEL_GROUP = None
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def ds_backend(model_dir: Path, stage: int, grad_clip: float, loss_cfg=LOSS):
    from atgrpo.learner.backends.deepspeed_backend import DeepSpeedBackend

    return DeepSpeedBackend(
        load_model(model_dir),
        lr=LR,
        weight_decay=WEIGHT_DECAY,
        grad_clip=grad_clip,
        loss_cfg=loss_cfg,
        zero_stage=stage,
        timeout_s=60,
        extra_config=EXTRA_CONFIG,
    )


def torch_backend(model_dir: Path, grad_clip: float, loss_cfg=LOSS) -> TorchBackend:
    return TorchBackend(load_model(model_dir), lr=LR, weight_decay=WEIGHT_DECAY, grad_clip=grad_clip, loss_cfg=loss_cfg)


def snapshot(backend) -> dict[str, torch.Tensor]:
    # TorchBackend.export_weights aliases the live CPU parameters; copy before training on
    return {k: v.clone() for k, v in backend.export_weights().items()}


def assert_weights_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].shape == want[k].shape and got[k].dtype == torch.float32, k
        assert got[k].is_contiguous() and got[k].device.type == "cpu", k
        torch.testing.assert_close(got[k], want[k], atol=ATOL, rtol=RTOL, msg=k)


def assert_metrics_close(got: dict[str, float], want: dict[str, float]) -> None:
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-5, abs=1e-7), k


def assert_weights_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.integration
def test_atgrpo_learner_imports_without_deepspeed():
    code = (
        "import sys, atgrpo.learner.backends, atgrpo.learner.backends.torch_backend, atgrpo.learner.distributed;"
        "assert 'deepspeed' not in sys.modules, 'deepspeed imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("stage", STAGES)
def test_world_of_one_matches_torch_backend(world_of_one, model_dir, steps, grad_clip, stage):
    ref, ds = torch_backend(model_dir, grad_clip), ds_backend(model_dir, stage, grad_clip)
    import deepspeed.comm.comm as ds_comm

    assert ds_comm.cdb.shm_comm_op is None  # no JIT-compiled shared-memory all-reduce
    norms = []
    for mbs in steps[:2]:
        want = ref.train_step(mbs, total_tokens(mbs))
        got = ds.train_step(mbs, total_tokens(mbs))
        assert_metrics_close(got, want)
        assert_weights_close(ds.export_weights(), snapshot(ref))
        norms.append(want["grad_norm"])
    assert norms[0] < grad_clip < norms[1]  # step 2 clipped, step 1 not


@pytest.mark.parametrize("stage", STAGES)
def test_the_lr_set_before_a_step_is_the_one_zero_applies(world_of_one, model_dir, steps, grad_clip, stage):
    """`set_lr` reaches the groups the update reads under every stage: the weights follow the torch
    backend's under the same lr schedule, and differ from a run left at the constructor's lr."""
    ref, ds = torch_backend(model_dir, grad_clip), ds_backend(model_dir, stage, grad_clip)
    for lr, mbs in zip((LR * 0.5, LR * 0.25), steps[:2]):
        ref.set_lr(lr)
        ds.set_lr(lr)
        ref.train_step(mbs, total_tokens(mbs))
        ds.train_step(mbs, total_tokens(mbs))
        assert_weights_close(ds.export_weights(), snapshot(ref))
    constant = torch_backend(model_dir, grad_clip)
    for mbs in steps[:2]:
        constant.train_step(mbs, total_tokens(mbs))
    moved = snapshot(constant)
    assert any(not torch.allclose(moved[k], v, atol=ATOL, rtol=RTOL) for k, v in ds.export_weights().items())


def test_kl_and_entropy_terms_match_under_zero3(world_of_one, model_dir, steps, grad_clip):
    """The KL reference stays a whole frozen replica beside the partitioned policy."""
    cfg = dataclasses.replace(LOSS, kl_coef=0.1, entropy_coef=0.01)
    ref, ds = torch_backend(model_dir, grad_clip, cfg), ds_backend(model_dir, 3, grad_clip, cfg)
    for mbs in steps[:2]:
        assert_metrics_close(ds.train_step(mbs, total_tokens(mbs)), ref.train_step(mbs, total_tokens(mbs)))
        assert_weights_close(ds.export_weights(), snapshot(ref))


@pytest.mark.parametrize("stage", [1, 3])
def test_empty_share_is_an_update_with_zero_gradient(world_of_one, model_dir, steps, grad_clip, stage):
    """No micro-batch: one dummy pass, metrics zero, and the optimizer still steps (momentum, decay)."""
    ref, ds = torch_backend(model_dir, grad_clip), ds_backend(model_dir, stage, grad_clip)
    for b in (ref, ds):
        b.train_step(steps[0], total_tokens(steps[0]))
    before = ds.export_weights()
    # TorchBackend under torch.distributed (initialised by the DeepSpeed backend) zero-fills and steps too
    ref.train_step([], 0)
    metrics = ds.train_step([], 0)
    assert metrics == {
        "loss": 0.0,
        "clip_frac": 0.0,
        "logprob_mismatch": 0.0,
        "is_weight": 0.0,
        "grad_norm": 0.0,
        "tokens": 0.0,
    }
    after = ds.export_weights()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert_weights_close(after, snapshot(ref))


@pytest.mark.parametrize("stage", [1, 3])
def test_checkpoint_resume_is_exact(world_of_one, model_dir, steps, grad_clip, tmp_path, stage):
    run = ds_backend(model_dir, stage, grad_clip)
    run.train_step(steps[0], total_tokens(steps[0]))
    run.save_checkpoint(tmp_path / "ckpt")
    unstopped_metrics = run.train_step(steps[1], total_tokens(steps[1]))
    unstopped = run.export_weights()

    fresh = ds_backend(model_dir, stage, grad_clip)
    fresh.load_checkpoint(tmp_path / "ckpt")
    assert fresh.train_step(steps[1], total_tokens(steps[1])) == unstopped_metrics
    assert_weights_equal(fresh.export_weights(), unstopped)


def test_make_backend_follows_train_section(world_of_one, model_dir):
    from atgrpo.config import TrainSection
    from atgrpo.learner.backends import make_backend
    from atgrpo.learner.backends.deepspeed_backend import DeepSpeedBackend

    torch_b = make_backend(load_model(model_dir), TrainSection(backend="torch"), LR, WEIGHT_DECAY, LOSS)
    ds_b = make_backend(load_model(model_dir), TrainSection(backend="deepspeed", zero_stage=2), LR, WEIGHT_DECAY, LOSS)
    assert type(torch_b) is TorchBackend
    assert isinstance(ds_b, DeepSpeedBackend) and ds_b.zero_stage == 2 and ds_b.grad_clip == TrainSection().grad_clip


def test_load_checkpoint_missing_raises(world_of_one, model_dir, tmp_path):
    with pytest.raises(FileNotFoundError):
        ds_backend(model_dir, 1, 1.0).load_checkpoint(tmp_path / "nothing")


# ---- two ranks -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory, model_dir, steps, grad_clip):
    """Run deepspeed_worker.py on 2 ranks (all ZeRO stages, one launch); returns (out dir, log)."""
    root = tmp_path_factory.mktemp("two_ranks")
    out, ext = root / "out", root / "torch_extensions"
    out.mkdir()
    case = {"steps": [to_dicts(s) for s in steps], "totals": [total_tokens(s) for s in steps], "grad_clip": grad_clip}
    torch.save(case, root / "case.pt")
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS and not k.startswith(("TORCHELASTIC_", "LOCAL_"))}
    env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", TORCH_EXTENSIONS_DIR=str(ext), PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(WORKER),
        "--model",
        str(model_dir),
        "--case",
        str(root / "case.pt"),
        "--out",
        str(out),
        "--stages",
        ",".join(map(str, STAGES)),
    ]
    log_path = root / "log.txt"
    with open(log_path, "wb") as log:
        # own session: on a timeout the launcher and both ranks are killed together
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=TWO_RANK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
    # torch's deprecation warnings, two lines per collective call, would fill the tail shown
    lines = log_path.read_text(errors="replace").splitlines()
    tail = "\n".join(line for line in lines if "FutureWarning" not in line and "return func(" not in line)[-6000:]
    assert rc is not None, f"2-rank run hung for {TWO_RANK_TIMEOUT_S}s:\n{tail}"
    assert rc == 0, f"2-rank run failed (rc {rc}):\n{tail}"
    # nothing was JIT-compiled (no DeepSpeed C++ op was built)
    assert not ext.exists() or not any(ext.rglob("*")), sorted(map(str, ext.rglob("*")))
    return out


@pytest.fixture(scope="module")
def full_batch_reference(model_dir, steps, grad_clip):
    """TorchBackend, one process, the whole batch: metrics of steps 1-3, weights after steps 2 and 3."""
    ref = torch_backend(model_dir, grad_clip)
    metrics = [ref.train_step(steps[i], total_tokens(steps[i])) for i in range(2)]
    after_2 = snapshot(ref)
    metrics.append(ref.train_step(steps[2], total_tokens(steps[2])))
    return metrics, after_2, snapshot(ref)


@pytest.mark.integration
@pytest.mark.parametrize("stage", STAGES)
def test_two_ranks_match_full_batch(two_ranks, full_batch_reference, grad_clip, stage):
    ranks = [torch.load(two_ranks / f"stage{stage}_rank{r}.pt", weights_only=True) for r in range(2)]
    ref_metrics, ref_after_2, ref_after_3 = full_batch_reference
    # exported on each rank: the full weights, identical bit for bit
    assert ranks[0]["checksum"] == ranks[1]["checksum"] == checksum(ranks[0]["weights"])
    assert_weights_equal(ranks[0]["weights"], ranks[1]["weights"])
    assert_weights_close(ranks[0]["weights"], ref_after_2)
    assert_weights_close(ranks[0]["unstopped"], ref_after_3)
    # metrics are global: both ranks report the same, the full batch's
    assert ranks[0]["metrics"] == ranks[1]["metrics"]
    for got, want in zip(ranks[0]["metrics"], ref_metrics, strict=True):
        assert_metrics_close(got, want)
    assert ref_metrics[0]["grad_norm"] < grad_clip < ref_metrics[1]["grad_norm"]  # step 2 clipped, step 1 not


@pytest.mark.integration
@pytest.mark.parametrize("stage", STAGES)
def test_two_ranks_checkpoint_resume_is_exact(two_ranks, stage):
    for r in range(2):
        res = torch.load(two_ranks / f"stage{stage}_rank{r}.pt", weights_only=True)
        assert res["resumed_metrics"] == res["metrics"][2]
        assert_weights_equal(res["resumed"], res["unstopped"])


@pytest.mark.parametrize("stage", [1, 3])
def test_shared_prefix_batches_under_zero(world_of_one, model_dir, stage):
    """The shared-prefix layout (two forwards per micro-batch, the second on the first's KV cache)
    trains under ZeRO, parameters partitioned under stage 3, as TorchBackend does on plain batches."""
    import numpy as np
    from test_shared_prefix import make_samples

    from atgrpo.learner.batching import build_microbatches

    samples = make_samples(7)
    adv = np.random.default_rng(7).normal(size=len(samples))
    total = sum(len(s.response_ids) for s in samples)
    ref, ds = torch_backend(model_dir, 1.0), ds_backend(model_dir, stage, 1.0)
    for _ in range(2):
        want = ref.train_step(build_microbatches(samples, adv, max_tokens=64, pad_id=0), total)
        got = ds.train_step(build_microbatches(samples, adv, max_tokens=64, pad_id=0, share_prefix=True), total)
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-4, abs=1e-6)
        assert_weights_close(ds.export_weights(), snapshot(ref))


@pytest.mark.integration
@pytest.mark.parametrize("stage", STAGES)
def test_two_ranks_streamed_equal_batch(two_ranks, full_batch_reference, stage):
    """The same update when each rank's share arrives in chunks (a streaming learner) as when the
    whole batch is trained at once: gradients of unnormalised sums, scaled once at the step's end."""
    ranks = [torch.load(two_ranks / f"stage{stage}_rank{r}.pt", weights_only=True) for r in range(2)]
    ref_metrics, ref_after_2, _ = full_batch_reference
    assert_weights_equal(ranks[0]["streamed"], ranks[1]["streamed"])
    assert_weights_close(ranks[0]["streamed"], ref_after_2)
    for got, want in zip(ranks[0]["streamed_metrics"], ref_metrics[:2], strict=True):
        assert_metrics_close(got, want)


@pytest.mark.parametrize("stage", STAGES)
def test_world_of_one_streamed_equals_batch(world_of_one, model_dir, steps, grad_clip, stage):
    ref, ds = torch_backend(model_dir, grad_clip), ds_backend(model_dir, stage, grad_clip)
    for i, chunks in enumerate(STREAM_CHUNKS):
        want = ref.train_step(steps[i], total_tokens(steps[i]))
        for chunk in chunks[0] + chunks[1]:
            ds.accumulate([steps[i][j] for j in chunk])
        assert_metrics_close(ds.finish_step(total_tokens(steps[i])), want)
    assert_weights_close(ds.export_weights(), snapshot(ref))


@pytest.mark.parametrize("stage", (0, 3))
def test_pipelined_minibatches_with_the_proximal_pass_match_torch(world_of_one, model_dir, steps, grad_clip, stage):
    # Decoupled loss, two mini-batches: DeepSpeed's proximal pass (a padded forward, a collective
    # under ZeRO-3) scores what the torch backend's does, and both then take the same updates.
    loss = dataclasses.replace(LOSS, is_cap=2.0)
    ref, ds = torch_backend(model_dir, grad_clip, loss), ds_backend(model_dir, stage, grad_clip, loss)
    plan = [OptimizerStep(steps[i], total_tokens(steps[i])) for i in range(2)]
    want, got = (train_policy_step(be, plan, decoupled=True) for be in (ref, ds))
    assert got["proximal_pass"] == want["proximal_pass"] == 1.0
    assert_metrics_close(
        {k: v for k, v in got.items() if k != "proximal_s"}, {k: v for k, v in want.items() if k != "proximal_s"}
    )
    assert_weights_close(ds.export_weights(), snapshot(ref))
