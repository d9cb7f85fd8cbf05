"""Simulated actors for `atgrpo-bench scale`: many per process, each a thread speaking the real
protocol through the real `ActorClient` (CURVE included) and, when the hub writes one, reading the
weights from the real `StoreReader`.

An actor here does what `actor.Actor` does minus the model: Hello, then ask for work; for a unit,
fetch every policy version it names that it does not hold (the whole reply, every chunk checked),
wait `delay_s` (the rollout), stream one batch of well-formed samples per turn and a `last` batch
with the env results; obey `NoWork.retry_after_s`; stop at `Shutdown`. Every sample it sends is one
the hub must accept (right version, whole groups, ids in the vocabulary), so any refusal the bench
counts is the hub's fault, not the simulation's.

Run as `python -m atgrpo.bench.scale.sim SPEC_JSON`: one worker process; prints one JSON line,
a list with one record per actor, when every actor has been told to shut down.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

from atgrpo.messages import (
    PROTOCOL_VERSION,
    EnvResult,
    GroupKey,
    Hello,
    NoWork,
    Refused,
    Sample,
    SampleAck,
    SampleBatch,
    Shutdown,
    UnitTimings,
    Welcome,
    WorkRequest,
    WorkUnit,
)
from atgrpo.transport.endpoints import ActorClient
from atgrpo.transport.errors import UnexpectedReply
from atgrpo.transport.weight_store import StoreReader

ROLES = ("planner", "executor")
"""The simulated team: two agents of one policy, as the demo's."""
POLICY = "team"
K = 4
TURNS = 2
VOCAB = 50_000
PROMPT_TOKENS = 320
RESPONSE_TOKENS = 96


@dataclass
class SimSpec:
    """What one worker process runs (written by `scale.py`, read here)."""

    address: str
    curve_keys: str | None
    actor_ids: list[str]
    run_id: str
    delay_s: float
    store_root: str | None
    timeout_s: float = 60.0


@dataclass
class ActorRecord:
    actor_id: str
    run_id: str
    lease_s: list[float] = field(default_factory=list)
    """Round trip of each WorkRequest answered with a unit."""
    holds: dict[str, float] = field(default_factory=dict)
    starts: dict[str, float] = field(default_factory=dict)
    """version -> monotonic time the actor began fetching it (it had just leased a unit naming it)."""
    """version -> monotonic time the actor held it (checked whole)."""
    units: int = 0
    samples_sent: int = 0
    samples_rejected: int = 0
    refused: list[str] = field(default_factory=list)
    store: dict[str, int] = field(default_factory=dict)
    error: str = ""


def _samples(run_id: str, unit: WorkUnit, version: int, turn: int) -> list[Sample]:
    """One turn of every env of `unit`: K branches per agent, each a whole tree group, of realistic
    length (a prompt that grows with the turn, `RESPONSE_TOKENS` sampled tokens and their logprobs)."""
    prompt = [(7 * i) % VOCAB for i in range(PROMPT_TOKENS + 8 * turn)]
    response = [(13 * i + 1) % VOCAB for i in range(RESPONSE_TOKENS)]
    logprobs = [-0.5] * RESPONSE_TOKENS
    return [
        Sample(
            run_id,
            POLICY,
            version,
            unit.step,
            role,
            GroupKey(unit.env_offset + e, agent, turn),
            prompt,
            response,
            logprobs,
            0.5,
            0.5,
            0.0,
            False,
            False,
            branch,
        )
        for e in range(len(unit.seeds))
        for agent, role in enumerate(ROLES)
        for branch in range(K)
    ]


def _actor(spec: SimSpec, record: ActorRecord) -> None:
    client = ActorClient(
        spec.address,
        record.actor_id,
        timeout_s=spec.timeout_s,
        curve_keys=spec.curve_keys,
    )
    reader = StoreReader(spec.store_root, spec.run_id, wait_s=0.0) if spec.store_root else None
    held: dict[str, int] = {}
    try:
        welcome = client.request(Hello(PROTOCOL_VERSION, record.actor_id, spec.run_id, [POLICY]))
        if not isinstance(welcome, Welcome):
            raise UnexpectedReply(f"hello answered with {welcome!r}")
        while True:
            t0 = time.monotonic()
            reply = client.request(WorkRequest(record.actor_id))
            if isinstance(reply, Shutdown):
                break
            if isinstance(reply, NoWork):
                time.sleep(reply.retry_after_s)
                continue
            if not isinstance(reply, WorkUnit):
                raise UnexpectedReply(f"work request answered with {reply!r}")
            record.lease_s.append(time.monotonic() - t0)
            for policy, version in reply.versions.items():
                if held.get(policy) != version:
                    record.starts[str(version)] = time.monotonic()
                    if reader is not None:
                        reader.fetch(client, policy, version)  # tensors dropped at once: only the check counts
                    else:
                        client.request_weights(policy, version)
                    held[policy] = version
                    record.holds[str(version)] = time.monotonic()
            time.sleep(spec.delay_s)
            if not _send_unit(client, record, reply):
                continue
            record.units += 1
    except Exception as exc:  # noqa: BLE001  (recorded: the bench reports it; one actor never ends the run)
        record.error = f"{type(exc).__name__}: {exc}"
    finally:
        if reader is not None:
            record.store = dict(reader.counters)
        client.close()


def _send_unit(client: ActorClient, record: ActorRecord, unit: WorkUnit) -> bool:
    version = unit.versions[POLICY]
    for turn in range(TURNS):
        batch = _samples(record.run_id, unit, version, turn)
        if not _ack(
            client,
            record,
            SampleBatch(record.actor_id, unit.unit_id, batch, False),
            len(batch),
        ):
            return False
    envs = [EnvResult(unit.env_offset + e, True, TURNS, 1.0) for e in range(len(unit.seeds))]
    return _ack(
        client,
        record,
        SampleBatch(record.actor_id, unit.unit_id, [], True, envs, UnitTimings()),
        0,
    )


def _ack(client: ActorClient, record: ActorRecord, batch: SampleBatch, n: int) -> bool:
    reply = client.request(batch)
    record.samples_sent += n
    if isinstance(reply, Refused):
        record.refused.append(reply.reason[:200])
        return False
    if not isinstance(reply, SampleAck):
        raise UnexpectedReply(f"samples answered with {reply!r}")
    record.samples_rejected += reply.rejected
    return True


def run_worker(spec: SimSpec) -> list[ActorRecord]:
    records = [ActorRecord(a, spec.run_id) for a in spec.actor_ids]
    threads = [threading.Thread(target=_actor, args=(spec, r), daemon=True) for r in records]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.ERROR)  # a reader that finds no marker (hub-path versions) says so at WARNING
    threading.stack_size(512 * 1024)  # hundreds of threads: their stacks need not be 8 MiB
    got = run_worker(SimSpec(**json.loads(sys.argv[1])))
    print(json.dumps([asdict(r) for r in got]))
