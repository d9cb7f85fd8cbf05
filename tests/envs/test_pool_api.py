"""The EnvPool contract: columns, env ids, typed errors for caller bugs, penalties for bad text."""

import numpy as np
import pytest

import atgrpo
from atgrpo import _core
from atgrpo.errors import (
    AtgrpoError,
    DuplicateEnvIdError,
    EnvNotReadyError,
    InternalError,
    InvalidConfigError,
    InvalidEnvIdError,
    LengthMismatchError,
    PoolClosedError,
    SnapshotError,
    UnknownTaskError,
)

TASK_CONFIGS = [("planpath", {}), ("sokoban", {}), ("sudoku", {})]


@pytest.fixture(params=TASK_CONFIGS, ids=[t for t, _ in TASK_CONFIGS])
def pool(request: pytest.FixtureRequest) -> atgrpo.EnvPool:
    task, cfg = request.param
    p = atgrpo.EnvPool(task, 8, max_steps=5, **cfg)
    p.reset(np.arange(8), np.arange(100, 108))
    return p


def test_step_returns_columns_tagged_with_env_ids(pool: atgrpo.EnvPool) -> None:
    ids = np.array([5, 2, 7])
    out = pool.step(ids, ["#### [U]", "nonsense", None])
    assert list(out.env_ids) == [5, 2, 7]
    assert len(out.obs) == 3 and all(isinstance(o, str) for o in out.obs)
    for col in (out.reward, out.reward_team, out.reward_local):
        assert col.dtype == np.float64 and col.shape == (3,)
    for col in (out.done, out.success, out.truncated, out.valid):
        assert col.dtype == np.bool_ and col.shape == (3,)
    np.testing.assert_array_equal(out.reward, pool.config["alpha"] * out.reward_team + out.reward_local)
    assert out.obs == pool.render(ids)


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "   ",
        "\x00\x01\x02",
        "#### [",
        "🙂" * 100,
        "U" * (1 << 20),
        "#### [U]" * 200_000,
        "\ud800 lone surrogate",
        b"\xff\xfe not utf-8",
        None,
        "eval(__import__('os').system('true'))",
    ],
)
def test_garbage_text_is_an_invalid_action_never_an_exception(pool: atgrpo.EnvPool, garbage: object) -> None:
    before = pool.render([0])
    out = pool.step([0], [garbage])  # type: ignore[list-item]
    assert not out.valid[0] and not out.success[0]
    assert out.reward_local[0] == pool.config["parse_penalty"]
    assert pool.render([0]) == before, "an unparseable answer must not change the state"


def test_non_text_actions_are_a_type_error(pool: atgrpo.EnvPool) -> None:
    with pytest.raises(TypeError, match=r"actions\[1\]"):
        pool.step([0, 1], ["#### [U]", 42])  # type: ignore[list-item]


@pytest.mark.parametrize("ids", [[8], [-1], [3, 99]])
def test_out_of_range_ids_raise_and_change_nothing(pool: atgrpo.EnvPool, ids: list[int]) -> None:
    before = pool.render(np.arange(8))
    with pytest.raises(InvalidEnvIdError, match="out of range"):
        pool.step([0, 1, *ids], ["#### [U]"] * (2 + len(ids)))
    assert pool.render(np.arange(8)) == before
    assert list(pool.status(np.arange(8)).steps) == [0] * 8


def test_duplicate_ids_and_length_mismatch(pool: atgrpo.EnvPool) -> None:
    with pytest.raises(DuplicateEnvIdError):
        pool.step([1, 1], ["#### [U]", "#### [D]"])
    with pytest.raises(LengthMismatchError, match="actions has 1 entries, expected 2"):
        pool.step([0, 1], ["#### [U]"])
    with pytest.raises(LengthMismatchError, match="seeds"):
        pool.reset([0, 1], [1])
    with pytest.raises(TypeError):
        pool.step(np.array([0.5]), ["x"])


def test_step_before_reset_and_after_done(pool: atgrpo.EnvPool) -> None:
    fresh = atgrpo.EnvPool(pool.task, 2)
    with pytest.raises(EnvNotReadyError, match="never reset"):
        fresh.step([0], ["#### [U]"])
    for _ in range(5):
        out = pool.step([3], ["garbage"])
    assert out.done[0] and out.truncated[0] and not out.success[0], "the turn limit is a failure"
    with pytest.raises(EnvNotReadyError, match="episode is over"):
        pool.step([3], ["#### [U]"])
    pool.reset([3], [7])
    pool.step([3], ["#### [U]"])


def test_closed_pool_raises(pool: atgrpo.EnvPool) -> None:
    pool.close()
    for call in (
        lambda: pool.step([0], ["x"]),
        lambda: pool.reset([0], [0]),
        lambda: pool.render([0]),
        lambda: pool.fork(0, [1]),
        lambda: pool.snapshot([0]),
    ):
        with pytest.raises(PoolClosedError):
            call()


def test_solver_plans_solve_every_env(pool: atgrpo.EnvPool) -> None:
    ids = np.arange(8)
    sol = pool.solve(ids)
    assert all(p is not None for p in sol.plans)
    assert (sol.optimal_len > 0).all()
    out = pool.step(ids, sol.plans)
    assert out.success.all() and out.done.all() and out.valid.all() and not out.truncated.any()
    np.testing.assert_array_equal(out.reward_team, pool.config["success_bonus"])


def test_fork_copies_state_and_branches_are_independent(pool: atgrpo.EnvPool) -> None:
    pool.step([0], ["#### [R, D]"])
    pool.fork(0, [4, 5, 6])
    assert pool.render([4, 5, 6]) == pool.render([0]) * 3
    assert list(pool.status([4, 5, 6]).steps) == [1, 1, 1]
    plan = pool.solve([4]).plans[0]
    assert pool.step([4], [plan]).success[0]
    assert not pool.status([0, 5, 6]).done.any(), "stepping one branch must not touch the others"


def test_snapshot_restore_round_trip_and_rejects_bad_bytes(pool: atgrpo.EnvPool) -> None:
    pool.step([1], ["#### [L]"])
    blobs = pool.snapshot([1, 2])
    other = atgrpo.EnvPool(pool.task, 3, max_steps=5)
    other.restore([0, 2], blobs)
    assert other.render([0, 2]) == pool.render([1, 2])
    assert list(other.status([0]).steps) == list(pool.status([1]).steps)
    assert other.solve([0]).plans == pool.solve([1]).plans
    rng = np.random.default_rng(0)
    bad = [
        b"",
        b"AT",
        blobs[0][:-1],
        blobs[0] + b"\x00",
        b"XX" + blobs[0][2:],
        bytes(rng.integers(0, 256, 64, dtype=np.uint8)),
    ]
    flipped = bytearray(blobs[0])
    flipped[3] ^= 0xFF  # task tag
    bad.append(bytes(flipped))
    for blob in bad:
        with pytest.raises(SnapshotError):
            other.restore([1], [blob])
    with pytest.raises(SnapshotError):
        atgrpo.EnvPool(pool.task, 1, **_other_size(pool.task)).restore([0], blobs[:1])


def _other_size(task: str) -> dict[str, int]:
    return {"planpath": {"width": 7}, "sokoban": {"width": 7}, "sudoku": {"size": 9}}[task]


def test_snapshot_fuzz_never_panics() -> None:
    rng = np.random.default_rng(1)
    for task, _ in TASK_CONFIGS:
        p = atgrpo.EnvPool(task, 1)
        p.reset([0], [3])
        blob = bytearray(p.snapshot([0])[0])
        for _ in range(300):
            mutated = bytearray(blob)
            for _ in range(rng.integers(1, 4)):
                mutated[rng.integers(0, len(mutated))] = rng.integers(0, 256)
            try:
                p.restore([0], [bytes(mutated)])
            except SnapshotError:
                pass
            p.render([0])


def test_config_errors_are_typed() -> None:
    with pytest.raises(UnknownTaskError, match="known tasks"):
        atgrpo.EnvPool("chess", 1)
    with pytest.raises(InvalidConfigError, match="unknown field"):
        atgrpo.EnvPool("sokoban", 1, colour="red")
    with pytest.raises(InvalidConfigError, match="width"):
        atgrpo.EnvPool("sokoban", 1, width=40)
    with pytest.raises(InvalidConfigError, match="obstacle_ratio"):
        atgrpo.EnvPool("planpath", 1, obstacle_ratio=2.0)
    with pytest.raises(InvalidConfigError, match="max_steps"):
        atgrpo.EnvPool("planpath", 1, max_steps="many")
    with pytest.raises(InvalidConfigError, match="num_envs"):
        atgrpo.EnvPool("planpath", 0)
    with pytest.raises(ValueError, match="split"):
        atgrpo.EnvPool("planpath", 1).reset([0], [0], split="test")


def test_a_rust_panic_becomes_internal_error() -> None:
    with pytest.raises(InternalError, match="test panic"):
        _core._panic_for_test()
    assert issubclass(InternalError, AtgrpoError)
    atgrpo.EnvPool("planpath", 1).reset([0], [0])  # the interpreter and the module still work


def test_alpha_weights_the_team_part() -> None:
    for alpha in (0.0, 0.5, 2.0):
        p = atgrpo.EnvPool("planpath", 1, alpha=alpha, success_bonus=3.0)
        p.reset([0], [11])
        out = p.step([0], p.solve([0]).plans)
        assert out.reward_team[0] == 3.0
        assert out.reward[0] == alpha * 3.0 + out.reward_local[0]
