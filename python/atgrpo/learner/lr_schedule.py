"""The learning rate of each RL update: a pure function of the policy's version, so a resumed run
takes exactly the lr a straight one would (the version is in every checkpoint).

    lr_at(schedule, peak, floor, warmup, version, total)

- `version` counts the updates already taken (0 for the first), `total` is the run's step budget
  (`run.steps`), the horizon of the decay.
- Warm-up: the first `warmup` updates rise linearly, peak * (version + 1) / warmup, so the first
  update is not 0.
- Then `constant` stays at peak; `linear` falls from peak towards `floor`, and `cosine` does so
  along half a cosine, reaching `floor` at `total` (never on an update taken: the last one is
  one step short of it). A run that goes past `total` (e.g. its budget raised on resume) stays at
  `floor`.
"""

from __future__ import annotations

import math
from typing import get_args

from atgrpo.config.sections import LrSchedule

SCHEDULES = get_args(LrSchedule)


def lr_at(schedule: str, peak: float, floor: float, warmup: int, version: int, total: int) -> float:
    if schedule not in SCHEDULES:
        raise ValueError(f"lr schedule must be one of {SCHEDULES}, got {schedule!r}")
    if version < warmup:
        return peak * (version + 1) / warmup
    if schedule == "constant":
        return peak
    progress = min(1.0, (version - warmup) / max(1, total - warmup))
    if schedule == "linear":
        return floor + (peak - floor) * (1.0 - progress)
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
