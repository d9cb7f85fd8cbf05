"""The learner's ranks on a Ray cluster: which node runs which ranks, and what each rank is told.

Invariants:
- One host per node the learner uses (its bundle in the learner's placement group holds that node's
  ranks' GPUs, so Ray's `CUDA_VISIBLE_DEVICES` for the host lists them and rank `LOCAL_RANK` computes
  on the GPU of that index, as under torchrun). The host starts the node's ranks itself
  (`ray_host`), each under a keeper.
- Ranks are numbered in node order (`ray_cluster.learner_nodes`: by node address, then id): node
  rank n holds ranks n*k .. n*k+k-1, `LOCAL_RANK` 0..k-1, `LOCAL_WORLD_SIZE` k, `NODE_RANK` n, and
  rank 0, the hub, is on node rank 0. What torchrun would set is set (`GROUP_RANK`, `ROLE_RANK`,
  `ROLE_WORLD_SIZE`), so DeepSpeed and torch.distributed read the job as they would under it.
- The rendezvous is `MASTER_ADDR:MASTER_PORT` on rank 0's node (a port found free there before any
  rank starts) with a clock of its own (`launch.ray_rendezvous_timeout_s`, as
  `ATGRPO_RENDEZVOUS_TIMEOUT_S`: `learner.distributed` names the ranks that did not join).
- The driver's `NCCL_*`, `GLOO_*`, `TORCH_NCCL_*` and `TORCH_DISTRIBUTED_*` variables reach every rank
  (a node's Ray worker does not inherit the driver's environment): the network interface, the
  debug level and the error handling the user chose apply on every node.
- A learner of one rank gets none of these: a world of one, as on one host.
"""

from __future__ import annotations

from collections.abc import Mapping

from atgrpo.config.sections import RENDEZVOUS_VAR
from atgrpo.launch.ray_host import ChildSpec

PASSED_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_")
"""The driver's environment variables every learner rank gets (module docstring)."""


def passed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of `environ` that pass through to the learner's ranks."""
    return {k: v for k, v in environ.items() if k.startswith(PASSED_PREFIXES)}


def rank_name(rank: int) -> str:
    """A rank's name in the run, its log's and processes.jsonl's: "learner" for rank 0 (the hub)."""
    return "learner" if rank == 0 else f"learner{rank}"


def host_name(node_rank: int) -> str:
    return "learner" if node_rank == 0 else f"learner-node{node_rank}"


def rank_env(
    node_rank: int, local_rank: int, per_node: int, world: int, master: tuple[str, int], rendezvous_s: float
) -> dict[str, str]:
    """What rank `node_rank * per_node + local_rank` of a `world`-rank job is told (module docstring)."""
    rank = node_rank * per_node + local_rank
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(per_node),
        "NODE_RANK": str(node_rank),
        "GROUP_RANK": str(node_rank),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world),
        "MASTER_ADDR": master[0],
        "MASTER_PORT": str(master[1]),
        RENDEZVOUS_VAR: f"{rendezvous_s:g}",
    }


def node_children(
    node_rank: int,
    per_node: int,
    world: int,
    master: tuple[str, int] | None,
    rendezvous_s: float,
    address_arg: str,
    metrics: str,
    passed: Mapping[str, str],
) -> list[ChildSpec]:
    """The ranks of the node of rank `node_rank`, as its host starts them. `master` is None for a
    learner of one rank (no job environment)."""
    out = []
    for local in range(per_node):
        rank = node_rank * per_node + local
        env = {} if master is None else {**passed, **rank_env(node_rank, local, per_node, world, master, rendezvous_s)}
        out.append(
            ChildSpec(
                name=rank_name(rank),
                module="atgrpo.cli.learner",
                args=["--address", address_arg],
                env=env,
                events=rank == 0,
                metrics=metrics if rank == 0 else None,
            )
        )
    return out


__all__ = ["PASSED_PREFIXES", "host_name", "node_children", "passed_env", "rank_env", "rank_name"]
