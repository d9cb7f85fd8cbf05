"""Start a few ranks of a test as spawned processes and fail the test on any rank's failure or hang.

Each rank runs `target(rank, *args, failures)` and puts a description of anything that went wrong
on `failures` (a queue); a rank still alive after `timeout_s` is killed and reported as hung.
"""

from __future__ import annotations

import multiprocessing as mp


def spawn_ranks(target, world: int, *args, timeout_s: float = 120.0) -> None:
    ctx = mp.get_context("spawn")
    failures = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, *args, failures)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=timeout_s)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
    assert not alive, "a rank hung"
    errors = []
    while not failures.empty():
        errors.append(failures.get())
    assert not errors, errors
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]


__all__ = ["spawn_ranks"]
