"""The launcher's progress bar: step, reward, success and samples/s, tailed from metrics.jsonl."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path


class Progress:
    """Tails metrics.jsonl and drives a tqdm bar. `write` prints a line above the bar."""

    def __init__(self, path: Path, total: int) -> None:
        from tqdm import tqdm

        self.path = path
        self.bar = tqdm(total=total, desc="AT-GRPO", unit="step", dynamic_ncols=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._offset = path.stat().st_size if path.exists() else 0
        self._thread.start()

    def _run(self) -> None:
        last_t = time.monotonic()
        while not self._stop.wait(0.5):
            if not self.path.exists():
                continue
            with open(self.path) as f:
                f.seek(self._offset)
                lines = f.readlines()
                self._offset = f.tell()
            for line in lines:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line still being written: read again next time
                if "rollout/success" in row:
                    now = time.monotonic()
                    rate = row.get("rollout/samples", 0.0) / max(now - last_t, 1e-9)
                    last_t = now
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
        self._thread.join(timeout=2)
        self.bar.close()
