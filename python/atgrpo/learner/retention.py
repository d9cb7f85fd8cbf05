"""Checkpoint retention: keep the newest `run.keep_checkpoints` complete checkpoints, and every one the
user marked, and remove the rest in a way a crash cannot turn into a broken run.

What counts (under `out_dir/checkpoints/`, layout in `learner.checkpoints`):
- A checkpoint is *complete* once `mark_latest` started on it: it writes `step_<n>/COMPLETE` (after
  every rank's part is on disk) and then points `latest` at the folder. The folder `latest` names is
  complete too (checkpoints written before the `COMPLETE` file existed have only that).
- Folders without `COMPLETE` are half-written (a crashed write, or one being written again after a
  resume) or predate the marker. Retention neither counts nor removes them: a crashed write is
  removed by the writer (`Trainer.checkpoint`) or written over when the resumed run reaches its step
  again, as before retention existed; older runs' folders are left for the user.
- A checkpoint is *marked to keep* when its folder holds a file named `KEEP` (`touch
  checkpoints/step_000200/KEEP`, at any time) or its step is in `run.keep_checkpoint_steps`.

Rules (`plan_removal`, a pure function of the folder list, and `prune_checkpoints`, which acts):
- Nothing is removed before `latest` names a complete checkpoint, and only complete checkpoints
  older than it are removed: a checkpoint goes only after a newer one is complete.
- The newest `keep` complete checkpoints up to `latest` stay (`latest` is always one of them);
  marked ones stay too and count among the newest if they are. `keep = 0` keeps everything.
- Complete folders newer than `latest` (a crash between `COMPLETE` and the link) are left alone: the
  resumed run writes that step again.

Crash safety: a removal first renames `step_<n>` to `.step_<n>.deleting` (atomic, and out of the
`step_*` namespace, so no reader and no later pass mistakes it for a checkpoint; `latest` never names
it because `latest` is never removed), then deletes the renamed tree. A crash at any point leaves
either the whole checkpoint, or a `.deleting` leftover that the next pass deletes first. Rank 0 alone
runs it, after the barrier that ends a checkpoint write; the folder is assumed to be shared by the
ranks, as `latest` already is.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from atgrpo.learner.checkpoints import COMPLETE, KEEP, latest_checkpoint

DELETING = ".deleting"
"""Suffix of a checkpoint folder being removed (`.step_<n>.deleting`)."""

_STEP = re.compile(r"step_(\d+)")


@dataclass(frozen=True)
class Entry:
    """One `step_<n>` folder as a retention pass sees it."""

    name: str
    step: int
    complete: bool
    """Holds `COMPLETE`, or is the folder `latest` names."""
    keep: bool
    """Holds `KEEP`."""


def plan_removal(
    entries: Sequence[Entry], latest: str | None, keep: int, keep_steps: Collection[int] = ()
) -> list[str]:
    """The names of the folders to remove, oldest first (see the module docstring for the rules)."""
    if keep == 0 or latest is None:
        return []
    newest = next((e.step for e in entries if e.name == latest), None)
    if newest is None:  # `latest` names nothing listed: know nothing, remove nothing
        return []
    older = sorted((e for e in entries if e.complete and e.step < newest), key=lambda e: e.step, reverse=True)
    return [e.name for e in reversed(older[keep - 1 :]) if not (e.keep or e.step in keep_steps)]


def list_entries(root: Path, latest: str | None) -> list[Entry]:
    """The `step_<n>` folders under `root` (other names, links and files are not checkpoints)."""
    out = []
    for path in root.iterdir() if root.is_dir() else ():
        found = _STEP.fullmatch(path.name)
        if found is None or path.is_symlink() or not path.is_dir():
            continue
        complete = path.name == latest or (path / COMPLETE).is_file()
        out.append(Entry(path.name, int(found.group(1)), complete, (path / KEEP).exists()))
    return out


def leftovers(root: Path) -> list[Path]:
    """Folders of removals a crash interrupted."""
    return (
        sorted(p for p in root.glob(f".step_*{DELETING}") if p.is_dir() and not p.is_symlink()) if root.is_dir() else []
    )


def prune_checkpoints(root: Path, keep: int, keep_steps: Collection[int] = ()) -> list[str]:
    """Rank 0, after `mark_latest` of the newest checkpoint: finish removals a crash interrupted, then
    remove the checkpoints `plan_removal` names. Returns the names removed. Raises `OSError` where a
    removal fails; what is left then is either a whole checkpoint or a leftover the next pass removes."""
    for left in leftovers(root):
        shutil.rmtree(left)
    current = latest_checkpoint(root)
    latest = current.name if current is not None else None
    removed = []
    for name in plan_removal(list_entries(root, latest), latest, keep, keep_steps):
        doomed = root / f".{name}{DELETING}"
        os.rename(root / name, doomed)  # atomic: from here on it is no checkpoint, whatever happens next
        shutil.rmtree(doomed)
        removed.append(name)
    return removed


__all__ = ["COMPLETE", "DELETING", "KEEP", "Entry", "leftovers", "list_entries", "plan_removal", "prune_checkpoints"]
