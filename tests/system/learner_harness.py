"""Runs the real `atgrpo-learner` (`atgrpo.cli.learner.main`) with one test hook, for test_async.

python learner_harness.py wait-untaken <atgrpo-learner args>
    When a checkpoint takes the committed units of later steps (`Hub.untaken`), wait (up to 60
    s) until there is at least one: the actors keep rolling out meanwhile, so the checkpoint
    deterministically holds units a resume must hand back.
"""

from __future__ import annotations

import sys
import time

from atgrpo.cli import learner as learner_cli
from atgrpo.learner.hub import Hub


def wait_untaken() -> None:
    original = Hub.untaken

    def untaken(self):
        deadline = time.monotonic() + 60
        while not (units := original(self)) and time.monotonic() < deadline:
            time.sleep(0.05)
        return units

    Hub.untaken = untaken


def main() -> int:
    mode, argv = sys.argv[1], sys.argv[2:]
    if mode != "wait-untaken":
        raise SystemExit(f"unknown mode {mode!r}")
    wait_untaken()
    return learner_cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
