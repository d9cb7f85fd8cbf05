"""What the Ray driver knows of each host of its run, how it watches them, and how it says why a
process of the run ended (`Watch`; `ray_run.RayRun` starts and stops the hosts).

What the watch decides:
- a learner rank that ends non-zero, whose host dies, that is stopped (state T) for `STOPPED_S`, or a
  learner that shows no progress (no event, no metrics row) for `transport.round_timeout_s`: the run
  cannot go on (`RunProcessLost`, naming the rank that ended first);
- an actor whose restarts are spent, or that is not placed again within
  `launch.ray_placement_timeout_s` (or not started again within `launch.ray_host_start_timeout_s`
  more): lost for good, said, and the run goes on; the last one lost stops the learner.

Every death is told with the process (its name, rank, pid), its node (address, host name, Ray node
id), how it ended (`keeper.describe_exit`, or that its host died with it) and its log's last lines.
A log is read through its host while the host answers, else from the driver's own view of out_dir
(the same file when out_dir is on the shared filesystem), else its path on its node is named.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atgrpo.config import RunConfig
from atgrpo.errors import RunProcessLost
from atgrpo.launch.events import LearnerView
from atgrpo.launch.keeper import describe_exit
from atgrpo.launch.ray_cluster import alive_nodes, bundle_nodes, describe_nodes
from atgrpo.launch.ray_host import read_tail

TAIL_LINES = 30
"""Lines of a dead process's log the driver prints."""
POLL_S = 0.5
"""How often the driver asks the hosts how their processes are."""
SETTLE_S = 3.0
"""After a learner rank ends badly, how long the driver waits for the others' ends, so that it names
the rank that ended first (the others fail after it: a collective with a dead peer)."""
STOPPED_S = 30.0
"""How long a learner rank may be stopped (state T: SIGSTOP, a debugger) before the run ends."""


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


class Watch:
    """The driver's poll of every host of the run (`loop`), and what it makes of their answers."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.out = Path(cfg.run.out_dir)
        self.view = LearnerView(cfg, self.hub_ready, None)
        self.address: str | None = None
        self.learners: list[Host] = []
        """One per node of the learner, rank 0's first."""
        self.actors: list[Host] = []
        self.done = False
        """Rank 0 exited 0."""
        self.all_lost = False
        self.progress_at = time.monotonic()

    def hub_ready(self, address: str) -> None:
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
                raise RunProcessLost(self._learner_report(first_line(exc))) from None
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

    def check(self, host: Host) -> None:
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
        progress clock's (`loop`)."""
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
                lines.append(f"  {h.name}: its host does not answer ({first_line(exc)})")
                continue
            for child in info["children"]:
                lines.append(with_tail(f"  {where(info, child)}: {how(child)}.", h, child, 5))
        timeout = self.cfg.transport.round_timeout_s
        return self._closing(
            f"the learner showed no progress (no event, no metrics row) for {timeout:g} s "
            "(transport.round_timeout_s): a rank hangs, or waits for one that does. Its ranks:\n" + "\n".join(lines)
        )

    def pump(self) -> None:
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

    def loop(self) -> None:
        while True:
            self.pump()
            for host in [*self.learners, *self.actors]:
                self.check(host)
            if self.done:
                self.pump()
                return
            if time.monotonic() - self.progress_at > self.cfg.transport.round_timeout_s:
                raise RunProcessLost(self._no_progress())
            time.sleep(POLL_S)

    def wait_learner(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.done:
            self.pump()
            for host in self.learners:
                self.check(host)
            time.sleep(POLL_S)
        self.pump()


def _dead_for_good(handle: Any) -> bool:
    """Ray will not restart this actor again (its state is DEAD, not RESTARTING)."""
    from ray._private.state import actors

    try:
        return actors(actor_id=handle._actor_id.hex()).get("State") == "DEAD"
    except Exception:  # noqa: BLE001 - no state: treat as gone
        return True


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["Host", "Watch", "first_line", "how", "tail_of", "where", "with_tail"]
