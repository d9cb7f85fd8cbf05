"""`lease_versions`: a training unit names an older, readable version only under pipelining, only
while the newest is still being written, and only within the staleness bound of its round."""

from __future__ import annotations

from atgrpo.learner.lease_versions import lease_versions

CURRENT = {"tool": 7, "plan": 7}


def test_strict_on_policy_and_no_store_name_the_current_versions() -> None:
    assert lease_versions(CURRENT, {"tool": 6, "plan": 6}, 0, 0) == CURRENT
    assert lease_versions(CURRENT, None, 2, 0) == CURRENT


def test_the_round_trained_next_may_name_the_readable_version_within_the_bound() -> None:
    assert lease_versions(CURRENT, {"tool": 6, "plan": 7}, 1, 0) == {"tool": 6, "plan": 7}
    assert lease_versions(CURRENT, {"tool": 5, "plan": 6}, 1, 0) == {"tool": 7, "plan": 6}  # 5 is two behind
    assert lease_versions(CURRENT, {"tool": 5, "plan": 6}, 2, 0) == {"tool": 5, "plan": 6}


def test_a_round_further_ahead_has_less_slack() -> None:
    # Trained j steps later, at up to v + j: it may name v - (k - j) at the oldest.
    assert lease_versions(CURRENT, {"tool": 6, "plan": 6}, 1, 1) == CURRENT
    assert lease_versions(CURRENT, {"tool": 5, "plan": 6}, 2, 1) == {"tool": 7, "plan": 6}
    assert lease_versions(CURRENT, {"tool": 6, "plan": 6}, 2, 5) == CURRENT


def test_a_policy_never_written_or_already_readable_keeps_its_current_version() -> None:
    assert lease_versions(CURRENT, {"plan": 6}, 1, 0) == {"tool": 7, "plan": 6}
    assert lease_versions(CURRENT, {"tool": 7, "plan": 7}, 1, 0) == CURRENT
