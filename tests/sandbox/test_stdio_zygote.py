"""Printing programs (stdio programs with no input, issue 47 part 3) fork their harness from the
worker's zygote (`stdio_zygote`, the default) instead of starting an interpreter each. Whatever the
program does, the new path gives the verdict and stdout the old path (`stdio_zygote=False`) gives, on
both isolation paths; the hostile programs of test_adversarial.py run on the new path (the default)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import atgrpo
from atgrpo.sandbox import Sandbox, Verdict, stdio_program
from tests.sandbox.conftest import assert_still_works, bomb_pool, make

PROJECT_FILE = Path(atgrpo.__file__).resolve()

# name -> (program, the verdict both paths must give)
PROGRAMS: dict[str, tuple[str, str]] = {
    "prints moves": (
        "from collections import deque\n"
        "grid = ['..#.', '....', '.#..', '...G']\n"
        "start, seen, q = (0, 0), {(0, 0): ''}, deque([(0, 0)])\n"
        "while q:\n"
        "    r, c = q.popleft()\n"
        "    for m, (dr, dc) in zip('UDLR', ((-1, 0), (1, 0), (0, -1), (0, 1))):\n"
        "        n = (r + dr, c + dc)\n"
        "        if 0 <= n[0] < 4 and 0 <= n[1] < 4 and grid[n[0]][n[1]] != '#' and n not in seen:\n"
        "            seen[n] = seen[(r, c)] + m\n"
        "            q.append(n)\n"
        "print(' '.join(seen[(3, 3)]))\n",
        Verdict.PASSED,
    ),
    "prints a grid": ("for row in [[1, 2], [2, 1]]:\n    print(*row)\n", Verdict.PASSED),
    "prints nothing": ("x = 1\n", Verdict.PASSED),
    "exits 0 after printing": ("import sys\nprint('a')\nsys.exit(0)\n", Verdict.PASSED),
    "loops": ("while True:\n    pass\n", Verdict.TIMEOUT),
    "sleeps": ("import time\nprint('early', flush=True)\ntime.sleep(60)\n", Verdict.TIMEOUT),
    "raises": ("print('before')\nraise ValueError('boom')\n", Verdict.RUNTIME_ERROR),
    "exits 3": ("import sys\nprint('a')\nsys.exit(3)\n", Verdict.RUNTIME_ERROR),
    "segfaults": ("import ctypes\nprint('x', flush=True)\nctypes.string_at(0)\n", Verdict.RUNTIME_ERROR),
    "os._exit": ("import os\nos._exit(4)\n", Verdict.RUNTIME_ERROR),
    "syntax error": ("print(\n", Verdict.RUNTIME_ERROR),
    "huge output": (
        "import sys\nblock = 'x' * (1 << 20)\nwhile True:\n    sys.stdout.write(block)\n",
        Verdict.OUTPUT_LIMIT,
    ),
    "huge stderr": ("import sys\nwhile True:\n    sys.stderr.write('e' * 4096)\n", Verdict.OUTPUT_LIMIT),
    "memory bomb": ("chunks = []\nwhile True:\n    chunks.append(bytearray(50 << 20))\n", Verdict.MEMORY_LIMIT),
    "input()": ("print(input())\n", Verdict.RUNTIME_ERROR),
    "reads stdin": ("import sys\nprint(repr(sys.stdin.read()), repr(sys.stdin.buffer.read()))\n", Verdict.PASSED),
    "reads fd 0": ("import os\nprint(repr(os.read(0, 100)))\n", Verdict.PASSED),
    "imports the project": ("import atgrpo\nprint(atgrpo.__file__)\n", Verdict.RUNTIME_ERROR),
    "imports a solver": ("from atgrpo.envs import planpath\nprint(planpath)\n", Verdict.RUNTIME_ERROR),
    "reads the project's files": (f"print(open({str(PROJECT_FILE)!r}).read()[:50])\n", Verdict.RUNTIME_ERROR),
    "adds the project to sys.path": (
        f"import sys\nsys.path.insert(0, {str(PROJECT_FILE.parent.parent)!r})\nimport atgrpo\nprint('imported')\n",
        Verdict.RUNTIME_ERROR,
    ),
    "opens a socket": ("import socket\nsocket.socket()\n", Verdict.RUNTIME_ERROR),
    "writes outside": ("open('/tmp/atgrpo-stdio-zygote-escape', 'w').write('x')\n", Verdict.RUNTIME_ERROR),
    # Beside its directory: in the zygote's directory around it (the stacked Landlock ruleset).
    "writes beside its directory": ("open('../beside', 'w').write('x')\n", Verdict.RUNTIME_ERROR),
    "makes a directory beside its own": ("import os\nos.mkdir('../d')\n", Verdict.RUNTIME_ERROR),
    "writes in its directory": (
        "import os\nopen('f', 'w').write('hi')\nos.mkdir('d')\nprint(open('f').read(), sorted(os.listdir('.')))\n",
        Verdict.PASSED,
    ),
}


@pytest.fixture(scope="module", params=["namespaces", "fallback"])
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[Sandbox, Sandbox]]:
    new = make(request.param, workers=1, stdio_zygote=True)
    old = make(request.param, workers=1, stdio_zygote=False)
    assert new.isolation.stdio_zygote and not old.isolation.stdio_zygote, (new.isolation, old.isolation)
    assert replace(new.isolation, stdio_zygote=False) == old.isolation and new.isolation.zygote, new.isolation
    yield new, old
    new.close()
    old.close()


def _last_error_line(tail: str) -> str:
    lines = [line for line in tail.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_printing_program_gets_the_same_stdout_and_verdict_on_both_paths(
    pair: tuple[Sandbox, Sandbox], name: str
) -> None:
    code, verdict = PROGRAMS[name]
    if name == "memory bomb":
        with bomb_pool(pair[0], stdio_zygote=True) as zygote, bomb_pool(pair[0], stdio_zygote=False) as direct:
            new, old = (sb.run(stdio_program(code, [("", None)])).tests[0] for sb in (zygote, direct))
    else:
        new, old = (sb.run(stdio_program(code, [("", None)])).tests[0] for sb in pair)
    assert new.verdict == old.verdict == verdict, (name, new, old)
    assert new.stdout == old.stdout, (name, new.stdout[:200], old.stdout[:200])
    if verdict == Verdict.RUNTIME_ERROR and "Error" in old.stderr_tail:
        assert _last_error_line(new.stderr_tail) == _last_error_line(old.stderr_tail), (name, new, old)
    if verdict in (Verdict.TIMEOUT, Verdict.OUTPUT_LIMIT, Verdict.MEMORY_LIMIT) or "killed by" in old.detail:
        assert new.detail == old.detail, (name, new, old)
    assert_still_works(pair[0])


def test_reading_stdin_sees_an_empty_input(pair: tuple[Sandbox, Sandbox]) -> None:
    for sb in pair:
        t = sb.run(stdio_program(PROGRAMS["reads stdin"][0], [("", None)])).tests[0]
        assert t.stdout == b"'' b''\n", t
        t = sb.run(stdio_program(PROGRAMS["input()"][0], [("", None)])).tests[0]
        assert "EOFError" in t.stderr_tail, t


def test_importing_the_project_fails_as_for_any_program(pair: tuple[Sandbox, Sandbox]) -> None:
    for sb in pair:
        for name in ("imports the project", "imports a solver", "adds the project to sys.path"):
            t = sb.run(stdio_program(PROGRAMS[name][0], [("", None)])).tests[0]
            assert "ModuleNotFoundError" in t.stderr_tail and t.stdout == b"", (name, t)
        t = sb.run(stdio_program(PROGRAMS["reads the project's files"][0], [("", None)])).tests[0]
        assert "PermissionError" in t.stderr_tail, t


def test_stdio_cases_and_expected_outputs_on_both_paths(pair: tuple[Sandbox, Sandbox]) -> None:
    code = "import sys\ns = sys.stdin.read()\nif s == 'loop':\n    while True:\n        pass\nprint(len(s))\n"
    cases = [("ab", "2"), ("loop", "4"), ("abc", "4"), ("", None)]
    new, old = (sb.run(stdio_program(code, cases)) for sb in pair)
    assert new.verdicts == old.verdicts == ["passed", "timeout", "wrong_answer", "passed"], (new.tests, old.tests)
    assert new.starts == old.starts == 2
    assert [t.stdout for t in new.tests] == [t.stdout for t in old.tests]


def _runs_in_the_zygote(sb: Sandbox) -> bool:
    code = (
        "import sys\nf, names = sys._getframe(), []\n"
        "while f is not None:\n    names.append(f.f_code.co_name)\n    f = f.f_back\n"
        "print('_atgrpo_zygote' in names)\n"
    )
    return sb.run(stdio_program(code, [("", None)])).tests[0].stdout == b"True\n"


def test_each_path_is_the_one_asked_for(pair: tuple[Sandbox, Sandbox]) -> None:
    new, old = pair
    assert _runs_in_the_zygote(new) and not _runs_in_the_zygote(old)
