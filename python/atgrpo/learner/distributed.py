"""Process-group setup for the learner: one process per rank, started by `torchrun` or `deepspeed`.

Both launchers describe the job in the environment (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
`MASTER_ADDR`, `MASTER_PORT`); `init_distributed_from_env` reads it and creates the default
`torch.distributed` process group with the backend its caller names: the one of the device the
ranks train on (`atgrpo.devices.collective_backend`), never "whatever this host has", so a CPU
learner on a GPU host all-reduces CPU tensors over gloo. A process started without a launcher
is a world of one: the missing variables are filled in (loopback address, a free port), so the same
code path (and the same collectives) runs in a single process too.

This module never imports deepspeed: the DeepSpeed backend wraps the group created here (DeepSpeed's
`init_distributed` adopts an already initialised `torch.distributed`).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

from atgrpo.config.sections import RENDEZVOUS_VAR

ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

GROUP_MARGIN_S = 900.0
"""What rank 0 may spend between two collectives besides waiting for rounds: metrics, checksumming
a new version into the hub, its own checkpoint files."""


def group_timeout_s(round_timeout_s: float) -> float:
    """The learner's collective timeout (`transport.round_timeout_s` -> seconds). Between two
    collectives, ranks 1..N-1 wait while rank 0 waits on the hub for at most two rounds (an
    evaluation, then a step's first units: `Hub.take` bounds each by `round_timeout_s`) and does
    its own work (`GROUP_MARGIN_S`). Past that rank 0 has raised naming the round, so no collective
    times out (the NCCL watchdog's abort) while rank 0 is only waiting for actors."""
    return 2 * round_timeout_s + GROUP_MARGIN_S


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def launched() -> bool:
    """Whether a launcher (torchrun, deepspeed) described a job in the environment."""
    return "WORLD_SIZE" in os.environ


def dist_env() -> DistEnv:
    """The job as the environment describes it; a world of one when no launcher set it.

    Raises if `WORLD_SIZE > 1` and a variable every rank needs is missing: guessing a rank or an
    address there would make ranks wait for each other forever.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        missing = [k for k in ENV_KEYS if k not in os.environ]
        if missing:
            raise RuntimeError(
                f"WORLD_SIZE={world_size} but {', '.join(missing)} not set; start under torchrun or deepspeed"
            )
    return DistEnv(
        rank=int(os.environ.get("RANK", "0")),
        world_size=world_size,
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        master_addr=os.environ.get("MASTER_ADDR", "127.0.0.1"),
        master_port=int(os.environ.get("MASTER_PORT", "0")),
    )


def _fill_single_process_env() -> None:
    # A world of one still goes through env:// initialisation (deepspeed reads the same variables),
    # so write the defaults into the environment instead of passing them only to init_process_group.
    if int(os.environ.get("WORLD_SIZE", "1")) != 1:
        return
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(free_port(os.environ["MASTER_ADDR"]))


def init_distributed_from_env(backend: str, timeout_s: float = 1800.0) -> DistEnv:
    """Create the default process group (`backend`: "gloo" or "nccl") from the environment, unless
    one exists already.

    Idempotent. `timeout_s` bounds every collective (a peer that died makes the others fail after it
    rather than hang forever). The caller makes the rank's GPU current first (`devices.activate`).
    """
    if dist.is_initialized():
        return DistEnv(
            rank=dist.get_rank(),
            world_size=dist.get_world_size(),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            master_addr=os.environ.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(os.environ.get("MASTER_PORT", "0")),
        )
    _fill_single_process_env()
    env = dist_env()
    # Under Ray the rendezvous has a clock of its own, shorter than the collectives' (hours), and
    # names the ranks that did not join; under torchrun its own store serves it (env://).
    rendezvous_s = os.environ.get(RENDEZVOUS_VAR)
    if rendezvous_s and env.world_size > 1:
        store = rendezvous(env, float(rendezvous_s), timeout_s)
        dist.init_process_group(
            backend=backend, store=store, rank=env.rank, world_size=env.world_size, timeout=timedelta(seconds=timeout_s)
        )
        return env
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        rank=env.rank,
        world_size=env.world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    return env


def rendezvous(env: DistEnv, within_s: float, collective_s: float) -> dist.TCPStore:
    """The job's store at MASTER_ADDR:MASTER_PORT (rank 0 serves it), once every rank has joined it:
    each rank writes its host name under `joined/<rank>`, rank 0 waits for all. Raises
    `RendezvousError` after `within_s`: on rank 0 naming the ranks missing, on another rank naming
    the address it could not reach. The store then waits on the collectives' clock."""
    from atgrpo.errors import RendezvousError

    where = f"{env.master_addr}:{env.master_port}"
    try:
        store = dist.TCPStore(
            env.master_addr,
            env.master_port,
            env.world_size,
            is_master=env.rank == 0,
            timeout=timedelta(seconds=within_s),
            wait_for_workers=False,
        )
    except Exception as exc:  # noqa: BLE001 - torch raises DistStoreError, RuntimeError or OSError
        raise RendezvousError(
            f"rank {env.rank} on {socket.gethostname()} could not reach the rendezvous at {where} within "
            f"{within_s:g} s: {(str(exc).strip().splitlines() or [type(exc).__name__])[0]}"
        ) from None
    store.set(f"joined/{env.rank}", socket.gethostname())
    if env.rank == 0:
        deadline = time.monotonic() + within_s
        missing = list(range(1, env.world_size))
        while missing and time.monotonic() < deadline:
            missing = [r for r in missing if not store.check([f"joined/{r}"])]
            if missing:
                time.sleep(0.2)
        if missing:
            raise RendezvousError(
                f"learner rank(s) {', '.join(map(str, missing))} of {env.world_size} did not join the "
                f"rendezvous at {where} within {within_s:g} s (launch.ray_rendezvous_timeout_s): their "
                "processes did not start, or cannot reach this address (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, a firewall)"
            )
    store.set_timeout(timedelta(seconds=collective_s))
    return store


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    return dist.get_rank() if is_initialized() else 0


def get_world_size() -> int:
    return dist.get_world_size() if is_initialized() else 1


def local_rank() -> int:
    """This rank's index on its host: the launcher's `LOCAL_RANK`; without one, the group's rank (a
    group started by hand, as the tests do, is on one host)."""
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"])
    return get_rank()


def is_main_process() -> bool:
    """Rank 0 (the hub in atgrpo) or a process outside any group."""
    return get_rank() == 0
