"""The version ledger: the one place where a sample's (run, policy, version) stamp is checked.

In strict on-policy mode (`max_staleness = 0`, the default) a sample is accepted only if it was made
by the current version of its policy; anything else is rejected, counted under its reason and never
trained on. With `max_staleness = k` samples up to k versions old are accepted (the loss then
corrects them with truncated importance sampling). Samples from the future are always rejected.
"""

from __future__ import annotations

from collections import Counter

from atgrpo.messages import Sample


class VersionLedger:
    def __init__(self, run_id: str, versions: dict[str, int], max_staleness: int = 0) -> None:
        if max_staleness < 0:
            raise ValueError("max_staleness must be >= 0")
        self.run_id = run_id
        self.versions = dict(versions)
        self.max_staleness = max_staleness
        self.rejected: Counter[str] = Counter()
        self.accepted = 0

    def reason_to_reject(self, sample: Sample) -> str | None:
        """None if the sample may be trained on now, else the counter name of why not."""
        if sample.run_id != self.run_id:
            return "other_run"
        current = self.versions.get(sample.policy)
        if current is None:
            return "unknown_policy"
        if sample.version > current:
            return "future_version"
        if self.staleness(sample) > self.max_staleness:
            return "stale"
        return None

    def admit(self, samples: list[Sample]) -> list[Sample]:
        """The admissible samples of `samples`; every rejection is counted."""
        kept = []
        for s in samples:
            reason = self.reason_to_reject(s)
            if reason is None:
                kept.append(s)
            else:
                self.rejected[reason] += 1
        self.accepted += len(kept)
        return kept

    def set_version(self, policy: str, version: int) -> None:
        """`policy`'s weights at `version` are now the current ones (the hub calls it under its lock
        when it publishes them). Versions only move forward."""
        if version < self.versions.get(policy, 0):
            raise ValueError(f"policy {policy!r}: version {version} is older than the current {self.versions[policy]}")
        self.versions[policy] = version

    def staleness(self, sample: Sample) -> int:
        """How many versions behind its policy's current one an admitted sample is."""
        return self.versions[sample.policy] - sample.version
