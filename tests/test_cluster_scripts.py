"""The shipped cluster recipes (docs/cluster/): the sbatch script, run against stand-ins for Slurm,
Ray and atgrpo-train that record what they are asked (a real single-node Slurm run is in
docs/cluster.md), and the KubeRay RayJob manifest, read as Kubernetes would."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "docs" / "cluster" / "atgrpo.sbatch"
RAYJOB = ROOT / "docs" / "cluster" / "rayjob.yaml"

FAKES = {
    "scontrol": "echo node-a; echo node-b\n",
    # `srun ... hostname -I` answers an address; `srun ... ray start --block` blocks until stopped.
    "srun": """echo "srun token=$RAY_AUTH_TOKEN mode=$RAY_AUTH_MODE $*" >> "$LOG"
case "$*" in
  *"hostname -I"*) echo "10.9.8.7 fe80::1" ;;
  *"ray start"*) trap 'echo "stopped $*" >> "$LOG"; exit 0' TERM; while true; do sleep 0.1; done ;;
esac
""",
    "fakepython": 'echo "wait $* token=$RAY_AUTH_TOKEN" >> "$LOG"; cat > /dev/null\n',
    "atgrpo-train": 'echo "train token=$RAY_AUTH_TOKEN $*" >> "$LOG"; exit 3\n',
}


def test_sbatch_starts_ray_on_every_node_runs_the_driver_and_stops_ray(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKES.items():
        (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.log"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "LOG": str(log),
        "SLURM_JOB_NODELIST": "node-[a-b]",
        "SLURM_CPUS_ON_NODE": "16",
        "SLURM_GPUS_ON_NODE": "4",
        "ATGRPO_PYTHON": str(bin_dir / "fakepython"),
    }
    env.pop("RAY_AUTH_TOKEN", None)
    out = subprocess.run(
        ["bash", str(SBATCH), "run.toml", "--set", "run.steps=5"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 3, out.stderr  # the driver's exit status is the job's
    calls = log.read_text().splitlines()
    head = next(c for c in calls if "--head" in c)
    assert "-w node-a" in head and "--node-ip-address=10.9.8.7" in head and "--port=6379" in head
    assert "--num-cpus=16" in head and "--num-gpus=4" in head
    worker = next(c for c in calls if "ray start --address" in c)
    assert "-w node-b" in worker and "--address=10.9.8.7:6379" in worker
    wait = next(c for c in calls if c.startswith("wait "))
    assert "10.9.8.7:6379 2 300" in wait  # every node must join before the run starts
    train = next(c for c in calls if c.startswith("train "))
    assert """run.toml --set launch.backend="ray" --set launch.ray_address="10.9.8.7:6379" --set run.steps=5""" in train
    tokens = {c.split("token=")[1].split()[0] for c in calls if "token=" in c}
    assert len(tokens) == 1 and len(tokens.pop()) == 64  # one fresh token, the same for every step
    assert sum(c.startswith("stopped ") for c in calls) == 2  # both `ray start --block` steps ended


def test_rayjob_manifest_runs_atgrpo_train_on_ray_with_one_shared_volume() -> None:
    yaml = pytest.importorskip("yaml")
    job = yaml.safe_load(RAYJOB.read_text())
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    spec = job["spec"]
    assert spec["entrypoint"].startswith("atgrpo-train ") and """launch.backend="ray\"""" in spec["entrypoint"]
    assert spec["shutdownAfterJobFinishes"] is True
    assert int(yaml.safe_load(spec["runtimeEnvYAML"])["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"]) >= 600  # GRACE_S
    pinned = next(line for line in (ROOT / "pyproject.toml").read_text().splitlines() if "ray[default]==" in line)
    assert spec["rayClusterSpec"]["rayVersion"] in pinned
    pods = [
        spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"],
        *(g["template"]["spec"] for g in spec["rayClusterSpec"]["workerGroupSpecs"]),
    ]
    images, mounts = set(), set()
    for pod in pods:
        claim = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in pod["volumes"]}
        for c in pod["containers"]:
            images.add(c["image"])
            mounts |= {(m["mountPath"], claim[m["name"]]) for m in c["volumeMounts"] if claim.get(m["name"])}
    assert len(images) == 1  # every node runs the same atgrpo and Ray
    assert mounts == {("/shared", "atgrpo-shared")}
    assert 'run.out_dir="/shared/' in spec["entrypoint"] and "/shared/configs/" in spec["entrypoint"]
