"""The processes of a Ray run on the node Ray placed them: `ProcessHost` is the Ray actor that starts
the real entry points (`atgrpo.cli.learner`, `atgrpo.cli.actor`: the same commands as on one host) as
its children and answers the driver's calls about them. A host runs one actor, or the learner's ranks
of one node (all of them by default; `launch.ray_learner_ranks_per_node` with a spread learner).

Invariants:
- Nothing starts before the host has checked that it sees the driver's out_dir (and the weight store)
  as the driver does: the driver's marker file must be there. A host that does not see it starts no
  child and creates nothing (no log folder on a local disk); `info` says what it does not see, and the
  driver fails the run naming the node and the path.
- The children start in the constructor, so a host Ray restarts (after its process or its node died)
  starts new ones. An actor host whose child exits non-zero exits itself, which is how Ray learns
  that the actor died and restarts it (up to `launch.max_actor_restarts`, on another node if its own
  is gone). A learner host never exits by itself: the driver reads each rank's exit and ends the run.
- Nothing a child starts outlives the host: each child runs under a keeper (`launch.keeper`: a
  subreaper that kills its whole tree when the host's process is gone, SIGKILL included, or when the
  child exits). The learner's ranks are started here, one keeper each, not by torchrun, whose ranks
  live in sessions of their own and whose deaths it reports only as its own exit.
- What a child needs comes through Ray: the resolved config text and, for tcp with CURVE, the key
  files, written by the host into a private (0700) folder on its own node; no world-readable file.
- Every call returns at once (the driver polls). Rank 0's stdout (the learner's events) is read by a
  thread into a buffer that `take` empties. Each child's log, stderr and the rest, goes to
  `<log_dir>/<name>.log` on the host's node (out_dir/logs, shared when out_dir is).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from atgrpo.launch.keeper import keeper_command, process_state

RAY_THREAD_VARS = ("OMP_NUM_THREADS",)
"""What Ray's worker sets from the reserved CPUs and a child should not inherit."""
PID_WAIT_S = 30.0
"""How long a keeper may take to report its child's pid (a fork, on a loaded node)."""
SEEN_PREFIX = ".atgrpo-seen-"
"""The driver's marker in out_dir and in the weight store: `<prefix><run tag>`, removed at the run's end."""


@dataclass
class ChildSpec:
    """One process of a host: the entry point's module and arguments (the config file and key folder
    are added by the host), its extra environment, and what the host reads of it."""

    name: str
    """Its name in the run and its log's: "learner" (rank 0), "learner<r>", "actor<i>"."""
    module: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdin_address: bool = False
    """The child reads the hub's address from stdin (`--address -`), handed over by `hand_address`."""
    events: bool = False
    """Read the child's stdout as learner events (rank 0), and tail `metrics` for the driver's bar."""
    metrics: str | None = None


@dataclass
class HostSpec:
    """What a host runs and what it must see first."""

    name: str
    """The host's name in the run: "learner" (rank 0's node), "learner-node<n>", "actor<i>"."""
    out_dir: str
    store: str | None
    """The weight store, checked like out_dir when it is a folder (None or "": no store)."""
    marker: str
    """The file name the driver wrote into out_dir and the store (`SEEN_PREFIX` + run tag)."""
    config_text: str
    log_dir: str
    children: list[ChildSpec]
    key_files: dict[str, bytes] = field(default_factory=dict)
    """Relative path in the key folder -> content; empty: no CURVE."""
    exit_on_failure: bool = False
    """Exit the host when a child fails, so that Ray restarts it (actors)."""


@dataclass
class _Child:
    spec: ChildSpec
    keeper: subprocess.Popen
    sock: socket.socket
    """The host's end of the keeper's socket pair: closing it (or the host's death) kills the tree."""
    pid: int
    log_path: Path
    ended: float | None = None
    """Wall time the keeper's exit was seen (the driver names the rank that ended first)."""


def blind_to(spec: HostSpec) -> str | None:
    """Why this node does not see the run's folders as the driver does (None: it does)."""
    for what, folder in (("run.out_dir", spec.out_dir), ("transport.weights_store", spec.store)):
        if not folder:
            continue
        path = Path(folder)
        if not path.is_dir():
            why = "no such folder here"
        elif not (path / spec.marker).exists():
            why = (
                f"the folder exists here but lacks the driver's marker {spec.marker} (another filesystem at that path?)"
            )
        else:
            continue
        return (
            f"node {node_ip()} ({socket.gethostname()}) does not see {what} {folder} as the driver does: {why}; "
            "every node must see it at the same path (a shared filesystem)"
        )
    return None


class ProcessHost:
    def __init__(self, spec: HostSpec, shutdown_grace_s: float = 10.0) -> None:
        self.spec = spec
        self.grace = shutdown_grace_s
        self.started = time.time()
        self.children: list[_Child] = []
        self.lines: list[str] = []
        self.metric_lines: list[str] = []
        self.lock = threading.Lock()
        self.has_address = not any(c.stdin_address for c in spec.children)
        self.stopping = False
        """`stop` was called: a child's exit is the driver's doing, not a death for Ray to restart."""
        self.blind = blind_to(spec)
        if self.blind:
            return  # nothing starts, nothing is written: the driver ends the run
        self.private = Path(tempfile.mkdtemp(prefix=f"atgrpo-{spec.name}-"))  # 0700 by mkdtemp
        config = self.private / "config.toml"
        config.write_text(spec.config_text)
        base = [str(config)]
        if spec.key_files:
            keys = self.private / "keys"
            for rel, data in spec.key_files.items():
                path = keys / rel
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                path.write_bytes(data)
                path.chmod(0o600 if rel.endswith("_secret") else 0o644)
            base += ["--curve-keys", str(keys)]
        Path(spec.log_dir).mkdir(parents=True, exist_ok=True)
        for child in spec.children:
            self.children.append(self._start(child, base))
        for c in self.children:
            threading.Thread(target=self._watch, args=(c,), daemon=True).start()

    def _start(self, child: ChildSpec, base: list[str]) -> _Child:
        # "{node_ip}" in an argument: this node's address (the hub binds tcp there).
        args = [*base, *(a.replace("{node_ip}", node_ip()) for a in child.args)]
        if child.stdin_address:
            args += ["--address", "-"]
        log_path = Path(self.spec.log_dir) / f"{child.name}.log"
        log: IO[str] = open(log_path, "a")
        rank = child.env.get("RANK")
        log.write(
            f"--- {child.name} started by Ray on {socket.gethostname()} ({node_ip()}), host pid {os.getpid()}"
            + (
                f", rank {rank} (local rank {child.env.get('LOCAL_RANK')}, node rank {child.env.get('NODE_RANK')})"
                if rank
                else ""
            )
            + "\n"
        )
        log.flush()
        env = {**os.environ, **child.env, "PYTHONUNBUFFERED": "1"}
        # Ray sets OMP_NUM_THREADS to the actor's reserved CPUs (1 by default); the child's threads
        # follow atgrpo's own settings instead (launch.learner_threads / actor_threads), as on one host.
        for var in RAY_THREAD_VARS:
            if var not in child.env:
                env.pop(var, None)
        mine, theirs = socket.socketpair()
        cmd = [sys.executable, "-m", child.module, *args]
        keeper = subprocess.Popen(
            keeper_command(sys.executable, self.spec.out_dir, child.name, theirs.fileno(), cmd),
            stdin=subprocess.PIPE if child.stdin_address else subprocess.DEVNULL,
            stdout=subprocess.PIPE if child.events else log,
            stderr=log,
            text=True,
            bufsize=1,
            env=env,
            pass_fds=[theirs.fileno()],
            start_new_session=True,
        )
        theirs.close()
        log.close()  # the keeper and its child hold it
        mine.settimeout(PID_WAIT_S)
        try:
            pid = int(mine.recv(64).decode().split()[0])
        except (OSError, ValueError, IndexError):
            pid = -1  # the keeper failed to start its child: its exit and log say why
        mine.settimeout(None)
        c = _Child(child, keeper, mine, pid, log_path)
        if child.events:
            threading.Thread(target=self._read_events, args=(keeper,), daemon=True).start()
        if child.metrics:
            threading.Thread(target=self._tail_metrics, args=(keeper, Path(child.metrics)), daemon=True).start()
        return c

    def _read_events(self, keeper: subprocess.Popen) -> None:
        assert keeper.stdout is not None
        for line in keeper.stdout:
            with self.lock:
                self.lines.append(line)

    def _tail_metrics(self, keeper: subprocess.Popen, path: Path) -> None:
        offset = path.stat().st_size if path.exists() else 0
        while keeper.poll() is None:
            time.sleep(0.5)
            if not path.exists():
                continue
            with open(path, "rb") as f:
                f.seek(offset)
                complete, _, _ = f.read().rpartition(b"\n")  # a line still being written waits
            if complete:
                offset += len(complete) + 1
                with self.lock:
                    self.metric_lines += complete.decode(errors="replace").split("\n")

    def _watch(self, c: _Child) -> None:
        rc = c.keeper.wait()
        c.ended = time.time()
        if rc != 0 and self.spec.exit_on_failure and not self.stopping:
            with open(c.log_path, "a") as log:
                log.write(f"--- {c.spec.name}: its host exits so that Ray restarts it\n")
            os._exit(1)

    def info(self) -> dict:
        """Where this incarnation runs and how each child is: the driver's poll, and the rows it
        writes to the run's processes.jsonl for each new incarnation."""
        import ray

        return {
            "host": self.spec.name,
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": node_ip(),
            "hostname": socket.gethostname(),
            "host_pid": os.getpid(),
            "started": self.started,
            "blind": self.blind,
            "has_address": self.has_address,
            "children": [
                {
                    "name": c.spec.name,
                    "pid": c.pid,
                    "keeper_pid": c.keeper.pid,
                    "rank": c.spec.env.get("RANK"),
                    "local_rank": c.spec.env.get("LOCAL_RANK"),
                    "node_rank": c.spec.env.get("NODE_RANK"),
                    "rc": c.keeper.poll(),
                    "ended": c.ended,
                    "state": process_state(c.pid) if c.pid > 0 else None,
                    "log": str(c.log_path),
                }
                for c in self.children
            ],
        }

    def take(self) -> tuple[list[str], list[str]]:
        """The learner events and metrics.jsonl lines since the last call."""
        with self.lock:
            lines, self.lines = self.lines, []
            rows, self.metric_lines = self.metric_lines, []
        return lines, rows

    def hand_address(self, address: str) -> bool:
        """Give each child started with `--address -` the hub's address; False if one already exited."""
        ok = True
        for c in self.children:
            if not c.spec.stdin_address or c.keeper.stdin is None or c.keeper.stdin.closed:
                continue
            try:
                c.keeper.stdin.write(f"{address}\n")
                c.keeper.stdin.close()
            except OSError:
                ok = False
        self.has_address = True
        return ok

    def send_signal(self, sig: int, name: str | None = None) -> None:
        """Signal the child `name` (None: every child); its keeper passes it on."""
        for c in self.children:
            if (name is None or c.spec.name == name) and c.keeper.poll() is None:
                c.keeper.send_signal(sig)

    def stop(self) -> dict[str, int | None]:
        """End every child: SIGTERM, then after the grace its whole tree (the keeper's socket closed),
        SIGKILL of the keeper last. Each child's exit status."""
        self.stopping = True
        for c in self.children:
            if c.keeper.poll() is None:
                c.keeper.terminate()
        deadline = time.monotonic() + self.grace
        for c in self.children:
            try:
                c.keeper.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                c.sock.close()  # the keeper kills the tree below it and exits
                try:
                    c.keeper.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    c.keeper.kill()
                    c.keeper.wait()
        return {c.spec.name: c.keeper.returncode for c in self.children}

    def tail(self, name: str, lines: int = 40) -> str:
        """The last `lines` lines of child `name`'s log."""
        path = Path(self.spec.log_dir) / f"{name}.log"
        return read_tail(path, lines)

    @staticmethod
    def free_port_on_node() -> tuple[str, int]:
        """(this node's address, a tcp port free on it now): torch.distributed's rendezvous of a
        multi-rank learner, asked of rank 0's bundle before any rank starts."""
        with socket.socket() as s:
            s.bind(("", 0))
            return node_ip(), int(s.getsockname()[1])


def read_tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a log, or why it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64 * 1024))  # the end of a long log is enough
            text = f.read().decode(errors="replace")
    except OSError as exc:
        return f"(cannot read {path} here: {exc})"
    return "".join(text.splitlines(keepends=True)[-lines:])


def node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


__all__ = ["SEEN_PREFIX", "ChildSpec", "HostSpec", "ProcessHost", "blind_to", "node_ip", "read_tail"]
