"""The Ray launcher's checks that need no cluster: what it refuses before anything starts, the
placement group it asks for, the plan it checks, and the keys each process gets."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before Ray is imported: loopback only

from atgrpo.config import load_config  # noqa: E402
from atgrpo.errors import LaunchError, PlacementError  # noqa: E402
from atgrpo.launch.ray_cluster import bundles, import_ray, unfit  # noqa: E402
from atgrpo.launch.ray_run import check_ray_config, ray_plan, resolved, run_keys  # noqa: E402


def cfg(*sets: str):
    return load_config(None, ['launch.backend="ray"', *sets])


def test_ray_missing_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(LaunchError, match=r"pip install 'atgrpo\[ray\]'"):
        import_ray()


def test_unreachable_cluster_is_a_prompt_error_naming_the_address(tmp_path) -> None:
    pytest.importorskip("ray")
    began = time.monotonic()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "atgrpo.cli.train",
            "--set",
            'launch.backend="ray"',
            "--set",
            'launch.ray_address="127.0.0.1:9"',
            "--set",
            "launch.ray_connect_timeout_s=3",
            "--set",
            f'run.out_dir="{tmp_path}"',
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
    )
    assert out.returncode != 0
    assert "launch error: the Ray cluster at 127.0.0.1:9 cannot be reached" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert time.monotonic() - began < 60


def test_bundles_pack_the_learner_and_give_each_actor_its_share() -> None:
    c = cfg(
        'train.device="cuda"',
        'rollout.device="cuda"',
        "launch.learner_devices=[0,1]",
        "launch.ray_actor_gpus=0.5",
        "launch.ray_actor_resources={rollout=1}",
    )
    group = bundles(c, 2, 3)
    assert [b.role for b in group] == ["learner", "actor0", "actor1", "actor2"]
    assert group[0].resources == {"CPU": 2.0, "GPU": 2.0}  # both ranks in one bundle: one node
    assert group[1].resources == {"CPU": 1.0, "GPU": 0.5, "rollout": 1.0}
    spread = bundles(c.model_copy(update={"launch": c.launch.model_copy(update={"ray_learner_spread": True})}), 2, 1)
    assert [b.role for b in spread] == ["learner", "learner1", "actor0"]
    assert spread[0].resources == spread[1].resources == {"CPU": 1.0, "GPU": 1.0}
    assert all("GPU" not in b.resources for b in bundles(cfg(), 1, 2))  # a CPU run asks for no GPU


def test_unfit_says_which_bundle_has_no_home() -> None:
    nodes = [
        {"NodeManagerAddress": "a", "Resources": {"CPU": 4.0, "GPU": 1.0}},
        {"NodeManagerAddress": "b", "Resources": {"CPU": 4.0, "GPU": 1.0}},
    ]
    two_gpus = bundles(cfg('train.device="cuda"', "launch.learner_devices=[0,1]"), 2, 2)
    assert "which no single node has" in unfit(two_gpus, nodes)
    spread = bundles(cfg('train.device="cuda"', "launch.learner_devices=[0,1]", "launch.ray_learner_spread=true"), 2, 2)
    assert unfit(spread, nodes) is None
    assert "the bundles before it took the room" in unfit(bundles(cfg(), 1, 8), nodes)


def test_settings_a_ray_run_cannot_honour_are_refused() -> None:
    with pytest.raises(PlacementError, match="ray_actor_gpus"):
        check_ray_config(cfg('rollout.device="cuda"', "launch.actor_devices=[0,0]"))
    with pytest.raises(PlacementError, match="tcp"):
        check_ray_config(cfg('transport.endpoint="ipc:///tmp/x"'))
    with pytest.raises(PlacementError, match="Ray picks the GPU"):
        check_ray_config(cfg('train.device="cuda:1"'))
    with pytest.raises(ValueError, match="custom resources"):
        cfg("launch.ray_actor_resources={GPU=1}")
    check_ray_config(cfg('transport.endpoint="tcp://*:5555"'))


def test_out_dir_is_made_absolute_for_other_nodes() -> None:
    c = resolved(cfg('run.out_dir="runs/x"'))
    assert os.path.isabs(c.run.out_dir) and c.run.out_dir.endswith("runs/x")


def test_each_process_gets_only_its_keys(tmp_path) -> None:
    hub, actor = run_keys(cfg())
    assert {"hub.key", "hub.key_secret", "actors/actor.key"} <= set(hub)
    assert set(actor) == {"hub.key", "actors/actor.key", "actors/actor.key_secret"}  # never the hub's secret
    again, _ = run_keys(cfg())
    assert again["hub.key_secret"] != hub["hub.key_secret"]  # fresh keys for every run
    assert run_keys(cfg("transport.insecure=true")) == ({}, {})
    from atgrpo.transport.keys import generate_keys

    folder = generate_keys(tmp_path / "keys")
    mine, theirs = run_keys(cfg(f'transport.curve_keys="{folder}"'))
    assert mine["hub.key_secret"] == (folder / "hub.key_secret").read_bytes()
    assert theirs["actors/actor.key_secret"] == (folder / "actors" / "actor.key_secret").read_bytes()


def test_plan_of_shared_gpus_is_checked_before_placement() -> None:
    small = cfg(
        'rollout.device="cuda"',
        'rollout.engine="vllm"',
        "launch.ray_actor_gpus=0.5",
        "rollout.vllm_gpu_memory_utilization=0.6",
        "launch.actors=2",
    )
    with pytest.raises(PlacementError, match="does not fit"):  # two engines of 60% on one GPU
        ray_plan(small, 80 * 10**9)
    whole = small.model_copy(update={"launch": small.launch.model_copy(update={"ray_actor_gpus": 1.0})})
    assert [ld.gpu for ld in ray_plan(whole, 80 * 10**9)] == [0, 1]


def test_a_stale_record_of_a_gone_cluster_starts_a_local_instance(monkeypatch) -> None:
    ray = pytest.importorskip("ray")
    import ray._private.services as services

    from atgrpo.launch import ray_cluster

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # Ray's record of the last cluster started here names a head that is gone (nothing listens on 9).
    monkeypatch.setattr(
        services, "canonicalize_bootstrap_address", lambda addr: None if addr == "local" else "127.0.0.1:9"
    )
    asked = {}
    monkeypatch.setattr(ray, "init", lambda address=None, **kw: asked.update(address=address, **kw))
    conn = ray_cluster.connect(cfg(), bundles(cfg(), 1, 2))
    assert asked["address"] == "local" and asked["num_cpus"] >= 3 and conn.started_here
    with pytest.raises(LaunchError, match="127.0.0.1:9 cannot be reached"):  # named by the user: an error
        ray_cluster.connect(
            cfg('launch.ray_address="127.0.0.1:9"', "launch.ray_connect_timeout_s=2"), bundles(cfg(), 1, 2)
        )


def test_a_ray_run_sends_weights_through_a_store_under_out_dir_unless_set(tmp_path) -> None:
    out = tmp_path / "run"
    default = resolved(cfg(f'run.out_dir="{out}"'))
    assert default.transport.weights_store == str(out / "weights")
    relative = resolved(cfg(f'run.out_dir="{out}"', 'transport.weights_store="shared/w"'))
    assert relative.transport.weights_store == str(Path.cwd() / "shared" / "w")
    hub = resolved(cfg(f'run.out_dir="{out}"', 'transport.weights_store=""'))
    assert hub.transport.weights_store == ""  # said so: every actor from the hub
    assert load_config(None, []).transport.weights_store is None  # one host: the hub, as before


def test_the_learner_host_start_clock_is_a_setting_named_in_its_error(monkeypatch, tmp_path) -> None:
    from types import SimpleNamespace

    from atgrpo.launch.ray_run import RayRun
    from atgrpo.launch.ray_watch import Host

    asked: list[float] = []

    def get(_refs, timeout):
        asked.append(timeout)
        raise TimeoutError("GetTimeoutError")

    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(get=get))
    run = RayRun(cfg(f'run.out_dir="{tmp_path}"', "launch.ray_host_start_timeout_s=7"), 1)
    handle = SimpleNamespace(info=SimpleNamespace(remote=lambda: None))
    run.watch.learners = [Host("learner", handle, None, 0, {}, True, 0)]
    with pytest.raises(LaunchError, match=r"within 7 s \(launch.ray_host_start_timeout_s\)"):
        run._await_learner_start()
    assert asked == [7.0]
    la = load_config(None, []).launch  # a cold cluster: worker start with its runtime_env, an image pull
    assert la.ray_host_start_timeout_s >= 600 and la.ray_placement_timeout_s >= 300
