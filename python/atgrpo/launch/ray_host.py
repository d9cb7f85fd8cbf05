"""One process of a Ray run, on the node Ray placed it: `ProcessHost` is the Ray actor that starts the
real entry point (`atgrpo.cli.learner` or `atgrpo.cli.actor`, the same commands as on one host) as its
child and answers the driver's calls about it.

Invariants:
- The child starts in the constructor, so a host Ray restarts (after its process or its node died)
  starts a new child. An actor host whose child exits non-zero exits itself, which is how Ray learns
  that the actor died and restarts it (up to `launch.max_actor_restarts`, then on another node if its
  own is gone). A learner host never exits by itself: the driver reads the exit status and ends the run.
- The child never outlives its host: it gets SIGKILL when the host's process dies (PR_SET_PDEATHSIG,
  set in the child after fork; the host is a non-threaded Ray actor, so the forking thread is the
  process's main thread), and `stop` ends it first with SIGTERM.
- What a child needs comes through Ray: the resolved config text and, for tcp with CURVE, the key
  files, written by the host into a private (0700) folder on its own node; no world-readable file.
- Every call returns at once (the driver polls); the child's stdout (the learner's events) is read
  by a thread into a buffer that `take` empties. Its log, stderr and the rest, goes to
  `<log_dir>/<name>.log` on the host's node (out_dir/logs, the same file on every node when out_dir
  is on a shared filesystem).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_PDEATHSIG = 1
RAY_THREAD_VARS = ("OMP_NUM_THREADS",)
"""What Ray's worker sets from the reserved CPUs and a child should not inherit."""


def _die_with_parent() -> None:
    """In the child between fork and exec: SIGKILL when the host's process is gone."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the host died before the line above ran
        os._exit(1)


@dataclass
class ChildSpec:
    """What a host runs: the entry point's module and arguments (the config file and key folder are
    added by the host), its extra environment, and where its log goes."""

    name: str
    module: str
    args: list[str]
    config_text: str
    log_dir: str
    key_files: dict[str, bytes] = field(default_factory=dict)
    """Relative path in the key folder -> content; empty: no CURVE."""
    env: dict[str, str] = field(default_factory=dict)
    stdin_address: bool = False
    """The child reads the hub's address from stdin (`--address -`), handed over by `hand_address`."""
    exit_on_failure: bool = False
    """Exit the host when the child fails, so that Ray restarts it (actors)."""
    events: bool = False
    """Read the child's stdout as learner events (rank 0), and tail `metrics` for the driver's bar."""
    metrics: str | None = None
    torchrun_ranks: int = 1
    """>1: the learner's ranks on this node under torchrun (packed placement)."""


class ProcessHost:
    def __init__(self, spec: ChildSpec, shutdown_grace_s: float = 10.0) -> None:
        self.spec = spec
        self.grace = shutdown_grace_s
        self.private = Path(tempfile.mkdtemp(prefix=f"atgrpo-{spec.name}-"))  # 0700 by mkdtemp
        config = self.private / "config.toml"
        config.write_text(spec.config_text)
        # "{node_ip}" in an argument: this node's address (the hub binds tcp there).
        args = [str(config), *(a.replace("{node_ip}", node_ip()) for a in spec.args)]
        if spec.key_files:
            keys = self.private / "keys"
            for rel, data in spec.key_files.items():
                path = keys / rel
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                path.write_bytes(data)
                path.chmod(0o600 if rel.endswith("_secret") else 0o644)
            args += ["--curve-keys", str(keys)]
        if spec.stdin_address:
            args += ["--address", "-"]
        from atgrpo.launch.local import learner_command  # torchrun for packed ranks, as on one host

        cmd = [sys.executable, "-m", spec.module, *args]
        if spec.torchrun_ranks > 1:
            cmd = learner_command(cmd, spec.torchrun_ranks)
        Path(spec.log_dir).mkdir(parents=True, exist_ok=True)
        self.log_path = Path(spec.log_dir) / f"{spec.name}.log"
        self.log = open(self.log_path, "a")
        self.log.write(
            f"--- {spec.name} started by Ray on {socket.gethostname()} ({node_ip()}), host pid {os.getpid()}\n"
        )
        self.log.flush()
        env = {**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"}
        # Ray sets OMP_NUM_THREADS to the actor's reserved CPUs (1 by default); the child's threads
        # follow atgrpo's own settings instead (launch.learner_threads / actor_threads), as on one host.
        for var in RAY_THREAD_VARS:
            if var not in spec.env:
                env.pop(var, None)
        self.child = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE if spec.stdin_address else subprocess.DEVNULL,
            stdout=subprocess.PIPE if spec.events else self.log,
            stderr=self.log,
            text=True,
            bufsize=1,
            env=env,
            preexec_fn=_die_with_parent,
            start_new_session=True,
        )
        self.started = time.time()
        self.has_address = not spec.stdin_address
        self.lines: list[str] = []
        self.metric_lines: list[str] = []
        self.lock = threading.Lock()
        if spec.events:
            threading.Thread(target=self._read_events, daemon=True).start()
        if spec.metrics:
            threading.Thread(target=self._tail_metrics, args=(Path(spec.metrics),), daemon=True).start()
        threading.Thread(target=self._watch, daemon=True).start()

    def _read_events(self) -> None:
        assert self.child.stdout is not None
        for line in self.child.stdout:
            with self.lock:
                self.lines.append(line)

    def _tail_metrics(self, path: Path) -> None:
        offset = path.stat().st_size if path.exists() else 0
        while self.child.poll() is None:
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

    def _watch(self) -> None:
        rc = self.child.wait()
        if rc != 0 and self.spec.exit_on_failure:
            self.log.write(f"--- {self.spec.name} exited with {rc}; its host exits so that Ray restarts it\n")
            self.log.flush()
            os._exit(1)

    def info(self) -> dict:
        """Where this incarnation runs and how its child is: the driver's poll, and the row it writes
        to the run's processes.jsonl for each new incarnation."""
        import ray

        return {
            "name": self.spec.name,
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": node_ip(),
            "host": socket.gethostname(),
            "pid": self.child.pid,
            "host_pid": os.getpid(),
            "started": self.started,
            "log": str(self.log_path),
            "rc": self.child.poll(),
            "has_address": self.has_address,
        }

    def take(self) -> tuple[list[str], list[str]]:
        """The learner events and metrics.jsonl lines since the last call."""
        with self.lock:
            lines, self.lines = self.lines, []
            rows, self.metric_lines = self.metric_lines, []
        return lines, rows

    def hand_address(self, address: str) -> bool:
        """Give a child started with `--address -` the hub's address; False if it already exited."""
        if self.has_address or self.child.stdin is None:
            return True
        try:
            self.child.stdin.write(f"{address}\n")
            self.child.stdin.close()
        except OSError:
            return False
        self.has_address = True
        return True

    def send_signal(self, sig: int) -> None:
        if self.child.poll() is None:
            self.child.send_signal(sig)

    def stop(self) -> int | None:
        """End the child (SIGTERM, SIGKILL after the grace); its exit status."""
        if self.child.poll() is None:
            self.child.terminate()
            try:
                self.child.wait(timeout=self.grace)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait()
        return self.child.returncode

    def tail(self, lines: int = 40) -> str:
        try:
            return "".join(self.log_path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
        except OSError as exc:
            return f"(cannot read {self.log_path}: {exc})"

    @staticmethod
    def free_port_on_node() -> tuple[str, int]:
        """(this node's address, a tcp port free on it now): torch.distributed's rendezvous of spread
        learner ranks, asked of rank 0's bundle before any rank starts."""
        with socket.socket() as s:
            s.bind(("", 0))
            return node_ip(), int(s.getsockname()[1])


def node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


__all__ = ["ChildSpec", "ProcessHost", "node_ip"]
