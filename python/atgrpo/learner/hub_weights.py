"""The hub's weights: the reply cache it serves from, and the transfers of those replies in flight.

Cache (`WeightsCache`): per policy, the `keep_versions` newest versions, each kept as the chunk
messages of its reply (`weights_to_messages`), built once at publish (checksums included) and
reused for every actor that asks. The messages are zero-copy views of an immutable CPU snapshot:
nothing writes to the tensors once published, and a version dropped from the cache lives on for as
long as libzmq still sends it.

Transfers (`Transfers`): one per peer, the trackers of the chunks of the last weights reply sent to
it (`HubEndpoint.send_weights`). `progressed` reports the peers whose transfer moved on (a chunk's
tracker done) since the last call: the hub renews their leases with it, so a lease measures the
progress of a transfer, never its whole length. A peer has at most one transfer (request/reply is
strict: a new request means the previous reply was read or abandoned); a transfer ends when all its
chunks are done, which also happens when libzmq drops them with a connection that closed.
"""

from __future__ import annotations

from typing import Any

import zmq

from atgrpo.messages import Refused, WeightsRequest

Messages = list[list[Any]]
"""The chunk messages of one weights reply (`weights_to_messages`)."""


class WeightsCache:
    """policy -> version -> its reply. Not thread-safe: the hub calls it under its lock."""

    def __init__(self, keep_versions: int) -> None:
        self.keep_versions = max(1, keep_versions)
        self._replies: dict[str, dict[int, Messages]] = {}

    def put(self, policy: str, version: int, messages: Messages) -> None:
        """Hold `messages` as `policy`'s reply at `version`; versions beyond `keep_versions` are dropped."""
        versions = self._replies.setdefault(policy, {})
        versions[version] = messages
        for old in sorted(versions)[: -self.keep_versions]:
            del versions[old]

    def newest_bytes(self) -> dict[str, int]:
        """policy -> bytes of its newest held version's reply (headers included)."""
        return {
            p: sum(memoryview(f).nbytes for m in versions[max(versions)] for f in m)
            for p, versions in self._replies.items()
            if versions
        }

    def reply(self, req: WeightsRequest) -> Messages | Refused:
        """The reply to `req` (version -1: the newest held; `chunk` >= 0: that chunk message only), or
        `Refused` naming what is held."""
        versions = self._replies.get(req.policy)
        if not versions:
            return Refused(f"no weights published for policy {req.policy!r}")
        version = max(versions) if req.version < 0 else req.version
        if version not in versions:
            return Refused(f"policy {req.policy!r} v{req.version} is not held (have {sorted(versions)})")
        messages = versions[version]
        if req.chunk < 0:
            return messages
        if req.chunk >= len(messages):
            return Refused(f"policy {req.policy!r} v{version} has {len(messages)} chunks, not chunk {req.chunk}")
        return messages[req.chunk : req.chunk + 1]  # one chunk: a weight-store reader's fallback


class Transfers:
    """Weights replies on their way to peers. Not thread-safe: the hub calls it under its lock."""

    def __init__(self) -> None:
        self._by_peer: dict[bytes, tuple[list[zmq.MessageTracker], int]] = {}
        """peer -> (one tracker per chunk, how many of them were seen done)."""

    def __len__(self) -> int:
        return len(self._by_peer)

    def start(self, peer: bytes, trackers: list[zmq.MessageTracker]) -> None:
        """A reply of `len(trackers)` chunks was queued to `peer` (replacing any earlier one)."""
        self._by_peer[peer] = (trackers, 0)

    def progressed(self) -> list[bytes]:
        """Peers at least one more of whose chunks left since the last call; finished transfers end."""
        moved = []
        for peer, (trackers, seen) in list(self._by_peer.items()):
            done = seen
            while done < len(trackers) and trackers[done].done:  # chunks leave in order
                done += 1
            if done > seen:
                moved.append(peer)
            if done == len(trackers):
                del self._by_peer[peer]
            elif done > seen:
                self._by_peer[peer] = (trackers, done)
        return moved


__all__ = ["Messages", "Transfers", "WeightsCache"]
