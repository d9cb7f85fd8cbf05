"""A model of weight sync on a cluster, from `atgrpo-bench scale`'s per-N figures.

Per step, every actor needs the new version (W bytes). Two paths:

- from the hub (today): rank 0 sends N copies. Its rate is the lower of its NIC and what the hub's
  process can push per CPU second, measured in the bench at the largest N (bytes served over the
  process's CPU seconds while it served them: libzmq's one I/O thread encrypting with CURVE, the
  hub thread, the trackers; CPU time, so the machine's other load does not count):
      t_hub = N * W / min(link, hub_rate)     (and N * W / link: the hub's best case, its NIC alone)
- through the store: rank 0 writes one copy, then N actors read at once, each at the lower of its
  own NIC and its share of the storage system's aggregate read bandwidth:
      t_store = W / min(link, store_bw) + W / min(link, store_bw / N)

Assumptions are stated where they are printed (`format_table`): `LINK_GBIT` per host, `STORE_GBYTES`
aggregate read bandwidth of the shared filesystem (a mid-sized parallel filesystem; set yours). The
simulation checks the model's shape, not its constants: its store-path time grows with N only by
the actors' own reads on this machine's shared cores.
"""

from __future__ import annotations

MODELS = {"Qwen3-1.7B": 1.72e9 * 2, "Qwen3-8B": 8.19e9 * 2}
"""Bytes of one version in bf16 (parameters x 2)."""
ACTORS = (8, 64, 256)
LINK_GBIT = 100.0
"""Each host's NIC, Gb/s (rank 0's and every actor's)."""
STORE_GBYTES = 50.0
"""Aggregate read bandwidth of the shared filesystem, GB/s."""


def predict(
    results: list[dict],
    link_gbit: float = LINK_GBIT,
    store_gbytes: float = STORE_GBYTES,
) -> dict:
    """The predicted seconds per step of both paths, for `MODELS` x `ACTORS`, from the bench's results."""
    big = results[-1]
    hub = big["sync_hub"]
    hub_rate = hub["bytes_out"] / hub["hub_cpu_s"] if hub["hub_cpu_s"] > 0 else float("inf")
    link = link_gbit * 1e9 / 8
    store_bw = store_gbytes * 1e9
    rows = []
    for name, w in MODELS.items():
        for n in ACTORS:
            t_hub = n * w / min(link, hub_rate)
            t_store = w / min(link, store_bw) + w / min(link, store_bw / n)
            rows.append(
                {
                    "model": name,
                    "actors": n,
                    "link_gbit": link_gbit,
                    "hub_s": t_hub,
                    "hub_nic_s": n * w / link,
                    "store_s": t_store,
                }
            )
    first = results[0]
    return {
        "link_gbit": link_gbit,
        "store_gbytes": store_gbytes,
        "hub_rate_gbytes": hub_rate / 1e9,
        "hub_rate_at_n": big["n"],
        "measured_growth": {
            path: big[f"sync_{path}"]["seconds"] / first[f"sync_{path}"]["seconds"] for path in ("hub", "store")
        },
        "measured_n": [first["n"], big["n"]],
        "rows": rows,
    }


def format_table(model: dict) -> str:
    lines = [
        (
            f"\nweight sync per step, predicted: {model['link_gbit']:g} Gb/s NICs, store {model['store_gbytes']:g} GB/s "
            f"aggregate, hub {model['hub_rate_gbytes']:.2f} GB per CPU second (measured here at N={model['hub_rate_at_n']})"
        ),
        f"{'model':<12} {'actors':>6} {'from the hub':>13} {'(NIC alone)':>12} {'through store':>14}",
    ]
    for r in model["rows"]:
        lines.append(
            f"{r['model']:<12} {r['actors']:>6} {r['hub_s']:>12.1f}s {r['hub_nic_s']:>11.1f}s {r['store_s']:>13.1f}s"
        )
    g = model["measured_growth"]
    lines.append(
        f"measured here, N={model['measured_n'][0]} -> {model['measured_n'][1]}: time until all hold grows "
        f"{g['hub']:.1f}x from the hub, {g['store']:.1f}x through the store"
    )
    return "\n".join(lines)


__all__ = ["ACTORS", "LINK_GBIT", "MODELS", "STORE_GBYTES", "format_table", "predict"]
