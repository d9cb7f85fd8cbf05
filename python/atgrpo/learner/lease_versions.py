"""Which policy versions a training unit names when it is leased (`hub_loop.HubLoop._assign`).

By default a unit names the newest published version of every policy. With the weight store written
in the background (`transport.store_writer`) that version may still be half-written when the unit
is leased, and an actor told to roll out with it waits for the write: the store's write back on the
training path (issue 48, item 3). Under pipelining (`train.max_staleness = k >= 1`) the unit may
instead name the newest version already readable in the store, as long as every sample it makes is
still at most k versions old when it is trained.

The bound: training steps are trained in order, one published version apart. The step the learner
is training (or, before it takes any, the oldest open training round) is trained at the current
version v, and a round j steps after it at v + j at the latest (a policy that publishes less often
is further behind, never ahead). So a unit of that round may name any version u >= v - (k - j);
with j >= k only v itself. The step in training is the hub's to know (`HubLoop._trained_at`): its
round is deleted once the learner has taken every unit, before the step's update is published, so
the oldest open round is then one step ahead of it.

Invariants:
- Strict on-policy (k = 0), evaluation rounds, and a hub without a background store: the current
  versions, unchanged.
- A version older than the current one is named only if it is readable (complete in the store)
  and within the bound; otherwise the current version, as before.
"""

from __future__ import annotations


def lease_versions(
    current: dict[str, int],
    readable: dict[str, int] | None,
    max_staleness: int,
    steps_ahead: int,
) -> dict[str, int]:
    """The versions a training unit names. `current`: the newest published per policy; `readable`:
    the newest complete in the store per policy (None: no background store); `steps_ahead`: how many
    steps the unit's round is after the step trained at `current` (>= 0)."""
    slack = max_staleness - max(0, steps_ahead)
    if readable is None or slack <= 0:
        return dict(current)
    named = {}
    for policy, version in current.items():
        ready = readable.get(policy)
        named[policy] = ready if ready is not None and version - slack <= ready < version else version
    return named


__all__ = ["lease_versions"]
