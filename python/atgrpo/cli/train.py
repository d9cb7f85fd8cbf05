"""`atgrpo-train`: one learner and N actors on this host over a private ipc socket (`launch.local`),
or on a Ray cluster with `launch.backend = "ray"` (`launch.ray_run`).

`--print-commands` prints the commands for a multi-host run instead of starting anything.
"""

from __future__ import annotations

import shlex
import sys

from atgrpo.cli.common import DEMO, config_parser, load_run_config

DEFAULT_PORT = 5555
"""The hub's tcp port in printed multi-host commands when neither `--address` nor
`transport.endpoint` names one."""


def child_cmd(module: str, args, extra: list[str]) -> list[str]:
    """The command of a child process: the same config file and overrides as the launcher's."""
    cmd = [sys.executable, "-m", module]
    if args.config:
        cmd.append(str(args.config))
    for o in args.overrides:
        cmd += ["--set", o]
    if args.curve_keys:
        cmd += ["--curve-keys", str(args.curve_keys)]
    return cmd + extra


def print_commands(args, cfg) -> None:
    sets = "".join(f" --set {shlex.quote(o)}" for o in args.overrides)
    conf = f" {shlex.quote(str(args.config))}" if args.config else ""
    bind = args.address or (cfg.transport.endpoint if cfg.transport.endpoint.startswith("tcp://") else "")
    bind = bind or f"tcp://0.0.0.0:{DEFAULT_PORT}"
    port = bind.rsplit(":", 1)[-1]
    hub_keys, actor_keys = "", ""
    if not cfg.transport.insecure:
        folder = shlex.quote(cfg.transport.curve_keys or "keys")
        print("# Once, on the learner host: CURVE keys (tcp is encrypted; only actors holding a key get in)")
        if not cfg.transport.curve_keys:
            print(f"atgrpo-keys init {folder}")
        print(f"atgrpo-keys bundle {folder} actor actor-keys   # then copy actor-keys/ to every actor host")
        hub_keys, actor_keys = f" --curve-keys {folder}", " --curve-keys actor-keys"
    else:
        print("# transport.insecure = true: no keys; anyone who can reach the port can join the run")
    print("# On the learner host (add `torchrun --nproc_per_node N -m atgrpo.cli.learner` for several ranks):")
    print(f"atgrpo-learner{conf}{sets} --address {shlex.quote(bind)}{hub_keys}")
    print("# On each actor host (the config must point at model folders readable there):")
    print(f"atgrpo-actor{conf}{sets} --address tcp://LEARNER_HOST:{port}{actor_keys}")


def main(argv: list[str] | None = None) -> int:
    parser = config_parser("atgrpo-train", "Train on this machine: one learner and N actors over ipc.", DEMO)
    parser.add_argument("--actors", type=int, default=None, help="actor processes (default: launch.actors)")
    parser.add_argument("--print-commands", action="store_true", help="print the multi-host commands and exit")
    parser.add_argument("--address", default=None, help="with --print-commands: the hub's tcp address to bind")
    args = parser.parse_args(argv)
    cfg = load_run_config(args)
    if args.print_commands:
        print_commands(args, cfg)
        return 0
    from atgrpo.errors import LaunchError, PlacementError

    n_actors = args.actors if args.actors is not None else cfg.launch.actors
    try:
        if cfg.launch.backend == "ray":
            from atgrpo.launch.ray_run import RayRun

            return RayRun(cfg, n_actors).run()
        from atgrpo.launch.gpu_plan import check_plan
        from atgrpo.launch.local import LocalRun, learner_command

        for load in check_plan(cfg):
            print(f"plan: {load.describe()}", flush=True)
        learner = learner_command(child_cmd("atgrpo.cli.learner", args, []), len(cfg.launch.learner_devices))
        return LocalRun(cfg, learner, child_cmd("atgrpo.cli.actor", args, []), n_actors).run()
    except PlacementError as exc:  # the plan, or a device a child's environment cannot name
        sys.exit(f"placement error: {exc}")
    except LaunchError as exc:  # the Ray cluster: missing, unreachable, too small, a node lost at start
        sys.exit(f"launch error: {exc}")


if __name__ == "__main__":
    sys.exit(main())
