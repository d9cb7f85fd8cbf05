"""`MicroBatch`: the record a trainer rank trains on, in one of two typed layouts, and its wire form.

Invariants:

* Every per-token tensor is [B, L] (B rows, one per sample) and position j of a row holds the token
  that is *predicted from* position j - 1: the forward pass shifts by one, the packers never do.
* Loss positions are exactly where `loss_mask` is True, and `token_weights` is 0 everywhere else, so
  padding and prompt tokens never reach the loss however the weights were chosen.
* The layout is a type, not a set of optional fields: `prefix is None` is the plain layout (each row
  is prompt + response); a `SharedPrefix` is the shared-prompt layout of `learner.shared_prefix`.
* `tensors()` / `from_tensors()` are the wire form: flat names, contiguous tensors, no pickle, so a
  rank can receive micro-batches with `torch.distributed` alone. The names are `WIRE_NAMES` plus, in
  the shared-prefix layout, `PREFIX_WIRE_NAMES`; their presence alone selects the layout.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

WIRE_NAMES = (
    "input_ids",
    "attention_mask",
    "loss_mask",
    "advantages",
    "behaviour_logprobs",
    "token_weights",
    "sample_index",
)
"""Wire names of every micro-batch, in this order."""
PREFIX_WIRE_NAMES = ("prefix_ids", "prefix_mask", "row_prefix")
"""Wire names present only in the shared-prefix layout (`SharedPrefix.ids`, `.mask`, `.row`)."""


@dataclass(frozen=True)
class SharedPrefix:
    """The distinct prompts of a shared-prefix micro-batch, each run through the model once."""

    ids: torch.Tensor
    """[P, Lq] int64: each distinct prompt without its last token, left-padded (Lq >= 1)."""
    mask: torch.Tensor
    """[P, Lq] int64, 1 on real prompt tokens."""
    row: torch.Tensor
    """[B] int64: the prompt that row b of the micro-batch continues."""

    def to(self, device: torch.device | str) -> SharedPrefix:
        return SharedPrefix(self.ids.to(device), self.mask.to(device), self.row.to(device))


@dataclass(frozen=True)
class MicroBatch:
    """Padded rows of one micro-batch. Plain layout: a row is prompt + response, right-padded. Shared
    prefix layout: a row is the prompt's last token + the response; the rest of the prompt is in
    `prefix`."""

    input_ids: torch.Tensor
    """[B, L] int64, right-padded."""
    attention_mask: torch.Tensor
    """[B, L] int64, 1 on real tokens."""
    loss_mask: torch.Tensor
    """[B, L] bool, True where the token is a response token (predicted from position - 1)."""
    advantages: torch.Tensor
    """[B, L] float32, the sample's advantage on its response tokens, 0 elsewhere."""
    behaviour_logprobs: torch.Tensor
    """[B, L] float32, the engine's log-probability of each response token, 0 elsewhere."""
    token_weights: torch.Tensor
    """[B, L] float32 weight of each response token in the step loss: 1 for "token_mean",
    1 / (its sample's response length) for "seq_mean"; 0 off the loss mask."""
    sample_index: tuple[int, ...] = ()
    """Which of the step's samples (indices into the list given to the packer) the rows are."""
    prefix: SharedPrefix | None = None
    """None: the plain layout. Otherwise the shared prompts the rows continue."""

    @property
    def num_tokens(self) -> int:
        return int(self.loss_mask.sum())

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    def to(self, device: torch.device | str) -> MicroBatch:
        """This micro-batch on `device` (itself when it is already there)."""
        if self.input_ids.device == torch.device(device):
            return self
        per_token = {n: getattr(self, n).to(device) for n in WIRE_NAMES if n != "sample_index"}
        prefix = self.prefix.to(device) if self.prefix is not None else None
        return dataclasses.replace(self, **per_token, prefix=prefix)

    def tensors(self) -> dict[str, torch.Tensor]:
        """The wire form: `WIRE_NAMES` (+ `PREFIX_WIRE_NAMES`) -> contiguous tensors. `sample_index`
        is a [B] int64 tensor; dtypes are kept (`loss_mask` stays bool)."""
        out = {n: getattr(self, n).contiguous() for n in WIRE_NAMES if n != "sample_index"}
        out["sample_index"] = torch.tensor(self.sample_index, dtype=torch.int64, device=self.input_ids.device)
        if self.prefix is not None:
            out["prefix_ids"] = self.prefix.ids.contiguous()
            out["prefix_mask"] = self.prefix.mask.contiguous()
            out["row_prefix"] = self.prefix.row.contiguous()
        return out

    @classmethod
    def from_tensors(cls, d: dict[str, torch.Tensor]) -> MicroBatch:
        """The inverse of `tensors()`; raises `KeyError` on a missing name, `ValueError` on an
        unknown one or on a partial shared prefix."""
        unknown = set(d) - set(WIRE_NAMES) - set(PREFIX_WIRE_NAMES)
        if unknown:
            raise ValueError(f"unknown micro-batch tensors {sorted(unknown)}")
        present = [n in d for n in PREFIX_WIRE_NAMES]
        if any(present) and not all(present):
            raise ValueError(
                f"a shared prefix needs all of {PREFIX_WIRE_NAMES}, got {sorted(set(d) & set(PREFIX_WIRE_NAMES))}"
            )
        prefix = SharedPrefix(d["prefix_ids"], d["prefix_mask"], d["row_prefix"]) if all(present) else None
        per_token = {n: d[n] for n in WIRE_NAMES if n != "sample_index"}
        return cls(**per_token, sample_index=tuple(int(i) for i in d["sample_index"].tolist()), prefix=prefix)


__all__ = ["MicroBatch", "PREFIX_WIRE_NAMES", "SharedPrefix", "WIRE_NAMES"]
