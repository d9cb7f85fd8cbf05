"""Helpers of the Ray system tests (`test_ray_cluster.py`, `test_ray_nodes.py`): a simulated cluster on
this machine (`ray.cluster_utils.Cluster`), the tiny run's settings against it, the driver started as a
subprocess, and the checks that nothing of a run is left.

Import this module before Ray: it sets Ray's loopback mode (every node and the hub on 127.0.0.1).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from systest_util import BUILT_IN, child_env, kill_tree, module_cmd, set_args, tiny_sets, train_rows, wait_for

# Before Ray is imported (it reads this once): every node, and the hub, on 127.0.0.1.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

STEPS = 8
RUN_TIMEOUT_S = 300.0
SAME = (
    "rollout/samples",
    "learner/samples",
    "learner/groups",
    "rollout/reward_mean",
    "rollout/success",
    "rollout/episode_return",
    "rollout/turns",
    "learner/shared/loss",
    "learner/shared/tokens",
    "learner/shared/version",
)
"""Metrics that depend only on what was sampled and trained, never on who sampled it, where or when."""
NODE_DEATH_FAST = {
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 1000,
    "health_check_failure_threshold": 3,
}
"""A removed node is declared dead after ~3 s, not Ray's default ~30 s."""


@contextmanager
def simulated_cluster(head: dict, workers: list[dict]) -> Iterator:
    """A `ray.cluster_utils.Cluster` of a head with `head`'s node arguments and one worker per entry of
    `workers`, with this process connected to it (to look at actors and groups); shut down after."""
    import ray
    from ray.cluster_utils import Cluster

    from atgrpo.learner.distributed import free_port

    # The head's dashboard agent would listen on Ray's fixed default port (52365): a cluster of the
    # other pytest worker then holds it, this agent never serves, and the job API answers "No available
    # agent" (CI, 2026-12-02). A free port keeps two simulated clusters apart.
    head_args = {"include_dashboard": False, "dashboard_agent_listen_port": free_port(), **head}
    c = Cluster(initialize_head=True, head_node_args=head_args)
    try:
        for args in workers:
            c.add_node(**args)
        c.wait_for_nodes()
        ray.init(address=c.address, namespace="atgrpo-tests", logging_level="WARNING", log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def ray_sets(out: Path, address: str, *, steps: int = STEPS, **extra: object) -> list[str]:
    return tiny_sets(
        out,
        **{
            "run__steps": steps,
            "run__checkpoint_every": 2,
            "launch__actors": 2,
            "launch__backend": '"ray"',
            "launch__ray_address": json.dumps(address),
            "launch__ray_actor_resources": "{actor_slot=1}",
            "launch__ray_learner_resources": "{learner_slot=1}",
            "launch__ray_placement_timeout_s": 20,
            "transport__unit_timeout_s": 5,
            **extra,
        },
    )


def start(out: Path, sets: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
    """The driver (`atgrpo-train`) of a run writing to `out`, its output in `<out>-driver.log`."""
    out.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}-driver.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(
            module_cmd("atgrpo.cli.train", str(BUILT_IN), *set_args(sets)),
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**child_env(), **(env or {})},
            start_new_session=True,
        )
    return proc, log


def finish(proc: subprocess.Popen, log: Path, timeout_s: float = RUN_TIMEOUT_S) -> int:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        pytest.fail(f"atgrpo-train (ray) did not finish within {timeout_s} s:\n{log.read_text()[-4000:]}")


def processes(out: Path) -> list[dict]:
    path = out / "processes.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def reached(out: Path, step: int) -> bool:
    """Step `step` of the run in `out` is in its metrics."""
    path = out / "metrics.jsonl"
    return path.exists() and step in train_rows(path)


def started(out: Path, names: set[str], proc: subprocess.Popen, step: int = 1) -> dict[str, dict]:
    """Once every process in `names` started and step `step` is done: name -> its processes.jsonl row."""
    wait_for(lambda: names <= {r["name"] for r in processes(out)} or None, 180, f"{sorted(names)} to start", proc)
    wait_for(lambda: reached(out, step), 180, f"step {step}", proc)
    return {r["name"]: r for r in processes(out)}


def mentioning(out: Path) -> list[str]:
    """Processes of this machine that name `out` in their command line, or hold a file under it open
    (a rank's log: its stderr)."""
    named = re.compile(re.escape(str(out)) + r"""($|[/"'\s])""")
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            files = [f.path for f in p.open_files()]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if named.search(cmd) or any(named.match(f) for f in files):
            found.append(f"{p.info['pid']}: {cmd[:200]}")
    return found


def run_pids_alive(out: Path) -> list[str]:
    """The run's processes (its ranks, actors, keepers and hosts, as processes.jsonl names them) still alive."""
    alive = []
    for row in processes(out):
        for key in ("pid", "keeper_pid", "host_pid"):
            pid = row.get(key)
            if pid and _alive(pid):
                alive.append(f"{row['name']} {key} {pid}")
    return sorted(set(alive))


def _alive(pid: int) -> bool:
    # The process may end between any two questions asked about it: an ended one is not alive.
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


def assert_nothing_left(out: Path, within_s: float = 30) -> None:
    """No placement group of the run is held, no Ray actor of it alive, no process of it running."""
    import ray
    from ray._private.state import actors

    def leftovers() -> list[str]:
        alive = [a for a in actors().values() if a.get("State") != "DEAD" and a.get("RayNamespace") == "atgrpo"]
        held = [g for g in ray.util.placement_group_table().values() if g.get("state") not in ("REMOVED",)]
        return [
            *(f"actor {a.get('Name')}" for a in alive),
            *(f"group {g.get('name')}" for g in held),
            *mentioning(out),
            *run_pids_alive(out),
        ]

    wait_for(lambda: not leftovers() or None, within_s, "the run's actors, group and processes to be gone")


def same_training(got: dict[int, dict], want: dict[int, dict], steps: int = STEPS) -> None:
    assert sorted(got) == list(range(1, steps + 1))
    for s in got:
        assert got[s]["rollout/samples"] == want[s]["rollout/samples"] > 0
        assert got[s].get("rollout/staleness_max", 0.0) == 0.0
        diff = {k: (got[s].get(k), want[s].get(k)) for k in SAME if got[s].get(k) != want[s].get(k)}
        assert not diff, f"step {s} differs from the other run: {diff}"
