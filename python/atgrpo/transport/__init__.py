"""ZeroMQ transport: message codec, tensors as raw frames, hub and actor endpoints.

- `codec`: `encode` / `decode` one `atgrpo.messages.Message` (msgpack, no pickle).
- `tensors`: `weights_to_messages` / `WeightsAssembler` (chunk messages of a header + one zero-copy
  raw frame per tensor).
- `endpoints`: the protocol between hub and actors, and its names: `HubEndpoint` (ROUTER, learner
  rank 0; `hub_endpoint`), `ActorClient` (DEALER; `actor_client`), `private_ipc_address` (`ipc`).
- `errors`: `TransportError` and one subclass per reason code.
"""

from atgrpo.transport.codec import decode, encode, kind_of
from atgrpo.transport.endpoints import ActorClient, HubEndpoint, private_ipc_address
from atgrpo.transport.errors import TransportError, TransportTimeout
from atgrpo.transport.tensors import WeightsAssembler, messages_to_weights, weights_to_messages

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
