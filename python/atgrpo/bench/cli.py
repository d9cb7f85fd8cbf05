"""`atgrpo-bench`: throughput and latency of atgrpo's parts, each beside an in-run reference.

    atgrpo-bench env            # env pool vs the pure-Python reference
    atgrpo-bench kernels        # advantage kernel vs a Python dict loop and numpy
    atgrpo-bench transport      # weight sync and sample streaming over ZMQ vs bare pyzmq
    atgrpo-bench e2e            # default-config step time split and actor idle vs one process; Ray vs local launcher; a slow weight store
    atgrpo-bench sandbox        # sandboxed executions/s and overhead vs plain python -I -S
    atgrpo-bench engines        # vLLM and torch engines vs transformers generate on SmolLM2-135M
    atgrpo-bench memory         # learner step peak memory and time, chunked logits + checkpointing vs before
    atgrpo-bench all --quick    # everything above, fewer repeats
    atgrpo-bench learning SUITE # arms x seeds of atgrpo-train runs (docs/learning.md; not in `all`; no SUITE: staleness)
    atgrpo-bench learning report [NAME]  # a published table rebuilt from docs/results/NAME.json
    atgrpo-bench gpu            # the first check on a GPU machine (not in `all`; --device cpu: the same on CPU)
    atgrpo-bench lora           # LoRA per role vs full fine-tuning on SmolLM2: sync bytes, learner and actor memory (not in `all`)
    atgrpo-bench scale          # the hub against 8..512 simulated actors; weights from the hub vs a shared store (not in `all`)

Prints a table and writes JSON (default `bench-results/<suite>.json`). Timings are medians; the
machines are shared, so read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from atgrpo.bench.report import BenchRow, print_table, write_json
from atgrpo.errors import BenchNotRunError, PlacementError

SUITES = {
    "env": "atgrpo.bench.env",
    "kernels": "atgrpo.bench.kernels",
    "transport": "atgrpo.bench.transport",
    "e2e": "atgrpo.bench.e2e",
    "sandbox": "atgrpo.bench.sandbox",
    "memory": "atgrpo.bench.memory",
    "engines": "atgrpo.bench.engines",  # last: it starts vLLM in this process
}
LONG = {
    "learning": "atgrpo.bench.learning.cli",  # its own parser: main() hands it the rest of the line
    "gpu": "atgrpo.bench.gpu.suite",
    "lora": "atgrpo.bench.lora",
    "scale": "atgrpo.bench.scale.suite",
}
"""Suites that take many minutes, or need a GPU: run only when named. A family of several modules is
a subpackage (`learning`, `gpu`, `scale`); the module named here is the one the suite runs."""
NOT_RUN = 2
"""Exit status of a suite that cannot run on this machine (it prints why)."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["learning"]:  # its own arguments (SUITE, --seeds, --steps, --only, subcommands)
        from atgrpo.bench.learning.cli import main as learning_main

        return learning_main(argv[1:])
    parser = argparse.ArgumentParser(prog="atgrpo-bench", description=__doc__.split("\n")[0])
    parser.add_argument("suite", choices=[*SUITES, *LONG, "all"], help="what to measure")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (seconds, for smoke runs)")
    parser.add_argument("--json", type=Path, default=None, help="where to write results (default bench-results/)")
    parser.add_argument("--device", default="cuda", help="gpu suite: where to run the check (cuda, cuda:N or cpu)")
    parser.add_argument("--no-vllm", action="store_true", help="gpu suite: leave the vLLM engine out")
    parser.add_argument(
        "--launchers-only",
        action="store_true",
        help="e2e suite: only the Ray launcher against the local one (the modes left out)",
    )
    parser.add_argument(
        "--store-only",
        action="store_true",
        help="e2e suite: only the weight store's write against the step (a slow write injected)",
    )
    args = parser.parse_args(argv)

    # One core, as the targets are stated: keep BLAS/torch thread pools from skewing the references.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    names = list(SUITES) if args.suite == "all" else [args.suite]
    rows: list[BenchRow] = []
    for name in names:
        module = importlib.import_module({**SUITES, **LONG}[name])
        if name == "e2e":
            from atgrpo.bench import e2e_store

            if not args.store_only:
                rows += module.run(args.quick, launchers_only=args.launchers_only)
            if not args.launchers_only:
                rows += e2e_store.run(args.quick)
            continue
        if name != "gpu":
            rows += module.run(args.quick)
            continue
        try:
            rows += module.run(args.quick, device=args.device, vllm=not args.no_vllm)
        except BenchNotRunError as exc:
            print(f"atgrpo-bench gpu: not run: {exc}")
            return NOT_RUN
        except PlacementError as exc:  # a --device that names no device here: the user's input, said plainly
            print(f"atgrpo-bench gpu: {exc}", file=sys.stderr)
            return 1
    print_table(rows)
    path = args.json or Path("bench-results") / f"{args.suite}.json"
    write_json(rows, path)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
