"""ZeroMQ transport: message codec, tensors as raw frames, hub and actor endpoints.

- `codec`: `encode` / `decode` one `atgrpo.messages.Message` (msgpack, no pickle).
- `tensors`: `weights_to_messages` / `WeightsAssembler` (chunk messages of a header + one zero-copy
  raw frame per tensor).
- `endpoints`: the protocol between hub and actors, and its names: `HubEndpoint` (ROUTER, learner
  rank 0; `hub_endpoint`), `ActorClient` (DEALER; `actor_client`), `private_ipc_address` (`ipc`).
- `errors`: `TransportError` and one subclass per reason code.
- `keys`, `security`: CURVE key folders, and when an address needs them.

The names below are imported on first use (PEP 562): the endpoints and tensors import torch, which
takes seconds, and `atgrpo.transport.keys` or `.security` alone (`atgrpo-keys`, a CLI checking
its arguments) must not pay for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from atgrpo.transport.codec import decode, encode, kind_of
    from atgrpo.transport.endpoints import ActorClient, HubEndpoint, private_ipc_address
    from atgrpo.transport.errors import TransportError, TransportTimeout
    from atgrpo.transport.tensors import WeightsAssembler, messages_to_weights, weights_to_messages

_WHERE = {
    "ActorClient": "endpoints",
    "HubEndpoint": "endpoints",
    "TransportError": "errors",
    "TransportTimeout": "errors",
    "WeightsAssembler": "tensors",
    "decode": "codec",
    "encode": "codec",
    "kind_of": "codec",
    "messages_to_weights": "tensors",
    "private_ipc_address": "endpoints",
    "weights_to_messages": "tensors",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:  # a submodule not imported yet: `from atgrpo.transport import keys` imports it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "ActorClient",
    "HubEndpoint",
    "TransportError",
    "TransportTimeout",
    "WeightsAssembler",
    "decode",
    "encode",
    "kind_of",
    "messages_to_weights",
    "private_ipc_address",
    "weights_to_messages",
]
