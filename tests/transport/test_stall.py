"""Stall clocks of weights replies: a reply that takes far longer than the timeout arrives whole as
long as its chunks keep coming; a hub that goes silent fails with an error naming the policy,
version and chunk awaited; the hub's per-chunk trackers follow what the receiver takes in."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import torch
import zmq
from conftest import HubThread

from atgrpo.messages import Message, WeightsRequest, WorkRequest
from atgrpo.transport import ActorClient, HubEndpoint, TransportTimeout
from atgrpo.transport.codec import encode
from atgrpo.transport.tensors import weights_to_messages

TIMEOUT_S = 0.4
GAP_S = 0.12
"""Pause of the throttled hub before each chunk: well within the timeout, 8 of them well past it."""
WEIGHTS = {f"layer{i}": torch.full((256, 1024), float(i)) for i in range(8)}  # 1 MiB each
CHUNKS = weights_to_messages("shared", 5, WEIGHTS, chunk_bytes=1)  # one chunk per tensor
assert len(CHUNKS) == 8


def throttled(stop_after: int | None = None) -> Callable[[HubEndpoint, bytes, Message], None]:
    """A hub that sends each chunk of the reply `GAP_S` after the one before, and goes silent after
    `stop_after` chunks (None: sends them all)."""

    def handle(hub: HubEndpoint, peer: bytes, msg: Message) -> None:
        assert isinstance(msg, WeightsRequest)
        for chunk in CHUNKS[:stop_after]:
            time.sleep(GAP_S)
            assert hub.send_weights(peer, [chunk]) is not None

    return handle


def test_a_reply_slower_than_the_timeout_arrives_whole_while_its_chunks_keep_coming(
    ipc_address: str, serve: Callable[..., HubThread]
) -> None:
    hub = serve(ipc_address, throttled())
    with ActorClient(hub.address, "a0", timeout_s=TIMEOUT_S) as client:
        start = time.monotonic()
        header, tensors = client.request_weights("shared", 5)
        took = time.monotonic() - start
        assert took > 2 * TIMEOUT_S  # a clock over the whole transfer would have fired
        assert (header.version, header.chunks) == (5, 8)
        assert all(torch.equal(tensors[n], t) for n, t in WEIGHTS.items())
        assert client.counters == {"transport/timeouts": 0, "transport/resets": 0}


@pytest.mark.parametrize("sent", [0, 3])
def test_a_hub_that_goes_silent_mid_reply_fails_naming_the_chunk_awaited(
    ipc_address: str, serve: Callable[..., HubThread], sent: int
) -> None:
    hub = serve(ipc_address, throttled(stop_after=sent))
    with ActorClient(hub.address, "a0", timeout_s=TIMEOUT_S) as client:
        start = time.monotonic()
        with pytest.raises(TransportTimeout) as info:
            client.request_weights("shared", 5)
        took = time.monotonic() - start
        if sent == 0:
            assert str(info.value) == (
                f"no reply to weights_request (chunk 0 of the weights of 'shared' v5) from hub at "
                f"{hub.address} within {TIMEOUT_S} s"
            )
            assert TIMEOUT_S * 0.9 < took < TIMEOUT_S + 1.5
        else:
            assert str(info.value) == (
                f"weights of 'shared' v5 from hub at {hub.address}: chunk 3 of 8 did not come within "
                f"{TIMEOUT_S} s of the one before (3 came)"
            )
            # the stall clock runs from the last chunk: 3 gaps, then one timeout
            assert sent * GAP_S + TIMEOUT_S * 0.9 < took < sent * GAP_S + TIMEOUT_S + 1.5
        assert client.counters == {"transport/timeouts": 1, "transport/resets": 1}


def test_chunk_trackers_follow_what_the_receiver_takes_in(ipc_address: str) -> None:
    big = {f"t{i}": torch.zeros(4 << 20, dtype=torch.uint8) for i in range(6)}  # 4 MiB each
    messages = weights_to_messages("shared", 1, big, chunk_bytes=1)
    ctx = zmq.Context.instance()
    with HubEndpoint(ipc_address) as hub:
        actor = ctx.socket(zmq.DEALER)
        actor.setsockopt(zmq.LINGER, 0)
        actor.setsockopt(zmq.RCVHWM, 1)  # libzmq reads ahead one message, then the socket pushes back
        actor.setsockopt(zmq.RCVBUF, 64 * 1024)
        actor.connect(hub.address)
        try:
            actor.send(encode(WeightsRequest(actor_id="a0", policy="shared", version=1)))
            got = hub.recv(timeout_s=5.0)
            assert got is not None
            trackers = hub.send_weights(got[0], messages)
            assert trackers is not None and len(trackers) == 6
            time.sleep(0.3)
            held_back = sum(not t.done for t in trackers)
            assert held_back >= 2  # kernel buffers hold far less than 2 chunks of 4 MiB
            for _ in messages:
                assert actor.poll(5000, zmq.POLLIN)
                actor.recv_multipart(copy=False)
            deadline = time.monotonic() + 5.0
            while not all(t.done for t in trackers) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert all(t.done for t in trackers)
        finally:
            actor.close(linger=0)


class _VanishingPipe:
    """A socket whose POLLOUT says ready but whose send finds no pipe, as when the hub refuses a
    CURVE handshake between the poll and the send."""

    def __init__(self) -> None:
        self.sends = 0

    def poll(self, timeout_ms: int, flags: int) -> int:
        return flags

    def send(self, data: bytes, flags: int, copy: bool) -> None:
        self.sends += 1
        raise zmq.Again()


def test_a_pipe_torn_down_between_poll_and_send_is_a_timeout_not_a_zmq_error(ipc_address: str) -> None:
    with ActorClient(ipc_address, "a", timeout_s=0.2) as client:
        real, sock = client._sock, _VanishingPipe()
        client._sock = sock  # type: ignore[assignment]
        try:
            with pytest.raises(TransportTimeout, match="never sent"):
                client.request(WorkRequest(actor_id="a"))
        finally:
            client._sock = real
        assert sock.sends > 1  # it kept trying until the deadline
