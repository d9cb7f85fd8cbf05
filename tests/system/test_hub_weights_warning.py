"""A hub that serves weights to more than a few actors without a weight store says so once, with the
bytes per version (issue 48, item 2); one with a store, or few actors, says nothing. Fixtures are
those of test_hub.py."""

# ruff: noqa: F811  (the fixtures of test_hub.py, imported by name, are the tests' parameters)
from __future__ import annotations

import logging
from pathlib import Path

import torch
from test_hub import RUN, connect, hello, make_hub  # noqa: F401  (fixtures)

from atgrpo.learner.hub import FEW_ACTORS
from atgrpo.transport.weight_store import WeightStore

MB = 1 << 20


def weights(v: int) -> dict[str, torch.Tensor]:
    return {"t": torch.full((64 * MB // 4,), float(v))}  # 64 MiB a version


def warnings_of(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "weights_store" in r.getMessage()
    ]


def test_many_actors_from_the_hub_warn_once_with_the_bytes(make_hub, connect, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="atgrpo.hub")
    hub = make_hub()
    hub.publish("shared", 1, weights(1))
    for i in range(FEW_ACTORS):
        hello(connect(hub, f"a{i}"))
    assert warnings_of(caplog) == []  # a few actors: nothing to say
    for i in range(FEW_ACTORS, FEW_ACTORS + 3):
        hello(connect(hub, f"a{i}"))
    hub.publish("shared", 2, weights(2))
    said = warnings_of(caplog)
    assert len(said) == 1, said
    assert f"to {FEW_ACTORS + 1} actors" in said[0] and "shared 0.07 GB a version" in said[0]


def test_a_hub_with_a_store_says_nothing(make_hub, connect, caplog, tmp_path: Path) -> None:
    caplog.set_level(logging.WARNING, logger="atgrpo.hub")
    hub = make_hub()
    hub.store = WeightStore(tmp_path, RUN)
    hub.publish("shared", 1, weights(1))
    for i in range(FEW_ACTORS + 2):
        hello(connect(hub, f"a{i}"))
    assert warnings_of(caplog) == []
