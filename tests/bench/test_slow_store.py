"""The bench's slow filesystem (`atgrpo.bench.slow_store`): on the PYTHONPATH of a process with a
delay set, each version's write takes the delay longer, with the version half-written meanwhile;
without a delay nothing is patched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from atgrpo.bench.e2e_store import DELAY_ENV, _slow_env

PROBE = r"""
import json, sys, threading, time
from pathlib import Path
from atgrpo.transport import weight_store
root = Path(sys.argv[1])
store = weight_store.WeightStore(root, "probe", run_nonce=weight_store.new_run_nonce())
seen_tmp = []
def look():
    end = time.monotonic() + 5
    while time.monotonic() < end and not seen_tmp:
        seen_tmp.extend(p.name for p in (store.session / "shared").glob(".tmp-*") if (store.session / "shared").is_dir())
        time.sleep(0.01)
t = threading.Thread(target=look); t.start()
began = time.monotonic()
store.write("shared", 1, [[b"abc"], [b"defg"]])
took = time.monotonic() - began
t.join()
print(json.dumps({"took": took, "patched": weight_store._write_file.__module__ != weight_store.__name__,
                  "half_written_seen": bool(seen_tmp)}))
"""


def _probe(tmp_path: Path, delay_s: float) -> dict:
    env = {**os.environ, **_slow_env(delay_s)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_delay_makes_each_write_that_much_longer_and_visible_half_written(tmp_path: Path) -> None:
    got = _probe(tmp_path, 0.5)
    assert got["patched"] and got["took"] >= 0.5  # a sleep never ends early
    assert got["half_written_seen"]  # the delay falls while the version is in its temporary folder


def test_no_delay_patches_nothing(tmp_path: Path) -> None:
    got = _probe(tmp_path, 0.0)
    assert not got["patched"]
    assert _slow_env(0.0)[DELAY_ENV] == "0.0"
