"""`atgrpo-keys`: CURVE keys for a multi-host run (encryption and mutual authentication over tcp).

    atgrpo-keys init keys/                      # hub keypair + the default actor keypair "actor"
    atgrpo-keys add-actor keys/ gpu-node-3      # one more actor key (the hub reads actors/ at start)
    atgrpo-keys bundle keys/ gpu-node-3 out/    # what that actor host needs: hub.key + its own keypair

Give the hub `--curve-keys keys/` (or `transport.curve_keys`), each actor host its bundle with
`--curve-keys out/ --set transport.curve_actor=\\"gpu-node-3\\"`. Exit status 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="atgrpo-keys", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="make a key folder: hub keypair and the default actor keypair")
    init.add_argument("folder")
    add = sub.add_parser("add-actor", help="add an actor keypair to a key folder")
    add.add_argument("folder")
    add.add_argument("name")
    bundle = sub.add_parser("bundle", help="copy what one actor host needs to a new folder")
    bundle.add_argument("folder")
    bundle.add_argument("name")
    bundle.add_argument("dest")
    args = p.parse_args(argv)
    from pathlib import Path

    from atgrpo.transport import keys
    from atgrpo.transport.errors import CurveKeyError

    try:
        if args.command == "init":
            if (Path(args.folder) / "hub.key_secret").exists():
                raise CurveKeyError(
                    f"{args.folder} already holds keys; use a new folder (old actors would be locked out)"
                )
            print(f"key folder {keys.generate_keys(args.folder)}: give it to the hub (--curve-keys)")
        elif args.command == "add-actor":
            print(f"actor key {keys.add_actor(args.folder, args.name)} (restart the hub to accept it)")
        else:
            print(f"actor bundle {keys.actor_bundle(args.folder, args.name, args.dest)}: copy it to that actor's host")
    except CurveKeyError as exc:
        print(f"atgrpo-keys: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
