"""Two hosts in network namespaces made by the test (a veth pair, no other address is used): a keyed
actor trains against a keyed hub over tcp, and peers without the run's keys get nothing from it,
neither weights nor a lease. A hub on that address without keys refuses to start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from systest_util import Processes, child_env, module_cmd, read_rows, set_args, tiny_sets, train_rows, wait_for

LEARNER_IP, ACTOR_IP = "10.213.7.1", "10.213.7.2"
INTRUDER = """
import sys
from atgrpo.messages import PROTOCOL_VERSION, Hello, WeightsRequest, WorkRequest
from atgrpo.transport import ActorClient, TransportTimeout
address, keys = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
got = []
for msg in (Hello(PROTOCOL_VERSION, "intruder", "planpath-atgrpo", ["shared"]), WorkRequest("intruder"),
            WeightsRequest("intruder", "shared", -1)):
    client = ActorClient(address, "intruder", timeout_s=3.0, curve_keys=keys)
    try:
        got.append(type(client.request(msg)).__name__)
    except TransportTimeout:
        got.append("timeout")
    finally:
        client.close()
print("INTRUDER", " ".join(got), flush=True)
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _netns_usable() -> bool:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    name = f"atgprobe{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", name)
    except (subprocess.CalledProcessError, OSError):
        return False
    _ip("netns", "del", name)
    return True


pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not _netns_usable(), reason="needs root and `ip netns` (network namespaces)"),
]


@pytest.fixture
def hosts() -> Iterator[tuple[str, str]]:
    """(learner namespace, actor namespace), joined by a veth pair on a private /24."""
    tag = uuid.uuid4().hex[:6]
    learner, actor = f"atgl{tag}", f"atga{tag}"
    veth_l, veth_a = f"vl{tag}", f"va{tag}"
    try:
        _ip("netns", "add", learner)
        _ip("netns", "add", actor)
        _ip("link", "add", veth_l, "type", "veth", "peer", "name", veth_a)
        for ns, dev, addr in ((learner, veth_l, LEARNER_IP), (actor, veth_a, ACTOR_IP)):
            _ip("link", "set", dev, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield learner, actor
    finally:
        for ns in (learner, actor):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def in_ns(ns: str, cmd: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


def intruder(ns: str, address: str, keys: Path | None, log: Path) -> subprocess.CompletedProcess:
    cmd = in_ns(ns, [sys.executable, "-c", INTRUDER, address, *([str(keys)] if keys else [])])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=child_env())


def test_keyed_actor_trains_and_keyless_peers_get_nothing(tmp_path: Path, processes: Processes, hosts) -> None:
    learner_ns, actor_ns = hosts
    from atgrpo.cli.keys import main as keys_main

    keys, bundle, other = tmp_path / "keys", tmp_path / "actor-keys", tmp_path / "other-run"
    assert keys_main(["init", str(keys)]) == 0 and keys_main(["init", str(other)]) == 0
    assert keys_main(["bundle", str(keys), "actor", str(bundle)]) == 0
    out = tmp_path / "run"
    sets = set_args(tiny_sets(out, run__steps=2, run__eval_seeds=2))
    address = f"tcp://{LEARNER_IP}:{5000 + os.getpid() % 1000}"

    refused = subprocess.run(
        in_ns(learner_ns, module_cmd("atgrpo.cli.learner", *sets, "--address", address)),
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    assert refused.returncode == 2 and "without CURVE keys" in refused.stderr, refused.stderr[-2000:]

    learner_log = tmp_path / "learner.log"
    learner = processes.start(
        in_ns(learner_ns, module_cmd("atgrpo.cli.learner", *sets, "--address", address, "--curve-keys", str(keys))),
        learner_log,
    )
    wait_for(lambda: '"hub_ready"' in learner_log.read_text(), 180, "the keyed hub to serve", learner)
    # Peers without the run's keys, while the hub serves: no key at all, or another run's keys.
    for peer_keys in (None, other):
        done = intruder(actor_ns, address, peer_keys, tmp_path / "intruder.log")
        assert "INTRUDER timeout timeout timeout" in done.stdout, done.stdout + done.stderr[-2000:]
    actor_log = tmp_path / "actor.log"
    actor = processes.start(
        in_ns(
            actor_ns,
            module_cmd("atgrpo.cli.actor", *sets, "--address", address, "--curve-keys", str(bundle), "--id", "keyed"),
        ),
        actor_log,
    )
    try:
        assert learner.wait(timeout=240) == 0, learner_log.read_text()[-4000:]
        assert actor.wait(timeout=60) == 0, actor_log.read_text()[-3000:]
    except subprocess.TimeoutExpired:
        pytest.fail(f"keyed run did not finish:\n{learner_log.read_text()[-3000:]}\n{actor_log.read_text()[-3000:]}")
    rows = train_rows(out / "metrics.jsonl")
    assert sorted(rows) == [1, 2] and all(r["hub/rejected_total"] == 0 for r in rows.values())
    assert all(r["hub/actors"] == 1 for r in rows.values())  # only the keyed actor was ever seen
    assert "intruder" not in learner_log.read_text()
    assert [r for r in read_rows(out / "metrics.jsonl") if "eval/success" in r]
