"""The learner's forward pass: per-token log-probabilities (either micro-batch layout), entropy,
and the reference model's log-probabilities, gathered into the loss's `LossInputs`.

Invariants: logits are divided by the sampling temperature before the softmax, as the engine did,
so that `exp(logp - behaviour_logp)` compares the same distribution. Outputs are [B, L - 1]: column
j is the token at position j + 1 of `input_ids`, predicted from position j (the one-token shift
happens here and nowhere else). Log-probs and entropy are float32 whatever the model's dtype. This
is the only module that calls a model for the loss; `learner.loss` is tensor math only.

Memory: the output layer is applied in chunks of `logit_chunk_tokens` tokens, each recomputed in
backward (`learner.output_head`), so no [tokens x vocab] tensor exists at once; the policy's and
the reference's scores are taken at the response tokens only (`loss_inputs`), 0 elsewhere (where
the loss weighs nothing). With a chunk size of 0 (the unchunked reference) every position is
scored at once. Values and gradients equal the unchunked ones up to float rounding
(`tests/learner/test_logprobs_chunked.py`).
"""

from __future__ import annotations

import contextlib

import torch

from atgrpo.learner.checkpointing import logit_chunk_tokens
from atgrpo.learner.loss import LossConfig, LossInputs
from atgrpo.learner.microbatch import MicroBatch
from atgrpo.learner.output_head import ScoreRequest, entropy_from_logits, plain_head, score_logits, scoring


def token_logprobs(
    model: torch.nn.Module,
    mb: MicroBatch,
    temperature: float,
    *,
    entropy: bool = False,
    rows: torch.Tensor | None = None,
    chunk_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """([B, L-1] float32 log-prob of each next token, [B, L-1] float32 entropy when `entropy`, else None).

    `rows` [B, L-1] bool: score only these columns (others are 0); None: all. `chunk_tokens`:
    tokens per chunk of the output layer (None: the model's `train.logit_chunk_tokens`; 0: unchunked)."""
    chunk = logit_chunk_tokens(model) if chunk_tokens is None else chunk_tokens
    head = plain_head(model)
    if head is None:  # logits are not lm_head(hidden): score the model's own logits, unchunked
        logits = _run(model, mb, contextlib.nullcontext())[:, :-1]
        scores = score_logits(logits, mb.input_ids[:, 1:], temperature, entropy)
    else:
        req = ScoreRequest(mb.input_ids[:, 1:], temperature, entropy, chunk, rows)
        scores = _run(model, mb, scoring(head, req))
    return scores[0], (scores[1] if entropy else None)


def _run(model: torch.nn.Module, mb: MicroBatch, head_mode: contextlib.AbstractContextManager) -> torch.Tensor:
    """What the model's output layer returns for `mb`'s rows, in either layout (under `head_mode`)."""
    if mb.prefix is None:
        with head_mode:
            return model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False).logits
    return _prefix_rows(model, mb, head_mode)


def _prefix_rows(model: torch.nn.Module, mb: MicroBatch, head_mode: contextlib.AbstractContextManager) -> torch.Tensor:
    """The output layer's result on a shared-prefix micro-batch's rows [B, 1 + Lr] (position j predicts j + 1).

    One pass over the distinct prompts fills a KV cache (logits only for the last position, which
    nobody reads: the rows start with the prompt's last token); the cache rows are gathered per
    sample (an index, so gradients flow back to the one prompt pass) and the rows run on top of it
    with positions continuing their prompt's.
    """
    from transformers import DynamicCache

    prefix = mb.prefix
    if prefix is None:
        raise ValueError("a shared-prefix micro-batch is needed here")
    cache = DynamicCache()
    prompt_len = prefix.mask.sum(-1)  # without the last token
    positions = (prefix.mask.cumsum(-1) - 1).clamp(min=0)
    model(
        input_ids=prefix.ids,
        attention_mask=prefix.mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    cache.batch_select_indices(prefix.row)
    mask = torch.cat([prefix.mask[prefix.row], mb.attention_mask], dim=1)
    steps = torch.arange(mb.input_ids.shape[1], device=mb.input_ids.device)
    positions = prompt_len[prefix.row][:, None] + steps[None, :]
    with head_mode:
        return model(
            input_ids=mb.input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
        ).logits


def response_logprobs(model: torch.nn.Module, mb: MicroBatch, temperature: float) -> torch.Tensor:
    """[B, L-1] float32 log-probs of `mb`'s response tokens under `model` (0 off the loss mask):
    what the loss scores, with or without a gradient (the proximal pass, `learner.proximal`)."""
    logp, _ = token_logprobs(model, mb, temperature, rows=mb.loss_mask[:, 1:])
    return logp


def loss_inputs(
    model: torch.nn.Module,
    mb: MicroBatch,
    cfg: LossConfig,
    ref_model: torch.nn.Module | None = None,
    prox_logp: torch.Tensor | None = None,
) -> LossInputs:
    """The loss's inputs for `mb`: the policy's log-probs (with grad), the entropy when
    `cfg.entropy_coef` is set, the frozen reference's log-probs when `cfg.kl_coef` is set and a
    `ref_model` is given, `prox_logp` ([B, L-1], `response_logprobs` of the proximal policy) as it
    is; the batch's per-token fields shifted to the same [B, L-1] columns. Scores are taken at the
    loss-mask columns only (0 elsewhere, where `token_weights` is 0)."""
    rows = mb.loss_mask[:, 1:]
    logp, entropy = token_logprobs(model, mb, cfg.temperature, entropy=bool(cfg.entropy_coef), rows=rows)
    ref_logp = None
    if cfg.kl_coef and ref_model is not None:
        with torch.no_grad():
            ref_logp, _ = token_logprobs(
                ref_model, mb, cfg.temperature, rows=rows, chunk_tokens=logit_chunk_tokens(model)
            )
    return LossInputs(
        logp=logp,
        behaviour_logp=mb.behaviour_logprobs[:, 1:],
        advantages=mb.advantages[:, 1:],
        token_weights=mb.token_weights[:, 1:],
        entropy=entropy,
        ref_logp=ref_logp,
        prox_logp=prox_logp,
    )


__all__ = ["entropy_from_logits", "loss_inputs", "response_logprobs", "token_logprobs"]
