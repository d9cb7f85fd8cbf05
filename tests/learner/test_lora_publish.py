"""A LoRA policy's weight sync sends its adapter only, counted in the hub's transport bytes; a full
policy beside it (on the same base) still sends every weight."""

from __future__ import annotations

import time

import torch

from atgrpo.config import load_config
from atgrpo.engines.lora import open_adapter_engines
from atgrpo.learner.hub import Hub
from atgrpo.learner.job import intake_limits
from atgrpo.learner.ledger import VersionLedger
from atgrpo.learner.trainer import Trainer
from atgrpo.paths import policy_dir
from atgrpo.transport import ActorClient, HubEndpoint, private_ipc_address
from atgrpo.warmstart.prepare import prepare_models


def replied(hub: Hub, replies: int, within_s: float = 10.0) -> float:
    """The hub's weights bytes once it has counted `replies` replies: the hub thread counts a reply
    after its last chunk is queued, which may be after the actor has it."""
    deadline = time.monotonic() + within_s
    while hub.metrics()["transport/weights_replies"] < replies:
        assert time.monotonic() < deadline, f"the hub did not count {replies} weights replies in {within_s} s"
        time.sleep(0.01)
    return hub.metrics()["transport/weights_bytes"]


def test_lora_publish_sends_the_adapter_only(tmp_path):
    cfg = load_config(
        None,
        [
            f"run.out_dir='{tmp_path / 'run'}'",
            "warmstart.steps=0",
            "role_policy={plan='a', tool='b'}",
            "policies.a.lora={r=8}",
            "policies.b.lr=1e-4",  # b: full fine-tuning of the same built model
        ],
    )
    prepare_models(cfg)
    trainer = Trainer(cfg)
    with torch.no_grad():  # a non-zero adapter, so what the actor gets is checked for real values
        for p in trainer.backends["a"].adapter.parameters():
            p.normal_(0.0, 0.1)
    weights, _ = trainer.export()
    hub = Hub(
        HubEndpoint(private_ipc_address(tmp_path / "ipc")),
        VersionLedger(cfg.run.name, {"a": 0, "b": 0}),
        limits=intake_limits(cfg, trainer),
        unit_timeout_s=30.0,
    )
    hub.start()
    sent: dict[str, float] = {}
    got = {}
    try:
        with ActorClient(hub.endpoint.address, "a0", timeout_s=10.0) as client:
            for p in ("a", "b"):
                hub.publish(p, 0, weights[p])
                before = hub.metrics()["transport/weights_bytes"]
                _, got[p] = client.request_weights(p, 0)
                sent[p] = replied(hub, 1 + (p == "b")) - before
    finally:
        hub.stop("test over", drain_s=0.0)
    tensor_bytes = {p: sum(t.numel() * t.element_size() for t in weights[p].values()) for p in weights}
    assert all(".lora_" in k for k in got["a"]) and not any(".lora_" in k for k in got["b"])
    assert tensor_bytes["a"] <= sent["a"] <= tensor_bytes["a"] + 64 * len(weights["a"]) + 4096  # data + headers
    assert sent["a"] < sent["b"] / 20  # r = 8 on the built model: ~1/28 of the full weights
    assert all(torch.equal(got["a"][k], v) for k, v in trainer.backends["a"].weight_state().items())
    # The actor installs what came: its engine's adapter is the learner's, bit for bit.
    engines = open_adapter_engines(cfg, ["a"], policy_dir(cfg, "a"), "float32")
    engines["a"][0].load_weights(0, got["a"])
    live = engines["a"][0].shared.adapters["a"].state_dict()
    assert all(torch.equal(live[k], got["a"][k]) for k in got["a"])
