"""`atgrpo-bench scale`: the learner's real hub against N simulated actors (`sim.py`).

The hub is `learner.hub.Hub` with its intake limits, on a CURVE-secured tcp endpoint, in this
process; the actors are threads in a few worker processes, speaking the real protocol through the
real client. This process plays the learner: per step it publishes a version, opens a round of
`UNITS_PER_ACTOR * N` one-env units and waits for them. Three phases per N:

1. steps: `steps` training steps, each publishing a version of `step_mb` through the store (the
   path a cluster of hundreds of actors would use), so the hub's control plane is what is measured:
   lease latency as the actors see it, samples taken in per second, the hub thread's CPU time per
   message by kind, units reissued, samples refused, hub CPU and resident memory. One unit per actor
   per step, rolled out in `delay_s`: at 0.2 s, 512 actors ask as often as ~10,000 actors whose
   units take 4 s;
2. weights from the hub: one version of `weights_mb`, every actor fetching it from the hub (today's
   path): time until all N hold it, bytes that left the hub;
3. weights from the store: one version of `weights_mb` written once to a `WeightStore`
   (`transport.weights_store`), the actors reading it there.

At the largest N the hub thread's Python stack is sampled (`probes`) to say where its time
goes. The machine is shared and small: every figure is read beside the N = smallest one of the same
run (the ratio), and the simulated actors share the hub's cores, so the hub's figures at large N
include their cost too (said in the report). The table is `report`'s. The cluster model (`model.py`) turns the
per-N figures into predicted weight-sync times.
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from atgrpo.bench.report import BenchRow
from atgrpo.bench.scale import model as scale_model
from atgrpo.bench.scale.probes import (
    Sampler,
    TimedHub,
    hub_thread_cpu,
    process_cpu,
    rss,
    wait_for_actors,
)
from atgrpo.bench.scale.report import SUITE, print_profile, rows_of
from atgrpo.bench.scale.sim import (
    POLICY,
    RESPONSE_TOKENS,
    ROLES,
    TURNS,
    VOCAB,
    K,
    SimSpec,
)
from atgrpo.learner.intake import IntakeLimits, PolicyLimits
from atgrpo.learner.ledger import VersionLedger
from atgrpo.transport.endpoints import HubEndpoint
from atgrpo.transport.keys import generate_keys
from atgrpo.transport.weight_store import WeightStore

UNITS_PER_ACTOR = 2
"""Units per actor in a weight-sync round: every actor is all but sure to lease one naming the new
version (a connection holds one unit at a time)."""
ACTORS_PER_WORKER = 128
DETAIL_JSON = Path("bench-results") / "scale-detail.json"


@dataclass
class Settings:
    sizes: tuple[int, ...]
    steps: int
    steps_at_largest: int
    step_mb: float
    weights_mb: float
    delay_s: float
    unit_timeout_s: float = 20.0
    """Short enough that a hub too busy to answer would cost leases within the run."""


FULL = Settings(
    (8, 32, 128, 512),
    steps=4,
    steps_at_largest=20,
    step_mb=0.0625,
    weights_mb=8.0,
    delay_s=0.2,
)
QUICK = Settings((2, 8), steps=2, steps_at_largest=3, step_mb=0.0625, weights_mb=1.0, delay_s=0.1)


def _weights(mb: float, version: int) -> dict[str, torch.Tensor]:
    """bf16 tensors of `mb` MiB in all (4 MiB each at most), a different value per version."""
    total = max(1, int(mb * 2**20) // 2)
    out, left, i = {}, total, 0
    while left:
        n = min(left, 2 * 2**20)
        out[f"layer{i}.weight"] = torch.full((n,), float(version % 100), dtype=torch.bfloat16)
        left -= n
        i += 1
    return out


def _limits() -> IntakeLimits:
    return IntakeLimits(
        roles=ROLES,
        role_policy={r: POLICY for r in ROLES},
        policies={POLICY: PolicyLimits(VOCAB, 4096)},
        turns=TURNS,
        k=K,
        tree=True,
        trajectory=False,
        max_new_tokens=RESPONSE_TOKENS,
        micro_batch_tokens=4096,
    )


def _start_workers(
    n: int, address: str, keys: Path, run_id: str, delay_s: float, store: Path
) -> list[subprocess.Popen]:
    workers = max(1, math.ceil(n / ACTORS_PER_WORKER))
    ids = [f"sim-{i}" for i in range(n)]
    procs = []
    for w in range(workers):
        spec = SimSpec(address, str(keys), ids[w::workers], run_id, delay_s, str(store))
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "atgrpo.bench.scale.sim",
                    json.dumps(asdict(spec)),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    return procs


@dataclass
class _Sync:
    seconds: float
    holders: int
    bytes_out: float
    hub_cpu_s: float
    """CPU seconds of the hub's process (its thread, libzmq's I/O thread with CURVE, the store's
    writes) from the publish until the round was in: CPU, so other agents' load does not count."""
    last_start_s: float = 0.0
    """From the publish until the last actor began fetching (it had leased a unit naming the version)."""
    fetch_p50_s: float = 0.0
    """Median seconds one actor took from starting to fetch until it held the version (checked)."""
    fetch_max_s: float = 0.0


def _sync_times(records: list[dict], published: dict[int, float]) -> dict[int, tuple[float, int]]:
    """version -> (seconds from its publish until the last actor that fetched it held it, how many did)."""
    out = {}
    for v, t_pub in published.items():
        times = [r["holds"][str(v)] for r in records if str(v) in r["holds"]]
        out[v] = (max(times) - t_pub if times else float("nan"), len(times))
    return out


def run_n(n: int, s: Settings, steps: int, profile: bool, root: Path) -> dict:
    """Every phase at N = `n` actors; returns the figures (module docstring)."""
    run_id = f"scale-{n}"
    keys = generate_keys(root / "keys")
    store_dir = root / "store"
    endpoint = HubEndpoint("tcp://127.0.0.1:*", curve_keys=keys)
    hub = TimedHub(
        endpoint,
        VersionLedger(run_id, {POLICY: 0}),
        limits=_limits(),
        unit_timeout_s=s.unit_timeout_s,
    )
    hub.publish(POLICY, 0, _weights(s.step_mb, 0))
    hub.start()
    base_rss = rss()
    sampler = Sampler(hub._thread, profile)
    sampler.start()
    cpu0, wall0 = os.times(), time.monotonic()
    procs = _start_workers(n, endpoint.address, keys, run_id, s.delay_s, store_dir)
    wait_for_actors(hub, n, procs)  # their start (imports, CURVE handshakes) is not the hub's speed
    published: dict[int, float] = {}
    version, samples_in, step_walls = 0, 0, []
    out: dict = {"n": n, "steps": steps}
    reissued: dict[str, float] = {}
    store = WeightStore(store_dir, run_id, keep_versions=2)
    try:
        hub.store = store
        step_cpu0 = hub_thread_cpu(hub)
        t_steps = time.monotonic()
        for step in range(steps):
            version += 1
            published[version] = time.monotonic()
            hub.publish(POLICY, version, _weights(s.step_mb, version))
            t0 = time.monotonic()
            rid = hub.open_round(step, list(range(n)), 1, split="train", greedy=False)
            data = hub.wait_round(rid, stall_timeout_s=120.0)
            samples_in += len(data.samples)
            step_walls.append(time.monotonic() - t0)
        steps_s = time.monotonic() - t_steps
        reissued["steps"] = hub.counters["units_reassigned"]
        step_cpu = hub_thread_cpu(hub) - step_cpu0
        steps_rss = sampler.peak_rss
        phases = {}
        for path in ("hub", "store"):
            hub.store = store if path == "store" else None
            version += 1
            before = hub.metrics()["transport/weights_bytes"] + hub.counters["weights_store_bytes"]
            cpu_before = process_cpu()
            published[version] = time.monotonic()
            hub.publish(POLICY, version, _weights(s.weights_mb, version))
            rid = hub.open_round(
                steps + len(phases),
                list(range(UNITS_PER_ACTOR * n)),
                1,
                split="train",
                greedy=False,
            )
            hub.wait_round(rid, stall_timeout_s=300.0)
            after = hub.metrics()["transport/weights_bytes"] + hub.counters["weights_store_bytes"]
            phases[path] = (version, after - before, process_cpu() - cpu_before)
            reissued[path] = hub.counters["units_reassigned"] - sum(reissued.values())
        cpu1, wall1 = os.times(), time.monotonic()
    finally:
        hub.stop("bench over", drain_s=60.0)
        sampler.stop()
        records = []
        for p in procs:
            stdout, _ = p.communicate(timeout=120)
            records += json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else []
    syncs = _sync_times(records, published)
    one_copy = sum(t.numel() * t.element_size() for t in _weights(s.weights_mb, 0).values())
    leases = sorted(x for r in records for x in r["lease_s"])
    metrics = hub.metrics()
    out.update(
        lease_p50_ms=1e3 * _pct(leases, 50),
        lease_p99_ms=1e3 * _pct(leases, 99),
        samples_per_s=samples_in / steps_s,
        step_s=statistics.median(step_walls),
        hub_thread_cpu_per_step_s=step_cpu / steps,
        units_reissued_by_phase=reissued,
        hub_cpu_cores=((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / (wall1 - wall0),
        hub_rss_mb=(steps_rss - base_rss) / 2**20,
        hub_rss_sync_mb=(sampler.peak_rss - base_rss) / 2**20,
        hub_thread_busy=step_cpu / steps_s,
        units_reissued=reissued["steps"],
        units_refused=metrics["hub/units_refused"],
        # Wrongly refused: every sample the hub rejected, and every batch refused for another reason
        # than a lease already taken back (that one is a reissue, counted above).
        samples_refused=metrics["hub/rejected_total"]
        + sum(r["samples_rejected"] for r in records)
        + sum(1 for r in records for why in r["refused"] if "is not leased to" not in why),
        actor_errors=[r["error"] for r in records if r["error"]][:5],
        one_copy_bytes=one_copy,
        handle_ms={
            k: {
                "count": len(v),
                "p50": 1e3 * _pct(sorted(v), 50),
                "p99": 1e3 * _pct(sorted(v), 99),
                "total_s": sum(v),
            }
            for k, v in hub.handle_s.items()
        },
        lease_upkeep_s=hub.upkeep_s,
        store_reads={
            k: sum(r["store"].get(k, 0) for r in records) for k in ("store/chunks_read", "store/chunks_from_hub")
        },
    )
    for path, (v, sent, cpu) in phases.items():
        starts = [r["starts"][str(v)] for r in records if str(v) in r["holds"]]
        fetches = sorted(r["holds"][str(v)] - r["starts"][str(v)] for r in records if str(v) in r["holds"])
        out[f"sync_{path}"] = asdict(
            _Sync(
                syncs[v][0],
                syncs[v][1],
                sent,
                cpu,
                max(starts, default=published[v]) - published[v],
                _pct(fetches, 50),
                fetches[-1] if fetches else float("nan"),
            )
        )
    if profile and sampler.samples:
        out["profile"] = {
            "samples": sampler.samples,
            "leaf": {k: c / sampler.samples for k, c in sampler.leaf.most_common(8)},
            "atgrpo": {k: c / sampler.samples for k, c in sampler.own.most_common(8)},
        }
    return out


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


def measure(s: Settings) -> list[dict]:
    results = []
    for n in s.sizes:
        largest = n == s.sizes[-1]
        with tempfile.TemporaryDirectory(prefix="atgrpo-scale-") as tmp:
            results.append(run_n(n, s, s.steps_at_largest if largest else s.steps, largest, Path(tmp)))
        r = results[-1]
        print(
            f"scale: N={n}: lease p50 {r['lease_p50_ms']:.1f} ms, {r['samples_per_s']:.0f} samples/s, "
            f"all hold (hub) {r['sync_hub']['seconds']:.2f} s, (store) {r['sync_store']['seconds']:.2f} s",
            flush=True,
        )
    return results


def run(quick: bool) -> list[BenchRow]:
    s = QUICK if quick else FULL
    # Each lease the hub takes back is logged; at N=512 from the hub that is hundreds of lines. The
    # table counts them (units reissued).
    logging.getLogger("atgrpo.hub").setLevel(logging.ERROR)
    print(
        f"scale: N = {', '.join(map(str, s.sizes))}; weights {s.weights_mb} MiB (steps: {s.step_mb} MiB); "
        f"rollout delay {s.delay_s} s; a busy shared machine: read the ratios",
        flush=True,
    )
    results = measure(s)
    rows = rows_of(results)
    model = scale_model.predict(results)
    print(scale_model.format_table(model))
    print_profile(results[-1])
    DETAIL_JSON.parent.mkdir(parents=True, exist_ok=True)
    DETAIL_JSON.write_text(
        json.dumps(
            {"settings": asdict(s), "per_n": results, "model": model},
            indent=2,
            default=str,
        )
    )
    print(f"scale: details in {DETAIL_JSON}")
    rows += [
        BenchRow(
            SUITE,
            f"predicted sync through the store, {m['model']} N={m['actors']} ({m['link_gbit']:g} Gb/s)",
            m["store_s"],
            "s",
            "from the hub",
            m["hub_s"],
            False,
        )
        for m in model["rows"]
    ]
    return rows


if __name__ == "__main__":  # `python -m atgrpo.bench.scale.suite [--quick]`
    from atgrpo.bench.report import print_table

    print_table(run("--quick" in sys.argv))
