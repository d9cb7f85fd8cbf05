"""One Math-Verify worker process and the framing of its pipe, as `verify.math.MathVerifier` uses it.

The worker (`_worker.py`) is started with `subprocess` (never forked from the caller) and reads
length-prefixed msgpack frames on stdin, answering the same way on stdout. The pipe is
non-blocking on our side, so the verifier can wait on many workers with `select` and kill one that
does not answer in time. A `WorkerProcess` is used by one call at a time (the pool hands it out).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import msgspec

WORKER_SCRIPT = Path(__file__).with_name("_worker.py")


class WorkerProcess:
    """One worker process and its pipe state. Used by one call at a time (the pool hands it out)."""

    def __init__(self, args: list[str], startup_timeout_s: float) -> None:
        self.args = args
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.buf = bytearray()
        self.ready = False
        self.start_deadline = 0.0
        self.version = ""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self) -> None:
        self.kill()
        self.proc = subprocess.Popen(
            [sys.executable, "-P", str(WORKER_SCRIPT), *self.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        os.set_blocking(self.fileno(), False)
        self.buf.clear()
        self.ready = False
        self.start_deadline = time.monotonic() + self.startup_timeout_s

    def _pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        return self.proc.stdin, self.proc.stdout

    def fileno(self) -> int:
        return self._pipes()[1].fileno()

    def send(self, msg: dict) -> bool:
        body = msgspec.msgpack.encode(msg)
        try:
            stdin = self._pipes()[0]
            stdin.write(struct.pack(">I", len(body)) + body)
            stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def read(self) -> tuple[list[dict], bool]:
        """Frames available now, and whether the pipe reached EOF (the process is gone)."""
        eof = False
        while True:
            try:
                chunk = os.read(self.fileno(), 65536)
            except BlockingIOError:
                break
            if not chunk:
                eof = True
                break
            self.buf += chunk
        frames = []
        while len(self.buf) >= 4:
            n = struct.unpack(">I", self.buf[:4])[0]
            if len(self.buf) < 4 + n:
                break
            frames.append(msgspec.msgpack.decode(bytes(self.buf[4 : 4 + n])))
            del self.buf[: 4 + n]
        return frames, eof

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in self._pipes():
            try:
                f.close()
            except OSError:
                pass
        self.proc = None
        self.ready = False

    def stop(self) -> None:
        """Close stdin (the worker exits on EOF); kill it if it does not go quickly."""
        if self.proc is None:
            return
        try:
            self._pipes()[0].close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


__all__ = ["WORKER_SCRIPT", "WorkerProcess"]
