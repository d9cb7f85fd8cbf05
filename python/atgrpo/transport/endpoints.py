"""The hub's ROUTER endpoint, the actors' DEALER client, and private ipc addresses.

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

import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
import zmq
from zmq.auth.thread import ThreadAuthenticator

from atgrpo.messages import Message, Refused, WeightsHeader, WeightsRequest
from atgrpo.transport import keys
from atgrpo.transport.codec import decode, encode, kind_of
from atgrpo.transport.errors import (
    AddressError,
    MalformedMessage,
    TransportClosed,
    TransportError,
    TransportTimeout,
    UnexpectedReply,
)
from atgrpo.transport.tensors import WeightsAssembler

log = logging.getLogger("atgrpo.transport")

DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
REJECT_REASONS = ("malformed", "invalid", "oversized", "unknown_kind", "protocol")
"""Reasons the hub counts; `transport/rejected_<reason>` exists in `counters` for each, from 0."""

IPC_PATH_MAX = 103 if sys.platform == "darwin" else 107
"""Longest ipc socket path in bytes: `sun_path` is 108 bytes on Linux (104 on macOS) with the NUL."""

_LOG_EVERY = 100
_MAX_DETAIL = 200


class HubEndpoint:
    """ROUTER socket bound at `address`; the learner's rank 0 serves every actor through it.

    `address` is `tcp://host:port` (port `*` picks a free one), `ipc:///path` or `inproc://name`;
    `self.address` is the resolved endpoint actors should connect to.
    """

    def __init__(
        self,
        address: str,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        hard_limit_bytes: int | None = None,
        curve_keys: str | os.PathLike[str] | None = None,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        if max_message_bytes <= 0:
            raise ValueError(f"max_message_bytes must be positive, got {max_message_bytes}")
        self.max_message_bytes = max_message_bytes
        self.hard_limit_bytes = hard_limit_bytes if hard_limit_bytes is not None else 2 * max_message_bytes
        self.counters: dict[str, int] = {f"transport/rejected_{r}": 0 for r in REJECT_REASONS}
        self.counters.update({"transport/unroutable": 0, "transport/dropped_hwm": 0})
        # Weights replies sent and their bytes (every frame: headers and tensor data), so what one
        # weight sync costs is measured, e.g. a LoRA policy's adapter against a full model's weights.
        self.weights_sent: dict[str, int] = {"transport/weights_replies": 0, "transport/weights_bytes": 0}
        self._own_context: zmq.Context[Any] | None = None
        self._auth: ThreadAuthenticator | None = None
        if curve_keys is not None and context is None:
            context = self._own_context = zmq.Context()  # one ZAP handler per context
        context = context or zmq.Context.instance()
        self._sock: zmq.Socket[Any] | None = context.socket(zmq.ROUTER)
        try:
            if curve_keys is not None:
                self._secure(context, curve_keys)
            self._sock.setsockopt(zmq.LINGER, 0)
            self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # unknown peer: EHOSTUNREACH, not silence
            self._sock.setsockopt(zmq.MAXMSGSIZE, self.hard_limit_bytes)
            self._sock.bind(address)
        except zmq.ZMQError as exc:
            self.close()
            raise AddressError(f"hub cannot bind {address}: {exc}") from None
        except BaseException:
            self.close()
            raise
        self.address: str = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)

    def recv(self, timeout_s: float | None) -> tuple[bytes, Message] | None:
        """Next well-formed message as `(peer_id, message)`, or None after `timeout_s` (None: wait).

        Never raises on bad input: rejected messages are counted, logged, refused, and skipped.
        """
        sock = self._socket()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait_ms = -1 if deadline is None else max(0, round((deadline - time.monotonic()) * 1000))
            if not sock.poll(wait_ms, zmq.POLLIN):
                return None
            frames = sock.recv_multipart(copy=False)
            peer = frames[0].bytes
            try:
                if len(frames) != 2:
                    raise MalformedMessage(f"expected 1 frame after the peer id, got {len(frames) - 1}")
                return peer, decode(frames[1].buffer, max_bytes=self.max_message_bytes)
            except TransportError as exc:
                self._reject(peer, exc)

    def send(self, peer_id: bytes, msg: Message) -> bool:
        """Reply to `peer_id`; False (and counted) if the peer is gone or its queue is full."""
        return self._send([peer_id, encode(msg)], what=kind_of(msg))

    def send_weights(self, peer_id: bytes, messages: list[list[Any]]) -> list[zmq.MessageTracker] | None:
        """Send a weights reply (`weights_to_messages(...)`: its chunk messages, back-to-back)
        without copying the buffers. Returns one tracker per chunk, done once libzmq has let go of
        that chunk (module docstring); None (and counted once) if a chunk could not be sent, in
        which case the rest are not sent either.

        The buffers must stay unmodified until libzmq has sent them (see `tensors.py`).
        """
        trackers = []
        for frames in messages:
            # The last frame is always zero-copy and tracked (pyzmq would copy one under 64 KiB and
            # report it done at once): libzmq releases a message's frames in order, so its tracker
            # says when the whole chunk has left.
            last = zmq.Frame(frames[-1], copy=False, track=True)
            if not self._send([peer_id, *frames[:-1], last], what="weights"):
                return None
            trackers.append(last.tracker)
            self.weights_sent["transport/weights_bytes"] += sum(memoryview(f).nbytes for f in frames)
        self.weights_sent["transport/weights_replies"] += 1
        return trackers

    def close(self) -> None:
        """Close the socket, dropping anything unsent (linger 0). Idempotent."""
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._own_context is not None:
            self._own_context.term()
            self._own_context = None

    @property
    def closed(self) -> bool:
        return self._sock is None

    def __enter__(self) -> HubEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals ----

    def _secure(self, context: zmq.Context[Any], folder: str | os.PathLike[str]) -> None:
        """CURVE server with ZAP: only actors holding a key of `<folder>/actors/` get through."""
        assert self._sock is not None
        public, secret = keys.hub_keys(folder)
        self._auth = ThreadAuthenticator(context, log=log)
        self._auth.start()
        self._auth.configure_curve(domain="*", location=str(keys.allowed_actors_dir(folder)))
        self._sock.curve_secretkey = secret
        self._sock.curve_publickey = public
        self._sock.curve_server = True

    def _socket(self) -> zmq.Socket[Any]:
        if self._sock is None:
            raise TransportClosed(f"hub endpoint {self.address} is closed")
        return self._sock

    def _send(self, parts: list[Any], *, what: str) -> bool:
        try:
            # copy=False: zero-copy above pyzmq's copy threshold (64 KiB), a plain copy below it.
            self._socket().send_multipart(parts, flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            counter = "transport/dropped_hwm"
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            counter = "transport/unroutable"
        self.counters[counter] += 1
        log.debug("hub: %s to peer %s not sent (%s)", what, parts[0].hex(), counter)
        return False

    def _reject(self, peer: bytes, exc: TransportError) -> None:
        key = f"transport/rejected_{exc.reason}"
        count = self.counters.get(key, 0) + 1
        self.counters[key] = count
        detail = str(exc)[:_MAX_DETAIL]  # peer-controlled text (tags, ids) stays short
        if count <= 10 or count % _LOG_EVERY == 0:  # a flood of garbage must not flood the log
            log.warning(
                "hub: rejected a message from peer %s (%s, %d so far): %s", peer.hex(), exc.reason, count, detail
            )
        self.send(peer, Refused(reason=f"{exc.reason}: {detail}"))


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


def private_ipc_address(directory: str | os.PathLike[str]) -> str:
    """`ipc://<directory>/hub.sock`, with `directory` created private (mode 0700, ours).

    If the socket path is longer than the OS allows (`IPC_PATH_MAX`), falls back to a fresh
    private directory under the system temp dir (`tempfile.mkdtemp`, 0700), logged at INFO; raises
    `AddressError` if even that is too long, or if `directory` exists but belongs to another user.
    """
    sock = Path(directory).absolute() / "hub.sock"
    if len(os.fsencode(sock)) <= IPC_PATH_MAX:
        _private_dir(sock.parent)
        return f"ipc://{sock}"
    short = Path(tempfile.mkdtemp(prefix="atgrpo-")) / "hub.sock"
    if len(os.fsencode(short)) > IPC_PATH_MAX:
        raise AddressError(
            f"ipc path {sock} is {len(os.fsencode(sock))} bytes, over the limit of {IPC_PATH_MAX}, "
            f"and so is the fallback {short}; set transport.endpoint to a shorter ipc path or tcp"
        )
    log.info("ipc path %s is over %d bytes; using %s instead", sock, IPC_PATH_MAX, short)
    return f"ipc://{short}"


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise AddressError(f"ipc directory {path} belongs to uid {info.st_uid}, not to this user")
    if info.st_mode & 0o077:
        path.chmod(0o700)


__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "IPC_PATH_MAX", "ActorClient", "HubEndpoint", "private_ipc_address"]
