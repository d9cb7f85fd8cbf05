"""What a Ray run (`launch.backend = "ray"`, `ray_run.RayRun`) is given before anything starts on the
cluster: its config with out_dir and the weight store absolute (the store at `<out_dir>/weights`
unless set), the settings it cannot honour refused, the GPU plan of the GPUs Ray will hand out, and
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

import tempfile
from pathlib import Path

from atgrpo.config import RunConfig
from atgrpo.errors import PlacementError

DEFAULT_STORE = "weights"
"""The weight store of a Ray run that sets none, under out_dir: actors on N nodes would otherwise
take N copies of every version out of rank 0 (`transport.weights_store`)."""


def resolved(cfg: RunConfig) -> RunConfig:
    """`cfg` with out_dir and the weight store absolute (the children run on other nodes, in other
    working folders), the store `<out_dir>/weights` when unset; `""` keeps the hub."""
    out = Path(cfg.run.out_dir).expanduser().absolute()
    store = cfg.transport.weights_store
    store = str(out / DEFAULT_STORE) if store is None else store and str(Path(store).expanduser().absolute())
    return cfg.model_copy(
        update={
            "run": cfg.run.model_copy(update={"out_dir": str(out)}),
            "transport": cfg.transport.model_copy(update={"weights_store": store}),
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


__all__ = ["check_ray_config", "ray_plan", "resolved", "run_keys"]
