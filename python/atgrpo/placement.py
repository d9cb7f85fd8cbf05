"""Where a process runs: CPU affinity from `launch.learner_cpus` / `launch.actor_cpus`, and which
GPUs (as the host numbers them) the config gives the learner and the actors.

On one CPU machine, learner and actors on disjoint cores behave as they would on separate
accelerators: neither slows the other, so overlap between them shows as it would on GPUs. A
process pins itself (so that a learner or actor started by hand is placed like one started by
`atgrpo-train`), before it starts torch's thread pools.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from atgrpo.errors import PlacementError

if TYPE_CHECKING:
    from atgrpo.config import RunConfig

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


def learner_gpus(cfg: RunConfig) -> list[int]:
    """The learner ranks' GPUs as the host numbers them."""
    if cfg.launch.learner_devices:
        return list(cfg.launch.learner_devices)
    _, _, index = cfg.train.device.partition(":")
    return [int(index) if index else 0]


def actor_gpus(cfg: RunConfig) -> list[int]:
    """Each actor's GPU as the host numbers it."""
    if cfg.launch.actor_devices:
        return list(cfg.launch.actor_devices)
    _, _, index = cfg.rollout.device.partition(":")
    return [int(index) if index else 0] * cfg.launch.actors


def colocated(cfg: RunConfig) -> bool:
    """Some actor computes on a GPU a learner rank uses."""
    if not (cfg.train.device.startswith("cuda") and cfg.rollout.device.startswith("cuda")):
        return False
    return bool(set(actor_gpus(cfg)) & set(learner_gpus(cfg)))


__all__ = ["actor_gpus", "colocated", "learner_gpus", "pin"]
