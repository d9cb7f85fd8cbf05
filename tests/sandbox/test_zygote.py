"""The per-worker zygote (rust/sandbox/src/zygote.rs): nothing a function or stdio program does reaches
the next program run by the same worker (memory, module state, environment, files, leftover processes,
the zygote itself), on both isolation paths. One worker, so consecutive programs share a zygote."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from atgrpo.sandbox import Sandbox, function_program
from tests.sandbox.conftest import assert_still_works, make


@pytest.fixture(scope="module", params=["namespaces", "fallback"])
def one(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    sb = make(request.param, workers=1)
    assert sb.isolation.zygote, sb.isolation
    yield sb
    sb.close()


def zygotes() -> set[int]:
    """This process's sandboxed children that stay between programs: the zygotes."""
    out = set()
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
        except (OSError, ValueError):
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if fields.get("PPid", "").strip() == str(os.getpid()) and fields.get("Seccomp", "").strip() == "2":
            out.add(int(entry.name))
    return out


def after(sb: Sandbox, attack: str, probe: str) -> None:
    """Runs `attack` as a program, then a program whose global `leak` must come out empty/false.
    First, both in one program: the probe must see the attack there (or it proves nothing)."""
    r = sb.run(function_program(attack + "\n" + probe, ["assert not leak, leak"]))
    assert r.verdicts == ["wrong_answer"], r.tests
    sb.run(function_program(attack, ["assert 1"]))
    r = sb.run(function_program(probe, ["assert not leak, leak"]))
    assert r.verdicts == ["passed"], r.tests


def test_memory_does_not_reach_the_next_program(one: Sandbox) -> None:
    # Rewrites the cached small int 7 in place (CPython: the first digit right after the header).
    attack = "import ctypes, sys\nctypes.c_uint32.from_address(id(7) + int.__basicsize__).value = 8\n"
    after(one, attack, "leak = repr(3 + 4) != '7'\n")


def test_module_state_does_not_reach_the_next_program(one: Sandbox) -> None:
    attack = (
        "import os, sys, json\nos.marker = 1\njson.dumps = None\nsys.path.append('/leak')\nsys.modules['leak'] = os\n"
    )
    probe = "import os, sys, json\nleak = [hasattr(os, 'marker'), json.dumps is None, '/leak' in sys.path, 'leak' in sys.modules]\nleak = any(leak)\n"
    after(one, attack, probe)


def test_environment_does_not_reach_the_next_program(one: Sandbox) -> None:
    attack = "import os\nos.environ['LEAK'] = '1'\nos.putenv('LEAK2', '1')\nos.chdir('/')\n"
    probe = "import os\nleak = [k for k in ('LEAK', 'LEAK2') if os.getenv(k)] + ([os.getcwd()] if os.getcwd() == '/' else [])\n"
    after(one, attack, probe)


def test_files_do_not_reach_the_next_program(one: Sandbox) -> None:
    attack = (
        "import os\n"
        "open('here', 'w').write('x')\n"
        "open(os.environ['TMPDIR'] + '/tmp', 'w').write('x')\n"
        "open('../beside', 'w').write('x')\n"
        "os.mkdir('../dir')\n"
        "os.chmod('.', 0o500)\n"
        "os.chmod('..', 0o500)\n"
    )
    probe = "import os\nleak = os.listdir('.') + os.listdir('..')[:0] + [p for p in ('../beside', '../dir') if os.path.exists(p)]\n"
    after(one, attack, probe)
    r = one.run(function_program("open('w', 'w').write('ok')\nok = open('w').read()\n", ["assert ok == 'ok'"]))
    assert r.verdicts == ["passed"], r.tests


def _marked(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                if "Z" not in (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]:
                    found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def test_leftover_processes_do_not_reach_the_next_program(one: Sandbox) -> None:
    if not one.isolation.child_processes:
        # Root, or no namespaces: seccomp refuses child processes, so there is no grandchild to
        # leave over. Show the refusal, then say the attack was not run (not a silent pass).
        refused = "import os\ntry:\n    os.fork()\n    forked = True\nexcept OSError:\n    forked = False\n"
        r = one.run(function_program(refused, ["assert not forked"]))
        assert r.verdicts == ["passed"], r.tests
        pytest.skip(f"{one.isolation.mode}: child processes are refused here (fork raised), no grandchild can be left")
    marker = f"atgrpo-zygote-leftover-{os.getpid()}"
    # The program forks a detached grandchild, waits until it has exec'd (the close-on-exec pipe
    # reads EOF), then until the host has seen it (SIGUSR1 from the host, below): a passed test
    # proves the grandchild existed, so its absence afterwards is the zygote's doing.
    attack = (
        "import os, signal, sys\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])\n"
        "r, w = os.pipe2(os.O_CLOEXEC)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'])\n"
        "os.close(w)\n"
        "os.read(r, 1)\n"
        "seen = signal.sigtimedwait([signal.SIGUSR1], 8) is not None\n"
    )
    with make(one.isolation.mode, workers=1, timeout_s=10.0) as sb:
        done: list = []
        runner = threading.Thread(target=lambda: done.append(sb.run(function_program(attack, ["assert seen"]))))
        runner.start()
        deadline = time.monotonic() + 8
        while not (found := _marked(marker)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert found, "the grandchild never appeared"
        parent = int(
            dict(
                line.split(":\t", 1)
                for line in Path(f"/proc/{found[0]}/status").read_text().splitlines()
                if ":\t" in line
            )["PPid"]
        )
        os.kill(parent, signal.SIGUSR1)  # the program's own process: it may finish now
        runner.join()
        assert done[0].verdicts == ["passed"], done[0].tests
        assert _marked(marker) == []
        assert_still_works(sb)


SIGNAL_ATTACK = (
    "import os, signal\n"
    "for target in (os.getppid(), 1, -1, 0):\n"
    "    for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):\n"
    "        try:\n"
    "            os.kill(target, sig)\n"
    "        except OSError:\n"
    "            pass\n"
)
"""A program that signals its parent (the zygote), pid 1, its process group and every process it may."""


def test_the_zygote_itself_is_out_of_reach(one: Sandbox) -> None:
    assert_still_works(one)
    before = zygotes()
    attack = SIGNAL_ATTACK
    one.run(function_program(attack, ["assert 1"]))
    time.sleep(0.1)
    assert_still_works(one)
    assert zygotes() == before  # the same zygote, not a replacement


# Stdio programs (printing programs) fork their harness from the zygote too (`stdio_zygote`, the
# default): the same attacks, from a stdio program, reach neither the next stdio program nor the
# next function program. The probe prints whether it saw a leak.
STDIO_ATTACKS = {
    "memory": (
        "import ctypes, sys\nctypes.c_uint32.from_address(id(7) + int.__basicsize__).value = 8\n",
        "leak = repr(3 + 4) != '7'\n",
    ),
    "module state": (
        "import os, sys, json\nos.marker = 1\njson.dumps = None\nsys.path.append('/leak')\nsys.modules['leak'] = os\n",
        "import os, sys, json\nleak = any([hasattr(os, 'marker'), json.dumps is None, '/leak' in sys.path, 'leak' in sys.modules])\n",
    ),
    "environment": (
        "import os\nos.environ['LEAK'] = '1'\nos.putenv('LEAK2', '1')\nos.chdir('/')\n",
        "import os\nleak = [k for k in ('LEAK', 'LEAK2') if os.getenv(k)] + ([os.getcwd()] if os.getcwd() == '/' else [])\n",
    ),
    "files": (
        "import os\nopen('here', 'w').write('x')\nopen(os.environ['TMPDIR'] + '/tmp', 'w').write('x')\nos.chmod('.', 0o500)\n",
        "import os\nleak = os.listdir('.')\n",
    ),
}


@pytest.mark.parametrize("attack", sorted(STDIO_ATTACKS))
def test_a_stdio_program_reaches_neither_the_next_stdio_nor_function_program(one: Sandbox, attack: str) -> None:
    from atgrpo.sandbox import stdio_program

    code, probe = STDIO_ATTACKS[attack]
    show = "print(bool(leak))\n"
    r = one.run(stdio_program(code + "\n" + probe + show, [("", None)]))
    assert r.tests[0].stdout == b"True\n", (attack, r.tests)  # the probe sees the attack within one program
    one.run(stdio_program(code, [("", None)]))
    r = one.run(stdio_program(probe + show, [("", None)]))
    assert r.tests[0].stdout == b"False\n", (attack, r.tests)
    one.run(stdio_program(code, [("", None)]))
    r = one.run(function_program(probe, ["assert not leak, leak"]))
    assert r.verdicts == ["passed"], (attack, r.tests)


def test_the_zygote_is_out_of_reach_of_stdio_programs(one: Sandbox) -> None:
    from atgrpo.sandbox import stdio_program

    assert_still_works(one)
    before = zygotes()
    attack = SIGNAL_ATTACK + (
        "for path in (f'/proc/{os.getppid()}/mem', '/proc/1/mem', f'/proc/{os.getppid()}/environ'):\n"
        "    try:\n"
        "        print(path, len(open(path, 'rb').read(16)))\n"
        "    except OSError as e:\n"
        "        print(path, type(e).__name__)\n"
    )
    r = one.run(stdio_program(attack, [("", None)]))
    assert r.verdicts[0] in ("passed", "runtime_error"), r.tests
    assert b" 16" not in r.tests[0].stdout, r.tests
    time.sleep(0.1)
    assert_still_works(one)
    assert one.run(stdio_program("print('ok')", [("", "ok")])).verdicts == ["passed"]
    assert zygotes() == before  # the same zygote, not a replacement


def test_stdio_programs_fork_from_the_zygote(one: Sandbox) -> None:
    from atgrpo.sandbox import stdio_program

    before = zygotes()
    r = one.run(
        stdio_program(
            "import sys\nprint(sys.modules['__main__'].__name__, len(input()))\n", [("abc\n", "__main__ 3\n")]
        )
    )
    assert r.verdicts == ["passed"], r.tests
    assert zygotes() == before  # no interpreter of its own stays; the zygote served it
