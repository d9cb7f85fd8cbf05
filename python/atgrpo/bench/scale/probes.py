"""What `atgrpo-bench scale` measures in the hub's own process: the hub thread's CPU per message
kind and on lease upkeep (`TimedHub`), its stack and the process's resident memory (`Sampler`),
thread and process CPU time (Linux /proc), and the wait for the simulated actors to join.

CPU time, not wall time, wherever the hub's cost is stated: the machine is shared, and other
processes' load stretches wall time but not the CPU a thread used. Stack samples come from
`sys._current_frames()` in a thread of the same process, so they see the hub thread where it stood
when the sampler got the GIL: in a call that released it (waiting in poll, sending), or between
bytecodes at a GIL switch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from atgrpo.learner.hub import Hub

SAMPLE_S = 0.005
"""Seconds between two samples of the hub's stack and memory."""


class TimedHub(Hub):
    """The learner's hub, with the CPU seconds its thread spends per message kind and on lease upkeep
    counted (thread CPU time, not wall time: other agents' load on the machine does not inflate it)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.handle_s: dict[str, list[float]] = defaultdict(list)
        self.upkeep_s = 0.0

    def _handle_safely(self, peer, msg):
        t0 = time.thread_time()
        try:
            return super()._handle_safely(peer, msg)
        finally:
            self.handle_s[type(msg).__name__].append(time.thread_time() - t0)

    def _expire_leases(self) -> None:
        t0 = time.thread_time()
        super()._expire_leases()
        self.upkeep_s += time.thread_time() - t0


class Sampler(threading.Thread):
    """Resident memory of this process, and (when `profile`) the hub thread's stack, every `SAMPLE_S`."""

    def __init__(self, hub_thread: threading.Thread, profile: bool) -> None:
        super().__init__(daemon=True)
        self.hub_thread = hub_thread
        self.profile = profile
        self.peak_rss = 0
        self.leaf: Counter[str] = Counter()
        self.own: Counter[str] = Counter()
        self.samples = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(SAMPLE_S):
            self.peak_rss = max(self.peak_rss, rss())
            frame = sys._current_frames().get(self.hub_thread.ident or -1) if self.profile else None
            if frame is None:
                continue
            self.samples += 1
            self.leaf[_where(frame)] += 1
            while frame is not None and "atgrpo" not in frame.f_code.co_filename:
                frame = frame.f_back
            if frame is not None:
                self.own[_where(frame)] += 1

    def stop(self) -> None:
        self._halt.set()
        self.join()


def wait_for_actors(hub: Hub, n: int, procs: list[subprocess.Popen], timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with hub._lock:
            joined = len(hub.actors)
        if joined >= n:
            return
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise RuntimeError(
                f"atgrpo-bench scale: {joined} of {n} simulated actors said Hello within {timeout_s:.0f} s"
            )
        time.sleep(0.05)


def process_cpu() -> float:
    t = os.times()
    return t.user + t.system


def hub_thread_cpu(hub: Hub) -> float:
    """CPU seconds the hub's serve thread has used (Linux: its /proc stat, in clock ticks)."""
    tid = hub._thread.native_id
    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss() -> int:
    """Resident bytes of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _where(frame) -> str:
    return f"{Path(frame.f_code.co_filename).stem}.{frame.f_code.co_name}"


__all__ = [
    "SAMPLE_S",
    "Sampler",
    "TimedHub",
    "hub_thread_cpu",
    "process_cpu",
    "rss",
    "wait_for_actors",
]
