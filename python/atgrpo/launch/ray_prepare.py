"""What a Ray run (`launch.backend = "ray"`, `ray_run.RayRun`) is given before anything starts on the
cluster: its config with its paths as every node reads them (out_dir and the weight store absolute,
the store at `<out_dir>/weights` unless set; a relative output refused in a Ray job, whose working
folder is Ray's temporary copy), the settings it cannot honour refused, the GPU plan of the GPUs Ray will hand out, and
its CURVE keys.

Invariants:
- Nothing here imports or contacts Ray: each function reads the config (and, for keys, a key
  folder), so a refusal costs no cluster and leaves nothing on one.
- A setting a Ray run cannot honour (host GPU indices, `cuda:N` devices, a non-tcp endpoint) is a
  `PlacementError` naming the setting and what to say instead, never a run that starts and differs.
- Keys travel as bytes (file name -> content) through Ray, never as a path: the children run on
  other nodes. Keys made for one run live in a private temp folder removed before `run_keys` returns.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from atgrpo.config import RunConfig
from atgrpo.errors import LaunchError, PlacementError

DEFAULT_STORE = "weights"
"""The weight store of a Ray run that sets none, under out_dir: actors on N nodes would otherwise
take N copies of every version out of rank 0 (`transport.weights_store`)."""


JOB_CONFIG_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"
"""What Ray's job supervisor hands a job's driver: its runtime_env, `working_dir` included."""


def job_working_dir() -> str | None:
    """The `--working-dir` of the Ray job this driver runs as (its cwd is then Ray's copy of it, a
    temporary folder on each node), or None."""
    raw = os.environ.get(JOB_CONFIG_VAR)
    if not raw:
        return None
    try:
        runtime_env = json.loads(raw).get("runtime_env") or {}
    except (ValueError, AttributeError):
        return None
    return runtime_env.get("working_dir") or None


def _absolute(setting: str, value: str, output: bool, in_job: str | None) -> str:
    """`value` as every node must read it. A relative path means the folder the user started the
    driver in; a job's driver runs in Ray's copy of its --working-dir instead, where an output (a
    checkpoint) would vanish with the job: refused. A job's relative input stays relative: each
    node's processes run in that node's copy of the working dir, which holds the same files."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path)
    if in_job is None:
        return str(path.absolute())
    if not output:
        return value
    example = f"/shared/{value}"
    raise LaunchError(
        f"{setting} = {value!r} is relative, and this driver runs as a Ray job in Ray's copy of its "
        f"--working-dir ({Path.cwd()}), a temporary folder on each node that is removed with the job: "
        f"what the run writes there would be lost. Give an absolute path on the filesystem every node "
        f"sees, e.g. --set '{setting}=\"{example}\"'"
    )


def resolved(cfg: RunConfig) -> RunConfig:
    """`cfg` with its paths as every node must read them (`_absolute`; the children run on other
    nodes, in other working folders), the store `<out_dir>/weights` when unset; `""` keeps the hub.
    Outputs: out_dir and the store; inputs: the policies' model folders and the task's datasets
    (`@name` models are the cache's, not paths). A relative output in a job is a `LaunchError`."""
    in_job = job_working_dir()
    out = _absolute("run.out_dir", cfg.run.out_dir, True, in_job)
    store = cfg.transport.weights_store
    store = (
        str(Path(out) / DEFAULT_STORE)
        if store is None
        else store and _absolute("transport.weights_store", store, True, in_job)
    )
    policies = {
        name: p.model_copy(update={"path": _absolute(f"policies.{name}.path", p.path, False, in_job)})
        if p.path and not p.path.startswith("@")
        else p
        for name, p in cfg.policies.items()
    }
    task = cfg.task.model_copy(
        update={
            key: _absolute(f"task.{key}", value, False, in_job)
            for key in ("dataset", "eval_dataset")
            if (value := getattr(cfg.task, key))
        }
    )
    return cfg.model_copy(
        update={
            "run": cfg.run.model_copy(update={"out_dir": out}),
            "transport": cfg.transport.model_copy(update={"weights_store": store}),
            "policies": policies,
            "task": task,
        }
    )


def check_ray_config(cfg: RunConfig) -> None:
    """What a Ray run cannot do, refused before anything starts."""
    if cfg.launch.actor_devices:
        raise PlacementError(
            "launch.actor_devices names GPUs of one host; under launch.backend = 'ray', Ray assigns "
            "each actor its GPU: set launch.ray_actor_gpus (1, or a fraction to share) instead"
        )
    for setting, device in (("train.device", cfg.train.device), ("rollout.device", cfg.rollout.device)):
        if device.startswith("cuda:"):
            raise PlacementError(
                f"{setting} = {device!r}: under Ray each process sees only the GPUs Ray gave it; "
                "say 'cuda' (Ray picks the GPU) or 'cpu'"
            )
    ranks, per = max(1, len(cfg.launch.learner_devices)), cfg.launch.ray_learner_ranks_per_node
    if cfg.launch.ray_learner_spread and ranks % per:
        raise PlacementError(
            f"launch.ray_learner_ranks_per_node = {per} does not divide the learner's {ranks} ranks "
            "(len(launch.learner_devices)): every node of a spread learner holds the same number of ranks"
        )
    ep = cfg.transport.endpoint
    if ep and not ep.startswith("tcp://"):
        raise PlacementError(
            f"transport.endpoint = {ep!r}: a Ray run's hub binds tcp on its node; leave it empty or give tcp://*:PORT"
        )


def ray_plan(cfg: RunConfig, gpu_bytes: int) -> list:
    """The GPU plan (`gpu_plan.plan`) of the GPUs Ray will hand out: the learner's ranks on GPUs of
    their own (whole-GPU bundles, never shared), the actors packed `1 / launch.ray_actor_gpus` to a
    GPU after them. Raises `PlacementError` with the numbers when one GPU would not hold its share."""
    from atgrpo.launch.gpu_plan import model_shapes, plan

    la = cfg.launch
    ranks = max(1, len(la.learner_devices)) if cfg.train.device.startswith("cuda") else 0
    per_gpu = max(1, int(1.0 / la.ray_actor_gpus + 1e-9))
    actors = [ranks + i // per_gpu for i in range(la.actors)] if cfg.rollout.device.startswith("cuda") else []
    launch = la.model_copy(update={"learner_devices": list(range(ranks)), "actor_devices": actors})
    # Both devices "cuda": each process's own GPU is its first visible one, as Ray sets them.
    virtual = cfg.model_copy(update={"launch": launch})
    return plan(virtual, model_shapes(cfg), gpu_bytes)


def run_keys(cfg: RunConfig) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(the hub's key files, each actor's key files) of a CURVE run: the folder `transport.curve_keys`
    names, else keys made for this run alone (in a private temp folder, removed at once). Empty
    dicts when `transport.insecure` (no CURVE)."""
    if cfg.transport.insecure:
        return {}, {}
    from atgrpo.transport import keys

    name = cfg.transport.curve_actor
    actor_rel = [f"{keys.ACTORS_DIR}/{name}.key", f"{keys.ACTORS_DIR}/{name}.key_secret"]

    def read(folder: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
        keys.actor_keys(folder, name)  # both halves exist and load, else a CurveKeyError naming them
        accepted = {f"{keys.ACTORS_DIR}/{p.name}": p.read_bytes() for p in (folder / keys.ACTORS_DIR).glob("*.key")}
        hub = {
            "hub.key": (folder / "hub.key").read_bytes(),
            "hub.key_secret": (folder / "hub.key_secret").read_bytes(),
            **accepted,
        }
        return hub, {"hub.key": hub["hub.key"], **{rel: (folder / rel).read_bytes() for rel in actor_rel}}

    if cfg.transport.curve_keys:
        return read(Path(cfg.transport.curve_keys).expanduser())
    with tempfile.TemporaryDirectory(prefix="atgrpo-keys-") as tmp:
        return read(keys.generate_keys(Path(tmp) / "keys"))


__all__ = ["check_ray_config", "job_working_dir", "ray_plan", "resolved", "run_keys"]
