"""`atgrpo-bench learning`: the learning suites, arms x seeds of `atgrpo-train` runs tabled over seeds
(docs/learning.md), and the tools beside them.

One module per responsibility:
- `suites`: what each suite is (arms, reference, seeds, budget); data only;
- `runs`: a run's folder and command, and whether a finished run is still the one its command makes;
- `runner`: running or reading back every run of a suite, then its report;
- `report`, `results`, `stats`, `plot`: the suite's tables (written, stored, rebuilt) and curves;
- `steps`, `warmstart`: the `steps` and `warmstart` subcommands;
- `cli`: `atgrpo-bench learning`'s parser, which hands a subcommand its own.

Nothing is imported here, so importing one part (the statistics, say) costs only that part.
"""
