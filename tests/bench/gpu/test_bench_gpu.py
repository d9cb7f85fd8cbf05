"""`atgrpo-bench gpu` where there is no GPU: it says why it did not run (exit 2), and its code path
runs on the CPU (`--device cpu`): the single-rank check on SmolLM2, the learner at scale (a small
shape) and the two-rank worker over gloo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from atgrpo.bench import cli
from atgrpo.bench.gpu import learner_scale as gpu_scale
from atgrpo.bench.gpu import suite as gpu
from atgrpo.config import TinyModelSpec
from atgrpo.models.tiny import build_tiny_model


def test_without_cuda_it_says_why_and_exits_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["gpu", "--quick", "--json", str(tmp_path / "gpu.json")]) == cli.NOT_RUN
    assert "not run: no CUDA device visible" in capsys.readouterr().out


@pytest.mark.parametrize("device", ["bad", "gpu0"])
def test_a_device_that_is_no_device_is_a_clear_error(capsys, tmp_path, device):
    assert cli.main(["gpu", "--quick", "--device", device, "--json", str(tmp_path / "gpu.json")]) == 1
    err = capsys.readouterr().err
    assert f"--device = {device!r}" in err and "Traceback" not in err
    assert not (tmp_path / "gpu.json").exists()


def test_a_gpu_this_machine_does_not_have_is_one_line(monkeypatch, capsys, tmp_path):
    """Stand-in CUDA facts: one GPU visible, `--device cuda:3` asked for."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert cli.main(["gpu", "--quick", "--device", "cuda:3", "--json", str(tmp_path / "gpu.json")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs GPU 3" in err and "sees 1 GPU(s)" in err and "Traceback" not in err


def test_the_vllm_lines_say_what_they_check(monkeypatch, capsys, tmp_path):
    """The parent's side of the vLLM check, on a stand-in child's results (the child itself runs on
    vLLM's CPU build in `test_the_vllm_child_runs_on_the_cpu_build`)."""
    from atgrpo.bench.gpu.vllm_checks import CHECKS

    result = {
        "start_s": 40.0,
        "runner": "V2",
        "mismatch": {"mean": 2e-4, "max": 0.01, "tokens": 100},
        "reload": {"seconds": 0.5, "changed": 4, "prompts": 4, "tensors": 3},
        "restored": {"same": 4, "prompts": 4},
        "sleep": {"freed_gb": 30.0, "same": 4, "prompts": 4},
    }

    def child(cmd, **kwargs):
        Path(cmd[4]).write_text(json.dumps(result))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(gpu.subprocess, "run", child)
    rows = gpu._vllm_rows(tmp_path, "cuda", "tiny", quick=True)
    out = capsys.readouterr().out
    assert [r.extra["checks"] for r in rows] == [
        CHECKS[k] for k in ("runner", "mismatch", "reload", "restored", "sleep")
    ]
    assert rows[0].name.startswith("vLLM model runner: V2") and rows[1].target_met
    assert "4/4 greedy outputs changed" in rows[2].name and "4/4 outputs as before" in rows[4].name
    assert all(f"  {k}: {v}" in out for k, v in CHECKS.items())


@pytest.mark.integration
def test_the_check_runs_on_the_cpu(smollm2):
    rows = {r.name.split(" (")[0]: r for r in gpu.run(quick=True, device="cpu", vllm=False)}
    assert rows["torch engine vs learner mismatch"].target_met
    step = rows["learner step vs engine mismatch, torch backend"]
    assert step.target_met and step.extra["tokens"] > 0 and step.extra["grad_norm"] > 0
    assert step.extra["clip_frac"] == 0.0  # on its own behaviour log-probs, the ratio is 1 up to rounding
    scale = rows["learner step at scale"]  # the small shape on the CPU; the fp32 master moved at lr 1e-6
    assert scale.value > 0 and scale.extra["moved_share_min"] >= 0.5 and scale.extra["plan_gb"] > 0
    # Step 1 scores the batch before any update: its gap is the bf16 forward against the fp32 one.
    assert 0 < scale.extra["logprob_gap_step1"] < 0.1 and "clip_frac_step3" in scale.extra


def test_the_scale_check_fails_when_updates_do_not_land(monkeypatch):
    """With lr 0 (as with updates lost below bf16's resolution) the fp32 master does not move: an error."""
    from atgrpo.learner import backends

    real = backends.make_backend
    monkeypatch.setattr(backends, "make_backend", lambda model, cfg, lr, *rest: real(model, cfg, 0.0, *rest))
    with pytest.raises(RuntimeError, match="did not move"):
        gpu_scale.run_case("torch", 0, True, "cpu")


@pytest.mark.integration
@pytest.mark.parametrize("device", ["cpu"])
def test_two_ranks_train_equal_replicas(tmp_path, device):
    folder = build_tiny_model(
        TinyModelSpec(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1), tmp_path
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "atgrpo.bench.gpu.ranks",
            str(folder),
            "--device",
            device,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("checksums") == 2


@pytest.mark.integration
def test_the_vllm_child_runs_on_the_cpu_build(smollm2, tmp_path):
    """`atgrpo-bench gpu`'s vLLM check on vLLM's CPU build (V1 runner, no sleep): the published set
    (SmolLM2's tied head once) reloads, changes the outputs, and the originals bring them back."""
    out = tmp_path / "vllm.json"
    done = subprocess.run(
        [sys.executable, "-m", "atgrpo.bench.gpu.vllm_checks", str(smollm2), str(out), "--device", "cpu", "--quick"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["runner"] == "V1" and got["mismatch"]["mean"] <= gpu.MISMATCH_BOUND
    assert got["reload"]["changed"] > 0 and got["restored"]["same"] == got["restored"]["prompts"]
    assert "sleep" not in got  # the CPU worker does not sleep
