"""The hub: work units, leases, sample intake, weight serving. Runs on the learner's rank 0.

Threads and ownership: the hub's serve loop runs in its own thread and is the only user of the
ROUTER socket. The orchestrator (learner rank 0's main thread) talks to it through `open_round`,
`take`, `wait_round`, `publish` and `stop`, which only touch state under `self._lock`. So actors are
answered while the learner trains, leases keep expiring, and a dead actor is noticed at any time.

Rounds: several may be open at once (a pipelined learner opens step s+1..s+k while it trains step
s). Actors get units of evaluation rounds first, then of the oldest step. A unit names the policy
versions current when it is LEASED (not when its round opened), so an actor always rolls out with
the newest published weights and switches versions only between units. A round's units are handed
to the learner as they commit (`take`: a streaming learner trains on them while the rest of the step
is rolled out), or all at once (`wait_round`). Committed units the learner has not taken yet can be
saved with a checkpoint (`untaken`) and given back to `open_round` on resume.

Units and leases: a step's env seeds are cut into units. A unit handed to an actor is leased for
`unit_timeout_s`; an actor proves it is alive by streaming `SampleBatch`es, each of which renews the
lease. An expired lease puts the unit back at the front of the queue and drops what the unit had
staged, so a reassigned unit is rolled out whole by its new actor and a step always ends with the
same samples as if nobody had died. Late batches for a unit that is no longer leased to their sender
are refused and counted (`hub/orphan_batches`).

Samples are staged per unit and admitted through the `VersionLedger` (the one version check) when
their batch arrives; a unit's samples join the step only when its `last` batch arrives. A policy's
current version changes only in `publish`, under the lock, together with the weights units name.

Intake (`intake.py`): every admitted sample is checked against its unit and policy before it is
staged, and the unit is checked whole with its `last` batch. A unit fault (what no honest actor
sends) drops the whole unit, staged samples included, puts it back at the front of the queue and
answers `Refused`; a group fault (a sample over `train.micro_batch_tokens`) drops that group and
keeps the rest. Every refusal is counted under its reason, `hub/rejected_<reason>` (a sample for the
ledger's reasons and for group faults, a unit for unit faults; `hub/rejected_total` sums them), and
logged once per (actor, reason). A connection with `max_refused_units` refused units is cut off for
the rest of the run: its leases go back to the queue at once, and from then on it gets `Shutdown` to
a `WorkRequest` and `Refused` to anything else, whatever actor id it claims (`hub/peers_cut_off`).
A unit is leased to a connection, and only that connection may send its samples: an actor id is a
claim anyone can make, so a peer claiming an honest actor's id can neither feed that actor's units
nor get it cut off. Without CURVE keys a peer can come back on a new connection; the bound caps what
each connection costs.
The learner always builds its hub with `limits`; a hub without them checks version stamps only.
`hub/samples_dropped` counts admitted samples that will not train (staged with a refused or
reassigned unit, or in a dropped group). Nothing a peer sends raises in the hub thread: a bug one
message trips is that message's `Refused` (`hub/handler_errors`, logged with its traceback).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import msgspec
import torch

from atgrpo.learner.intake import Fault, IntakeLimits, UnitIntake
from atgrpo.learner.ledger import VersionLedger
from atgrpo.messages import (
    PROTOCOL_VERSION,
    EnvResult,
    Hello,
    NoWork,
    Refused,
    Sample,
    SampleAck,
    SampleBatch,
    Shutdown,
    UnitTimings,
    WeightsRequest,
    Welcome,
    WorkRequest,
    WorkUnit,
)
from atgrpo.transport.endpoints import HubEndpoint
from atgrpo.units import cut_units, in_step_order
from atgrpo.transport.tensors import weights_to_messages

log = logging.getLogger("atgrpo.hub")

MAX_REFUSED_UNITS = 3
"""Refused units after which an actor is cut off. An honest actor has none (its samples are what a
unit asks for), so three leave room for one odd bug report and still stop a peer sending garbage."""
_MAX_DETAIL = 300


class CommittedUnit(msgspec.Struct, array_like=True):
    """A unit whose last batch is in: everything it produced, admitted and checked."""

    unit: WorkUnit
    samples: list[Sample]
    envs: list[EnvResult]
    timings: UnitTimings


@dataclass
class StepData:
    """What a finished step hands the learner."""

    step: int
    samples: list[Sample]
    envs: list[EnvResult]
    timings: UnitTimings
    """Summed over the step's units, so over all actors."""
    wall_s: float
    staleness: list[int] = field(default_factory=list)
    """Per sample, how many versions behind its policy's current one it was when the learner took it."""

    @staticmethod
    def of(step: int, units: list[CommittedUnit], wall_s: float, staleness) -> "StepData":
        """The step made of `units`, in canonical order; `staleness(sample)` as the ledger says it now."""
        samples, envs = in_step_order([s for u in units for s in u.samples], [e for u in units for e in u.envs])
        timings = UnitTimings()
        for u in units:
            timings = timings + u.timings
        return StepData(step, samples, envs, timings, wall_s, [staleness(s) for s in samples])

    @staticmethod
    def merge(step: int, parts: list["StepData"], wall_s: float) -> "StepData":
        """One step's data from the parts it was taken in (a streaming learner's), in canonical order."""
        stale = {id(s): st for p in parts for s, st in zip(p.samples, p.staleness)}
        samples, envs = in_step_order([s for p in parts for s in p.samples], [e for p in parts for e in p.envs])
        timings = UnitTimings()
        for p in parts:
            timings = timings + p.timings
        return StepData(step, samples, envs, timings, wall_s, [stale[id(s)] for s in samples] if stale else [])


@dataclass
class _Lease:
    unit: WorkUnit
    actor: str
    deadline: float
    peer: bytes = b""
    """The connection the unit was handed to: only it may send the unit's samples (an actor id alone
    is a claim anyone can make)."""


@dataclass
class _Round:
    """One step's (or one evaluation's) units in flight."""

    round_id: int
    step: int
    split: str
    pending: deque[WorkUnit]
    total: int
    leases: dict[int, _Lease] = field(default_factory=dict)
    staged: dict[int, UnitIntake] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    committed: list[CommittedUnit] = field(default_factory=list)
    """Committed units the learner has not taken yet."""
    taken: int = 0
    started: float = field(default_factory=time.monotonic)
    last_progress: float = field(default_factory=time.monotonic)

    @property
    def complete(self) -> bool:
        return len(self.done) == self.total

    @property
    def drained(self) -> bool:
        return self.taken == self.total


class Hub:
    def __init__(
        self,
        endpoint: HubEndpoint,
        ledger: VersionLedger,
        *,
        unit_timeout_s: float,
        limits: IntakeLimits | None = None,
        keep_versions: int = 1,
        retry_after_s: float = 0.05,
        max_refused_units: int = MAX_REFUSED_UNITS,
    ) -> None:
        self.endpoint = endpoint
        self.ledger = ledger
        self.limits = limits
        """What samples are checked against; None: versions only (tests with hand-made samples)."""
        if limits is None:
            log.warning("hub without intake limits: samples are checked for their version stamp only")
        self.max_refused_units = max(1, max_refused_units)
        self.unit_timeout_s = unit_timeout_s
        self.keep_versions = max(1, keep_versions)
        self.retry_after_s = retry_after_s
        self.counters: Counter[str] = Counter({"units_refused": 0, "samples_dropped": 0, "peers_cut_off": 0})
        self.rejected: Counter[str] = Counter()
        """Intake refusals by reason (the ledger counts its own)."""
        self.refused_units: Counter[bytes] = Counter()
        """Per connection: an actor id is only a claim (anyone may send any id), a connection is not."""
        """actor id -> units of it refused."""
        self.cut_off: dict[str, str] = {}
        """actor id -> why it was cut off."""
        self._cut_peers: set[bytes] = set()
        self._logged: set[tuple[str, str]] = set()
        self.actors: dict[str, float] = {}
        """actor id -> last time it was heard from."""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._rounds: dict[int, _Round] = {}
        self._next_round = 0
        self._next_unit = 0
        self._weights: dict[str, dict[int, list[list[Any]]]] = {}
        """policy -> version -> the chunk messages of its weights reply (`weights_to_messages`)."""
        self._stopping: str | None = None
        self._thread = threading.Thread(target=self._serve, name="atgrpo-hub", daemon=True)
        self._error: BaseException | None = None

    # -- learner side ----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def publish(self, policy: str, version: int, tensors: dict[str, torch.Tensor]) -> None:
        """Make `policy` at `version` fetchable and current: from now on units name it, and the
        ledger admits samples against it. Versions beyond `keep_versions` are dropped. The one place
        a version changes while actors run."""
        messages = weights_to_messages(policy, version, tensors)  # checksums once, reused for every actor
        with self._lock:
            self.ledger.set_version(policy, version)
            versions = self._weights.setdefault(policy, {})
            versions[version] = messages
            for old in sorted(versions)[: -self.keep_versions]:
                del versions[old]

    def open_round(
        self, step: int, seeds: list[int], envs_per_unit: int, *, split: str, greedy: bool,
        restored: list[CommittedUnit] | None = None,
    ) -> int:
        """Queue a step's (or an evaluation's) seeds as units; returns the round's id. `restored`:
        units of this step committed before a restart (from `untaken`), which are not rolled out again."""
        with self._lock:
            if any(r.step == step and r.split == split for r in self._rounds.values()):
                raise RuntimeError(f"a {split} round for step {step} is already open")
            units = cut_units(
                self._next_unit, step, seeds, envs_per_unit, split=split, versions=self.ledger.versions, greedy=greedy
            )
            self._next_unit += len(units)
            rnd = _Round(self._next_round, step, split, deque(units), total=len(units))
            self._next_round += 1
            by_offset = {u.unit.env_offset: u for u in restored or [] if u.unit.step == step}
            if by_offset:
                rnd.pending = deque(u for u in units if u.env_offset not in by_offset)
                for u in units:
                    if u.env_offset in by_offset:
                        rnd.done.add(u.unit_id)
                        rnd.committed.append(by_offset[u.env_offset])
                self.counters["units_restored"] += len(by_offset)
            self._rounds[rnd.round_id] = rnd
            return rnd.round_id

    def take(self, round_id: int | None = None, *, stall_timeout_s: float, poll_s: float = 0.5) -> list[CommittedUnit] | None:
        """The round's committed units not taken yet (at least one; blocks until then), or None once
        every unit has been taken (the round is then closed). Raises `TimeoutError`, naming what it
        waited for, if no unit commits for `stall_timeout_s`. `round_id` None: the oldest open round."""
        with self._lock:
            rnd = self._get_round(round_id)
            # A round opened ahead (pipelining) may have waited in the queue behind older ones: the
            # stall clock starts when the learner starts waiting, at the earliest.
            waiting_since = time.monotonic()
            while not rnd.committed:
                if rnd.drained:
                    del self._rounds[rnd.round_id]
                    return None
                if self._error is not None:
                    raise RuntimeError("hub thread failed") from self._error
                if time.monotonic() - max(rnd.last_progress, waiting_since) > stall_timeout_s:
                    raise TimeoutError(
                        f"step {rnd.step}: waited {stall_timeout_s:.0f} s for samples of {rnd.total - len(rnd.done)} "
                        f"unfinished units ({len(rnd.leases)} leased, {len(rnd.pending)} unassigned; "
                        f"actors seen: {sorted(self.actors) or 'none'}; units refused "
                        f"{self.counters['units_refused']}, actors cut off: {sorted(self.cut_off) or 'none'})"
                    )
                self._changed.wait(poll_s)
            units = sorted(rnd.committed, key=lambda u: u.unit.env_offset)
            rnd.committed = []
            rnd.taken += len(units)
            return units

    def wait_round(self, round_id: int | None = None, *, stall_timeout_s: float, poll_s: float = 0.5) -> StepData:
        """Block until every unit of the round is in and return them all (the round is then closed)."""
        with self._lock:
            rnd = self._get_round(round_id)
        units: list[CommittedUnit] = []
        while (got := self.take(rnd.round_id, stall_timeout_s=stall_timeout_s, poll_s=poll_s)) is not None:
            units += got
        return StepData.of(rnd.step, units, time.monotonic() - rnd.started, self.staleness)

    def staleness(self, sample: Sample) -> int:
        """How many versions `sample`'s policy has moved on since it was made."""
        with self._lock:
            return self.ledger.staleness(sample)

    def untaken(self) -> list[CommittedUnit]:
        """Committed units of open training rounds the learner has not taken: what a checkpoint keeps."""
        with self._lock:
            return [u for r in self._rounds.values() if r.split == "train" for u in r.committed]

    def _get_round(self, round_id: int | None) -> _Round:
        if round_id is None:
            if not self._rounds:
                raise RuntimeError("no round is open")
            return self._rounds[min(self._rounds)]
        if round_id not in self._rounds:
            raise RuntimeError(f"round {round_id} is not open")
        return self._rounds[round_id]

    def stop(self, reason: str, *, drain_s: float = 5.0) -> None:
        """Tell every actor that asks to shut down (for up to `drain_s`), then stop serving."""
        with self._lock:
            self._stopping = reason
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline and self._thread.is_alive():
            with self._lock:
                if not self.actors:
                    break
            time.sleep(0.05)
        self._stopping = "closed"
        self._thread.join(timeout=5.0)
        self.endpoint.close()

    def metrics(self) -> dict[str, float]:
        with self._lock:
            out = {f"hub/{k}": float(v) for k, v in self.counters.items()}
            rejected = self.ledger.rejected + self.rejected
            out.update({f"hub/rejected_{k}": float(v) for k, v in rejected.items()})
            out["hub/rejected_total"] = float(sum(rejected.values()))
            out.update({k: float(v) for k, v in self.endpoint.counters.items()})
            out["hub/actors"] = float(len(self.actors))
        return out

    # -- serve loop (hub thread) -----------------------------------------------------------------
    def _serve(self) -> None:
        try:
            while self._stopping != "closed":
                got = self.endpoint.recv(timeout_s=0.05)
                with self._lock:
                    self._expire_leases()
                    reply = None if got is None else self._handle_safely(*got)
                if got is not None and reply is not None:
                    peer = got[0]
                    if isinstance(reply, list):
                        self.endpoint.send_weights(peer, reply)
                    else:
                        self.endpoint.send(peer, reply)
        except BaseException as exc:  # surfaced to the learner by wait_round
            log.exception("hub thread died")
            self._error = exc
            with self._lock:
                self._changed.notify_all()

    def _handle_safely(self, peer: bytes, msg: Any) -> Any:
        """`_handle`, but a bug it trips on one message is that message's `Refused`, not the run's end."""
        try:
            return self._handle(peer, msg)
        except Exception:
            log.exception("hub: handling a %s failed; refused it and carried on", type(msg).__name__)
            self.counters["handler_errors"] += 1
            return Refused(f"hub failed on this {type(msg).__name__}")

    def _handle(self, peer: bytes, msg: Any) -> Any:
        actor = getattr(msg, "actor_id", None)
        if peer in self._cut_peers:
            # Checked before anything else, so a cut-off peer is never counted alive or leased a unit.
            self.counters["cut_off_messages"] += 1
            why = "cut off: this connection sent too many refused units"
            return Shutdown(why) if isinstance(msg, WorkRequest) else Refused(why)
        if actor is not None:
            self.actors[actor] = time.monotonic()
        if isinstance(msg, Hello):
            if msg.protocol != PROTOCOL_VERSION:
                return Refused(f"protocol {msg.protocol} != {PROTOCOL_VERSION}")
            if msg.run_id != self.ledger.run_id:
                self.counters["refused_other_run"] += 1
                return Refused(f"run {msg.run_id!r} is not this run ({self.ledger.run_id!r})")
            return Welcome(run_id=self.ledger.run_id, versions=dict(self.ledger.versions))
        if isinstance(msg, WorkRequest):
            return self._assign(peer, msg.actor_id)
        if isinstance(msg, SampleBatch):
            return self._intake(peer, msg)
        if isinstance(msg, WeightsRequest):
            return self._weights_reply(msg)
        self.counters["unexpected_kind"] += 1
        return Refused(f"hub does not accept {type(msg).__name__}")

    def _assign(self, peer: bytes, actor: str) -> Any:
        if self._stopping:
            self.actors.pop(actor, None)
            return Shutdown(self._stopping)
        rounds = sorted(self._rounds.values(), key=lambda r: (r.split != "eval", r.round_id))
        held = [u for r in rounds for u, lease in r.leases.items() if lease.peer == peer]
        rnd = next((r for r in rounds if r.pending), None)
        if rnd is None:
            busy = any(not r.complete for r in rounds)
            return NoWork(self.retry_after_s, "all units leased" if busy else "waiting for the next step")
        if held:
            # An actor rolls out one unit at a time; a second lease would only let one connection
            # hoard the step's units until they time out.
            return NoWork(self.retry_after_s, f"this connection already holds unit {held[0]}")
        # Versions are named at lease time: the newest published weights, whenever the round opened.
        unit = msgspec.structs.replace(rnd.pending.popleft(), versions=dict(self.ledger.versions))
        rnd.leases[unit.unit_id] = _Lease(unit, actor, time.monotonic() + self.unit_timeout_s, peer)
        rnd.staged[unit.unit_id] = UnitIntake(unit, self.limits)
        self.counters["units_assigned"] += 1
        return unit

    def _round_of(self, unit_id: int) -> _Round | None:
        return next((r for r in self._rounds.values() if unit_id in r.leases), None)

    def _intake(self, peer: bytes, batch: SampleBatch) -> Any:
        rnd = self._round_of(batch.unit_id)
        lease = rnd.leases.get(batch.unit_id) if rnd is not None else None
        if rnd is None or lease is None or lease.actor != batch.actor_id:
            self.counters["orphan_batches"] += 1
            return Refused(f"unit {batch.unit_id} is not leased to {batch.actor_id}")
        if lease.peer != peer:
            self.counters["foreign_batches"] += 1
            return Refused(f"unit {batch.unit_id} was leased to another connection")
        lease.deadline = time.monotonic() + self.unit_timeout_s
        kept = self.ledger.admit(batch.samples)
        staged = rnd.staged[batch.unit_id]
        dropped_before = staged.dropped_samples
        faults = staged.add(kept, received=len(batch.samples))
        if batch.last and not (faults and faults[-1].scope == "unit"):
            end = staged.finish(batch.env_results)
            faults += [end] if end is not None else []
        for fault in faults:
            self.rejected[fault.reason] += 1
            self._log_once(batch.actor_id, batch.unit_id, fault)
        if faults and faults[-1].scope == "unit":
            return self._refuse_unit(rnd, batch.unit_id, peer, faults[-1])
        self.counters["samples_dropped"] += staged.dropped_samples - dropped_before
        rnd.last_progress = time.monotonic()
        if batch.last:
            del rnd.leases[batch.unit_id]
            rnd.committed.append(
                CommittedUnit(lease.unit, rnd.staged.pop(batch.unit_id).samples, list(batch.env_results), batch.timings)
            )
            rnd.done.add(batch.unit_id)
            self._changed.notify_all()
        return SampleAck(batch.unit_id, accepted=staged.staged_last, rejected=len(batch.samples) - staged.staged_last)

    def _log_once(self, actor: str, unit_id: int, fault: Fault) -> None:
        if (actor, fault.reason) in self._logged:
            return
        self._logged.add((actor, fault.reason))
        action = "unit refused" if fault.scope == "unit" else "group dropped"
        log.warning("actor %s, unit %d: %s, %s: %s (logged once per actor and reason; all are counted as "
                    "hub/rejected_%s)", actor, unit_id, action, fault.reason, fault.detail[:_MAX_DETAIL], fault.reason)

    def _refuse_unit(self, rnd: _Round, unit_id: int, peer: bytes, fault: Fault) -> Refused:
        """Drop a unit whole (a step never trains on part of it) and queue it for another try."""
        lease = self._release(rnd, unit_id)
        self.counters["units_refused"] += 1
        self.refused_units[peer] += 1
        if self.refused_units[peer] >= self.max_refused_units:
            self._cut_off(lease.actor, peer, f"{self.refused_units[peer]} units refused, the last for {fault.reason}")
        return Refused(f"unit {unit_id} refused: {fault.reason}: {fault.detail[:_MAX_DETAIL]}")

    def _cut_off(self, actor: str, peer: bytes, why: str) -> None:
        # The connection is cut, not every holder of the id: a hostile peer that claims an honest
        # actor's id must not get that actor cut off.
        self.cut_off[actor] = why
        self._cut_peers.add(peer)
        self.actors.pop(actor, None)
        self.counters["peers_cut_off"] += 1
        log.error("actor %s cut off for the rest of the run: %s; its units go to other actors", actor, why)
        for rnd in self._rounds.values():
            for unit_id in [u for u, lease in rnd.leases.items() if lease.peer == peer]:
                self._release(rnd, unit_id)
                self.counters["units_reassigned"] += 1

    def _release(self, rnd: _Round, unit_id: int) -> _Lease:
        """Take a unit back from its actor: what it staged is dropped, and the unit goes to the front
        of the queue, so whoever rolls it out next does it whole."""
        lease = rnd.leases.pop(unit_id)
        staged = rnd.staged.pop(unit_id, None)
        if staged is not None:
            self.counters["samples_dropped"] += len(staged.samples)
        rnd.pending.appendleft(lease.unit)
        return lease

    def _weights_reply(self, req: WeightsRequest) -> Any:
        versions = self._weights.get(req.policy)
        if not versions:
            return Refused(f"no weights published for policy {req.policy!r}")
        version = max(versions) if req.version < 0 else req.version
        if version not in versions:
            return Refused(f"policy {req.policy!r} v{req.version} is not held (have {sorted(versions)})")
        self.counters["weights_served"] += 1
        return versions[version]

    def _expire_leases(self) -> None:
        now = time.monotonic()
        for rnd in self._rounds.values():
            for unit_id, lease in list(rnd.leases.items()):
                if lease.deadline < now:
                    log.warning("unit %d of step %d: actor %s silent for %.0f s; reassigning", unit_id, rnd.step,
                                lease.actor, self.unit_timeout_s)
                    self._release(rnd, unit_id)
                    self.actors.pop(lease.actor, None)
                    self.counters["units_reassigned"] += 1
