"""Torch rollout engine: any HF causal LM, batched sampling with a KV cache, on CPU or GPU.

All prompts of a `generate` call are decoded together (in chunks of `max_batch` sequences): left
padding, explicit position ids, one prefill (logits of the last position only), then one cached
forward per new token until every sequence has produced a stop token or `max_new_tokens`. The engine owns its model; `load_weights`
copies new tensors into it in place (no reallocation), and nothing else may modify the model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from atgrpo.engines.base import Completion, EngineStats, RolloutEngine, SamplingParams, check_prompts
from atgrpo.models.tied import without_aliases


class TorchEngine(RolloutEngine):
    def __init__(
        self,
        model: torch.nn.Module,
        *,
        policy: str,
        stop_token_ids: Sequence[int],
        pad_token_id: int,
        context_length: int | None = None,
        version: int = 0,
        max_batch: int = 512,
    ) -> None:
        if not stop_token_ids:
            raise ValueError("an engine needs at least one stop token (the model's EOS)")
        self.model = model.eval()
        self.policy = policy
        self.version = version
        self.stop_token_ids = tuple(stop_token_ids)
        self.pad_token_id = pad_token_id
        self.context_length = context_length
        self.max_batch = max_batch
        self.stats = EngineStats()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def load_weights(self, version: int, tensors: dict[str, torch.Tensor]) -> None:
        """Copy `tensors` into the model in place. A tied tensor comes once, under its first name
        (`models.tied`); copying it there fills every name it has."""
        state = without_aliases(self.model, self.model.state_dict())
        missing = [k for k in state if k not in tensors]
        if missing:
            raise ValueError(f"weights for {self.policy} v{version} lack {len(missing)} tensors, e.g. {missing[:3]}")
        with torch.no_grad():
            for name, dst in state.items():
                src = tensors[name]
                if src.shape != dst.shape:
                    raise ValueError(
                        f"weights for {self.policy} v{version}: {name} has shape {tuple(src.shape)}, model wants {tuple(dst.shape)}"
                    )
                dst.copy_(src)
        self.version = version

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None) -> list[Completion]:
        check_prompts(prompts, params, self.context_length)
        start = time.perf_counter()
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, ()).item()))
        out: list[Completion] = []
        for lo in range(0, len(prompts), self.max_batch):
            out.extend(self._generate_chunk(prompts[lo : lo + self.max_batch], params, gen))
        self.stats.record(time.perf_counter() - start, out)
        return out

    def _generate_chunk(
        self, prompts: list[list[int]], params: SamplingParams, gen: torch.Generator
    ) -> list[Completion]:
        dev = self.device
        n, width = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        stops = torch.tensor(sorted({*self.stop_token_ids, *params.stop_token_ids}), device=dev)
        cache = DynamicCache()
        # The prefill needs the next-token logits of the last position only: not [n, width, vocab].
        logits = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        next_pos = positions[:, -1:] + 1
        tokens, logps = [], []
        done = torch.zeros(n, dtype=torch.bool, device=dev)
        for _ in range(params.max_new_tokens):
            tok, logp = self._pick(logits.float(), params, gen)
            tok = torch.where(done, torch.full_like(tok, self.pad_token_id), tok)
            tokens.append(tok)
            logps.append(logp)
            done = done | torch.isin(tok, stops)
            if bool(done.all()):
                break
            mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=dev)], dim=1)
            logits = self.model(
                input_ids=tok[:, None],
                attention_mask=mask,
                position_ids=next_pos,
                past_key_values=cache,
                use_cache=True,
            ).logits[:, -1]
            next_pos = next_pos + 1
        tok_mat = torch.stack(tokens, 1).cpu()
        lp_mat = torch.stack(logps, 1).cpu()
        is_stop = torch.isin(tok_mat, stops.cpu())
        out = []
        for i in range(n):
            stop_at = torch.nonzero(is_stop[i])
            length = int(stop_at[0]) + 1 if len(stop_at) else tok_mat.shape[1]
            out.append(Completion(tok_mat[i, :length].tolist(), lp_mat[i, :length].tolist(), bool(len(stop_at))))
        return out

    @staticmethod
    def _pick(logits: torch.Tensor, params: SamplingParams, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(token [n], its log-probability under the distribution it was drawn from [n]: the
        temperature-scaled one, renormalised over the nucleus when top_p < 1)."""
        if params.greedy:
            logp = F.log_softmax(logits, dim=-1)
            tok = logp.argmax(-1)
            return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
        logp = F.log_softmax(logits / params.temperature, dim=-1)
        probs = logp.exp()
        if params.top_p < 1.0:
            sorted_p, order = probs.sort(-1, descending=True)
            keep = sorted_p.cumsum(-1) - sorted_p < params.top_p
            sorted_p = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
            # The token's probability under what was sampled from: the renormalised nucleus.
            logp = probs.log() - probs.sum(-1, keepdim=True).log()
        tok = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
        return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
