"""A stand-in learner rank for `test_torchrun_shutdown.py`, started by torchrun:

    python -m torch.distributed.run ... -m torchrun_child FOLDER SECONDS

It writes `ready-<rank>` in FOLDER, waits for SIGINT (which torchrun forwards), then spends SECONDS
as the learner does checkpointing and evaluating after a signal, and writes `saved-<rank>`."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    folder, seconds = Path(sys.argv[1]), float(sys.argv[2])
    rank = os.environ["RANK"]
    got: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    (folder / f"ready-{rank}").write_text("")
    while not got:
        time.sleep(0.05)
    time.sleep(seconds)
    (folder / f"saved-{rank}").write_text("")
    return 0


if __name__ == "__main__":
    sys.exit(main())
