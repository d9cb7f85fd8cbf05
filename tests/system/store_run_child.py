"""One run of test_weight_store_runs' two-process test: write versions 1..6 under a fresh nonce,
read each back through a reader of this session, and fail if any weights are not this run's."""

from __future__ import annotations

import sys

import torch

from atgrpo.transport.tensors import weights_to_messages
from atgrpo.transport.weight_store import StoreReader, WeightStore, new_run_nonce


class NoHub:
    """The reader's fallback: here, reaching it means the store did not serve this run's version."""

    def request_weights(self, policy: str, version: int):
        raise AssertionError(f"{policy} v{version} was not read from this run's store")

    request_chunk = request_weights


def main() -> None:
    root, run_id, run = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = WeightStore(root, run_id, keep_versions=2, run_nonce=new_run_nonce())
    reader = StoreReader(root, run_id, run_nonce=store.run_nonce, wait_s=5.0)
    for v in range(1, 7):
        want = {"t": torch.full((1 << 18,), float(1000 * run + v))}
        store.write("shared", v, weights_to_messages("shared", v, want))
        _, got = reader.fetch(NoHub(), "shared", v)
        assert torch.equal(got["t"], want["t"]), f"run {run} v{v}: another run's weights"
    assert reader.counters["store/foreign_versions"] == 0


if __name__ == "__main__":
    main()
