"""Weights through a shared directory: rank 0 writes each version once, actors read it from there.

Why (docs/system.md, "Weights past one host"): from the hub, N actors cost N copies of the weights
leaving rank 0's NIC every step. A directory every host mounts (NFS, Lustre, GPFS, an object store's
mount) takes one copy from rank 0 and serves the N reads from the storage system. Nothing depends on
another actor, so actors joining or dying mid-transfer change nothing for the others.

Layout: `<root>/<run_id>/<run_nonce>/<policy>/v<version>/` holds `chunk-<i>` files, one per chunk
message of the hub's reply (`weights_to_messages`, the same headers, checksums included), and
`COMPLETE`, the marker. A file is `u64 header length | header msgpack | the tensors' raw bytes in
header order`, the header and every tensor padded to `ALIGN` bytes, so a reader maps the file
(private, copy-on-write) and takes each tensor in place: reading a version costs its checks, not a copy.

Invariants:
- A version belongs to one learner session. `run_nonce` is made once per start of learner rank 0
  (`new_run_nonce`; a resume gets a new one: its versions restart from the checkpoint's, so they are
  not the earlier session's), is in the session's folder and in every version's marker, and reaches
  actors in the hub's `Welcome`. A reader reads only markers of its own nonce: a marker of another
  (`ForeignWeights`) is never read, the version comes from the hub and the store is trusted no more.
  So two runs with the same `run_id` and root at once never meet, whatever their version numbers.
- One writer per session (`WeightStore`, learner rank 0; `store_writer.StoreWriter` calls it off the
  training path). A version is written to a temporary directory, each file closed before the next,
  the marker last, then the directory renamed into place: a reader that sees `COMPLETE` sees every
  chunk whole (close-to-open consistency on NFS; coherent filesystems and one host's page cache give
  it anyway). A writer that dies mid-write leaves only a `.tmp-` directory, which no reader opens.
  A writer removes its own session's folder and the one it `replaces` (the session before it in the
  same out_dir) when it starts, never another session's. Nothing is fsynced: a chunk a storage fault
  damaged fails its crc32.
- The store is never believed on its own: every chunk read goes through the same checks as a chunk
  from the hub (`WeightsAssembler`: order, sizes, crc32 of every tensor). A chunk that fails them,
  or cannot be read, is fetched from the hub instead (`WeightsRequest.chunk`); after a checksum
  failure the reader trusts the store no more for the rest of its life (`trusted`), and every later
  version comes from the hub whole.
- The hub stays the source of truth and the fallback: a version whose marker does not appear within
  `wait_s` (a slow shared filesystem, a store the actor cannot see) is fetched from the hub. A
  version still being written (its `.tmp-` directory is there) is waited for up to `write_wait_s`
  more: with the write off the training path, a unit may name a version before its marker is down.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import shutil
import struct
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec
import torch

from atgrpo.messages import NO_NONCE, WeightsHeader, WeightsMarker
from atgrpo.transport.codec import decode
from atgrpo.transport.errors import ChecksumMismatch, ForeignWeights, TransportError, WeightsHeaderError
from atgrpo.transport.tensors import DTYPES, WeightsAssembler

log = logging.getLogger("atgrpo.transport")

MARKER = "COMPLETE"
ALIGN = 64
"""Where the header and every tensor of a chunk file start: a multiple of this, so mapped tensors are
aligned for every dtype (`tensors._tensor` would otherwise copy them)."""
_LEN = struct.Struct("<Q")
_MAX_HEADER_BYTES = 64 * 1024 * 1024
_NONCE = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What a nonce may be: it is a path component, and a reader takes it from the hub's `Welcome`."""


def new_run_nonce() -> str:
    """A fresh nonce for one learner session (96 random bits: two sessions never draw the same)."""
    return uuid.uuid4().hex[:24]


def check_nonce(run_nonce: str) -> str:
    if not _NONCE.fullmatch(run_nonce):
        raise ValueError(f"weight store: run nonce {run_nonce[:80]!r} is not 1-64 of [A-Za-z0-9_-]")
    return run_nonce


def session_dir(root: str | os.PathLike[str], run_id: str, run_nonce: str) -> Path:
    """The folder of one learner session's versions."""
    return Path(root) / run_id / check_nonce(run_nonce)


def version_dir(session: Path, policy: str, version: int) -> Path:
    return session / policy / f"v{version}"


class WeightStore:
    """The writer, on learner rank 0. Not thread-safe: one thread writes (the learner's main thread,
    or the `StoreWriter`'s)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        run_id: str,
        keep_versions: int = 2,
        *,
        run_nonce: str = NO_NONCE,
        replaces: str | None = None,
    ) -> None:
        self.root = Path(root)
        self.run_id = run_id
        self.run_nonce = check_nonce(run_nonce)
        self.session = session_dir(root, run_id, run_nonce)
        self.keep_versions = max(1, keep_versions)
        self.bytes_written = 0
        if replaces is not None and replaces != run_nonce:
            # The session before this one in the same out_dir: nobody reads its versions any more.
            shutil.rmtree(session_dir(root, run_id, replaces), ignore_errors=True)
        shutil.rmtree(self.session, ignore_errors=True)  # a reused nonce (NO_NONCE): its old versions must go
        self.session.mkdir(parents=True, exist_ok=True)

    def write(self, policy: str, version: int, messages: list[list[Any]]) -> int:
        """Write one version (the hub's chunk messages) and its marker; returns the bytes written.
        Versions of `policy` beyond the `keep_versions` newest are removed afterwards."""
        final = version_dir(self.session, policy, version)
        tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        total = 0
        try:
            for i, frames in enumerate(messages):
                total += _write_file(tmp / f"chunk-{i}", frames)
            _write_file(
                tmp / MARKER,
                [msgspec.json.encode(WeightsMarker(policy, version, len(messages), total, self.run_nonce))],
                raw=True,
            )
            if final.exists():  # a version republished in this session (same number, same weights)
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # never read (no marker, not in place); freed now
            raise
        self.bytes_written += total
        self._prune(policy)
        return total

    def _prune(self, policy: str) -> None:
        held = sorted(
            (int(d.name[1:]), d) for d in (self.session / policy).iterdir() if d.name[1:].isdigit() and d.name[0] == "v"
        )
        for _, old in held[: -self.keep_versions]:
            shutil.rmtree(old, ignore_errors=True)  # a reader still in it falls back to the hub


class StoreReader:
    """The reader, in an actor: weights from the store, chunk by chunk, with the hub as the fallback.
    `client` is the actor's `ActorClient` (its `request_weights` and `request_chunk`). It reads the
    session `run_nonce` names: the actor sets it from each `Welcome` (`join`)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        run_id: str,
        *,
        run_nonce: str = NO_NONCE,
        wait_s: float = 10.0,
        write_wait_s: float = 60.0,
        poll_s: float = 0.02,
    ) -> None:
        self.root = Path(root)
        self.run_id = run_id
        self.run_nonce = check_nonce(run_nonce)
        self.wait_s = wait_s
        self.write_wait_s = write_wait_s
        self.poll_s = poll_s
        self.trusted = True
        self.counters: dict[str, int] = {
            "store/chunks_read": 0,
            "store/bytes_read": 0,
            "store/chunks_from_hub": 0,
            "store/versions_from_hub": 0,
            "store/bad_chunks": 0,
            "store/foreign_versions": 0,
        }

    def join(self, run_nonce: str) -> None:
        """Read the versions of the learner session `run_nonce` from now on (a `Welcome`'s)."""
        if run_nonce != self.run_nonce:
            log.info("weight store: reading the versions of learner session %s", run_nonce)
        self.run_nonce = check_nonce(run_nonce)

    def fetch(self, client: Any, policy: str, version: int) -> tuple[WeightsHeader, dict[str, torch.Tensor]]:
        """`policy` at `version` (>= 0), checked as the hub's reply would be."""
        folder = version_dir(session_dir(self.root, self.run_id, self.run_nonce), policy, version)
        marker = self._marker(folder) if self.trusted else None
        if marker is not None:
            try:
                self._check_owner(marker, folder)
            except ForeignWeights as exc:
                self.counters["store/foreign_versions"] += 1
                self.trusted = False
                log.error("%s; it comes from the hub, and so does everything after it", exc)
                marker = None
        if marker is None or (marker.policy, marker.version) != (policy, version):
            self.counters["store/versions_from_hub"] += 1
            return client.request_weights(policy, version)
        got = WeightsAssembler(verify=True, max_header_bytes=_MAX_HEADER_BYTES)
        for i in range(marker.chunks):
            frames = self._read_chunk(folder / f"chunk-{i}", policy, version, i) if self.trusted else None
            if frames is not None:
                try:
                    got.add(frames)
                    self.counters["store/chunks_read"] += 1
                    self.counters["store/bytes_read"] += sum(memoryview(f).nbytes for f in frames)
                    continue
                except TransportError as exc:
                    self._distrust(exc, policy, version, i)
            got.add(client.request_chunk(policy, version, i))
            self.counters["store/chunks_from_hub"] += 1
        header, tensors = got.result()
        return header, tensors

    def _check_owner(self, marker: WeightsMarker, folder: Path) -> None:
        """The one check that a version is this session's (module docstring)."""
        if marker.run_nonce != self.run_nonce:
            raise ForeignWeights(
                f"weight store: {folder / MARKER} names run nonce {marker.run_nonce[:80]!r}, not this "
                f"session's {self.run_nonce!r}: another run's weights, never read"
            )

    def _marker(self, folder: Path) -> WeightsMarker | None:
        start = time.monotonic()
        while True:
            try:
                return msgspec.json.decode((folder / MARKER).read_bytes(), type=WeightsMarker)
            except FileNotFoundError:
                pass
            except (OSError, msgspec.DecodeError) as exc:
                log.warning(
                    "weight store: marker %s unreadable (%s); fetching from the hub",
                    folder / MARKER,
                    exc,
                )
                return None
            waited = time.monotonic() - start
            if waited >= self.wait_s and not (waited < self.wait_s + self.write_wait_s and _being_written(folder)):
                log.warning(
                    "weight store: no %s after %.1f s; fetching from the hub",
                    folder / MARKER,
                    waited,
                )
                return None
            time.sleep(self.poll_s if waited < self.wait_s else max(self.poll_s, 0.2))  # listing costs more

    def _read_chunk(self, path: Path, policy: str, version: int, chunk: int) -> list[Any] | None:
        """The chunk's frames (header, then one writable buffer per tensor), or None if the file
        cannot be read or split (a pruned version, a truncated file): that chunk comes from the hub."""
        try:
            with open(path, "rb") as f:
                # Private and writable: the tensors are the actor's own, and a write to one never
                # reaches the file (copy-on-write); pages are read in with the mapping.
                data = mmap.mmap(
                    f.fileno(),
                    0,
                    flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0),
                    prot=mmap.PROT_READ | mmap.PROT_WRITE,
                )
            view = memoryview(data)
            if len(view) < _LEN.size:
                raise ValueError(f"a file of {len(view)} bytes")
            (size,) = _LEN.unpack_from(view, 0)
            header_end = _LEN.size + size
            if header_end > len(view) or size > _MAX_HEADER_BYTES:
                raise ValueError(f"header of {size} bytes in a file of {len(view)}")
            header = decode(view[_LEN.size : header_end], max_bytes=_MAX_HEADER_BYTES)
            if not isinstance(header, WeightsHeader):
                raise WeightsHeaderError(f"a {type(header).__name__}, not a weights header")
            frames: list[Any] = [view[_LEN.size : header_end]]
            at = _aligned(header_end)
            for meta in header.tensors:
                dtype = DTYPES.get(meta.dtype)
                if dtype is None:
                    raise ValueError(f"dtype {meta.dtype[:32]!r}")
                n = dtype.itemsize
                for d in meta.shape:
                    n *= d
                if at + n > len(view):
                    raise ValueError(f"tensor {meta.name[:64]!r} runs past the end of the file")
                frames.append(view[at : at + n])
                at = _aligned(at + n)
            if at != len(view):
                raise ValueError(f"{len(view) - at} bytes after the last tensor")
            return frames
        except (OSError, ValueError, TransportError) as exc:
            self.counters["store/bad_chunks"] += 1
            log.warning(
                "weight store: chunk %d of %r v%d unreadable (%s); fetching it from the hub",
                chunk,
                policy,
                version,
                exc,
            )
            return None

    def _distrust(self, exc: TransportError, policy: str, version: int, chunk: int) -> None:
        self.counters["store/bad_chunks"] += 1
        if isinstance(exc, ChecksumMismatch):
            self.trusted = False
            log.error(
                "weight store: chunk %d of %r v%d failed its check (%s); it comes from the hub, and so "
                "does everything after it: the store is no longer trusted",
                chunk,
                policy,
                version,
                exc,
            )
        else:
            log.warning(
                "weight store: chunk %d of %r v%d refused (%s); fetching it from the hub",
                chunk,
                policy,
                version,
                exc,
            )


def _being_written(folder: Path) -> bool:
    """A write of this version is under way: its temporary directory (`WeightStore.write`) is there."""
    try:
        return any(folder.parent.glob(f".tmp-{folder.name}-*"))
    except OSError:
        return False


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _write_file(path: Path, frames: list[Any], raw: bool = False) -> int:
    """Write a chunk file (module docstring; `raw`: the frames as they are); its size."""
    at = 0
    with open(path, "wb") as f:
        if not raw:
            at = f.write(_LEN.pack(memoryview(frames[0]).nbytes))
        for frame in frames:
            at += f.write(frame)
            if not raw and at % ALIGN:
                at += f.write(bytes(ALIGN - at % ALIGN))
    return at


__all__ = [
    "MARKER",
    "NO_NONCE",
    "StoreReader",
    "WeightStore",
    "check_nonce",
    "new_run_nonce",
    "session_dir",
    "version_dir",
]
