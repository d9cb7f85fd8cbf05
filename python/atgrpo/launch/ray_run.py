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
3. polls the hosts: learner events and metrics rows drive the same output and progress bar as the
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

import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from atgrpo.config import RunConfig, dump_config
from atgrpo.errors import LaunchError, RunProcessLost
from atgrpo.launch.events import LearnerView
from atgrpo.launch.local import GRACE_S, Terminated, _raise_terminated
from atgrpo.launch.ray_cluster import (
    NAMESPACE,
    Bundle,
    alive_nodes,
    bundle_nodes,
    bundles,
    cluster_gpu_bytes,
    connect,
    describe_nodes,
    learner_nodes,
    ranks_per_node,
    reserve,
)
from atgrpo.launch.ray_host import SEEN_PREFIX, ChildSpec, HostSpec, ProcessHost
from atgrpo.launch.ray_learner import host_name, node_children, passed_env
from atgrpo.launch.ray_prepare import check_ray_config, ray_plan, resolved, run_keys
from atgrpo.launch.ray_watch import Host, how, where, with_tail

POLL_S = 0.5
"""How often the driver asks the hosts how their processes are."""
SETTLE_S = 3.0
"""After a learner rank ends badly, how long the driver waits for the others' ends, so that it names
the rank that ended first (the others fail after it: a collective with a dead peer)."""
STOPPED_S = 30.0
"""How long a learner rank may be stopped (state T: SIGSTOP, a debugger) before the run ends."""


class RayRun:
    def __init__(self, cfg: RunConfig, n_actors: int) -> None:
        self.cfg = resolved(cfg)
        self.n_actors = n_actors
        self.out = Path(self.cfg.run.out_dir)
        self.logs = self.out / "logs"
        self.tag = f"{self.cfg.run.name}-{uuid.uuid4().hex[:8]}"
        self.marker = f"{SEEN_PREFIX}{self.tag}"
        self.view = LearnerView(self.cfg, self._hub_ready, None)
        self.address: str | None = None
        self.learners: list[Host] = []
        """One per node of the learner, rank 0's first."""
        self.actors: list[Host] = []
        self.pgs: list[Any] = []
        self.conn: Any = None
        self.done = False
        """Rank 0 exited 0."""
        self.all_lost = False
        self.progress_at = time.monotonic()

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
            self.learners.append(self._host(spec, learner_bundles[index], learner_pg, index, True, 0))
        for i, bundle in enumerate(b for b in group if not b.learner):
            child = ChildSpec(
                name=f"actor{i}", module="atgrpo.cli.actor", args=["--id", f"actor{i}"], stdin_address=True
            )
            spec = self._spec(f"actor{i}", [child], actor_keys, True)
            self.actors.append(self._host(spec, bundle, actor_pg, i, False, la.max_actor_restarts))

    def _await_learner_start(self) -> None:
        """Every learner host answers (its ranks started), or a `LaunchError` naming why not."""
        import ray

        timeout = self.cfg.launch.ray_host_start_timeout_s
        try:
            ray.get([h.handle.info.remote() for h in self.learners], timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - a node lost while starting, a worker that cannot start
            raise LaunchError(
                f"the learner's processes did not start on the cluster within {timeout:g} s "
                f"(launch.ray_host_start_timeout_s): {_first_line(exc)}"
            ) from None

    # -- supervise -----------------------------------------------------------------------------
    def _hub_ready(self, address: str) -> None:
        self.address = address
        self.view.say(f"hub at {address}")

    def _record(self, host: Host, info: dict) -> None:
        """A new incarnation of `host`: one processes.jsonl row per child."""
        restarted = host.incarnation != -1
        host.incarnation = info["host_pid"]
        keep = ("node_id", "node_ip", "hostname", "host_pid", "started")
        with open(self.out / "processes.jsonl", "a") as f:
            for child in info["children"]:
                row = {
                    "time": time.time(),
                    "event": "restarted" if restarted else "started",
                    "host": info["host"],
                    **{k: info[k] for k in keep},
                    **{k: child[k] for k in ("name", "pid", "keeper_pid", "rank", "local_rank", "node_rank", "log")},
                }
                f.write(json.dumps(row) + "\n")
        if restarted:
            self.view.say(
                f"{host.name} restarted by Ray on {info['node_ip']} (node {info['node_id'][:8]}); "
                "its units are reissued"
            )

    def _poll(self, host: Host) -> dict | None:
        """The host's answer to the poll in flight (a new poll is sent), or None while it has none.
        A learner host that died raises `RunProcessLost`; an actor host that died is looked at again."""
        import ray
        from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError

        if host.pending is None:
            host.pending = host.handle.info.remote()
        ready, _ = ray.wait([host.pending], timeout=0)
        if not ready:
            self._silent(host)
            return None
        ref, host.pending = host.pending, None
        try:
            info = ray.get(ref, timeout=10)
        except ActorDiedError as exc:
            if host.learner:
                raise RunProcessLost(self._learner_report(f"its host died ({_first_line(exc)})")) from None
            if _dead_for_good(host.handle):
                self._lost(
                    host,
                    f"it died after {host.restarts} restart(s) by Ray, all that launch.max_actor_restarts = "
                    f"{host.restarts} allows",
                )
            return None
        except (RayActorError, GetTimeoutError):
            self._silent(host)
            return None
        host.silent_since = None
        if info["host_pid"] != host.incarnation:
            self._record(host, info)
        host.info = info
        if info["blind"]:
            raise RunProcessLost(f"{host.name}: {info['blind']}")
        return info

    def _check(self, host: Host) -> None:
        """One look at a host: record a new incarnation, hand it the hub's address, note an exit."""
        if host.gone:
            return
        info = self._poll(host)
        if info is None:
            return
        now = time.monotonic()
        for child in info["children"]:
            rc = child["rc"]
            if host.learner:
                if rc not in (None, 0):
                    raise RunProcessLost(self._learner_report())
                if rc == 0 and child["name"] == "learner":
                    self.done = True
                if child["state"] in ("T", "t"):
                    since = host.stopped_since.setdefault(child["name"], now)
                    if now - since > STOPPED_S:
                        raise RunProcessLost(
                            with_tail(
                                f"learner {where(info, child)} has been stopped (state {child['state']}: "
                                f"SIGSTOP or a debugger) for {now - since:.0f} s; the other ranks wait for it",
                                host,
                                child,
                            )
                        )
                else:
                    host.stopped_since.pop(child["name"], None)
            elif rc == 0:
                host.gone = True  # told to stop by the hub: done
        if not host.learner and not info["has_address"] and self.address:
            host.handle.hand_address.remote(self.address)

    def _silent(self, host: Host) -> None:
        """A host without an answer: an actor's not placed again within `ray_placement_timeout_s`
        (its node gone, no room elsewhere), or not started again within `ray_host_start_timeout_s`
        more, is lost for good. A learner host's silence is Ray's to detect (a dead node) or the
        progress clock's (`_loop`)."""
        now = time.monotonic()
        if host.silent_since is None:
            host.silent_since = now
            return
        la = self.cfg.launch
        waited = now - host.silent_since
        if host.learner or waited < la.ray_placement_timeout_s:
            return
        node = bundle_nodes(host.pg).get(host.bundle, "")
        alive = {n["NodeID"] for n in alive_nodes()}
        was = f" (it ran on node {host.info['node_ip']}, Ray node {host.info['node_id'][:8]})" if host.info else ""
        if node not in alive:
            self._lost(
                host,
                f"it was not placed again within {la.ray_placement_timeout_s:g} s (launch.ray_placement_timeout_s): "
                f"its node is gone{was} and no live node has room for its bundle {host.resources}. "
                f"Nodes now: {describe_nodes(alive_nodes())}",
            )
        elif waited > la.ray_placement_timeout_s + la.ray_host_start_timeout_s:
            self._lost(
                host,
                f"it did not start again within {waited:.0f} s (launch.ray_placement_timeout_s + "
                f"launch.ray_host_start_timeout_s){was}",
            )

    def _lost(self, host: Host, why: str) -> None:
        """An actor lost for good, said with its reason; the run goes on without it, or, when it was
        the last, the learner is stopped."""
        import ray

        host.gone = True
        try:
            ray.kill(host.handle, no_restart=True)  # a restart still pending (placement) is called off
        except Exception:  # noqa: BLE001 - already dead
            pass
        text = f"{host.name} is lost for good: {why}."
        if host.info and host.info["children"]:
            child = host.info["children"][0]
            text = with_tail(f"{text} Its last start: {where(host.info, child)}.", host, child, 15)
        left = sum(not a.gone for a in self.actors)
        if left:
            text += f"\nThe run goes on with {left} actor(s)."
        else:
            text += "\nEvery actor is lost: the learner is asked to stop (checkpoint, evaluation); the run exits 1."
            self.all_lost = True
            self.learners[0].handle.send_signal.remote(int(signal.SIGINT), "learner")
        print(text, file=sys.stderr, flush=True)

    def _learner_report(self, host_death: str | None = None) -> str:
        """Why the learner ended: after `SETTLE_S` for the other ranks' ends, the rank that ended
        first (or the ranks of a host that died), its node, how, and its log's tail."""
        import ray

        deadline = time.monotonic() + SETTLE_S
        answers: dict[str, dict | None] = {}
        while True:
            for h in self.learners:
                try:
                    answers[h.name] = ray.get(h.handle.info.remote(), timeout=5)
                except Exception:  # noqa: BLE001 - its host is dead
                    answers[h.name] = None
            ended = [c for a in answers.values() if a for c in a["children"] if c["rc"] is not None]
            if all(a is None or all(c["rc"] is not None for c in a["children"]) for a in answers.values()):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(POLL_S)
        dead_hosts = [h for h in self.learners if answers[h.name] is None]
        if dead_hosts and (host_death or not ended):
            h = dead_hosts[0]
            info = h.info or {}
            names = ", ".join(c["name"] for c in info.get("children", [])) or h.name
            text = (
                f"learner rank(s) {names} on node {info.get('node_ip', '?')} ({info.get('hostname', '?')}) died "
                f"with their host {h.name}: {host_death or 'it no longer answers'} (the node was lost, or the "
                "host's process was killed)"
            )
            child = info.get("children", [None])[0]
            return self._closing(with_tail(text, h, child) if child else text)
        if not ended:
            return self._closing(f"the learner failed: {host_death or 'a rank ended'}, and no rank's end can be read")
        ended.sort(key=lambda c: c["ended"] or float("inf"))
        first = ended[0]
        host, info = next(
            (h, a) for h in self.learners if (a := answers[h.name]) and any(c is first for c in a["children"])
        )
        others = "; ".join(f"{c['name']}: {how(c)}" for c in ended[1:])
        text = f"learner {where(info, first)} ended first: {how(first)}" + (f"; then {others}" if others else "")
        return self._closing(with_tail(text, host, first))

    def _closing(self, text: str) -> str:
        return (
            f"{text}\nLearner ranks are not restarted: the run ends. A new atgrpo-train on the same "
            "out_dir resumes from its last checkpoint."
        )

    def _no_progress(self) -> str:
        """Every learner rank, where and how it is, when the learner shows no progress."""
        import ray

        lines = []
        for h in self.learners:
            try:
                info = ray.get(h.handle.info.remote(), timeout=10)
            except Exception as exc:  # noqa: BLE001
                lines.append(f"  {h.name}: its host does not answer ({_first_line(exc)})")
                continue
            for child in info["children"]:
                lines.append(with_tail(f"  {where(info, child)}: {how(child)}.", h, child, 5))
        timeout = self.cfg.transport.round_timeout_s
        return self._closing(
            f"the learner showed no progress (no event, no metrics row) for {timeout:g} s "
            "(transport.round_timeout_s): a rank hangs, or waits for one that does. Its ranks:\n" + "\n".join(lines)
        )

    def _pump(self) -> None:
        """The learner's events and metrics since the last call, into the view."""
        import ray

        try:
            lines, rows = ray.get(self.learners[0].handle.take.remote(), timeout=30)
        except Exception:  # noqa: BLE001 - the learner's host died: _check reports it
            return
        if lines or rows:
            self.progress_at = time.monotonic()
        for line in lines:
            self.view.line(line)
        self.view.feed_metrics(rows)

    def _loop(self) -> None:
        while True:
            self._pump()
            for host in [*self.learners, *self.actors]:
                self._check(host)
            if self.done:
                self._pump()
                return
            if time.monotonic() - self.progress_at > self.cfg.transport.round_timeout_s:
                raise RunProcessLost(self._no_progress())
            time.sleep(POLL_S)

    def _wait_learner(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.done:
            self._pump()
            for host in self.learners:
                self._check(host)
            time.sleep(POLL_S)
        self._pump()

    # -- stop ----------------------------------------------------------------------------------
    def _stop_all(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        hosts = [*self.actors, *reversed(self.learners)]
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
            self.progress_at = time.monotonic()  # the progress clock starts with the learner
            self._loop()
        except RunProcessLost as exc:
            failure = str(exc)
        except KeyboardInterrupt as exc:
            interrupted = 143 if isinstance(exc, Terminated) else 130
            what = "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"
            print(f"\n{what}: asking the learner to checkpoint and stop (Ctrl-C again to kill)...", flush=True)
            try:
                if self.learners and not self.done:
                    self.learners[0].handle.send_signal.remote(int(signal.SIGINT), "learner")
                    self._wait_learner(GRACE_S)
            except (KeyboardInterrupt, RunProcessLost):
                pass
        finally:
            if self.conn is not None:
                self._stop_all()
                self.conn.close()
            self._unmark()
            self.view.close(str(self.logs))
        if failure:
            print(failure, file=sys.stderr)
        if interrupted:
            return interrupted
        return 0 if self.done and not failure and not self.all_lost else 1


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
