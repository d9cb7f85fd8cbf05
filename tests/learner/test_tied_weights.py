"""Tied weights are published once and taken back whole; one writer per checkpoint file.

The built-in model ties `lm_head.weight` to `model.embed_tokens.weight`, as Qwen3-1.7B does: a
published set holds only the first name (the one vLLM's loader keeps), the torch engine fills the
other from it, and the set's bytes are the model's once. Under ZeRO-3 (stood in here: a collective
export) a rank that does not publish joins the gather but copies nothing and compares no replica;
`Trainer.save` exports on the rank that writes the model folder (and under ZeRO-3 on every rank,
copying on that one only); the torch backend's `learner.pt` is written by one rank per host.
The publish and the engine run on `ATGRPO_TEST_DEVICE` (default cpu; a GPU check sets cuda: the
export then goes through pinned host buffers)."""

from __future__ import annotations

import os

import torch

from atgrpo.config import load_config
from atgrpo.engines.torch_engine import TorchEngine
from atgrpo.learner.backends import make_backend
from atgrpo.learner.trainer import Trainer, loss_config
from atgrpo.models.folder import load_model
from atgrpo.models.tied import tied_aliases, without_aliases
from atgrpo.models.tiny import build_tiny_model
from atgrpo.paths import policy_dir

DEVICE = os.environ.get("ATGRPO_TEST_DEVICE", "cpu")
TINY = [
    "policies.shared.tiny.hidden_size=32",
    "policies.shared.tiny.intermediate_size=64",
    "policies.shared.tiny.num_layers=1",
    "policies.shared.tiny.num_heads=2",
    "policies.shared.tiny.num_kv_heads=1",
    "warmstart.steps=0",
]


def _model(tmp_path, device: str = "cpu"):
    cfg = load_config(None, [f"run.out_dir={str(tmp_path)!r}", f"train.device={device!r}", *TINY])
    build_tiny_model(cfg.policies["shared"].tiny, policy_dir(cfg, "shared"))
    return cfg, load_model(policy_dir(cfg, "shared"), device=device)


def _backend(cfg, model):
    return make_backend(model, cfg.train, 1e-3, 0.0, loss_config(cfg))


def test_a_published_set_holds_a_tied_tensor_once_under_its_first_name(tmp_path):
    cfg, model = _model(tmp_path, DEVICE)
    assert tied_aliases(model) == {"lm_head.weight": "model.embed_tokens.weight"}
    weights = _backend(cfg, model).export_weights()
    assert all(t.device.type == "cpu" for t in weights.values())
    assert "model.embed_tokens.weight" in weights and "lm_head.weight" not in weights
    assert set(weights) == set(model.state_dict()) - {"lm_head.weight"}
    own = sum(p.numel() for p in model.parameters())  # each tensor once (parameters() dedups)
    assert sum(t.numel() for t in weights.values()) == own


def test_the_torch_engine_takes_a_published_set_and_its_tied_head_follows(tmp_path):
    cfg, model = _model(tmp_path)
    engine = TorchEngine(
        load_model(policy_dir(cfg, "shared"), device=DEVICE), policy="shared", stop_token_ids=[0], pad_token_id=0
    )
    new = {k: v + 0.5 for k, v in without_aliases(model, model.state_dict()).items()}
    engine.load_weights(1, new)
    state = engine.model.state_dict()
    assert torch.equal(state["model.embed_tokens.weight"].cpu(), new["model.embed_tokens.weight"])
    assert torch.equal(state["lm_head.weight"].cpu(), new["model.embed_tokens.weight"])
    assert engine.version == 1


class _Collective:
    """A ZeRO-3 backend as `Trainer.export` and `save` see it: its export is a collective."""

    export_is_collective = True

    def __init__(self, model) -> None:
        self.model = model
        self.calls: list[bool] = []

    def export_weights(self, to_host: bool = True):
        self.calls.append(to_host)
        return {"w": torch.zeros(2)} if to_host else {}

    def published_state(self):
        raise AssertionError("no replica to fingerprint under a collective export")

    def save_checkpoint(self, folder) -> None:
        pass


def _trainer(backend, rank: int) -> Trainer:
    trainer = Trainer.__new__(Trainer)  # only what export and save read
    trainer.backends, trainer.rank, trainer.world, trainer.versions = {"shared": backend}, rank, 2, {"shared": 0}
    return trainer


def test_under_a_collective_export_only_the_publishing_rank_copies(tmp_path):
    _, model = _model(tmp_path)
    rank1, rank0 = _Collective(model), _Collective(model)
    assert _trainer(rank1, 1).export() == ({}, {})
    assert rank1.calls == [False]  # joined the gather, copied nothing, compared nothing
    weights, _ = _trainer(rank0, 0).export()
    assert rank0.calls == [True] and list(weights) == ["shared"]
    _trainer(rank1, 1).save(tmp_path / "ckpt", None)
    assert rank1.calls == [False, False]  # save: the gather again, and still no copy on rank 1


def test_a_replicated_backend_exports_nothing_on_a_rank_that_writes_no_model_folder(tmp_path, monkeypatch):
    cfg, model = _model(tmp_path)
    backend = _backend(cfg, model)
    calls = []
    monkeypatch.setattr(backend, "export_weights", lambda to_host=True: calls.append(to_host) or {})
    monkeypatch.setenv("LOCAL_RANK", "1")
    _trainer(backend, 1).save(tmp_path / "ckpt", None)
    assert calls == []  # the torch backend's replicas: only rank 0 exports, to write the model folder
    assert not (tmp_path / "ckpt" / "shared" / "learner.pt").exists()  # one writer per host: local rank 0
    monkeypatch.setenv("LOCAL_RANK", "0")
    backend.save_checkpoint(tmp_path / "ckpt" / "shared")
    assert (tmp_path / "ckpt" / "shared" / "learner.pt").is_file()
