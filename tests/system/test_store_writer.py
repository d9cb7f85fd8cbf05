"""The weight store's writes off the training path (issue 48, item 3): with a 2 s write, `publish`
returns at once, and actors only ever see complete versions; latest wins per policy; a failed
background write is counted and the hub serves. Fixtures are those of test_hub.py."""

# ruff: noqa: F811  (the fixtures of test_hub.py, imported by name, are the tests' parameters)
from __future__ import annotations

import threading
import time
from pathlib import Path

import msgspec
import torch
from test_hub import RUN, connect, make_hub  # noqa: F401  (fixtures)

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
