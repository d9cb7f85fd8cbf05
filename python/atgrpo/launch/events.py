"""What a launcher shows of its learner: the learner's stdout lines (JSON `LearnerEvent`s) turned into
the lines a user reads, the progress bar, the hub's address for the actors, and the run's summary.
One definition for both launchers, so a run reads the same on one host and on a Ray cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec

from atgrpo.config import RunConfig
from atgrpo.launch.progress import Progress
from atgrpo.messages import (
    EvalSummary,
    Failed,
    HubReady,
    LearnerEvent,
    Notice,
    Resumed,
    RunSummary,
    Stopping,
    WarmStartProgress,
)


def describe(event: LearnerEvent, cfg: RunConfig) -> str | None:
    """The line a user sees for a learner event (None: nothing to show)."""
    if isinstance(event, WarmStartProgress):
        return f"[{event.policy}] warm start step {event.step}/{event.steps} loss {event.loss:.3f}"
    if isinstance(event, Resumed):
        return f"resumed from {event.checkpoint} at step {event.step}"
    if isinstance(event, EvalSummary):
        return f"eval ({event.label}) at step {event.step}: held-out success {event.success:.3f} over {event.levels} levels"
    if isinstance(event, Stopping):
        return f"stopping early at step {event.step} ({event.reason})"
    if isinstance(event, Failed):
        return f"learner error: {event.error}"
    if isinstance(event, Notice):
        return f"{event.level}: {event.text}"
    if isinstance(event, RunSummary) and event.eval_start is not None and event.eval_end is not None:
        return (
            f"held-out success ({cfg.run.eval_seeds} eval levels): {100 * event.eval_start:.1f}% -> "
            f"{100 * event.eval_end:.1f}% ({event.improvement_points:+.1f} points) after {event.steps} steps"
        )
    return None


class LearnerView:
    """Reads the learner's stdout lines: `hub_ready(address)` is called once the hub is up, which
    also starts the progress bar (tailing `metrics` when given, else fed by `feed_metrics`)."""

    def __init__(self, cfg: RunConfig, hub_ready: Callable[[str], None], metrics: Path | None) -> None:
        self.cfg = cfg
        self.hub_ready = hub_ready
        self.metrics = metrics
        self.progress: Progress | None = None
        self.summary: RunSummary | None = None
        self._decoder = msgspec.json.Decoder(LearnerEvent)

    def say(self, text: str) -> None:
        (self.progress.write(text) if self.progress else print(text, flush=True))

    def line(self, line: str) -> None:
        try:
            event = self._decoder.decode(line)
        except msgspec.DecodeError:
            if line.strip():
                self.say(line.rstrip())  # not an event: something the learner's libraries printed
            return
        if isinstance(event, HubReady):
            self.hub_ready(event.address)
            if self.progress is None:
                self.progress = Progress(self.metrics, self.cfg.run.steps)
        elif isinstance(event, RunSummary):
            self.summary = event
        text = describe(event, self.cfg)
        if text:
            self.say(text)

    def feed_metrics(self, lines: list[str]) -> None:
        if self.progress is not None and lines:
            self.progress.feed(lines)

    def close(self, logs: str) -> None:
        """Close the bar and print where the run's outputs are."""
        if self.progress is not None:
            self.progress.close()
        if self.summary is not None:
            out = Path(self.cfg.run.out_dir)
            print(f"metrics: {out / 'metrics.jsonl'}  curve: {self.summary.learning_curve}  logs: {logs}")


__all__ = ["LearnerView", "describe"]
