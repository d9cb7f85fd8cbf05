"""Math-Verify worker process: the script `MathVerifier` starts (`python -P _worker.py ...`).

It is run as a file, not as `-m atgrpo...`, so it imports neither atgrpo nor torch: only msgspec and
math_verify. `-P` keeps this directory off `sys.path` (its `math.py` would shadow the stdlib).

Math-Verify arms SIGALRM for its own timeouts, which only works on a main thread: here every answer is
checked on this process's main thread, one at a time. Its alarms are the soft limit; the parent's latency
cap is the hard one (it kills this process when an answer takes too long, e.g. in C code that never returns
to the interpreter to take the signal).

Protocol on stdin/stdout: frames of a 4-byte big-endian length then a msgpack map.
  worker -> parent, once:  {"hello": 1, "version": <math_verify version>}  or  {"hello": 0, "error": text}
  parent -> worker:        {"id": int, "answer": text, "gold": text}
  worker -> parent:        {"id": int, "equal": bool, "error": text}
The worker exits when stdin closes. Anything else printed goes to stderr, never into the protocol.
"""

from __future__ import annotations

import os
import struct
import sys


def _send(out, msg: dict, enc) -> None:
    body = enc.encode(msg)
    out.write(struct.pack(">I", len(body)) + body)
    out.flush()


def _read_exact(inp, n: int) -> bytes | None:
    data = inp.read(n)
    if data is None or len(data) < n:
        return None
    return data


def main(argv: list[str]) -> int:
    parse_timeout, compare_timeout, memory_mb = int(argv[0]), int(argv[1]), int(argv[2])
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray prints from libraries land on stderr
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer

    import msgspec

    enc, dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder()
    try:
        import logging
        from importlib.metadata import version as dist_version

        from math_verify import parse, verify

        logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # timeouts are reported by the verdict
        version = dist_version("math-verify")
        verify(parse("$1$"), parse("$1$"))  # first call imports and compiles the grammar: do it now
    except Exception as e:  # noqa: BLE001 - reported to the parent verbatim
        _send(out, {"hello": 0, "error": f"{type(e).__name__}: {e}"}, enc)
        return 1
    if memory_mb > 0:
        import resource

        limit = memory_mb * (1 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _send(out, {"hello": 1, "version": version}, enc)

    golds: dict[str, list] = {}
    while True:
        head = _read_exact(inp, 4)
        if head is None:
            return 0
        body = _read_exact(inp, struct.unpack(">I", head)[0])
        if body is None:
            return 0
        req = dec.decode(body)
        reply = {"id": req["id"], "equal": False, "error": ""}
        try:
            gold = golds.get(req["gold"])
            if gold is None:
                gold = parse("\\boxed{" + req["gold"] + "}", parsing_timeout=parse_timeout)
                if len(golds) > 4096:
                    golds.clear()
                golds[req["gold"]] = gold
            if not gold:
                reply["error"] = "gold answer could not be parsed"
            else:
                answer = parse("\\boxed{" + req["answer"] + "}", parsing_timeout=parse_timeout)
                reply["equal"] = bool(answer) and bool(verify(gold, answer, timeout_seconds=compare_timeout))
        except BaseException as e:  # noqa: BLE001 - one bad answer must not end the worker
            if isinstance(e, KeyboardInterrupt):
                return 0
            reply["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        _send(out, reply, enc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
