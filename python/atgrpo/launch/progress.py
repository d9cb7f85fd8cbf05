"""The launcher's progress bar: step, reward, success and samples/s, from metrics.jsonl rows.

The local launcher tails the file itself (`path`); the Ray launcher, whose learner may run on another
node, feeds the rows its learner's host tailed there (`feed`). Both draw the same bar.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path


class Progress:
    """Drives a tqdm bar from metrics rows, tailing `path` when given. `write` prints a line above the bar."""

    def __init__(self, path: Path | None, total: int) -> None:
        from tqdm import tqdm

        self.path = path
        self.bar = tqdm(total=total, desc="AT-GRPO", unit="step", dynamic_ncols=True)
        self._last_t = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if path is not None:
            self._offset = path.stat().st_size if path.exists() else 0
            self._thread = threading.Thread(target=self._run, args=(path,), daemon=True)
            self._thread.start()

    def _run(self, path: Path) -> None:
        while not self._stop.wait(0.5):
            if not path.exists():
                continue
            with open(path, "rb") as f:
                f.seek(self._offset)
                complete, _, _ = f.read().rpartition(b"\n")  # a line still being written waits
            if complete:
                self._offset += len(complete) + 1
                self.feed(complete.decode(errors="replace").split("\n"))

    def feed(self, lines: list[str]) -> None:
        """Move the bar by complete metrics.jsonl lines."""
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if "rollout/success" in row:
                now = time.monotonic()
                rate = row.get("rollout/samples", 0.0) / max(now - self._last_t, 1e-9)
                self._last_t = now
                self.bar.n = int(row["step"])
                self.bar.set_postfix(
                    reward=f"{row.get('rollout/reward_mean', 0):.3f}",
                    success=f"{row['rollout/success']:.2f}",
                    samples_s=f"{rate:.0f}",
                )

    def write(self, text: str) -> None:
        self.bar.write(text)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.bar.close()
