"""The learner's collective timeout covers rank 0's longest legitimate wait between two collectives
(two rounds, each bounded by `transport.round_timeout_s`, plus its own work), and `run_learner`
creates the process group with it, not with the stall clock `transport.step_timeout_s`."""

from __future__ import annotations

import pytest

from atgrpo.config import load_config
from atgrpo.learner import distributed, job
from atgrpo.learner.distributed import GROUP_MARGIN_S, group_timeout_s


def test_the_group_outlasts_an_evaluation_and_a_step_of_rank_0():
    assert group_timeout_s(100.0) == 2 * 100.0 + GROUP_MARGIN_S
    cfg = load_config()
    assert group_timeout_s(cfg.transport.round_timeout_s) > 2 * cfg.transport.round_timeout_s
    assert group_timeout_s(cfg.transport.round_timeout_s) > cfg.transport.step_timeout_s


class _Stop(Exception):
    pass


def test_the_learner_creates_its_group_with_that_timeout(tmp_path, monkeypatch):
    cfg = load_config(
        None, [f"run.out_dir={str(tmp_path)!r}", "transport.round_timeout_s=1234", "transport.step_timeout_s=77"]
    )
    seen = {}

    def init(backend, timeout_s):
        seen["backend"], seen["timeout_s"] = backend, timeout_s
        raise _Stop

    monkeypatch.setenv("WORLD_SIZE", "1")  # as under torchrun: the job is described in the environment
    monkeypatch.setattr(distributed, "init_distributed_from_env", init)
    with pytest.raises(_Stop):
        job.run_learner(cfg, None, lambda *a: None)
    assert seen == {"backend": "gloo", "timeout_s": 2 * 1234 + GROUP_MARGIN_S}
