"""Weights through a shared store (`transport.weight_store`) with the real hub as the fallback, and
the faults a store must survive: a writer dying mid-write, a corrupted chunk (caught, re-fetched
from the hub, the store trusted no more), an actor dying mid-read while another joins mid-transfer.
Fixtures and helpers are those of test_hub.py."""

# ruff: noqa: F811  (the fixtures of test_hub.py, imported by name, are the tests' parameters)
from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from test_hub import RUN, connect, finish, hello, make_hub, take_unit  # noqa: F401  (fixtures)

from atgrpo.learner.hub_weights import WeightsCache
from atgrpo.messages import Refused, WeightsRequest
from atgrpo.transport import weight_store
from atgrpo.transport.errors import UnexpectedReply
from atgrpo.transport.tensors import weights_to_messages
from atgrpo.transport.weight_store import MARKER, NO_NONCE, StoreReader, WeightStore, session_dir, version_dir

CHUNKS = 3


def weights(v: int) -> dict[str, torch.Tensor]:
    """Three 4 MiB tensors: one chunk each (`tensors.CHUNK_BYTES`), a different content per version."""
    return {f"t{i}": torch.arange(1 << 20, dtype=torch.float32) * (v + 1) + i for i in range(CHUNKS)}


def same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> bool:
    return list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)


def hub_bytes(hub) -> float:
    return hub.metrics()["transport/weights_bytes"]


def vdir(root: Path, version: int) -> Path:
    """Where a store made by `with_store` (a bench's or a test's: `NO_NONCE`) puts "shared" at `version`."""
    return version_dir(session_dir(root, RUN, NO_NONCE), "shared", version)


def with_store(make_hub, root: Path, **kw):
    hub = make_hub(**kw)
    hub.store = WeightStore(root, RUN)
    return hub


def test_actors_read_the_store_and_no_weights_leave_the_hub(make_hub, connect, tmp_path: Path) -> None:
    hub = with_store(make_hub, tmp_path / "store")
    hub.publish("shared", 1, weights(1))
    assert (vdir(tmp_path / "store", 1) / MARKER).is_file()
    readers = [StoreReader(tmp_path / "store", RUN, wait_s=0.0) for _ in range(4)]
    for i, reader in enumerate(readers):
        header, got = reader.fetch(connect(hub, f"a{i}"), "shared", 1)
        assert header.version == 1 and same(got, weights(1))
        assert reader.counters["store/chunks_read"] == CHUNKS and reader.counters["store/chunks_from_hub"] == 0
    assert hub_bytes(hub) == 0  # four actors, one copy written, nothing served
    one_copy = sum(t.numel() * 4 for t in weights(1).values())
    assert one_copy <= hub.metrics()["hub/weights_store_bytes"] < one_copy * 1.01
    hub.publish("shared", 2, weights(2))
    hub.publish("shared", 3, weights(3))
    held = sorted(d.name for d in (vdir(tmp_path / "store", 0).parent).iterdir())
    assert held == ["v2", "v3"]  # keep_versions (2): older versions go


def test_a_writer_that_dies_mid_write_leaves_nothing_readable(make_hub, connect, tmp_path: Path, monkeypatch) -> None:
    hub = with_store(make_hub, tmp_path / "store")
    real = weight_store._write_file
    calls = []

    def dies_on_second_chunk(path, frames, raw=False):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(path, frames, raw)

    monkeypatch.setattr(weight_store, "_write_file", dies_on_second_chunk)
    hub.publish("shared", 1, weights(1))  # the run goes on: the hub still serves the version
    assert hub.metrics()["hub/weights_store_failed"] == 1
    assert not any((vdir(tmp_path / "store", 0).parent).iterdir())  # no marker, no half a version in place
    reader = StoreReader(tmp_path / "store", RUN, wait_s=0.2)
    _, got = reader.fetch(connect(hub, "a"), "shared", 1)
    assert same(got, weights(1)) and reader.counters["store/versions_from_hub"] == 1
    assert reader.trusted  # a missing version is no lie: the store stays in use


def test_a_corrupted_chunk_is_refetched_from_the_hub_and_the_store_is_no_longer_trusted(
    make_hub, connect, tmp_path: Path
) -> None:
    hub = with_store(make_hub, tmp_path / "store", keep_versions=2)
    hub.publish("shared", 1, weights(1))
    chunk = vdir(tmp_path / "store", 1) / "chunk-1"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF  # in the tensor's bytes: same size, same header, wrong crc32
    chunk.write_bytes(bytes(data))
    reader = StoreReader(tmp_path / "store", RUN, wait_s=0.0)
    client = connect(hub, "a")
    _, got = reader.fetch(client, "shared", 1)
    assert same(got, weights(1))  # the bad chunk never reached the weights
    # Chunk 0 from the store; chunk 1 (bad) and every later one from the hub: the store lied once.
    assert reader.counters["store/chunks_read"] == 1 and reader.counters["store/chunks_from_hub"] == CHUNKS - 1
    assert not reader.trusted
    refetched = weights_to_messages("shared", 1, weights(1))[1:]
    assert hub_bytes(hub) == sum(memoryview(f).nbytes for m in refetched for f in m)
    hub.publish("shared", 2, weights(2))  # an intact version: still fetched from the hub, whole
    _, got = reader.fetch(client, "shared", 2)
    assert same(got, weights(2)) and reader.counters["store/versions_from_hub"] == 1
    assert reader.counters["store/chunks_read"] == 1


def test_a_truncated_chunk_file_comes_from_the_hub(make_hub, connect, tmp_path: Path) -> None:
    hub = with_store(make_hub, tmp_path / "store")
    hub.publish("shared", 1, weights(1))
    chunk = vdir(tmp_path / "store", 1) / "chunk-2"
    chunk.write_bytes(chunk.read_bytes()[: 1 << 20])  # e.g. a copy still on its way to this host
    reader = StoreReader(tmp_path / "store", RUN, wait_s=0.0)
    _, got = reader.fetch(connect(hub, "a"), "shared", 1)
    assert same(got, weights(1))
    assert reader.counters["store/chunks_read"] == CHUNKS - 1 and reader.counters["store/chunks_from_hub"] == 1
    assert reader.trusted  # unreadable is not a lie: the store's checked chunks stay in use


def test_an_actor_dies_mid_read_while_another_joins_and_the_step_completes(make_hub, connect, tmp_path: Path) -> None:
    hub = with_store(make_hub, tmp_path / "store", unit_timeout_s=1.0)
    hub.publish("shared", 1, weights(1))
    rid = hub.open_round(0, [10, 11], 1, split="train", greedy=False)
    dying = connect(hub, "dying")
    hello(dying)
    unit = take_unit(dying)
    joined: dict = {}

    class Died(Exception):
        pass

    class DiesAfterFirstChunk(StoreReader):
        def _read_chunk(self, path, policy, version, chunk):
            if chunk == 1:
                # Mid-transfer: a new actor joins, reads the same version whole and does its unit...
                late = connect(hub, "late")
                hello(late)
                other = take_unit(late)
                reader = StoreReader(tmp_path / "store", RUN, wait_s=0.0)
                joined["weights"] = reader.fetch(late, "shared", other.versions["shared"])[1]
                finish(late, other, tag=2)
                joined["client"] = late
                raise Died  # ...and this one dies between two chunks
            return super()._read_chunk(path, policy, version, chunk)

    with pytest.raises(Died):
        DiesAfterFirstChunk(tmp_path / "store", RUN, wait_s=0.0).fetch(dying, "shared", unit.versions["shared"])
    dying.close()
    assert same(joined["weights"], weights(1))
    late = joined["client"]
    deadline = time.monotonic() + 10.0
    while hub.metrics().get("hub/units_reassigned", 0.0) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    again = take_unit(late)  # the dead actor's unit, once its lease ran out
    assert again.unit_id == unit.unit_id
    finish(late, again, tag=2)
    data = hub.wait_round(rid, stall_timeout_s=10.0)
    assert sorted({s.key.env for s in data.samples}) == [0, 1]
    assert hub.metrics()["hub/units_reassigned"] == 1 and hub.metrics()["hub/rejected_total"] == 0
    assert hub_bytes(hub) == 0


def test_one_chunk_from_the_hub_and_out_of_range_chunks_refused(make_hub, connect) -> None:
    cache = WeightsCache(1)
    messages = weights_to_messages("shared", 4, weights(4))
    cache.put("shared", 4, messages)
    assert cache.reply(WeightsRequest("a", "shared", 4)) is messages
    assert cache.reply(WeightsRequest("a", "shared", 4, chunk=2)) == messages[2:3]
    assert isinstance(cache.reply(WeightsRequest("a", "shared", 4, chunk=CHUNKS)), Refused)
    hub = make_hub()
    hub.publish("shared", 4, weights(4))
    client = connect(hub, "a")
    assert len(client.request_chunk("shared", 4, 0)) == 2  # header + one tensor
    with pytest.raises(UnexpectedReply, match="3 chunks, not chunk 7"):
        client.request_chunk("shared", 4, 7)


def test_a_restarted_writer_clears_the_versions_of_its_earlier_session(
    tmp_path: Path,
) -> None:
    first = WeightStore(tmp_path, RUN)
    first.write("shared", 5, weights_to_messages("shared", 5, weights(5)))
    assert (vdir(tmp_path, 5) / MARKER).is_file()
    WeightStore(tmp_path, RUN)  # a v5 of the new session may hold other weights: the old one must go
    assert not vdir(tmp_path, 5).exists()
