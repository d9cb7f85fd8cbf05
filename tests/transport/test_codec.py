"""`atgrpo.transport.codec`: every message round-trips; every kind of bad input is a typed error."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atgrpo.errors import AtgrpoError
from atgrpo.messages import (
    PROTOCOL_VERSION,
    EnvResult,
    GroupKey,
    Hello,
    Message,
    NoWork,
    ProgressAck,
    Refused,
    Sample,
    SampleAck,
    SampleBatch,
    Shutdown,
    TensorMeta,
    UnitProgress,
    UnitTimings,
    WeightsHeader,
    WeightsRequest,
    Welcome,
    WorkRequest,
    WorkUnit,
)
from atgrpo.transport.codec import KINDS, decode, encode, kind_of
from atgrpo.transport.errors import (
    InvalidMessage,
    MalformedMessage,
    OversizedMessage,
    ProtocolMismatch,
    TransportError,
    UnknownKind,
)

LIMIT = 1 << 20


def sample(i: int = 0) -> Sample:
    return Sample(
        run_id="run",
        policy="shared",
        version=3,
        step=7,
        role="planner",
        key=GroupKey(i, 1, 2),
        prompt_ids=list(range(20)),
        response_ids=[5, 6, 7],
        logprobs=[-0.5, -1.25, -3.0],
        reward=1.5,
        reward_team=1.0,
        reward_local=0.5,
        success=True,
        truncated_response=False,
        branch=2,
    )


EVERY_MESSAGE: list[Message] = [
    Hello(protocol=PROTOCOL_VERSION, actor_id="actor-0", run_id="run", policies=["a", "b"]),
    Welcome(run_id="run", versions={"a": 0, "b": 4}),
    Refused(reason="protocol: nope"),
    WorkRequest(actor_id="actor-0"),
    WorkUnit(unit_id=9, step=2, seeds=[1, 2, 3], env_offset=48, split="train", versions={"a": 1}, greedy=True),
    NoWork(retry_after_s=0.5, reason="step complete"),
    Shutdown(reason="done"),
    SampleBatch(
        actor_id="actor-0",
        unit_id=9,
        samples=[sample(0), sample(1)],
        last=True,
        env_results=[EnvResult(env=48, success=True, turns=3, episode_return=2.5)],
        timings=UnitTimings(generate_s=1.5, sync_s=0.25),
    ),
    SampleAck(unit_id=9, accepted=2, rejected=0),
    UnitProgress(actor_id="actor-0", unit_id=9),
    ProgressAck(unit_id=9),
    WeightsRequest(actor_id="actor-0", policy="a", version=-1),
    WeightsHeader(policy="a", version=4, tensors=[TensorMeta("w", "bfloat16", [2, 3], 1, 12345)], chunk=1, chunks=3),
]


def test_the_list_covers_every_message_kind() -> None:
    assert sorted(kind_of(m) for m in EVERY_MESSAGE) == sorted(KINDS)


@pytest.mark.parametrize("msg", EVERY_MESSAGE, ids=kind_of)
def test_every_message_round_trips(msg: Message) -> None:
    data = encode(msg)
    assert isinstance(data, bytes)
    back = decode(data, max_bytes=LIMIT)
    assert type(back) is type(msg) and back == msg
    assert decode(memoryview(data), max_bytes=len(data)) == msg  # buffers work, the limit is inclusive


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", MalformedMessage),
        (b"\xc1\xc1\xc1 garbage", MalformedMessage),
        (encode(WorkRequest(actor_id="a"))[:-3], MalformedMessage),  # truncated msgpack
        (msgspec.msgpack.encode({"type": "teleport", "where": "mars"}), UnknownKind),
        (msgspec.msgpack.encode({"type": "work_request"}), InvalidMessage),  # field missing
        (msgspec.msgpack.encode({"type": "work_unit", "unit_id": "x"}), InvalidMessage),
        (msgspec.msgpack.encode([1, 2, 3]), InvalidMessage),
        (msgspec.msgpack.encode({"no": "tag"}), InvalidMessage),
        (msgspec.msgpack.encode(7), InvalidMessage),
    ],
    ids=["empty", "garbage", "truncated", "unknown_kind", "missing_field", "wrong_type", "array", "no_tag", "int"],
)
def test_decode_rejects_bad_bytes_with_a_typed_error(data: bytes, error: type[TransportError]) -> None:
    with pytest.raises(error) as info:
        decode(data, max_bytes=LIMIT)
    assert info.type is error
    assert isinstance(info.value, AtgrpoError)
    assert info.value.reason == error.reason


def test_reason_codes() -> None:
    assert MalformedMessage.reason == "malformed" and InvalidMessage.reason == "invalid"
    assert OversizedMessage.reason == "oversized" and UnknownKind.reason == "unknown_kind"
    assert ProtocolMismatch.reason == "protocol"
    assert issubclass(InvalidMessage, MalformedMessage) and issubclass(TransportError, AtgrpoError)


def test_oversized_is_refused_before_parsing() -> None:
    data = encode(WorkRequest(actor_id="x" * 100))
    with pytest.raises(OversizedMessage, match=f"{len(data)} bytes exceeds the limit of 50"):
        decode(data, max_bytes=50)
    with pytest.raises(OversizedMessage):
        decode(b"\xc1" * 100, max_bytes=50)  # garbage too: size first


def test_hello_with_another_protocol_is_refused() -> None:
    data = encode(Hello(protocol=PROTOCOL_VERSION + 1, actor_id="old", run_id="r", policies=[]))
    with pytest.raises(ProtocolMismatch, match=f"speaks protocol {PROTOCOL_VERSION + 1}"):
        decode(data, max_bytes=LIMIT)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_decode_of_random_bytes_is_a_message_or_a_transport_error(data: bytes) -> None:
    try:
        decode(data, max_bytes=100)
    except TransportError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(EVERY_MESSAGE), st.data())
def test_truncations_and_bit_flips_never_escape_as_other_errors(msg: Message, data: st.DataObject) -> None:
    raw = bytearray(encode(msg))
    cut = data.draw(st.integers(0, len(raw)))
    flip = data.draw(st.integers(0, len(raw) - 1))
    raw[flip] ^= data.draw(st.integers(1, 255))
    for candidate in (bytes(raw[:cut]), bytes(raw)):
        try:
            decode(candidate, max_bytes=LIMIT)
        except TransportError:
            pass
