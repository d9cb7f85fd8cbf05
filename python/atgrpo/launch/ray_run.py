"""`atgrpo-train` with `launch.backend = "ray"`: the run's processes placed, supervised and stopped by a
Ray cluster; units, samples and weights still travel over ZeroMQ (tcp, CURVE) as on one host.

The driver (this process: `atgrpo-train`, run by hand or by `ray job submit`) only spawns and wires:
1. joins the cluster and reserves one placement group for the run (`ray_cluster`); nothing starts
   before it is reserved, and every error up to there leaves nothing on the cluster;
2. starts one `ProcessHost` Ray actor per process in its bundle (`ray_host`): the learner (rank 0
   binds the hub on tcp at its node's address) and the actors, which start with it and get the hub's
   address through Ray once the learner announces it (`hub_ready`), as the local launcher hands it
   on stdin. Each child gets the resolved config and its CURVE keys through Ray;
3. polls the hosts: learner events and metrics rows drive the same output and progress bar as the
   local launcher; every incarnation of a process (first start, or a restart by Ray) is appended to
   `out_dir/processes.jsonl` with its node;
4. an actor that dies (its process, or its node) is restarted by Ray, on another node if its own is
   gone, and rejoins; the hub reissues its leased units. An actor Ray gave up on stays down; when all
   are down the learner is stopped. The learner's death ends the run with its error;
5. Ctrl-C, SIGTERM (what `ray job stop` sends) or the learner's end: the learner is asked to
   checkpoint, evaluate and stop (SIGINT, up to `local.GRACE_S`), then every host is killed, which
   kills its child, and the placement group is removed. No process of the run outlives the driver;
   if the driver itself is killed, Ray kills the hosts it owns and their children die with them.

What a run is given before anything starts (out_dir made absolute, the settings Ray cannot honour
refused, the GPU plan, the CURVE keys) is `ray_prepare`'s; its names are importable from here too.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atgrpo.config import RunConfig, dump_config
from atgrpo.errors import LaunchError
from atgrpo.launch.events import LearnerView
from atgrpo.launch.local import GRACE_S, Terminated, _raise_terminated
from atgrpo.launch.ray_cluster import NAMESPACE, Bundle, bundles, cluster_gpu_bytes, connect, reserve
from atgrpo.launch.ray_host import ChildSpec, ProcessHost
from atgrpo.launch.ray_prepare import check_ray_config, ray_plan, resolved, run_keys

POLL_S = 0.5
"""How often the driver asks the hosts how their processes are."""


@dataclass
class Proc:
    """The driver's view of one process of the run."""

    name: str
    handle: Any
    bundle: int
    incarnation: int = -1
    """Pid of the child last seen (a new one: Ray restarted the host)."""
    pending: Any = None
    """The poll call in flight, if any (one at a time per host)."""
    gone: bool = False
    """Ray gave up on it (restarts spent) or it exited."""
    rc: int | None = None


class RayRun:
    def __init__(self, cfg: RunConfig, n_actors: int) -> None:
        self.cfg = resolved(cfg)
        self.n_actors = n_actors
        self.out = Path(self.cfg.run.out_dir)
        self.logs = self.out / "logs"
        self.tag = f"{self.cfg.run.name}-{uuid.uuid4().hex[:8]}"
        self.view = LearnerView(self.cfg, self._hub_ready, None)
        self.address: str | None = None
        self.learner: Proc | None = None
        self.ranks: list[Proc] = []
        self.actors: list[Proc] = []
        self.pg: Any = None
        self.conn: Any = None

    # -- start ---------------------------------------------------------------------------------
    def _group(self) -> list[Bundle]:
        ranks = max(1, len(self.cfg.launch.learner_devices))
        return bundles(self.cfg, ranks, self.n_actors)

    def _check_plan(self) -> None:
        from atgrpo.launch.gpu_plan import GB

        la, cfg = self.cfg.launch, self.cfg
        if not (cfg.train.device.startswith("cuda") or cfg.rollout.device.startswith("cuda")):
            return
        gpu_bytes = int(la.gpu_memory_gb * GB) if la.gpu_memory_gb else cluster_gpu_bytes(la.ray_host_start_timeout_s)
        for load in ray_plan(
            cfg.model_copy(update={"launch": la.model_copy(update={"actors": self.n_actors})}), gpu_bytes
        ):
            print(f"plan: {load.describe()}", flush=True)

    def _host(self, spec: ChildSpec, bundle: Bundle, index: int, restarts: int) -> Any:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        res = dict(bundle.resources)
        cpus, gpus = res.pop("CPU", 0.0), res.pop("GPU", 0.0)
        return (
            ray.remote(ProcessHost)
            .options(
                name=f"{self.tag}-{spec.name}",
                namespace=NAMESPACE,
                max_restarts=restarts,
                max_task_retries=0,
                num_cpus=cpus,
                num_gpus=gpus,
                resources=res or None,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=index),
            )
            .remote(spec)
        )

    def _start(self, group: list[Bundle]) -> None:
        import ray

        hub_keys, actor_keys = run_keys(self.cfg)
        text = dump_config(self.cfg)
        logs = str(self.logs)
        tp = self.cfg.transport
        port = tp.endpoint.rsplit(":", 1)[-1] if tp.endpoint else "*"
        learner_bundles = [i for i, b in enumerate(group) if b.role.startswith("learner")]
        spread = self.cfg.launch.ray_learner_spread and len(learner_bundles) > 1
        env: dict[str, str] = {}
        if spread:  # torch.distributed's rendezvous on rank 0's node, found before any rank starts
            probe = (
                ray.remote(ProcessHost.free_port_on_node)
                .options(num_cpus=0.0, scheduling_strategy=_in_bundle(self.pg, learner_bundles[0]))
                .remote()
            )
            master, master_port = ray.get(probe, timeout=self.cfg.launch.ray_host_start_timeout_s)
            env = {
                "MASTER_ADDR": master,
                "MASTER_PORT": str(master_port),
                "WORLD_SIZE": str(len(learner_bundles)),
                "LOCAL_RANK": "0",
                "LOCAL_WORLD_SIZE": "1",
                "GROUP_RANK": "0",
            }
        for r, index in enumerate(learner_bundles if spread else learner_bundles[:1]):
            spec = ChildSpec(
                name="learner" if r == 0 else f"learner{r}",
                module="atgrpo.cli.learner",
                args=["--address", f"tcp://{{node_ip}}:{port}"],
                config_text=text,
                log_dir=logs,
                key_files=hub_keys if r == 0 else {},
                env={**env, "RANK": str(r), "GROUP_RANK": str(r)} if spread else {},
                events=r == 0,
                metrics=str(self.out / "metrics.jsonl") if r == 0 else None,
                torchrun_ranks=1 if spread else max(1, len(self.cfg.launch.learner_devices)),
            )
            proc = Proc(spec.name, self._host(spec, group[index], index, 0), index)
            if r == 0:
                self.learner = proc
            else:
                self.ranks.append(proc)
        actor_bundles = [i for i, b in enumerate(group) if b.role.startswith("actor")]
        for i, index in enumerate(actor_bundles):
            spec = ChildSpec(
                name=f"actor{i}",
                module="atgrpo.cli.actor",
                args=["--id", f"actor{i}"],
                config_text=text,
                log_dir=logs,
                key_files=actor_keys,
                stdin_address=True,
                exit_on_failure=True,
            )
            self.actors.append(
                Proc(spec.name, self._host(spec, group[index], index, self.cfg.launch.max_actor_restarts), index)
            )

    # -- supervise -----------------------------------------------------------------------------
    def _hub_ready(self, address: str) -> None:
        self.address = address
        self.view.say(f"hub at {address}")

    def _record(self, proc: Proc, info: dict) -> None:
        restarted = proc.incarnation != -1
        proc.incarnation = info["pid"]
        row = {
            "time": time.time(),
            "event": "restarted" if restarted else "started",
            **{k: v for k, v in info.items() if k not in ("rc", "has_address")},
        }
        with open(self.out / "processes.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        if restarted:
            self.view.say(
                f"{proc.name} restarted by Ray on {info['node_ip']} (node {info['node_id'][:8]}); "
                "its units are reissued"
            )

    def _check(self, proc: Proc) -> None:
        """One look at a host: record a new incarnation, hand it the hub's address, note an exit."""
        import ray
        from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError

        if proc.gone:
            return
        if proc.pending is None:
            proc.pending = proc.handle.info.remote()
        ready, _ = ray.wait([proc.pending], timeout=0)
        if not ready:
            return  # starting, restarting or busy: look again next round
        ref, proc.pending = proc.pending, None
        try:
            info = ray.get(ref, timeout=10)
        except ActorDiedError as exc:
            if _dead_for_good(proc.handle):
                proc.gone = True
                self.view.say(
                    f"{proc.name} is lost for good (Ray restarted it {self.cfg.launch.max_actor_restarts} "
                    f"times): {_first_line(exc)}"
                )
            return
        except (RayActorError, GetTimeoutError):
            return
        if info["pid"] != proc.incarnation:
            self._record(proc, info)
        if info["rc"] is not None:
            proc.rc = info["rc"]
            proc.gone = proc.rc == 0 or proc is self.learner or proc in self.ranks
        elif not info["has_address"] and self.address:
            proc.handle.hand_address.remote(self.address)

    def _pump(self) -> None:
        """The learner's events and metrics since the last call, into the view."""
        import ray

        assert self.learner is not None
        try:
            lines, rows = ray.get(self.learner.handle.take.remote(), timeout=30)
        except Exception:  # noqa: BLE001 - the learner's host died: _check reports it
            return
        for line in lines:
            self.view.line(line)
        self.view.feed_metrics(rows)

    def _learner_done(self) -> bool:
        return any(p.gone for p in [self.learner, *self.ranks] if p is not None)

    def _loop(self) -> None:
        assert self.learner is not None
        warned = False
        while True:
            self._pump()
            for proc in [self.learner, *self.ranks, *self.actors]:
                self._check(proc)
            if self._learner_done():
                self._pump()
                return
            if self.actors and all(a.gone and a.rc != 0 for a in self.actors) and not warned:
                print(
                    f"every actor is lost (Ray restarted each {self.cfg.launch.max_actor_restarts} times); "
                    "stopping the learner",
                    file=sys.stderr,
                )
                self.learner.handle.send_signal.remote(int(signal.SIGINT))
                warned = True
            time.sleep(POLL_S)

    def _wait_learner(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self._learner_done():
            self._pump()
            for proc in [self.learner, *self.ranks]:
                if proc is not None:
                    self._check(proc)
            time.sleep(POLL_S)
        self._pump()

    # -- stop ----------------------------------------------------------------------------------
    def _stop_all(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        procs = [p for p in [*self.actors, *self.ranks, self.learner] if p is not None]
        for p in procs:  # SIGTERM, then SIGKILL after the host's grace; a host already dead raises
            try:
                ray.get(p.handle.stop.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - dead, restarting or unreachable: killed below all the same
                pass
        for p in procs:
            try:
                ray.kill(p.handle, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        if self.pg is not None:
            remove_placement_group(self.pg)
            self.pg = None

    def _learner_tail(self) -> str:
        import ray

        try:
            return ray.get(self.learner.handle.tail.remote(), timeout=10) if self.learner else ""
        except Exception:  # noqa: BLE001
            return "(the learner's host is gone; see its log on its node)"

    def run(self) -> int:
        """Run to the end; the exit status: 0, 1 (learner failed), 130 (Ctrl-C) or 143 (SIGTERM)."""
        check_ray_config(self.cfg)
        signal.signal(signal.SIGTERM, _raise_terminated)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self.out.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        interrupted = 0
        try:
            group = self._group()
            self.conn = connect(self.cfg, group)
            self._check_plan()
            # ray.init installs its own SIGTERM handlers (exit at once); a stop must checkpoint first.
            signal.signal(signal.SIGTERM, _raise_terminated)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.pg = reserve(self.cfg, group, self.tag)
            self._start(group)
            self._await_learner_start()
            self._loop()
        except KeyboardInterrupt as exc:
            interrupted = 143 if isinstance(exc, Terminated) else 130
            what = "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"
            print(f"\n{what}: asking the learner to checkpoint and stop (Ctrl-C again to kill)...", flush=True)
            try:
                if self.learner is not None and not self._learner_done():
                    self.learner.handle.send_signal.remote(int(signal.SIGINT))
                    self._wait_learner(GRACE_S)
            except KeyboardInterrupt:
                pass
        finally:
            failed = self.learner is not None and self.learner.rc not in (0, None)
            tail = self._learner_tail() if failed else ""
            if self.conn is not None:
                self._stop_all()
                self.conn.close()
            self.view.close(str(self.logs))
        if failed:
            print(
                f"learner failed (exit {self.learner.rc}); its log ({self.logs / 'learner.log'} on its node) ends:\n"
                f"{tail}",
                file=sys.stderr,
            )
        if interrupted:
            return interrupted
        return 0 if self.learner is not None and self.learner.rc == 0 else 1

    def _await_learner_start(self) -> None:
        """The learner's host answers (its child started), or a `LaunchError` naming why not."""
        import ray

        assert self.learner is not None
        timeout = self.cfg.launch.ray_host_start_timeout_s
        try:
            ray.get(self.learner.handle.info.remote(), timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - a node lost while starting, a worker that cannot start
            raise LaunchError(
                f"the learner's process did not start on the cluster within {timeout:g} s "
                f"(launch.ray_host_start_timeout_s): {_first_line(exc)}"
            ) from None


def _in_bundle(pg: Any, index: int) -> Any:
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index)


def _dead_for_good(handle: Any) -> bool:
    """Ray will not restart this actor again (its state is DEAD, not RESTARTING)."""
    from ray._private.state import actors

    try:
        return actors(actor_id=handle._actor_id.hex()).get("State") == "DEAD"
    except Exception:  # noqa: BLE001 - no state: treat as gone
        return True


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["RayRun", "check_ray_config", "ray_plan", "resolved", "run_keys"]
