"""Move-answer parsing, the same rules as `rust/envs/src/parse.rs` (see its module docs)."""

from __future__ import annotations

MAX_ACTION_BYTES = 16 * 1024
_SEPARATORS = frozenset(b" \t\n\r\x0b\x0c,[]\"'*:")
_WORDS = {b"U": "U", b"D": "D", b"L": "L", b"R": "R", b"UP": "U", b"DOWN": "D", b"LEFT": "L", b"RIGHT": "R"}
DELTAS = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


def as_utf8(action: str | bytes | None) -> bytes | None:
    """The answer as UTF-8 bytes, or None when it is not valid text (the step then counts as unparseable)."""
    if action is None:
        return None
    if isinstance(action, bytes):
        try:
            action.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return action
    try:
        return action.encode("utf-8")
    except UnicodeEncodeError:
        return None


def move_region(text: bytes) -> bytes:
    answer = text.rfind(b"####")
    actions = text.rfind(b"Actions List")
    starts = [i + n for i, n in ((answer, 4), (actions, 12)) if i >= 0]
    if not starts:
        return text
    rest = text[max(starts) :]
    newline = rest.find(b"\n")
    return rest if newline < 0 else rest[:newline]


def parse_moves(text: bytes | None, max_moves: int) -> list[str] | None:
    if text is None or len(text) > MAX_ACTION_BYTES:
        return None
    moves: list[str] = []
    token = bytearray()
    for b in move_region(text) + b" ":
        if b in _SEPARATORS:
            if token:
                word = _WORDS.get(bytes(token).upper())
                if word is None or len(moves) >= max_moves:
                    return None
                moves.append(word)
                token.clear()
        else:
            token.append(b)
    return moves or None


def format_moves(moves: list[str]) -> str:
    return "#### [" + ", ".join(moves) + "]"
