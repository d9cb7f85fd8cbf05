"""Private ipc addresses for the hub: `ipc://<dir>/hub.sock` in a directory only this user can enter.

Invariants:
- The socket's directory is mode 0700 and owned by this user (made so, or refused with
  `AddressError` if another user owns it): on ipc that is the whole of the access control, so ipc
  endpoints need no CURVE keys (`keys.py`).
- A socket path never exceeds `IPC_PATH_MAX` bytes (libzmq would fail to bind it): an over-long one
  falls back to a fresh private directory under the system temp dir, said at INFO.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

from atgrpo.transport.errors import AddressError

log = logging.getLogger("atgrpo.transport")

IPC_PATH_MAX = 103 if sys.platform == "darwin" else 107
"""Longest ipc socket path in bytes: `sun_path` is 108 bytes on Linux (104 on macOS) with the NUL."""


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


__all__ = ["IPC_PATH_MAX", "private_ipc_address"]
