"""Weights as ZMQ messages: a reply is one or more chunks, each a msgpack `WeightsHeader` and one
raw frame per tensor of that chunk.

Wire format: a weights reply is `chunks` ZMQ messages sent back-to-back to one peer, in order. In
message k (`header.chunk == k`), frame 0 is `encode(WeightsHeader)` and frame i (i >= 1) holds the
C-contiguous bytes of `header.tensors[i - 1]`, whose `frame` field is i. Every chunk names the same
policy, version and `chunks`; tensor names are unique across the reply, and the chunks list the
tensors in the order of the sender's dict. `checksum` is the crc32 of the frame's bytes (the value of
`zlib.crc32`), or `NO_CHECKSUM` (-1) when the sender skipped it; the receiver verifies every checksum
that is set, chunk by chunk as the chunks arrive.
Only dtypes in `DTYPES` travel; bytes are sent as they lie in memory (little-endian on every
machine we support), so bfloat16 and friends need no conversion and no arithmetic.

Chunks: libzmq hands over a multipart message only once all of it has arrived, so within one
message nothing overlaps the receiver's checks with the wire. Across messages it does: while the
receiver verifies chunk k and wraps its tensors (`WeightsAssembler.add`), libzmq's I/O thread is
already receiving chunk k+1, and what is left after the last byte arrives is the last chunk's work.
A chunk takes tensors in order until it holds at least `chunk_bytes` (default `CHUNK_BYTES`), so
every chunk but the last has at least that many bytes and exceeds it by less than its last tensor.
Tensors are never split (each stays one zero-copy frame on both sides): a tensor larger than
`chunk_bytes` makes a chunk of its own size. The target grows for very large weights so that a reply
is at most `MAX_CHUNKS` messages (well under libzmq's default high-water mark of 1000 per peer).
A set with no tensors is one chunk with none.

Ownership, sending side (`weights_to_messages`):
- Frames are zero-copy `memoryview`s of the tensors' own storage (CPU, contiguous tensors are not
  copied; CUDA or non-contiguous ones are copied once to a contiguous CPU tensor). Each view keeps
  its tensor alive, so the caller may drop its dict, but it must NOT write to those tensors while
  the frames may still be in flight (`send(copy=False)` hands the memory to libzmq's I/O thread).
  The hub therefore sends an immutable per-version CPU snapshot, and reuses one list of messages
  for every actor that asks for that version (the checksums are computed once, at publish).

Checksums (both sides) are computed by the Rust core (`atgrpo-checksum`: crc32fast, 12-23 GB/s per
core against zlib's ~2.3 on the AVX2 development machine) without the GIL, reading the frames in
place, on up to `CRC_THREADS` threads (one per 4 MiB in all; a large tensor is split between them).
Each pass is bound by memory bandwidth, not by the crc. The sender's pass ends before the first
send (the headers carry the crc32s); the receiver's runs per chunk, overlapped as above.

Ownership, receiving side (`WeightsAssembler`, `messages_to_weights`):
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
"""Upper bound on a chunk's header frame (about a million tensor entries); raw frames are not bounded here."""

CHUNK_BYTES = 4 * 1024 * 1024
"""Default target size of one chunk message of a weights reply (tensor bytes; module docstring)."""

MAX_CHUNKS = 256
"""Most messages in one weights reply: `chunk_bytes` is raised for weights over ~1 GiB."""

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


Frame = bytes | memoryview
"""A frame we send: the header's bytes or a zero-copy view of a tensor."""


def weights_to_messages(
    policy: str,
    version: int,
    tensors: Mapping[str, torch.Tensor],
    *,
    checksum: bool = True,
    chunk_bytes: int = CHUNK_BYTES,
) -> list[list[Frame]]:
    """The chunk messages of one weights reply, each `[header, raw_0, raw_1, ...]` for
    `send_multipart(..., copy=False)`; zero-copy for CPU tensors (module docstring: chunks, ownership).

    `checksum=False` skips the crc32s (12-23 GB/s per core, spread over `CRC_THREADS`, GIL released).
    Raises `UnsupportedDtype` for a dtype outside `DTYPES`.
    """
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    entries: list[tuple[str, str, list[int]]] = []
    views: list[memoryview] = []
    for name, tensor in tensors.items():
        dtype_name = _NAMES.get(tensor.dtype)
        if dtype_name is None:
            raise UnsupportedDtype(f"tensor {name!r} has dtype {tensor.dtype}, not one of {sorted(DTYPES)}")
        entries.append((name, dtype_name, list(tensor.shape)))
        views.append(_bytes_view(tensor))
    crcs = _crc32s(views) if checksum else [NO_CHECKSUM] * len(views)
    bounds = _chunk_bounds([v.nbytes for v in views], chunk_bytes)
    messages: list[list[Frame]] = []
    for chunk, (lo, hi) in enumerate(bounds):
        metas = [
            TensorMeta(name=name, dtype=dtype, shape=shape, frame=i - lo + 1, checksum=crcs[i])
            for i, (name, dtype, shape) in enumerate(entries[lo:hi], start=lo)
        ]
        header = WeightsHeader(policy=policy, version=version, tensors=metas, chunk=chunk, chunks=len(bounds))
        messages.append([encode(header), *views[lo:hi]])
    return messages


class WeightsAssembler:
    """Builds one weights reply from its chunk messages, one `add` per message as it arrives.

    Each chunk is checked whole before any of its tensors is kept, in order: the header decodes to
    a `WeightsHeader` (`WeightsHeaderError`, or a codec `TransportError`); it is the chunk expected
    next, of the same policy, version and chunk count as chunk 0 (`WeightsHeaderError`: missing,
    repeated or reordered chunks, a changed total); frame count (`FrameCountMismatch`); each tensor's
    frame index and a name unique in the whole reply (`WeightsHeaderError`); dtype in `DTYPES`
    (`UnsupportedDtype`); byte size == prod(shape) * itemsize (`ShapeMismatch`); crc32, when `verify`
    and the sender set one (`ChecksumMismatch`). A chunk that fails a check changes nothing: the
    assembler still expects that chunk, so a caller with a second source may add another copy of it
    (`weight_store.StoreReader` falls back to the hub); a caller with one source drops the assembler
    (and whatever of the reply is still on its way).
    """

    def __init__(self, *, verify: bool = True, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES) -> None:
        self.verify = verify
        self.max_header_bytes = max_header_bytes
        self.first: WeightsHeader | None = None
        """Chunk 0's header, once it came: the reply's policy, version and chunk count."""
        self.received = 0
        """Chunks taken so far."""
        self._metas: list[TensorMeta] = []
        self._tensors: dict[str, torch.Tensor] = {}

    @property
    def done(self) -> bool:
        return self.first is not None and self.received == self.first.chunks

    def add(self, frames: Sequence[Any]) -> bool:
        """Check one chunk message (`zmq.Frame`s, `bytes`, `bytearray` or `memoryview`s) and keep its
        tensors (no copy where possible); True once the last chunk is in."""
        if self.done:
            raise FrameCountMismatch(f"a message after the last of {self.received} chunks of the weights")
        if not frames:
            raise FrameCountMismatch("empty weights message: no header frame")
        header = decode(_byte_view(frames[0]), max_bytes=self.max_header_bytes)
        if not isinstance(header, WeightsHeader):
            raise WeightsHeaderError(
                f"chunk {self.received} of the weights is a {type(header).__name__}, not a WeightsHeader"
            )
        first = self.first or header
        what = f"{first.policy!r} v{first.version}"
        if first.chunks < 1:
            raise WeightsHeaderError(f"weights of {what} claim {first.chunks} chunks")
        place = (header.chunk, header.chunks, header.policy, header.version)
        if place != (self.received, first.chunks, first.policy, first.version):
            raise WeightsHeaderError(
                f"weights of {what}: expected chunk {self.received} of {first.chunks}, "
                f"got chunk {header.chunk} of {header.chunks} of {header.policy!r} v{header.version}"
            )
        if len(frames) - 1 != len(header.tensors):
            raise FrameCountMismatch(
                f"chunk {header.chunk} of the weights of {what} lists {len(header.tensors)} tensors "
                f"but {len(frames) - 1} raw frames came"
            )
        views: list[memoryview] = []
        dtypes: list[torch.dtype] = []
        names: set[str] = set()
        for index, meta in enumerate(header.tensors, start=1):
            if meta.frame != index:
                raise WeightsHeaderError(f"tensor {meta.name!r} claims frame {meta.frame}, expected {index}")
            if meta.name in self._tensors or meta.name in names:
                raise WeightsHeaderError(f"tensor name {meta.name!r} appears twice")
            names.add(meta.name)
            dtype = DTYPES.get(meta.dtype)
            if dtype is None:
                raise UnsupportedDtype(
                    f"tensor {meta.name!r} has dtype {meta.dtype[:32]!r}, not one of {sorted(DTYPES)}"
                )
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
        if self.verify:
            checked = [i for i, meta in enumerate(header.tensors) if meta.checksum != NO_CHECKSUM]
            for i, crc in zip(checked, _crc32s([views[i] for i in checked])):
                meta = header.tensors[i]
                if crc != meta.checksum:
                    raise ChecksumMismatch(
                        f"tensor {meta.name!r} of {what} (chunk {header.chunk} of {first.chunks}): "
                        f"crc32 {crc:#010x}, header says {meta.checksum:#010x}"
                    )
        for meta, view, dtype in zip(header.tensors, views, dtypes):
            self._tensors[meta.name] = _tensor(view, dtype, meta.shape)
        self._metas += header.tensors
        self.first = first
        self.received += 1
        return self.done

    def result(self) -> tuple[WeightsHeader, dict[str, torch.Tensor]]:
        """The reply's headers merged (every tensor's meta in order; `frame` counts within its chunk)
        and the tensors by name, in the sender's order. `FrameCountMismatch` if chunks are missing."""
        if self.first is None or not self.done:
            have = "no chunk" if self.first is None else f"{self.received} of {self.first.chunks} chunks"
            raise FrameCountMismatch(f"incomplete weights: {have} came")
        first = self.first
        merged = WeightsHeader(first.policy, first.version, list(self._metas), chunk=0, chunks=first.chunks)
        return merged, dict(self._tensors)


def messages_to_weights(
    messages: Sequence[Sequence[Any]], *, verify: bool = True, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
) -> tuple[WeightsHeader, dict[str, torch.Tensor]]:
    """A whole weights reply at once (all its chunk messages): `WeightsAssembler.add` on each, then
    `result`. Raises as `add` does, and `FrameCountMismatch` for a chunk missing at the end."""
    assembler = WeightsAssembler(verify=verify, max_header_bytes=max_header_bytes)
    for frames in messages:
        assembler.add(frames)
    return assembler.result()


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


def _chunk_bounds(sizes: list[int], chunk_bytes: int) -> list[tuple[int, int]]:
    """`[lo, hi)` tensor ranges of the chunks: each takes tensors until it holds >= the target;
    the target is raised so that there are at most `MAX_CHUNKS`. At least one (empty) range."""
    target = max(chunk_bytes, -(-sum(sizes) // (MAX_CHUNKS - 1)))
    bounds: list[tuple[int, int]] = []
    lo, held = 0, 0
    for i, size in enumerate(sizes):
        held += size
        if held >= target:
            bounds.append((lo, i + 1))
            lo, held = i + 1, 0
    if lo < len(sizes) or not bounds:
        bounds.append((lo, len(sizes)))
    return bounds


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


__all__ = [
    "CHUNK_BYTES",
    "DTYPES",
    "MAX_CHUNKS",
    "NO_CHECKSUM",
    "WeightsAssembler",
    "messages_to_weights",
    "weights_checksum",
    "weights_to_messages",
]
