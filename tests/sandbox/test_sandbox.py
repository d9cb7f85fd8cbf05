"""Normal programs: verdicts per test, both formats, one interpreter start, restarts, the API."""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from pathlib import Path

import pytest

from atgrpo.errors import AtgrpoError
from atgrpo.sandbox import (
    InvalidProgramError,
    Sandbox,
    SandboxClosedError,
    SandboxConfigError,
    SandboxIsolationWarning,
    SandboxUnavailableError,
    Verdict,
    function_program,
    humaneval_program,
    mbpp_program,
    stdio_program,
)
from tests.sandbox.conftest import make

ADD = "def add(a, b):\n    return a + b\n"


def test_each_assert_gets_its_own_verdict(sandbox: Sandbox) -> None:
    r = sandbox.run(function_program(ADD, ["assert add(1, 2) == 3", "assert add(1, 2) == 4", "add(1, None)"]))
    assert r.verdicts == [Verdict.PASSED, Verdict.WRONG_ANSWER, Verdict.RUNTIME_ERROR]
    assert not r.passed and r.starts == 1
    err = r.tests[2]
    assert err.detail.startswith("TypeError") and "unsupported operand" in err.stderr_tail
    assert "<test 2>" in err.stderr_tail and "_atgrpo_harness" not in err.stderr_tail


def test_many_asserts_share_one_interpreter_start(sandbox: Sandbox) -> None:
    # The program counts its own loads in a file of its private directory.
    code = ADD + "with open('loads', 'a') as f:\n    f.write('x')\n"
    tests = [f"assert add({i}, 1) == {i + 1}" for i in range(50)] + ["assert open('loads').read() == 'x'"]
    r = sandbox.run(function_program(code, tests))
    assert r.passed and r.starts == 1 and len(r.tests) == 51


def test_stdio_cases_are_compared_whitespace_normalised(sandbox: Sandbox) -> None:
    code = "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\nprint()\n"
    r = sandbox.run(
        stdio_program(code, [("1 2\n", "3"), ("2 2", "  4  \r\n\n"), ("2 2", "5"), ("x y", "0"), (b"7 8", None)])
    )
    assert r.verdicts == ["passed", "passed", "wrong_answer", "runtime_error", "passed"]
    assert r.tests[4].stdout == b"15\n\n" and r.starts == 1
    assert "ValueError" in r.tests[3].stderr_tail


def test_stdio_programs_see_a_real_stdin_and_main(sandbox: Sandbox) -> None:
    code = (
        "import os, sys\n"
        "def main():\n"
        "    data = os.read(0, 100) + sys.stdin.buffer.read()\n"
        "    print(len(data), input.__name__)\n"
        "if __name__ == '__main__':\n"
        "    main()\n"
    )
    r = sandbox.run(stdio_program(code, [("abc", "3 input"), ("", "0 input")]))
    assert r.passed, r.tests


def test_exit_codes_of_stdio_programs(sandbox: Sandbox) -> None:
    r = sandbox.run(stdio_program("import sys\nprint('a')\nsys.exit(0)\n", [("", "a")]))
    assert r.passed
    r = sandbox.run(stdio_program("import sys\nprint('a')\nsys.exit(3)\n", [("", "a")]))
    assert r.verdicts == ["runtime_error"] and "3" in r.tests[0].detail


def test_humaneval_and_mbpp_formats(sandbox: Sandbox) -> None:
    prompt = 'def incr_list(l: list):\n    """Return list with elements incremented by 1."""\n'
    test = "METADATA = {}\n\ndef check(candidate):\n    assert candidate([1, 2, 3]) == [2, 3, 4]\n    assert candidate([]) == []\n"
    good = humaneval_program(prompt + "    return [x + 1 for x in l]\n", test, "incr_list")
    bad = humaneval_program(prompt + "    return [x + 2 for x in l]\n", test, "incr_list")
    mbpp = mbpp_program(
        "def sq(x):\n    return math.sqrt(x)\n", ["assert sq(4) == 2", "assert sq(9) == 4"], "import math"
    )
    results = sandbox.run_batch([good, bad, mbpp])
    assert [r.verdicts for r in results] == [["passed"], ["wrong_answer"], ["passed", "wrong_answer"]]


def test_a_program_failing_to_load_fails_all_tests(sandbox: Sandbox) -> None:
    r = sandbox.run(function_program("def f(:\n", ["assert 1", "assert 2"]))
    assert r.verdicts == ["runtime_error"] * 2 and "SyntaxError" in r.tests[0].detail
    r = sandbox.run(stdio_program("print(", [("", ""), ("", "")]))
    assert r.verdicts == ["runtime_error"] * 2


def test_a_fatal_test_restarts_the_interpreter_for_the_rest(sandbox: Sandbox) -> None:
    r = sandbox.run(function_program("import os, time\n", ["assert 1", "time.sleep(60)", "os._exit(0)", "assert 2"]))
    assert r.verdicts == ["passed", "timeout", "runtime_error", "passed"] and r.starts == 3
    assert "before the test finished" in r.tests[2].detail


def test_tests_left_after_the_last_start_are_skipped() -> None:
    with make("namespaces", max_starts=2) as sb:
        r = sb.run(function_program("import os\n", ["os._exit(1)"] * 4))
    assert r.verdicts == ["runtime_error", "runtime_error", "skipped", "skipped"] and r.starts == 2


def test_a_program_may_use_its_private_directory(sandbox: Sandbox) -> None:
    code = "import os, tempfile\nopen('a.txt', 'w').write('hi')\nos.mkdir('d')\nprint(open('a.txt').read(), tempfile.mkstemp()[1].startswith(os.getcwd()))\n"
    r = sandbox.run(stdio_program(code, [("", "hi True")]))
    assert r.passed, r.tests


def test_batches_run_concurrently_and_come_back_in_order(sandbox: Sandbox) -> None:
    programs = [stdio_program(f"import time\ntime.sleep(0.2)\nprint({i})", [("", str(i))]) for i in range(8)]
    start = time.perf_counter()
    results = sandbox.run_batch(programs)
    elapsed = time.perf_counter() - start
    assert all(r.passed for r in results)
    assert [r.tests[0].stdout for r in results] == [f"{i}\n".encode() for i in range(8)]
    assert elapsed < 8 * 0.2 + 5  # two workers: generous bound, only catches "no concurrency at all" plus a hang


def test_run_batch_releases_the_gil_and_can_be_awaited(sandbox: Sandbox) -> None:
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    sandbox.run(stdio_program("import time\ntime.sleep(0.5)", [("", None)]))
    stop.set()
    t.join()
    assert ticks > 20  # the thread ran while run_batch waited

    async def main() -> tuple[list[object], int]:
        beats = 0

        async def heartbeat() -> None:
            nonlocal beats
            while True:
                beats += 1
                await asyncio.sleep(0.01)

        hb = asyncio.create_task(heartbeat())
        results = await sandbox.run_batch_async([function_program("import time\ntime.sleep(0.3)", ["assert 1"])] * 2)
        hb.cancel()
        return list(results), beats

    results, beats = asyncio.run(main())
    assert len(results) == 2 and beats > 5


def test_bad_input_is_a_typed_error() -> None:
    with pytest.raises(SandboxConfigError):
        Sandbox(workers=0)
    with pytest.raises(SandboxConfigError):
        Sandbox(namespaces=False, require_namespaces=True)
    with pytest.raises(SandboxConfigError):
        Sandbox(python="/nonexistent/python3")
    with pytest.raises(ValueError):  # pydantic: unknown field
        Sandbox(wrokers=2)
    with make("namespaces") as sb:
        with pytest.raises(InvalidProgramError):
            sb.run(function_program("x = 1", []))
        with pytest.raises(TypeError):
            sb.run_batch(["print(1)"])  # type: ignore[list-item]
        with pytest.raises(TypeError):
            stdio_program("print(1)", [(1, "1")])  # type: ignore[list-item]
    with pytest.raises(SandboxClosedError):
        sb.run(function_program("x = 1", ["assert x"]))
    assert issubclass(SandboxClosedError, AtgrpoError)


def test_fallback_warns_and_says_why() -> None:
    with pytest.warns(SandboxIsolationWarning, match="disabled by config"):
        sb = Sandbox(namespaces=False)
    assert sb.isolation.mode == "fallback" and not sb.isolation.child_processes
    # Typed: the missing layers are named, not only described (rust/sandbox/tests/kernel_features.rs
    # simulates kernels without Landlock or user namespaces).
    assert "namespaces" in sb.isolation.missing
    sb.close()


def test_require_landlock_is_honoured_by_the_core() -> None:
    # Either this kernel's Landlock gives every layer (nothing Landlock in `missing`) or the
    # requirement refuses it, naming itself; before, the field did not exist.
    try:
        sb = Sandbox(require_landlock=True)
    except SandboxUnavailableError as e:
        assert "require_landlock" in str(e)
    else:
        assert sb.isolation.landlock_abi >= 6
        assert not [m for m in sb.isolation.missing if m.startswith("landlock")], sb.isolation
        sb.close()


@pytest.mark.parametrize("stdio_zygote", [True, False])
def test_private_directories_are_removed(tmp_path: Path, stdio_zygote: bool) -> None:
    with make("namespaces", tmp_root=str(tmp_path), stdio_zygote=stdio_zygote) as sb:
        r = sb.run(
            stdio_program(
                "open('big', 'wb').write(b'x' * 100000)\nimport os\nos.makedirs('a/b/c')\nos.chmod('a', 0)",
                [("", None)],
            )
        )
        assert r.passed, r.tests
        assert len(list(tmp_path.iterdir())) == 1  # the sandbox's work root, private dirs already gone
        left = list(next(tmp_path.iterdir()).iterdir())
        if stdio_zygote:
            # The worker's zygote directory stays while the sandbox lives, holding only the program
            # directory, made anew and empty: what the program wrote is gone.
            assert len(left) == 1 and re.fullmatch(r"w\d+-z\d+", left[0].name), left  # the worker that ran it
            assert [q.name for q in left[0].iterdir()] == ["p"], list(left[0].iterdir())
            assert list((left[0] / "p").iterdir()) == []
        else:
            assert not any(p.name.startswith("w") for p in left)
    assert list(tmp_path.iterdir()) == []


def test_the_interpreter_is_isolated_and_sees_only_its_directory(sandbox: Sandbox) -> None:
    code = (
        "import os, sys\n"
        "print(sys.flags.isolated, sys.flags.no_site, os.getcwd() == os.environ['HOME'], os.listdir('.'))\n"
    )
    r = sandbox.run(stdio_program(code, [("", "1 1 True []")]))
    assert r.passed, r.tests


def test_a_forked_copy_of_the_host_gets_an_error_not_a_hang(sandbox: Sandbox) -> None:
    pid = os.fork()
    if pid == 0:
        try:
            sandbox.run(function_program("x = 1", ["assert x"]))
            code = 1
        except SandboxUnavailableError:
            code = 0
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sandbox.run(function_program("x = 1", ["assert x"])).passed


def test_a_tight_timeout_is_a_verdict_not_a_construction_failure() -> None:
    with make("namespaces", timeout_s=0.01) as sb:  # the self-test runs with generous limits
        assert sb.run(function_program("import time\ntime.sleep(1)", ["assert 1"])).verdicts == ["timeout"]


def test_function_tests_reach_the_program_through_plain_data(sandbox: Sandbox) -> None:
    # LeetCode style through the datasets' own call-test setup: `Solution` is a real class in the
    # checker (isinstance/hasattr work), its instance and methods live in the program's process.
    from atgrpo.data.calltests import CALL_TEST_SETUP, call_test

    solution = "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n                return [seen[target - x], i]\n            seen[x] = i\n"
    tests = [call_test("twoSum", [[2, 7, 11, 15], 9], [0, 1]), call_test("twoSum", [[3, 3], 6], [1, 0])]
    assert sandbox.run(function_program(solution, tests, CALL_TEST_SETUP)).verdicts == ["passed", "wrong_answer"]
    # Exceptions cross as their builtin class, keyword arguments and the program's plain globals too,
    # and classes of standard data modules are the checker's own.
    code = "from collections import Counter\nLIMIT = 3\nclass Bad(ValueError):\n    pass\ndef f(x, *, scale=1):\n    if x < 0:\n        raise Bad('negative')\n    return (x * scale, [x] * LIMIT)\n"
    tests = [
        "try:\n    f(-1)\nexcept ValueError as e:\n    assert str(e) == 'negative'\nelse:\n    raise AssertionError",
        "assert f(2, scale=3) == (6, [2, 2, 2]) and LIMIT == 3",
        "assert Counter(f(1)[1]) == Counter({1: 3}) and type(f(1)) is tuple",
        "assert f(1) == [1, [1, 1, 1]]",
    ]
    assert sandbox.run(function_program(code, tests)).verdicts == ["passed", "passed", "passed", "wrong_answer"]
