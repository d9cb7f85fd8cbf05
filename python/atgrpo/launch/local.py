"""One learner and N actors on this host over a private ipc socket: what `atgrpo-train` runs.

The launcher only spawns and wires. It starts the learner and the actors together, reads the
learner's events (JSON lines on its stdout, `messages.LearnerEvent`), hands the actors the address
of its `hub_ready` event on their stdin (`atgrpo-actor --address -`: their imports overlap the
learner's start and warm start instead of following them), shows a progress bar from
`metrics.jsonl`, and writes each child's log (its stderr) to `out_dir/logs/`. Children run in
their own sessions, so a Ctrl-C reaches only the launcher, which forwards it to the learner
(checkpoint, final evaluation, actors told to shut down) and, once the learner is gone, stops any
actor still running. SIGTERM to the launcher is handled the same way (exit status 143 instead of
130). No child outlives the launcher.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from atgrpo.config import RunConfig
from atgrpo.errors import PlacementError
from atgrpo.launch.events import LearnerView, describe

log = logging.getLogger("atgrpo.launch")

GRACE_S = 600.0
"""How long the learner gets after Ctrl-C to checkpoint and evaluate before it is killed."""
TORCHRUN_SHUTDOWN_S = int(GRACE_S) - 30
"""How long torchrun lets its ranks finish after it forwards the signal, before it kills them
(`--shutdown-timeout`; torchrun's own default is 30 s). Short of `GRACE_S`, so that torchrun stops
its ranks itself before the launcher gives up on torchrun, whose kill would orphan them."""


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the launcher: stop like on Ctrl-C, so that no child is left running."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


class LocalRun:
    def __init__(self, cfg: RunConfig, learner_cmd: list[str], actor_cmd: list[str], n_actors: int) -> None:
        self.cfg = cfg
        self.learner_cmd = learner_cmd
        self.actor_cmd = actor_cmd
        self.n_actors = n_actors
        self.out = Path(cfg.run.out_dir)
        self.logs = self.out / "logs"
        self.actors: list[subprocess.Popen | None] = []
        self.restarts: dict[int, int] = {}
        self.view = LearnerView(cfg, self.hand_address, self.out / "metrics.jsonl")
        self.address: str | None = None
        self.lock = threading.Lock()
        """Guards `actors` and `address`: the event reader hands out the address while the main
        loop may restart an actor."""

    def say(self, text: str) -> None:
        self.view.say(text)

    def spawn_actor(self, i: int) -> subprocess.Popen:
        """Actor `i`, against the hub's address once known; before that it waits for it on stdin
        (`hand_address`). Called with `lock` held."""
        log_file = open(self.logs / f"actor{i}.log", "a")
        gpus = self.cfg.launch.actor_devices
        return subprocess.Popen(
            [*self.actor_cmd, "--address", self.address or "-", "--id", f"actor{i}"],
            stdin=subprocess.DEVNULL if self.address else subprocess.PIPE,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=child_env([gpus[i % len(gpus)]] if gpus else []),
        )

    def hand_address(self, address: str) -> None:
        """The hub is up: every actor still waiting for its address gets it (one that already exited
        is restarted by `watch_actors`, with the address on its command line)."""
        with self.lock:
            self.address = address
            for a in self.actors:
                if a is None or a.stdin is None:
                    continue
                try:
                    a.stdin.write(f"{address}\n".encode())
                    a.stdin.close()
                except OSError:  # it died while waiting (BrokenPipeError): watch_actors sees its exit
                    pass

    def read_events(self, learner: subprocess.Popen) -> None:
        assert learner.stdout is not None
        for line in learner.stdout:
            self.view.line(line)

    def watch_actors(self, learner: subprocess.Popen) -> None:
        with self.lock:
            for i, a in enumerate(self.actors):
                if a is None or a.poll() in (None, 0):
                    continue
                self.restarts[i] = self.restarts.get(i, 0) + 1
                self.say(
                    f"actor{i} exited with {a.returncode}; see {self.logs}/actor{i}.log (its units are reassigned)"
                )
                if self.restarts[i] <= self.cfg.launch.max_actor_restarts:
                    self.actors[i] = self.spawn_actor(i)
                    continue
                self.actors[i] = None
                if all(x is None for x in self.actors):
                    print(
                        f"every actor failed {self.cfg.launch.max_actor_restarts + 1} times; stopping the learner",
                        file=sys.stderr,
                    )
                    stop_process(learner)

    def run(self) -> int:
        """Run to the end; the exit status: 0, 1 (learner failed), 130 (Ctrl-C) or 143 (SIGTERM)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGTERM, _raise_terminated)
        # Python leaves SIGINT ignored when it starts with it ignored (a background job of a
        # non-interactive shell); the launcher's contract is that SIGINT stops the run cleanly.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        learner_log = open(self.logs / "learner.log", "a")
        learner = subprocess.Popen(
            self.learner_cmd,
            stdout=subprocess.PIPE,
            stderr=learner_log,
            text=True,
            bufsize=1,
            start_new_session=True,
            env=child_env(self.cfg.launch.learner_devices),
        )
        reader = threading.Thread(target=self.read_events, args=(learner,), daemon=True)
        reader.start()
        interrupted = 0
        try:
            with self.lock:  # one by one: any actor started before a failure is stopped below
                for i in range(self.n_actors):
                    self.actors.append(self.spawn_actor(i))
            while learner.poll() is None:
                time.sleep(0.2)
                self.watch_actors(learner)
        except KeyboardInterrupt as exc:
            interrupted = 143 if isinstance(exc, Terminated) else 130
            what = "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"
            print(f"\n{what}: asking the learner to checkpoint and stop (Ctrl-C again to kill)...", flush=True)
            learner.send_signal(signal.SIGINT)
            try:
                learner.wait(timeout=GRACE_S)
            except (KeyboardInterrupt, subprocess.TimeoutExpired):
                learner.kill()
        finally:
            reader.join(timeout=5)
            for a in self.actors:
                stop_process(a)
            stop_process(learner)
            self.view.close(str(self.logs))
            learner_log.close()
        if self.view.summary is None and learner.returncode:
            print(f"learner failed (exit {learner.returncode}); see {self.logs / 'learner.log'}", file=sys.stderr)
        if interrupted:
            return interrupted
        return 0 if learner.returncode == 0 else 1


def child_env(gpus: list[int]) -> dict[str, str]:
    """The environment of a child that computes on `gpus` (launch.*_devices, numbered as the
    launcher sees them): `CUDA_VISIBLE_DEVICES` names them as the host does, through the
    launcher's own `CUDA_VISIBLE_DEVICES` when it has one. No GPUs named: the launcher's own."""
    env = dict(os.environ)
    if not gpus:
        return env
    mine = os.environ.get("CUDA_VISIBLE_DEVICES")
    host = [x.strip() for x in mine.split(",") if x.strip()] if mine else None
    if host is not None and max(gpus) >= len(host):
        raise PlacementError(
            f"launch.*_devices name GPU {max(gpus)}, but the launcher sees {len(host)} (CUDA_VISIBLE_DEVICES={mine})"
        )
    env["CUDA_VISIBLE_DEVICES"] = ",".join(host[g] if host is not None else str(g) for g in gpus)
    return env


def learner_command(module_cmd: list[str], ranks: int) -> list[str]:
    """`module_cmd` (python -m atgrpo.cli.learner ...) for `ranks` ranks on this host: itself for one,
    under torchrun (one rank per GPU of `launch.learner_devices`) for several."""
    if ranks <= 1:
        return module_cmd
    python, _, module, *rest = module_cmd
    return [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={ranks}",
        *torchrun_shutdown_args(),
        "-m",
        module,
        *rest,
    ]


def torchrun_shutdown_args() -> list[str]:
    """torchrun's `--shutdown-timeout` (`TORCHRUN_SHUTDOWN_S`) where the installed torch has it (torch
    2.13's torch/distributed/run.py does); without it the ranks get torchrun's 30 s after Ctrl-C,
    too little to checkpoint, which is logged."""
    from torch.distributed.run import get_args_parser

    options = {o for action in get_args_parser()._actions for o in action.option_strings}
    if "--shutdown-timeout" in options:
        return [f"--shutdown-timeout={TORCHRUN_SHUTDOWN_S}"]
    log.warning(
        "this torch's torchrun has no --shutdown-timeout: after Ctrl-C the learner ranks get 30 s, "
        "not %d, to checkpoint",
        TORCHRUN_SHUTDOWN_S,
    )
    return []


def stop_process(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """Terminate `proc` if it still runs, and kill it if it does not exit within `timeout`."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


__all__ = ["LocalRun", "child_env", "describe", "learner_command", "stop_process"]
