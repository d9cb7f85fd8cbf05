"""`atgrpo-bench scale`: the learner's real hub against many simulated actors (docs/benchmarks.md).

`suite` is what the command runs (`run(quick)`, the hub in this process); `sim` the simulated actors,
each worker a child process (`python -m atgrpo.bench.scale.sim`); `probes` what is measured in the
hub's process; `report` the table and profile; `model` the cluster model fitted to the figures.
Nothing is imported here: a worker child imports only what it runs.
"""
