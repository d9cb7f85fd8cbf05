"""Engine start-up on a GPU (`atgrpo.actor.engine_start`), with stand-in CUDA facts: vLLM engines on
one physical GPU start one at a time, engines on other GPUs do not wait for them, and in a
colocated run an actor constructs its engines only once the hub has leased it a unit (while the
learner waits for it), not when it joins."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest

from atgrpo.actor import actor as actor_module
from atgrpo.actor import engine_start
from atgrpo.actor.actor import Actor
from atgrpo.actor.engine_start import defer_engines, gpu_start_lock, host_gpu
from atgrpo.actor.engine_start import engine_start as engine_start_of
from atgrpo.config import load_config
from atgrpo.errors import PlacementError
from atgrpo.errors.runtime import ActorError
from atgrpo.learner.hub import Hub
from atgrpo.learner.ledger import VersionLedger
from atgrpo.messages import WorkRequest, WorkUnit
from atgrpo.models.folder import load_model
from atgrpo.models.tiny import build_tiny_model
from atgrpo.paths import policy_dir
from atgrpo.transport import HubEndpoint, private_ipc_address

COLOCATED = [
    "train.device='cuda'",
    "rollout.device='cuda'",
    "launch.learner_devices=[0]",
    "launch.actor_devices=[0]",
    "train.streaming=false",
]


def test_the_gpu_is_named_as_the_host_numbers_it_without_asking_cuda():
    assert host_gpu("cuda", None) == "0" and host_gpu("cuda:2", None) == "2"
    assert host_gpu("cuda", "4") == "4" and host_gpu("cuda:1", "4,6") == "6"
    assert host_gpu("cuda", "GPU-0f3c-uuid") == "GPU-0f3c-uuid"
    with pytest.raises(PlacementError, match="lists 1 GPUs"):
        host_gpu("cuda:1", "3")


def _starts(tmp_path: Path, gpus: list[str]) -> list[tuple[str, float, float]]:
    """Start one stand-in engine per entry of `gpus` at once, each holding its GPU's lock while it
    'profiles' (sleeps); returns (gpu, start, end) of each."""
    spans: list[tuple[str, float, float]] = []
    barrier = threading.Barrier(len(gpus))

    def start(gpu: str) -> None:
        barrier.wait()
        with gpu_start_lock(tmp_path, gpu, timeout_s=30.0, poll_s=0.01):
            began = time.monotonic()
            time.sleep(0.3)
            spans.append((gpu, began, time.monotonic()))

    threads = [threading.Thread(target=start, args=(g,)) for g in gpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return spans


def test_engines_on_one_gpu_start_one_at_a_time(tmp_path: Path):
    spans = sorted(_starts(tmp_path, ["3", "3", "3"]), key=lambda s: s[1])
    assert len(spans) == 3
    for (_, _, end), (_, began, _) in itertools.pairwise(spans):
        assert began >= end  # the next start began only after the previous one ended


def test_another_gpus_start_does_not_take_this_gpus_lock(tmp_path: Path):
    with gpu_start_lock(tmp_path, "0", timeout_s=5.0):
        with gpu_start_lock(tmp_path, "1", timeout_s=0.5, poll_s=0.01) as path:  # would raise if it waited
            assert path.name.endswith("gpu1.lock")
        with (
            pytest.raises(ActorError, match=r"GPU 0: pid \d+ .* has been starting one there"),
            gpu_start_lock(tmp_path, "0", timeout_s=0.2, poll_s=0.01),
        ):
            pass


def test_only_vllm_on_a_gpu_takes_the_lock(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    out = f"run.out_dir={str(tmp_path)!r}"
    vllm_gpu = load_config(None, [out, "rollout.engine='vllm'", "rollout.device='cuda'"])
    with engine_start_of(vllm_gpu) as path:
        assert path.parent == tmp_path / engine_start.LOCK_DIR and path.name.endswith("gpu5.lock")
    for sets in (["rollout.engine='vllm'"], ["rollout.device='cuda'"]):  # vLLM on CPU; torch on a GPU
        with engine_start_of(load_config(None, [out, *sets])) as nothing:
            assert nothing is None
    assert defer_engines(load_config(None, COLOCATED))
    assert not defer_engines(
        load_config(None, [*COLOCATED[:2], "launch.learner_devices=[0]", "launch.actor_devices=[1]"])
    )


def test_a_colocated_actor_constructs_its_engines_at_its_first_lease(tmp_path: Path, monkeypatch):
    """The actor's config says colocated; its stand-in engines are the tiny model's on the CPU."""
    base = [
        f"run.out_dir={str(tmp_path)!r}",
        "task.turns=1",
        "rollout.k=1",
        "rollout.max_new_tokens=4",
        "policies.shared.tiny.hidden_size=32",
        "policies.shared.tiny.num_layers=1",
        "policies.shared.tiny.intermediate_size=64",
        "transport.request_timeout_s=10",
    ]
    cpu, gpu = load_config(None, base), load_config(None, [*base, *COLOCATED])
    build_tiny_model(cpu.policies["shared"].tiny, policy_dir(cpu, "shared"))
    real = actor_module.make_engines
    events: list[str] = []

    def make_engines(cfg, policies):
        events.append("engines")
        return real(cpu, policies)

    monkeypatch.setattr(actor_module, "make_engines", make_engines)
    hub = Hub(
        HubEndpoint(private_ipc_address(tmp_path / "ipc")),
        VersionLedger(cpu.run.name, {"shared": 0}),
        unit_timeout_s=30.0,
        retry_after_s=0.01,
    )
    hub.start()
    actor = Actor(gpu, hub.endpoint.address, "colocated")
    asks = []
    real_ask = actor._ask

    def ask(msg):
        reply = real_ask(msg)
        if isinstance(msg, WorkRequest):
            asks.append(type(reply).__name__)
            if isinstance(reply, WorkUnit):
                events.append("lease")
        return reply

    actor._ask = ask
    result: list = []
    worker = threading.Thread(target=lambda: result.append(actor.run(max_units=1)), daemon=True)
    try:
        hub.publish("shared", 0, load_model(policy_dir(cpu, "shared")).state_dict())
        worker.start()
        deadline = time.monotonic() + 60
        while asks.count("NoWork") < 5 and time.monotonic() < deadline:  # joined, and idle: no round is open
            time.sleep(0.01)
        assert asks.count("NoWork") >= 5 and events == []  # the learner may be training: no engine yet
        hub.open_round(-1, [0, 1], 2, split="eval", greedy=True)
        worker.join(timeout=60)
        assert result == [1] and events == ["lease", "engines"]
    finally:
        actor.client.close()
        hub.stop("test over", drain_s=0.0)
