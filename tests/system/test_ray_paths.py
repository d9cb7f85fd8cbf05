"""A Ray run's paths on a simulated cluster on this machine (a head with Ray's dashboard, so that its
job server takes jobs, and a node started for one test):

- a job submitted through Ray's job API with `--working-dir` and a relative `run.out_dir` is refused in
  seconds, saying why (the driver runs in Ray's temporary copy of the working dir) and how to give it;
- a node that does not see out_dir (its raylet and workers run in a mount namespace where the test's
  folder is an empty tmpfs, as a node without the shared filesystem would) fails the run in seconds,
  naming the node and the path, and leaves nothing behind.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_util import assert_nothing_left, finish, ray_sets, simulated_cluster, start
from systest_util import BUILT_IN, child_env, kill_tree, module_cmd, set_args, wait_for

ray = pytest.importorskip("ray", reason="the `ray` extra is not installed (pip install 'atgrpo[ray]')")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = pytest.mark.integration

REFUSED_WITHIN_S = 60.0
"""A refused run's budget on a loaded 2-core machine (Ray's job start and the driver's imports)."""

AGENT_WITHIN_S = 120.0
"""How long the head's job agent may take to register (a process the raylet starts, on a loaded
machine): this bounds a hang, not speed."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, str]]:
    from atgrpo.learner.distributed import free_port

    port = free_port()
    head = {
        "num_cpus": 2,
        "resources": {"learner_slot": 1, "actor_slot": 2},
        "include_dashboard": True,
        "dashboard_host": "127.0.0.1",
        "dashboard_port": port,
    }
    with simulated_cluster(head, []) as c:
        yield c, f"http://127.0.0.1:{port}"


def test_a_job_with_a_relative_out_dir_is_refused_saying_how(cluster: tuple[Cluster, str], tmp_path: Path) -> None:
    from ray.job_submission import JobStatus

    c, dashboard = cluster
    work = tmp_path / "submitted-from"
    work.mkdir()
    (work / "my.toml").write_text("# the user's folder, uploaded by --working-dir\n")
    sets = ray_sets(Path("runs/rel"), c.address)
    entry = shlex.join([*module_cmd("atgrpo.cli.train", str(BUILT_IN)), *set_args(sets)])
    client = wait_for(lambda: _client(dashboard), 60, "the dashboard's job server")
    env = {k: v for k, v in child_env().items() if k.startswith(("OMP_", "RAY_ENABLE", "PYTHON"))}
    job = wait_for(
        lambda: _submit(client, entry, {"working_dir": str(work), "env_vars": env}),
        AGENT_WITHIN_S,
        "a job agent to take the job",
    )
    began = time.monotonic()
    done = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)
    status = wait_for(lambda: (s := client.get_job_status(job)) in done and s, 180, "the job to end")
    took = time.monotonic() - began
    logs = client.get_job_logs(job)
    assert status == JobStatus.FAILED, logs[-3000:]
    assert "launch error: run.out_dir = 'runs/rel' is relative" in logs, logs[-3000:]
    assert "--working-dir" in logs and "Give an absolute path on the filesystem every node" in logs
    assert "Traceback" not in logs
    assert not (work / "runs").exists()
    assert took < REFUSED_WITHIN_S + 60, took  # the job's own start (upload, supervisor) included
    print(f"refused {took:.1f} s after the submission")


def _submit(client, entry: str, runtime_env: dict) -> str | None:
    # The head's job agent registers a while after the dashboard answers; until then a submission is
    # answered "No available agent": ask again rather than fail the test on the cluster's start-up.
    try:
        return client.submit_job(entrypoint=entry, runtime_env=runtime_env)
    except RuntimeError as e:
        if "No available agent" in str(e):
            time.sleep(1)
            return None
        raise


def _client(address: str):
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except Exception:  # noqa: BLE001 - the dashboard is still starting
        return None


def test_a_node_that_cannot_see_out_dir_fails_the_run_naming_it(cluster: tuple[Cluster, str], tmp_path: Path) -> None:
    from atgrpo.learner.distributed import free_port

    c, _ = cluster
    shared = tmp_path / "shared"
    shared.mkdir()
    out = shared / "run"
    script = f"mount -t tmpfs tmpfs {shlex.quote(str(shared))} && exec " + shlex.join(
        [
            sys.executable,
            "-c",
            # `ray start` refuses a worker node while the variable is "0", which keeps every node, as
            # the head and the in-process nodes, on loopback: the CLI alone is shown it as on.
            "import sys, types; from ray.scripts import scripts; c = scripts.ray_constants; "
            "scripts.ray_constants = types.SimpleNamespace(**{**vars(c), 'ENABLE_RAY_CLUSTER': True}); "
            "sys.argv[0] = 'ray'; scripts.main()",
            "start",
            f"--address={c.address}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=1",
            f"--dashboard-agent-listen-port={free_port()}",  # not the default, which another cluster may hold
            "--resources=" + json.dumps({"blind_slot": 1}),
            "--block",
        ]
    )
    node = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        env=child_env(),
        stdout=open(tmp_path / "blind-node.log", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(
            lambda: any(n["Alive"] and "blind_slot" in n["Resources"] for n in ray.nodes()),
            120,
            "the blind node to join",
            node,
        )
        sets = ray_sets(out, c.address, launch__actors=1, launch__ray_actor_resources="{blind_slot=1}")
        began = time.monotonic()
        proc, log = start(out, sets)
        assert finish(proc, log, 180) == 1, log.read_text()[-4000:]
        took = time.monotonic() - began
        text = log.read_text()
        assert "actor0: node 127.0.0.1 (" in text, text[-3000:]
        assert f"does not see run.out_dir {out} as the driver does: no such folder here" in text, text[-3000:]
        assert took < REFUSED_WITHIN_S, took
        print(f"failed {took:.1f} s after the driver started")
        assert_nothing_left(out)
    finally:
        kill_tree(node)
