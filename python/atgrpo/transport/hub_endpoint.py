"""The hub's side of the transport: `HubEndpoint`, a ROUTER socket the learner's rank 0 serves
every actor through. The protocol both sides rely on is stated in `endpoints.py`.

Invariants (the hub's part of the protocol):
- The hub never raises on what a peer sends: bad input is logged (logger `atgrpo.transport`),
  counted in `counters["transport/rejected_<reason>"]` (one per `REJECT_REASONS`, from 0),
  answered with `Refused("<reason>: <detail>")`, and skipped.
- Two size limits: `max_message_bytes` is checked before decoding (refused as `oversized`), and
  libzmq's ZMQ_MAXMSGSIZE, set to `hard_limit_bytes` (default 2x), drops the connection of a peer
  sending more than that without the hub ever seeing the message (that peer times out).
- Sends never block: a peer that is gone or whose queue is full (ZMQ_SNDHWM) makes `send` return
  False and bump `transport/unroutable` or `transport/dropped_hwm`; a weights reply stops at the
  first chunk that cannot be sent.
- `send_weights` returns one `zmq.MessageTracker` per chunk (send progress, `endpoints.py`), and
  counts every weights reply and its bytes in `weights_sent`.
- With `curve_keys`, the socket is a CURVE server whose ZAP handler (on a context of its own)
  admits only actors holding a key of `<folder>/actors/`. Closing never terminates a shared context.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator

from atgrpo.messages import Message, Refused
from atgrpo.transport import keys
from atgrpo.transport.codec import DEFAULT_MAX_MESSAGE_BYTES, decode, encode, kind_of
from atgrpo.transport.errors import AddressError, MalformedMessage, TransportClosed, TransportError

log = logging.getLogger("atgrpo.transport")

REJECT_REASONS = ("malformed", "invalid", "oversized", "unknown_kind", "protocol")
"""Reasons the hub counts; `transport/rejected_<reason>` exists in `counters` for each, from 0."""

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
        that chunk (`endpoints`' docstring); None (and counted once) if a chunk could not be sent, in
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


__all__ = ["REJECT_REASONS", "HubEndpoint"]
