"""The actors' side of the transport: `ActorClient`, a DEALER socket connected to the hub, strict
request/reply with a timeout per request. The protocol both sides rely on is stated in `endpoints.py`.

Invariants (the client's part of the protocol):
- One request at a time, one reply each (for weights: all its chunk messages) before the next.
- A reply that is not complete is never read as a reply: whenever the client stops reading a reply
  before its last message (any error, timeout or interrupt while receiving weights, a multi-frame
  answer to `request`), or gives up on a request between send and reply, it closes its socket with
  linger 0 and opens a new one (`_reset`): a new peer id, so whatever the hub still sends to the
  old one is dropped and can never answer the next request.
- `max_message_bytes` bounds every frame the client decodes (each chunk's header included); raw
  tensor frames are not bounded (a tensor is as large as it is).
- Timeouts are stall clocks, not bounds on a transfer: the first message of a reply must come
  within the timeout of the request, each further chunk within the timeout of the client starting
  to wait for it; a `TransportTimeout` names what was awaited (policy, version, chunk).
"""

from __future__ import annotations

import os
import time
from types import TracebackType
from typing import Any

import torch
import zmq

from atgrpo.messages import Message, WeightsHeader, WeightsRequest
from atgrpo.transport import keys
from atgrpo.transport.codec import DEFAULT_MAX_MESSAGE_BYTES, decode, encode, kind_of
from atgrpo.transport.errors import AddressError, TransportClosed, TransportTimeout, UnexpectedReply
from atgrpo.transport.tensors import WeightsAssembler


class ActorClient:
    """DEALER socket connected to the hub; strict request/reply with a timeout per request."""

    def __init__(
        self,
        address: str,
        actor_id: str,
        *,
        timeout_s: float = 60.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        verify_checksums: bool = True,
        curve_keys: str | os.PathLike[str] | None = None,
        curve_actor: str = keys.ACTOR,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        self.address = address
        self.actor_id = actor_id
        self.timeout_s = timeout_s
        self.max_message_bytes = max_message_bytes
        """Limit on every reply frame that is decoded (raw weight frames are not limited)."""
        self.verify_checksums = verify_checksums
        self.counters: dict[str, int] = {"transport/timeouts": 0, "transport/resets": 0}
        self._context = context or zmq.Context.instance()
        self._curve = keys.actor_keys(curve_keys, curve_actor) if curve_keys is not None else None
        self._sock: zmq.Socket[Any] | None = None
        self._sock = self._connect()

    def request(self, msg: Message, timeout_s: float | None = None) -> Message:
        """Send `msg`, return the hub's one reply. Raises `TransportTimeout` (socket reset) or a codec error."""
        frames = self._exchange(msg, self._timeout(timeout_s))
        if len(frames) != 1:
            self._reset()  # weights: more chunks may follow, and must not answer the next request
            raise UnexpectedReply(f"{kind_of(msg)} got a {len(frames)}-frame reply from hub at {self.address}")
        return decode(frames[0].buffer, max_bytes=self.max_message_bytes)

    def request_weights(
        self, policy: str, version: int, timeout_s: float | None = None
    ) -> tuple[WeightsHeader, dict[str, torch.Tensor]]:
        """Weights of `policy` at `version` (-1: newest). Tensors alias the received frames (no copy).

        The reply's chunks are checked one by one as they arrive (`WeightsAssembler`), while libzmq
        receives the next. `timeout_s` is a stall clock, not a bound on the transfer: the first
        chunk must come within it of the request, and each further one within it of the client
        waiting for it. Returns the reply's merged header (`WeightsAssembler.result`) and the
        tensors. Raises `UnexpectedReply` when the hub answers anything but those weights (e.g.
        `Refused`), a `WeightsError` for a bad chunk, `TransportTimeout` naming the policy, version
        and chunk awaited when the reply stalls. Any error after the first chunk came resets the
        socket.
        """
        timeout = self._timeout(timeout_s)
        request = WeightsRequest(actor_id=self.actor_id, policy=policy, version=version)
        frames = self._exchange(request, timeout, what=f"chunk 0 of the weights of {policy!r} v{version}")
        if len(frames) == 1:
            reply = decode(frames[0].buffer, max_bytes=self.max_message_bytes)
            if not isinstance(reply, WeightsHeader):
                raise UnexpectedReply(f"weights_request for {policy!r} v{version} answered with {reply!r}")
        got = WeightsAssembler(verify=self.verify_checksums, max_header_bytes=self.max_message_bytes)
        # Every chunk's frames (headers included) are freed together when this returns, as one
        # multipart reply's were: freeing them one chunk at a time changed which blocks end up on
        # top of libzmq's malloc heap, and glibc then trimmed and re-faulted ~40 MB per 50 MB reply.
        held = [frames]
        try:
            while not got.add(frames):
                frames = self._next_chunk(got, timeout)
                held.append(frames)
        except BaseException:
            self._reset()  # the rest of the reply may still come: it must not answer the next request
            raise
        header, tensors = got.result()
        if header.policy != policy or (version >= 0 and header.version != version):
            raise UnexpectedReply(f"asked for {policy!r} v{version}, hub sent {header.policy!r} v{header.version}")
        return header, tensors

    def request_chunk(self, policy: str, version: int, chunk: int, timeout_s: float | None = None) -> list[zmq.Frame]:
        """One chunk message of the weights of `policy` at `version` (>= 0), unchecked: the caller
        feeds it to its `WeightsAssembler` (`weight_store.StoreReader`, for a chunk the store failed).
        Raises `UnexpectedReply` when the hub answers anything else (e.g. `Refused`)."""
        request = WeightsRequest(actor_id=self.actor_id, policy=policy, version=version, chunk=chunk)
        frames = self._exchange(
            request, self._timeout(timeout_s), what=f"chunk {chunk} of the weights of {policy!r} v{version}"
        )
        if len(frames) == 1:
            reply = decode(frames[0].buffer, max_bytes=self.max_message_bytes)
            raise UnexpectedReply(f"weights_request for chunk {chunk} of {policy!r} v{version} answered with {reply!r}")
        return frames

    def close(self) -> None:
        """Close the socket (linger 0). Idempotent."""
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    @property
    def closed(self) -> bool:
        return self._sock is None

    def __enter__(self) -> ActorClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---- internals ----

    def _connect(self) -> zmq.Socket[Any]:
        sock = self._context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if self._curve is not None:
            sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = self._curve
        # No ZMQ_MAXMSGSIZE here: weight frames are as large as the largest tensor. The header and
        # every other reply are bounded by max_message_bytes when decoded.
        try:
            sock.connect(self.address)
        except zmq.ZMQError as exc:
            sock.close(linger=0)
            raise AddressError(f"actor {self.actor_id!r} cannot connect to {self.address}: {exc}") from None
        return sock

    def _reset(self) -> None:
        """New socket, new peer id: whatever the hub still sends to the old one is dropped."""
        self.close()
        self.counters["transport/resets"] += 1
        self._sock = self._connect()

    def _timeout(self, timeout_s: float | None) -> float:
        return self.timeout_s if timeout_s is None else timeout_s

    def _next_chunk(self, got: WeightsAssembler, timeout: float) -> list[zmq.Frame]:
        """The next message of a weights reply whose first chunk `got` has; `TransportTimeout` if it
        does not come within `timeout` s of now (the stall clock; the caller resets the socket)."""
        assert self._sock is not None and got.first is not None
        if self._sock.poll(round(timeout * 1000), zmq.POLLIN):
            return self._sock.recv_multipart(copy=False)
        self.counters["transport/timeouts"] += 1
        raise TransportTimeout(
            f"weights of {got.first.policy!r} v{got.first.version} from hub at {self.address}: "
            f"chunk {got.received} of {got.first.chunks} did not come within {timeout} s of the one before "
            f"({got.received} came)"
        )

    @staticmethod
    def _send_by(sock: zmq.Socket[Any], data: bytes, deadline: float) -> bool:
        """Send `data` before `deadline`; False if it could not go. POLLOUT can report a pipe that
        is gone by the time we send (a CURVE handshake the hub refused tears it down), so EAGAIN
        means wait again, not fail."""
        while (left := deadline - time.monotonic()) > 0:
            if not sock.poll(max(1, round(left * 1000)), zmq.POLLOUT):
                return False
            try:
                sock.send(data, flags=zmq.NOBLOCK, copy=False)
                return True
            except zmq.Again:
                time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))  # the pipe is being torn down
        return False

    def _exchange(self, msg: Message, timeout: float, *, what: str = "") -> list[zmq.Frame]:
        """Send `msg` and return the first message of its reply, within `timeout` seconds; `what`
        names that first message in the timeout's error (default: the reply)."""
        if self._sock is None:
            raise TransportClosed(f"actor {self.actor_id!r}: client to {self.address} is closed")
        sock = self._sock
        data = encode(msg)
        deadline = time.monotonic() + timeout
        sent = False
        try:
            sent = self._send_by(sock, data, deadline)
            if sent:
                wait_ms = max(0, round((deadline - time.monotonic()) * 1000))
                if sock.poll(wait_ms, zmq.POLLIN):
                    return sock.recv_multipart(copy=False)
        except BaseException:
            if sent:
                self._reset()  # interrupted mid-request: the reply must not reach the next request
            raise
        self.counters["transport/timeouts"] += 1
        if sent:
            self._reset()
        why = "" if sent else " (never sent: no connection to the hub, or its queue is full)"
        awaited = f" ({what})" if what else ""
        raise TransportTimeout(
            f"no reply to {kind_of(msg)}{awaited} from hub at {self.address} within {timeout} s{why}"
        )


__all__ = ["ActorClient"]
