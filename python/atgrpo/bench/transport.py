"""`atgrpo-bench transport`: our ZMQ transport against bare pyzmq moving the same bytes, in one run.

Weight sync (GB/s, higher is better): an `ActorClient.request_weights` round trip to a
`HubEndpoint` serving an fp32 state dict (1024x1024 matrices plus small vectors, ~50 and ~200 MB;
~12 and ~50 MB with --quick) over ipc and tcp loopback. Ours pays for everything the real path
does: the hub calls `weights_to_messages` (chunk headers + crc32 of every tensor) for each request
and sends the chunk messages, the actor decodes each chunk's header, verifies its crc32s and builds
its tensors (`WeightsAssembler`, overlapped with the arrival of the next chunk). The reference is a
bare DEALER/ROUTER pair: one request frame, then the same tensor buffers sent `copy=False` as one
multipart reply and received `copy=False`, no header, no checks, no tensors.
Extras: ours with the messages built once per version (what the hub does: checksums once, then
reused for every actor), ours with checksums off, and the crc32 of the largest tensor alone, on one
thread: ours (the Rust core's, as the transport uses it) and `zlib.crc32` (what it replaced).

Ours and the reference run side by side and are timed in turns (`interleaved_medians`).

Samples (messages/s, higher is better): an actor streaming `SampleBatch`es of 16 samples of
~120 prompt + 200 response tokens (with logprobs), each answered by a `SampleAck`: encode,
`ActorClient.request`, hub `recv` (decode, validation) and `send`, decode of the ack. The reference
sends pre-encoded bytes of the same size from a bare DEALER and gets pre-encoded ack bytes back
from a bare ROUTER, so the ratio is the cost of our codec and endpoint logic.

The peer (hub or bare ROUTER) is a thread in the same process, so both sides' Python work shares
one GIL, for ours and for the reference alike; libzmq's I/O thread moves the bytes. Timings are
medians over repeats, after a warm-up round trip.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch
import zmq

from atgrpo import _core
from atgrpo.bench.report import BenchRow, median_time
from atgrpo.messages import GroupKey, Sample, SampleAck, SampleBatch, WeightsRequest
from atgrpo.transport import ActorClient, HubEndpoint, encode, private_ipc_address, weights_to_messages
from atgrpo.transport.tensors import _bytes_view

SUITE = "transport"
MATRIX = 1024 * 1024 * 4  # bytes of one 1024x1024 fp32 matrix
TIMEOUT_S = 60.0
SAMPLES_PER_BATCH, PROMPT_TOKENS, RESPONSE_TOKENS = 16, 120, 200

# WeightsRequest.version selects how the benchmark hub builds its reply.
PER_REQUEST, CACHED, NO_CHECKSUM = 0, 1, 2


def state_dict(megabytes: int) -> dict[str, torch.Tensor]:
    """fp32 tensors totalling about `megabytes` MB: 1024x1024 matrices, each with two 1024 vectors."""
    g = torch.Generator().manual_seed(0)
    out = {}
    for i in range(max(1, round(megabytes * 1e6 / MATRIX))):
        out[f"layers.{i}.weight"] = torch.randn(1024, 1024, generator=g)
        out[f"layers.{i}.norm"] = torch.ones(1024)
        out[f"layers.{i}.bias"] = torch.zeros(1024)
    return out


def sample_batch(unit_id: int = 0) -> SampleBatch:
    samples = [
        Sample(
            run_id="bench",
            policy="shared",
            version=3,
            step=1,
            role="actor",
            key=GroupKey(i // 4, 0, 1),
            prompt_ids=[(i * 31 + j) % 151000 for j in range(PROMPT_TOKENS)],
            response_ids=[(i * 17 + j * 7) % 151000 for j in range(RESPONSE_TOKENS)],
            logprobs=[-0.001 * (j + 1) * (i + 1) for j in range(RESPONSE_TOKENS)],
            reward=0.5,
            reward_team=0.0,
            reward_local=0.5,
            branch=i % 4,
        )
        for i in range(SAMPLES_PER_BATCH)
    ]
    return SampleBatch(actor_id="bench-actor", unit_id=unit_id, samples=samples, last=False)


@contextmanager
def _addresses(transport: str) -> Iterator[str]:
    if transport == "tcp":
        yield "tcp://127.0.0.1:*"
        return
    directory = tempfile.mkdtemp(prefix="atgrpo-bench-")
    try:
        yield private_ipc_address(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def _thread(loop: Callable[[threading.Event], None]) -> Iterator[None]:
    stop = threading.Event()
    thread = threading.Thread(target=loop, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


@contextmanager
def our_hub(address: str, state: dict[str, torch.Tensor]) -> Iterator[str]:
    """A `HubEndpoint` in a thread: weights (per `WeightsRequest.version` mode) and sample acks."""
    hub = HubEndpoint(address)
    cached = weights_to_messages("shared", CACHED, state)

    def loop(stop: threading.Event) -> None:
        while not stop.is_set():
            got = hub.recv(timeout_s=0.05)
            if got is None:
                continue
            peer, msg = got
            if isinstance(msg, WeightsRequest):
                if msg.version == CACHED:
                    messages = cached
                else:
                    messages = weights_to_messages("shared", msg.version, state, checksum=msg.version != NO_CHECKSUM)
                hub.send_weights(peer, messages)
            elif isinstance(msg, SampleBatch):
                hub.send(peer, SampleAck(unit_id=msg.unit_id, accepted=len(msg.samples), rejected=0))

    try:
        with _thread(loop):
            yield hub.address
    finally:
        hub.close()


@contextmanager
def raw_router(address: str, reply: list[Any]) -> Iterator[str]:
    """A bare ROUTER in a thread answering every request with `reply` (copy=False)."""
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(address)

    def loop(stop: threading.Event) -> None:
        while not stop.is_set():
            if sock.poll(50, zmq.POLLIN):
                peer, _ = sock.recv_multipart(copy=False)
                sock.send_multipart([peer, *reply], copy=False)

    try:
        with _thread(loop):
            yield sock.getsockopt_string(zmq.LAST_ENDPOINT)
    finally:
        sock.close(linger=0)


class RawDealer:
    """A bare DEALER: send one request frame, wait for the whole reply (copy=False), return it."""

    def __init__(self, address: str) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(address)

    def request(self, data: Any) -> list[zmq.Frame]:
        self.sock.send(data, copy=False)
        if not self.sock.poll(round(TIMEOUT_S * 1000), zmq.POLLIN):
            raise TimeoutError(f"raw reference: no reply within {TIMEOUT_S} s")
        return self.sock.recv_multipart(copy=False)

    def close(self) -> None:
        self.sock.close(linger=0)


def interleaved_medians(fns: dict[str, Callable[[], object]], repeats: int, inner: int = 1) -> dict[str, float]:
    """Median seconds per call of each function, timed in turns (ours, reference, ours, ...).

    Taking turns, rather than all of one then all of the other, spreads the drift of a shared
    machine over both sides evenly, so the ratios are steadier than the absolute numbers.
    """
    for fn in fns.values():
        fn()  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            samples[name].append((time.perf_counter() - start) / inner)
    return {name: statistics.median(values) for name, values in samples.items()}


def _weights_row(megabytes: int, transport: str, repeats: int) -> BenchRow:
    state = state_dict(megabytes)
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    raw_views = [_bytes_view(t) for t in state.values()]
    with (
        _addresses(transport) as address,
        our_hub(address, state) as hub_address,
        _addresses(transport) as raw_address,
        raw_router(raw_address, raw_views) as router_address,
    ):
        client = ActorClient(hub_address, "bench", timeout_s=TIMEOUT_S)
        dealer = RawDealer(router_address)
        try:
            _, tensors = client.request_weights("shared", PER_REQUEST)
            assert len(tensors) == len(state) and torch.equal(tensors["layers.0.weight"], state["layers.0.weight"])
            assert len(dealer.request(b"w")) == len(raw_views)
            del tensors
            times = interleaved_medians(
                {
                    "ours": partial(client.request_weights, "shared", PER_REQUEST),
                    "raw": partial(dealer.request, b"w"),
                    "cached": partial(client.request_weights, "shared", CACHED),
                    "no_checksum": partial(client.request_weights, "shared", NO_CHECKSUM),
                },
                repeats,
            )
        finally:
            client.close()
            dealer.close()
    big = max(raw_views, key=lambda v: v.nbytes)
    crc_s = median_time(partial(_core.crc32_many, [big], 1), repeats)
    zlib_s = median_time(partial(zlib.crc32, big), repeats)
    gbps = {name: nbytes / t / 1e9 for name, t in times.items()}
    return BenchRow(
        suite=SUITE,
        name=f"weight sync {nbytes / 1e6:.0f} MB fp32, {transport}",
        value=gbps["ours"],
        unit="GB/s",
        reference_name="bare zmq multipart, copy=False",
        reference_value=gbps["raw"],
        extra={
            "megabytes": nbytes / 1e6,
            "tensors": float(len(state)),
            "chunks": float(len(weights_to_messages("shared", 0, state, checksum=False))),
            "frames_cached_GBps": gbps["cached"],
            "checksum_off_GBps": gbps["no_checksum"],
            "crc32_GBps": big.nbytes / crc_s / 1e9,
            "zlib_crc32_GBps": big.nbytes / zlib_s / 1e9,
        },
    )


def _samples_row(transport: str, repeats: int, inner: int) -> BenchRow:
    batch = sample_batch()
    encoded = encode(batch)
    ack = encode(SampleAck(unit_id=0, accepted=SAMPLES_PER_BATCH, rejected=0))
    with (
        _addresses(transport) as address,
        our_hub(address, {}) as hub_address,
        _addresses(transport) as raw_address,
        raw_router(raw_address, [ack]) as router_address,
    ):
        client = ActorClient(hub_address, "bench", timeout_s=TIMEOUT_S)
        dealer = RawDealer(router_address)
        try:
            reply = client.request(batch)
            assert isinstance(reply, SampleAck) and reply.accepted == SAMPLES_PER_BATCH
            times = interleaved_medians(
                {"ours": partial(client.request, batch), "raw": partial(dealer.request, encoded)}, repeats, inner
            )
        finally:
            client.close()
            dealer.close()
    return BenchRow(
        suite=SUITE,
        name=f"SampleBatch {SAMPLES_PER_BATCH}x{PROMPT_TOKENS}+{RESPONSE_TOKENS} tok + ack, {transport}",
        value=1.0 / times["ours"],
        unit="msgs/s",
        reference_name="bare zmq, pre-encoded bytes",
        reference_value=1.0 / times["raw"],
        extra={
            "message_bytes": float(len(encoded)),
            "response_tokens_per_s": SAMPLES_PER_BATCH * RESPONSE_TOKENS / times["ours"],
        },
    )


def run(quick: bool) -> list[BenchRow]:
    sizes = (12, 50) if quick else (50, 200)
    repeats = 3 if quick else 9
    rows = [_weights_row(mb, transport, repeats) for mb in sizes for transport in ("ipc", "tcp")]
    inner = 20 if quick else 100
    rows += [_samples_row(transport, repeats, inner) for transport in ("ipc", "tcp")]
    return rows


__all__ = ["run", "sample_batch", "state_dict"]
