"""The actor loop: ask the hub for work, load exactly the weights a unit names, roll out, stream back.

One actor process holds one rollout engine per policy it serves and runs one unit at a time. It never
trains and never decides versions: a `WorkUnit` names the version of every policy, and the actor
fetches those weights (pull: an actor that joined late or missed a publish just asks) before it
generates a single token. Every hub round trip has a stall clock (`transport.request_timeout_s`:
for weights, per chunk, so a reply of any size arrives as long as it keeps coming, and the hub
keeps the unit leased while it does); when it passes, the hub is taken as gone: the actor drops the unit in hand and says Hello again with backoff
(a restarted learner resumes on the same address) for up to `transport.reconnect_s`, then exits with
an error naming what it waited for instead of hanging. While it rolls out a unit, the
actor shows progress after every generate call that ends `HEARTBEAT_FRACTION` of the lease or more
after its last message about the unit (a `UnitProgress`; a streamed batch counts too), so a unit
of long turns, or an evaluation unit that streams nothing, keeps its lease as long as its
generate calls keep finishing. An actor that makes no progress for its lease
(`transport.unit_timeout_s` without a batch, a progress report, a weights request or weights
arriving) finds its next message about the unit refused: it drops that unit (the hub has given it
to another actor) and asks for the next one.
"""

from __future__ import annotations

import logging
import os
import time

import msgspec
import torch

from atgrpo.actor.engine_start import defer_engines, engine_start
from atgrpo.config import RunConfig
from atgrpo.config.lora import lora_bases
from atgrpo.engines.factory import open_engine, rollout_dtype, training_sampling
from atgrpo.errors.runtime import ActorError, UnitLost
from atgrpo.messages import (
    PROTOCOL_VERSION,
    Hello,
    NoWork,
    ProgressAck,
    Refused,
    Sample,
    SampleAck,
    SampleBatch,
    Shutdown,
    UnitProgress,
    Welcome,
    WorkRequest,
    WorkUnit,
)
from atgrpo.paths import policy_dir
from atgrpo.transport.endpoints import ActorClient
from atgrpo.transport.errors import TransportTimeout
from atgrpo.transport.security import require_keys
from atgrpo.transport.weight_store import StoreReader
from atgrpo.units import unit_seed
from atgrpo.workflows.base import PolicyHandle
from atgrpo.workflows.factory import make_workflow

log = logging.getLogger("atgrpo.actor")

RECONNECT_FIRST_S = 0.5
"""First wait before saying Hello again to a silent hub; doubled after each try."""
RECONNECT_MAX_S = 8.0
"""Longest wait between two tries."""
RECONNECT_PROBE_S = 5.0
"""How long one Hello of a rejoin waits for the answer (at most `transport.request_timeout_s`)."""
HEARTBEAT_FRACTION = 0.25
"""A `UnitProgress` goes out after a generate call once this fraction of `transport.unit_timeout_s`
has passed since the actor last told the hub about its unit: a lease is renewed well before it
ends, and a unit of quick calls costs no extra round trips."""


def make_engine(cfg: RunConfig, policy: str, engines: int = 1) -> PolicyHandle:
    engine, tokenizer = open_engine(
        policy_dir(cfg, policy),
        cfg.rollout,
        policy=policy,
        dtype=rollout_dtype(cfg),
        version=-1,
        engines_per_process=engines,
    )
    return PolicyHandle(engine=engine, tokenizer=tokenizer)


def make_engines(cfg: RunConfig, policies: list[str]) -> dict[str, PolicyHandle]:
    """A handle per policy: an engine of its own for a full policy, one shared engine per group of
    LoRA policies on one base, each policy seeing it with its own adapter (`engines.lora`)."""
    groups = [[p for p in g if p in policies] for g in lora_bases(cfg)]
    groups = [g for g in groups if g]
    in_group = {p for g in groups for p in g}
    full = [p for p in policies if p not in in_group]
    engines = len(full) + len(groups)  # the device's memory is shared by engines, not by policies
    handles = {p: make_engine(cfg, p, engines) for p in full}
    for g in groups:
        from atgrpo.engines.lora import open_adapter_engines

        opened = open_adapter_engines(cfg, g, policy_dir(cfg, g[0]), rollout_dtype(cfg), 1.0 / engines)
        handles.update({p: PolicyHandle(engine=e, tokenizer=t) for p, (e, t) in opened.items()})
    return handles


class Actor:
    def __init__(self, cfg: RunConfig, address: str, actor_id: str | None = None) -> None:
        self.cfg = cfg
        self.actor_id = actor_id or f"actor-{os.uname().nodename}-{os.getpid()}"
        tp = cfg.transport
        require_keys(address, tp.curve_keys, tp.insecure, "actor")
        self.client = ActorClient(
            address,
            self.actor_id,
            timeout_s=tp.request_timeout_s,
            max_message_bytes=tp.max_message_bytes,
            curve_keys=tp.curve_keys,
            curve_actor=tp.curve_actor,
        )
        self.workflow = make_workflow(cfg)
        self.policies = sorted(set(cfg.agent_policy().values()))
        self.handles: dict[str, PolicyHandle] = {}
        self.idle_s = 0.0
        self.sync_s = 0.0
        self.units_lost = 0
        self.rejoins = 0
        self.sampling = training_sampling(cfg.rollout)
        self.store = (
            # A write still under way is waited for half a lease at most: reading must fit in the rest.
            StoreReader(
                tp.weights_store, cfg.run.name, wait_s=tp.weights_store_wait_s, write_wait_s=tp.unit_timeout_s / 2
            )
            if tp.weights_store
            else None
        )
        """Weights read from the shared store, the hub as the fallback (`transport.weight_store`); it
        reads the versions of the learner session each `Welcome` names (`_join`)."""
        self._told_hub = 0.0
        """When the hub last heard about the unit in hand (lease granted, batch or progress sent)."""

    def _ask(self, msg):
        reply = self.client.request(msg)
        if isinstance(reply, Refused):
            raise ActorError(f"hub refused {type(msg).__name__}: {reply.reason}")
        return reply

    def _join(self, timeout_s: float | None = None) -> Welcome:
        welcome = self.client.request(
            Hello(PROTOCOL_VERSION, self.actor_id, self.cfg.run.name, self.policies), timeout_s
        )
        if isinstance(welcome, Refused):
            raise ActorError(f"hub refused Hello: {welcome.reason}")
        if not isinstance(welcome, Welcome):
            raise ActorError(f"expected welcome, got {type(welcome).__name__}")
        if self.store is not None:
            try:
                self.store.join(welcome.run_nonce)  # a restarted learner is a new session, its versions new
            except ValueError as exc:
                raise ActorError(f"hub's welcome: {exc}") from None
        return welcome

    def _rejoin(self, cause: TransportTimeout) -> None:
        """The hub went silent (stopped, restarted, unreachable): say Hello again with backoff until it
        answers, for at most `transport.reconnect_s`; then give up naming what was awaited."""
        budget = self.cfg.transport.reconnect_s
        start = time.monotonic()
        delay = RECONNECT_FIRST_S
        log.warning("%s: no answer from the hub (%s); trying to rejoin for up to %.0f s", self.actor_id, cause, budget)
        while time.monotonic() - start < budget:
            time.sleep(min(delay, max(0.0, budget - (time.monotonic() - start))))
            delay = min(2 * delay, RECONNECT_MAX_S)
            try:
                self._join(timeout_s=min(self.cfg.transport.request_timeout_s, RECONNECT_PROBE_S))
            except TransportTimeout:
                continue
            self.rejoins += 1
            log.info("%s: rejoined the hub after %.1f s", self.actor_id, time.monotonic() - start)
            return
        raise ActorError(
            f"hub at {self.client.address} did not answer a Hello for {budget:.0f} s after it went silent "
            f"(transport.reconnect_s); last error: {cause}"
        )

    def run(self, max_units: int | None = None) -> int:
        """Serve until the hub says `Shutdown` (or `max_units` units); returns the number of units done.
        A hub that goes silent is rejoined (`_rejoin`); the unit in hand, if any, is dropped (the
        hub reassigns it)."""
        welcome = self._join()
        if not defer_engines(self.cfg):
            self._open_engines()
        log.info("%s joined run %s serving %s", self.actor_id, welcome.run_id, self.policies)
        done = 0
        while max_units is None or done < max_units:
            try:
                finished = self._serve_one()
            except TransportTimeout as exc:
                if self.cfg.transport.reconnect_s <= 0:
                    raise
                self._rejoin(exc)
                continue
            if finished is None:
                break
            done += finished
        self.client.close()
        close = getattr(self.workflow, "close", None)  # code and math hold a sandbox
        if close is not None:
            close()
        return done

    def _serve_one(self) -> int | None:
        """Ask for work and do it: 1 if a unit was done, 0 if not (no work, or the unit was lost),
        None on `Shutdown`."""
        idle_since = time.perf_counter()
        while True:
            reply = self._ask(WorkRequest(self.actor_id))
            if isinstance(reply, Shutdown):
                log.info("%s: shutdown (%s)", self.actor_id, reply.reason)
                return None
            if isinstance(reply, NoWork):
                for handle in self.handles.values():
                    handle.engine.sleep()  # the learner may be training on this GPU (colocated)
                time.sleep(reply.retry_after_s)
                continue
            if not isinstance(reply, WorkUnit):
                raise ActorError(f"expected a work unit, got {type(reply).__name__}")
            self.idle_s += time.perf_counter() - idle_since
            self._open_engines()  # colocated: now, while the learner waits for this unit (`engine_start`)
            try:
                self._do_unit(reply)
            except UnitLost as exc:
                self.units_lost += 1
                log.warning(
                    "%s: dropped unit %d (%s); is transport.unit_timeout_s too short for it?",
                    self.actor_id,
                    reply.unit_id,
                    exc,
                )
                return 0
            return 1

    def _open_engines(self) -> None:
        """Construct the engines once, one process at a time per GPU (`engine_start`)."""
        if self.handles:
            return
        with engine_start(self.cfg):
            self.handles = make_engines(self.cfg, self.policies)

    def _sync(self, unit: WorkUnit) -> None:
        start = time.perf_counter()
        for policy, version in unit.versions.items():
            handle = self.handles.get(policy)
            if handle is None or handle.engine.version == version:
                continue
            if self.store is not None:
                _, tensors = self.store.fetch(self.client, policy, version)
            else:
                _, tensors = self.client.request_weights(policy, version)
            handle.engine.load_weights(version, tensors)
        self.sync_s += time.perf_counter() - start

    def _heartbeat(self, unit: WorkUnit) -> None:
        """After a generate call: renew the unit's lease if the hub has not heard of it for a while."""
        if time.monotonic() - self._told_hub < HEARTBEAT_FRACTION * self.cfg.transport.unit_timeout_s:
            return
        reply = self.client.request(UnitProgress(self.actor_id, unit.unit_id))
        self._told_hub = time.monotonic()
        if isinstance(reply, Refused):
            raise UnitLost(f"hub refused its progress report: {reply.reason}")
        if not isinstance(reply, ProgressAck):
            raise ActorError(f"expected a progress ack for unit {unit.unit_id}, got {type(reply).__name__}")

    def _stream(self, unit: WorkUnit, samples: list[Sample], last: bool, **extra) -> None:
        reply = self.client.request(SampleBatch(self.actor_id, unit.unit_id, samples, last, **extra))
        self._told_hub = time.monotonic()
        if isinstance(reply, Refused):
            raise UnitLost(f"hub refused its samples: {reply.reason}")
        if not isinstance(reply, SampleAck):
            raise ActorError(f"expected an ack for unit {unit.unit_id}, got {type(reply).__name__}")
        if reply.rejected:
            log.warning("unit %d: hub rejected %d samples (stale)", unit.unit_id, reply.rejected)

    def _do_unit(self, unit: WorkUnit) -> None:
        self._told_hub = time.monotonic()  # the lease was granted with the unit (weights arriving renew it too)
        self._sync(unit)
        result = self.workflow.run(
            unit,
            self.handles,
            self.sampling,
            run_id=self.cfg.run.name,
            seed=unit_seed(self.cfg.run.seed, unit),
            on_groups=(lambda group: self._stream(unit, group, False)) if not unit.greedy else None,
            on_progress=lambda: self._heartbeat(unit),
        )
        timings = msgspec.structs.replace(result.timings, idle_s=self.idle_s, sync_s=self.sync_s)
        self.idle_s = self.sync_s = 0.0
        self._stream(unit, [], True, env_results=result.envs, timings=timings, tool_programs=result.tool_programs)


def configure_threads(n: int) -> None:
    torch.set_num_threads(max(1, n))
    os.environ.setdefault("OMP_NUM_THREADS", str(n))


__all__ = ["HEARTBEAT_FRACTION", "Actor", "ActorError", "UnitLost", "configure_threads", "make_engine", "make_engines"]
