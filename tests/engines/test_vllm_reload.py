"""The vLLM engine reloads weights through the worker's own `reload_weights` (which enters vLLM's
config context, `set_current_vllm_config`), never the model runner's directly. A stand-in `LLM` runs
the callable `collective_rpc` is given on a stand-in worker, as vLLM's in-process executor does
(vllm/v1/serial_utils.py `run_method`: `partial(method, worker)(*args)`); no vLLM needed."""

from __future__ import annotations

import inspect

import torch

from atgrpo.engines.vllm_engine import VllmEngine, reload_in_place


class _Runner:
    def reload_weights(self, **kwargs):
        raise AssertionError("the model runner's reload_weights was called outside the worker's config context")


class _Worker:
    def __init__(self) -> None:
        self.model_runner = _Runner()
        self.loaded: list[list[str]] = []
        self.in_context = False

    def reload_weights(self, *args, **kwargs) -> None:  # vLLM 0.32: Worker.reload_weights(*args, **kwargs)
        self.in_context = True  # where vLLM enters set_current_vllm_config
        self.loaded.append([name for name, _ in kwargs["weights_iterator"]])


class _LLM:
    def __init__(self) -> None:
        self.worker = _Worker()
        self.prefix_resets = 0

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        assert callable(method)
        return [method(self.worker, *args, **(kwargs or {}))]

    def reset_prefix_cache(self) -> None:
        self.prefix_resets += 1


def test_load_weights_goes_through_the_workers_reload():
    engine = VllmEngine.__new__(VllmEngine)  # no vLLM: only what load_weights touches
    engine.llm, engine._asleep, engine._can_sleep, engine.version = _LLM(), False, False, 0
    tensors = {"model.embed_tokens.weight": torch.zeros(4, 2), "model.norm.weight": torch.ones(2)}
    engine.load_weights(3, tensors)
    # The tied head travels once (under the embedding's name) and is handed to vLLM under both names.
    assert engine.llm.worker.loaded == [[*tensors, "lm_head.weight"]] and engine.llm.worker.in_context
    assert engine.version == 3 and engine.llm.prefix_resets == 1


def test_the_rpc_names_the_keyword_both_model_runners_take():
    source = inspect.getsource(reload_in_place)
    assert "worker.reload_weights(weights_iterator=" in source and "model_runner" not in source.split('"""')[-1]
