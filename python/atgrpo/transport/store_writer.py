"""The weight store's writes off the training path: `StoreWriter` runs `WeightStore.write` in a thread.

Why (issue 48): written inside `Hub.publish`, a version of a large model on a shared filesystem costs
rank 0 seconds a step while every other rank waits for it in a collective.

Invariants:
- `submit` returns at once. The hub serves the version from memory from the moment it is published
  (its fallback), and actors see it in the store only once it is complete: the writer's atomic
  rename of the version's directory, marker inside (`weight_store`).
- One write at a time (one thread; a shared filesystem gains little from two). Per policy at most one
  version waits behind it, the newest: a version submitted while an older one of the same policy
  still waits replaces it (counted `weights_store_superseded`). So a store slower than the steps
  costs no memory beyond one pending snapshot per policy, and skipped versions are the ones no unit
  names any more; an actor asked for one fetches it from the hub after its marker wait.
- A failed write (a full or lost filesystem, `OSError`; or any bug) is logged and counted
  (`weights_store_failed`), never raised: actors fetch that version from the hub.
- `readable_versions` names, per policy, the newest version written whole; the hub's leases may
  name it while a newer one is being written (`learner.lease_versions`). A failed write never
  becomes readable.
- The messages submitted are the hub's reply cache for the version (zero-copy views of an immutable
  snapshot, `hub_weights`); nothing here writes to them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

from atgrpo.transport.weight_store import WeightStore

log = logging.getLogger("atgrpo.transport")

Messages = list[list[Any]]


class StoreWriter:
    def __init__(self, store: WeightStore) -> None:
        self.store = store
        self.counters: Counter[str] = Counter({"weights_store_versions": 0, "weights_store_failed": 0})
        self.last_write_s = 0.0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._pending: dict[str, tuple[int, Messages]] = {}
        self._readable: dict[str, int] = {}
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="atgrpo-store-writer", daemon=True)
        self._thread.start()

    @property
    def run_nonce(self) -> str:
        return self.store.run_nonce

    def submit(self, policy: str, version: int, messages: Messages) -> None:
        """Queue `policy` at `version` for writing; returns at once (module docstring)."""
        with self._lock:
            if self._closed:
                return
            if policy in self._pending:
                self.counters["weights_store_superseded"] += 1
            self._pending[policy] = (version, messages)
            self._changed.notify_all()

    def readable_versions(self) -> dict[str, int]:
        """Per policy, the newest version written whole (its directory renamed into place)."""
        with self._lock:
            return dict(self._readable)

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until every submitted version is written (or dropped); False if `timeout_s` passed first."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        """Drop what waits (the run is over: no actor will read it) and let the write under way finish,
        for at most `timeout_s`, so that it leaves no `.tmp-` directory behind."""
        with self._lock:
            self._closed = True
            self._pending.clear()
            self._changed.notify_all()
        self._thread.join(timeout=timeout_s)

    def metrics(self) -> dict[str, float]:
        with self._lock:
            out = {f"hub/{k}": float(v) for k, v in self.counters.items()}
            out["hub/weights_store_write_s"] = self.last_write_s
        return out

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._changed.wait()
                if self._closed:
                    return
                policy = next(iter(self._pending))  # the longest-waiting policy first
                version, messages = self._pending.pop(policy)
                self._busy = True
            start = time.monotonic()
            try:
                written = self.store.write(policy, version, messages)
            except Exception as exc:  # noqa: BLE001 - never the run's end: the hub serves this version
                written = None
                if isinstance(exc, OSError):
                    log.error(
                        "weight store: %r v%d not written (%s); actors fetch it from the hub", policy, version, exc
                    )
                else:
                    log.exception("weight store: writing %r v%d failed; actors fetch it from the hub", policy, version)
            with self._lock:
                self._busy = False
                self.last_write_s = time.monotonic() - start
                if written is None:
                    self.counters["weights_store_failed"] += 1
                else:
                    self.counters["weights_store_bytes"] += written
                    self.counters["weights_store_versions"] += 1
                    self._readable[policy] = max(version, self._readable.get(policy, version))
                self._changed.notify_all()


__all__ = ["StoreWriter"]
