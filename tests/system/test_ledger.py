"""VersionLedger: the one version check. Strict mode admits only the current version of a known
policy of this run; `max_staleness = k` admits up to k versions old. Every rejection is counted
under its reason and never admitted."""

from __future__ import annotations

import pytest

from atgrpo.learner.ledger import VersionLedger
from atgrpo.messages import GroupKey, Sample

RUN = "run-a"


def sample(version: int, *, policy: str = "shared", run_id: str = RUN, env: int = 0) -> Sample:
    return Sample(
        run_id=run_id,
        policy=policy,
        version=version,
        step=0,
        role="plan",
        key=GroupKey(env, 0, 0),
        prompt_ids=[1, 2],
        response_ids=[3],
        logprobs=[-0.5],
        reward=0.0,
        reward_team=0.0,
        reward_local=0.0,
    )


def test_strict_mode_admits_only_the_current_version() -> None:
    ledger = VersionLedger(RUN, {"shared": 3, "other": 0})
    good = [sample(3, env=0), sample(3, env=1), sample(0, policy="other")]
    bad = {
        "stale": [sample(2), sample(0)],  # one and three versions old
        "future_version": [sample(4), sample(10)],
        "other_run": [sample(3, run_id="run-b")],  # the right version, the wrong run
        "unknown_policy": [sample(3, policy="nobody")],
    }
    mixed = [
        bad["stale"][0],
        good[0],
        bad["future_version"][0],
        bad["other_run"][0],
        good[1],
        bad["unknown_policy"][0],
        bad["stale"][1],
        bad["future_version"][1],
        good[2],
    ]
    kept = ledger.admit(mixed)
    assert kept == good  # in their order, and only them
    assert dict(ledger.rejected) == {reason: len(s) for reason, s in bad.items()}
    assert ledger.accepted == len(good)
    for reason, samples in bad.items():
        for s in samples:
            assert ledger.reason_to_reject(s) == reason
            assert ledger.admit([s]) == []
    assert ledger.accepted == len(good)


def test_the_run_check_comes_first() -> None:
    """A sample of another run is `other_run` even if its policy or version is also wrong."""
    ledger = VersionLedger(RUN, {"shared": 1})
    assert ledger.reason_to_reject(sample(7, policy="nobody", run_id="x")) == "other_run"
    assert ledger.reason_to_reject(sample(7, policy="nobody")) == "unknown_policy"


def test_a_new_version_moves_the_window() -> None:
    ledger = VersionLedger(RUN, {"shared": 0})
    assert ledger.admit([sample(0)]) == [sample(0)]
    ledger.set_version("shared", 1)
    assert ledger.versions == {"shared": 1}
    with pytest.raises(ValueError, match="older"):
        ledger.set_version("shared", 0)
    assert ledger.admit([sample(0)]) == []  # what was current is now stale
    assert ledger.admit([sample(1)]) == [sample(1)]
    assert dict(ledger.rejected) == {"stale": 1}


@pytest.mark.parametrize("k", [1, 2, 3])
def test_max_staleness_accepts_up_to_k_old_and_rejects_k_plus_one(k: int) -> None:
    current = 10
    ledger = VersionLedger(RUN, {"shared": current}, max_staleness=k)
    accepted = [sample(current - age) for age in range(k + 1)]
    assert ledger.admit(accepted) == accepted
    assert [ledger.staleness(s) for s in accepted] == list(range(k + 1))
    assert ledger.admit([sample(current - k - 1), sample(current - k - 5)]) == []
    assert ledger.admit([sample(current + 1)]) == []  # the future is never accepted, whatever k is
    assert dict(ledger.rejected) == {"stale": 2, "future_version": 1}
    assert ledger.accepted == k + 1


def test_negative_staleness_is_an_error() -> None:
    with pytest.raises(ValueError, match="max_staleness"):
        VersionLedger(RUN, {"shared": 0}, max_staleness=-1)


def test_the_ledger_keeps_its_own_copy_of_the_versions() -> None:
    versions = {"shared": 2}
    ledger = VersionLedger(RUN, versions)
    versions["shared"] = 5
    assert ledger.reason_to_reject(sample(2)) is None
    assert ledger.reason_to_reject(sample(5)) == "future_version"
