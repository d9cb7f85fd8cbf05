"""MathVerifier: LaTeX answers, verdict reasons, the hard latency cap, threads, asyncio, start failures."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from atgrpo.data import load_math_problems
from atgrpo.errors import AtgrpoError
from atgrpo.verify import MathVerifier, Reason, VerifierStartError, answers_agree, verify_math
from atgrpo.verify import workers as workers_module

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("fast_path", [True, False])
def test_half_in_every_spelling(verifier: MathVerifier, slow_verifier: MathVerifier, fast_path: bool) -> None:
    v = verifier if fast_path else slow_verifier
    preds = ["\\boxed{\\frac{1}{2}}", "The answer is 0.5", "#### 1/2", "\\boxed{\\dfrac{2}{4}}", "\\boxed{0.50}"]
    verdicts = v.verify_batch(preds, ["\\frac{1}{2}"] * len(preds))
    assert [x.correct for x in verdicts] == [True] * len(preds)
    assert {x.path for x in verdicts} == ({"fast"} if fast_path else {"verifier"})
    assert not v.verify("\\boxed{0.51}", "\\frac{1}{2}").correct


@pytest.mark.parametrize(
    ("pred", "gold", "correct"),
    [
        ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}", True),
        ("\\boxed{x^2 + 2x + 1}", "(x+1)^2", True),
        ("\\boxed{9\\pi}", "9\\pi", True),
        ("\\boxed{28.27}", "9\\pi", False),
        ("so $x = 5$, i.e. \\boxed{x = 5}", "5", True),
        ("\\boxed{\\text{(B)}}", "B", True),
        ("\\boxed{(1, 2)}", "(1,2)", True),
        ("\\boxed{(2, 1)}", "(1,2)", False),
        ("\\boxed{50\\%}", "0.5", True),
        ("\\boxed{-\\sqrt{3}}", "\\sqrt{3}", False),
    ],
)
def test_latex_answers(verifier: MathVerifier, pred: str, gold: str, correct: bool) -> None:
    v = verifier.verify(pred, gold)
    assert v.correct is correct and v.path == "verifier"
    assert v.reason == (Reason.EQUAL if correct else Reason.NOT_EQUAL)


def test_reasons_and_batch_order(verifier: MathVerifier) -> None:
    preds = ["I do not know.", "\\boxed{" + "1+" * 600 + "1}", "#### 12", "\\boxed{\\sqrt{16}}", "42"]
    golds = ["3", "601", "12", "4", "41"]
    v = verifier.verify_batch(preds, golds)
    assert [x.reason for x in v] == [Reason.NO_ANSWER, Reason.TOO_LONG, Reason.EQUAL, Reason.EQUAL, Reason.NOT_EQUAL]
    assert [x.path for x in v] == ["none", "none", "fast", "verifier", "fast"]
    assert v[2].rule == "hashes" and v[3].answer == "\\sqrt{16}" and v[4].rule == "last_number"
    with pytest.raises(ValueError):
        verifier.verify_batch(["1"], [])


def test_given_answers_are_not_extracted(verifier: MathVerifier) -> None:
    v = verifier.verify("3 apples and 4 pears: 7", "7", extract=False)
    assert not v.correct and v.rule == "given"
    assert verifier.verify("$\\frac{6}{8}$", "0.75", extract=False).correct


def test_pack_answers_verify_against_themselves(verifier: MathVerifier) -> None:
    problems = load_math_problems(REPO / "envs" / "math" / "problems.jsonl")
    preds = [f"Working... so the result is \\boxed{{{p.answer}}}." for p in problems]
    assert all(v.correct for v in verifier.verify_batch(preds, [p.answer for p in problems]))
    wrong = [f"\\boxed{{{p.answer} + 1}}" for p in problems]
    assert not any(v.correct for v in verifier.verify_batch(wrong, [p.answer for p in problems]))


def test_latency_cap_kills_a_hung_worker_and_recovers() -> None:
    # Math-Verify's own alarms are set above the cap, so only the parent's kill can end this answer.
    with MathVerifier(latency_cap_s=1.0, parse_timeout_s=10, compare_timeout_s=10) as v:
        v.start()
        t = time.monotonic()
        verdict = v.verify("\\boxed{9^{9^{9}}}", "1")
        elapsed = time.monotonic() - t
        assert verdict.reason == Reason.TIMEOUT and not verdict.correct and verdict.path == "verifier"
        assert 1.0 <= elapsed < 4.0
        assert v.verify("\\boxed{\\sqrt{4}}", "2").correct  # the replacement worker answers
        stats = v.stats()
        assert stats["timeouts"] == 1 and stats["restarts"] == 1


def test_math_verify_soft_timeout_is_a_wrong_answer(verifier: MathVerifier) -> None:
    t = time.monotonic()
    v = verifier.verify("\\boxed{9^{9^{9}}}", "1")  # default limits: Math-Verify's own alarm fires first
    assert not v.correct and v.reason in (Reason.NOT_EQUAL, Reason.TIMEOUT)
    assert time.monotonic() - t < verifier.latency_cap_s + 2


def test_called_from_threads(verifier: MathVerifier) -> None:
    results: dict[int, list[bool]] = {}

    def work(k: int) -> None:
        preds = [f"\\boxed{{\\sqrt{{{(k + i) ** 2}}}}}" for i in range(6)]
        golds = [str(k + i) for i in range(6)]
        results[k] = [v.correct for v in verifier.verify_batch(preds, golds)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == {k: [True] * 6 for k in range(4)}


def test_asyncio(verifier: MathVerifier) -> None:
    async def main():
        return await asyncio.gather(
            verifier.averify_batch(["\\boxed{\\pi}"], ["\\pi"]), verifier.averify_batch(["\\boxed{e}"], ["\\pi"])
        )

    first, second = asyncio.run(main())
    assert first[0].correct and not second[0].correct


def test_module_level_helpers() -> None:
    assert verify_math("The answer is \\boxed{\\frac{3}{4}}", "0.75").correct
    assert answers_agree("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}")
    assert not answers_agree("2", "3")


def test_worker_that_cannot_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "worker.py"
    bad.write_text("import sys\nsys.exit(3)\n")
    monkeypatch.setattr(workers_module, "WORKER_SCRIPT", bad)
    v = MathVerifier(startup_timeout_s=30)
    with pytest.raises(VerifierStartError, match="exit code 3") as info:
        v.verify("\\boxed{\\sqrt{2}}", "\\sqrt{2}")
    assert isinstance(info.value, AtgrpoError)
    assert v.verify("\\boxed{2}", "2").correct  # the fast path needs no worker
    v.close()
