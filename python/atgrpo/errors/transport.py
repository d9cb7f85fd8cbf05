"""Transport errors, one class per reason code (raised by `atgrpo.transport`).

Invariants:
- Every error raised on purpose by `atgrpo.transport` is a `TransportError`, which derives from
  `atgrpo.errors.AtgrpoError`, so `except AtgrpoError` catches transport failures too.
- Each class carries a fixed `reason` code (a short snake_case string). The hub uses it for its
  counters (`transport/rejected_<reason>`) and in the `Refused` reply it sends
  (`"<reason>: <detail>"`), so the code is part of the observable behaviour; keep codes stable.
- The reason is a class attribute, never per-instance state, so the exceptions pickle and compare
  like any other exception (the constructor takes only the message).

A leaf module (only the extension's base class), so that `atgrpo.errors` loads no zmq.
"""

from __future__ import annotations

from atgrpo._core import AtgrpoError


class TransportError(AtgrpoError):
    """Base class of every transport failure. `reason` is the machine-readable code."""

    reason: str = "transport"


# ---- one message (codec) ----


class MalformedMessage(TransportError):
    """The bytes are not msgpack, are truncated, or the message has the wrong number of frames."""

    reason = "malformed"


class InvalidMessage(MalformedMessage):
    """Valid msgpack of a known kind whose fields do not match the schema (missing, wrong type)."""

    reason = "invalid"


class OversizedMessage(TransportError):
    """The message is larger than the endpoint's `max_message_bytes`; it was not decoded."""

    reason = "oversized"


class UnknownKind(TransportError):
    """Valid msgpack map whose `type` tag names no message of `atgrpo.messages`."""

    reason = "unknown_kind"


class ProtocolMismatch(TransportError):
    """A `Hello` announcing a protocol version other than `atgrpo.messages.PROTOCOL_VERSION`."""

    reason = "protocol"


# ---- weights (header + raw frames) ----


class WeightsError(TransportError):
    """A weights message that cannot be turned into tensors."""

    reason = "weights"


class WeightsHeaderError(WeightsError):
    """A chunk's first frame is not a `WeightsHeader`, or it is inconsistent (duplicate names, frame
    order, a chunk missing, repeated or out of order, or disagreeing with chunk 0 on the total)."""

    reason = "weights_header"


class FrameCountMismatch(WeightsError):
    """The number of raw frames differs from the number of tensors the header lists, or a reply
    held in memory has fewer or more chunk messages than its headers say."""

    reason = "frame_count"


class UnsupportedDtype(WeightsError):
    """A tensor dtype outside the allow-list of `atgrpo.transport.tensors.DTYPES`."""

    reason = "dtype"


class ShapeMismatch(WeightsError):
    """A frame's byte size does not equal prod(shape) * itemsize (or the shape is negative)."""

    reason = "shape"


class ChecksumMismatch(WeightsError):
    """A frame's crc32 differs from the one in its header: the bytes were corrupted on the way."""

    reason = "checksum"


class ForeignWeights(WeightsError):
    """A weight-store version whose marker names another run's nonce (`messages.WeightsMarker.run_nonce`):
    its files may pass every check and still be another run's weights, so it is never read."""

    reason = "foreign_weights"


# ---- endpoints ----


class TransportTimeout(TransportError):
    """No reply within the timeout. The message names what was awaited and from where."""

    reason = "timeout"


class UnexpectedReply(TransportError):
    """A well-formed reply of the wrong kind (e.g. `Refused` to a `WeightsRequest`)."""

    reason = "unexpected_reply"


class TransportClosed(TransportError):
    """The endpoint was used after `close()`."""

    reason = "closed"


class AddressError(TransportError):
    """An endpoint address that cannot be used (e.g. an ipc path longer than the OS allows)."""

    reason = "address"


class CurveKeyError(TransportError):
    """A CURVE key file that is missing or unreadable (see `atgrpo.transport.keys`)."""

    reason = "keys"


class InsecureEndpointError(TransportError):
    """A tcp endpoint reachable from other hosts without CURVE keys (and without `transport.insecure`)."""

    reason = "insecure"


__all__ = [
    "AddressError",
    "ChecksumMismatch",
    "CurveKeyError",
    "ForeignWeights",
    "FrameCountMismatch",
    "InsecureEndpointError",
    "InvalidMessage",
    "MalformedMessage",
    "OversizedMessage",
    "ProtocolMismatch",
    "ShapeMismatch",
    "TransportClosed",
    "TransportError",
    "TransportTimeout",
    "UnexpectedReply",
    "UnknownKind",
    "UnsupportedDtype",
    "WeightsError",
    "WeightsHeaderError",
]
