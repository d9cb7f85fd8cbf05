"""Shared by the env tests: one step on the Rust pool and the Python reference, side by side.

A plain module rather than a fixture, because hypothesis tests cannot use function-scoped fixtures.
"""

from __future__ import annotations

import atgrpo
from atgrpo.envs.reference import ReferenceEpisode, StepRecord, as_utf8


def step_both(
    pool: atgrpo.EnvPool, episode: ReferenceEpisode, action: str | bytes | None
) -> tuple[tuple[object, ...], tuple[object, ...], StepRecord]:
    """Steps env 0 of `pool` and `episode` with `action`; returns (rust row, reference row, record)."""
    out = pool.step([0], [action])
    rec = episode.step(as_utf8(action))
    got = (
        out.obs[0],
        out.reward[0],
        out.reward_team[0],
        out.reward_local[0],
        out.done[0],
        out.success[0],
        out.truncated[0],
        out.valid[0],
    )
    want = (rec.obs, rec.reward, rec.reward_team, rec.reward_local, rec.done, rec.success, rec.truncated, rec.valid)
    return got, want, rec
