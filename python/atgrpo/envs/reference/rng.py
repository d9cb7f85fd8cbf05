"""SplitMix64 and the level split hash, bit-for-bit the same as `rust/envs/src/rng.rs`."""

from __future__ import annotations

from typing import MutableSequence, TypeVar

MASK = (1 << 64) - 1
EVAL_SALT = 0xD1B54A32D192ED03
T = TypeVar("T")


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


class SplitMix64:
    def __init__(self, seed: int) -> None:
        self.state = seed & MASK

    @classmethod
    def for_level(cls, seed: int, split: str) -> "SplitMix64":
        return cls(seed if split == "train" else seed ^ EVAL_SALT)

    def next_u64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        return _mix(self.state)

    def below(self, n: int) -> int:
        return self.next_u64() % n

    def partial_shuffle(self, items: MutableSequence[T], start: int, k: int) -> None:
        for i in range(start, start + k):
            j = i + self.below(len(items) - i)
            items[i], items[j] = items[j], items[i]

    def shuffle(self, items: MutableSequence[T]) -> None:
        for i in range(len(items) - 1, 0, -1):
            j = self.below(i + 1)
            items[i], items[j] = items[j], items[i]


def level_hash(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x00000100000001B3) & MASK
    return _mix(h)


def split_of_level(data: bytes) -> str:
    return "train" if level_hash(data) & 1 == 0 else "eval"
