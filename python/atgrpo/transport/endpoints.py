"""The hub's ROUTER endpoint, the actors' DEALER client, and private ipc addresses: the protocol
between them, and the names callers import.

The hub's side is `hub_endpoint.py`, the actors' `actor_client.py`, the ipc addresses `ipc.py`.

Protocol invariants (both sides rely on them):
- Strict request/reply per actor socket: an actor sends one message and waits for exactly one
  reply (for weights: all chunk messages of it) before sending the next. The hub answers every
  message it receives exactly once, a rejected one with `Refused("<reason>: <detail>")`. Nothing
  is ever pushed unasked.
- Frames: actor -> hub is one frame (the msgpack message; the ROUTER prepends the peer id). Hub ->
  actor is one frame, except weights: a weights reply is one or more chunk messages sent
  back-to-back (`send_weights`), each a `WeightsHeader` frame followed by one raw frame per tensor
  of that chunk (see `tensors.py`). There is no empty delimiter frame. A reply that is not complete
  is never read as a reply: the client resets its socket whenever it stops reading a reply before
  its last message (any error, timeout or interrupt while receiving weights, or a multi-frame
  answer to `request`), so the rest of it can never reach the next request.
- The ROUTER gives each DEALER connection a random peer id. An `ActorClient` that gives up on a
  request (timeout, interrupt, any exception between send and reply) closes its socket with
  linger 0 and opens a new one, i.e. becomes a new peer: a late reply to the abandoned request is
  addressed to the dead peer and dropped (by the hub's `send`, counted as `transport/unroutable`,
  or by libzmq with the dead connection), so it can never be taken for the answer to the next
  request.
- The hub never raises on what a peer sends: bad input is logged (logger `atgrpo.transport`),
  counted in `HubEndpoint.counters["transport/rejected_<reason>"]`, refused, and skipped.
  Sizes: `max_message_bytes` is checked before decoding (refused as `oversized`); libzmq's
  ZMQ_MAXMSGSIZE is set to `hard_limit_bytes` (default 2x) and drops the connection of a peer
  sending more than that without the hub ever seeing the message (that peer times out). The
  client applies its `max_message_bytes` to every frame it decodes (each chunk's header included);
  raw tensor frames are not bounded (a tensor is as large as it is).
- Stall clocks measure progress, never a whole transfer: a reply's first message must come within
  the client's timeout of the request, and each further chunk of a weights reply within the
  timeout of the client starting to wait for it (after it checked the one before). A reply of any
  size completes as long as its chunks keep coming; a peer that goes silent fails with a
  `TransportTimeout` naming the policy, version and chunk awaited. The unit of progress is a chunk
  (libzmq hands over a message only whole), so the largest chunk, at least the largest tensor,
  must cross the wire within one timeout.
- Send progress is observable: `send_weights` returns one `zmq.MessageTracker` per chunk, done
  once libzmq has let go of the chunk's last frame, i.e. written it to the connection (the
  receiver's libzmq reads ahead into its own queue, so over tcp and ipc this follows the wire) or
  dropped it with a connection that closed. Over `inproc://` a chunk is done only once the
  receiver frees it. The hub's leases use it (`learner/hub_weights.py`).
- Hub sends never block: a peer that is gone or whose queue is full (ZMQ_SNDHWM) makes `send`
  return False and bump `transport/unroutable` or `transport/dropped_hwm`. A weights reply stops
  at the first chunk that cannot be sent; its peer then times out waiting for the rest (a reply
  is at most `tensors.MAX_CHUNKS` messages, under the default high-water mark of 1000).
- Security: ipc sockets live in a private 0700 directory (`private_ipc_address`); tcp endpoints
  can use CURVE (`curve_keys=` a folder made by `atgrpo.transport.keys.generate_keys`), which
  encrypts and authenticates both ends. Without keys a tcp hub accepts anyone who can reach it.
- Sockets are not thread-safe: use each endpoint from one thread at a time. Endpoints share the
  process-wide `zmq.Context.instance()` unless given a context; closing an endpoint never
  terminates the context.
"""

from __future__ import annotations

from atgrpo.transport.actor_client import ActorClient
from atgrpo.transport.codec import DEFAULT_MAX_MESSAGE_BYTES
from atgrpo.transport.hub_endpoint import HubEndpoint
from atgrpo.transport.ipc import IPC_PATH_MAX, private_ipc_address

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "IPC_PATH_MAX", "ActorClient", "HubEndpoint", "private_ipc_address"]
