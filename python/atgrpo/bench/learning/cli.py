"""`atgrpo-bench learning SUITE`: arms x seeds of `atgrpo-train` runs, a table over seeds, paired
differences against a reference arm, an equal-wall-time view and curves (docs/learning.md).

    atgrpo-bench learning ordering                    # SA+GRPO .. MAS+AT-GRPO, 3 seeds
    atgrpo-bench learning grouping --seeds 0,1        # two seeds only
    atgrpo-bench learning alpha --only alpha0,alpha1 --steps 100
    atgrpo-bench learning smollm2                     # SmolLM2: full fine-tuning vs LoRA per role, 2 seeds
    atgrpo-bench learning                             # the suite `staleness` (k=0 vs k=1, equal wall time)
    atgrpo-bench learning report ordering             # the published table, rebuilt from docs/results/ordering.json
    atgrpo-bench learning steps RUN_DIR ...           # where each run's step time went (its metrics.jsonl)
    atgrpo-bench learning warmstart CONFIG --lr 1e-3  # a LoRA recipe's adapter warm start over lr and steps
    atgrpo-bench learning forks RUN_DIR               # a program-mode run: how likely each strategy's program is

Invariants:
- A first word in `SUBCOMMANDS` hands the rest of the line to that subcommand's own parser; any
  other line is a suite's (`suites.SUITES`). The suites' `--help` lists the subcommands from the
  same table, so a subcommand cannot exist without being listed.
- A subcommand's modules are imported only when it is named: `warmstart` pulls in torch and the
  eval CLI, which a suite's parser has no use for.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from atgrpo.bench.learning.plot import plot_suite
from atgrpo.bench.learning.runner import ROOT, run_suite
from atgrpo.bench.learning.runs import command, report_dir, run_dir
from atgrpo.bench.learning.suites import STORED, SUITES
from atgrpo.errors import LearningSuiteError


def report_main(argv: list[str]) -> int:
    """`atgrpo-bench learning report [NAME|FILE ...]`: each stored table rebuilt from its data alone
    (printed; with `--out`, written as `<name>.md` and, where curves were kept, `<name>_curves.png`)."""
    from atgrpo.bench.learning.results import curves, load, render

    parser = argparse.ArgumentParser(prog="atgrpo-bench learning report", description=report_main.__doc__)
    parser.add_argument("names", nargs="*", help=f"stored tables (names under {STORED}, or .json files; default: all)")
    parser.add_argument("--out", type=Path, default=None, help="also write each table (and its curves) here")
    args = parser.parse_args(argv)
    files = [Path(n) if n.endswith(".json") else STORED / f"{n}.json" for n in args.names] or sorted(
        STORED.glob("*.json")
    )
    for file in files:
        if not file.is_file():
            known = ", ".join(p.stem for p in sorted(STORED.glob("*.json")))
            print(f"atgrpo-bench learning report: no stored table {file} (stored: {known})", file=sys.stderr)
            return 1
        table = load(file)
        shown = f"docs/results/{file.name}" if file.parent.resolve() == STORED.resolve() else str(file)
        text = render(table, shown)
        print(f"<!-- {table.name}: {table.command} -->\n{text}")
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{table.name}.md").write_text(text)
            kept = curves(table)
            if any(kept.values()):
                plot_suite(kept, args.out / f"{table.name}_curves.png", table.name)
            else:
                print(f"{table.name}: no curves kept, no plot")
    return 0


def _steps_main(argv: list[str]) -> int:
    from atgrpo.bench.learning.steps import main as steps_main

    return steps_main(argv)


def _warmstart_main(argv: list[str]) -> int:
    from atgrpo.bench.learning.warmstart import main as warmstart_main

    return warmstart_main(argv)


def _forks_main(argv: list[str]) -> int:
    from atgrpo.bench.learning.forks import main as forks_main

    return forks_main(argv)


SUBCOMMANDS: dict[str, tuple[str, str, Callable[[list[str]], int]]] = {
    "report": ("[NAME|FILE ...]", "each published table rebuilt from its data (docs/results/NAME.json)", report_main),
    "steps": ("RUN_DIR ...", "where each run's step time went (its metrics.jsonl)", _steps_main),
    "warmstart": ("CONFIG", "a LoRA recipe's adapter warm start, swept over lr and step count", _warmstart_main),
    "forks": ("RUN_DIR", "a program-mode run's tool model: each strategy's program, how likely", _forks_main),
}
"""Name -> (its arguments, what it does, its main): the words that are not a suite."""


def subcommands_help() -> str:
    """The `--help` epilog: one line per subcommand, its arguments and what it does."""
    width = max(len(f"{name} {args}") for name, (args, _, _) in SUBCOMMANDS.items())
    lines = [f"  {f'{name} {args}':<{width}}  {what}" for name, (args, what, _) in SUBCOMMANDS.items()]
    return "subcommands (each with its own --help):\n" + "\n".join(lines)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in SUBCOMMANDS:
        return SUBCOMMANDS[argv[0]][2](argv[1:])
    parser = argparse.ArgumentParser(
        prog="atgrpo-bench learning",
        description=__doc__.split("\n")[0],
        epilog=subcommands_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the epilog's lines as written
    )
    parser.add_argument(
        "suite",
        nargs="?",
        default="staleness",
        choices=list(SUITES),
        help="which suite (default staleness); or a subcommand, below",
    )
    parser.add_argument("--seeds", type=_ints, default=None, help="comma-separated seeds (default: the suite's)")
    parser.add_argument("--steps", type=int, default=None, help="RL steps of every arm (default: the suite's)")
    parser.add_argument(
        "--only", type=lambda t: tuple(x for x in t.split(",") if x), default=(), help="comma-separated arms"
    )
    parser.add_argument("--out", type=Path, default=ROOT, help=f"results root (default {ROOT})")
    parser.add_argument(
        "--set", dest="sets", action="append", default=[], help="an override for every run (repeatable)"
    )
    parser.add_argument("--print-commands", action="store_true", help="print each run's command and exit")
    parser.add_argument("--no-run", action="store_true", help="table the finished runs only; start none")
    args = parser.parse_args(argv)
    suite = SUITES[args.suite]
    if args.print_commands:
        import shlex

        for arm in suite.arms:
            if args.only and arm.name not in args.only:
                continue
            for seed in args.seeds or suite.seeds:
                folder = run_dir(args.out, suite, arm, seed, args.steps, args.sets)
                print(shlex.join(command(suite, arm, seed, folder, args.steps, args.sets)))
        return 0
    try:
        summary = run_suite(
            suite,
            out=args.out,
            seeds=args.seeds,
            steps=args.steps,
            only=args.only,
            extra=args.sets,
            run_missing=not args.no_run,
        )
    except LearningSuiteError as exc:
        print(f"atgrpo-bench learning: {exc}", file=sys.stderr)
        return 1
    print(summary["table"])
    print(
        f"\nwrote {report_dir(args.out, suite, args.steps, args.sets)}/results.json, summary.json, table.md, curves.png"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
