"""The hub's message loop: the thread that answers every actor (`Hub` runs it; `hub.py`).

The loop is the only user of the ROUTER socket. Each turn it takes one message (or none within 50
ms) and, under the hub's lock, first notes the progress of weights in flight (`Transfers`: a lease
whose connection is receiving chunks is renewed), then expires the leases that made none for
`unit_timeout_s`, then answers the message. Replies are sent outside the lock, never blocking.

Units are handed out evaluation rounds first, then the oldest step, one at a time per connection;
a unit names the policy versions current when it is LEASED (not when its round opened), so an actor
always rolls out with the newest published weights and switches versions only between units. Under
pipelining with the weight store written in the background, a unit leased while the newest version
is still being written names the newest readable one instead, where the staleness bound allows it
(`lease_versions`; counted in `hub/units_on_readable_version`).

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
each connection costs. Late batches for a unit no longer leased to their sender are refused and
counted (`hub/orphan_batches`).
`hub/samples_dropped` counts admitted samples that will not train (staged with a refused or
reassigned unit, or in a dropped group). Nothing a peer sends raises in the hub thread: a bug one
message trips is that message's `Refused` (`hub/handler_errors`, logged with its traceback).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

import msgspec

from atgrpo.learner.hub_rounds import CommittedUnit, Lease, Round
from atgrpo.learner.hub_weights import Transfers, WeightsCache
from atgrpo.learner.intake import Fault, IntakeLimits, UnitIntake
from atgrpo.learner.lease_versions import lease_versions
from atgrpo.learner.ledger import VersionLedger
from atgrpo.messages import (
    PROTOCOL_VERSION,
    Hello,
    NoWork,
    ProgressAck,
    Refused,
    SampleAck,
    SampleBatch,
    Shutdown,
    UnitProgress,
    WeightsRequest,
    Welcome,
    WorkRequest,
)
from atgrpo.transport.endpoints import HubEndpoint

log = logging.getLogger("atgrpo.hub")

_MAX_DETAIL = 300


class HubLoop:
    """The serve side of `Hub`: the state below is set up by `Hub.__init__` and guarded by `_lock`."""

    endpoint: HubEndpoint
    ledger: VersionLedger
    limits: IntakeLimits | None
    max_refused_units: int
    unit_timeout_s: float
    retry_after_s: float
    counters: Counter[str]
    rejected: Counter[str]
    refused_units: Counter[bytes]
    cut_off: dict[str, str]
    actors: dict[str, float]
    _cut_peers: set[bytes]
    _logged: set[tuple[str, str]]
    _lock: threading.Lock
    _changed: threading.Condition
    _rounds: dict[int, Round]
    _training_step: int | None
    """The newest training step whose round the learner has begun taking (`Hub.take`); None before."""
    _weights: WeightsCache
    _transfers: Transfers
    _stopping: str | None
    _error: BaseException | None

    @property
    def run_nonce(self) -> str:
        raise NotImplementedError  # `Hub.run_nonce`

    def _warn_hub_weights(self) -> None:
        raise NotImplementedError  # `Hub._warn_hub_weights`

    def _readable_versions(self) -> dict[str, int] | None:
        raise NotImplementedError  # `Hub._readable_versions`

    def _serve(self) -> None:
        try:
            while self._stopping != "closed":
                got = self.endpoint.recv(timeout_s=0.05)
                with self._lock:
                    self._note_transfers()
                    self._expire_leases()
                    reply = None if got is None else self._handle_safely(*got)
                if got is not None and reply is not None:
                    peer = got[0]
                    if isinstance(reply, list):
                        trackers = self.endpoint.send_weights(peer, reply)
                        if trackers is not None:
                            with self._lock:
                                self._transfers.start(peer, trackers)
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
            self._warn_hub_weights()
            return Welcome(run_id=self.ledger.run_id, versions=dict(self.ledger.versions), run_nonce=self.run_nonce)
        if isinstance(msg, WorkRequest):
            return self._assign(peer, msg.actor_id)
        if isinstance(msg, SampleBatch):
            return self._intake(peer, msg)
        if isinstance(msg, UnitProgress):
            return self._progress(peer, msg)
        if isinstance(msg, WeightsRequest):
            return self._weights_reply(peer, msg)
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
        # Versions are named at lease time: the newest published weights, whenever the round opened;
        # under pipelining, the newest readable in the store while the newest is still written.
        versions = dict(self.ledger.versions)
        if rnd.split == "train":
            named = lease_versions(
                versions, self._readable_versions(), self.ledger.max_staleness, rnd.step - self._trained_at(rounds)
            )
            if named != versions:
                self.counters["units_on_readable_version"] += 1
            versions = named
        unit = msgspec.structs.replace(rnd.pending.popleft(), versions=versions)
        rnd.leases[unit.unit_id] = Lease(unit, actor, time.monotonic() + self.unit_timeout_s, peer)
        rnd.staged[unit.unit_id] = UnitIntake(unit, self.limits)
        self.counters["units_assigned"] += 1
        return unit

    def _trained_at(self, rounds: list[Round]) -> int:
        """The step trained at the current versions: the newest the learner has begun taking (its
        round is deleted once drained, before the step publishes), else the oldest open training round.
        Past that step's publication it is one step behind, so a round ahead gets less slack, never more."""
        if self._training_step is not None:
            return self._training_step
        return min(r.step for r in rounds if r.split == "train")

    def _round_of(self, unit_id: int) -> Round | None:
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
        lease.renew(time.monotonic(), self.unit_timeout_s)
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
                CommittedUnit(
                    lease.unit,
                    rnd.staged.pop(batch.unit_id).samples,
                    list(batch.env_results),
                    batch.timings,
                    batch.tool_programs,
                )
            )
            rnd.done.add(batch.unit_id)
            self._changed.notify_all()
        return SampleAck(batch.unit_id, accepted=staged.staged_last, rejected=len(batch.samples) - staged.staged_last)

    def _progress(self, peer: bytes, msg: UnitProgress) -> Any:
        """A unit's heartbeat: renews its lease (and its round's stall clock) only for the connection
        and actor holding it, so no peer can keep another actor's unit from being reassigned."""
        rnd = self._round_of(msg.unit_id)
        lease = rnd.leases.get(msg.unit_id) if rnd is not None else None
        if rnd is None or lease is None or lease.actor != msg.actor_id or lease.peer != peer:
            self.counters["progress_refused"] += 1
            return Refused(f"unit {msg.unit_id} is not leased to {msg.actor_id} on this connection")
        now = time.monotonic()
        lease.renew(now, self.unit_timeout_s)
        rnd.last_progress = max(rnd.last_progress, now)
        self.counters["progress_reports"] += 1
        return ProgressAck(msg.unit_id)

    def _log_once(self, actor: str, unit_id: int, fault: Fault) -> None:
        if (actor, fault.reason) in self._logged:
            return
        self._logged.add((actor, fault.reason))
        action = "unit refused" if fault.scope == "unit" else "group dropped"
        log.warning(
            "actor %s, unit %d: %s, %s: %s (logged once per actor and reason; all are counted as hub/rejected_%s)",
            actor,
            unit_id,
            action,
            fault.reason,
            fault.detail[:_MAX_DETAIL],
            fault.reason,
        )

    def _refuse_unit(self, rnd: Round, unit_id: int, peer: bytes, fault: Fault) -> Refused:
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

    def _release(self, rnd: Round, unit_id: int) -> Lease:
        """Take a unit back from its actor: what it staged is dropped, and the unit goes to the front
        of the queue, so whoever rolls it out next does it whole."""
        lease = rnd.leases.pop(unit_id)
        staged = rnd.staged.pop(unit_id, None)
        if staged is not None:
            self.counters["samples_dropped"] += len(staged.samples)
        rnd.pending.appendleft(lease.unit)
        return lease

    def _weights_reply(self, peer: bytes, req: WeightsRequest) -> Any:
        reply = self._weights.reply(req)
        if not isinstance(reply, Refused):
            self.counters["weights_served"] += 1
            self._renew_leases_of(peer, time.monotonic())  # the fetch for its unit is a sign of life
        return reply

    def _renew_leases_of(self, peer: bytes, now: float) -> None:
        for rnd in self._rounds.values():
            for lease in rnd.leases.values():
                if lease.peer == peer:
                    lease.renew(now, self.unit_timeout_s)
                    rnd.last_progress = max(rnd.last_progress, now)

    def _note_transfers(self) -> None:
        """Renew the leases of connections whose weights reply moved on since the last turn."""
        if len(self._transfers):
            now = time.monotonic()
            for peer in self._transfers.progressed():
                self._renew_leases_of(peer, now)

    def _expire_leases(self) -> None:
        now = time.monotonic()
        for rnd in self._rounds.values():
            for unit_id, lease in list(rnd.leases.items()):
                if lease.deadline < now:
                    log.warning(
                        "unit %d of step %d: actor %s silent for %g s (no batch, progress report, request or weights chunk); reassigning",
                        unit_id,
                        rnd.step,
                        lease.actor,
                        self.unit_timeout_s,
                    )
                    self._release(rnd, unit_id)
                    self.actors.pop(lease.actor, None)
                    self.counters["units_reassigned"] += 1


__all__ = ["HubLoop"]
