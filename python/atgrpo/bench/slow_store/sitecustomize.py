"""A slow shared filesystem, for `atgrpo-bench e2e --store-only` (issue 48, item 3).

The bench puts this folder first on the PYTHONPATH of one `atgrpo-train` run, so every process of
that run (learner ranks and actors) imports it at start-up. It makes the weight store's write of each
version take `ATGRPO_BENCH_STORE_WRITE_DELAY_S` longer: the sleep comes before the marker, while the
version lies half-written in its temporary folder, as a large model on NFS does. Nothing else is
touched, and atgrpo itself never reads the variable.

The store module is patched when it is first imported, not here: importing it at start-up would load
torch into every Python process of the run, the bench's own helpers included.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import time

TARGET = "atgrpo.transport.weight_store"
DELAY_S = float(os.environ.get("ATGRPO_BENCH_STORE_WRITE_DELAY_S", "0") or 0)


def _slow(module) -> None:
    real = module._write_file

    def write_file(path, frames, raw=False):
        if path.name == module.MARKER:
            time.sleep(DELAY_S)
        return real(path, frames, raw)

    module._write_file = write_file


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)  # find the real spec, once
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _slow(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if DELAY_S > 0:
    sys.meta_path.insert(0, _PatchOnImport())
