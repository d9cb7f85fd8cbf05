"""`launch.backend = "ray"` on a Ray cluster of three simulated nodes on this machine
(`ray.cluster_utils.Cluster`): a head that alone offers `learner_slot`, and two workers that alone
offer `actor_slot`, so that placement is forced across them. Each run is the real `atgrpo-train`
(the Ray driver) against that cluster, with the tiny model.

- a clean run trains, its actors ran on the two workers and its learner on the head (processes.jsonl),
  and nothing of it is left on the cluster: no Ray actor, placement group or process;
- faults mid-run, both in one run: SIGKILL of one actor's process (Ray restarts it) and the removal
  of the other actor's worker node (its actor comes back on the remaining worker); the run finishes
  and it trained on exactly the samples of the clean run (the same metrics that depend only on what
  was sampled and trained; staleness 0: every sample's version was the one its unit was leased under);
- SIGTERM to the driver (what `ray job stop` sends): a checkpoint; a new run on the same out_dir
  resumes from it and finishes;
- too few resources: an error naming them within seconds, and no placement group left pending;
- CURVE: a client without the run's keys never gets an answer from the hub.
Every node listens on 127.0.0.1 only (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`: Ray's loopback mode).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_util import (
    NODE_DEATH_FAST,
    STEPS,
    assert_nothing_left,
    finish,
    processes,
    reached,
    same_training,
    simulated_cluster,
    start,
)
from ray_util import ray_sets as _ray_sets
from systest_util import train_rows, wait_for

ray = pytest.importorskip("ray", reason="the `ray` extra is not installed (pip install 'atgrpo[ray]')")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # A removed node is declared dead after ~3 s, not Ray's default ~30 s: the lost actor's return on
    # the other worker must come well inside the faulted run's remaining steps, also on a loaded CI
    # machine (a run of 8 steps can end before a 30 s detector fires).
    head = {"num_cpus": 1, "resources": {"learner_slot": 1}, "_system_config": NODE_DEATH_FAST}
    with simulated_cluster(head, [{"num_cpus": 2, "resources": {"actor_slot": 2}}] * 2) as c:
        yield c


def ray_sets(out: Path, cluster: Cluster, **extra: object) -> list[str]:
    return _ray_sets(out, cluster.address, **extra)


def start_training(out: Path, cluster: Cluster) -> tuple[subprocess.Popen, Path]:
    """A run on the cluster, once every process started and step 1 is done (so a fault lands mid-run)."""
    proc, log = start(out, ray_sets(out, cluster))
    wait_for(lambda: len(processes(out)) >= 3 or None, 120, "every process to start", proc)
    wait_for(lambda: reached(out, 1), 120, "step 1", proc)
    return proc, log


def node_ids(cluster: Cluster) -> tuple[str, set[str]]:
    head = cluster.head_node.node_id
    return head, {n.node_id for n in cluster.worker_nodes}


@pytest.fixture(scope="module")
def clean(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("ray") / "clean"
    proc, log = start(out, ray_sets(out, cluster))
    assert finish(proc, log) == 0, log.read_text()[-4000:]
    return out, log.read_text()


def test_trains_with_actors_on_the_workers_and_leaves_nothing(cluster: Cluster, clean: tuple[Path, str]) -> None:
    out, text = clean
    assert "held-out success" in text and "metrics:" in text  # the same closing lines as the local launcher
    rows = processes(out)
    head, workers = node_ids(cluster)
    where = {r["name"]: r["node_id"] for r in rows}
    assert where["learner"] == head
    assert {where["actor0"], where["actor1"]} == workers  # spread: one actor on each worker
    assert all(r["event"] == "started" for r in rows)
    assert sorted(train_rows(out / "metrics.jsonl")) == list(range(1, STEPS + 1))
    assert all((out / "logs" / f"{n}.log").stat().st_size > 0 for n in ("learner", "actor0", "actor1"))
    assert_nothing_left(out)


def assert_strangers_get_no_answer(log: Path, proc: subprocess.Popen) -> None:
    """CURVE: a client without the run's keys, at the hub's tcp address, is never answered."""
    from atgrpo.errors import TransportTimeout
    from atgrpo.messages import PROTOCOL_VERSION, Hello
    from atgrpo.transport.endpoints import ActorClient

    address = wait_for(
        lambda: (m := re.search(r"hub at (tcp://\S+)", log.read_text())) and m.group(1), 120, "the hub's address", proc
    )
    with ActorClient(address, "intruder", curve_keys=None) as client, pytest.raises(TransportTimeout):
        client.request(Hello(PROTOCOL_VERSION, "intruder", "planpath-atgrpo", ["shared"]), timeout_s=3)


def test_stop_checkpoints_and_a_new_job_resumes(cluster: Cluster, tmp_path: Path) -> None:
    """(Also, while the first job runs: a client without the run's keys cannot join its hub.)"""
    out = tmp_path / "stop"
    proc, log = start(out, ray_sets(out, cluster, run__checkpoint_every=0))
    assert_strangers_get_no_answer(log, proc)
    wait_for(lambda: reached(out, 2), 120, "step 2", proc)
    proc.send_signal(signal.SIGTERM)  # `ray job stop` signals the driver so
    assert finish(proc, log) == 143, log.read_text()[-4000:]
    saved = sorted(p.name for p in (out / "checkpoints").glob("step_*"))
    assert saved, log.read_text()[-4000:]
    assert_nothing_left(out)
    proc, log2 = start(out, ray_sets(out, cluster))
    assert finish(proc, log2) == 0, log2.read_text()[-4000:]
    step = int(saved[-1].removeprefix("step_"))
    assert f"at step {step}" in log2.read_text()
    assert max(train_rows(out / "metrics.jsonl")) == STEPS


def test_too_few_resources_is_an_error_naming_them(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "big"
    began = time.monotonic()
    proc, log = start(out, ray_sets(out, cluster, launch__ray_actor_resources="{actor_slot=3}"))
    assert finish(proc, log, 120) != 0
    text = log.read_text()
    assert "launch error: the Ray cluster cannot hold this run" in text and "actor_slot: 3" in text, text[-3000:]
    assert "actor_slot: 2" in text  # what each worker has
    assert time.monotonic() - began < 90  # seconds, not a group waiting forever (start-up included)
    assert_nothing_left(out)


def test_killed_actor_and_lost_node_change_nothing_but_time(
    cluster: Cluster, clean: tuple[Path, str], tmp_path: Path
) -> None:
    """Two faults in one run (one run's start-up, not two): actor0's process is killed and actor1's
    node removed at once, after step 1. Ray restarts actor0 (a new process on its live node) and
    brings actor1 back on the remaining worker. Both at once, not one after the other: no unit is
    done until an actor is back, so actor1's return has at least the lead it had in a run that lost
    only its node (the other actor must restart before it can work alone), and no wait for the first
    restart eats into the steps left for the second fault."""
    out = tmp_path / "faults"
    proc, log = start_training(out, cluster)
    victim = next(r for r in processes(out) if r["name"] == "actor0")
    lost = next(r for r in processes(out) if r["name"] == "actor1")
    assert victim["node_id"] != lost["node_id"], processes(out)  # spread, as in the clean run
    node = next(n for n in cluster.worker_nodes if n.node_id == lost["node_id"])
    os.kill(victim["pid"], signal.SIGKILL)
    cluster.remove_node(node, allow_graceful=False)
    try:
        assert finish(proc, log) == 0, log.read_text()[-4000:]
        again = [r for r in processes(out) if r["name"] == "actor0" and r["event"] == "restarted"]
        assert again and again[0]["pid"] != victim["pid"], processes(out)
        assert "actor0 restarted by Ray" in log.read_text()
        back = [r for r in processes(out) if r["name"] == "actor1" and r["event"] == "restarted"]
        assert back and back[-1]["node_id"] != lost["node_id"], processes(out)
        same_training(train_rows(out / "metrics.jsonl"), train_rows(clean[0] / "metrics.jsonl"))
        assert_nothing_left(out)
    finally:
        cluster.add_node(num_cpus=2, resources={"actor_slot": 2})
        cluster.wait_for_nodes()
