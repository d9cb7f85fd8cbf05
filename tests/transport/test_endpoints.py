"""`HubEndpoint` / `ActorClient` over real sockets: bad peers are refused and counted while the hub
keeps serving; weights arrive intact, chunk by chunk; timeouts name what was awaited and never leak
late replies or the rest of a reply the client stopped reading."""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import torch
import zmq
from conftest import HubThread

from atgrpo.messages import (
    PROTOCOL_VERSION,
    Hello,
    Message,
    NoWork,
    Refused,
    SampleAck,
    SampleBatch,
    WeightsRequest,
    Welcome,
    WorkRequest,
)
from atgrpo.transport import ActorClient, HubEndpoint, TransportTimeout, private_ipc_address
from atgrpo.transport.codec import decode, encode
from atgrpo.transport.endpoints import IPC_PATH_MAX
from atgrpo.transport.errors import (
    AddressError,
    ChecksumMismatch,
    TransportClosed,
    UnexpectedReply,
    WeightsHeaderError,
)
from atgrpo.transport.tensors import weights_to_messages

WEIGHTS = {
    "embed": torch.randn(512, 256),
    "norm": torch.ones(4096, dtype=torch.bfloat16),
    "step": torch.tensor([12], dtype=torch.int64),
}
CHUNKS = weights_to_messages("shared", 5, WEIGHTS, chunk_bytes=1)  # one chunk per tensor
assert len(CHUNKS) == 3


def answer(hub: HubEndpoint, peer: bytes, msg: Message) -> None:
    """A minimal hub: one well-formed reply to every message."""
    if isinstance(msg, Hello):
        hub.send(peer, Welcome(run_id=msg.run_id, versions={"shared": 5}))
    elif isinstance(msg, WorkRequest):
        hub.send(peer, NoWork(retry_after_s=0.1, reason=f"idle {msg.actor_id}"))
    elif isinstance(msg, SampleBatch):
        hub.send(peer, SampleAck(unit_id=msg.unit_id, accepted=len(msg.samples), rejected=0))
    elif isinstance(msg, WeightsRequest) and msg.policy == "shared" and msg.version in (-1, 5):
        hub.send_weights(peer, CHUNKS)
    else:
        hub.send(peer, Refused(reason=f"cannot serve {msg!r}"))


def raw_request(address: str, frames: list[bytes], timeout_s: float = 5.0) -> Message | None:
    """Send arbitrary frames from a bare DEALER and decode the one reply (None: no reply in time)."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(address)
        sock.send_multipart(frames)
        if not sock.poll(round(timeout_s * 1000), zmq.POLLIN):
            return None
        return decode(sock.recv(), max_bytes=1 << 20)
    finally:
        sock.close(linger=0)


def test_requests_get_their_replies(ipc_address: str, serve: Callable[..., HubThread]) -> None:
    hub = serve(ipc_address, answer)
    with ActorClient(hub.address, "a0", timeout_s=5.0) as client:
        reply = client.request(Hello(protocol=PROTOCOL_VERSION, actor_id="a0", run_id="r", policies=["shared"]))
        assert reply == Welcome(run_id="r", versions={"shared": 5})
        for _ in range(20):
            assert client.request(WorkRequest(actor_id="a0")) == NoWork(retry_after_s=0.1, reason="idle a0")
    hub.stop()
    assert all(v == 0 for v in hub.counters.values()), hub.counters


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_weights_round_trip_through_the_endpoints(
    transport: str, ipc_address: str, serve: Callable[..., HubThread]
) -> None:
    hub = serve(ipc_address if transport == "ipc" else "tcp://127.0.0.1:*", answer)
    assert hub.address.startswith(transport)
    with ActorClient(hub.address, "a0", timeout_s=5.0) as client:
        for version in (5, -1):
            header, tensors = client.request_weights("shared", version)
            assert (header.policy, header.version) == ("shared", 5)
            assert list(tensors) == list(WEIGHTS)
            for name, t in WEIGHTS.items():
                assert tensors[name].dtype == t.dtype and torch.equal(tensors[name], t)
        with pytest.raises(UnexpectedReply, match="answered with Refused"):
            client.request_weights("shared", 4)
        assert client.request(WorkRequest(actor_id="a0")) == NoWork(0.1, "idle a0")  # still in step


@pytest.mark.parametrize("chunk", [0, 1, 2])
def test_corrupted_weights_raise_on_the_actor_and_leave_nothing_behind(
    chunk: int, ipc_address: str, serve: Callable[..., HubThread]
) -> None:
    corrupt = [list(m) for m in CHUNKS]
    corrupt[chunk][1] = bytes(len(corrupt[chunk][1]))  # that chunk's tensor, zeroed
    bad = [True]

    def bad_once(hub: HubEndpoint, peer: bytes, msg: Message) -> None:
        if isinstance(msg, WeightsRequest) and bad:
            hub.send_weights(peer, corrupt)
            bad.clear()
        else:
            answer(hub, peer, msg)

    hub = serve(ipc_address, bad_once)
    with ActorClient(hub.address, "a0", timeout_s=5.0) as client:
        name = list(WEIGHTS)[chunk]
        with pytest.raises(ChecksumMismatch, match=f"'{name}' of 'shared' v5 \\(chunk {chunk} of 3\\)"):
            client.request_weights("shared", 5)
        # The chunks after the bad one went to the reset socket: the next replies are whole and right.
        assert isinstance(client.request(WorkRequest(actor_id="a0")), NoWork)
        _, tensors = client.request_weights("shared", 5)
        assert all(torch.equal(tensors[n], t) for n, t in WEIGHTS.items())


def test_a_bad_first_chunk_raises_before_the_rest_of_the_reply_comes(
    ipc_address: str, serve: Callable[..., HubThread]
) -> None:
    corrupt = list(CHUNKS[0])
    corrupt[1] = bytes(len(corrupt[1]))

    def first_only(hub: HubEndpoint, peer: bytes, msg: Message) -> None:
        hub.send_weights(peer, [corrupt]) if isinstance(msg, WeightsRequest) else answer(hub, peer, msg)

    hub = serve(ipc_address, first_only)
    with ActorClient(hub.address, "a0", timeout_s=5.0) as client:
        start = time.monotonic()
        with pytest.raises(ChecksumMismatch, match="'embed'"):
            client.request_weights("shared", 5)  # chunk 0 is checked as it arrives
        assert time.monotonic() - start < 2.5


def test_a_truncated_reply_times_out_naming_the_missing_chunk_and_its_rest_is_never_read(
    ipc_address: str, serve: Callable[..., HubThread]
) -> None:
    held: list[bytes] = []

    def truncating(hub: HubEndpoint, peer: bytes, msg: Message) -> None:
        if isinstance(msg, WeightsRequest) and msg.version == 5 and not held:
            hub.send_weights(peer, CHUNKS[:2])  # the last chunk stays behind ...
            held.append(peer)
        elif isinstance(msg, WeightsRequest) and held:
            hub.send_weights(held[0], CHUNKS[2:])  # ... and is sent late, to the abandoned peer
            time.sleep(0.05)
            answer(hub, peer, msg)
        else:
            answer(hub, peer, msg)

    hub = serve(ipc_address, truncating)
    with ActorClient(hub.address, "a0", timeout_s=0.3) as client:
        start = time.monotonic()
        with pytest.raises(TransportTimeout) as info:
            client.request_weights("shared", 5)
        assert 0.25 < time.monotonic() - start < 2.0
        assert str(info.value) == (
            f"weights of 'shared' v5 from hub at {hub.address}: chunk 2 of 3 did not come within 0.3 s of the one "
            "before (2 came)"
        )
        assert client.counters == {"transport/timeouts": 1, "transport/resets": 1}
        header, tensors = client.request_weights("shared", -1, timeout_s=5.0)
        assert (header.version, header.chunks, list(tensors)) == (5, 3, list(WEIGHTS))
        assert all(torch.equal(tensors[n], t) for n, t in WEIGHTS.items())


def test_chunks_out_of_order_are_a_protocol_error_that_does_not_spill_into_the_next_request(
    ipc_address: str, serve: Callable[..., HubThread]
) -> None:
    replies = [[CHUNKS[0], CHUNKS[2], CHUNKS[1]], [CHUNKS[1], CHUNKS[2]], [CHUNKS[0], CHUNKS[0], *CHUNKS[1:]]]

    def scrambled(hub: HubEndpoint, peer: bytes, msg: Message) -> None:
        if isinstance(msg, WeightsRequest) and replies:
            hub.send_weights(peer, replies.pop(0))
        else:
            answer(hub, peer, msg)

    hub = serve(ipc_address, scrambled)
    with ActorClient(hub.address, "a0", timeout_s=5.0) as client:
        for expected in (
            "expected chunk 1 of 3, got chunk 2 of 3",
            "expected chunk 0 of 3, got chunk 1 of 3",
            "expected chunk 1 of 3, got chunk 0 of 3",
        ):
            with pytest.raises(WeightsHeaderError, match=expected):
                client.request_weights("shared", 5)
        _, tensors = client.request_weights("shared", 5)
        assert all(torch.equal(tensors[n], t) for n, t in WEIGHTS.items())
        assert client.counters["transport/resets"] == 3


def test_bad_messages_are_refused_counted_and_the_hub_keeps_serving(
    ipc_address: str, serve: Callable[..., HubThread], caplog: pytest.LogCaptureFixture
) -> None:
    hub = serve(ipc_address, answer, max_message_bytes=4096)
    bad: dict[str, list[bytes]] = {
        "malformed": [b"\xc1\xc1 this is not msgpack"],
        "invalid": [msgspec.msgpack.encode({"type": "work_request", "actor_id": 5})],
        "unknown_kind": [msgspec.msgpack.encode({"type": "self_destruct", "now": True})],
        "oversized": [encode(WorkRequest(actor_id="x" * 5000))],  # over the limit, under the hard limit
        "protocol": [encode(Hello(protocol=PROTOCOL_VERSION + 1, actor_id="old", run_id="r", policies=[]))],
    }
    truncated = encode(SampleBatch(actor_id="a", unit_id=1, samples=[], last=True))[:-4]
    with caplog.at_level(logging.WARNING, logger="atgrpo.transport"):
        for reason, frames in bad.items():
            reply = raw_request(hub.address, frames)
            assert isinstance(reply, Refused) and reply.reason.startswith(f"{reason}: "), (reason, reply)
        assert raw_request(hub.address, [truncated]).reason.startswith("malformed: ")  # type: ignore[union-attr]
        two_frames = raw_request(hub.address, [encode(WorkRequest(actor_id="a")), b"extra"])
        assert isinstance(two_frames, Refused) and "expected 1 frame" in two_frames.reason
        assert raw_request(hub.address, [b""]).reason.startswith("malformed: ")  # type: ignore[union-attr]
        # After all that, a good request still gets its answer, from a raw socket and from a client.
        assert raw_request(hub.address, [encode(WorkRequest(actor_id="ok"))]) == NoWork(0.1, "idle ok")
        with ActorClient(hub.address, "a1", timeout_s=5.0) as client:
            refused = client.request(Hello(protocol=PROTOCOL_VERSION + 1, actor_id="a1", run_id="r", policies=[]))
            assert isinstance(refused, Refused) and refused.reason.startswith("protocol: peer 'a1' speaks protocol")
            assert client.request(WorkRequest(actor_id="a1")) == NoWork(0.1, "idle a1")
    hub.stop()
    assert hub.counters == {
        "transport/rejected_malformed": 4,
        "transport/rejected_invalid": 1,
        "transport/rejected_oversized": 1,
        "transport/rejected_unknown_kind": 1,
        "transport/rejected_protocol": 2,
        "transport/unroutable": 0,
        "transport/dropped_hwm": 0,
    }
    assert [type(m) for m in hub.received] == [WorkRequest, WorkRequest]  # only the good ones
    logged = " ".join(r.getMessage() for r in caplog.records)
    for reason in bad:
        assert f"({reason}, " in logged


def test_a_message_over_the_hard_limit_drops_only_that_connection(
    ipc_address: str, serve: Callable[..., HubThread]
) -> None:
    hub = serve(ipc_address, answer, max_message_bytes=1000)  # hard limit 2000: libzmq drops the peer
    with ActorClient(hub.address, "big", timeout_s=0.5) as client:
        with pytest.raises(TransportTimeout, match="no reply to work_request"):
            client.request(WorkRequest(actor_id="y" * 3000))
        assert client.request(WorkRequest(actor_id="big"), timeout_s=5.0) == NoWork(0.1, "idle big")
    assert raw_request(hub.address, [encode(WorkRequest(actor_id="other"))]) == NoWork(0.1, "idle other")


def test_timeout_names_what_was_awaited_and_a_later_request_works(tmp_path: Path) -> None:
    address = private_ipc_address(tmp_path / "ipc")
    client = ActorClient(address, "a0", timeout_s=0.2)
    try:
        start = time.monotonic()
        with pytest.raises(TransportTimeout) as info:
            client.request(WorkRequest(actor_id="a0"))
        assert 0.15 < time.monotonic() - start < 2.0
        assert str(info.value) == f"no reply to work_request from hub at {address} within 0.2 s"
        awaited = "no reply to weights_request \\(chunk 0 of the weights of 'shared' v5\\) from hub at .* within 0.1 s"
        with pytest.raises(TransportTimeout, match=awaited):
            client.request_weights("shared", 5, timeout_s=0.1)
        assert client.counters == {"transport/timeouts": 2, "transport/resets": 2}
        received: list[Message] = []

        def record(hub: HubEndpoint, peer: bytes, msg: Message) -> None:
            received.append(msg)
            answer(hub, peer, msg)

        hub = HubThread(address, record)  # the hub comes up late; the client reconnects by itself
        try:
            assert client.request(WorkRequest(actor_id="second"), timeout_s=5.0) == NoWork(0.1, "idle second")
        finally:
            hub.stop()
        assert received == [WorkRequest(actor_id="second")]  # the abandoned requests died with their socket
    finally:
        client.close()
    with pytest.raises(TransportClosed):
        client.request(WorkRequest(actor_id="a0"))


def test_a_late_reply_is_never_taken_for_the_next_answer(ipc_address: str, serve: Callable[..., HubThread]) -> None:
    held: list[bytes] = []
    sent_late: list[bool] = []

    def slow_first(hub: HubEndpoint, peer: bytes, msg: Message) -> None:
        assert isinstance(msg, WorkRequest)
        if msg.actor_id == "first":
            held.append(peer)  # no answer until the client has given up
            return
        if held:
            sent_late.append(hub.send(held.pop(), NoWork(retry_after_s=9.0, reason="late answer to first")))
            time.sleep(0.05)  # let a misrouted late reply reach the client before the real one
        hub.send(peer, NoWork(retry_after_s=0.0, reason=f"answer to {msg.actor_id}"))

    hub = serve(ipc_address, slow_first)
    with ActorClient(hub.address, "a0", timeout_s=0.3) as client:
        with pytest.raises(TransportTimeout, match="no reply to work_request"):
            client.request(WorkRequest(actor_id="first"))
        for name in ("second", "third", "fourth"):
            reply = client.request(WorkRequest(actor_id=name), timeout_s=5.0)
            assert reply == NoWork(retry_after_s=0.0, reason=f"answer to {name}")
    hub.stop()
    assert len(sent_late) == 1 and len(held) == 0
    # The late reply went to the abandoned peer: refused by libzmq, or queued to a dead pipe.
    assert hub.counters["transport/unroutable"] == (0 if sent_late[0] else 1)


def test_hub_sends_to_a_gone_peer_are_counted_not_raised(ipc_address: str) -> None:
    with HubEndpoint(ipc_address) as hub:
        assert hub.send(b"\x00nobody", NoWork(retry_after_s=1.0, reason="x")) is False
        assert hub.send_weights(b"\x00nobody", CHUNKS) is None  # stops at the first chunk: counted once
        assert hub.counters["transport/unroutable"] == 2
        assert hub.recv(timeout_s=0.01) is None
    assert hub.closed
    with pytest.raises(TransportClosed):
        hub.recv(timeout_s=0.01)
    hub.close()  # idempotent


def test_recv_with_zero_timeout_drains_bad_messages_without_blocking(ipc_address: str) -> None:
    with HubEndpoint(ipc_address) as hub:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(hub.address)
            for _ in range(3):
                sock.send(b"\xc1")
            sock.send(encode(WorkRequest(actor_id="good")))
            deadline = time.monotonic() + 5.0
            got = None
            while got is None and time.monotonic() < deadline:
                got = hub.recv(timeout_s=0)
            assert got is not None and got[1] == WorkRequest(actor_id="good")
            assert hub.counters["transport/rejected_malformed"] == 3
        finally:
            sock.close(linger=0)


def test_many_actors_at_once(ipc_address: str, serve: Callable[..., HubThread]) -> None:
    hub = serve(ipc_address, answer)
    errors: list[BaseException] = []

    def actor(i: int) -> None:
        try:
            with ActorClient(hub.address, f"a{i}", timeout_s=5.0) as client:
                for _ in range(10):
                    assert client.request(WorkRequest(actor_id=f"a{i}")) == NoWork(0.1, f"idle a{i}")
                _, tensors = client.request_weights("shared", -1)
                assert torch.equal(tensors["embed"], WEIGHTS["embed"])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=actor, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not any(t.is_alive() for t in threads) and not errors, errors


# ---- addresses ----


def test_private_ipc_address_is_a_0700_directory(tmp_path: Path) -> None:
    directory = tmp_path / "run" / "ipc"
    address = private_ipc_address(directory)
    assert address == f"ipc://{directory}/hub.sock"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    private_ipc_address(loose)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700


def test_too_long_ipc_paths_fall_back_to_a_short_private_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, serve: Callable[..., HubThread]
) -> None:
    long_dir = tmp_path / ("d" * 60) / ("e" * 60)
    with caplog.at_level(logging.INFO, logger="atgrpo.transport"):
        address = private_ipc_address(long_dir)
    path = Path(address.removeprefix("ipc://"))
    try:
        assert len(os.fsencode(path)) <= IPC_PATH_MAX and path.name == "hub.sock"
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert "using" in caplog.text
        hub = serve(address, answer)
        with ActorClient(hub.address, "a", timeout_s=5.0) as client:
            assert client.request(WorkRequest(actor_id="a")) == NoWork(0.1, "idle a")
        hub.stop()
    finally:
        path.unlink(missing_ok=True)
        path.parent.rmdir()


def test_bad_addresses_are_typed_errors() -> None:
    with pytest.raises(AddressError, match="cannot bind"):
        HubEndpoint("bogus://nowhere")
    with pytest.raises(AddressError, match="cannot connect"):
        ActorClient("bogus://nowhere", "a")


def test_request_rejects_a_multi_frame_answer(ipc_address: str, serve: Callable[..., HubThread]) -> None:
    def weights_for_everything(hub: HubEndpoint, peer: bytes, msg: Message) -> None:
        hub.send_weights(peer, CHUNKS)

    hub = serve(ipc_address, weights_for_everything)
    with ActorClient(hub.address, "a0", timeout_s=5.0) as client:
        with pytest.raises(UnexpectedReply, match="work_request got a 2-frame reply"):
            client.request(WorkRequest(actor_id="a0"))
        header, _ = client.request_weights("shared", 5)  # still in step: the other chunks were dropped
        assert header.version == 5
