"""CURVE on tcp: keys are private files; only actors with the run's keys reach the hub."""

from __future__ import annotations

import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import HubThread
from test_endpoints import WEIGHTS, answer

from atgrpo.messages import NoWork, WeightsRequest, WorkRequest
from atgrpo.transport import ActorClient, TransportTimeout
from atgrpo.transport.errors import CurveKeyError
from atgrpo.transport.keys import actor_keys, generate_keys, hub_keys


def test_generate_keys_writes_private_key_files(tmp_path: Path) -> None:
    folder = generate_keys(tmp_path / "keys")
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(folder) == 0o700 and mode(folder / "actors") == 0o700
    assert mode(folder / "hub.key_secret") == 0o600 and mode(folder / "actors" / "actor.key_secret") == 0o600
    hub_public, hub_secret = hub_keys(folder)
    actor_public, actor_secret, server = actor_keys(folder)
    assert server == hub_public and len(hub_secret) == len(actor_secret) == 40 and actor_public != hub_public
    with pytest.raises(CurveKeyError):
        hub_keys(tmp_path / "nowhere")


def test_only_actors_with_the_run_keys_get_through(tmp_path: Path, serve: Callable[..., HubThread]) -> None:
    keys = generate_keys(tmp_path / "keys")
    other = generate_keys(tmp_path / "other")  # another run: other hub, other actor key
    impostor = generate_keys(tmp_path / "impostor")  # knows our hub's public key, not our actor key
    shutil.copy(keys / "hub.key", impostor / "hub.key")
    hub = serve("tcp://127.0.0.1:*", answer, curve_keys=keys)
    with ActorClient(hub.address, "good", timeout_s=5.0, curve_keys=keys) as client:
        assert client.request(WorkRequest(actor_id="good")) == NoWork(0.1, "idle good")
        _, tensors = client.request_weights("shared", 5)
        assert all(t.equal(tensors[n]) for n, t in WEIGHTS.items())
    for name, kwargs in (("plain", {}), ("stranger", {"curve_keys": other}), ("impostor", {"curve_keys": impostor})):
        with ActorClient(hub.address, name, timeout_s=0.5, **kwargs) as client:  # type: ignore[arg-type]
            with pytest.raises(TransportTimeout, match="no reply to work_request"):
                client.request(WorkRequest(actor_id=name))
    hub.stop()
    # Nothing from the others reached the hub.
    assert hub.received == [WorkRequest(actor_id="good"), WeightsRequest(actor_id="good", policy="shared", version=5)]
