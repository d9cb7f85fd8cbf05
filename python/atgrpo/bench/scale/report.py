"""The table and the profile `atgrpo-bench scale` prints, from its per-N figures (`suite.run_n`)."""

from __future__ import annotations

from atgrpo.bench.report import BenchRow

SUITE = "scale"


def rows_of(results: list[dict]) -> list[BenchRow]:
    """The table: every figure at each N beside N = smallest, and the targets' rows."""
    ref = results[0]
    n0 = ref["n"]
    rows: list[BenchRow] = []
    at = {r["n"]: r for r in results}
    mid = at.get(128) or results[min(len(results) - 1, 2)]
    big = results[-1]
    for r in results:
        n = r["n"]
        tag = f"N={n}"
        rows += [
            BenchRow(
                SUITE,
                f"lease latency p50, {tag}",
                r["lease_p50_ms"],
                "ms",
                f"N={n0}",
                ref["lease_p50_ms"],
                False,
            ),
            BenchRow(
                SUITE,
                f"lease latency p99, {tag}",
                r["lease_p99_ms"],
                "ms",
                f"N={n0}",
                ref["lease_p99_ms"],
                False,
            ),
            BenchRow(
                SUITE,
                f"samples taken in, {tag}",
                r["samples_per_s"],
                "samples/s",
                f"N={n0}",
                ref["samples_per_s"],
                True,
            ),
            BenchRow(
                SUITE,
                f"hub CPU, {tag}",
                r["hub_cpu_cores"],
                "cores",
                f"N={n0}",
                ref["hub_cpu_cores"],
                False,
            ),
            BenchRow(
                SUITE,
                f"hub memory growth, steps, {tag}",
                r["hub_rss_mb"],
                "MB",
                f"N={n0}",
                ref["hub_rss_mb"],
                False,
            ),
            BenchRow(
                SUITE,
                f"hub memory growth, sync from the hub, {tag}",
                r["hub_rss_sync_mb"],
                "MB",
                f"N={n0}",
                ref["hub_rss_sync_mb"],
                False,
            ),
            BenchRow(
                SUITE,
                f"hub thread busy, steps, {tag}",
                100 * r["hub_thread_busy"],
                "% of wall",
                f"N={n0}",
                100 * ref["hub_thread_busy"],
                False,
            ),
            BenchRow(
                SUITE,
                f"hub thread CPU per step, {tag}",
                r["hub_thread_cpu_per_step_s"],
                "s",
                f"N={n0}",
                ref["hub_thread_cpu_per_step_s"],
                False,
            ),
            BenchRow(
                SUITE,
                f"units reissued during the sync from the hub, {tag}",
                r["units_reissued_by_phase"]["hub"],
                "units",
                "through the store",
                r["units_reissued_by_phase"]["store"],
                False,
            ),
        ]
        for path in ("hub", "store"):
            sync, sync0 = r[f"sync_{path}"], ref[f"sync_{path}"]
            rows += [
                BenchRow(
                    SUITE,
                    f"last actor leased a unit naming it ({path}), {tag}",
                    sync["last_start_s"],
                    "s",
                    f"N={n0}",
                    sync0["last_start_s"],
                    False,
                ),
                BenchRow(
                    SUITE,
                    f"one actor's fetch, p50 ({path}), {tag}",
                    sync["fetch_p50_s"],
                    "s",
                    f"N={n0}",
                    sync0["fetch_p50_s"],
                    False,
                ),
            ]
            target, met = "", None
            if r is mid and path == "store":
                target, met = f"<= 3x N={n0}", sync["seconds"] <= 3 * sync0["seconds"]
            rows.append(
                BenchRow(
                    SUITE,
                    f"all {n} hold a new version ({path}), {sync['holders']} fetched",
                    sync["seconds"],
                    "s",
                    f"N={n0}",
                    sync0["seconds"],
                    False,
                    target,
                    met,
                )
            )
            target, met = "", None
            if r is mid and path == "store":
                target, met = (
                    "<= 4 copies",
                    sync["bytes_out"] <= 4 * r["one_copy_bytes"],
                )
            rows.append(
                BenchRow(
                    SUITE,
                    f"bytes leaving rank 0 per version ({path}), {tag}",
                    sync["bytes_out"] / r["one_copy_bytes"],
                    "copies",
                    "one copy",
                    1.0,
                    False,
                    target,
                    met,
                )
            )
    bad = big["units_reissued"] + big["units_refused"] + big["samples_refused"]
    rows.append(
        BenchRow(
            SUITE,
            f"units reissued, units and samples refused, N={big['n']} x {big['steps']} steps",
            bad,
            "count",
            "none",
            0.0,
            False,
            "0",
            bad == 0,
        )
    )
    return rows


def print_profile(r: dict) -> None:
    prof = r.get("profile")
    if not prof:
        return
    print(f"\nhub thread at N={r['n']}: {prof['samples']} stack samples; where its time goes")
    for name, share in prof["atgrpo"].items():
        print(f"  {100 * share:5.1f}%  {name}")
    handled = sorted(r["handle_ms"].items(), key=lambda kv: -kv[1]["total_s"])
    print(
        "  per message kind: "
        + "; ".join(f"{k} {v['count']}x p50 {v['p50']:.2f} ms p99 {v['p99']:.2f} ms" for k, v in handled)
    )
    print(f"  lease upkeep (expiry scan every loop turn): {r['lease_upkeep_s']:.2f} s")


__all__ = ["SUITE", "print_profile", "rows_of"]
