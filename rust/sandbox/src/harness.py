# The in-sandbox harness (the checker): `python -I -S -c BOOT` runs codec.py + remote.py + this,
# compiled once per sandbox. Protocol: protocol.rs.
#
# fd 3 (from the host): 16-byte nonce, header, program, setup and tests (or stdin of each case); then
# one b"c" per finished test. fd 4 (to the host): records `nonce kind index length payload`.
# The nonce is read first into a bytearray and is never in argv, the environment or a file.
# Stdio mode: the program runs here, once per case; its stdout is judged by the host, so nothing it
# can reach here decides a verdict. Function mode: the program runs in a process of its own
# (candidate.py) that the host started next to this one, reached only through fds 5 (requests) and 6
# (replies); setup and tests run here with the program's functions replaced by `Remote` stand-ins,
# so `f(x)` here is a round trip that returns plain data (codec.py) and `==` is this interpreter's
# own. The program never shares an interpreter with the nonce, the tests or the expected values.
def _atgrpo_harness():
    import builtins
    import os
    import sys

    read, write, writev, dup, dup2, close = os.read, os.write, os.writev, os.dup, os.dup2, os.close
    exit_now, memfd, lseek = os._exit, os.memfd_create, os.lseek
    fdopen, compile_, exec_, hook = open, compile, exec, sys.__excepthook__
    Base, Exit, MemErr, AssertErr = BaseException, SystemExit, MemoryError, AssertionError
    CTL, RES = 3, 4
    getpid = os.getpid
    me = getpid()

    nonce = bytearray(16)
    view, got = memoryview(nonce), 0
    while got < 16:
        n = os.readv(CTL, [view[got:]])
        if n <= 0:
            exit_now(70)
        got += n
    view.release()

    def read_exact(n):
        parts = []
        while n:
            b = read(CTL, min(n, 1 << 20))
            if not b:
                exit_now(70)
            parts.append(b)
            n -= len(b)
        return b"".join(parts)

    head = read_exact(21)
    if head[:4] != b"ATGS":
        exit_now(72)
    mode = head[4:5]
    first = int.from_bytes(head[5:9], "little")
    count = int.from_bytes(head[9:13], "little")
    body = memoryview(read_exact(int.from_bytes(head[13:21], "little")))
    blobs, pos = [], 0
    while pos < len(body):
        n = int.from_bytes(body[pos : pos + 4], "little")
        blobs.append(bytes(body[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    body.release()
    code, setup, items = blobs[0].decode(), blobs[1].decode(), blobs[2:]

    def send(kind, index, payload=b""):
        if getpid() != me:
            # A process the program forked ran off the end of the program (or test): like any
            # script, it just ends. Only the harness's own process reports.
            flush()
            exit_now(0)
        writev(RES, [nonce, kind + index.to_bytes(4, "little") + len(payload).to_bytes(4, "little"), payload])

    def wait_ack():
        if read(CTL, 1) != b"c":
            exit_now(71)

    # Private copies of the output pipes: a program that closes fd 1 or 2 only spoils its own test.
    out_fd, err_fd = dup(1), dup(2)
    streams = []

    def bind_streams():
        dup2(out_fd, 1)
        dup2(err_fd, 2)
        streams[:] = [
            fdopen(1, "w", encoding="utf-8", closefd=False),
            fdopen(2, "w", 1, encoding="utf-8", errors="backslashreplace", closefd=False),
        ]
        sys.stdout, sys.stderr = streams

    def flush():
        for s in streams:
            try:
                s.flush()
            except Base:
                pass

    def fresh_main(name):
        module = type(sys)(name)
        module.__dict__["__builtins__"] = builtins
        sys.modules[name] = module
        return module.__dict__

    codec = _atgrpo_codec()
    Unsupported = codec[2]

    def status(e):
        return 4 if isinstance(e, Unsupported) else 3 if isinstance(e, MemErr) else 1 if isinstance(e, AssertErr) else 2

    def failure(e):
        try:
            # Frames of this harness (the file is "<string>") and of the stand-ins are noise.
            tb, keep = e.__traceback__, []
            while tb is not None:
                if tb.tb_frame.f_code.co_filename != "<string>":
                    keep.append(tb)
                tb = tb.tb_next
            for a, b in zip(keep, keep[1:] + [None]):
                a.tb_next = b
            e.__traceback__ = keep[0] if keep else None
            hook(type(e), e, e.__traceback__)
        except Base:
            pass
        try:
            text = f"{type(e).__name__}: {e}"
        except Base:
            text = "exception"
        return status(e), text[:500]

    def broken(why):
        # The program's process exited, closed its end or sent garbage: the host sees status 75
        # and blames the program (with its exit status, if it exited).
        flush()
        try:
            write(err_fd, f"\nthe program's process broke the call channel: {why}\n".encode())
        except Base:
            pass
        exit_now(75)

    def exit_status(e):
        c = e.code
        if c is None or c == 0:
            return 0, ""
        if not isinstance(c, int):
            try:
                print(c, file=sys.stderr)
            except Base:
                pass
        return 2, f"SystemExit: {c!r}"[:500]

    def end(kind, index, st, detail):
        flush()
        send(kind, index, bytes([st]) + detail.encode("utf-8", "backslashreplace"))

    bind_streams()
    if mode == b"f":
        g = fresh_main("__candidate__")
        loaded = _atgrpo_checker(g, code, setup, codec, broken)
        if loaded is not None:
            end(b"P", first, *loaded)
            exit_now(0)
        try:
            if setup:
                exec_(compile_(setup, "<setup>", "exec", dont_inherit=True), g)
        except Base as e:
            end(b"P", first, *failure(e))
            exit_now(0)
        send(b"L", first)
        for i in range(first, count):
            if i > first:
                bind_streams()
            try:
                exec_(compile_(items[i - first].decode(), f"<test {i}>", "exec", dont_inherit=True), g)
                st, detail = 0, ""
            except Exit as e:
                st, detail = 2, f"SystemExit: {e.code!r}"[:500]
            except Base as e:
                st, detail = failure(e)
            end(b"E", i, st, detail)
            wait_ack()
    else:
        try:
            program = compile_(code, "<program>", "exec", dont_inherit=True)
        except Base as e:
            end(b"P", first, *failure(e))
            exit_now(0)
        send(b"L", first)
        for i in range(first, count):
            data = items[i - first]
            fd = memfd("stdin", 0)
            view, done = memoryview(data), 0
            while done < len(data):
                done += write(fd, view[done:])
            lseek(fd, 0, 0)
            dup2(fd, 0)
            close(fd)
            sys.stdin = fdopen(0, "r", encoding="utf-8", closefd=False)
            if i > first:
                bind_streams()
            try:
                exec_(program, fresh_main("__main__"))
                st, detail = 0, ""
            except Exit as e:
                st, detail = exit_status(e)
            except Base as e:
                st, detail = failure(e)
            end(b"E", i, st, detail)
            wait_ack()
    send(b"D", count)
    exit_now(0)


_atgrpo_harness()
