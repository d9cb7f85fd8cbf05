"""The hub: work units, leases, sample intake, weight serving. Runs on the learner's rank 0.

Threads and ownership: the hub's serve loop (`hub_loop.HubLoop`) runs in its own thread and is the
only user of the ROUTER socket. The orchestrator (learner rank 0's main thread) talks to it through
`open_round`, `take`, `wait_round`, `publish` and `stop`, which only touch state under `self._lock`.
So actors are answered while the learner trains, leases keep expiring, and a dead actor is noticed
at any time.

The parts, one concern each:
- `hub_rounds.py`: rounds, units and leases (a lease expires after `unit_timeout_s` without
  progress, weights arriving at its actor included);
- `hub_weights.py`: the per-version reply cache `publish` fills, and the transfers in flight;
- `transport/store_writer.py`: the weight store's writes, in their own thread, when the hub has a
  `StoreWriter` (the learner's case; a bare `WeightStore` is written inside `publish`);
- `hub_loop.py`: the message loop: handshake, unit assignment, intake checks and cut-offs;
- this module: the learner's side.

Rounds: several may be open at once. Actors get units of evaluation rounds first, then of the
oldest step. A round's units are handed to the learner as they commit (`take`: a streaming learner
trains on them while the rest of the step is rolled out), or all at once (`wait_round`). Committed
units the learner has not taken yet can be saved with a checkpoint (`untaken`) and given back to
`open_round` on resume. A step always ends with the same samples as if nobody had died: a unit
taken back from an actor is rolled out whole by the next.

Samples are staged per unit and admitted through the `VersionLedger` (the one version check) when
their batch arrives; a unit's samples join the step only when its `last` batch arrives. A policy's
current version changes only in `publish`, under the lock, together with the weights units name.
The learner always builds its hub with `limits`; a hub without them checks version stamps only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque

import torch

from atgrpo.learner.hub_loop import HubLoop
from atgrpo.learner.hub_rounds import CommittedUnit, Round, StepData
from atgrpo.learner.hub_weights import Transfers, WeightsCache
from atgrpo.learner.intake import IntakeLimits
from atgrpo.learner.ledger import VersionLedger
from atgrpo.messages import Sample
from atgrpo.transport.endpoints import HubEndpoint
from atgrpo.transport.store_writer import StoreWriter
from atgrpo.transport.tensors import weights_to_messages
from atgrpo.transport.weight_store import NO_NONCE, WeightStore
from atgrpo.units import cut_units

log = logging.getLogger("atgrpo.hub")

MAX_REFUSED_UNITS = 3
"""Refused units after which an actor is cut off. An honest actor has none (its samples are what a
unit asks for), so three leave room for one odd bug report and still stop a peer sending garbage."""
FEW_ACTORS = 4
"""Actors a hub serves weights to without a word: past this, with no weight store, it warns once
(each version leaves rank 0 once per actor, through one ZeroMQ I/O thread)."""


class Hub(HubLoop):
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
        store: WeightStore | StoreWriter | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.ledger = ledger
        self.limits = limits
        """What samples are checked against; None: versions only (tests with hand-made samples)."""
        if limits is None:
            log.warning("hub without intake limits: samples are checked for their version stamp only")
        self.max_refused_units = max(1, max_refused_units)
        self.unit_timeout_s = unit_timeout_s
        """Seconds a lease lasts without progress (`hub_rounds`)."""
        self.keep_versions = max(1, keep_versions)
        self.retry_after_s = retry_after_s
        self.store = store
        """Where `publish` also writes each version for actors to read (`transport.weights_store`):
        a `StoreWriter` in the background, a bare `WeightStore` before the version is current."""
        self._warned_hub_weights = False
        self.counters: Counter[str] = Counter({"units_refused": 0, "samples_dropped": 0, "peers_cut_off": 0})
        self.rejected: Counter[str] = Counter()
        """Intake refusals by reason (the ledger counts its own)."""
        self.refused_units: Counter[bytes] = Counter()
        """Per connection: an actor id is only a claim (anyone may send any id), a connection is not."""
        self.cut_off: dict[str, str] = {}
        """actor id -> why it was cut off."""
        self._cut_peers: set[bytes] = set()
        self._logged: set[tuple[str, str]] = set()
        self.actors: dict[str, float] = {}
        """actor id -> last time it was heard from."""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._rounds: dict[int, Round] = {}
        self._training_step: int | None = None
        self._next_round = 0
        self._next_unit = 0
        self._weights = WeightsCache(self.keep_versions)
        self._transfers = Transfers()
        self._stopping: str | None = None
        self._thread = threading.Thread(target=self._serve, name="atgrpo-hub", daemon=True)
        self._error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def publish(self, policy: str, version: int, tensors: dict[str, torch.Tensor]) -> None:
        """Make `policy` at `version` fetchable and current: from now on units name it, and the
        ledger admits samples against it. Versions beyond `keep_versions` are dropped. The one place
        a version changes while actors run. `tensors` must not be written to afterwards (their
        memory is sent as it is, `hub_weights`). With a `StoreWriter`, the version is queued for the
        store and becomes readable there when complete (`transport.store_writer`); with a bare
        `WeightStore`, it is written there first. Either way the hub also serves it, whole or by
        chunk, as the fallback."""
        messages = weights_to_messages(policy, version, tensors)  # checksums once, reused for every actor
        if isinstance(self.store, StoreWriter):
            self.store.submit(policy, version, messages)
        elif self.store is not None:
            # Before the version becomes current: a unit that names it finds its marker written.
            try:
                written = self.store.write(policy, version, messages)
            except OSError as exc:  # a full or lost filesystem: actors fetch this version from the hub
                log.error("weight store: %r v%d not written (%s); actors fetch it from the hub", policy, version, exc)
                self.counters["weights_store_failed"] += 1
            else:
                self.counters["weights_store_bytes"] += written
                self.counters["weights_store_versions"] += 1
        with self._lock:
            self.ledger.set_version(policy, version)
            self._weights.put(policy, version, messages)
            self._warn_hub_weights()

    def _readable_versions(self) -> dict[str, int] | None:
        """Per policy, the newest version complete in a background-written store (None: no such store,
        every published version is readable at once: `lease_versions`)."""
        return self.store.readable_versions() if isinstance(self.store, StoreWriter) else None

    @property
    def run_nonce(self) -> str:
        """The learner session's nonce actors are welcomed with: the one its weight store writes under."""
        return self.store.run_nonce if self.store is not None else NO_NONCE

    def _warn_hub_weights(self) -> None:
        """Once, when the hub serves weights to more than `FEW_ACTORS` actors (module docstring of
        `transport.weight_store`: N actors, N copies). Called under the lock."""
        if self.store is not None or self._warned_hub_weights or len(self.actors) <= FEW_ACTORS:
            return
        per_version = self._weights.newest_bytes()
        if not per_version:
            return
        self._warned_hub_weights = True
        each = ", ".join(f"{p} {b / 1e9:.2f} GB" for p, b in sorted(per_version.items()))
        log.warning(
            "weights come from the hub to %d actors: each new version leaves rank 0 once per actor (%s a "
            "version, about %.1f GB a step in all); set transport.weights_store to a folder every host "
            "mounts so it leaves once",
            len(self.actors),
            each,
            len(self.actors) * sum(per_version.values()) / 1e9,
        )

    def open_round(
        self,
        step: int,
        seeds: list[int],
        envs_per_unit: int,
        *,
        split: str,
        greedy: bool,
        restored: list[CommittedUnit] | None = None,
        first_env: int = 0,
    ) -> int:
        """Queue a step's (or an evaluation's) seeds as units; returns the round's id. `restored`:
        units of this step committed before a restart (from `untaken`), which are not rolled out again.
        `first_env` > 0: a refill of a step whose own round is closed (`learner.refill`), its envs
        numbered after the step's; counted in `hub/refill_units` and `hub/refill_envs`."""
        with self._lock:
            if any(r.step == step and r.split == split for r in self._rounds.values()):
                raise RuntimeError(f"a {split} round for step {step} is already open")
            units = cut_units(
                self._next_unit,
                step,
                seeds,
                envs_per_unit,
                split=split,
                versions=self.ledger.versions,
                greedy=greedy,
                first_env=first_env,
            )
            self._next_unit += len(units)
            if first_env:
                self.counters["refill_units"] += len(units)
                self.counters["refill_envs"] += len(seeds)
            rnd = Round(self._next_round, step, split, deque(units), total=len(units))
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

    def take(
        self,
        round_id: int | None = None,
        *,
        stall_timeout_s: float,
        round_timeout_s: float | None = None,
        poll_s: float = 0.5,
    ) -> list[CommittedUnit] | None:
        """The round's committed units not taken yet (at least one; blocks until then), or None once
        every unit has been taken (the round is then closed). Raises `TimeoutError`, naming what it
        waited for, if the round makes no progress (`Round.last_progress`) for `stall_timeout_s`,
        or, progress or not, once `round_timeout_s` have passed since the learner first waited on
        the round (None: no such bound). `round_id` None: the oldest open round."""
        with self._lock:
            rnd = self._get_round(round_id)
            # A round opened ahead (pipelining) may have waited in the queue behind older ones: the
            # stall clock starts when the learner starts waiting, at the earliest.
            waiting_since = time.monotonic()
            if rnd.first_wait is None:
                rnd.first_wait = waiting_since
            if rnd.split == "train":
                self._training_step = max(
                    rnd.step, self._training_step if self._training_step is not None else rnd.step
                )
            while not rnd.committed:
                if rnd.drained:
                    del self._rounds[rnd.round_id]
                    return None
                if self._error is not None:
                    raise RuntimeError("hub thread failed") from self._error
                if round_timeout_s is not None and time.monotonic() - rnd.first_wait > round_timeout_s:
                    raise TimeoutError(
                        f"{'evaluation' if rnd.split == 'eval' else f'step {rnd.step}'}: not done "
                        f"{round_timeout_s:.0f} s after the learner started waiting for it "
                        f"(transport.round_timeout_s), {rnd.total - len(rnd.done)} units unfinished "
                        f"({len(rnd.leases)} leased, {len(rnd.pending)} unassigned; actors seen: "
                        f"{sorted(self.actors) or 'none'})"
                    )
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

    def wait_round(
        self,
        round_id: int | None = None,
        *,
        stall_timeout_s: float,
        round_timeout_s: float | None = None,
        poll_s: float = 0.5,
    ) -> StepData:
        """Block until every unit of the round is in and return them all (the round is then closed);
        the clocks are `take`'s."""
        with self._lock:
            rnd = self._get_round(round_id)
        units: list[CommittedUnit] = []
        while (
            got := self.take(
                rnd.round_id, stall_timeout_s=stall_timeout_s, round_timeout_s=round_timeout_s, poll_s=poll_s
            )
        ) is not None:
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

    def _get_round(self, round_id: int | None) -> Round:
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
        if isinstance(self.store, StoreWriter):
            self.store.close()

    def metrics(self) -> dict[str, float]:
        with self._lock:
            out = {f"hub/{k}": float(v) for k, v in self.counters.items()}
            rejected = self.ledger.rejected + self.rejected
            out.update({f"hub/rejected_{k}": float(v) for k, v in rejected.items()})
            out["hub/rejected_total"] = float(sum(rejected.values()))
            out.update({k: float(v) for k, v in self.endpoint.counters.items()})
            out.update({k: float(v) for k, v in self.endpoint.weights_sent.items()})
            out["hub/actors"] = float(len(self.actors))
        if isinstance(self.store, StoreWriter):
            out.update(self.store.metrics())
        return out


__all__ = ["FEW_ACTORS", "MAX_REFUSED_UNITS", "CommittedUnit", "Hub", "StepData"]
