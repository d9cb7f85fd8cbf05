"""Weights as ZMQ frames: one msgpack `WeightsHeader`, then one raw frame per tensor.

Wire format: frame 0 is `encode(WeightsHeader)`; frame i (i >= 1) holds the C-contiguous bytes of
`header.tensors[i - 1]`, whose `frame` field is i. `checksum` is the crc32 of the frame's bytes (the
value of `zlib.crc32`), or `NO_CHECKSUM` (-1) when the sender skipped it; the receiver verifies every
checksum that is set.
Only dtypes in `DTYPES` travel; bytes are sent as they lie in memory (little-endian on every
machine we support), so bfloat16 and friends need no conversion and no arithmetic.

Ownership, sending side (`weights_to_frames`):
- Frames are zero-copy `memoryview`s of the tensors' own storage (CPU, contiguous tensors are not
  copied; CUDA or non-contiguous ones are copied once to a contiguous CPU tensor). Each view keeps
  its tensor alive, so the caller may drop its dict, but it must NOT write to those tensors while
  the frames may still be in flight (`send(copy=False)` hands the memory to libzmq's I/O thread).
  The hub therefore sends an immutable per-version CPU snapshot, and may reuse one frame list for
  every actor that asks for that version (the checksums are computed once).

Checksums (both sides) are computed by the Rust core (`atgrpo-checksum`: crc32fast, 12-23 GB/s per
core against zlib's ~2.3 on the AVX2 development machine) without the GIL, reading the frames in
place, on up to `CRC_THREADS` threads (one per 4 MiB in all; a large tensor is split between them).
Each pass is bound by memory bandwidth, not by the crc. The sender's pass must end before the send
(the header carries the crc32s) and the receiver's can only start after it: libzmq hands over a
multipart message once all of it has arrived, so within one message there is nothing to overlap
them with. Overlapping them with the wire would take several messages per weights reply.

Ownership, receiving side (`frames_to_weights`):
- With `recv_multipart(copy=False)` each tensor is a view of its `zmq.Frame`'s memory
  (`torch.frombuffer`); the tensor holds a reference to the frame, so the memory stays valid for
  exactly as long as any tensor (or view of it) is alive, and is freed with the last one.
- Received tensors are writable and private to the receiver over tcp and ipc. Over `inproc://`
  libzmq passes the sender's buffer itself, so they alias the sender's tensors: treat as read-only.
- A frame whose address is not a multiple of its dtype's item size (libzmq packs small messages
  into a shared receive buffer at arbitrary offsets) and read-only buffers (`bytes`) are copied
  once into a fresh tensor; that only happens for small tensors or for callers passing `bytes`.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from atgrpo import _core
from atgrpo.messages import TensorMeta, WeightsHeader
from atgrpo.transport.codec import decode, encode
from atgrpo.transport.errors import (
    ChecksumMismatch,
    FrameCountMismatch,
    ShapeMismatch,
    TransportError,
    UnsupportedDtype,
    WeightsHeaderError,
)

NO_CHECKSUM = -1
"""`TensorMeta.checksum` when the sender did not compute one (the receiver then cannot verify)."""

DEFAULT_MAX_HEADER_BYTES = 64 * 1024 * 1024
"""Upper bound on the header frame (about a million tensor entries); raw frames are not bounded here."""

CRC_THREADS = min(4, os.cpu_count() or 1)
"""Most threads computing one message's crc32s, on both sides (the Rust core uses one per 4 MiB)."""

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
"""Allow-list of dtypes on the wire: wire name -> torch dtype."""

_NAMES = {dtype: name for name, dtype in DTYPES.items()}


def weights_to_frames(
    policy: str, version: int, tensors: Mapping[str, torch.Tensor], *, checksum: bool = True
) -> list[bytes | memoryview]:
    """`[header, raw_0, raw_1, ...]` for `send_multipart(..., copy=False)`; zero-copy for CPU tensors.

    `checksum=False` skips the crc32s (12-23 GB/s per core, spread over `CRC_THREADS`, GIL released).
    Raises `UnsupportedDtype` for a dtype outside `DTYPES`.
    """
    entries: list[tuple[str, str, list[int]]] = []
    views: list[memoryview] = []
    for name, tensor in tensors.items():
        dtype_name = _NAMES.get(tensor.dtype)
        if dtype_name is None:
            raise UnsupportedDtype(f"tensor {name!r} has dtype {tensor.dtype}, not one of {sorted(DTYPES)}")
        entries.append((name, dtype_name, list(tensor.shape)))
        views.append(_bytes_view(tensor))
    crcs = _crc32s(views) if checksum else [NO_CHECKSUM] * len(views)
    metas = [
        TensorMeta(name=name, dtype=dtype, shape=shape, frame=index, checksum=crc)
        for index, ((name, dtype, shape), crc) in enumerate(zip(entries, crcs), start=1)
    ]
    return [encode(WeightsHeader(policy=policy, version=version, tensors=metas)), *views]


def frames_to_weights(
    frames: Sequence[Any], *, verify: bool = True, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
) -> tuple[WeightsHeader, dict[str, torch.Tensor]]:
    """Validate a weights message and turn its raw frames into tensors (no copy where possible).

    `frames` are `zmq.Frame`s, `bytes`, `bytearray` or `memoryview`s. Checks, in order: the header
    decodes to a `WeightsHeader`; frame count; each tensor's frame index and unique name; dtype in
    `DTYPES`; byte size == prod(shape) * itemsize; crc32 (when `verify` and the sender set one).
    Raises the matching `WeightsError` subclass (or a codec `TransportError` for a bad header).
    """
    if not frames:
        raise FrameCountMismatch("empty weights message: no header frame")
    header = decode(_byte_view(frames[0]), max_bytes=max_header_bytes)
    if not isinstance(header, WeightsHeader):
        raise WeightsHeaderError(f"first frame is a {type(header).__name__}, not a WeightsHeader")
    if len(frames) - 1 != len(header.tensors):
        raise FrameCountMismatch(
            f"weights of {header.policy!r} v{header.version} list {len(header.tensors)} tensors "
            f"but {len(frames) - 1} raw frames came"
        )
    seen: set[str] = set()
    views: list[memoryview] = []
    dtypes: list[torch.dtype] = []
    for index, meta in enumerate(header.tensors, start=1):
        if meta.frame != index:
            raise WeightsHeaderError(f"tensor {meta.name!r} claims frame {meta.frame}, expected {index}")
        if meta.name in seen:
            raise WeightsHeaderError(f"tensor name {meta.name!r} appears twice")
        seen.add(meta.name)
        dtype = DTYPES.get(meta.dtype)
        if dtype is None:
            raise UnsupportedDtype(f"tensor {meta.name!r} has dtype {meta.dtype[:32]!r}, not one of {sorted(DTYPES)}")
        if any(d < 0 for d in meta.shape):
            raise ShapeMismatch(f"tensor {meta.name!r} has a negative dimension in shape {meta.shape}")
        view = _byte_view(frames[index])
        expected = math.prod(meta.shape) * dtype.itemsize
        if view.nbytes != expected:
            raise ShapeMismatch(
                f"tensor {meta.name!r} {meta.dtype}{meta.shape} needs {expected} bytes, its frame has {view.nbytes}"
            )
        views.append(view)
        dtypes.append(dtype)
    if verify:
        checked = [i for i, meta in enumerate(header.tensors) if meta.checksum != NO_CHECKSUM]
        for i, crc in zip(checked, _crc32s([views[i] for i in checked])):
            meta = header.tensors[i]
            if crc != meta.checksum:
                raise ChecksumMismatch(
                    f"tensor {meta.name!r} of {header.policy!r} v{header.version}: crc32 {crc:#010x}, "
                    f"header says {meta.checksum:#010x}"
                )
    out = {meta.name: _tensor(view, dtype, meta.shape) for meta, view, dtype in zip(header.tensors, views, dtypes)}
    return header, out


def weights_checksum(tensors: dict[str, torch.Tensor]) -> int:
    """One crc32 over every tensor's name and bytes (name order): two ranks' weights compare equal by
    it (up to crc collisions). Uses the same per-tensor crc32s, on the same threads, as the wire."""
    names = sorted(tensors)
    crc = 0
    for name, part in zip(names, _crc32s([_bytes_view(tensors[n]) for n in names])):
        crc = zlib.crc32(name.encode() + part.to_bytes(4, "little"), crc)
    return crc


def _crc32s(views: list[memoryview]) -> list[int]:
    """crc32 of each buffer (`zlib.crc32`'s value), in the Rust core: read in place, GIL released,
    threads scoped to the call (so a forked child needs nothing re-created)."""
    return _core.crc32_many(views, CRC_THREADS)


def _bytes_view(tensor: torch.Tensor) -> memoryview:
    """Flat uint8 memoryview of a tensor's bytes; keeps the (CPU, contiguous) tensor alive."""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous() or t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg().contiguous()
    # The numpy array's base is the tensor, and the memoryview holds the array.
    array: Any = t.reshape(-1).view(torch.uint8).numpy()
    return memoryview(array)


def _byte_view(frame: Any) -> memoryview:
    buf = getattr(frame, "buffer", frame)  # zmq.Frame -> its memoryview; anything else as is
    try:
        view = memoryview(buf)
    except TypeError:
        raise TransportError(f"a frame of type {type(frame).__name__} has no buffer") from None
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view


def _tensor(view: memoryview, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    if view.nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    if view.readonly:
        raw = torch.frombuffer(bytearray(view), dtype=torch.uint8)  # torch has no read-only tensors
    else:
        raw = torch.frombuffer(view, dtype=torch.uint8)
        if raw.data_ptr() % dtype.itemsize:
            raw = raw.clone()  # torch.empty is aligned; kernels may assume natural alignment
    return raw.view(dtype).view(shape)


__all__ = ["DTYPES", "NO_CHECKSUM", "frames_to_weights", "weights_checksum", "weights_to_frames"]
