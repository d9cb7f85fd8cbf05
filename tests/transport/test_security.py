"""Which endpoints need CURVE keys, and the key folder commands (`atgrpo-keys`)."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from atgrpo.cli.keys import main as keys_main
from atgrpo.errors import AddressError, CurveKeyError, InsecureEndpointError
from atgrpo.transport.keys import actor_keys, hub_keys
from atgrpo.transport.security import check_address, is_local, require_keys


@pytest.mark.parametrize(
    ("address", "local"),
    [
        ("tcp://127.0.0.1:5555", True),
        ("tcp://127.3.4.5:1", True),
        ("tcp://localhost:80", True),
        ("tcp://[::1]:5555", True),
        ("ipc:///tmp/x/hub", True),
        ("inproc://hub", True),
        ("tcp://0.0.0.0:5555", False),
        ("tcp://*:5555", False),
        ("tcp://10.0.0.1:5555", False),
        ("tcp://[::]:5555", False),
        ("tcp://learner.example.org:5555", False),
        ("tcp://eth0:5555", False),
    ],
)
def test_which_addresses_other_hosts_can_reach(address: str, local: bool) -> None:
    assert is_local(address) is local


@pytest.mark.parametrize(
    "address",
    [
        "tcp://127.0.0.1:5555",
        "tcp://*:*",
        "tcp://*:0",
        "tcp://[::1]:5555",
        "tcp://eth0:5555",
        "ipc:///tmp/x/hub",
        "inproc://hub",
    ],
)
def test_an_endpoint_address_has_its_form(address: str) -> None:
    check_address(address, "hub")


@pytest.mark.parametrize(
    "address",
    [
        "bogus://x",
        "hub",
        "",
        "tcp://127.0.0.1",
        "tcp://:5555",
        "tcp://[]:5555",
        "tcp://h:port",
        "tcp://h:70000",
        "ipc://",
    ],
)
def test_an_address_no_socket_could_use_is_refused_by_its_form(address: str) -> None:
    with pytest.raises(AddressError, match=re.escape(f"hub address {address!r}")):
        check_address(address, "hub")


def test_reachable_tcp_without_keys_is_refused_unless_insecure(tmp_path: Path, caplog) -> None:
    with pytest.raises(InsecureEndpointError, match="atgrpo-keys init"):
        require_keys("tcp://0.0.0.0:5555", None, False, "hub")
    with pytest.raises(InsecureEndpointError, match="actor on tcp://10.0.0.1"):
        require_keys("tcp://10.0.0.1:5555", None, False, "actor")
    require_keys("tcp://0.0.0.0:5555", tmp_path, False, "hub")  # keys given
    require_keys("tcp://127.0.0.1:5555", None, False, "hub")  # loopback
    with caplog.at_level("WARNING"):
        require_keys("tcp://0.0.0.0:5555", None, True, "hub")
    assert "anyone who can reach it" in caplog.text


def test_key_commands_make_private_folders_and_per_actor_bundles(tmp_path: Path, capsys) -> None:
    keys = tmp_path / "keys"
    assert keys_main(["init", str(keys)]) == 0
    assert keys_main(["init", str(keys)]) == 2  # never overwrite a run's keys
    assert keys_main(["add-actor", str(keys), "node-3"]) == 0
    assert keys_main(["add-actor", str(keys), "node-3"]) == 2
    assert keys_main(["add-actor", str(keys), "../escape"]) == 2
    assert keys_main(["add-actor", str(tmp_path / "nowhere"), "x"]) == 2
    assert keys_main(["bundle", str(keys), "node-3", str(tmp_path / "bundle")]) == 0
    capsys.readouterr()
    bundle = tmp_path / "bundle"
    files = sorted(str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file())
    assert files == ["actors/node-3.key", "actors/node-3.key_secret", "hub.key"]  # no hub secret, no other actor
    assert stat.S_IMODE((bundle / "actors/node-3.key_secret").stat().st_mode) == 0o600
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o700
    public, secret, hub_public = actor_keys(bundle, "node-3")
    assert hub_public == hub_keys(keys)[0] and (public, secret, hub_public) == actor_keys(keys, "node-3")
    assert actor_keys(keys)[0] != public  # the default actor key is another key
    with pytest.raises(CurveKeyError):
        hub_keys(bundle)
