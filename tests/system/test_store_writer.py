"""The weight store's writes off the training path (issue 48, item 3): with a 2 s write, `publish`
returns at once, and actors only ever see complete versions; latest wins per policy; a failed
background write is counted and the hub serves; under pipelining a unit leased mid-write names the
version already readable, within the staleness bound. Fixtures are those of test_hub.py."""

# ruff: noqa: F811  (the fixtures of test_hub.py, imported by name, are the tests' parameters)
from __future__ import annotations

import threading
import time
from pathlib import Path

import msgspec
import pytest
import torch
from test_hub import RUN, connect, finish, hello, make_hub, take_unit  # noqa: F401  (fixtures)

from atgrpo.messages import WeightsMarker
from atgrpo.transport import weight_store
from atgrpo.transport.store_writer import StoreWriter
from atgrpo.transport.weight_store import MARKER, StoreReader, WeightStore, new_run_nonce

CHUNKS = 3
WRITE_DELAY_S = 2.0


def weights(v: int) -> dict[str, torch.Tensor]:
    return {f"t{i}": torch.arange(1 << 20, dtype=torch.float32) * (v + 1) + i for i in range(CHUNKS)}


def same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> bool:
    return list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)


def slow_files(monkeypatch, total_s: float) -> None:
    """Every file of a version (its chunks and the marker) takes its share of `total_s` to write: a
    version lies half-written for that long, as a large model on a shared filesystem does."""
    real = weight_store._write_file

    def slow(path, frames, raw=False):
        time.sleep(total_s / (CHUNKS + 1))
        return real(path, frames, raw)

    monkeypatch.setattr(weight_store, "_write_file", slow)


def with_writer(make_hub, root: Path):
    hub = make_hub()
    hub.store = StoreWriter(WeightStore(root, RUN, run_nonce=new_run_nonce()))
    return hub


def complete_or_absent(policy_dir: Path) -> list[str]:
    """The versions a reader could open (not `.tmp-`), each checked whole against its marker."""
    seen = []
    for d in sorted(policy_dir.iterdir()) if policy_dir.is_dir() else []:
        if d.name.startswith(".tmp-"):
            continue
        marker = msgspec.json.decode((d / MARKER).read_bytes(), type=WeightsMarker)  # raises if absent
        sizes = sum((d / f"chunk-{i}").stat().st_size for i in range(marker.chunks))
        assert sizes == marker.nbytes, f"{d} is in place but not whole"
        seen.append(d.name)
    return seen


def test_publish_returns_at_once_and_actors_only_see_complete_versions(
    make_hub, connect, tmp_path: Path, monkeypatch
) -> None:
    slow_files(monkeypatch, WRITE_DELAY_S)
    hub = with_writer(make_hub, tmp_path)
    policy_dir = hub.store.store.session / "shared"
    looks: list[list[str]] = []
    done = threading.Event()

    def watch() -> None:  # an actor's-eye view of the store, as often as it can look
        while not done.is_set():
            looks.append(complete_or_absent(policy_dir))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    began = time.monotonic()
    hub.publish("shared", 1, weights(1))
    publish_s = time.monotonic() - began
    # A reader that asks mid-write sees the write under way, waits for it and reads the store.
    reader = StoreReader(tmp_path, RUN, run_nonce=hub.store.run_nonce, wait_s=0.5, write_wait_s=30.0)
    _, got = reader.fetch(connect(hub, "a"), "shared", 1)
    waited_s = time.monotonic() - began
    assert hub.store.wait_idle(30.0)
    done.set()
    watcher.join()
    assert publish_s < 0.1 * WRITE_DELAY_S, f"publish took {publish_s:.2f} s with a {WRITE_DELAY_S} s write"
    assert waited_s >= 0.9 * WRITE_DELAY_S  # it was mid-write when the reader asked
    assert same(got, weights(1)) and reader.counters["store/chunks_read"] == CHUNKS
    assert reader.counters["store/versions_from_hub"] == 0
    assert [] in looks and ["v1"] in looks  # absent, then whole: never anything in between
    m = hub.metrics()
    assert m["hub/weights_store_versions"] == 1 and m["hub/weights_store_write_s"] >= 0.9 * WRITE_DELAY_S


def test_a_version_published_while_one_waits_replaces_it(make_hub, tmp_path: Path, monkeypatch) -> None:
    slow_files(monkeypatch, 0.4)
    hub = with_writer(make_hub, tmp_path)
    for v in (1, 2, 3):  # v1 is being written when v2 and then v3 come: v2 is never written
        hub.publish("shared", v, weights(v))
    assert hub.store.wait_idle(30.0)
    assert complete_or_absent(hub.store.store.session / "shared") == ["v1", "v3"]
    m = hub.metrics()
    assert m["hub/weights_store_superseded"] == 1 and m["hub/weights_store_versions"] == 2


def test_a_failed_background_write_is_counted_and_the_hub_serves(
    make_hub, connect, tmp_path: Path, monkeypatch
) -> None:
    def full(path, frames, raw=False):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(weight_store, "_write_file", full)
    hub = with_writer(make_hub, tmp_path)
    hub.publish("shared", 1, weights(1))
    assert hub.store.wait_idle(10.0)
    assert hub.metrics()["hub/weights_store_failed"] == 1
    reader = StoreReader(tmp_path, RUN, run_nonce=hub.store.run_nonce, wait_s=0.0)
    _, got = reader.fetch(connect(hub, "a"), "shared", 1)
    assert same(got, weights(1)) and reader.counters["store/versions_from_hub"] == 1


@pytest.mark.parametrize("max_staleness", [0, 1])
def test_a_unit_leased_mid_write_names_the_readable_version_only_under_pipelining(
    make_hub, connect, tmp_path: Path, monkeypatch, max_staleness: int
) -> None:
    hub = make_hub({"shared": 0}, max_staleness=max_staleness, keep_versions=max_staleness + 1)
    hub.store = StoreWriter(WeightStore(tmp_path, RUN, max_staleness + 2, run_nonce=new_run_nonce()))
    hub.publish("shared", 0, weights(0))
    assert hub.store.wait_idle(30.0) and hub.store.readable_versions() == {"shared": 0}
    slow_files(monkeypatch, WRITE_DELAY_S)
    hub.publish("shared", 1, weights(1))  # written for the next 2 s
    hub.open_round(2, [10, 11], 1, split="train", greedy=False)  # the round trained next
    hub.open_round(3, [12], 1, split="train", greedy=False)  # one step after it
    clients = [connect(hub, name) for name in "abc"]
    for c in clients:
        hello(c)
    units = [take_unit(c) for c in clients]
    assert [u.step for u in units] == [2, 2, 3]
    mid_write = [u.versions["shared"] for u in units]
    assert hub.store.readable_versions() == {"shared": 0}, "the write ended before the units were leased"
    if max_staleness:
        # Round 2 is trained at version 1: its samples of version 0 are one version old, admitted.
        # Round 3 is trained at version 2 at the latest: it must name version 1, written or not.
        assert mid_write == [0, 0, 1]
        assert hub.metrics()["hub/units_on_readable_version"] == 2
    else:
        assert mid_write == [1, 1, 1]  # strictly on-policy, the newest version whatever the store
        assert "hub/units_on_readable_version" not in hub.metrics()
    for c, u in zip(clients, units):
        finish(c, u, tag=1)  # every sample admitted: none is past the bound
    assert hub.store.wait_idle(30.0) and hub.store.readable_versions() == {"shared": 1}
    hub.open_round(4, [13], 1, split="train", greedy=False)
    late = connect(hub, "d")
    hello(late)
    assert take_unit(late).versions == {"shared": 1}  # once written, the newest again


def test_once_the_step_in_training_is_drained_the_next_round_is_not_given_its_slack(
    make_hub, connect, tmp_path: Path, monkeypatch
) -> None:
    # Step 2 trains at version 1, still being written: its unit may name version 0. Once the learner
    # has taken every unit of step 2 its round is deleted, but its update is not published yet:
    # step 3 will train at version 2, so at k=1 its unit must name version 1, written or not
    # (version 0 would be two versions old and refused).
    hub = make_hub({"shared": 0}, max_staleness=1, keep_versions=2)
    hub.store = StoreWriter(WeightStore(tmp_path, RUN, 3, run_nonce=new_run_nonce()))
    hub.publish("shared", 0, weights(0))
    assert hub.store.wait_idle(30.0)
    slow_files(monkeypatch, WRITE_DELAY_S)
    hub.publish("shared", 1, weights(1))
    hub.open_round(2, [10], 1, split="train", greedy=False)
    first = connect(hub, "a")
    hello(first)
    unit = take_unit(first)
    assert unit.versions == {"shared": 0}
    finish(first, unit, tag=1)
    while hub.take(stall_timeout_s=5.0) is not None:  # the learner takes step 2 whole
        pass
    hub.open_round(3, [11], 1, split="train", greedy=False)
    late = connect(hub, "b")
    hello(late)
    assert hub.store.readable_versions() == {"shared": 0}, "the write ended before the unit was leased"
    assert take_unit(late).versions == {"shared": 1}
    assert hub.metrics()["hub/units_on_readable_version"] == 1
    assert hub.store.wait_idle(30.0)
