"""The torch engine on the real model (SmolLM2-135M-Instruct): the same contract as the vLLM engine."""

from __future__ import annotations

import pytest

from atgrpo.config import RolloutSection
from atgrpo.engines.base import PromptTooLongError, SamplingParams
from atgrpo.engines.factory import open_engine
from atgrpo.learner.logprob_check import learner_logprobs, logprob_mismatch
from atgrpo.models.folder import load_model, model_facts
from atgrpo.workflows.prompts import encode_prompt

T = 0.7


@pytest.fixture(scope="module")
def engine_and_tok(smollm2):
    return open_engine(smollm2, RolloutSection(engine="torch"), policy="p")


@pytest.fixture(scope="module")
def hf(smollm2):
    return load_model(smollm2).eval()


def prompts_of(tok, n: int) -> list[list[int]]:
    return [encode_prompt(tok, f"Write one sentence about the number {i}.", chat=True) for i in range(n)]


@pytest.mark.integration
def test_chat_prompts_are_token_ids_of_the_models_template(engine_and_tok):
    _, tok = engine_and_tok
    ids = encode_prompt(tok, "hello", chat=True)
    assert all(isinstance(t, int) for t in ids)
    assert tok.decode(ids).endswith("<|im_start|>assistant\n") and "hello" in tok.decode(ids)


@pytest.mark.integration
def test_k_copies_differ_and_a_seed_reproduces_them(engine_and_tok):
    engine, tok = engine_and_tok
    (prompt,) = prompts_of(tok, 1)
    params = SamplingParams(max_new_tokens=16, temperature=T)
    a, b = engine.generate([prompt] * 4, params, seed=3), engine.generate([prompt] * 4, params, seed=3)
    assert len({tuple(o.token_ids) for o in a}) == 4
    assert [(o.token_ids, o.logprobs) for o in a] == [(o.token_ids, o.logprobs) for o in b]


@pytest.mark.integration
def test_logprobs_equal_the_learners_and_stops_come_from_the_model(engine_and_tok, hf, smollm2):
    engine, tok = engine_and_tok
    facts = model_facts(smollm2, tok)
    assert facts.stop_token_ids == (2,) and facts.context_length == 8192
    prompts = prompts_of(tok, 6)
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=24, temperature=T), seed=1)
    assert all(o.token_ids[-1] == 2 for o in outs if o.finished)
    mean, worst, _ = logprob_mismatch(
        [o.logprobs for o in outs], learner_logprobs(hf, prompts, outs, T, facts.pad_token_id)
    )
    assert mean <= 1e-4 and worst <= 1e-3  # left-padded cached decoding against right-padded full passes
    greedy = engine.generate(prompts[:2], SamplingParams(max_new_tokens=12, greedy=True))
    mean, worst, _ = logprob_mismatch(
        [o.logprobs for o in greedy], learner_logprobs(hf, prompts[:2], greedy, 1.0, facts.pad_token_id)
    )
    assert mean <= 1e-4 and worst <= 1e-3


@pytest.mark.integration
def test_nucleus_logprobs_are_renormalised(engine_and_tok, hf, smollm2):
    engine, tok = engine_and_tok
    prompts = prompts_of(tok, 4)
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=12, temperature=T, top_p=0.8), seed=2)
    full = learner_logprobs(hf, prompts, outs, T, model_facts(smollm2, tok).pad_token_id)
    gaps = [a - b for o, f in zip(outs, full) for a, b in zip(o.logprobs, f)]
    assert min(gaps) >= -1e-4 and max(gaps) > 1e-2


@pytest.mark.integration
def test_a_prompt_longer_than_the_engine_budget_is_a_typed_error(engine_and_tok):
    engine, _ = engine_and_tok
    budget = engine.context_length  # rollout.max_prompt_tokens + max_new_tokens, below the model's 8192
    assert budget < 8192
    with pytest.raises(PromptTooLongError, match=f"{budget} tokens per sequence"):
        engine.generate([[1] * (budget - 4)], SamplingParams(max_new_tokens=8))


def test_training_refuses_nucleus_sampling():
    with pytest.raises(ValueError, match="top_p must be 1.0"):
        RolloutSection(top_p=0.9)


def test_the_prefill_computes_logits_at_the_last_position_only(tmp_path):
    """The output layer sees one position per sequence in every forward, the prefill included
    (no [n, prompt width, vocab] logits); the sampled tokens are the same as from full logits."""
    import torch

    from atgrpo.config import TinyModelSpec
    from atgrpo.engines.torch_engine import TorchEngine
    from atgrpo.models.tiny import build_tiny_model

    model = load_model(
        build_tiny_model(
            TinyModelSpec(hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2, num_kv_heads=1), tmp_path
        )
    )
    widths: list[int] = []
    model.lm_head.register_forward_hook(lambda _m, args, _out: widths.append(args[0].shape[1]))
    engine = TorchEngine(model, policy="p", stop_token_ids=[1], pad_token_id=0)
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=5, greedy=True))
    assert widths and set(widths) == {1}
    with torch.no_grad():  # greedy from full logits: the same first tokens
        full = model(input_ids=torch.tensor([prompts[0]])).logits[0, -1]
    assert outs[0].token_ids[0] == int(full.argmax())
