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
from atgrpo.transport.tensors import DTYPES, NO_CHECKSUM, frames_to_weights, weights_checksum, weights_to_frames

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


def test_round_trip_in_memory_is_exact() -> None:
    sent = state_dict()
    header, got = frames_to_weights(weights_to_frames("shared", 7, sent))
    assert (header.policy, header.version) == ("shared", 7)
    assert [m.frame for m in header.tensors] == list(range(1, len(sent) + 1))
    assert_bitwise_equal(sent, got)


def test_round_trip_through_zmq_is_exact_and_zero_copy_on_receive() -> None:
    sent = state_dict()
    a, b = pair()
    try:
        a.send_multipart(weights_to_frames("shared", 1, sent), copy=False)
        frames = b.recv_multipart(copy=False)
    finally:
        a.close(linger=0)
        b.close(linger=0)
    big_frame = frames[1 + list(sent).index("big")]
    address = torch.frombuffer(big_frame.buffer, dtype=torch.uint8).data_ptr()
    header, got = frames_to_weights(frames)
    assert got["big"].data_ptr() == address  # the tensor is the frame's memory, no copy
    del frames, big_frame
    gc.collect()
    assert_bitwise_equal(sent, got)  # the tensors keep their frames alive
    got["big"].add_(1.0)  # received tensors are writable


def test_sending_is_zero_copy_for_cpu_contiguous_tensors() -> None:
    sent = state_dict()
    frames = weights_to_frames("p", 0, sent)
    view = frames[1 + list(sent).index("big")]
    assert isinstance(view, memoryview)
    assert torch.frombuffer(view, dtype=torch.uint8).data_ptr() == sent["big"].data_ptr()
    del sent  # the frames keep their tensors alive
    gc.collect()
    _, got = frames_to_weights(frames)
    assert got["big"].shape == (256, 1024)


def test_unaligned_and_read_only_frames_are_copied_into_proper_tensors() -> None:
    sent = {"x": torch.arange(6, dtype=torch.float64)}
    frames = weights_to_frames("p", 0, sent)
    raw = bytes(frames[1])
    unaligned = memoryview(bytearray(1 + len(raw)))[1:]
    unaligned[:] = raw
    for frame in (unaligned, raw):
        _, got = frames_to_weights([frames[0], frame])
        assert got["x"].data_ptr() % 8 == 0
        assert torch.equal(got["x"], sent["x"])


def test_corrupted_frame_fails_the_checksum() -> None:
    frames = weights_to_frames("p", 3, {"w": torch.ones(100)})
    corrupt = bytearray(frames[1])
    corrupt[17] ^= 0x40
    with pytest.raises(ChecksumMismatch, match="'w' of 'p' v3: crc32") as info:
        frames_to_weights([frames[0], corrupt])
    assert info.value.reason == "checksum" and isinstance(info.value, WeightsError)
    _, got = frames_to_weights([frames[0], corrupt], verify=False)  # the caller may opt out
    assert not torch.equal(got["w"], torch.ones(100))


def test_checksums_can_be_skipped_by_the_sender() -> None:
    frames = weights_to_frames("p", 3, {"w": torch.ones(4)}, checksum=False)
    header = decode(frames[0], max_bytes=1 << 20)
    assert isinstance(header, WeightsHeader) and header.tensors[0].checksum == NO_CHECKSUM
    _, got = frames_to_weights(frames)
    assert torch.equal(got["w"], torch.ones(4))


def test_wrong_frame_count_is_rejected() -> None:
    frames = weights_to_frames("p", 0, {"a": torch.ones(2), "b": torch.ones(3)})
    with pytest.raises(FrameCountMismatch, match="list 2 tensors but 1 raw frames came"):
        frames_to_weights(frames[:2])
    with pytest.raises(FrameCountMismatch, match="but 3 raw frames"):
        frames_to_weights([*frames, b"extra"])
    with pytest.raises(FrameCountMismatch):
        frames_to_weights([])


def header_with(meta: TensorMeta) -> bytes:
    return encode(WeightsHeader(policy="p", version=0, tensors=[meta]))


def test_shape_mismatch_is_rejected() -> None:
    data = bytes(8 * 4)
    for shape in ([3, 3], [9], [2, 2, 2, 2], [-2, -4]):
        with pytest.raises(ShapeMismatch):
            frames_to_weights([header_with(TensorMeta("w", "float32", shape, 1, NO_CHECKSUM)), data])
    with pytest.raises(ShapeMismatch, match=r"'w' float32\[3\] needs 12 bytes, its frame has 32"):
        frames_to_weights([header_with(TensorMeta("w", "float32", [3], 1, NO_CHECKSUM)), data])


def test_unknown_or_unsupported_dtypes_are_rejected() -> None:
    for dtype in ("complex64", "object", "float32; rm -rf", ""):
        with pytest.raises(UnsupportedDtype):
            frames_to_weights([header_with(TensorMeta("w", dtype, [1], 1, NO_CHECKSUM)), bytes(8)])
    with pytest.raises(UnsupportedDtype, match="complex64"):
        weights_to_frames("p", 0, {"z": torch.zeros(2, dtype=torch.complex64)})


def test_inconsistent_headers_are_rejected() -> None:
    good = TensorMeta("w", "uint8", [2], 1, NO_CHECKSUM)
    with pytest.raises(WeightsHeaderError, match="claims frame 2"):
        frames_to_weights([header_with(TensorMeta("w", "uint8", [2], 2, NO_CHECKSUM)), b"ab"])
    dup = encode(WeightsHeader(policy="p", version=0, tensors=[good, TensorMeta("w", "uint8", [2], 2, NO_CHECKSUM)]))
    with pytest.raises(WeightsHeaderError, match="appears twice"):
        frames_to_weights([dup, b"ab", b"cd"])
    with pytest.raises(WeightsHeaderError, match="WorkRequest"):
        frames_to_weights([encode(WorkRequest(actor_id="a")), b"ab"])
    with pytest.raises(MalformedMessage):
        frames_to_weights([b"\xc1 not msgpack", b"ab"])
    bad_meta = msgspec.msgpack.encode({"type": "weights", "policy": "p", "version": 0, "tensors": [["w", "uint8"]]})
    with pytest.raises(MalformedMessage):
        frames_to_weights([bad_meta, b"ab"])


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
    frames = weights_to_frames("p", 1, sent)
    header = decode(frames[0], max_bytes=1 << 20)
    assert isinstance(header, WeightsHeader)
    assert [m.checksum for m in header.tensors] == [zlib.crc32(f) for f in frames[1:]]
    _, got = frames_to_weights(frames)
    assert_bitwise_equal(sent, got)
    huge = len(frames) - 1
    for where in (0, frames[huge].nbytes // 2, frames[huge].nbytes // 4 + 1, frames[huge].nbytes - 1):
        corrupt = list(frames)
        flipped = bytearray(frames[huge])
        flipped[where] ^= 0x10
        corrupt[huge] = memoryview(flipped)
        with pytest.raises(ChecksumMismatch, match="'huge' of 'p' v1"):
            frames_to_weights(corrupt)
    corrupt = list(frames)
    last_small = bytearray(frames[huge - 1])
    last_small[0] ^= 1
    corrupt[huge - 1] = last_small
    with pytest.raises(ChecksumMismatch, match="'transposed'"):
        frames_to_weights(corrupt)


def test_weights_checksum_tells_equal_weights_from_changed_ones():
    a = {"w": torch.randn(4, 3), "scalar": torch.tensor(2.0), "half": torch.zeros(5, dtype=torch.bfloat16)}
    same = {k: v.clone() for k, v in reversed(list(a.items()))}  # order of the dict does not matter
    assert weights_checksum(a) == weights_checksum(same)
    changed = {k: v.clone() for k, v in a.items()}
    changed["w"][2, 1] = torch.nextafter(changed["w"][2, 1], torch.tensor(10.0))  # one ulp
    renamed = {("v" if k == "w" else k): v for k, v in a.items()}
    assert weights_checksum(changed) != weights_checksum(a) != weights_checksum(renamed)
    assert weights_checksum({"t": torch.ones(3, 2).t()}) == weights_checksum({"t": torch.ones(2, 3)})  # bytes, not strides
    definition = 0  # unchanged by the move of the crc32s to the Rust core: ranks of old and new builds agree
    for name in sorted(a):
        part = zlib.crc32(a[name].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        definition = zlib.crc32(name.encode() + part.to_bytes(4, "little"), definition)
    assert weights_checksum(a) == definition
