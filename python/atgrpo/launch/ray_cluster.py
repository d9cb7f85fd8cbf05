"""The Ray side of `launch.backend = "ray"`: reach the cluster, check that it can hold the run, and
reserve the run's one placement group.

Every failure here is a `LaunchError` raised before any process of the run starts, and leaves nothing
behind on the cluster: Ray missing (names the extra), a cluster that cannot be reached within
`launch.ray_connect_timeout_s` (names the address), a request no node set can hold (names what was
asked and what each node has), and a group that is not reserved within `launch.ray_placement_timeout_s`
(resources held by others, or a node lost while reserving): the groups are removed before the error.

Two groups, the learner's reserved first:
- the learner's: one bundle per node the learner uses, holding the GPUs of that node's ranks (all the
  ranks by default, so one bundle on one node; `launch.ray_learner_ranks_per_node` of them each with
  `launch.ray_learner_spread`). Several bundles are STRICT_SPREAD, one per node, so that a node's
  ranks are the ranks of one bundle and `LOCAL_RANK` is right (`learner_nodes` orders them);
- the actors': one bundle per actor, SPREAD, so actors go to different nodes where the cluster has them.
"""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass
from typing import Any

from atgrpo.config import RunConfig
from atgrpo.errors import LaunchError

NAMESPACE = "atgrpo"
"""Ray namespace of every run's named actors (`<run tag>-<process>`)."""
RAY_EXTRA = "pip install 'atgrpo[ray]'"
"""How a user gets Ray (pyproject's `ray` extra pins the version this was tested with)."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise LaunchError(f"launch.backend = 'ray' needs Ray, which is not installed: {RAY_EXTRA}") from None
    return ray


@dataclass
class Connection:
    """A driver's link to the cluster; `started_here`: Ray was started for this run (and is shut
    down with it)."""

    address: str
    started_here: bool

    def close(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()


def _probe(address: str, timeout_s: float) -> None:
    """Fail fast, naming the address, when nothing listens at a `host:port` or `ray://host:port` head."""
    host_port = address.removeprefix("ray://")
    host, sep, port = host_port.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto" or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise LaunchError(
            f"the Ray cluster at {address} cannot be reached ({exc}); is `ray start --head` running "
            "there, and is launch.ray_address right?"
        ) from None


def connect(cfg: RunConfig, group: list[Bundle]) -> Connection:
    """Join `launch.ray_address`, else what `ray.init` finds (`RAY_ADDRESS`, or a cluster started on
    this machine by `ray start`), else start a local instance. A head that does not accept a
    connection within `launch.ray_connect_timeout_s` is an error naming its address."""
    ray = import_ray()
    from ray._private.services import canonicalize_bootstrap_address

    timeout = cfg.launch.ray_connect_timeout_s
    address = cfg.launch.ray_address
    try:
        target = canonicalize_bootstrap_address(address)  # what ray.init will join; None: a new local instance
    except Exception as exc:  # noqa: BLE001 - a malformed address, or "auto" with no cluster running
        raise LaunchError(f"launch.ray_address = {address!r}: {exc}") from None
    if target is not None and address is None and not os.environ.get("RAY_ADDRESS"):
        # Found through Ray's record of the last cluster started on this machine: it may be gone.
        try:
            _probe(target, min(timeout, 5.0))
        except LaunchError:
            address, target = "local", None
    if target is not None:
        _probe(target, timeout)
    # In this thread, the main one: Ray ties the GCS and raylet it starts to the thread that forked
    # them (PR_SET_PDEATHSIG), so starting them from a helper thread would kill them when it ends.
    # Reachability was probed above with the timeout; ray.init then fails on its own clock.
    # A local instance counts at least the CPUs the run asks for (Ray's CPUs are bookkeeping: the
    # local launcher too runs a learner and two actors on a 2-core laptop) and the custom resources.
    custom = {k for b in group for k in b.resources if k not in ("CPU", "GPU")}
    local = (
        {}
        if target is not None
        else {
            "include_dashboard": False,
            "num_cpus": max(os.cpu_count() or 1, math.ceil(sum(b.resources.get("CPU", 0.0) for b in group))),
            "resources": {k: float(math.ceil(sum(b.resources.get(k, 0.0) for b in group))) for k in custom} or None,
        }
    )
    try:
        ray.init(address=address, namespace=NAMESPACE, logging_level="WARNING", log_to_driver=False, **local)
    except Exception as exc:  # noqa: BLE001 - every way Ray fails to connect is reported the same way
        raise LaunchError(f"cannot join the Ray cluster at {target or 'a new local Ray instance'}: {exc}") from None
    return Connection(target or "local", started_here=target is None)


@dataclass(frozen=True)
class Bundle:
    """One bundle of a placement group of the run: who uses it and what it reserves."""

    role: str
    """"learner" (the node of rank 0, or of all ranks), "learner<r>" (the node whose first rank is r,
    before placement tells which node that is) or "actor<i>"."""
    resources: dict[str, float]

    @property
    def learner(self) -> bool:
        return self.role.startswith("learner")


def ranks_per_node(cfg: RunConfig, ranks: int) -> int:
    """How many of the learner's `ranks` share a node (and a bundle): all of them unless spread."""
    return cfg.launch.ray_learner_ranks_per_node if cfg.launch.ray_learner_spread else ranks


def bundles(cfg: RunConfig, ranks: int, actors: int) -> list[Bundle]:
    """The learner's bundles (one per node), then one per actor (module docstring)."""
    la = cfg.launch
    rank_gpus = 1.0 if cfg.train.device.startswith("cuda") else 0.0
    actor_gpus = la.ray_actor_gpus if cfg.rollout.device.startswith("cuda") else 0.0

    def res(cpus: float, gpus: float, custom: dict[str, float], times: int = 1) -> dict[str, float]:
        out = {"CPU": cpus * times, **{k: v * times for k, v in custom.items()}}
        return out | ({"GPU": gpus * times} if gpus else {})

    per = ranks_per_node(cfg, ranks)
    learner = [
        Bundle(
            "learner" if r == 0 else f"learner{r}", res(la.ray_learner_cpus, rank_gpus, la.ray_learner_resources, per)
        )
        for r in range(0, ranks, per)
    ]
    return learner + [
        Bundle(f"actor{i}", res(la.ray_actor_cpus, actor_gpus, la.ray_actor_resources)) for i in range(actors)
    ]


def alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def describe_nodes(nodes: list[dict[str, Any]]) -> str:
    def short(res: dict[str, float]) -> str:
        keep = {
            k: v
            for k, v in res.items()
            if not k.startswith(("node:", "object_store_memory", "memory", "accelerator_type"))
        }
        return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(keep.items())) + "}"

    return (
        "; ".join(f"{n.get('NodeManagerAddress', '?')} {short(n.get('Resources', {}))}" for n in nodes)
        or "no node alive"
    )


def describe_request(group: list[Bundle]) -> str:
    return "; ".join(f"{b.role} {{{', '.join(f'{k}: {v:g}' for k, v in sorted(b.resources.items()))}}}" for b in group)


def unfit(group: list[Bundle], nodes: list[dict[str, Any]]) -> str | None:
    """Why the nodes' totals cannot hold `group` (None: they can), by first-fit of the largest bundles
    first, the learner's bundles each on a node of its own when there are several (STRICT_SPREAD).
    Totals, not what is free now: a busy cluster is the reservation timeout's case."""
    free = [dict(n.get("Resources", {})) for n in nodes]
    spread = sum(b.learner for b in group) > 1
    used: set[int] = set()
    for b in sorted(group, key=lambda b: (-b.resources.get("GPU", 0.0), -b.resources.get("CPU", 0.0))):
        taken = used if spread and b.learner else set()
        home = next(
            (
                i
                for i, f in enumerate(free)
                if i not in taken and all(f.get(k, 0.0) + 1e-9 >= v for k, v in b.resources.items())
            ),
            None,
        )
        if home is None:
            fits_alone = any(
                all(n.get("Resources", {}).get(k, 0.0) + 1e-9 >= v for k, v in b.resources.items()) for n in nodes
            )
            if spread and b.learner and fits_alone:
                return (
                    f"{b.role} needs {b.resources} on a node without another of the learner's bundles "
                    f"(launch.ray_learner_spread: {sum(x.learner for x in group)} nodes)"
                )
            return f"{b.role} needs {b.resources}" + (
                " and the bundles before it took the room" if fits_alone else ", which no single node has"
            )
        if b.learner:
            used.add(home)
        for k, v in b.resources.items():
            free[home][k] -= v
    return None


def reserve(cfg: RunConfig, group: list[Bundle], name: str) -> list[Any]:
    """The run's placement groups, the learner's then the actors' (module docstring), reserved; a
    `LaunchError` (and no group left) when they cannot be."""
    from ray.util.placement_group import remove_placement_group

    nodes = alive_nodes()
    why = unfit(group, nodes)
    if why:
        raise LaunchError(
            f"the Ray cluster cannot hold this run: {why}. Asked: {describe_request(group)}. "
            f"Nodes: {describe_nodes(nodes)}"
        )
    learner = [b for b in group if b.learner]
    actors = [b for b in group if not b.learner]
    made: list[Any] = []
    try:
        for part, strategy, label in (
            (learner, "STRICT_SPREAD" if len(learner) > 1 else "PACK", "learner"),
            (actors, "SPREAD", "actors"),
        ):
            pg = _reserve_one(cfg, part, strategy, f"{name}-{label}")
            if pg is None:
                timeout = cfg.launch.ray_placement_timeout_s
                raise LaunchError(
                    f"the run's placement group ({label}) was not reserved within {timeout:g} s "
                    f"(launch.ray_placement_timeout_s): other jobs hold the resources, or a node was lost. "
                    f"Asked: {describe_request(group)}. Nodes now: {describe_nodes(alive_nodes())}"
                )
            made.append(pg)
    except BaseException:
        for pg in made:
            remove_placement_group(pg)
        raise
    return made


def _reserve_one(cfg: RunConfig, group: list[Bundle], strategy: str, name: str) -> Any:
    """One group reserved, or None (and the group removed) when it is not within the timeout."""
    from ray.util.placement_group import placement_group, remove_placement_group

    pg = placement_group([b.resources for b in group], strategy=strategy, name=name)
    try:
        ready = pg.wait(timeout_seconds=int(max(1, cfg.launch.ray_placement_timeout_s)))
    except BaseException:
        remove_placement_group(pg)
        raise
    if not ready:
        remove_placement_group(pg)
        return None
    return pg


def bundle_nodes(pg: Any) -> dict[int, str]:
    """Bundle index -> the id of the node it is reserved on now ("" while it has none)."""
    from ray.util.placement_group import placement_group_table

    table = placement_group_table(pg).get("bundles_to_node_id", {})
    return {int(i): (n if n.strip("0") else "") for i, n in table.items()}


def learner_nodes(pg: Any) -> list[tuple[int, str, str]]:
    """The learner group's bundles in node order, (bundle index, node id, node address) sorted by
    address then id: node rank n is the n-th, and ranks are numbered in that order."""
    ips = {n["NodeID"]: n.get("NodeManagerAddress", "") for n in alive_nodes()}
    placed = bundle_nodes(pg)
    return sorted(((i, nid, ips.get(nid, "")) for i, nid in placed.items()), key=lambda t: (t[2], t[1], t[0]))


def cluster_gpu_bytes(timeout_s: float) -> int:
    """Memory of one GPU of the cluster, asked of a GPU node (Ray counts GPUs, not their memory):
    the plan's GPU size when `launch.gpu_memory_gb` does not give it."""
    import ray

    def total() -> int:
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory)

    try:
        return ray.get(ray.remote(num_gpus=1, num_cpus=0)(total).remote(), timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - no free GPU in time, or none with CUDA
        raise LaunchError(
            f"could not ask a GPU node for its memory within {timeout_s:g} s ({exc}); set "
            "launch.gpu_memory_gb to plan without asking"
        ) from None


__all__ = [
    "Bundle",
    "bundle_nodes",
    "learner_nodes",
    "ranks_per_node",
    "Connection",
    "RAY_EXTRA",
    "bundles",
    "cluster_gpu_bytes",
    "connect",
    "describe_nodes",
    "import_ray",
    "reserve",
    "unfit",
]
