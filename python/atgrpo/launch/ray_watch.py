"""What the Ray driver knows of each host of its run, and how it says why a process of the run ended.

Every death is told with the process (its name, rank, pid), its node (address, host name, Ray node
id), how it ended (`keeper.describe_exit`, or that its host died with it) and its log's last lines.
A log is read through its host while the host answers, else from the driver's own view of out_dir
(the same file when out_dir is on the shared filesystem), else its path on its node is named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atgrpo.launch.keeper import describe_exit
from atgrpo.launch.ray_host import read_tail

TAIL_LINES = 30
"""Lines of a dead process's log the driver prints."""


@dataclass
class Host:
    """The driver's view of one host (a Ray actor) of the run and of its children."""

    name: str
    handle: Any
    pg: Any
    bundle: int
    """Its bundle's index in `pg`."""
    resources: dict[str, float]
    learner: bool
    restarts: int
    incarnation: int = -1
    """The host's pid last seen (a new one: Ray restarted it)."""
    pending: Any = None
    """The poll call in flight, if any (one at a time per host)."""
    info: dict | None = None
    """Its last answer (`ProcessHost.info`)."""
    silent_since: float | None = None
    """Monotonic time since which it has not answered (restarting, being placed, or hung)."""
    stopped_since: dict[str, float] = field(default_factory=dict)
    """Child name -> monotonic time it was first seen stopped (state T)."""
    gone: bool = False
    """Finished (exit 0) or lost for good: no longer polled."""


def where(info: dict, child: dict) -> str:
    """'learner1 (rank 1, pid 4242) on node 10.0.0.2 (gpu-b, Ray node 1a2b3c4d)'."""
    rank = f"rank {child['rank']}, " if child.get("rank") is not None else ""
    return (
        f"{child['name']} ({rank}pid {child['pid']}) on node {info['node_ip']} "
        f"({info['hostname']}, Ray node {info['node_id'][:8]})"
    )


def how(child: dict) -> str:
    """How a child ended, or that it is still there (its state)."""
    if child.get("rc") is not None:
        return describe_exit(child["rc"])
    state = child.get("state")
    return f"still running (state {state})" if state else "gone"


def tail_of(host: Host, child: dict, lines: int = TAIL_LINES) -> str:
    """The last lines of `child`'s log (module docstring: through its host, else from here)."""
    import ray

    try:
        return ray.get(host.handle.tail.remote(child["name"], lines), timeout=10)
    except Exception:  # noqa: BLE001 - the host is dead or hung: read the shared file, if this node sees it
        path = Path(child["log"])
        if path.exists():
            return read_tail(path, lines)
        return f"(its log is {path} on its node, which the driver cannot read)"


def with_tail(text: str, host: Host, child: dict, lines: int = TAIL_LINES) -> str:
    return f"{text}\nIts log ({child['log']} on its node) ends:\n{tail_of(host, child, lines).rstrip()}"


__all__ = ["Host", "how", "tail_of", "where", "with_tail"]
