"""Dynamic sampling end to end on a real hub (`learner.refill`, `learner.objective`): an actor thread
rolls out units whose groups are constant for envs of even seed; the orchestrator drops those
groups, refills the step at the same version until it holds its informative groups or spends its
cap, and the hub and the ledger account for every extra unit. Fixtures are test_hub.py's."""

from __future__ import annotations

import threading

import msgspec
import pytest
from test_hub import K, connect, env_results, hello, make_hub, take_unit, unit_samples  # noqa: F401  (fixtures)

from atgrpo.config import load_config
from atgrpo.learner.orchestrator import Orchestrator
from atgrpo.messages import SampleBatch, WorkUnit
from atgrpo.units import refill_seeds


def samples_of(unit: WorkUnit) -> list:
    """`unit_samples`, with every group of an env of even seed made constant (rewards 1, 1)."""
    out = unit_samples(unit, tag=1)
    return [
        msgspec.structs.replace(s, reward=1.0, reward_local=1.0)
        if unit.seeds[s.key.env - unit.env_offset] % 2 == 0
        else s
        for s in out
    ]


def serve(client, stop: threading.Event, units: list[WorkUnit]) -> None:
    while not stop.is_set():
        try:
            unit = take_unit(client, timeout_s=0.5)
        except AssertionError:
            continue
        units.append(unit)
        client.request(SampleBatch(client.actor_id, unit.unit_id, samples_of(unit), last=False))
        client.request(SampleBatch(client.actor_id, unit.unit_id, [], last=True, env_results=env_results(unit)))


@pytest.fixture
def actor(make_hub, connect):  # noqa: F811 (fixtures)
    hub = make_hub()
    client = connect(hub, "a")
    hello(client)
    stop, units = threading.Event(), []
    thread = threading.Thread(target=serve, args=(client, stop, units), daemon=True)
    thread.start()
    yield hub, units
    stop.set()
    thread.join(timeout=5.0)


def orchestrator(hub, target: int, cap: int, streaming: bool) -> Orchestrator:
    cfg = load_config(
        None,
        [
            f"rollout.k={K}",
            "rollout.envs_per_step=4",
            "rollout.envs_per_unit=2",
            "rollout.drop_constant_groups=true",
            f"rollout.refill_groups={target}",
            f"rollout.refill_max_envs={cap}",
            f"train.streaming={str(streaming).lower()}",
        ],
    )
    return Orchestrator(cfg, hub, {"shared": 0}, world=1)


@pytest.mark.parametrize("streaming", [False, True])
def test_refill_brings_the_step_to_its_informative_groups_at_the_same_version(actor, streaming: bool) -> None:
    hub, units = actor
    orch = orchestrator(hub, target=4, cap=6, streaming=streaming)
    plans = list(orch.step_plans(0))
    data, objective = orch.last
    # seeds 0..3: envs of seeds 1 and 3 are informative (2 groups); at 0.5 an env the 2 missing
    # groups need 4 more envs: refill seeds 2^41 + 0..3, of which 1 and 3 are informative again
    assert orch.refill.informative == 4 and orch.refill.spent == 4 and orch.refill.rounds == 1
    refills = [u for u in units if u.env_offset >= 4]
    assert sorted(s for u in refills for s in u.seeds) == refill_seeds(0, 0, 4, 6)
    assert sorted(u.env_offset for u in refills) == [4, 6]  # numbered after the step's own envs
    assert {s.version for s in data.samples} == {0} and all(u.versions == {"shared": 0} for u in units)
    assert len(data.samples) == K * 8 and len(data.envs) == 8
    m = {**hub.metrics(), **orch.metrics(), **objective.metrics()}
    assert (m["hub/refill_units"], m["hub/refill_envs"]) == (2.0, 4.0)
    assert hub.ledger.accepted == K * 8 and m["hub/rejected_total"] == 0.0  # every extra unit admitted, counted
    assert (m["rollout/refill_envs"], m["rollout/refill_rounds"], m["rollout/refill_short"]) == (4.0, 1.0, 0.0)
    assert (m["advantage/dropped_groups"], m["advantage/informative_groups"]) == (4.0, 4.0)
    # the constant groups carry no weight: the normaliser counts the 4 informative groups' tokens
    # (K samples of 2 response tokens each), and only their samples are packed
    final = plans[-1][0].steps["shared"][-1]
    assert final.total_tokens == 4 * K * 2
    trained = sum(mb.rows for p in plans for st in p[0].steps["shared"] for mb in st.micro_batches)
    assert trained == 4 * K


def test_the_cap_stops_a_refill_short(actor) -> None:
    hub, units = actor
    orch = orchestrator(hub, target=10, cap=3, streaming=False)
    list(orch.step_plans(0))
    # 2 informative groups in 4 envs; the first refill asks for 16 envs and gets the cap's 3
    # (seeds 2^41 + 0..2: one more informative); the cap is then spent
    assert orch.refill.spent == 3 and orch.refill.rounds == 1 and orch.refill.informative == 3
    m = {**hub.metrics(), **orch.metrics()}
    assert m["rollout/refill_short"] == 1.0 and m["hub/refill_envs"] == 3.0 and m["hub/refill_units"] == 2.0
