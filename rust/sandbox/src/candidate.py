# The program's own process for function-style tests: `python -I -S -c BOOT` runs codec.py + this,
# compiled once per sandbox (protocol.rs).
#
# It holds the program and nothing else: no tests, no expected values, no nonce, no result pipe. fd 3
# brings requests from the checker (harness.py), fd 4 takes replies; frames are `kind:u8 len:u32
# payload` (payload: codec.py). Requests: X (program text, setup import lines), C (call target with
# args, kwargs), G (attribute of a target). Replies: L (loaded: the listing of its globals) or P
# (load failed: status, detail); then per request V (a plain value), R (handle to an object that is
# not plain data) or E (an exception: the nearest builtin exception class's name, message).
# Everything here runs in the untrusted process and may be rewritten by the program: the checker
# trusts none of it, only decodes what arrives (a program can at most send plain values it chose).
def _atgrpo_candidate():
    import builtins
    import os
    import sys

    # Bound once, before the program runs: rebinding builtins breaks the program's own code only.
    bi = builtins
    len, type, isinstance, str, getattr, callable = bi.len, bi.type, bi.isinstance, bi.str, bi.getattr, bi.callable
    dir, list, tuple, int, exec, compile = bi.dir, bi.list, bi.tuple, bi.int, bi.exec, bi.compile
    bytes, memoryview, min, Exception = bi.bytes, bi.memoryview, bi.min, bi.Exception
    encode, decode, Unsupported = _atgrpo_codec()
    read, write, hook = os.read, os.write, sys.__excepthook__
    Base, Exit, MemErr, AssertErr = BaseException, SystemExit, MemoryError, AssertionError
    REQ, REP = 3, 4

    def linger():
        # The checker is done or gone, and the host kills this process next. Waiting for that
        # (never exiting on our own) keeps an exit of this process meaning "the program ended it".
        import signal

        while True:
            signal.pause()

    def read_exact(n):
        parts = []
        while n:
            b = read(REQ, min(n, 1 << 20))
            if not b:
                linger()
            parts.append(b)
            n -= len(b)
        return b"".join(parts)

    handles = []
    module = type(sys)("__candidate__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__candidate__"] = module
    g = module.__dict__

    def resolve(target):
        if type(target) is int:
            return handles[target]
        if type(target) is str:
            return g[target]
        obj = resolve(target[0])
        for name in target[1:]:
            obj = getattr(obj, name)
        return obj

    def get():
        head = read_exact(5)
        return head[:1], decode(read_exact(int.from_bytes(head[1:], "little")), resolve)

    def put(kind, payload):
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except Base:
                pass
        data = memoryview(kind + len(payload).to_bytes(4, "little") + payload)
        try:
            while data:
                data = data[write(REP, data) :]
        except OSError:
            linger()  # the checker is gone

    def failure(e):
        """Prints the traceback here (stderr is the test's) and names the nearest builtin class."""
        try:
            if e.__traceback__ is not None:
                e.__traceback__ = e.__traceback__.tb_next  # this harness's own frame
            hook(type(e), e, e.__traceback__)
        except Base:
            pass
        name = "Exception"
        for k in type(e).__mro__:
            if builtins.__dict__.get(k.__name__) is k:
                name = k.__name__
                break
        try:
            text = str(e)[:500]
        except Base:
            text = ""
        return name, text

    def reply(value):
        try:
            put(b"V", encode(value))
        except Unsupported as e:
            # Not plain data: it stays here, the checker gets a handle (and a description for the
            # verdict's detail, e.g. "set holding a H").
            handles.append(value)
            what, why = type(value).__name__[:100], str(e)
            if why != f"a {what}":
                what = f"{what} holding {why}"
            put(b"R", encode((len(handles) - 1, what[:200])))

    def listing():
        """(name, kind, extra) per global: v plain value (copied if small), m module (its name),
        o class of a standard data module (module, qualname), c class of the program (its public
        attributes), r anything else (type name): it stays here and is reached through calls."""
        out = []
        for name, v in list(g.items()):
            if name[:2] == "__":
                continue
            module = getattr(v, "__module__", None) if isinstance(v, type) else None
            if type(v) is type(sys):
                out.append((name, "m", getattr(v, "__name__", "")))
            elif type(module) is str and module != "__candidate__":
                out.append((name, "o", (module, str(getattr(v, "__qualname__", "")))))
            elif isinstance(v, type):
                out.append((name, "c", tuple(a for a in dir(v) if type(a) is str and a[:1] != "_")[:1000]))
            elif callable(v):
                out.append((name, "r", type(v).__name__[:100]))
            else:
                try:
                    encode(v, limit=64 << 10)  # small plain globals are copied, others stay here
                    out.append((name, "v", v))
                except Unsupported:
                    out.append((name, "r", type(v).__name__[:100]))
        return out

    kind, (code, imports) = get()
    try:
        try:
            exec(compile(code, "<program>", "exec", dont_inherit=True), g)
        except Exit as e:
            if e.code is not None and e.code != 0:
                raise
        for line in imports:  # what the tests import, as when the setup ran in the program's module
            try:
                exec(compile(line, "<setup>", "exec", dont_inherit=True), g)
            except Exception:
                pass
        put(b"L", encode(listing()))
    except Base as e:
        _, text = failure(e)
        st = 3 if isinstance(e, MemErr) else 1 if isinstance(e, AssertErr) else 2
        put(b"P", encode((st, f"{type(e).__name__}: {text}")))
        linger()
    while True:
        kind, request = get()
        try:
            if kind == b"C":
                target, args, kwargs = request
                value = resolve(target)(*args, **kwargs)
            elif kind == b"G":
                target, name = request
                value = getattr(resolve(target), name)
            else:
                linger()  # not a request the checker sends
        except Base as e:
            put(b"E", encode(failure(e)))
        else:
            reply(value)


_atgrpo_candidate()
