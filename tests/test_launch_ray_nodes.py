"""The Ray launcher's layout of a run over nodes, without a cluster: the learner's ranks numbered in
node order with their local ranks, the variables passed to every rank, bundles one per node and on
nodes of their own, the paths every node reads (a relative output refused in a Ray job), and a host's
check that it sees the driver's out_dir."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before Ray is imported: loopback only

from atgrpo.config import load_config  # noqa: E402
from atgrpo.errors import LaunchError, PlacementError  # noqa: E402
from atgrpo.launch.ray_cluster import bundles, unfit  # noqa: E402
from atgrpo.launch.ray_host import HostSpec, blind_to  # noqa: E402
from atgrpo.launch.ray_learner import node_children, passed_env  # noqa: E402
from atgrpo.launch.ray_prepare import JOB_CONFIG_VAR, check_ray_config, resolved  # noqa: E402


def cfg(*sets: str):
    return load_config(None, ['launch.backend="ray"', *sets])


def spread(ranks: int, per: int, *sets: str):
    return cfg(
        f"launch.learner_devices={list(range(ranks))}",
        "launch.ray_learner_spread=true",
        f"launch.ray_learner_ranks_per_node={per}",
        *sets,
    )


def test_ranks_are_numbered_in_node_order_with_their_local_ranks() -> None:
    passed = {"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "eth1"}
    nodes = [
        node_children(n, 2, 4, ("10.0.0.1", 2900), 60.0, "tcp://{node_ip}:*", "/r/m.jsonl", passed) for n in (0, 1)
    ]
    got = [(c.name, c.env["RANK"], c.env["LOCAL_RANK"], c.env["NODE_RANK"]) for node in nodes for c in node]
    assert got == [
        ("learner", "0", "0", "0"),
        ("learner1", "1", "1", "0"),
        ("learner2", "2", "0", "1"),
        ("learner3", "3", "1", "1"),
    ]
    for c in (c for node in nodes for c in node):
        assert c.env["WORLD_SIZE"] == "4" and c.env["LOCAL_WORLD_SIZE"] == "2"
        assert (c.env["MASTER_ADDR"], c.env["MASTER_PORT"]) == ("10.0.0.1", "2900")
        assert c.env["NCCL_SOCKET_IFNAME"] == "ib0" and c.env["GLOO_SOCKET_IFNAME"] == "eth1"
        assert c.env["ATGRPO_RENDEZVOUS_TIMEOUT_S"] == "60"
    assert [c.events for node in nodes for c in node] == [True, False, False, False]  # rank 0 is the hub
    alone = node_children(0, 1, 1, None, 60.0, "tcp://{node_ip}:*", "/r/m.jsonl", passed)
    assert alone[0].env == {}  # one rank: a world of one, as on one host


def test_only_the_collectives_variables_pass_through() -> None:
    env = {"NCCL_IB_HCA": "mlx5", "GLOO_SOCKET_IFNAME": "eth0", "TORCH_NCCL_BLOCKING_WAIT": "1", "HOME": "/root"}
    assert passed_env(env) == {k: v for k, v in env.items() if k != "HOME"}


def test_a_spread_learner_has_one_bundle_per_node_on_nodes_of_their_own() -> None:
    c = spread(4, 2, 'train.device="cuda"')
    group = bundles(c, 4, 1)
    assert [b.role for b in group] == ["learner", "learner2", "actor0"]
    assert group[0].resources == group[1].resources == {"CPU": 2.0, "GPU": 2.0}
    one_big = [{"NodeManagerAddress": "a", "Resources": {"CPU": 16.0, "GPU": 8.0}}]
    assert "without another of the learner's bundles" in unfit(group, one_big)
    two = [{"NodeManagerAddress": n, "Resources": {"CPU": 4.0, "GPU": 2.0}} for n in "ab"]
    assert unfit(group, two) is None
    with pytest.raises(PlacementError, match="does not divide the learner's 4 ranks"):
        check_ray_config(spread(4, 3))


def test_relative_paths_mean_the_drivers_folder_or_are_refused_in_a_job(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(JOB_CONFIG_VAR, raising=False)
    c = resolved(cfg('run.out_dir="runs/x"', 'policies.shared.path="models/m"', 'task.dataset="data/p.jsonl"'))
    assert c.run.out_dir == str(tmp_path / "runs/x")
    assert c.policies["shared"].path == str(tmp_path / "models/m")
    assert c.task.dataset == str(tmp_path / "data/p.jsonl")
    job = {"runtime_env": {"working_dir": "gcs://_ray_pkg_0123.zip"}, "metadata": {}}
    monkeypatch.setenv(JOB_CONFIG_VAR, json.dumps(job))
    with pytest.raises(LaunchError, match=r"run.out_dir = 'runs/x' is relative.*--working-dir.*absolute path"):
        resolved(cfg('run.out_dir="runs/x"'))
    with pytest.raises(LaunchError, match="transport.weights_store"):
        resolved(cfg(f'run.out_dir="{tmp_path}"', 'transport.weights_store="w"'))
    inputs = resolved(cfg(f'run.out_dir="{tmp_path}"', 'policies.shared.path="models/m"'))
    assert inputs.policies["shared"].path == "models/m"  # each node's processes run in its copy of the working dir


def test_a_host_sees_the_drivers_out_dir_only_with_its_marker(tmp_path: Path) -> None:
    def spec(out: Path, store: str | None = None) -> HostSpec:
        return HostSpec("actor0", str(out), store, ".atgrpo-seen-t", "", str(out / "logs"), [])

    assert "no such folder here" in blind_to(spec(tmp_path / "absent"))
    assert "lacks the driver's marker" in blind_to(spec(tmp_path))
    (tmp_path / ".atgrpo-seen-t").write_text("t\n")
    assert blind_to(spec(tmp_path)) is None
    why = blind_to(spec(tmp_path, str(tmp_path / "store")))
    assert "transport.weights_store" in why and "does not see" in why
    assert not (tmp_path / "absent").exists()  # the check creates nothing


def test_a_learner_death_names_the_rank_that_ended_first(monkeypatch, tmp_path: Path) -> None:
    """The watch's report, with hosts that answer at once (a stand-in for Ray): rank 1 was killed,
    rank 0 failed after it; the report names rank 1, its node, its end and its log's tail."""
    import sys
    from types import SimpleNamespace

    from atgrpo.launch.ray_watch import Host, Watch

    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(get=lambda ref, timeout=None: ref))
    log = tmp_path / "learner1.log"
    log.write_text("step 3\n--- learner1: pid 11 ended: killed by SIGKILL (exit 137)\n")

    def child(name: str, rank: str, rc: int, ended: float) -> dict:
        return {"name": name, "pid": 10 + int(rank), "rank": rank, "rc": rc, "ended": ended, "log": str(log)}

    info = {"node_ip": "10.0.0.2", "hostname": "gpu-b", "node_id": "1a2b3c4d5e", "host": "learner"}
    info["children"] = [child("learner", "0", 1, 200.0), child("learner1", "1", 137, 100.0)]
    handle = SimpleNamespace(
        info=SimpleNamespace(remote=lambda: info),
        tail=SimpleNamespace(remote=lambda name, lines: log.read_text()),
    )
    watch = Watch(cfg(f'run.out_dir="{tmp_path}"'))
    watch.learners = [Host("learner", handle, None, 0, {}, True, 0)]
    text = watch._learner_report()
    assert text.startswith(
        "learner learner1 (rank 1, pid 11) on node 10.0.0.2 (gpu-b, Ray node 1a2b3c4d) ended first: "
        "killed by SIGKILL (exit 137); then learner: exit 1"
    ), text
    assert f"Its log ({log} on its node) ends:\nstep 3\n--- learner1: pid 11 ended" in text
    assert "Learner ranks are not restarted" in text
