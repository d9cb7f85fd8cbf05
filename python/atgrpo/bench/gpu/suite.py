"""`atgrpo-bench gpu`: the check to run first on a machine with a GPU.

On `cuda` (the default) it runs, on SmolLM2-135M when it is imported (`atgrpo-model smollm2`), else
on the built tiny model, in fp32:
- a rollout with the torch engine, the engine's log-probabilities against the learner's on the same
  tokens (bound 1e-3), then one on-policy learner step on them (torch backend, one rank) whose own
  forward must agree with the engine within the same bound, peak GPU memory;
- the learner at scale (`atgrpo.bench.gpu.learner_scale`): steps of a Qwen3-1.7B-shaped model with the
  torch backend and DeepSpeed ZeRO 1-3, peak memory against the GPU plan, fp32 master weights that
  move at lr 1e-6 (on the CPU: a small shape, the torch backend only);
- two learner ranks over NCCL (`atgrpo.bench.gpu.ranks` under torchrun) when two GPUs are visible:
  one step each on its own share, replicas compared by checksum;
- the vLLM engine when vLLM is installed (`atgrpo.bench.gpu.vllm_checks`, in a child process): which model
  runner vLLM chose, the same mismatch, a reload of weights published as the learner publishes them
  (outputs change), of the originals (outputs come back), and on a GPU a sleep and wake (memory
  freed, outputs unchanged); what each line checks is printed under the table.

Where CUDA is missing it says so and exits 2: never a silent skip. `--device cpu` runs the same
code on the CPU (that is how CI keeps it working). It ran without vLLM on an H200 and an H100 on
2026-11-26 (tiny model), on an H100 on 2026-11-27 (SmolLM2) and on another H200 on 2026-11-27
(tiny model, every case) (docs/gpus.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from atgrpo.bench.report import BenchRow
from atgrpo.errors import BenchNotRunError

SUITE = "gpu"
MISMATCH_BOUND = 1e-3
TEMPERATURE = 0.7
NEW_TOKENS = 32


def _model_folder(scratch: Path) -> tuple[Path, str]:
    try:
        from atgrpo.models.importer import smollm2_folder

        return smollm2_folder(), "SmolLM2-135M-Instruct"
    except Exception as exc:  # not imported here: the tiny model still checks every code path
        from atgrpo.config import TinyModelSpec
        from atgrpo.models.tiny import build_tiny_model

        print(f"gpu check: SmolLM2 unavailable ({type(exc).__name__}: {exc}); using the built tiny model")
        return build_tiny_model(TinyModelSpec(), scratch / "tiny"), "tiny"


def _prompts(tok, n: int) -> list[list[int]]:
    from atgrpo.workflows.prompts import encode_prompt

    return [encode_prompt(tok, f"Count from {i} to {i + 5}, then say done.", chat=True) for i in range(n)]


def _peak_gb(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else float("nan")


def _learner_step(folder: Path, device: torch.device, prompts, outs, pad_id: int) -> dict[str, float]:
    """One on-policy PPO step on the rollout's own tokens and behaviour log-probs, advantages +1 and -1
    in turn: the backend's training forward must score the tokens as the engine did (its
    `logprob_mismatch` within the bound, nothing clipped), which `_mismatch` checks only outside it."""
    import numpy as np

    from atgrpo.config import TrainSection
    from atgrpo.learner.backends import make_backend
    from atgrpo.learner.batching import pack
    from atgrpo.learner.loss import LossConfig
    from atgrpo.learner.rows import Sequences
    from atgrpo.models.folder import load_model

    model = load_model(folder, device=str(device))
    backend = make_backend(model, TrainSection(device=str(device)), 1e-6, 0.0, LossConfig(temperature=TEMPERATURE))
    advantages = np.where(np.arange(len(outs)) % 2 == 0, 1.0, -1.0)
    seqs = Sequences(prompts, [o.token_ids for o in outs], [o.logprobs for o in outs], advantages)
    mbs = pack(seqs, max_tokens=8192, pad_id=pad_id, aggregation="token_mean", share_prefix=False)
    metrics = backend.train_step(mbs, sum(mb.num_tokens for mb in mbs))
    if not all(v == v for v in metrics.values()):
        raise RuntimeError(f"learner step gave non-finite metrics: {metrics}")
    return metrics


def _mismatch(engine, model, prompts, pad_id: int) -> tuple[float, float, list]:
    from atgrpo.engines.base import SamplingParams
    from atgrpo.learner.logprob_check import learner_logprobs, logprob_mismatch

    outs = engine.generate(prompts, SamplingParams(max_new_tokens=NEW_TOKENS, temperature=TEMPERATURE), seed=0)
    mean, worst, _ = logprob_mismatch(
        [o.logprobs for o in outs], learner_logprobs(model, prompts, outs, TEMPERATURE, pad_id)
    )
    return mean, worst, outs


def _row(name: str, value: float, unit: str, *, bound: float | None = None, extra: dict | None = None) -> BenchRow:
    if bound is None:
        return BenchRow(SUITE, name, value, unit, "", float("nan"), extra=extra or {})
    return BenchRow(
        SUITE,
        name,
        value,
        unit,
        "bound",
        bound,
        higher_is_better=False,
        target=f"<= {bound:g}",
        target_met=value <= bound,
        extra=extra or {},
    )


def _two_ranks(folder: Path) -> BenchRow:
    start = time.perf_counter()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "atgrpo.bench.gpu.ranks",
        str(folder),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"two NCCL ranks failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return _row(
        "two ranks over NCCL: one step, replicas equal",
        time.perf_counter() - start,
        "s",
        extra={"output": done.stdout[-500:]},
    )


def run(quick: bool, device: str = "cuda", vllm: bool = True) -> list[BenchRow]:
    from atgrpo.config import RolloutSection
    from atgrpo.devices import resolve_device
    from atgrpo.engines.factory import open_engine
    from atgrpo.models.folder import load_model

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BenchNotRunError(
            f"no CUDA device visible (torch {torch.__version__}, built for CUDA {torch.version.cuda}, "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); run with --device cpu to check the code path"
        )
    dev = resolve_device(device, setting="--device")
    rows: list[BenchRow] = []
    with tempfile.TemporaryDirectory() as scratch:
        folder, name = _model_folder(Path(scratch))
        n = 4 if quick else 16
        engine, tok = open_engine(folder, RolloutSection(engine="torch", device=device), policy="check")
        model = load_model(folder, device=str(dev)).eval()
        prompts = _prompts(tok, n)
        mean, worst, outs = _mismatch(engine, model, prompts, tok.pad_token_id)
        rows.append(
            _row(
                f"torch engine vs learner mismatch ({name}, {dev})",
                mean,
                "mean |Δ|",
                bound=MISMATCH_BOUND,
                extra={"max": worst},
            )
        )
        metrics = _learner_step(folder, dev, prompts, outs, tok.pad_token_id)
        rows.append(
            _row(
                f"learner step vs engine mismatch, torch backend ({name}, {dev})",
                metrics["logprob_mismatch"],
                "mean |Δ|",
                bound=MISMATCH_BOUND,
                extra=metrics,
            )
        )
        rows.append(_row("peak GPU memory, rollout + learner step", _peak_gb(dev), "GB"))
        from atgrpo.bench.gpu import learner_scale

        rows += learner_scale.rows(str(dev))
        if dev.type == "cuda" and torch.cuda.device_count() >= 2:
            rows.append(_two_ranks(folder))
        elif dev.type == "cuda":
            print("gpu check: one GPU visible, the two-rank NCCL step was not run")
        if vllm:
            del engine, model
            rows += _vllm_rows(folder, device, name, quick)
    return rows


def _vllm_rows(folder: Path, device: str, name: str, quick: bool) -> list[BenchRow]:
    """The vLLM checks (`atgrpo.bench.gpu.vllm_checks`, in a child process), one row each, and what each
    row checks printed under them."""
    from atgrpo.bench.gpu.vllm_checks import CHECKS

    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # what this process cached is free memory for the child's vLLM
    with tempfile.TemporaryDirectory() as scratch:
        result = Path(scratch) / "vllm.json"
        cmd = [
            sys.executable,
            "-m",
            "atgrpo.bench.gpu.vllm_checks",
            str(folder),
            str(result),
            "--device",
            device,
            *(["--quick"] if quick else []),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        print(done.stdout, end="")
        if done.returncode != 0:
            raise RuntimeError(f"the vLLM check failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        if not result.exists():  # vLLM not installed: the child said so on its stdout
            return []
        got = json.loads(result.read_text())
    rows = [
        _row(
            f"vLLM model runner: {got['runner']} ({name}, {device})",
            got["start_s"],
            "s to start",
            extra={"checks": CHECKS["runner"]},
        ),
        _row(
            f"vLLM engine vs learner mismatch ({name}, {device})",
            got["mismatch"]["mean"],
            "mean |Δ|",
            bound=MISMATCH_BOUND,
            extra={**got["mismatch"], "checks": CHECKS["mismatch"]},
        ),
        _row(
            f"vLLM reload of published weights: {got['reload']['changed']}/{got['reload']['prompts']} greedy outputs changed",
            got["reload"]["seconds"],
            "s",
            extra={**got["reload"], "checks": CHECKS["reload"]},
        ),
        _row(
            f"vLLM reload of the original weights: {got['restored']['same']}/{got['restored']['prompts']} outputs as before",
            float(got["restored"]["same"]),
            "prompts",
            extra={**got["restored"], "checks": CHECKS["restored"]},
        ),
    ]
    if "sleep" in got:
        rows.append(
            _row(
                f"vLLM sleep + wake: {got['sleep']['same']}/{got['sleep']['prompts']} outputs as before",
                got["sleep"]["freed_gb"],
                "GB freed",
                extra={**got["sleep"], "checks": CHECKS["sleep"]},
            )
        )
    print("\nwhat each vLLM line checks:")
    for key in ("runner", "mismatch", "reload", "restored", *(["sleep"] if "sleep" in got else [])):
        print(f"  {key}: {CHECKS[key]}")
    return rows


__all__ = ["run"]
