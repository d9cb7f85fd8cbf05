"""When and how an actor starts its rollout engines on a GPU.

Why it matters: vLLM sizes its KV cache from the fall in the whole device's free memory while it
profiles (vllm/utils/mem_utils.py), and asserts that free memory did not grow meanwhile
(vllm/v1/worker/gpu_worker.py). Another process allocating or freeing memory on the same GPU in that
window makes it size the cache wrongly, or stop. So:

- **One start at a time per GPU.** A process holds `gpu_start_lock` (an `flock` on a file under the
  run's `out_dir/gpu_locks/`, named after the host and the GPU as the host numbers it) while it
  constructs its vLLM engines. Actors on other GPUs hold other files and start at once. Torch
  engines and CPU engines take no lock: nothing of theirs measures the device.
- **Colocated runs start engines only while the learner waits** (`defer_engines`): an actor on a
  learner's GPU constructs its engines when the hub has leased it its first unit, not when it
  joins. A colocated run has the alternating schedule (the placement plan refuses any other), in
  which the learner does not train while a unit of its round is out; it starts no round before
  its own model is on the GPU. A restarted actor waits for a lease the same way.

The lock is never waited for forever: past `timeout_s` the wait is an `ActorError` naming the GPU,
the lock file and the process holding it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from atgrpo.config import RunConfig
from atgrpo.errors import PlacementError
from atgrpo.errors.runtime import ActorError
from atgrpo.paths import out_dir
from atgrpo.placement import colocated

LOCK_DIR = "gpu_locks"
"""Folder under `out_dir` that holds the start locks (one file per host and GPU)."""


def host_gpu(device: str, visible: str | None) -> str:
    """The GPU that `device` ("cuda" or "cuda:N") names, as the host numbers it, from `visible`
    (`CUDA_VISIBLE_DEVICES`; None when unset). Read from the environment, not from CUDA: CUDA must
    not be initialised in an actor before vLLM selects its GPU."""
    _, _, index = device.partition(":")
    local = int(index) if index else 0
    if visible is None:
        return str(local)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if local >= len(entries):
        raise PlacementError(
            f"rollout.device = {device!r}, but CUDA_VISIBLE_DEVICES={visible!r} lists {len(entries)} GPUs"
        )
    return entries[local]


@contextlib.contextmanager
def gpu_start_lock(folder: Path, gpu: str, *, timeout_s: float, poll_s: float = 0.2) -> Iterator[Path]:
    """Hold the start lock of `gpu` on this host (yields the lock file). Waits while another process
    holds it, for at most `timeout_s`."""
    folder.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{socket.gethostname()}-gpu{gpu}")
    path = folder / f"{name}.lock"
    with open(path, "a+") as f:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    f.seek(0)
                    holder = f.read().strip() or "a process that did not say"
                    raise ActorError(
                        f"waited {timeout_s:.0f} s to start a rollout engine on GPU {gpu}: {holder} has been "
                        f"starting one there all that time (lock {path})"
                    ) from None
                time.sleep(poll_s)
        try:
            f.seek(0)
            f.truncate()
            f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
            f.flush()
            yield path
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def engine_start(cfg: RunConfig) -> contextlib.AbstractContextManager:
    """What an actor holds while it constructs its engines: the start lock of its GPU for vLLM on a
    GPU (waited for up to `transport.step_timeout_s`), nothing otherwise."""
    ro = cfg.rollout
    if ro.engine != "vllm" or not ro.device.startswith("cuda"):
        return contextlib.nullcontext()
    gpu = host_gpu(ro.device, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return gpu_start_lock(out_dir(cfg) / LOCK_DIR, gpu, timeout_s=cfg.transport.step_timeout_s)


def defer_engines(cfg: RunConfig) -> bool:
    """Whether actors construct their engines at their first lease rather than when they join:
    in colocated runs, so that an engine starts while the learner waits for its round."""
    return colocated(cfg)


__all__ = ["LOCK_DIR", "defer_engines", "engine_start", "gpu_start_lock", "host_gpu"]
