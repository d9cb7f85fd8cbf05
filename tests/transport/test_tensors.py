"""`atgrpo.transport.tensors`: exact round trips, zero-copy on both sides, every bad frame typed."""

from __future__ import annotations

import gc
import zlib
from typing import Any

import msgspec
import pytest
import torch
import zmq

from atgrpo import _core
from atgrpo.messages import TensorMeta, WeightsHeader, WorkRequest
from atgrpo.transport.codec import decode, encode
from atgrpo.transport.errors import (
    ChecksumMismatch,
    FrameCountMismatch,
    MalformedMessage,
    ShapeMismatch,
    UnsupportedDtype,
    WeightsError,
    WeightsHeaderError,
)
from atgrpo.transport.tensors import (
    DTYPES,
    MAX_CHUNKS,
    NO_CHECKSUM,
    WeightsAssembler,
    messages_to_weights,
    weights_checksum,
    weights_to_messages,
)

RECV_TIMEOUT_MS = 5000


def state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    f32 = torch.randn(64, 33, generator=g)
    f32[0, :3] = torch.tensor([float("nan"), float("inf"), -0.0])
    return {
        "f32": f32,
        "bf16": torch.randn(7, 5, generator=g).to(torch.bfloat16),  # only bytes move; no bf16 math
        "f16": torch.randn(3, generator=g).half(),
        "f64": torch.randn(2, 2, generator=g, dtype=torch.float64),
        "i64": torch.tensor([-(2**63), 2**63 - 1, 0, 42]),
        "i32": torch.arange(-5, 5, dtype=torch.int32),
        "i16": torch.tensor([-3, 300], dtype=torch.int16),
        "i8": torch.tensor([-128, 127], dtype=torch.int8),
        "u8": torch.arange(256, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
        "big": torch.randn(256, 1024, generator=g),  # 1 MiB: zero-copy through zmq
        "transposed": torch.randn(5, 9, generator=g).t(),  # non-contiguous: sent as contiguous bytes
    }


def assert_bitwise_equal(sent: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(sent)
    for name, t in sent.items():
        r = got[name]
        assert r.dtype == t.dtype and r.shape == t.shape, name
        a = t.contiguous().reshape(-1).view(torch.uint8)
        b = r.contiguous().reshape(-1).view(torch.uint8)
        assert torch.equal(a, b), name  # bytes, so NaN and -0.0 count too


def pair() -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
    ctx = zmq.Context.instance()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    for s in (a, b):
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, RECV_TIMEOUT_MS)
    a.bind("tcp://127.0.0.1:*")
    b.connect(a.getsockopt_string(zmq.LAST_ENDPOINT))
    return a, b


def test_every_allowed_dtype_is_in_the_test() -> None:
    assert {t.dtype for t in state_dict().values()} == set(DTYPES.values())


def single(policy: str, version: int, tensors: dict[str, torch.Tensor], **kwargs: Any) -> list[Any]:
    """The one message of a reply that fits in one chunk."""
    messages = weights_to_messages(policy, version, tensors, **kwargs)
    assert len(messages) == 1
    return messages[0]


def one(frames: list[Any], **kwargs: Any) -> tuple[WeightsHeader, dict[str, torch.Tensor]]:
    return messages_to_weights([frames], **kwargs)


def test_round_trip_in_memory_is_exact() -> None:
    sent = state_dict()
    header, got = messages_to_weights(weights_to_messages("shared", 7, sent))
    assert (header.policy, header.version, header.chunk, header.chunks) == ("shared", 7, 0, 1)
    assert [m.frame for m in header.tensors] == list(range(1, len(sent) + 1))
    assert_bitwise_equal(sent, got)


def headers(messages: list[list[Any]]) -> list[WeightsHeader]:
    out = [decode(m[0], max_bytes=1 << 20) for m in messages]
    assert all(isinstance(h, WeightsHeader) for h in out)
    return out  # type: ignore[return-value]


def many_tensors() -> dict[str, torch.Tensor]:
    """300 tensors of 0 B to 40 KB in mixed dtypes, and one of 256 KB (larger than any chunk below)."""
    g = torch.Generator().manual_seed(3)
    out = {}
    for i in range(300):
        dtype = [torch.float32, torch.bfloat16, torch.int64, torch.uint8][i % 4]
        out[f"t{i}"] = torch.randint(-100, 100, (int(torch.randint(0, 10_000, (1,), generator=g)),), generator=g).to(
            dtype
        )
        if i == 150:
            out["huge"] = torch.randn(256, 256, generator=g)
    return out


@pytest.mark.parametrize("chunk_bytes", [1, 10_000, 64 * 1024, 1 << 30])
def test_chunks_take_tensors_in_order_and_round_trip_exactly(chunk_bytes: int) -> None:
    sent = many_tensors()
    messages = weights_to_messages("shared", 4, sent, chunk_bytes=chunk_bytes)
    hs = headers(messages)
    assert [(h.policy, h.version, h.chunk, h.chunks) for h in hs] == [("shared", 4, k, len(hs)) for k in range(len(hs))]
    assert [m.name for h in hs for m in h.tensors] == list(sent)  # in order, each once
    total = sum(t.numel() * t.element_size() for t in sent.values())
    target = max(chunk_bytes, -(-total // (MAX_CHUNKS - 1)))  # raised for chunk_bytes=1: 301 tensors
    assert len(messages) <= MAX_CHUNKS
    for h, m in zip(hs, messages):
        sizes = [memoryview(f).nbytes for f in m[1:]]
        assert [t.frame for t in h.tensors] == list(range(1, len(m)))  # frames count within the chunk
        assert sum(sizes[:-1]) < target  # a chunk closes as soon as it reaches the target ...
        assert sum(sizes) >= target or h.chunk == h.chunks - 1  # ... which all but the last reach
    huge = next(m for m, h in zip(messages, hs) if "huge" in [t.name for t in h.tensors])
    if target < sent["huge"].numel() * 4:
        assert sum(memoryview(f).nbytes for f in huge[1:]) > target  # never split: a chunk over the target
    if chunk_bytes == 1 << 30:
        assert len(messages) == 1
    header, got = messages_to_weights(messages)
    assert (header.chunks, [m.name for m in header.tensors]) == (len(messages), list(sent))
    assert_bitwise_equal(sent, got)


def test_a_reply_is_at_most_max_chunks_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    import atgrpo.transport.tensors as tensors_module

    monkeypatch.setattr(tensors_module, "MAX_CHUNKS", 8)
    sent = many_tensors()
    messages = weights_to_messages("p", 0, sent, chunk_bytes=1)
    assert 4 <= len(messages) <= 8
    assert_bitwise_equal(sent, messages_to_weights(messages)[1])
    few = {"a": torch.ones(3), "b": torch.ones(0), "c": torch.ones(2)}
    assert [len(m) - 1 for m in weights_to_messages("p", 0, few, chunk_bytes=1)] == [1, 2]  # empty b rides along
    assert len(weights_to_messages("p", 0, {})) == 1  # no tensors: one empty chunk
    header, got = messages_to_weights(weights_to_messages("p", 0, {}))
    assert (header.chunks, header.tensors, got) == (1, [], {})
    with pytest.raises(ValueError, match="chunk_bytes"):
        weights_to_messages("p", 0, sent, chunk_bytes=0)


def reheader(frames: list[Any], **changes: Any) -> list[Any]:
    header = decode(frames[0], max_bytes=1 << 20)
    return [encode(msgspec.structs.replace(header, **changes)), *frames[1:]]


def test_missing_repeated_reordered_and_foreign_chunks_are_rejected() -> None:
    m = weights_to_messages("p", 2, {"a": torch.ones(4), "b": torch.zeros(3), "c": torch.arange(5)}, chunk_bytes=1)
    assert len(m) == 3
    order_errors = {
        "chunk 1 missing": [m[0], m[2]],
        "chunk 0 repeated": [m[0], m[0], m[1], m[2]],
        "reordered": [m[0], m[2], m[1]],
        "starts at chunk 1": [m[1], m[2]],
        "another total": [m[0], reheader(m[1], chunks=4), m[2]],
        "another version": [m[0], reheader(m[1], version=3), m[2]],
        "another policy": [m[0], reheader(m[1], policy="q"), m[2]],
    }
    for case, messages in order_errors.items():
        with pytest.raises(WeightsHeaderError, match="expected chunk") as info:
            messages_to_weights(messages)
        assert info.value.reason == "weights_header", case
    with pytest.raises(WeightsHeaderError, match="expected chunk 1 of 3, got chunk 2 of 3 of 'p' v2"):
        messages_to_weights([m[0], m[2]])
    with pytest.raises(WeightsHeaderError, match="claim 0 chunks"):
        messages_to_weights([reheader(m[0], chunks=0)])
    with pytest.raises(WeightsHeaderError, match="appears twice"):
        messages_to_weights(
            [m[0], reheader(m[1], tensors=[msgspec.structs.replace(headers(m)[1].tensors[0], name="a")]), m[2]]
        )
    with pytest.raises(FrameCountMismatch, match="incomplete weights: 2 of 3 chunks came"):
        messages_to_weights(m[:2])
    with pytest.raises(FrameCountMismatch, match="incomplete weights: no chunk came"):
        messages_to_weights([])
    with pytest.raises(FrameCountMismatch, match="after the last of 3 chunks"):
        messages_to_weights([*m, m[0]])
    with pytest.raises(WeightsHeaderError, match="chunk 1 of the weights is a WorkRequest"):
        messages_to_weights([m[0], [encode(WorkRequest(actor_id="a"))]])


def test_corruption_in_any_chunk_fails_its_checksum() -> None:
    sent = many_tensors()
    messages = weights_to_messages("p", 1, sent, chunk_bytes=64 * 1024)
    n = len(messages)
    assert n >= 4
    for k in range(n):
        names = [t.name for t in headers(messages)[k].tensors]
        i = max(range(len(names)), key=lambda j: memoryview(messages[k][1 + j]).nbytes)  # a tensor with bytes
        flipped = bytearray(messages[k][1 + i])
        flipped[len(flipped) // 2] ^= 0x04
        corrupt = [list(m) for m in messages]
        corrupt[k][1 + i] = flipped
        with pytest.raises(ChecksumMismatch, match=f"'{names[i]}' of 'p' v1 \\(chunk {k} of {n}\\): crc32"):
            messages_to_weights(corrupt)
        _, got = messages_to_weights(corrupt, verify=False)  # the caller may opt out
        assert not torch.equal(got[names[i]], sent[names[i]])


def test_the_assembler_takes_chunks_one_at_a_time() -> None:
    sent = many_tensors()
    messages = weights_to_messages("p", 1, sent, chunk_bytes=64 * 1024)
    got = WeightsAssembler()
    with pytest.raises(FrameCountMismatch, match="no chunk came"):
        got.result()
    for k, frames in enumerate(messages):
        assert not got.done and got.received == k
        assert got.add(frames) == (k == len(messages) - 1)
    assert got.done and got.first is not None and got.first.chunks == len(messages)
    assert_bitwise_equal(sent, got.result()[1])


def test_round_trip_through_zmq_is_exact_and_zero_copy_on_receive() -> None:
    sent = state_dict()
    messages = weights_to_messages("shared", 1, sent, chunk_bytes=200_000)
    assert len(messages) > 1
    a, b = pair()
    try:
        for frames in messages:
            a.send_multipart(frames, copy=False)
        received = [b.recv_multipart(copy=False) for _ in messages]
    finally:
        a.close(linger=0)
        b.close(linger=0)
    where = next(k for k, h in enumerate(headers(messages)) if "big" in [t.name for t in h.tensors])
    names = [t.name for t in headers(messages)[where].tensors]
    big_frame = received[where][1 + names.index("big")]
    address = torch.frombuffer(big_frame.buffer, dtype=torch.uint8).data_ptr()
    _, got = messages_to_weights(received)
    assert got["big"].data_ptr() == address  # the tensor is the frame's memory, no copy
    del received, big_frame
    gc.collect()
    assert_bitwise_equal(sent, got)  # the tensors keep their frames alive
    got["big"].add_(1.0)  # received tensors are writable


def test_sending_is_zero_copy_for_cpu_contiguous_tensors() -> None:
    sent = state_dict()
    frames = single("p", 0, sent)
    view = frames[1 + list(sent).index("big")]
    assert isinstance(view, memoryview)
    assert torch.frombuffer(view, dtype=torch.uint8).data_ptr() == sent["big"].data_ptr()
    del sent  # the frames keep their tensors alive
    gc.collect()
    _, got = one(frames)
    assert got["big"].shape == (256, 1024)


def test_unaligned_and_read_only_frames_are_copied_into_proper_tensors() -> None:
    sent = {"x": torch.arange(6, dtype=torch.float64)}
    frames = single("p", 0, sent)
    raw = bytes(frames[1])
    unaligned = memoryview(bytearray(1 + len(raw)))[1:]
    unaligned[:] = raw
    for frame in (unaligned, raw):
        _, got = one([frames[0], frame])
        assert got["x"].data_ptr() % 8 == 0
        assert torch.equal(got["x"], sent["x"])


def test_corrupted_frame_fails_the_checksum() -> None:
    frames = single("p", 3, {"w": torch.ones(100)})
    corrupt = bytearray(frames[1])
    corrupt[17] ^= 0x40
    with pytest.raises(ChecksumMismatch, match="'w' of 'p' v3 \\(chunk 0 of 1\\): crc32") as info:
        one([frames[0], corrupt])
    assert info.value.reason == "checksum" and isinstance(info.value, WeightsError)
    _, got = one([frames[0], corrupt], verify=False)  # the caller may opt out
    assert not torch.equal(got["w"], torch.ones(100))


def test_checksums_can_be_skipped_by_the_sender() -> None:
    frames = single("p", 3, {"w": torch.ones(4)}, checksum=False)
    header = decode(frames[0], max_bytes=1 << 20)
    assert isinstance(header, WeightsHeader) and header.tensors[0].checksum == NO_CHECKSUM
    _, got = one(frames)
    assert torch.equal(got["w"], torch.ones(4))


def test_wrong_frame_count_is_rejected() -> None:
    frames = single("p", 0, {"a": torch.ones(2), "b": torch.ones(3)})
    with pytest.raises(FrameCountMismatch, match="lists 2 tensors but 1 raw frames came"):
        one(frames[:2])
    with pytest.raises(FrameCountMismatch, match="but 3 raw frames"):
        one([*frames, b"extra"])
    with pytest.raises(FrameCountMismatch):
        one([])


def header_with(meta: TensorMeta) -> bytes:
    return encode(WeightsHeader(policy="p", version=0, tensors=[meta], chunk=0, chunks=1))


def test_shape_mismatch_is_rejected() -> None:
    data = bytes(8 * 4)
    for shape in ([3, 3], [9], [2, 2, 2, 2], [-2, -4]):
        with pytest.raises(ShapeMismatch):
            one([header_with(TensorMeta("w", "float32", shape, 1, NO_CHECKSUM)), data])
    with pytest.raises(ShapeMismatch, match=r"'w' float32\[3\] needs 12 bytes, its frame has 32"):
        one([header_with(TensorMeta("w", "float32", [3], 1, NO_CHECKSUM)), data])


def test_unknown_or_unsupported_dtypes_are_rejected() -> None:
    for dtype in ("complex64", "object", "float32; rm -rf", ""):
        with pytest.raises(UnsupportedDtype):
            one([header_with(TensorMeta("w", dtype, [1], 1, NO_CHECKSUM)), bytes(8)])
    with pytest.raises(UnsupportedDtype, match="complex64"):
        weights_to_messages("p", 0, {"z": torch.zeros(2, dtype=torch.complex64)})


def test_inconsistent_headers_are_rejected() -> None:
    good = TensorMeta("w", "uint8", [2], 1, NO_CHECKSUM)
    with pytest.raises(WeightsHeaderError, match="claims frame 2"):
        one([header_with(TensorMeta("w", "uint8", [2], 2, NO_CHECKSUM)), b"ab"])
    dup = encode(WeightsHeader("p", 0, [good, TensorMeta("w", "uint8", [2], 2, NO_CHECKSUM)], chunk=0, chunks=1))
    with pytest.raises(WeightsHeaderError, match="appears twice"):
        one([dup, b"ab", b"cd"])
    with pytest.raises(WeightsHeaderError, match="WorkRequest"):
        one([encode(WorkRequest(actor_id="a")), b"ab"])
    with pytest.raises(MalformedMessage):
        one([b"\xc1 not msgpack", b"ab"])
    bad_meta = msgspec.msgpack.encode({"type": "weights", "policy": "p", "version": 0, "tensors": [["w", "uint8"]]})
    with pytest.raises(MalformedMessage):
        one([bad_meta, b"ab"])
    no_chunk_fields = msgspec.msgpack.encode({"type": "weights", "policy": "p", "version": 0, "tensors": [good]})
    with pytest.raises(MalformedMessage):  # a protocol 1 header
        one([no_chunk_fields, b"ab"])


def random_bytes(n: int, seed: int) -> bytes:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g).numpy().tobytes()


def crc_buffers() -> list[Any]:
    """Buffers of many sizes, starts and kinds; over 4 MiB per thread in all, so several threads run."""
    out: list[Any] = [b"", memoryview(b"abc")[3:], bytearray(b"123456789")]
    for i, n in enumerate([1, 3, 15, 16, 17, 63, 64, 65, 255, 4096, 65_537, 1_000_003]):
        raw = random_bytes(n + 8, i)
        out += [raw[:n], memoryview(raw)[1 : n + 1], memoryview(bytearray(raw))[7 : n + 7]]  # unaligned starts
    big = random_bytes(9 * 2**20 + 5, 99)
    out += [memoryview(big)[3:], zmq.Frame(big[: 3 * 2**20]), zmq.Frame(big[5:]).buffer]
    out.append(torch.randn(257, 33, generator=torch.Generator().manual_seed(1)).numpy())  # format "f", 2-D
    out.append(memoryview(random_bytes(64, 5)).cast("B", (8, 8)))
    return out


@pytest.mark.parametrize("threads", [0, 1, 2, 4, 16])
def test_core_crc32_equals_zlib_on_any_buffer(threads: int) -> None:
    buffers = crc_buffers()
    expected = [zlib.crc32(memoryview(b).cast("B") if not isinstance(b, zmq.Frame) else b.bytes) for b in buffers]
    assert _core.crc32_many(buffers, threads) == expected
    assert _core.crc32_many(buffers[::-1], threads) == expected[::-1]
    assert _core.crc32_many([], threads) == []
    assert zlib.crc32(b"123456789") == 0xCBF43926 == _core.crc32_many([b"123456789"], threads)[0]


def test_core_crc32_refuses_what_is_not_a_contiguous_buffer() -> None:
    with pytest.raises(BufferError, match="not C-contiguous"):
        _core.crc32_many([b"ok", memoryview(bytes(10))[::2]], 1)
    with pytest.raises(ValueError, match="not C-contiguous"):
        _core.crc32_many([torch.ones(4, 4).numpy()[:, 1]], 1)
    for not_a_buffer in ("text", 3, None):
        with pytest.raises(TypeError):
            _core.crc32_many([not_a_buffer], 1)


def test_threaded_checksums_match_zlib_and_catch_corruption(monkeypatch: pytest.MonkeyPatch) -> None:
    import atgrpo.transport.tensors as tensors_module

    monkeypatch.setattr(tensors_module, "CRC_THREADS", 4)  # several threads even on a 1-core machine
    sent = state_dict()
    sent["huge"] = torch.randn(3 * 2**20 + 7, generator=torch.Generator().manual_seed(2))  # 12 MiB: split
    frames = single("p", 1, sent, chunk_bytes=1 << 30)  # one message: the frames of every size together
    header = decode(frames[0], max_bytes=1 << 20)
    assert isinstance(header, WeightsHeader)
    assert [m.checksum for m in header.tensors] == [zlib.crc32(f) for f in frames[1:]]
    _, got = one(frames)
    assert_bitwise_equal(sent, got)
    huge = len(frames) - 1
    for where in (0, frames[huge].nbytes // 2, frames[huge].nbytes // 4 + 1, frames[huge].nbytes - 1):
        corrupt = list(frames)
        flipped = bytearray(frames[huge])
        flipped[where] ^= 0x10
        corrupt[huge] = memoryview(flipped)
        with pytest.raises(ChecksumMismatch, match="'huge' of 'p' v1"):
            one(corrupt)
    corrupt = list(frames)
    last_small = bytearray(frames[huge - 1])
    last_small[0] ^= 1
    corrupt[huge - 1] = last_small
    with pytest.raises(ChecksumMismatch, match="'transposed'"):
        one(corrupt)


def test_weights_checksum_tells_equal_weights_from_changed_ones():
    a = {"w": torch.randn(4, 3), "scalar": torch.tensor(2.0), "half": torch.zeros(5, dtype=torch.bfloat16)}
    same = {k: v.clone() for k, v in reversed(list(a.items()))}  # order of the dict does not matter
    assert weights_checksum(a) == weights_checksum(same)
    changed = {k: v.clone() for k, v in a.items()}
    changed["w"][2, 1] = torch.nextafter(changed["w"][2, 1], torch.tensor(10.0))  # one ulp
    renamed = {("v" if k == "w" else k): v for k, v in a.items()}
    assert weights_checksum(changed) != weights_checksum(a) != weights_checksum(renamed)
    assert weights_checksum({"t": torch.ones(3, 2).t()}) == weights_checksum(
        {"t": torch.ones(2, 3)}
    )  # bytes, not strides
    definition = 0  # unchanged by the move of the crc32s to the Rust core: ranks of old and new builds agree
    for name in sorted(a):
        part = zlib.crc32(a[name].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        definition = zlib.crc32(name.encode() + part.to_bytes(4, "little"), definition)
    assert weights_checksum(a) == definition
