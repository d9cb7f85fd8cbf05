"""Where a process runs: CPU affinity from `launch.learner_cpus` / `launch.actor_cpus`.

On one CPU machine, learner and actors on disjoint cores behave as they would on separate
accelerators: neither slows the other, so overlap between them shows as it would on GPUs. A
process pins itself (so that a learner or actor started by hand is placed like one started by
`atgrpo-train`), before it starts torch's thread pools.
"""

from __future__ import annotations

import logging
import os

from atgrpo.errors import PlacementError

log = logging.getLogger("atgrpo.placement")


def pin(cpus: list[int], what: str) -> int | None:
    """Run this process on `cpus` (none given: leave it where it is); returns how many cores it
    may now use, or None when nothing was pinned. `what` names the setting in errors."""
    if not cpus:
        return None
    allowed = os.sched_getaffinity(0)
    outside = sorted(set(cpus) - allowed)
    if outside:
        raise PlacementError(f"{what} names cores {outside} this process may not run on (allowed: {sorted(allowed)})")
    os.sched_setaffinity(0, set(cpus))
    log.info("pinned to cores %s (%s)", sorted(set(cpus)), what)
    return len(set(cpus))


__all__ = ["pin"]
