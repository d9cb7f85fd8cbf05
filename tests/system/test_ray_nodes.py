"""A Ray run's learner over nodes and the deaths of its processes, on a simulated cluster of three
nodes on this machine that advertise fake GPUs as a custom resource (`fake_gpu`, two a node; the
ranks train on CPU over gloo): a head that alone offers `learner_slot`, two workers that alone offer
`actor_slot`.

- a spread learner of 2 nodes x 2 ranks: ranks 0-1 on one node and 2-3 on the other, each with its
  local rank, node rank and the driver's GLOO_*/NCCL_* variables; it trains exactly as the same four
  ranks packed on one node;
- SIGKILL of the driver of a packed 2-rank run: within 30 s no process of the run is left (no rank,
  actor, keeper or host; nothing that names out_dir or holds a file of it open);
- SIGKILL of one learner rank: the run ends within 60 s, naming that rank, its node, how it died and
  its log's tail;
- an actor whose restarts are spent: the run says so, with the reason and the log's tail, and goes on
  with the other actor to the end (exit 0);
- SIGKILL of the packed learner's host: both ranks die with it at once, and the run ends naming them;
- an actor whose node is lost with no room left for it: said after launch.ray_placement_timeout_s,
  and the run goes on with the other actor.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from ray_util import (
    NODE_DEATH_FAST,
    STEPS,
    assert_nothing_left,
    finish,
    mentioning,
    processes,
    ray_sets,
    run_pids_alive,
    same_training,
    simulated_cluster,
    start,
    started,
)
from systest_util import train_rows, wait_for

ray = pytest.importorskip("ray", reason="the `ray` extra is not installed (pip install 'atgrpo[ray]')")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = pytest.mark.integration

WORKER = {"num_cpus": 2, "resources": {"actor_slot": 2, "fake_gpu": 2}}
SPREAD_STEPS = 3


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    head = {"num_cpus": 1, "resources": {"learner_slot": 1, "fake_gpu": 2}, "_system_config": NODE_DEATH_FAST}
    with simulated_cluster(head, [WORKER] * 2) as c:
        yield c


def packed(out: Path, cluster: Cluster, **extra: object) -> list[str]:
    """Two learner ranks on one node (one bundle of two fake GPUs), two actors."""
    return ray_sets(
        out,
        cluster.address,
        launch__learner_devices="[0,1]",
        launch__ray_learner_resources="{fake_gpu=1}",
        launch__ray_learner_cpus=0.25,
        launch__learner_threads=1,
        **extra,
    )


def test_a_spread_learner_packs_its_ranks_per_node_and_trains_as_a_packed_one(cluster: Cluster, tmp_path: Path) -> None:
    four = {
        "steps": SPREAD_STEPS,
        "launch__learner_devices": "[0,1,2,3]",
        "launch__ray_learner_cpus": 0.25,
        "launch__learner_threads": 1,  # four ranks and two actors share this machine's cores
    }
    out = tmp_path / "spread"
    passed = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_DEBUG": "WARN"}
    proc, log = start(
        out,
        ray_sets(
            out,
            cluster.address,
            launch__ray_learner_resources="{fake_gpu=1}",
            launch__ray_learner_spread="true",
            launch__ray_learner_ranks_per_node=2,
            **four,
        ),
        env=passed,
    )
    names = [f"learner{r}" if r else "learner" for r in range(4)]
    rows = started(out, set(names), proc)
    envs = {n: psutil.Process(rows[n]["pid"]).environ() for n in names}
    assert finish(proc, log) == 0, log.read_text()[-4000:]
    nodes = [rows[n]["node_id"] for n in names]
    assert nodes[0] == nodes[1] != nodes[2] == nodes[3], rows
    for r, n in enumerate(names):
        env = envs[n]
        want = {"RANK": r, "LOCAL_RANK": r % 2, "NODE_RANK": r // 2, "LOCAL_WORLD_SIZE": 2, "WORLD_SIZE": 4}
        assert {k: int(env[k]) for k in want} == want, (n, env)
        assert {k: env[k] for k in passed} == passed

    packed_out = tmp_path / "packed4"
    proc, log = start(packed_out, ray_sets(packed_out, cluster.address, launch__ray_learner_resources="{}", **four))
    assert finish(proc, log) == 0, log.read_text()[-4000:]
    assert len({r["node_id"] for r in processes(packed_out) if r["name"] in names}) == 1  # packed: one node
    same_training(train_rows(out / "metrics.jsonl"), train_rows(packed_out / "metrics.jsonl"), steps=SPREAD_STEPS)
    assert_nothing_left(out)


def test_killing_the_driver_of_a_packed_learner_leaves_no_process(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "orphans"
    proc, log = start(out, packed(out, cluster))
    rows = started(out, {"learner", "learner1", "actor0", "actor1"}, proc)
    assert rows["learner"]["node_id"] == rows["learner1"]["node_id"]
    assert (rows["learner1"]["local_rank"], rows["learner1"]["rank"]) == ("1", "1")
    assert mentioning(out)  # the keepers name it, the ranks hold their logs open: the check sees them
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    began = time.monotonic()
    wait_for(
        lambda: not (mentioning(out) or run_pids_alive(out)) or None,
        30,
        f"every process of the run to be gone (left: {mentioning(out) + run_pids_alive(out)})",
    )
    print(f"every process gone {time.monotonic() - began:.1f} s after the driver's SIGKILL")
    assert_nothing_left(out)


def test_a_killed_learner_rank_ends_the_run_naming_it(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "rank"
    proc, log = start(out, packed(out, cluster))
    victim = started(out, {"learner", "learner1", "actor0", "actor1"}, proc)["learner1"]
    os.kill(victim["pid"], signal.SIGKILL)
    began = time.monotonic()
    assert finish(proc, log, 60) == 1, log.read_text()[-4000:]
    took = time.monotonic() - began
    text = log.read_text()
    assert f"learner learner1 (rank 1, pid {victim['pid']}) on node 127.0.0.1" in text, text[-4000:]
    assert "ended first: killed by SIGKILL (exit 137)" in text, text[-4000:]
    assert f"Its log ({out / 'logs' / 'learner1.log'} on its node) ends:" in text
    assert f"pid {victim['pid']} ended: killed by SIGKILL" in text  # the keeper's line, in the tail
    assert took < 60
    print(f"the run ended {took:.1f} s after the rank's SIGKILL")
    assert_nothing_left(out)


def test_an_actor_whose_restarts_are_spent_is_said_and_the_run_goes_on(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "spent"
    proc, log = start(out, ray_sets(out, cluster.address, launch__max_actor_restarts=0))
    victim = started(out, {"learner", "actor0", "actor1"}, proc)["actor0"]
    os.kill(victim["pid"], signal.SIGKILL)
    assert finish(proc, log) == 0, log.read_text()[-4000:]
    text = log.read_text()
    assert (
        "actor0 is lost for good: it died after 0 restart(s) by Ray, all that launch.max_actor_restarts = 0 allows"
        in text
    ), text[-4000:]
    assert f"actor0 (pid {victim['pid']}) on node 127.0.0.1" in text
    assert f"pid {victim['pid']} ended: killed by SIGKILL (exit 137)" in text  # its log's tail
    assert "The run goes on with 1 actor(s)." in text
    assert max(train_rows(out / "metrics.jsonl")) == STEPS
    assert_nothing_left(out)


def test_an_actor_that_cannot_be_placed_again_is_said_after_the_placement_clock(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Each actor takes a whole worker (both its actor slots): the one whose node is removed has
    nowhere to go. A short placement clock (8 s; the run's own group is reserved in under one), so
    that it runs out well before the run's last step."""
    out = tmp_path / "unplaced"
    sets = ray_sets(
        out, cluster.address, launch__ray_actor_resources="{actor_slot=2}", launch__ray_placement_timeout_s=8
    )
    proc, log = start(out, sets)
    lost = started(out, {"learner", "actor0", "actor1"}, proc)["actor1"]
    node = next(n for n in cluster.worker_nodes if n.node_id == lost["node_id"])
    cluster.remove_node(node, allow_graceful=False)
    try:
        assert finish(proc, log) == 0, log.read_text()[-4000:]
        text = log.read_text()
        assert "actor1 is lost for good: it was not placed again within 8 s (launch.ray_placement_timeout_s)" in text
        assert "no live node has room for its bundle" in text and "The run goes on with 1 actor(s)." in text
        assert max(train_rows(out / "metrics.jsonl")) == STEPS
        assert_nothing_left(out)
    finally:
        cluster.add_node(**WORKER)
        cluster.wait_for_nodes()


def test_a_killed_learner_host_takes_its_ranks_and_the_run_says_so(cluster: Cluster, tmp_path: Path) -> None:
    """SIGKILL of the Ray worker that hosts the packed learner: its keepers kill both ranks at once,
    and the run ends naming the ranks that died with their host."""
    out = tmp_path / "host"
    proc, log = start(out, packed(out, cluster))
    rows = started(out, {"learner", "learner1", "actor0", "actor1"}, proc)
    os.kill(rows["learner"]["host_pid"], signal.SIGKILL)
    ranks = [rows[n]["pid"] for n in ("learner", "learner1")]
    wait_for(lambda: not any(psutil.pid_exists(p) for p in ranks) or None, 10, "the ranks to die with their host")
    assert finish(proc, log, 90) == 1, log.read_text()[-4000:]
    text = log.read_text()
    assert "learner rank(s) learner, learner1 on node 127.0.0.1" in text and "died with their host learner" in text
    assert_nothing_left(out)
