"""The keeper: the parent of every process a Ray host starts, so that nothing of a run outlives its
host, however the host dies.

    python -m atgrpo.launch.keeper --run OUT_DIR --name NAME --fd FD -- CMD...

Why a process of its own: Ray kills a host (the driver died, the run ended, `ray.kill`) but not what
the host started, and what the host starts may start more: a killed torchrun leaves its ranks (each
in a session of its own), vLLM starts engine processes, a dead intermediate process leaves orphans to
init. PR_SET_PDEATHSIG reaches only a direct child. So, between the host and its child:
- the keeper is a child subreaper (PR_SET_CHILD_SUBREAPER): an orphan anywhere below it is
  re-parented to it, never to init, so its process tree is always everything the child started;
- FD is its end of a socket pair whose other end only the host holds: end of file there means the
  host's process is gone (SIGKILL included, nothing of the host needs to run); the keeper then
  SIGKILLs its whole tree and exits. Its first message on FD is the child's pid;
- when CMD exits, whatever CMD left behind is SIGKILLed, a line in the log (its stderr) says how
  CMD ended, and the keeper exits with CMD's status (a death by signal N as 128 + N);
- SIGINT and SIGTERM are passed on to CMD (the host's graceful stop);
- CMD dies with the keeper too (PR_SET_PDEATHSIG: SIGKILL), were the keeper itself killed.
Its command line names the run's out_dir and the process, so `ps` finds every keeper of a run.
Only the standard library, single-threaded (the fork below is safe, PDEATHSIG follows the process).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import select
import signal
import socket
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.2
"""How often the keeper reaps and looks at its host's end of the socket."""
KILL_ROUNDS = 50
"""SIGKILL passes over the tree before the keeper gives up on processes that keep forking."""


def _prctl(option: int, value: int) -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process this one can see (/proc/<pid>/stat; the kernel may lack
    /proc/<pid>/task/<tid>/children)."""
    out: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:  # exited while listing
            continue
        out[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])  # the name in (...) may hold spaces
    return out


def descendants(root: int) -> list[int]:
    """Every process below `root` now (children first, then theirs)."""
    kids: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], list(kids.get(root, []))
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def process_state(pid: int) -> str | None:
    """The kernel's one-letter state of `pid` (R, S, D, T, Z, ...); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def keeper_command(python: str, out_dir: str, name: str, fd: int, cmd: list[str]) -> list[str]:
    """The command line that runs `cmd` under a keeper (the host passes `fd` to it)."""
    return [python, "-m", "atgrpo.launch.keeper", "--run", out_dir, "--name", name, "--fd", str(fd), "--", *cmd]


def exit_code(status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128 + N after signal N."""
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def describe_exit(code: int) -> str:
    """`exit_code`'s value in words, as the launchers print it."""
    if code > 128:
        try:
            return f"killed by {signal.Signals(code - 128).name} (exit {code})"
        except ValueError:
            pass
    return f"exit {code}"


class Keeper:
    def __init__(self, name: str, fd: int, cmd: list[str]) -> None:
        self.name = name
        self.host = socket.socket(fileno=fd)
        self.cmd = cmd
        self.child = 0
        self.status: int | None = None

    def _reap(self) -> None:
        """Collect every exited process below (orphans re-parented here included)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child:
                self.status = status

    def _kill_tree(self) -> int:
        """SIGKILL everything below, until nothing is left; how many processes were killed."""
        killed: set[int] = set()
        for _ in range(KILL_ROUNDS):
            self._reap()
            alive = [p for p in descendants(os.getpid()) if process_state(p) not in (None, "Z")]
            if not alive:
                break
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        self._reap()
        return len(killed)

    def _forward(self, signum: int, _frame: object) -> None:
        if self.child and self.status is None:
            try:
                os.kill(self.child, signum)
            except ProcessLookupError:
                pass

    def _say(self, text: str) -> None:
        sys.stderr.write(f"--- {self.name}: {text}\n")
        sys.stderr.flush()

    def run(self) -> int:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        signal.signal(signal.SIGINT, self._forward)
        signal.signal(signal.SIGTERM, self._forward)
        keeper = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: die with the keeper, then become CMD
            try:
                self.host.close()
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != keeper:  # the keeper died before the line above
                    os._exit(1)
                os.execvp(self.cmd[0], self.cmd)
            except BaseException as exc:  # noqa: BLE001 - nothing may return into the keeper's code
                os.write(2, f"--- {self.name}: cannot start {self.cmd[0]}: {exc}\n".encode())
            os._exit(127)
        self.child = pid
        try:
            self.host.sendall(f"{pid}\n".encode())
        except OSError:
            pass  # the host is already gone: seen below
        while self.status is None:
            ready, _, _ = select.select([self.host], [], [], POLL_S)
            if ready:
                try:
                    data = self.host.recv(64)
                except OSError:
                    data = b""
                if not data:
                    n = self._kill_tree()
                    self._say(f"its Ray host is gone; killed {n} process(es) of it (pid {pid} and below)")
                    return 128 + signal.SIGKILL
            self._reap()
        code = exit_code(self.status)
        left = self._kill_tree()
        self._say(
            f"pid {pid} ended: {describe_exit(code)}" + (f"; killed {left} process(es) it left behind" if left else "")
        )
        return code


def main() -> None:
    parser = argparse.ArgumentParser(prog="atgrpo-keeper", description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="the run's out_dir (for `ps`; not read)")
    parser.add_argument("--name", required=True, help="the process's name in the run (learner, actor0, ...)")
    parser.add_argument("--fd", type=int, required=True, help="the keeper's end of the host's socket pair")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command after --")
    sys.exit(Keeper(args.name, args.fd, cmd).run())


if __name__ == "__main__":
    main()


__all__ = ["descendants", "describe_exit", "exit_code", "keeper_command", "process_state"]
