"""Math answer checking: extract the final answer, compare plain numbers in-process, ask Math-Verify otherwise.

Where Math-Verify runs. It times itself out with SIGALRM, which only works on a main thread, and some
inputs hang it in C code where no signal is taken. So it runs in worker processes (`_worker.py`, started
with `subprocess`, never forked from the caller) that check one answer at a time on their main thread.
The caller's side enforces a hard latency cap per answer: a worker that has not answered in time is killed
(SIGKILL) and replaced, and that answer is wrong with reason `timeout`. Hence `MathVerifier` works from any
thread, from asyncio (`averify_batch`) and from processes that use SIGALRM themselves.

Threads and ownership. A `MathVerifier` owns its worker processes. A call checks workers out of the pool
(one for `verify`, up to all for `verify_batch`), drives them with `select` on their pipes, and returns
them; concurrent calls share the pool and wait for a free worker. Workers start lazily on first use
(about a second), or eagerly with `start()`. `close()` (or the context manager) ends them.

Verdicts never raise for a bad answer: no answer, a timeout, a crashed worker all come back as
`correct=False` with a reason. Only a worker that cannot start at all (e.g. math-verify not installed)
raises `VerifierStartError`.
"""

from __future__ import annotations

import asyncio
import atexit
import enum
import itertools
import select
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from atgrpo.verify.errors import VerifierStartError
from atgrpo.verify.extract import clean_answer, extract_answer
from atgrpo.verify.numbers import fast_compare
from atgrpo.verify.workers import WorkerProcess


class Reason(enum.StrEnum):
    EQUAL = "equal"
    NOT_EQUAL = "not_equal"
    NO_ANSWER = "no_answer"
    """Nothing answer-like in the prediction (see `extract_answer`)."""
    TOO_LONG = "too_long"
    """The extracted answer is longer than `max_answer_chars`; not sent to the verifier."""
    TIMEOUT = "timeout"
    """The verifier exceeded the latency cap; its worker was killed and replaced."""
    ERROR = "error"
    """The verifier failed on this answer (worker died, gold unparseable, ...); see `detail`."""


class Verdict(msgspec.Struct, frozen=True):
    """Outcome of checking one prediction against one gold answer."""

    correct: bool
    reason: Reason
    answer: str | None
    """The answer text that was compared (after extraction and cleaning), None if there was none."""
    rule: str | None
    """Which extraction rule found it (`boxed`, `hashes`, `answer_phrase`, `last_number`), or `given`."""
    path: Literal["fast", "verifier", "none"]
    """Who decided: the exact-number fast path, Math-Verify, or nobody (no answer, too long)."""
    detail: str = ""


_tokens = itertools.count(1)


@dataclass
class _Job:
    index: int
    answer: str
    gold: str
    token: int = field(default_factory=lambda: next(_tokens))
    """Request id on the wire, unique per process: a late reply to an abandoned job is never misread."""


class MathVerifier:
    """A pool of Math-Verify workers plus the in-process fast path. See the module docstring.

    `latency_cap_s` is the hard wall-clock limit for one answer in a worker; `parse_timeout_s` and
    `compare_timeout_s` are Math-Verify's own (SIGALRM, whole seconds) limits inside it, and should stay
    below the cap. `memory_limit_mb` bounds each worker's address space (0: no limit).
    """

    def __init__(
        self,
        *,
        workers: int = 1,
        latency_cap_s: float = 5.0,
        parse_timeout_s: int = 1,
        compare_timeout_s: int = 2,
        memory_limit_mb: int = 2048,
        startup_timeout_s: float = 60.0,
        fast_path: bool = True,
        max_answer_chars: int = 1000,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        if latency_cap_s <= 0:
            raise ValueError("latency_cap_s must be > 0")
        args = [str(int(parse_timeout_s)), str(int(compare_timeout_s)), str(int(memory_limit_mb))]
        self.latency_cap_s = latency_cap_s
        self.fast_path = fast_path
        self.max_answer_chars = max_answer_chars
        self._all = [WorkerProcess(args, startup_timeout_s) for _ in range(workers)]
        self._idle = list(self._all)
        self._cond = threading.Condition()
        self._closed = False
        self._counts = {"fast": 0, "verifier": 0, "timeouts": 0, "errors": 0, "restarts": 0, "no_answer": 0}

    # --- public API -------------------------------------------------------------------------------

    def verify(self, prediction: str, gold: str, *, extract: bool = True) -> Verdict:
        """Check one model output against the gold answer. `extract=False`: `prediction` is the answer."""
        return self.verify_batch([prediction], [gold], extract=extract)[0]

    def verify_batch(self, predictions: Sequence[str], golds: Sequence[str], *, extract: bool = True) -> list[Verdict]:
        """Check many, in order; uses as many workers as are free (at least one)."""
        if len(predictions) != len(golds):
            raise ValueError(f"{len(predictions)} predictions but {len(golds)} gold answers")
        verdicts: list[Verdict | None] = [None] * len(predictions)
        jobs: list[_Job] = []
        rules: list[str | None] = [None] * len(predictions)
        for i, (pred, gold) in enumerate(zip(predictions, golds)):
            verdict, answer, rule = self._prepare(pred, extract)
            rules[i] = rule
            gold_c = clean_answer(gold)
            if verdict is None and self.fast_path:
                decided = fast_compare(answer, gold_c)
                if decided is not None:
                    reason = Reason.EQUAL if decided else Reason.NOT_EQUAL
                    verdict = Verdict(decided, reason, answer, rule, "fast")
            if verdict is None:
                jobs.append(_Job(i, answer, gold_c))
            else:
                verdicts[i] = verdict
        self._count(fast=sum(v is not None and v.path == "fast" for v in verdicts))
        for job, (equal, reason, detail) in self._run(jobs):
            verdicts[job.index] = Verdict(equal, reason, job.answer, rules[job.index], "verifier", detail)
        return verdicts  # type: ignore[return-value]

    async def averify_batch(
        self, predictions: Sequence[str], golds: Sequence[str], *, extract: bool = True
    ) -> list[Verdict]:
        """`verify_batch` on a thread, for asyncio callers."""
        return await asyncio.to_thread(self.verify_batch, predictions, golds, extract=extract)

    def start(self) -> None:
        """Start every worker now (and wait for them) instead of on first use."""
        workers = self._checkout(len(self._all), wait_all=True)
        try:
            for w in workers:
                if not w.alive:
                    w.spawn()
            self._drive(workers, deque(), results=[], wait_ready=True)
        finally:
            self._checkin(workers)

    def stats(self) -> dict[str, int]:
        """Counters since creation: fast, verifier, timeouts, errors, restarts, no_answer."""
        with self._cond:
            return dict(self._counts)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            while len(self._idle) < len(self._all):
                self._cond.wait()
        for w in self._all:
            w.stop()

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- internals --------------------------------------------------------------------------------

    def _prepare(self, prediction: str, extract: bool) -> tuple[Verdict | None, str, str | None]:
        rule: str | None
        if extract:
            found = extract_answer(prediction)
            answer, rule = (found.text, found.rule) if found else ("", None)
        else:
            answer, rule = clean_answer(prediction), "given"
        if not answer:
            self._count(no_answer=1)
            return Verdict(False, Reason.NO_ANSWER, None, rule, "none"), answer, rule
        if len(answer) > self.max_answer_chars:
            detail = f"answer has {len(answer)} characters (limit {self.max_answer_chars})"
            return Verdict(False, Reason.TOO_LONG, answer[:80], rule, "none", detail), answer, rule
        return None, answer, rule

    def _count(self, **deltas: int) -> None:
        with self._cond:
            for k, v in deltas.items():
                self._counts[k] += v

    def _checkout(self, n: int, wait_all: bool = False) -> list[WorkerProcess]:
        with self._cond:
            need = n if wait_all else 1
            while len(self._idle) < need and not self._closed:
                self._cond.wait()
            if self._closed:
                raise RuntimeError("MathVerifier is closed")
            taken, self._idle = self._idle[:n], self._idle[n:]
            return taken

    def _checkin(self, workers: list[WorkerProcess]) -> None:
        with self._cond:
            self._idle.extend(workers)
            self._cond.notify_all()

    def _run(self, jobs: list[_Job]) -> list[tuple[_Job, tuple[bool, Reason, str]]]:
        if not jobs:
            return []
        self._count(verifier=len(jobs))
        workers = self._checkout(min(len(jobs), len(self._all)))
        results: list[tuple[_Job, tuple[bool, Reason, str]]] = []
        try:
            for w in workers:
                if not w.alive:
                    w.spawn()
            self._drive(workers, deque(jobs), results)
        finally:
            self._checkin(workers)
        return results

    def _restart(self, w: WorkerProcess) -> None:
        self._count(restarts=1)
        w.spawn()

    def _drive(
        self, workers: list[WorkerProcess], pending: deque[_Job], results: list, wait_ready: bool = False
    ) -> None:
        """Feed `pending` to `workers` until every job has a result (and, with `wait_ready`, every worker
        has said hello; otherwise a restarted worker finishes starting while it sits in the pool)."""
        inflight: dict[WorkerProcess, tuple[_Job, float]] = {}
        try:
            self._loop(workers, pending, results, inflight, wait_ready)
        except BaseException:
            for w in inflight:  # their replies would arrive in a later call: end them instead
                w.kill()
            raise

    def _loop(self, workers, pending, results, inflight, wait_ready) -> None:
        while pending or inflight or (wait_ready and any(not w.ready for w in workers)):
            for w in workers:
                if w.ready and w not in inflight and pending:
                    job = pending.popleft()
                    if w.send({"id": job.token, "answer": job.answer, "gold": job.gold}):
                        inflight[w] = (job, time.monotonic() + self.latency_cap_s)
                    else:
                        self._count(errors=1)
                        results.append((job, (False, Reason.ERROR, "worker pipe closed")))
                        self._restart(w)
            waiting = [w for w in workers if w in inflight or not w.ready]
            deadlines = [inflight[w][1] if w in inflight else w.start_deadline for w in waiting]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else 0.0
            readable, _, _ = select.select(waiting, [], [], timeout)
            for w in readable:
                frames, eof = w.read()
                for msg in frames:
                    if "hello" in msg:
                        if not msg["hello"]:
                            w.kill()
                            raise VerifierStartError(f"Math-Verify worker failed to start: {msg.get('error')}")
                        w.ready, w.version = True, msg.get("version", "")
                    elif w in inflight and msg.get("id") == inflight[w][0].token:
                        job, _ = inflight.pop(w)
                        if msg.get("error"):
                            self._count(errors=1)
                            results.append((job, (False, Reason.ERROR, msg["error"])))
                        else:
                            equal = bool(msg.get("equal"))
                            results.append((job, (equal, Reason.EQUAL if equal else Reason.NOT_EQUAL, "")))
                if eof:
                    code = w.proc.wait() if w.proc else None
                    if not w.ready:
                        w.kill()
                        raise VerifierStartError(f"Math-Verify worker exited during start-up (exit code {code})")
                    if w in inflight:
                        job, _ = inflight.pop(w)
                        self._count(errors=1)
                        results.append((job, (False, Reason.ERROR, f"worker died (exit code {code})")))
                    self._restart(w)
            now = time.monotonic()
            for w in list(inflight):
                job, deadline = inflight[w]
                if now >= deadline:
                    del inflight[w]
                    self._count(timeouts=1)
                    detail = f"no verdict within {self.latency_cap_s:g} s; worker killed and restarted"
                    results.append((job, (False, Reason.TIMEOUT, detail)))
                    self._restart(w)
            for w in workers:
                if not w.ready and w not in inflight and now >= w.start_deadline:
                    w.kill()
                    raise VerifierStartError("Math-Verify worker did not start in time")


_default: MathVerifier | None = None
_default_lock = threading.Lock()


def default_verifier() -> MathVerifier:
    """The process-wide verifier `verify_math` uses (one worker, default limits; closed at exit)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MathVerifier()
            atexit.register(_default.close)
        return _default


def verify_math(prediction: str, gold: str, *, extract: bool = True) -> Verdict:
    """Check one model output against a gold answer with the default verifier."""
    return default_verifier().verify(prediction, gold, extract=extract)


def answers_agree(a: str, b: str) -> bool:
    """Whether two already-extracted answers denote the same value (e.g. tool agent vs reasoner)."""
    return default_verifier().verify(a, b, extract=False).correct
