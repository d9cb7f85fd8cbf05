"""The learner's forward pass: per-token log-probabilities (either micro-batch layout), entropy,
and the reference model's log-probabilities, gathered into the loss's `LossInputs`.

Invariants: logits are divided by the sampling temperature before the softmax, as the engine did,
so that `exp(logp - behaviour_logp)` compares the same distribution. Outputs are [B, L - 1]: column
j is the token at position j + 1 of `input_ids`, predicted from position j (the one-token shift
happens here and nowhere else). Log-probs and entropy are float32 whatever the model's dtype. This
is the only module that calls a model for the loss; `learner.loss` is tensor math only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from atgrpo.learner.loss import LossConfig, LossInputs
from atgrpo.learner.microbatch import MicroBatch


def token_logprobs(model: torch.nn.Module, mb: MicroBatch, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, L-1] float32 log-prob of each next token, [B, L-1, V] float32 tempered logits)."""
    if mb.prefix is None:
        logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False).logits[:, :-1]
    else:
        logits = prefix_logits(model, mb)[:, :-1]
    logits = logits.float() / temperature
    logp = torch.gather(F.log_softmax(logits, dim=-1), -1, mb.input_ids[:, 1:, None]).squeeze(-1)
    return logp, logits


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """[B, T] entropy of the softmax of [B, T, V] logits (differentiable)."""
    probs = F.softmax(logits, dim=-1)
    return -(probs * F.log_softmax(logits, dim=-1)).sum(-1)


def prefix_logits(model: torch.nn.Module, mb: MicroBatch) -> torch.Tensor:
    """[B, 1 + Lr, V] logits of a shared-prefix micro-batch's rows (position j predicts j + 1).

    One pass over the distinct prompts fills a KV cache (logits only for the last position, which
    nobody reads: the rows start with the prompt's last token); the cache rows are gathered per
    sample (an index, so gradients flow back to the one prompt pass) and the rows run on top of it
    with positions continuing their prompt's.
    """
    from transformers import DynamicCache

    prefix = mb.prefix
    if prefix is None:
        raise ValueError("prefix_logits needs a shared-prefix micro-batch")
    cache = DynamicCache()
    prompt_len = prefix.mask.sum(-1)  # without the last token
    positions = (prefix.mask.cumsum(-1) - 1).clamp(min=0)
    model(
        input_ids=prefix.ids, attention_mask=prefix.mask, position_ids=positions,
        past_key_values=cache, use_cache=True, logits_to_keep=1,
    )
    cache.batch_select_indices(prefix.row)
    mask = torch.cat([prefix.mask[prefix.row], mb.attention_mask], dim=1)
    steps = torch.arange(mb.input_ids.shape[1], device=mb.input_ids.device)
    positions = prompt_len[prefix.row][:, None] + steps[None, :]
    return model(
        input_ids=mb.input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
    ).logits


def loss_inputs(
    model: torch.nn.Module, mb: MicroBatch, cfg: LossConfig, ref_model: torch.nn.Module | None = None
) -> LossInputs:
    """The loss's inputs for `mb`: the policy's log-probs (with grad), the entropy when
    `cfg.entropy_coef` is set, the frozen reference's log-probs when `cfg.kl_coef` is set and a
    `ref_model` is given; the batch's per-token fields shifted to the same [B, L-1] columns."""
    logp, logits = token_logprobs(model, mb, cfg.temperature)
    entropy = entropy_from_logits(logits) if cfg.entropy_coef else None
    ref_logp = None
    if cfg.kl_coef and ref_model is not None:
        with torch.no_grad():
            ref_logp, _ = token_logprobs(ref_model, mb, cfg.temperature)
    return LossInputs(
        logp=logp,
        behaviour_logp=mb.behaviour_logprobs[:, 1:],
        advantages=mb.advantages[:, 1:],
        token_weights=mb.token_weights[:, 1:],
        entropy=entropy,
        ref_logp=ref_logp,
    )


__all__ = ["entropy_from_logits", "loss_inputs", "prefix_logits", "token_logprobs"]
