"""`atgrpo-train` with `launch.backend = "ray"`: the run's processes placed, supervised and stopped by a
Ray cluster; units, samples and weights still travel over ZeroMQ (tcp, CURVE) as on one host.

The driver (this process: `atgrpo-train`, run by hand or by `ray job submit`) only spawns and wires:
1. resolves the run's paths (`ray_prepare.resolved`) and writes its marker into out_dir and the weight
   store, which every host must see before it starts anything (`ray_host`); joins the cluster and
   reserves the run's placement groups (`ray_cluster`); nothing starts before they are reserved, and
   every error up to there leaves nothing on the cluster;
2. starts one `ProcessHost` Ray actor per node of the learner, with that node's ranks numbered in
   node order (`ray_learner`; rank 0 binds the hub on tcp at its node's address), and one per actor;
   the actors start with the learner and get the hub's address through Ray once the learner
   announces it (`hub_ready`), as the local launcher hands it on stdin;
3. polls the hosts (`ray_watch.Watch`): learner events and metrics rows drive the same output and progress bar as the
   local launcher; every incarnation of a process (first start, or a restart by Ray) is appended to
   `out_dir/processes.jsonl` with its node;
4. an actor that dies (its process, or its node) is restarted by Ray, on another node if its own is
   gone, and rejoins; the hub reissues its leased units. An actor whose restarts are spent, or that
   is not placed again within `launch.ray_placement_timeout_s`, is lost for good, said with its
   reason, and the run goes on without it; when every actor is lost the learner is stopped
   (checkpoint, evaluation) and the run exits 1;
5. a learner rank that ends (non-zero), whose host dies, that is stopped, or a learner that shows no
   progress for `transport.round_timeout_s` ends the run (`RunProcessLost`): the message names the rank
   that ended first, its node, how it ended and its log's tail. Learner ranks are not restarted;
6. Ctrl-C, SIGTERM (what `ray job stop` sends) or the learner's end: the learner is asked to
   checkpoint, evaluate and stop (SIGINT, up to `local.GRACE_S`), then every host stops its children
   and is killed, and the groups are removed. Whatever kills a host (the driver's death included),
   its keepers kill everything below it (`keeper`).
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from atgrpo.config import RunConfig, dump_config
from atgrpo.errors import LaunchError, RunProcessLost
from atgrpo.launch.local import GRACE_S, Terminated, _raise_terminated
from atgrpo.launch.ray_cluster import (
    NAMESPACE,
    Bundle,
    bundles,
    cluster_gpu_bytes,
    connect,
    learner_nodes,
    ranks_per_node,
    reserve,
)
from atgrpo.launch.ray_host import SEEN_PREFIX, ChildSpec, HostSpec, ProcessHost
from atgrpo.launch.ray_learner import host_name, node_children, passed_env
from atgrpo.launch.ray_prepare import check_ray_config, ray_plan, resolved, run_keys
from atgrpo.launch.ray_watch import Host, Watch, first_line


class RayRun:
    def __init__(self, cfg: RunConfig, n_actors: int) -> None:
        self.cfg = resolved(cfg)
        self.n_actors = n_actors
        self.out = Path(self.cfg.run.out_dir)
        self.logs = self.out / "logs"
        self.tag = f"{self.cfg.run.name}-{uuid.uuid4().hex[:8]}"
        self.marker = f"{SEEN_PREFIX}{self.tag}"
        self.watch = Watch(self.cfg)
        self.pgs: list[Any] = []
        self.conn: Any = None

    # -- start ---------------------------------------------------------------------------------
    def _group(self) -> list[Bundle]:
        return bundles(self.cfg, self._ranks(), self.n_actors)

    def _ranks(self) -> int:
        return max(1, len(self.cfg.launch.learner_devices))

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

    def _shared_dirs(self) -> list[Path]:
        store = self.cfg.transport.weights_store
        return [self.out, *([Path(store)] if store else [])]

    def _mark(self) -> None:
        """The marker every host must see (`ray_host.blind_to`), in out_dir and the store."""
        for folder in self._shared_dirs():
            folder.mkdir(parents=True, exist_ok=True)
            (folder / self.marker).write_text(f"{self.tag}\n")

    def _unmark(self) -> None:
        for folder in self._shared_dirs():
            (folder / self.marker).unlink(missing_ok=True)

    def _spec(self, name: str, children: list[ChildSpec], keys: dict[str, bytes], exits: bool) -> HostSpec:
        return HostSpec(
            name=name,
            out_dir=str(self.out),
            store=self.cfg.transport.weights_store or None,
            marker=self.marker,
            config_text=dump_config(self.cfg),
            log_dir=str(self.logs),
            children=children,
            key_files=keys,
            exit_on_failure=exits,
        )

    def _host(self, spec: HostSpec, bundle: Bundle, pg: Any, index: int, learner: bool, restarts: int) -> Host:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        res = dict(bundle.resources)
        cpus, gpus = res.pop("CPU", 0.0), res.pop("GPU", 0.0)
        handle = (
            ray.remote(ProcessHost)
            .options(
                name=f"{self.tag}-{spec.name}",
                namespace=NAMESPACE,
                max_restarts=restarts,
                max_task_retries=0,
                num_cpus=cpus,
                num_gpus=gpus,
                resources=res or None,
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index),
            )
            .remote(spec)
        )
        return Host(spec.name, handle, pg, index, bundle.resources, learner, restarts)

    def _master(self, pg: Any, bundle: int) -> tuple[str, int]:
        """torch.distributed's rendezvous: a port free on rank 0's node, found before any rank starts."""
        import ray

        probe = (
            ray.remote(ProcessHost.free_port_on_node)
            .options(num_cpus=0.0, scheduling_strategy=_in_bundle(pg, bundle))
            .remote()
        )
        return ray.get(probe, timeout=self.cfg.launch.ray_host_start_timeout_s)

    def _start(self, group: list[Bundle]) -> None:
        hub_keys, actor_keys = run_keys(self.cfg)
        tp, la = self.cfg.transport, self.cfg.launch
        port = tp.endpoint.rsplit(":", 1)[-1] if tp.endpoint else "*"
        learner_pg, actor_pg = self.pgs
        learner_bundles = [b for b in group if b.learner]
        ranks = self._ranks()
        per = ranks_per_node(self.cfg, ranks)
        order = learner_nodes(learner_pg)
        master = self._master(learner_pg, order[0][0]) if ranks > 1 else None
        passed = passed_env(os.environ)
        for node_rank, (index, _node, _ip) in enumerate(order):
            children = node_children(
                node_rank,
                per,
                ranks,
                master,
                la.ray_rendezvous_timeout_s,
                f"tcp://{{node_ip}}:{port}",
                str(self.out / "metrics.jsonl"),
                passed,
            )
            spec = self._spec(host_name(node_rank), children, hub_keys if node_rank == 0 else {}, False)
            self.watch.learners.append(self._host(spec, learner_bundles[index], learner_pg, index, True, 0))
        for i, bundle in enumerate(b for b in group if not b.learner):
            child = ChildSpec(
                name=f"actor{i}", module="atgrpo.cli.actor", args=["--id", f"actor{i}"], stdin_address=True
            )
            spec = self._spec(f"actor{i}", [child], actor_keys, True)
            self.watch.actors.append(self._host(spec, bundle, actor_pg, i, False, la.max_actor_restarts))

    def _await_learner_start(self) -> None:
        """Every learner host answers (its ranks started), or a `LaunchError` naming why not."""
        import ray

        timeout = self.cfg.launch.ray_host_start_timeout_s
        try:
            ray.get([h.handle.info.remote() for h in self.watch.learners], timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - a node lost while starting, a worker that cannot start
            raise LaunchError(
                f"the learner's processes did not start on the cluster within {timeout:g} s "
                f"(launch.ray_host_start_timeout_s): {first_line(exc)}"
            ) from None

    # -- stop ----------------------------------------------------------------------------------
    def _stop_all(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        hosts = [*self.watch.actors, *reversed(self.watch.learners)]
        stops = []
        for h in hosts:  # every host at once: SIGTERM to its children, their trees killed after the grace
            try:
                stops.append(h.handle.stop.remote())
            except Exception:  # noqa: BLE001 - dead, restarting or unreachable: killed below all the same
                pass
        if stops:
            ray.wait(stops, num_returns=len(stops), timeout=30)
        for h in hosts:
            try:
                ray.kill(h.handle, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        for pg in self.pgs:
            remove_placement_group(pg)
        self.pgs = []

    def run(self) -> int:
        """Run to the end; the exit status: 0, 1 (the learner failed, or every actor was lost), 130
        (Ctrl-C) or 143 (SIGTERM)."""
        check_ray_config(self.cfg)
        signal.signal(signal.SIGTERM, _raise_terminated)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self.logs.mkdir(parents=True, exist_ok=True)
        self._mark()
        interrupted = 0
        failure: str | None = None
        try:
            group = self._group()
            self.conn = connect(self.cfg, group)
            self._check_plan()
            # ray.init installs its own SIGTERM handlers (exit at once); a stop must checkpoint first.
            signal.signal(signal.SIGTERM, _raise_terminated)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.pgs = reserve(self.cfg, group, self.tag)
            self._start(group)
            self._await_learner_start()
            self.watch.progress_at = time.monotonic()  # the progress clock starts with the learner
            self.watch.loop()
        except RunProcessLost as exc:
            failure = str(exc)
        except KeyboardInterrupt as exc:
            interrupted = 143 if isinstance(exc, Terminated) else 130
            what = "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"
            print(f"\n{what}: asking the learner to checkpoint and stop (Ctrl-C again to kill)...", flush=True)
            try:
                if self.watch.learners and not self.watch.done:
                    self.watch.learners[0].handle.send_signal.remote(int(signal.SIGINT), "learner")
                    self.watch.wait_learner(GRACE_S)
            except (KeyboardInterrupt, RunProcessLost):
                pass
        finally:
            if self.conn is not None:
                self._stop_all()
                self.conn.close()
            self._unmark()
            self.watch.view.close(str(self.logs))
        if failure:
            print(failure, file=sys.stderr)
        if interrupted:
            return interrupted
        return 0 if self.watch.done and not failure and not self.watch.all_lost else 1


def _in_bundle(pg: Any, index: int) -> Any:
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index)


__all__ = ["RayRun", "check_ray_config", "ray_plan", "resolved", "run_keys"]
