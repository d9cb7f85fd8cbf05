# The checker's side of the call channel (function mode), placed between codec.py and harness.py in
# the checker's code. The program's process (candidate.py) is reached only through fd 5
# (requests) and fd 6 (replies), frames `kind:u8 len:u32 payload`.
#
# Invariants: everything that arrives is decoded by codec.py's `decode` (plain data only) and its
# shape checked before use; any surprise ends this process with status 75 through `broken` (the
# host then blames the program). A `Remote` never yields a value that is not plain data: comparing,
# hashing, iterating or computing with one raises `Unsupported` (verdict `unsupported_value`), so an
# object that claims to equal everything is never equal to anything here. No program global named
# like a builtin is installed: the trusted setup and tests always call the real builtins.
def _atgrpo_checker(g, code, setup, codec, broken):
    """Ships the program to its process and fills `g` with stand-ins for the program's globals.
    Returns None when the program loaded, else (status, detail) for every test."""
    import builtins
    import os
    import sys

    encode, decode, Unsupported = codec
    read, write = os.read, os.write
    REQ, REP, MAX_FRAME = 5, 6, (64 << 20) + 4096
    # Classes of these modules are rebuilt here from their names (e.g. `Counter(f(x)) == ...` must
    # compare with this interpreter's Counter); other classes and all functions stay with the program.
    DATA_MODULES = {"collections", "fractions", "decimal", "datetime", "array", "typing", "enum", "builtins"}

    def recv(n):
        parts = []
        while n:
            try:
                b = read(REP, min(n, 1 << 20))
            except OSError as e:
                broken(f"reading: {e}")
            if not b:
                broken("it exited or closed its end")
            parts.append(b)
            n -= len(b)
        return b"".join(parts)

    def get():
        head = recv(5)
        n = int.from_bytes(head[1:], "little")
        if n > MAX_FRAME:
            broken(f"a reply of {n} bytes")
        try:
            return head[:1], decode(recv(n))
        except Exception as e:
            broken(f"a malformed reply ({e})")

    def put(kind, value):
        payload = encode(value, strict=False, ref=target_of)  # Unsupported: the test's own value
        data = memoryview(kind + len(payload).to_bytes(4, "little") + payload)
        try:
            while data:
                data = data[write(REQ, data) :]
        except OSError as e:
            broken(f"writing: {e}")

    def raise_from(reply):
        """The program's exception, raised here as the builtin class it derives from."""
        if type(reply) is not tuple or len(reply) != 2 or type(reply[0]) is not str or type(reply[1]) is not str:
            broken("a malformed exception")
        name, text = reply
        cls = vars(builtins).get(name)
        exc = None
        # StopIteration would end the test's own loops silently; exits and interrupts are not the test's.
        if (
            isinstance(cls, type)
            and issubclass(cls, Exception)
            and not issubclass(cls, (StopIteration, StopAsyncIteration))
        ):
            try:
                exc = cls(text)
            except Exception:
                exc = None
        raise (exc if isinstance(exc, Exception) else RuntimeError(f"{name}: {text}"))

    def request(kind, value):
        put(kind, value)
        k, v = get()
        if k == b"V":
            return v
        if k == b"R" and type(v) is tuple and len(v) == 2 and type(v[0]) is int and type(v[1]) is str:
            return Remote(v[0], v[1])
        if k == b"E":
            raise_from(v)
        broken(f"an unexpected reply {k!r}")

    class Remote:
        """An object that stays in the program's process: calls and attribute reads are round
        trips; anything that needs its value is unsupported."""

        __slots__ = ("_atgrpo_target", "_atgrpo_type")

        def __init__(self, target, type_name):
            self._atgrpo_target, self._atgrpo_type = target, type_name

        def __call__(self, *args, **kwargs):
            return request(b"C", (self._atgrpo_target, args, kwargs))

        def __getattr__(self, name):
            if name[:2] == "__":
                raise AttributeError(name)
            return request(b"G", (self._atgrpo_target, name))

        def __repr__(self):
            return f"<{self._atgrpo_type} of the program>"

    def refuse(self, *args):
        raise Unsupported(
            f"the program's value ({self._atgrpo_type}) is not plain data (None, bool, int, float, "
            "complex, str, bytes, or lists, tuples, dicts, sets of them)"
        )

    for name in (
        "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __hash__ __bool__ __len__ __iter__ __reversed__ "
        "__contains__ __getitem__ __index__ __int__ __float__ __complex__ __add__ __radd__ __sub__ __rsub__ "
        "__mul__ __rmul__ __truediv__ __rtruediv__ __floordiv__ __rfloordiv__ __mod__ __rmod__ __pow__ "
        "__rpow__ __and__ __rand__ __or__ __ror__ __xor__ __rxor__ __neg__ __pos__ __abs__ __round__"
    ).split():
        setattr(Remote, name, refuse)

    class RemoteClass:
        """Stands for a class of the program: a real class here (`isinstance(C, type)`, `hasattr`
        work), whose call makes the instance in the program's process."""

        __slots__ = ()

        def __new__(cls, *args, **kwargs):
            return request(b"C", (cls._atgrpo_target, args, kwargs))

    def target_of(v):
        if type(v) is Remote:
            return v._atgrpo_target
        if isinstance(v, type) and issubclass(v, RemoteClass) and v is not RemoteClass:
            return v._atgrpo_target
        return None

    def rebuilt(module, qualname):
        if module.partition(".")[0] not in DATA_MODULES:
            return None
        __import__(module)
        obj = sys.modules[module]
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj if isinstance(obj, type) else None

    def install(name, kind, extra):
        if kind == "v":
            g[name] = extra
        elif kind == "m" and type(extra) is str and extra.partition(".")[0] in sys.stdlib_module_names:
            __import__(extra)
            g[name] = sys.modules[extra]
        elif kind == "o" and type(extra) is tuple and len(extra) == 2 and all(type(x) is str for x in extra):
            g[name] = rebuilt(*extra) or Remote(name, "class")
        elif kind == "c" and type(extra) is tuple:
            attrs = {
                a: Remote((name, a), "attribute") for a in extra if type(a) is str and a.isidentifier() and a[:1] != "_"
            }
            g[name] = type(name, (RemoteClass,), {"__slots__": (), "_atgrpo_target": name, **attrs})
        elif kind == "r" and type(extra) is str:
            g[name] = Remote(name, extra[:100])

    # Only the import lines of the setup go to the program (as when setup ran in its module): the
    # rest of it, e.g. HumanEval's `check` with its expected values, stays here.
    imports = [
        ln for ln in setup.splitlines() if ln.startswith(("import ", "from ")) and not ln.rstrip().endswith(("(", "\\"))
    ]
    put(b"X", (code, imports))
    kind, value = get()
    if kind == b"P":
        if type(value) is not tuple or len(value) != 2 or value[0] not in (1, 2, 3) or type(value[1]) is not str:
            broken("a malformed load failure")
        return value[0], value[1][:500]
    if kind != b"L" or type(value) is not list:
        broken(f"an unexpected reply {kind!r} to the program")
    # A program global named like a builtin (`def abs(x): return 0`, `len = lambda x: 3`, `abs = int`)
    # is not installed: the setup and tests run here with the real builtins, so a program cannot
    # change what `abs(candidate(1) - 2.5) < 1e-6` computes. Only its own process sees its rebinding.
    shadowed = vars(builtins)
    for item in value:
        if type(item) is tuple and len(item) == 3 and type(item[0]) is str and type(item[1]) is str:
            if item[0].isidentifier() and item[0][:2] != "__" and item[0] not in shadowed:
                try:
                    install(*item)
                except Exception:
                    pass  # e.g. a module this interpreter cannot import: the name is just missing
    return None
