"""Hostile programs: each must end in a verdict, the host unharmed and the pool still working.

Every test runs on a sandbox with namespaces (where the kernel allows) and on the fallback path.
"""

from __future__ import annotations

import ast
import os
import signal
import uuid
from pathlib import Path

import pytest

from atgrpo.sandbox import Sandbox, Verdict, function_program, humaneval_program, stdio_program
from tests.sandbox.conftest import assert_still_works, bomb_pool


def run_one(sb: Sandbox, code: str, expected: str | None = "ok") -> tuple[str, str, bytes, str]:
    """Runs `code` as a one-case stdio program; (verdict, detail, stdout, stderr tail)."""
    t = sb.run(stdio_program(code, [("", expected)])).tests[0]
    return t.verdict, t.detail, t.stdout, t.stderr_tail


def processes_with(marker: str) -> list[str]:
    """Live (non-zombie) host processes whose command line contains `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(pid)
    return found


def test_infinite_loop(sandbox: Sandbox) -> None:
    assert run_one(sandbox, "while True:\n    pass\n")[0] == Verdict.TIMEOUT
    assert_still_works(sandbox)


def test_busy_loop_in_a_thread(sandbox: Sandbox) -> None:
    code = "import threading\ndef spin():\n    while True:\n        pass\nt = threading.Thread(target=spin)\nt.start()\nt.join()\n"
    assert run_one(sandbox, code)[0] == Verdict.TIMEOUT
    # A spinning daemon thread left behind by a finished test does not outlive the execution.
    r = sandbox.run(
        function_program(
            "import threading\n",
            ["threading.Thread(target=lambda: [0 for _ in iter(int, 1)], daemon=True).start()", "assert 1"],
        )
    )
    assert r.verdicts == ["passed", "passed"]
    assert_still_works(sandbox)


def test_fork_bomb(sandbox: Sandbox) -> None:
    before = len(os.listdir("/proc"))
    verdict, detail, _, tail = run_one(sandbox, "import os\nwhile True:\n    os.fork()\n")
    assert verdict in (Verdict.RUNTIME_ERROR, Verdict.TIMEOUT), (verdict, detail)
    if not sandbox.isolation.child_processes:
        assert verdict == Verdict.RUNTIME_ERROR and "PermissionError" in tail
    assert len(os.listdir("/proc")) < before + 50  # nothing left behind on the host
    assert_still_works(sandbox)


def test_memory_bomb(sandbox: Sandbox) -> None:
    with bomb_pool(sandbox) as bombed:
        verdict, detail, _, _ = run_one(bombed, "chunks = []\nwhile True:\n    chunks.append(bytearray(50 << 20))\n")
        assert verdict == Verdict.MEMORY_LIMIT, detail
        assert run_one(bombed, "x = 'a' * (1 << 40)\n")[0] == Verdict.MEMORY_LIMIT
        assert_still_works(bombed)


def test_a_gigabyte_of_output(sandbox: Sandbox) -> None:
    verdict, detail, out, _ = run_one(
        sandbox, "import sys\nblock = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(block)\n"
    )
    assert verdict == Verdict.OUTPUT_LIMIT, detail
    assert len(out) <= sandbox.config.max_output_bytes
    verdict, *_ = run_one(sandbox, "import sys\nfor _ in range(1 << 30):\n    sys.stderr.write('e' * 4096)\n")
    assert verdict == Verdict.OUTPUT_LIMIT
    assert_still_works(sandbox)


def test_writing_outside_the_private_directory(sandbox: Sandbox, tmp_path: Path) -> None:
    targets = [tmp_path / "escaped.txt", Path("/tmp") / f"atgrpo-escape-{uuid.uuid4().hex}", Path.cwd() / "escaped.txt"]
    for target in targets:
        verdict, detail, _, _ = run_one(sandbox, f"open({str(target)!r}, 'w').write('pwned')\n")
        assert verdict == Verdict.RUNTIME_ERROR and ("Permission" in detail or "Read-only" in detail), detail
        assert not target.exists()
    # Nor through the parent of its own directory.
    assert run_one(sandbox, "open('../escaped.txt', 'w').write('x')\n")[0] == Verdict.RUNTIME_ERROR
    assert_still_works(sandbox)


def test_secrets_in_the_environment_and_files_stay_hidden(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATGRPO_FAKE_SECRET", "hunter2-do-not-leak")
    secret_file = tmp_path / "token"
    secret_file.write_text("hunter2-do-not-leak")
    code = (
        "import os\n"
        "print(sorted(os.environ.items()))\n"
        "for path in ['/proc/self/environ', f'/proc/{os.getppid()}/environ', '/proc/1/environ', "
        f"{str(secret_file)!r}, '/etc/shadow']:\n"
        "    try:\n"
        "        print(path, open(path, 'rb').read())\n"
        "    except OSError as e:\n"
        "        print(path, type(e).__name__)\n"
    )
    verdict, _, out, err = run_one(sandbox, code, None)
    assert verdict == Verdict.PASSED, err
    assert b"hunter2" not in out and b"ATGRPO_FAKE_SECRET" not in out
    env = dict(ast.literal_eval(out.splitlines()[0].decode()))
    assert set(env) == {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR"}, env
    assert env["HOME"] == env["TMPDIR"] != os.environ.get("HOME")
    assert_still_works(sandbox)


def test_opening_sockets(sandbox: Sandbox) -> None:
    for family in ["AF_INET", "AF_INET6", "AF_UNIX"]:
        verdict, detail, _, _ = run_one(sandbox, f"import socket\ns = socket.socket(socket.{family})\n")
        assert verdict == Verdict.RUNTIME_ERROR and "PermissionError" in detail, detail
    assert (
        run_one(sandbox, "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=0.5)\n")[0]
        == Verdict.RUNTIME_ERROR
    )
    assert_still_works(sandbox)


def test_sleeping_past_the_timeout(sandbox: Sandbox) -> None:
    verdict, detail, _, _ = run_one(sandbox, "import time\ntime.sleep(60)\n")
    assert verdict == Verdict.TIMEOUT and "wall-clock" in detail
    assert_still_works(sandbox)


def test_killing_its_parent(sandbox: Sandbox) -> None:
    code = "import os, signal\nfor pid in (os.getppid(), 1, -1):\n    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\nprint('ok')\n"
    verdict, *_ = run_one(sandbox, code)
    assert verdict in (Verdict.PASSED, Verdict.RUNTIME_ERROR)
    os.kill(os.getpid(), 0)  # still here
    assert_still_works(sandbox)


def test_closing_stdout_spoils_only_its_own_case(sandbox: Sandbox) -> None:
    code = "import os, sys\nif sys.stdin.read() == 'close':\n    os.close(1)\n    sys.stdout.close()\nprint('ok')\n"
    r = sandbox.run(stdio_program(code, [("close", "ok"), ("stay", "ok")]))
    assert r.verdicts[0] in (Verdict.RUNTIME_ERROR, Verdict.WRONG_ANSWER) and r.verdicts[1] == Verdict.PASSED
    assert_still_works(sandbox)


def test_non_utf8_output(sandbox: Sandbox) -> None:
    code = "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\x00ok\\n')\nsys.stderr.buffer.write(b'\\xc3\\x28 bad')\nsys.stderr.flush()\n"
    verdict, _, out, err = run_one(sandbox, code)
    assert verdict == Verdict.WRONG_ANSWER and out == b"\xff\xfe\x00ok\n" and "bad" in err
    assert_still_works(sandbox)


def test_a_detached_grandchild_dies_with_the_verdict(sandbox: Sandbox) -> None:
    marker = f"atgrpo-grandchild-{uuid.uuid4().hex}"
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}])\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\n"
        "print('ok')\n"
    )
    verdict, detail, _, tail = run_one(sandbox, code)
    if sandbox.isolation.child_processes:
        assert verdict == Verdict.PASSED, (detail, tail)
    else:
        assert verdict == Verdict.RUNTIME_ERROR and "PermissionError" in tail
    assert processes_with(marker) == []
    assert_still_works(sandbox)


def test_forged_results_do_not_pass(sandbox: Sandbox) -> None:
    forgeries = [
        "import os\nos._exit(0)\n",  # leave before the tests run
        "import sys\nsys.exit(0)\nraise AssertionError\n",
        "import os\nos.write(4, b'\\x00' * 16 + b'E' + bytes(4) + (1).to_bytes(4, 'little') + b'\\x00')\nos.write(4, b'\\x00' * 16 + b'D' + bytes(8))\nos._exit(0)\n",
        "import os\nos.close(3)\nos.close(4)\n",
        "print('passed')\nimport builtins\nbuiltins.AssertionError = ZeroDivisionError\n",
    ]
    for code in forgeries:
        r = sandbox.run(function_program(code, ["assert False"]))
        assert r.verdicts[0] != Verdict.PASSED, (code, r.tests)
    assert_still_works(sandbox)


def test_forged_records_past_the_last_case_end_the_run_without_a_panic(sandbox: Sandbox) -> None:
    # A stdio program runs in the harness's process, so it can reach `send` (and the nonce) and
    # report any test index; its cases are still judged by their stdout, here empty.
    code = (
        "import sys\nf = sys._getframe()\nwhile 'send' not in f.f_locals:\n    f = f.f_back\n"
        "for i in range(5):\n    f.f_locals['send'](b'E', i, bytes(1))\n"
    )
    for cases in ([("", "ok")], [("", "ok"), ("", "ok")]):
        r = sandbox.run(stdio_program(code, cases))
        assert r.verdicts == ["wrong_answer"] * len(cases), r.tests
        assert not any("panic" in t.detail for t in r.tests), r.tests
    assert_still_works(sandbox)


def test_crashes_and_signals_to_itself(sandbox: Sandbox) -> None:
    verdict, detail, _, _ = run_one(sandbox, "import ctypes\nctypes.string_at(0)\n")
    assert verdict == Verdict.RUNTIME_ERROR and "SIGSEGV" in detail, detail
    # With a pid namespace the program is its init, which the kernel shields from its own
    # default-action signals; either way this ends in a verdict.
    verdict, detail, _, _ = run_one(sandbox, f"import os\nos.kill(os.getpid(), {int(signal.SIGTERM)})\nprint('ok')\n")
    assert verdict in (Verdict.RUNTIME_ERROR, Verdict.PASSED), detail
    assert_still_works(sandbox)


# --- Function-style verdicts the program cannot forge (its process holds no nonce, tests or verdicts) ---

# Looks for anything that could be the harness's nonce or reporting functions in `objs` and uses
# them: writes forged "passed" records for tests 0..3 and "done" to every fd it can, and calls every
# function it finds with forged records. Then returns a wrong answer.
FORGE = """
import os
def forge(objs):
    for o in list(objs):
        try:
            if isinstance(o, (bytes, bytearray)) and len(o) == 16:
                for fd in range(1, 8):
                    for i in range(4):
                        try:
                            os.write(fd, bytes(o) + b'E' + i.to_bytes(4, 'little') + (1).to_bytes(4, 'little') + bytes(1))
                        except OSError:
                            pass
                    try:
                        os.write(fd, bytes(o) + b'D' + (4).to_bytes(4, 'little') + bytes(4))
                    except OSError:
                        pass
            elif callable(o) and getattr(o, '__name__', '') in ('send', 'end', 'put', 'reply'):
                for i in range(4):
                    try:
                        o(b'E', i, bytes(1))
                    except BaseException:
                        pass
        except BaseException:
            pass
"""

FRAME_WALKS = {
    "sys._getframe": "import sys\ndef frames():\n    f = sys._getframe()\n    while f is not None:\n        yield f\n        f = f.f_back\n",
    "inspect.stack": "import inspect\ndef frames():\n    return [info.frame for info in inspect.stack()]\n",
    "traceback": (
        "def frames():\n"
        "    try:\n        raise ValueError\n    except ValueError as e:\n        f = e.__traceback__.tb_frame\n"
        "    out = []\n    while f is not None:\n        out.append(f)\n        f = f.f_back\n    return out\n"
    ),
    "gc": "import gc\ndef frames():\n    return []\ndef more():\n    return gc.get_objects() + gc.get_referrers(forge)\n",
}


@pytest.mark.parametrize("walk", sorted(FRAME_WALKS))
def test_frame_walking_cannot_forge_function_verdicts(sandbox: Sandbox, walk: str) -> None:
    code = (
        FORGE
        + FRAME_WALKS[walk]
        + "def f(x):\n"
        + "    objs = []\n"
        + "    for fr in frames():\n"
        + "        objs += list(fr.f_locals.values()) + list(fr.f_globals.values())\n"
        + "    objs += more() if 'more' in globals() else []\n"
        + "    forge(objs)\n"
        + "    return -1\n"
    )
    r = sandbox.run(function_program(code, ["assert f(1) == 2", "assert f(2) == 3", "assert f(3) == 4"]))
    assert Verdict.PASSED not in r.verdicts, (walk, r.tests)
    assert_still_works(sandbox)


def test_forged_verdict_lines_on_stdout_stderr_and_channel_do_not_pass(sandbox: Sandbox) -> None:
    code = (
        "import os\n"
        "def f(x):\n"
        "    for fd in (1, 2, 3, 4):\n"
        "        for line in (b'passed\\n', bytes(16) + b'E' + bytes(8), b'V\\x01\\x00\\x00\\x00N'):\n"
        "            try:\n                os.write(fd, line)\n            except OSError:\n                pass\n"
        "    return None\n"
    )
    r = sandbox.run(function_program(code, ["assert f(1) == 2", "assert f(2) is None"]))
    assert r.verdicts[0] != Verdict.PASSED, r.tests
    assert_still_works(sandbox)


LIARS = {
    "always equal": "class A:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\ndef f(x):\n    return A()\n",
    "int subclass": "class I(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\ndef f(x):\n    return I(0)\n",
    "str subclass": "class S(str):\n    def __eq__(self, other):\n        return True\n    __hash__ = str.__hash__\ndef f(x):\n    return S('')\n",
    "list subclass": "class L(list):\n    def __eq__(self, other):\n        return True\n    def __len__(self):\n        return 3\ndef f(x):\n    return L()\n",
    "lying hash and len": (
        "class H:\n    def __hash__(self):\n        return hash(2)\n    def __eq__(self, other):\n        return True\n"
        "    def __len__(self):\n        return 3\ndef f(x):\n    return H()\n"
    ),
    "inside a container": "class A:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\ndef f(x):\n    return [A(), A(), A()]\n",
}


@pytest.mark.parametrize("liar", sorted(LIARS))
def test_objects_that_claim_equality_are_unsupported_values(sandbox: Sandbox, liar: str) -> None:
    tests = [
        "assert f(1) == 2",
        "assert f(1) in {2}",
        "assert len(f(1)) == 3",
        "assert f(1) == [2, 3, 4]",
        "assert not f(1) != 2",
    ]
    r = sandbox.run(function_program(LIARS[liar], tests))
    assert all(v == Verdict.UNSUPPORTED_VALUE for v in r.verdicts), (liar, r.tests)
    assert "not plain data" in r.tests[0].detail
    assert_still_works(sandbox)


def test_monkeypatched_builtins_stay_in_the_programs_process(sandbox: Sandbox) -> None:
    code = (
        "import builtins\n"
        "builtins.AssertionError = ZeroDivisionError\n"
        "builtins.isinstance = lambda *a: True\n"
        "builtins.len = lambda *a: 3\n"
        "builtins.__build_class__ = None\n"
        "def f(x):\n    return [x]\n"
    )
    r = sandbox.run(
        function_program(
            code, ["assert f(1) == [2]", "assert len(f(1)) == 3", "assert isinstance(f(1), str)", "assert f(1) == [1]"]
        )
    )
    assert r.verdicts == ["wrong_answer", "wrong_answer", "wrong_answer", "passed"], r.tests
    assert_still_works(sandbox)


def test_the_program_never_sees_the_tests_or_setup(sandbox: Sandbox) -> None:
    # The expected answer lives in the setup and the tests; the program searches all of its memory.
    code = (
        "import gc\ndef f(x):\n    return sum(isinstance(o, str) and 'atgrpo-secret' in o for o in gc.get_objects())\n"
    )
    r = sandbox.run(
        function_program(code, ["assert f(0) == 0, 'atgrpo-secret-2'"], setup="SECRET = 'atgrpo-secret-1'\n")
    )
    assert r.verdicts == ["passed"], r.tests


def test_the_program_dying_or_garbling_the_channel_mid_call(sandbox: Sandbox) -> None:
    code = "import os, sys\ndef die(x):\n    os._exit(3)\ndef garble(x):\n    os.write(4, b'V\\xff\\xff\\xff\\x7f')\n    return x\ndef ok(x):\n    return x\n"
    r = sandbox.run(
        function_program(code, ["assert ok(1) == 1", "die(1)", "assert ok(2) == 2", "garble(1)", "assert ok(3) == 3"])
    )
    assert r.verdicts == ["passed", "runtime_error", "passed", "runtime_error", "passed"], r.tests
    assert "status 3" in r.tests[1].detail and "channel" in r.tests[3].detail and r.starts == 3
    assert_still_works(sandbox)


# A program global named like a builtin never reaches the checker: ground-truth tests computing with
# `abs`, `len`, ... get the real builtins (the program's own code still calls its versions).
SHADOWS = {
    "def abs": "def abs(x):\n    return 0\n",
    "abs = int": "abs = int\n",
    "len = lambda": "len = lambda x: 3\n",
    "many": (
        "isinstance = lambda *a: True\nsum = lambda *a: 0\nsorted = list\nall = lambda x: True\n"
        "round = lambda *a: 1\nmax = min\nclass float:\n    def __new__(cls, x):\n        return 2.5\n"
    ),
}
SHADOW_TESTS = [
    "assert abs(candidate(1) - 2.5) < 1e-6",
    "assert len(candidate([1])) == 3",
    "assert isinstance(candidate(1), str)",
    "assert sum(candidate([1, 2])) == 0",
    "assert sorted(candidate([2, 1])) == [2, 1]",
    "assert all(candidate([0]))",
    "assert round(candidate(0.4)) == 1",
    "assert max(candidate([1, 2])) == 1",
    "assert float(candidate('1')) == 2.5",
]


@pytest.mark.parametrize("shadow", sorted(SHADOWS))
def test_program_globals_cannot_shadow_the_builtins_of_the_tests(sandbox: Sandbox, shadow: str) -> None:
    code = SHADOWS[shadow] + "def candidate(x):\n    return x\ndef own(x):\n    return abs(x), len([x])\n"
    r = sandbox.run(function_program(code, [*SHADOW_TESTS, "assert abs(candidate(-2)) == 2"]))
    assert r.verdicts == ["wrong_answer"] * len(SHADOW_TESTS) + ["passed"], (shadow, r.tests)
    check = "def check(candidate):\n" + "".join(f"    {t}\n" for t in SHADOW_TESTS[:2])
    assert sandbox.run(humaneval_program(code, check, "candidate")).verdicts == ["wrong_answer"], shadow
    if shadow in ("def abs", "len = lambda"):  # the program's own code keeps its own names
        want = {"def abs": "(0, 1)", "len = lambda": "(2, 3)"}[shadow]
        assert sandbox.run(function_program(code, [f"assert own(-2) == {want}"])).verdicts == ["passed"], shadow
    assert_still_works(sandbox)
