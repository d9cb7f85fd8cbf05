"""The keeper (`atgrpo.launch.keeper`): what its child started dies with the keeper's host, even a
process in a session of its own whose parent is dead (torchrun's ranks), and it reports how its child
ended. No Ray: the test stands in for the host, holding the other end of the socket pair."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from atgrpo.launch.keeper import describe_exit, keeper_command, process_state

# The child starts a grandchild in a new session and exits: the grandchild is an orphan the keeper
# must adopt (subreaper); it prints its pid to the file first.
ESCAPE = "import os,subprocess,sys,time; p=subprocess.Popen(['sleep','300'],start_new_session=True); open(sys.argv[1],'w').write(str(p.pid)); time.sleep({stay})"


def start(tmp_path: Path, stay: float) -> tuple[subprocess.Popen, socket.socket, Path]:
    mine, theirs = socket.socketpair()
    pidfile = tmp_path / "grandchild"
    cmd = [sys.executable, "-c", ESCAPE.format(stay=stay), str(pidfile)]
    log = open(tmp_path / "log", "w")
    keeper = subprocess.Popen(
        keeper_command(sys.executable, str(tmp_path), "t", theirs.fileno(), cmd),
        pass_fds=[theirs.fileno()],
        stderr=log,
    )
    theirs.close()
    return keeper, mine, pidfile


def gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if process_state(pid) in (None, "Z"):
            return True
        time.sleep(0.05)
    return False


def grandchild(pidfile: Path) -> int:
    deadline = time.monotonic() + 20
    while not (pidfile.exists() and pidfile.read_text()):
        assert time.monotonic() < deadline, "the child never started its grandchild"
        time.sleep(0.05)
    return int(pidfile.read_text())


def test_the_hosts_death_kills_the_whole_tree_sessions_included(tmp_path: Path) -> None:
    keeper, host_end, pidfile = start(tmp_path, stay=300)
    child = int(host_end.recv(64).decode().strip())
    orphan = grandchild(pidfile)
    host_end.close()  # what the host's death (SIGKILL included) does to its end
    assert keeper.wait(timeout=10) == 128 + signal.SIGKILL
    assert gone(child) and gone(orphan)
    assert "its Ray host is gone" in (tmp_path / "log").read_text()


def test_what_the_child_leaves_behind_dies_and_its_exit_is_reported(tmp_path: Path) -> None:
    keeper, host_end, pidfile = start(tmp_path, stay=0)
    host_end.recv(64)
    assert keeper.wait(timeout=20) == 0
    assert gone(grandchild(pidfile))  # the child exited; its session-escaped grandchild did not survive
    assert "ended: exit 0; killed 1 process(es) it left behind" in (tmp_path / "log").read_text()
    host_end.close()


def test_signals_reach_the_child_and_its_death_reads_in_words(tmp_path: Path) -> None:
    keeper, host_end, _ = start(tmp_path, stay=300)
    host_end.recv(64)
    time.sleep(0.5)
    keeper.send_signal(signal.SIGTERM)
    assert keeper.wait(timeout=10) == 128 + signal.SIGTERM
    assert "killed by SIGTERM (exit 143)" in (tmp_path / "log").read_text()
    assert describe_exit(1) == "exit 1" and describe_exit(137) == "killed by SIGKILL (exit 137)"
    host_end.close()
