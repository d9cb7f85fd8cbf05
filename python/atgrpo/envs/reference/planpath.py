"""Plan-Path in pure Python: the same rules, generator and RNG stream as `rust/envs/src/planpath.rs`."""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass

from atgrpo.envs.reference.common import Common, Outcome
from atgrpo.envs.reference.parse import DELTAS, format_moves, parse_moves
from atgrpo.envs.reference.rng import SplitMix64, split_of_level

MAX_ATTEMPTS = 10_000
ORDER = "UDLR"


@dataclass
class PlanPathRefConfig:
    width: int = 10
    height: int = 10
    obstacle_ratio: float = 0.2
    min_distance: int = 4
    stop_at_goal: bool = True
    optimal_bonus: float = 0.0


class PlanPathRef:
    def __init__(self, w: int, h: int, blocked: list[bool], start: int, goal: int) -> None:
        self.w, self.h, self.blocked, self.start, self.goal = w, h, blocked, start, goal
        self.dist = self._distances()
        self.pos = start
        self.stop_at_goal = True
        self.optimal_bonus = 0.0

    def _neighbour(self, cell: int, move: str) -> int | None:
        dr, dc = DELTAS[move]
        r, c = cell // self.w + dr, cell % self.w + dc
        if not (0 <= r < self.h and 0 <= c < self.w):
            return None
        nxt = r * self.w + c
        return None if self.blocked[nxt] else nxt

    def _distances(self) -> list[int | None]:
        dist: list[int | None] = [None] * (self.w * self.h)
        dist[self.goal] = 0
        queue = deque([self.goal])
        while queue:
            cell = queue.popleft()
            for move in ORDER:
                nxt = self._neighbour(cell, move)
                if nxt is not None and dist[nxt] is None:
                    dist[nxt] = dist[cell] + 1  # type: ignore[operator]
                    queue.append(nxt)
        return dist

    def canonical_bytes(self) -> bytes:
        return bytes([self.w, self.h, *map(int, self.blocked)]) + struct.pack("<HH", self.start, self.goal)

    @classmethod
    def generate(cls, config: dict[str, object] | PlanPathRefConfig, seed: int, split: str) -> "PlanPathRef":
        cfg = config if isinstance(config, PlanPathRefConfig) else PlanPathRefConfig(**config)  # type: ignore[arg-type]
        w, h = cfg.width, cfg.height
        n = w * h
        n_obstacles = int(cfg.obstacle_ratio * n)
        rng = SplitMix64.for_level(seed, split)
        for _ in range(MAX_ATTEMPTS):
            cells = list(range(n))
            rng.partial_shuffle(cells, 0, n_obstacles + 2)
            blocked = [False] * n
            for c in cells[:n_obstacles]:
                blocked[c] = True
            level = cls(w, h, blocked, cells[n_obstacles], cells[n_obstacles + 1])
            d = level.dist[level.start]
            if d is None or d < cfg.min_distance:
                continue
            if split_of_level(level.canonical_bytes()) != split:
                continue
            level.stop_at_goal = cfg.stop_at_goal
            level.optimal_bonus = cfg.optimal_bonus
            return level
        raise RuntimeError("generation failed")

    def step(self, common: Common, action: bytes | None) -> Outcome:
        moves = parse_moves(action, common.max_moves)
        if moves is None:
            return Outcome(local=common.parse_penalty)
        before = self.dist[self.pos]
        invalid = ran = 0
        for move in moves:
            ran += 1
            nxt = self._neighbour(self.pos, move)
            if nxt is None:
                invalid += 1
            else:
                self.pos = nxt
            if self.stop_at_goal and self.pos == self.goal:
                break
        after = self.dist[self.pos]
        progress = (float(before) - float(after)) / float(self.dist[self.start])  # type: ignore[arg-type]
        solved = self.pos == self.goal
        bonus = self.optimal_bonus if solved and ran == before else 0.0
        return Outcome(
            local=progress + float(invalid) * common.invalid_move_penalty + bonus,
            solved=solved,
            valid=invalid == 0,
        )

    def render(self) -> str:
        rows = []
        for r in range(self.h):
            row = []
            for c in range(self.w):
                cell = r * self.w + c
                if cell == self.pos:
                    row.append("A")
                elif cell == self.goal:
                    row.append("G")
                else:
                    row.append("#" if self.blocked[cell] else ".")
            rows.append("".join(row))
        return "\n".join(rows)

    def optimal_len(self) -> int:
        return int(self.dist[self.start])  # type: ignore[arg-type]

    def solve(self) -> str | None:
        cell, moves = self.pos, []
        while cell != self.goal:
            d = self.dist[cell]
            for move in ORDER:
                nxt = self._neighbour(cell, move)
                if nxt is not None and self.dist[nxt] is not None and self.dist[nxt] + 1 == d:  # type: ignore[operator]
                    moves.append(move)
                    cell = nxt
                    break
            else:
                return None
        return format_moves(moves)
