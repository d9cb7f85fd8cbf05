"""Encode and decode one wire message (`atgrpo.messages.Message`) as msgpack via msgspec.

Invariants:
- `decode` returns a fully validated `Message` or raises a `TransportError` subclass; it never
  returns partial data and never raises anything else (msgspec's errors, and the odd
  `UnicodeDecodeError` for invalid UTF-8, are translated; fuzzed in the tests).
- The size limit is checked before any parsing, so an oversized message costs nothing to refuse.
- A `Hello` whose `protocol` differs from `PROTOCOL_VERSION` is refused here (`ProtocolMismatch`),
  so every layer above sees only peers that speak our protocol.
- The tag field is msgspec's default, `type` (a map key in every message); an unknown tag is
  `UnknownKind`, a known tag with bad fields is `InvalidMessage`, bytes that are not msgpack are
  `MalformedMessage`.
- No pickle: msgpack of plain structs only. Tensors never go through here (see `tensors.py`).
"""

from __future__ import annotations

import typing

import msgspec

from atgrpo.messages import PROTOCOL_VERSION, Hello, Message
from atgrpo.transport.errors import (
    InvalidMessage,
    MalformedMessage,
    OversizedMessage,
    ProtocolMismatch,
    UnknownKind,
)

DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""The largest message frame either endpoint decodes unless told otherwise (`max_message_bytes`)."""

BytesLike = bytes | bytearray | memoryview
"""Anything with the buffer protocol (a `zmq.Frame` works too, as `frame.buffer`)."""

TAG_FIELD = "type"
KINDS: dict[str, type] = {cls.__struct_config__.tag: cls for cls in typing.get_args(Message)}
"""Tag -> message class, for every member of the `Message` union."""

_TAGS: dict[type, str] = {cls: tag for tag, cls in KINDS.items()}
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)
_any_decoder = msgspec.msgpack.Decoder()


def kind_of(msg: Message) -> str:
    """The wire tag of a message, e.g. `"work_request"` (used in logs and timeout messages)."""
    return _TAGS[type(msg)]


def encode(msg: Message) -> bytes:
    """msgpack bytes of one message (a map with its `type` tag)."""
    return _encoder.encode(msg)


def decode(data: BytesLike, *, max_bytes: int) -> Message:
    """Validate and decode one message of at most `max_bytes` bytes.

    Raises `OversizedMessage`, `MalformedMessage`, `InvalidMessage`, `UnknownKind` or
    `ProtocolMismatch`; the error text says what was wrong, never echoes more than a short prefix.
    """
    size = memoryview(data).nbytes
    if size > max_bytes:
        raise OversizedMessage(f"message of {size} bytes exceeds the limit of {max_bytes} bytes")
    try:
        msg: Message = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise _classify(data, exc) from None
    except Exception as exc:  # DecodeError, but also e.g. UnicodeDecodeError for a bad str
        raise MalformedMessage(f"not a msgpack message ({size} bytes): {exc}") from None
    if isinstance(msg, Hello) and msg.protocol != PROTOCOL_VERSION:
        raise ProtocolMismatch(
            f"peer {msg.actor_id[:64]!r} speaks protocol {msg.protocol}, this side speaks {PROTOCOL_VERSION}"
        )
    return msg


def _classify(data: BytesLike, exc: msgspec.ValidationError) -> Exception:
    """Unknown tag or bad fields? Only runs on the failure path, so a second parse is fine."""
    try:
        raw = _any_decoder.decode(data)
    except Exception:  # e.g. invalid UTF-8 in a str the typed decoder never reached
        return MalformedMessage(f"not a msgpack message: {exc}")
    if isinstance(raw, dict):
        tag = raw.get(TAG_FIELD)
        if isinstance(tag, str) and tag not in KINDS:
            return UnknownKind(f"unknown message kind {tag[:64]!r}")
    return InvalidMessage(f"invalid message: {exc}")


__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "KINDS", "TAG_FIELD", "decode", "encode", "kind_of"]
