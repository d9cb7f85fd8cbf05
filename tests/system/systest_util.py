"""Helpers of the system tests: a tiny run config, subprocess helpers with hard timeouts and
process-tree clean-up (every process a test starts, with its descendants found through psutil, is
killed at teardown if still alive), metrics readers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from atgrpo.cli.common import BUILT_IN

RUN_TIMEOUT_S = 150.0
"""Longest any one tiny run may take on a loaded 2-core box before the test fails."""

TINY_MODEL = {
    "hidden_size": 32,
    "num_layers": 1,
    "intermediate_size": 64,
    "num_heads": 2,
    "num_kv_heads": 1,
}
REFERENCE_STEPS = 4


def tiny_sets(out_dir: Path, *, policies: tuple[str, ...] = ("shared",), **extra: object) -> list[str]:
    """`--set` values of the tiny test run writing to `out_dir`; `extra` adds or replaces keys."""
    sets: dict[str, object] = {
        "run.out_dir": json.dumps(str(out_dir)),
        "run.steps": 2,
        "run.eval_seeds": 4,
        "warmstart.steps": 2,
        "warmstart.batch_size": 8,
        "rollout.envs_per_step": 8,
        "rollout.envs_per_unit": 2,
        "rollout.max_new_tokens": 8,
        "task.env": "{width=6,height=6}",
        "metrics.tensorboard": "false",
        "launch.actors": 1,
    }
    if policies == ("shared",):
        sets.update({f"policies.shared.tiny.{k}": v for k, v in TINY_MODEL.items()})
        # A constant lr: these runs are compared with runs of another length (2 steps resumed to 4)
        # and with hand-made steps at `lr`; the schedule has its own tests (learner/test_lr_schedule.py).
        sets["policies.shared.lr_schedule"] = '"constant"'
    sets.update({k.replace("__", "."): v for k, v in extra.items()})
    return [f"{k}={v}" for k, v in sets.items()]


def set_args(sets: list[str]) -> list[str]:
    return [arg for s in sets for arg in ("--set", s)]


def module_cmd(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "ATGRPO_LOG_LEVEL": "INFO",
        }
    )
    return env


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def kill_tree(proc: subprocess.Popen, known: list[psutil.Process] | None = None) -> None:
    """SIGKILL `proc` and every descendant (those seen now and those passed in `known`)."""
    victims = descendants(proc.pid) + list(known or [])
    for p in victims:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    psutil.wait_procs(victims, timeout=10)


class Processes:
    """Starts processes for a test and kills whatever is left of them (and their children) at the end."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []
        self.seen: dict[int, list[psutil.Process]] = {}

    def start(self, cmd: list[str], log: Path, **kwargs) -> subprocess.Popen:
        out = open(log, "ab")
        try:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=child_env(), start_new_session=True, **kwargs
            )
        finally:
            out.close()
        self.started.append(proc)
        return proc

    def remember_children(self, proc: subprocess.Popen) -> list[psutil.Process]:
        kids = descendants(proc.pid)
        self.seen.setdefault(proc.pid, []).extend(kids)
        return kids

    def cleanup(self) -> None:
        for proc in self.started:
            kill_tree(proc, self.seen.get(proc.pid))


@dataclass
class Run:
    out_dir: Path
    returncode: int
    output: str
    wall_s: float

    @property
    def rows(self) -> list[dict]:
        return read_rows(self.out_dir / "metrics.jsonl")

    def train_rows(self) -> dict[int, dict]:
        return train_rows(self.out_dir / "metrics.jsonl")


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def train_rows(path: Path) -> dict[int, dict]:
    """step -> the training row of that step (the last one written, if a resumed run wrote it twice)."""
    return {int(r["step"]): r for r in read_rows(path) if "rollout/samples" in r}


def run_train(
    out_dir: Path,
    sets: list[str],
    *,
    config: Path | None = None,
    timeout_s: float = RUN_TIMEOUT_S,
    extra_args: tuple[str, ...] = (),
    python_tree: Path | None = None,
) -> Run:
    """Run `atgrpo-train` to the end (with a hard timeout that kills the whole process tree).
    `python_tree`: another source tree's `python/` folder, imported instead of the installed atgrpo
    (by the run and every process it starts)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    # No file would be the program demo (atgrpo.cli.common.DEMO): these runs are the built-in defaults'.
    cmd = module_cmd("atgrpo.cli.train", str(config or BUILT_IN), *set_args(sets), *extra_args)
    start = time.monotonic()
    env = child_env()
    if python_tree is not None:
        env["PYTHONPATH"] = str(python_tree)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        logs = "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((out_dir / "logs").glob("*.log")))
        pytest.fail(f"atgrpo-train did not finish within {timeout_s} s: {' '.join(cmd)}{logs}")
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    return Run(out_dir, proc.returncode, output.decode(errors="replace"), time.monotonic() - start)


def wait_for(predicate, timeout_s: float, what: str, proc: subprocess.Popen | None = None, poll_s: float = 0.1):
    """Poll `predicate()` until it returns something truthy; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"process exited with {proc.returncode} while waiting for {what}")
        time.sleep(poll_s)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def send_signal(proc: subprocess.Popen, sig: int) -> None:
    os.kill(proc.pid, sig)


def hub_address(out_dir: Path) -> str:
    """A private ipc address for a run's hub, known before the learner starts (so actors can be
    started at the same time); falls back to a short temp dir when out_dir is too deep for ipc."""
    from atgrpo.transport.endpoints import private_ipc_address

    return private_ipc_address(out_dir / "ipc")


def run_direct(
    out_dir: Path,
    sets: list[str],
    processes: Processes,
    *,
    actors: int = 1,
    ranks: int = 1,
    timeout_s: float = RUN_TIMEOUT_S,
) -> str:
    """Start `atgrpo.cli.learner` (under torchrun when `ranks` > 1) and `actors` plain
    `atgrpo.cli.actor`s at once (the actors connect to the hub's ipc address before the learner binds
    it, which saves one process start-up on the critical path compared with atgrpo-train); wait for
    all to exit 0. Returns the learner's log."""
    out_dir.mkdir(parents=True, exist_ok=True)
    args = set_args(sets)
    address = hub_address(out_dir)
    tag = f"{len(processes.started)}"
    learner_log = out_dir / f"learner-{tag}.log"
    launcher = ["torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), "-m"] if ranks > 1 else []
    learner = processes.start(module_cmd(*launcher, "atgrpo.cli.learner", *args, "--address", address), learner_log)
    started = [
        (
            processes.start(
                module_cmd("atgrpo.cli.actor", *args, "--address", address, "--id", f"actor{i}"),
                out_dir / f"actor{i}-{tag}.log",
            ),
            out_dir / f"actor{i}-{tag}.log",
        )
        for i in range(actors)
    ]
    try:
        rc = learner.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"learner did not finish within {timeout_s} s:\n{learner_log.read_text()[-4000:]}")
    log = learner_log.read_text()
    assert rc == 0, log[-4000:]
    for proc, path in started:
        try:
            assert proc.wait(timeout=30) == 0, path.read_text()[-3000:]
        except subprocess.TimeoutExpired:
            pytest.fail(f"actor still running 30 s after the learner exited:\n{path.read_text()[-3000:]}")
    return log
