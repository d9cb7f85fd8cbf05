# Plain data <-> bytes for the call channel between the checker (harness.py) and the program's own
# process (candidate.py). Placed before each of them in the code `BOOT` runs (protocol.rs).
#
# Plain data: None, bool, int, float, complex, str, bytes, and list, tuple, dict, set, frozenset of
# plain data, at most MAX_DEPTH levels deep. Invariants:
# - `decode` only ever builds those builtin types (never calls a constructor named by the data, never
#   runs code), checks every length against what is left, and refuses trailing bytes; anything else is
#   ValueError. It is what the checker trusts, so it must hold for any bytes the program sends.
# - `encode(strict=True)` (the program's side) takes exact types only: a subclass of int with a lying
#   `__eq__` is as unsupported as any other object. The checker encodes test arguments with
#   strict=False (subclasses of plain types travel as their base type: the test is trusted code).
# - A `ref` hook lets the checker send a handle to an object that lives in the program's process
#   (tag r); only a decoder given `resolve` accepts it, so values coming back can never hold one.
def _atgrpo_codec():
    # Builtins are bound here, once: a program that rebinds `builtins.len` breaks its own code only.
    import builtins as bi

    len, type, isinstance, bytes, bytearray, str = bi.len, bi.type, bi.isinstance, bi.bytes, bi.bytearray, bi.str
    int, float = bi.int, bi.float
    list, tuple, dict, set, frozenset, complex = bi.list, bi.tuple, bi.dict, bi.set, bi.frozenset, bi.complex
    bool, range, Exception, ValueError = bi.bool, bi.range, bi.Exception, bi.ValueError
    MAX_DEPTH = 100
    PLAIN = (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)
    SEQ = {list: b"l", tuple: b"t", set: b"S", frozenset: b"z"}
    to_bytes, bit_length, fhex, fromhex, from_bytes = (
        int.to_bytes,
        int.bit_length,
        float.hex,
        float.fromhex,
        int.from_bytes,
    )
    CONTAINERS = b"ltSzdr"

    class Unsupported(Exception):
        """A value that is not plain data (or too large or too deep to cross)."""

    def encode(value, strict=True, ref=None, limit=64 << 20):
        out = bytearray()

        def enc(v, depth):
            if depth > MAX_DEPTH:
                raise Unsupported(f"a value nested deeper than {MAX_DEPTH} levels (or holding itself)")
            t = type(v)
            if t is int:  # the common case first
                b = to_bytes(v, (bit_length(v) + 8) // 8, "little", signed=True)
                out.extend(b"i" + len(b).to_bytes(4, "little") + b)
                return
            if not strict and t not in PLAIN and v is not None:
                for base in PLAIN:
                    if isinstance(v, base):
                        t = base
                        break
            if v is None:
                out.extend(b"N")
            elif t is bool:
                out.extend(b"T" if v else b"F")
            elif t is int:
                b = to_bytes(v, (bit_length(v) + 8) // 8, "little", signed=True)
                out.extend(b"i" + len(b).to_bytes(4, "little") + b)
            elif t is float:
                h = fhex(v).encode()
                out.extend(b"f" + bytes([len(h)]) + h)
            elif t is complex:
                re, im = fhex(v.real).encode(), fhex(v.imag).encode()
                out.extend(b"c" + bytes([len(re)]) + re + bytes([len(im)]) + im)
            elif t is str or t is bytes:
                b = str.encode(v, "utf-8", "surrogatepass") if t is str else bytes(v)
                out.extend((b"s" if t is str else b"b") + len(b).to_bytes(4, "little"))
                out.extend(b)
            elif t in SEQ:
                out.extend(SEQ[t] + len(v).to_bytes(4, "little"))
                for x in v:
                    enc(x, depth + 1)
            elif t is dict:
                out.extend(b"d" + len(v).to_bytes(4, "little"))
                for k, x in dict.items(v):
                    enc(k, depth + 1)
                    enc(x, depth + 1)
            else:
                target = ref(v) if ref is not None else None
                if target is None:
                    raise Unsupported(f"a {t.__name__[:100]}")
                out.extend(b"r")
                enc(target, depth + 1)
            if len(out) > limit:
                raise Unsupported(f"a value larger than {limit} bytes")

        enc(value, 0)
        return bytes(out)

    def decode(data, resolve=None):
        buf, n, pos = bytes(data), len(data), 0

        def take(k):
            nonlocal pos
            if k > n - pos:
                raise ValueError("truncated value")
            pos += k
            return buf[pos - k : pos]

        def count():
            nonlocal pos
            if 4 > n - pos:
                raise ValueError("truncated value")
            k = from_bytes(buf[pos : pos + 4], "little")
            pos += 4
            if k > n - pos:  # every item takes at least one byte
                raise ValueError("count larger than the message")
            return k

        def dec(depth):
            nonlocal pos
            if pos >= n:
                raise ValueError("truncated value")
            tag = buf[pos]
            pos += 1
            if tag == 105:  # i: the common case, inlined
                k = count()
                pos += k
                return from_bytes(buf[pos - k : pos], "little", signed=True)
            if depth >= MAX_DEPTH and tag in CONTAINERS:
                raise ValueError("value nested too deep")
            if tag == 78:  # N
                return None
            if tag == 84 or tag == 70:  # T F
                return tag == 84
            if tag == 102:  # f
                return fromhex(take(take(1)[0]).decode("ascii"))
            if tag == 99:  # c
                re = fromhex(take(take(1)[0]).decode("ascii"))
                return complex(re, fromhex(take(take(1)[0]).decode("ascii")))
            if tag == 115:  # s
                return take(count()).decode("utf-8", "surrogatepass")
            if tag == 98:  # b
                return take(count())
            if tag == 108 or tag == 116 or tag == 83 or tag == 122:  # l t S z
                items = [dec(depth + 1) for _ in range(count())]
                return (
                    items
                    if tag == 108
                    else tuple(items)
                    if tag == 116
                    else set(items)
                    if tag == 83
                    else frozenset(items)
                )
            if tag == 100:  # d
                d = {}
                for _ in range(count()):
                    k = dec(depth + 1)
                    d[k] = dec(depth + 1)
                return d
            if tag == 114 and resolve is not None:  # r
                return resolve(dec(depth + 1))
            raise ValueError(f"unknown tag {tag}")

        try:
            value = dec(0)
        except ValueError:
            raise
        except Exception as e:  # unhashable set items or dict keys, ...
            raise ValueError(f"malformed value ({type(e).__name__})") from None
        if pos != n:
            raise ValueError("trailing bytes after the value")
        return value

    return encode, decode, Unsupported
