"""A weight-store version belongs to its learner session (issue 48, item 1): two runs with one name
and one store root, at once, each read only their own versions; a marker of another session is never
read; a new session removes only the session it replaces. Fixtures are those of test_hub.py."""

# ruff: noqa: F811  (the fixtures of test_hub.py, imported by name, are the tests' parameters)
from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import msgspec
import pytest
import torch
from test_hub import RUN, connect, hello, make_hub  # noqa: F401  (fixtures)

from atgrpo.messages import WeightsMarker, Welcome
from atgrpo.transport.store_writer import StoreWriter
from atgrpo.transport.tensors import weights_to_messages
from atgrpo.transport.weight_store import MARKER, StoreReader, WeightStore, new_run_nonce, session_dir, version_dir

CHILD = Path(__file__).with_name("store_run_child.py")


def weights(v: int, run: int) -> dict[str, torch.Tensor]:
    """Two 4 MiB tensors (a chunk each), a different content per version and per run."""
    return {f"t{i}": torch.full((1 << 20,), float(1000 * run + 10 * v + i)) for i in range(2)}


def same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> bool:
    return list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)


def test_two_runs_with_one_name_and_root_at_once_each_read_only_their_own(make_hub, connect, tmp_path: Path) -> None:
    root = tmp_path / "store"
    hubs = [make_hub() for _ in range(2)]
    for hub in hubs:
        hub.store = StoreWriter(WeightStore(root, RUN, keep_versions=2, run_nonce=new_run_nonce()))

    def train(run: int) -> None:  # the same version numbers, the same moments, other weights
        for v in range(1, 5):
            hubs[run].publish("shared", v, weights(v, run))
            assert hubs[run].store.wait_idle(30.0)  # a step longer than a write: no version superseded

    threads = [threading.Thread(target=train, args=(run,)) for run in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for run, hub in enumerate(hubs):
        assert hub.store.wait_idle(30.0)
        client = connect(hub, f"actor-of-run-{run}")
        welcome = hello(client)
        assert isinstance(welcome, Welcome) and welcome.run_nonce == hub.store.run_nonce
        reader = StoreReader(root, RUN, wait_s=5.0)
        reader.join(welcome.run_nonce)
        for v in (3, 4):  # keep_versions 2: each run pruned only its own
            _, got = reader.fetch(client, "shared", v)
            assert same(got, weights(v, run)), f"run {run} read another run's v{v}"
        assert reader.counters["store/chunks_read"] == 4 and reader.counters["store/versions_from_hub"] == 0
    assert hubs[0].store.run_nonce != hubs[1].store.run_nonce


@pytest.mark.integration  # two processes importing torch: 9 s on a loaded two-core machine
def test_two_processes_with_one_name_and_root_each_read_only_their_own(tmp_path: Path) -> None:
    """The same, as two real writer-and-reader processes on one root (no hub: a reader's fallback raises)."""
    procs = [
        subprocess.Popen([sys.executable, str(CHILD), str(tmp_path), RUN, str(run)], stderr=subprocess.PIPE, text=True)
        for run in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
    assert len(list((tmp_path / RUN).iterdir())) == 2  # one session folder each


def test_a_marker_of_another_session_is_never_read(make_hub, connect, tmp_path: Path) -> None:
    ours, theirs = new_run_nonce(), new_run_nonce()
    other = WeightStore(tmp_path, RUN, run_nonce=theirs)
    other.write("shared", 1, weights_to_messages("shared", 1, weights(1, run=1)))
    hub = make_hub()
    hub.store = WeightStore(tmp_path, RUN, run_nonce=ours)
    hub.publish("shared", 1, weights(1, run=0))
    # A version of the other run where ours should be (a copy, a writer bug): it passes every crc32.
    mine = version_dir(session_dir(tmp_path, RUN, ours), "shared", 1)
    shutil.rmtree(mine)
    shutil.copytree(version_dir(other.session, "shared", 1), mine)
    reader = StoreReader(tmp_path, RUN, run_nonce=ours, wait_s=0.0)
    _, got = reader.fetch(connect(hub, "a"), "shared", 1)
    assert same(got, weights(1, run=0))  # from the hub
    assert reader.counters["store/foreign_versions"] == 1 and reader.counters["store/chunks_read"] == 0
    assert not reader.trusted


def test_a_marker_without_a_nonce_is_not_read(make_hub, connect, tmp_path: Path) -> None:
    hub = make_hub()
    hub.store = WeightStore(tmp_path, RUN, run_nonce="ours")
    hub.publish("shared", 1, weights(1, run=0))
    marker = version_dir(hub.store.session, "shared", 1) / MARKER
    old = msgspec.json.decode(marker.read_bytes(), type=WeightsMarker)
    marker.write_bytes(msgspec.json.encode({"policy": "shared", "version": 1, "chunks": 2, "nbytes": old.nbytes}))
    reader = StoreReader(tmp_path, RUN, run_nonce="ours", wait_s=0.0)
    _, got = reader.fetch(connect(hub, "a"), "shared", 1)
    assert same(got, weights(1, run=0)) and reader.counters["store/versions_from_hub"] == 1


def test_a_new_session_removes_the_one_it_replaces_and_no_other(tmp_path: Path) -> None:
    earlier, concurrent = WeightStore(tmp_path, RUN, run_nonce="earlier"), WeightStore(tmp_path, RUN, run_nonce="other")
    for store in (earlier, concurrent):
        store.write("shared", 1, weights_to_messages("shared", 1, weights(1, run=0)))
    resumed = WeightStore(tmp_path, RUN, run_nonce="resumed", replaces="earlier")
    assert not earlier.session.exists()
    assert (version_dir(concurrent.session, "shared", 1) / MARKER).is_file()
    assert resumed.session.is_dir()


def test_each_learner_session_gets_a_new_nonce_and_removes_the_last_ones_folder(tmp_path: Path) -> None:
    from atgrpo.config import load_config
    from atgrpo.learner.job import STORE_SESSION, _weight_store

    out, root = tmp_path / "run", tmp_path / "store"
    out.mkdir()
    cfg = load_config(None, [f'run.out_dir="{out}"', f'transport.weights_store="{root}"'])
    first = _weight_store(cfg)
    assert first is not None
    first.close()
    other_run = WeightStore(root, cfg.run.name, run_nonce=new_run_nonce())  # same name, another out_dir
    resumed = _weight_store(cfg)
    assert resumed is not None
    resumed.close()
    assert resumed.run_nonce != first.run_nonce
    assert not first.store.session.exists() and resumed.store.session.is_dir() and other_run.session.is_dir()
    assert (out / STORE_SESSION).read_text().strip() == resumed.run_nonce
    assert _weight_store(load_config(None, [f'run.out_dir="{out}"', 'transport.weights_store=""'])) is None
