"""`atgrpo-bench lora`: LoRA per role against full fine-tuning, two roles on SmolLM2-135M, as ratios
measured in one run:

- one weight sync (hub -> actor over ipc, `transport/weights_bytes`): the full model against one
  r = 8 adapter (target: adapter bytes < 1/20 of the full model's);
- one learner step of two policies: full fine-tuning (two models, two AdamW states) against two
  adapters on one shared frozen base (target: peak memory of LoRA <= 0.6x);
- an actor serving two roles: two torch engines against one torch engine holding two adapters
  (resident memory, rollout tokens/s).
- the LoRA recipe's rollout step (`envs/planpath/train_smollm2_lora.toml`: 8 envs x K = 4, tool and
  plan, 24 new tokens, the recipe's actor threads; one engine serving both roles' adapters, as its
  actor does): vLLM's LoRA path against the torch engine with adapters, seconds per step after one
  warm-up step. The faster is the recipe's `rollout.engine`.

Learner and actor figures run in child processes, one per arm, so each peak RSS (`ru_maxrss`, the
process's high-water mark; CPU memory here, no GPU) is that arm's alone; the child's RSS right
after its imports is subtracted. Actors also report resident memory with the engines up. The
memory and sync rows use the torch engine; vLLM's LoRA path appears in the recipe's rollout rows
only. The GPU figures are not measured at all.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from atgrpo.bench.report import BenchRow

SUITE = "lora"
R = 8


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _config(model: Path, out: Path, lora: bool):
    from atgrpo.config import load_config

    sets = [
        f"run.out_dir='{out}'",
        "warmstart.steps=0",
        "role_policy={plan='plan', tool='tool'}",
        f"policies.plan.path='{model}'",
        f"policies.tool.path='{model}'",
        "rollout.max_prompt_tokens=256",
    ]
    if lora:
        sets += [f"policies.plan.lora={{r={R}, alpha={2 * R}.0}}", f"policies.tool.lora={{r={R}, alpha={2 * R}.0}}"]
    return load_config(None, sets)


def _learner_arm(model: Path, lora: bool, steps: int) -> dict:
    from atgrpo.learner.microbatch import MicroBatch
    from atgrpo.learner.packing import OptimizerStep, RankPlan
    from atgrpo.learner.trainer import Trainer

    base = _rss_mb()
    trainer = Trainer(_config(model, Path(tempfile.mkdtemp()), lora))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 1000, (4, 192), generator=gen)
    ones = torch.ones_like(ids)
    mask = ones.bool()
    mask[:, :128] = False  # a 128-token prompt, 64 response tokens
    mb = MicroBatch(ids, ones, mask, torch.randn(4, 192, generator=gen), -ones.float(), mask.float())
    plan = RankPlan({p: [OptimizerStep([mb], int(mask.sum()))] for p in ("plan", "tool")}, True)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        trainer.train(plan)
        times.append(time.perf_counter() - t0)
    return {"step_s": statistics.median(times[1:] or times), "peak_mb": _peak_mb() - base}


def _actor_arm(model: Path, lora: bool, tokens: int) -> dict:
    from atgrpo.actor.actor import make_engines
    from atgrpo.engines.base import SamplingParams

    base = _rss_mb()
    cfg = _config(model, Path(tempfile.mkdtemp()), lora)
    handles = make_engines(cfg, ["plan", "tool"])
    gen = torch.Generator().manual_seed(0)
    for p, h in handles.items():
        if lora:  # non-zero adapters: the LoRA path really runs
            shared = h.engine.shared  # type: ignore[attr-defined]
            own = shared.adapters[p].state_dict()
            h.engine.load_weights(0, {k: torch.randn(v.shape, generator=gen) * 0.01 for k, v in own.items()})
    prompts = [torch.randint(10, 1000, (48,), generator=gen).tolist() for _ in range(8)]
    params = SamplingParams(max_new_tokens=tokens, temperature=1.0)
    made, t0 = 0, time.perf_counter()
    for p in ("plan", "tool"):
        made += sum(len(c.token_ids) for c in handles[p].engine.generate(prompts, params, seed=1))
    tok_s = made / (time.perf_counter() - t0)
    gc.collect()
    # Resident memory with the engines up: a peak would count load-time transients (safetensors
    # pages, the fp32 cast), which differ from what an actor holds while it serves.
    return {"tok_s": tok_s, "peak_mb": _peak_mb() - base, "rss_mb": _rss_mb() - base}


RECIPE = Path(__file__).resolve().parents[3] / "envs" / "planpath" / "train_smollm2_lora.toml"
"""The LoRA recipe whose rollout step `_rollout_arm` times (found from the source tree, as the prompts are)."""


def recipe_config(model: Path, out: Path, engine: str):
    """The LoRA recipe on `model`, rolled out with `engine` ("torch" or "vllm"), nothing warm-started."""
    from atgrpo.config import load_config

    sets = [f"run.out_dir='{out}'", f"rollout.engine='{engine}'", "warmstart.steps=0"]
    cfg = load_config(RECIPE, sets)
    return load_config(RECIPE, sets + [f"policies.{p}.path='{model}'" for p in sorted(cfg.policies)])


def load_recipe_engine() -> str:
    """The `rollout.engine` the LoRA recipe ships with."""
    from atgrpo.config import load_config

    return load_config(RECIPE).rollout.engine


def _rollout_arm(model: Path, engine: str, repeats: int) -> dict:
    """Seconds per rollout step of the LoRA recipe with `engine`, and their generate share; both
    roles' adapters non-zero and the same in both arms (drawn from one seed)."""
    from atgrpo.actor.actor import configure_threads, make_engines
    from atgrpo.engines.factory import training_sampling
    from atgrpo.models.folder import load_model
    from atgrpo.models.peft_models import AdapterWeights, attach_adapters
    from atgrpo.units import cut_units, roll_out_units, step_seeds
    from atgrpo.workflows.factory import make_workflow

    cfg = recipe_config(model, Path(tempfile.mkdtemp()), engine)
    configure_threads(cfg.launch.actor_threads or 1)
    policies = sorted(cfg.policies)
    t0 = time.perf_counter()
    handles = make_engines(cfg, policies)
    start_s = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(0)
    shapes = attach_adapters(load_model(model), cfg, policies)
    for p in policies:  # non-zero adapters (peft starts B at 0): the LoRA path really runs
        own = AdapterWeights(shapes, p).state_dict()
        handles[p].engine.load_weights(0, {k: torch.randn(v.shape, generator=gen) * 0.01 for k, v in own.items()})
    del shapes
    workflow, ro = make_workflow(cfg), cfg.rollout
    times, generate, cpu, tokens = [], [], [], 0
    for step in range(repeats + 1):  # step 0 warms up (first-call compilation, caches)
        units = cut_units(
            0,
            step,
            step_seeds(ro.envs_per_step, step),
            ro.envs_per_unit,
            split="train",
            versions={p: 0 for p in policies},
            greedy=False,
        )
        t0, c0 = time.perf_counter(), _cpu_s()
        samples, _, timings, _ = roll_out_units(
            workflow, handles, units, training_sampling(ro), run_id="bench", run_seed=0
        )
        if step:
            times.append(time.perf_counter() - t0)
            cpu.append(_cpu_s() - c0)
            generate.append(timings.generate_s)
            tokens += sum(len(x.response_ids) for x in samples)
    workflow.close()
    return {
        "step_s": statistics.median(times),
        "generate_s": statistics.median(generate),
        "cpu_s": statistics.median(cpu),
        "tok_s": tokens / sum(times),
        "start_s": start_s,
    }


def _cpu_s() -> float:
    """CPU seconds used so far by this process and its live children (vLLM's engine core runs in
    one): on a shared machine, less bent by other jobs than the wall clock."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def _child(part: str, model: Path, arm: str, quick: bool) -> dict:
    args = [sys.executable, "-m", "atgrpo.bench.lora", part, str(model), arm, "quick" if quick else "full"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"atgrpo-bench lora {part} ({arm}) failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def faster_engine(rollout: dict[str, dict]) -> str:
    return "vllm" if rollout["vllm"]["step_s"] < rollout["torch"]["step_s"] else "torch"


def engine_rows(rollout: dict[str, dict], recipe_engine: str) -> list[BenchRow]:
    """The recipe's rollout step with vLLM's LoRA path against the torch engine with adapters; the
    target: the recipe's `rollout.engine` is the faster of the two."""
    v, t = rollout["vllm"], rollout["torch"]
    faster = faster_engine(rollout)
    return [
        BenchRow(
            SUITE,
            "LoRA recipe rollout step, vLLM + LoRA",
            v["step_s"],
            "s",
            "torch engine + adapters",
            t["step_s"],
            False,
            f"recipe's engine ({recipe_engine}) is the faster",
            recipe_engine == faster,
        ),
        BenchRow(
            SUITE,
            "LoRA recipe generate per step, vLLM + LoRA",
            v["generate_s"],
            "s",
            "torch engine + adapters",
            t["generate_s"],
            False,
        ),
        BenchRow(
            SUITE,
            "LoRA recipe CPU seconds per rollout step, vLLM + LoRA",
            v["cpu_s"],
            "s",
            "torch engine + adapters",
            t["cpu_s"],
            False,
        ),
        BenchRow(
            SUITE,
            "LoRA recipe rollout tokens/s, vLLM + LoRA",
            v["tok_s"],
            "tok/s",
            "torch engine + adapters",
            t["tok_s"],
            True,
        ),
        BenchRow(
            SUITE,
            "LoRA recipe engine start, vLLM + LoRA",
            v["start_s"],
            "s",
            "torch engine + adapters",
            t["start_s"],
            False,
        ),
    ]


def _sync(model: Path, repeats: int) -> dict[str, dict]:
    """Bytes and median seconds of one weights reply: the full model's state, and one adapter's."""
    from atgrpo.learner.hub import Hub
    from atgrpo.learner.intake import IntakeLimits, PolicyLimits
    from atgrpo.learner.ledger import VersionLedger
    from atgrpo.models.folder import load_model
    from atgrpo.models.peft_models import AdapterWeights, attach_adapters
    from atgrpo.transport import ActorClient, HubEndpoint, private_ipc_address

    cfg = _config(model, Path(tempfile.mkdtemp()), True)
    full = {k: v.contiguous() for k, v in load_model(model).state_dict().items()}
    adapter = AdapterWeights(attach_adapters(load_model(model), cfg, ["plan"]), "plan").state_dict()
    adapter = {k: v.detach().clone().contiguous() for k, v in adapter.items()}
    limits = IntakeLimits(
        roles=("tool", "plan"),
        role_policy={"tool": "tool", "plan": "plan"},
        policies={p: PolicyLimits(50_000, 2048) for p in ("plan", "tool")},
        turns=1,
        k=2,
        tree=True,
        trajectory=False,
        max_new_tokens=8,
        micro_batch_tokens=4096,
    )
    hub = Hub(
        HubEndpoint(private_ipc_address(Path(tempfile.mkdtemp()) / "ipc")),
        VersionLedger("bench", {"plan": 0, "tool": 0}),
        limits=limits,
        unit_timeout_s=300.0,
    )
    hub.start()
    out = {}
    try:
        with ActorClient(hub.endpoint.address, "bench", timeout_s=300.0) as client:
            for name, policy, tensors in (("full", "tool", full), ("adapter", "plan", adapter)):
                hub.publish(policy, 0, tensors)
                times, sent = [], 0.0
                for _ in range(repeats):
                    before, replies = (hub.metrics()[f"transport/weights_{k}"] for k in ("bytes", "replies"))
                    t0 = time.perf_counter()
                    client.request_weights(policy, 0)
                    times.append(time.perf_counter() - t0)
                    while (
                        hub.metrics()["transport/weights_replies"] <= replies
                    ):  # counted after the last chunk is queued
                        time.sleep(0.001)
                    sent = hub.metrics()["transport/weights_bytes"] - before
                out[name] = {"bytes": sent, "s": statistics.median(times)}
    finally:
        hub.stop("bench over", drain_s=0.0)
    return out


def run(quick: bool) -> list[BenchRow]:
    from atgrpo.models.importer import smollm2_folder

    model = smollm2_folder()
    sync = _sync(model, 2 if quick else 5)
    rows = [
        BenchRow(
            SUITE,
            f"weight sync bytes, adapter r={R}",
            sync["adapter"]["bytes"] / 2**20,
            "MiB",
            "full model",
            sync["full"]["bytes"] / 2**20,
            False,
            "adapter < 1/20 of full",
            sync["adapter"]["bytes"] < sync["full"]["bytes"] / 20,
        ),
        BenchRow(
            SUITE, f"weight sync time, adapter r={R}", sync["adapter"]["s"], "s", "full model", sync["full"]["s"], False
        ),
    ]
    learner = {arm: _child("learner", model, arm, quick) for arm in ("full", "lora")}
    ratio = learner["lora"]["peak_mb"] / learner["full"]["peak_mb"]
    rows += [
        BenchRow(
            SUITE,
            "learner peak memory, 2 policies, LoRA on one base",
            learner["lora"]["peak_mb"],
            "MB",
            "2 full models",
            learner["full"]["peak_mb"],
            False,
            "LoRA <= 0.6x",
            ratio <= 0.6,
        ),
        BenchRow(
            SUITE,
            "learner step time, 2 policies, LoRA on one base",
            learner["lora"]["step_s"],
            "s",
            "2 full models",
            learner["full"]["step_s"],
            False,
        ),
    ]
    actor = {arm: _child("actor", model, arm, quick) for arm in ("full", "lora")}
    rows += [
        BenchRow(
            SUITE,
            "actor resident memory, 1 torch engine + 2 adapters",
            actor["lora"]["rss_mb"],
            "MB",
            "2 torch engines",
            actor["full"]["rss_mb"],
            False,
        ),
        BenchRow(
            SUITE,
            "actor peak memory, 1 torch engine + 2 adapters",
            actor["lora"]["peak_mb"],
            "MB",
            "2 torch engines",
            actor["full"]["peak_mb"],
            False,
        ),
        BenchRow(
            SUITE,
            "actor rollout, 1 torch engine + 2 adapters",
            actor["lora"]["tok_s"],
            "tok/s",
            "2 torch engines",
            actor["full"]["tok_s"],
            True,
        ),
    ]
    rollout = {engine: _child("rollout", model, engine, quick) for engine in ("torch", "vllm")}
    rows += engine_rows(rollout, load_recipe_engine())
    print(
        f"LoRA recipe rollout step: {faster_engine(rollout)} is the faster engine; {RECIPE.name} uses {load_recipe_engine()}"
    )
    return rows


if __name__ == "__main__":  # a child arm: PART MODEL ARM quick|full (ARM: full|lora, or torch|vllm for rollout)
    part, folder, arm, speed = sys.argv[1:5]
    torch.set_num_threads(1)
    if part == "rollout":
        result = _rollout_arm(Path(folder), arm, 1 if speed == "quick" else 3)
    elif part == "learner":
        result = _learner_arm(Path(folder), arm == "lora", 2 if speed == "quick" else 4)
    else:
        result = _actor_arm(Path(folder), arm == "lora", 16 if speed == "quick" else 64)
    print(json.dumps(result))
