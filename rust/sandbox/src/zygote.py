# The worker's zygote (zygote.rs): an interpreter started once per worker, already inside the
# sandbox (its own user, pid and ipc namespaces, pid 1 there; Landlock; seccomp; rlimits), that forks
# the checker and the program's own process of each function-mode start instead of two interpreter
# starts. `python -I -S -c BOOT` runs this; fd 3 (a pipe) then brings, as `len:u32 blob`: the
# checker's code and the program process's code (marshal), and a JSON config. fd 4 is a SOCK_SEQPACKET
# socket to the host; one request, one reply:
#   B split:u8 n:u8 (resource:u32 value:u64)*n, in SCM_RIGHTS the program process's fds then the
#     checker's -> Q pid:i32 pid:i32 + their two pidfds (the program's process is forked first)
#   S fence:u8 n:u8 (resource:u32 value:u64)*n, in SCM_RIGHTS the harness's five fds and, if fence
#     is 1, a Landlock ruleset whose only writable directory is run_dir -> Q pid:i32 + its pidfd (a
#     stdio start: one process, the harness, which runs the program in itself; the child stacks the
#     ruleset on the zygote's, so it may write in run_dir only, as a spawned harness in its own
#     directory, and not in the zygote's directory around it)
#   W pid:i32 -> X code:i32 signal:i32 cpu_us:u64 (the child is reaped here; the host killed it)
#   E pid:i32* -> e (code signal cpu_us)* (W for each, then C: the end of a start in one round trip)
#   C -> c (every process but this one is killed and reaped)
# Invariants: nothing untrusted ever runs in this process; a child drops everything of the zygote
# (fds, signal dispositions, the socket) before it runs any code it was not born with; the zygote is
# non-dumpable (no /proc/<pid>/mem for same-uid processes) and, as pid 1 of its pid namespace with no
# signal handlers, cannot be signalled from inside it.
def _atgrpo_zygote():
    import builtins
    import ctypes
    import fcntl
    import json
    import marshal
    import os
    import resource
    import signal
    import socket
    import struct
    import sys

    def exact(k):
        b = b""
        while len(b) < k:
            c = os.read(3, k - len(b))
            if not c:
                os._exit(70)
            b += c
        return b

    def blob():
        return exact(int.from_bytes(exact(4), "little"))

    codes = {b"h": marshal.loads(blob()), b"c": marshal.loads(blob())}
    cfg = json.loads(blob())
    os.close(3)
    run_dir, namespaced = cfg["run_dir"], cfg["namespaced"]
    # The children's extra seccomp program (no child processes, signals to self only), with the
    # instructions that get their pid: [(index, kind)], kind 0 = pid, 1 = -pid.
    child_filter = bytes.fromhex(cfg["child_filter"])
    child_slots = cfg["child_slots"]
    sock = socket.socket(fileno=4)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    # As pid 1, a signal reaches this process only if it has a handler: it has none.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    children = set()

    def child(which, limits, fds, fence=False):
        """In the forked child: become a fresh start's process, then run its code. Never returns.
        `fence`: the last of `fds` is a Landlock ruleset to add before anything else runs."""
        try:
            os.setsid()
            sock.detach()  # the object must not own (or later close) whatever lands on fd 4
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in fds]
            for i, fd in enumerate(high):
                os.dup2(fd, i, inheritable=True)
            os.closerange(len(fds), 1 << 20)
            os.chdir(run_dir)
            if fence:
                ruleset = len(fds) - 1
                # landlock_restrict_self(ruleset, 0): 446 on every architecture
                if libc.syscall(ctypes.c_long(446), ctypes.c_int(ruleset), ctypes.c_uint(0)) != 0:
                    os._exit(76)
                os.close(ruleset)
            for res, value in limits:
                hard = value + 1 if res == resource.RLIMIT_CPU else value
                resource.setrlimit(res, (value, hard))
            signal.signal(signal.SIGINT, signal.default_int_handler)
            if child_filter:
                prog = bytearray(child_filter)
                pid = os.getpid()
                for index, kind in child_slots:
                    struct.pack_into("<I", prog, index * 8 + 4, (-pid if kind else pid) & 0xFFFFFFFF)
                buf = ctypes.create_string_buffer(bytes(prog), len(prog))
                fprog = Fprog(len(prog) // 8, ctypes.addressof(buf))
                if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
                    os._exit(74)
            code = codes[which]
        except BaseException:
            os._exit(73)
        main = type(sys)("__main__")
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main
        status = 0
        try:
            exec(code, main.__dict__)
        except SystemExit as e:  # as the interpreter would have ended; never back into this loop
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            status = 1
            try:
                sys.excepthook(*sys.exc_info())
            except BaseException:
                pass
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    pass
            os._exit(status)

    def reap_all():
        if namespaced:
            try:
                os.kill(-1, signal.SIGKILL)  # pid 1: everything else in this pid namespace
            except ProcessLookupError:
                pass
        else:
            for pid in children:  # no namespace: each child is its own session, children refused
                for target in (pid, -pid):
                    try:
                        os.kill(target, signal.SIGKILL)
                    except OSError:
                        pass
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
        children.clear()

    def wait(pid):
        """Reaps one child: `code:i32 signal:i32 cpu_us:u64` (code -2: not a child any more)."""
        try:
            _, status, usage = os.wait4(pid, 0)
            code = os.waitstatus_to_exitcode(status)  # -signal when killed
            reply = (max(code, 0), max(-code, 0), int((usage.ru_utime + usage.ru_stime) * 1e6))
        except ChildProcessError:
            reply = (-2, 0, 0)
        children.discard(pid)
        return struct.pack("<iiQ", *reply)

    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 4096, 16)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)  # the host is gone
        kind = msg[:1]
        if kind == b"B":
            split, n = msg[1], msg[2]
            if len(fds) != split + 7:  # the checker has seven
                os._exit(71)
            limits = [struct.unpack_from("<IQ", msg, 3 + 12 * i) for i in range(n)]
            pids = []
            for which, mine in ((b"c", fds[:split]), (b"h", fds[split:])):
                pid = os.fork()
                if pid == 0:
                    child(which, limits, mine)
                children.add(pid)
                pids.append(pid)
            for fd in fds:
                os.close(fd)
            pidfds = [os.pidfd_open(pid) for pid in pids]
            socket.send_fds(sock, [b"Q" + b"".join(p.to_bytes(4, "little", signed=True) for p in pids)], pidfds)
            for fd in pidfds:
                os.close(fd)
        elif kind == b"S":
            fence, n = msg[1], msg[2]
            if len(fds) != 5 + fence:  # a stdio harness: stdin, stdout, stderr, control, results
                os._exit(71)
            limits = [struct.unpack_from("<IQ", msg, 3 + 12 * i) for i in range(n)]
            pid = os.fork()
            if pid == 0:
                child(b"h", limits, fds, fence == 1)
            children.add(pid)
            for fd in fds:
                os.close(fd)
            pidfd = os.pidfd_open(pid)
            socket.send_fds(sock, [b"Q" + pid.to_bytes(4, "little", signed=True)], [pidfd])
            os.close(pidfd)
        elif kind == b"W":
            sock.send(b"X" + wait(int.from_bytes(msg[1:5], "little", signed=True)))
        elif kind == b"E":
            pids = [int.from_bytes(msg[i : i + 4], "little", signed=True) for i in range(1, len(msg), 4)]
            infos = b"".join(wait(pid) for pid in pids)
            reap_all()
            sock.send(b"e" + infos)
        elif kind == b"C":
            reap_all()
            sock.send(b"c")
        else:
            os._exit(72)


_atgrpo_zygote()
