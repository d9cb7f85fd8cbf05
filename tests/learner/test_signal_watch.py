"""A step in which nothing trains says so: no mismatch figure for a policy whose advantages are all 0,
and one warning when every group has been constant for `metrics.warn_constant_steps` steps in a row."""

from __future__ import annotations

import logging

import numpy as np

from atgrpo.learner.signal_watch import SignalWatch, quiet_policies
from atgrpo.messages import GroupKey, Sample


def samples(policies: list[str]) -> list[Sample]:
    return [
        Sample(
            "run",
            p,
            0,
            0,
            "plan",
            GroupKey(i, 0, 0),
            [1],
            [2],
            [-0.1],
            reward=0.0,
            reward_team=0.0,
            reward_local=0.0,
        )
        for i, p in enumerate(policies)
    ]


def row(*policies: str) -> dict[str, float]:
    out: dict[str, float] = {"advantage/zero_frac": 1.0}
    for p in policies:
        out.update(
            {
                f"learner/{p}/loss": 0.0,
                f"learner/{p}/logprob_mismatch": 0.0,
                f"learner/{p}/grad_norm": 0.0,
            }
        )
    return out


def test_quiet_policies_are_those_whose_every_advantage_is_zero() -> None:
    s = samples(["a", "a", "b", "b"])
    assert quiet_policies(s, np.array([0.0, 0.0, 0.7, -0.7])) == ["a"]
    assert quiet_policies(s, np.zeros(4)) == ["a", "b"]
    assert quiet_policies(s, np.array([0.1, -0.1, 0.7, -0.7])) == []
    assert quiet_policies([], np.zeros(0)) == []


def test_the_mismatch_of_an_untrained_policy_is_not_logged_and_the_console_says_why() -> None:
    said: list[tuple[str, str]] = []
    watch = SignalWatch(0, lambda level, text: said.append((level, text)))
    s = samples(["a", "a", "b", "b"])
    m = row("a", "b")
    watch.observe(1, s, np.array([0.0, 0.0, 0.7, -0.7]), m)
    assert "learner/a/logprob_mismatch" not in m and m["learner/b/logprob_mismatch"] == 0.0
    assert m["learner/a/loss"] == 0.0  # what was measured stays
    assert len(said) == 1 and said[0][0] == "info" and "policy a" in said[0][1] and "not measured" in said[0][1]
    m = row("a", "b")
    watch.observe(2, s, np.array([0.0, 0.0, 0.7, -0.7]), m)  # still quiet: not said again
    assert "learner/a/logprob_mismatch" not in m and len(said) == 1
    watch.observe(3, s, np.array([0.5, -0.5, 0.7, -0.7]), row("a", "b"))
    watch.observe(4, s, np.array([0.0, 0.0, 0.7, -0.7]), row("a", "b"))  # a new quiet stretch: said anew
    assert len(said) == 2 and "step 4" in said[1][1]


def test_an_entropy_or_kl_term_trains_without_advantages_so_the_mismatch_stays() -> None:
    watch = SignalWatch(0, trains_without_advantage=True)
    m = row("a")
    watch.observe(1, samples(["a", "a"]), np.zeros(2), m)
    assert m["learner/a/logprob_mismatch"] == 0.0


def test_constant_groups_for_n_steps_warn_once(caplog) -> None:
    said: list[tuple[str, str]] = []
    watch = SignalWatch(3, lambda level, text: said.append((level, text)))
    s = samples(["a", "a"])
    varied = np.array([0.5, -0.5])
    with caplog.at_level(logging.INFO, logger="atgrpo.learner"):
        for step, adv in enumerate([np.zeros(2), np.zeros(2), varied, np.zeros(2), np.zeros(2)], start=1):
            watch.observe(step, s, adv, row("a"))
        assert not [w for w in said if w[0] == "warning"]  # the stretch was broken at step 3
        watch.observe(6, s, np.zeros(2), row("a"))  # steps 4, 5, 6: three in a row
        warnings = [text for level, text in said if level == "warning"]
        assert len(warnings) == 1 and "last 3 steps (to step 6)" in warnings[0] and "warm-start" in warnings[0]
        for step in range(7, 12):
            watch.observe(step, s, np.zeros(2), row("a"))
    assert len([w for w in said if w[0] == "warning"]) == 1  # once per run
    assert [r.levelname for r in caplog.records].count("WARNING") == 1
    off = SignalWatch(0, lambda level, text: said.append((level, text)))
    for step in range(1, 20):
        off.observe(step, s, np.zeros(2), row("a"))
    assert len([w for w in said if w[0] == "warning"]) == 1  # 0: never warns
