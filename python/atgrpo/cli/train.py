"""`atgrpo-train`: the embedded default. One learner and N actors on this host over a private ipc socket.

The launcher only spawns and wires: it starts `atgrpo-learner`, waits for its `ATGRPO_HUB` line,
starts the actors against that address, shows a progress bar from `metrics.jsonl`, and writes each
child's log to `out_dir/logs/`. Children run in their own sessions, so a Ctrl-C reaches only the
launcher, which forwards it to the learner (checkpoint, final evaluation, actors told to shut down)
and, once the learner is gone, stops any actor still running. SIGTERM to the launcher is handled the
same way (exit status 143 instead of 130). No child outlives the launcher.
`--print-commands` prints the commands for a multi-host run instead of starting anything.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from atgrpo.cli.common import config_parser, load_run_config

MAX_ACTOR_RESTARTS = 2
"""A crashed actor is started again this many times; when every actor is past it, the run stops."""
GRACE_S = 600.0
"""How long the learner gets after Ctrl-C to checkpoint and evaluate before it is killed."""


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the launcher: stop like on Ctrl-C, so that no child is left running."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def child_cmd(module: str, args, extra: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", module]
    if args.config:
        cmd.append(str(args.config))
    for o in args.overrides:
        cmd += ["--set", o]
    return cmd + extra


def print_commands(args, cfg) -> None:
    sets = "".join(f" --set {shlex.quote(o)}" for o in args.overrides)
    conf = f" {shlex.quote(str(args.config))}" if args.config else ""
    port = "5555"
    print("# On the learner host (add `torchrun --nproc_per_node N -m atgrpo.cli.learner` for several ranks):")
    print(f"atgrpo-learner{conf}{sets} --address tcp://0.0.0.0:{port}")
    print("# On each actor host (the config must point at model folders readable there):")
    print(f"atgrpo-actor{conf}{sets} --address tcp://LEARNER_HOST:{port}")


class Progress:
    """Tails metrics.jsonl and drives a tqdm bar: step, reward, success, samples/s."""

    def __init__(self, path: Path, total: int) -> None:
        from tqdm import tqdm

        self.path = path
        self.bar = tqdm(total=total, desc="AT-GRPO", unit="step", dynamic_ncols=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._offset = path.stat().st_size if path.exists() else 0
        self._thread.start()

    def _run(self) -> None:
        last_t = time.monotonic()
        while not self._stop.wait(0.5):
            if not self.path.exists():
                continue
            with open(self.path) as f:
                f.seek(self._offset)
                lines = f.readlines()
                self._offset = f.tell()
            for line in lines:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if "rollout/success" in row:
                    now = time.monotonic()
                    rate = row.get("rollout/samples", 0.0) / max(now - last_t, 1e-9)
                    last_t = now
                    self.bar.n = int(row["step"])
                    self.bar.set_postfix(
                        reward=f"{row.get('rollout/reward_mean', 0):.3f}",
                        success=f"{row['rollout/success']:.2f}",
                        samples_s=f"{rate:.0f}",
                    )
                if "eval/success" in row:
                    self.bar.write(f"eval at step {row['step']}: held-out success {row['eval/success']:.3f}")

    def write(self, text: str) -> None:
        self.bar.write(text)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.bar.close()


def main(argv: list[str] | None = None) -> int:
    parser = config_parser("atgrpo-train", "Train on this machine: one learner and N actors over ipc.")
    parser.add_argument("--actors", type=int, default=None, help="actor processes (default: launch.actors)")
    parser.add_argument("--print-commands", action="store_true", help="print the multi-host commands and exit")
    args = parser.parse_args(argv)
    cfg = load_run_config(args)
    if args.print_commands:
        print_commands(args, cfg)
        return 0
    n_actors = args.actors if args.actors is not None else cfg.launch.actors
    out = Path(cfg.run.out_dir)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    signal.signal(signal.SIGTERM, _raise_terminated)
    learner = subprocess.Popen(
        child_cmd("atgrpo.cli.learner", args, []),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True,
    )
    actors: list[subprocess.Popen] = []
    progress: Progress | None = None
    result: dict | None = None
    learner_log = open(logs / "learner.log", "a")
    hub_address: list[str] = []
    restarts: dict[int, int] = {}

    def spawn_actor(i: int) -> subprocess.Popen:
        log_file = open(logs / f"actor{i}.log", "a")
        return subprocess.Popen(
            child_cmd("atgrpo.cli.actor", args, ["--address", hub_address[0], "--id", f"actor{i}"]),
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def pump() -> None:
        nonlocal progress, result
        assert learner.stdout is not None
        for line in learner.stdout:
            learner_log.write(line)
            learner_log.flush()
            if line.startswith("ATGRPO_HUB "):
                address = line.split(maxsplit=1)[1].strip()
                hub_address.append(address)
                for i in range(n_actors):
                    actors.append(spawn_actor(i))
                progress = Progress(out / "metrics.jsonl", cfg.run.steps)
            elif line.startswith("ATGRPO_RESULT "):
                result = json.loads(line.split(maxsplit=1)[1])
            elif any(k in line for k in ("warm start", "eval (", "held-out", "ERROR", "Error", "resumed", "stopping")):
                text = line.rstrip()
                (progress.write(text) if progress else print(text, flush=True))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    interrupted = 0
    try:
        while learner.poll() is None:
            time.sleep(0.2)
            for i, a in enumerate(actors):
                if a.poll() not in (None, 0):
                    restarts[i] = restarts.get(i, 0) + 1
                    msg = f"actor{i} exited with {a.returncode}; see {logs}/actor{i}.log (its units are reassigned)"
                    (progress.write(msg) if progress else print(msg, flush=True))
                    if restarts[i] > MAX_ACTOR_RESTARTS:
                        actors[i] = _Exited()
                        if all(isinstance(x, _Exited) for x in actors):
                            print(f"every actor failed {MAX_ACTOR_RESTARTS + 1} times; stopping the learner", file=sys.stderr)
                            _stop(learner)
                    else:
                        actors[i] = spawn_actor(i)
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
        for a in actors:
            _stop(a)
        if learner.poll() is None:
            _stop(learner)
        if progress is not None:
            progress.close()
        learner_log.close()
    if result is not None:
        start, end = result.get("eval_start"), result.get("eval_end")
        if start is not None and end is not None:
            print(f"held-out success ({cfg.run.eval_seeds} eval levels): {100 * start:.1f}% -> {100 * end:.1f}% "
                  f"({100 * (end - start):+.1f} points) after {result.get('steps')} steps")
        print(f"metrics: {out / 'metrics.jsonl'}  curve: {result.get('learning_curve')}  logs: {logs}")
    elif learner.returncode:
        print(f"learner failed (exit {learner.returncode}); see {logs / 'learner.log'}", file=sys.stderr)
    if interrupted:
        return interrupted
    return 0 if learner.returncode == 0 else 1


class _Exited:
    returncode = 0

    def poll(self) -> int:
        return 0


def _stop(proc, timeout: float = 10.0) -> None:
    if isinstance(proc, _Exited) or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
