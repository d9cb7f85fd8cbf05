"""Sokoban in pure Python: the same rules, generator, solver and RNG stream as `rust/envs/src/sokoban/`.

Slow on purpose (lists, sets, dicts): it is the readable specification and the benchmark reference.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from atgrpo.envs.reference.common import Common, Outcome
from atgrpo.envs.reference.parse import format_moves, parse_moves
from atgrpo.envs.reference.rng import SplitMix64, split_of_level

MAX_ATTEMPTS = 10_000
ORDER = "UDLR"


@dataclass
class SokobanRefConfig:
    width: int = 6
    height: int = 6
    boxes: int = 1
    wall_ratio: float = 0.15
    reverse_steps: int = 40
    min_pushes: int = 2
    max_pushes: int = 40
    max_solver_states: int = 200_000


class Room:
    """Static level: walls, targets and dead squares on a w x h grid with a wall border."""

    def __init__(self, w: int, h: int, walls: set[int], targets: set[int]) -> None:
        self.w, self.h, self.walls, self.targets = w, h, walls, targets
        self.offsets = {"U": -w, "D": w, "L": -1, "R": 1}
        self.dead: set[int] = set()

    def compute_dead(self) -> None:
        live = set(self.targets)
        stack = sorted(self.targets)
        while stack:
            cell = stack.pop()
            for move in ORDER:
                frm = cell + self.offsets[move]
                player = frm + self.offsets[move]
                if frm not in self.walls and player not in self.walls and frm not in live:
                    live.add(frm)
                    stack.append(frm)
        self.dead = {c for c in range(self.w * self.h) if c not in self.walls and c not in live}

    def reachable(self, boxes: frozenset[int] | set[int], player: int) -> set[int]:
        seen = {player}
        stack = [player]
        while stack:
            cell = stack.pop()
            for move in ORDER:
                nxt = cell + self.offsets[move]
                if nxt not in self.walls and nxt not in boxes and nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    def canonical_bytes(self, boxes: set[int] | frozenset[int], player: int) -> bytes:
        codes = [1 if c in self.walls else 2 if c in self.targets else 0 for c in range(self.w * self.h)]
        return bytes([self.w, self.h, *codes, *sorted(boxes), player])

    def solve_pushes(self, boxes: frozenset[int], player: int, max_states: int) -> list[tuple[int, str]] | None:
        """Same node order and budget as the Rust solver (see `solver.rs`)."""
        if boxes <= self.targets:
            return []
        # node: (boxes, player, parent index, push)
        nodes: list[tuple[frozenset[int], int, int, tuple[int, str] | None]] = [(boxes, player, -1, None)]
        expanded: set[tuple[frozenset[int], int]] = set()
        i = 0
        while i < len(nodes):
            bx, pl, _, _ = nodes[i]
            reach = self.reachable(bx, pl)
            key = (bx, min(reach))
            if key in expanded:
                i += 1
                continue
            expanded.add(key)
            for b in sorted(bx):
                for move in ORDER:
                    off = self.offsets[move]
                    dst, stand = b + off, b - off
                    if stand not in reach or dst in self.walls or dst in bx or dst in self.dead:
                        continue
                    child = (bx - {b}) | {dst}
                    nodes.append((child, b, i, (b, move)))
                    if child <= self.targets:
                        return self._trace(nodes, len(nodes) - 1)
                    if len(nodes) > max_states:
                        return None
            i += 1
        return None

    @staticmethod
    def _trace(nodes: list, i: int) -> list[tuple[int, str]]:  # type: ignore[type-arg]
        pushes = []
        while nodes[i][2] != -1:
            pushes.append(nodes[i][3])
            i = nodes[i][2]
        return pushes[::-1]

    def walk(self, boxes: frozenset[int], frm: int, to: int) -> list[str] | None:
        came: dict[int, tuple[int, str]] = {}
        seen = {frm}
        queue = deque([frm])
        while queue:
            cell = queue.popleft()
            if cell == to:
                break
            for move in ORDER:
                nxt = cell + self.offsets[move]
                if nxt not in self.walls and nxt not in boxes and nxt not in seen:
                    seen.add(nxt)
                    came[nxt] = (cell, move)
                    queue.append(nxt)
        if to not in seen:
            return None
        path = []
        while to != frm:
            to, move = came[to]
            path.append(move)
        return path[::-1]


class SokobanRef:
    def __init__(self, room: Room, boxes: set[int], player: int, optimal: int, max_states: int) -> None:
        self.room, self.boxes, self.player = room, set(boxes), player
        self.num_boxes = len(boxes)
        self.optimal = optimal
        self.max_states = max_states

    @classmethod
    def generate(cls, config: dict[str, object] | SokobanRefConfig, seed: int, split: str) -> "SokobanRef":
        cfg = config if isinstance(config, SokobanRefConfig) else SokobanRefConfig(**config)  # type: ignore[arg-type]
        w, h, nb = cfg.width, cfg.height, cfg.boxes
        interior = [r * w + c for r in range(1, h - 1) for c in range(1, w - 1)]
        n_walls = int(cfg.wall_ratio * len(interior))
        border = {c for c in range(w * h) if c // w in (0, h - 1) or c % w in (0, w - 1)}
        rng = SplitMix64.for_level(seed, split)
        for _ in range(MAX_ATTEMPTS):
            cells = list(interior)
            rng.partial_shuffle(cells, 0, n_walls + nb + 1)
            walls = border | set(cells[:n_walls])
            targets = set(cells[n_walls : n_walls + nb])
            player = cells[n_walls + nb]
            room = Room(w, h, walls, targets)
            if len(room.reachable(set(), player)) != len(interior) - n_walls:
                continue
            boxes = set(targets)
            best = (0, set(boxes), player)
            for _ in range(cfg.reverse_steps):
                move = ORDER[rng.below(4)]
                off = room.offsets[move]
                nxt = player + off
                if nxt in walls or nxt in boxes:
                    continue
                behind = player - off
                if behind in boxes:
                    boxes.remove(behind)
                    boxes.add(player)
                player = nxt
                score = sum(min(abs(b // w - t // w) + abs(b % w - t % w) for t in targets) for b in boxes)
                if score > best[0]:
                    best = (score, set(boxes), player)
            boxes, player = best[1], best[2]
            if boxes == targets:
                continue
            if split_of_level(room.canonical_bytes(boxes, player)) != split:
                continue
            room.compute_dead()
            pushes = room.solve_pushes(frozenset(boxes), player, cfg.max_solver_states)
            if pushes is None or not cfg.min_pushes <= len(pushes) <= cfg.max_pushes:
                continue
            return cls(room, boxes, player, len(pushes), cfg.max_solver_states)
        raise RuntimeError("generation failed")

    def step(self, common: Common, action: bytes | None) -> Outcome:
        moves = parse_moves(action, common.max_moves)
        if moves is None:
            return Outcome(local=common.parse_penalty)
        room = self.room
        on_before = len(self.boxes & room.targets)
        invalid, failed = 0, False
        for move in moves:
            off = room.offsets[move]
            nxt = self.player + off
            if nxt in room.walls:
                invalid += 1
                continue
            if nxt in self.boxes:
                beyond = nxt + off
                if beyond in room.walls or beyond in self.boxes:
                    invalid += 1
                    continue
                self.boxes.remove(nxt)
                self.boxes.add(beyond)
                failed = beyond in room.dead
            self.player = nxt
            if failed or self.boxes <= room.targets:
                break
        on_after = len(self.boxes & room.targets)
        progress = (float(on_after) - float(on_before)) / float(self.num_boxes)
        return Outcome(
            local=progress + float(invalid) * common.invalid_move_penalty,
            solved=on_after == self.num_boxes,
            failed=failed,
            valid=invalid == 0,
        )

    def render(self) -> str:
        room, rows = self.room, []
        for r in range(room.h):
            row = []
            for c in range(room.w):
                cell = r * room.w + c
                target = cell in room.targets
                if cell in room.walls:
                    row.append("#")
                elif cell == self.player:
                    row.append("+" if target else "@")
                elif cell in self.boxes:
                    row.append("*" if target else "$")
                else:
                    row.append("." if target else "_")
            rows.append("".join(row))
        return "\n".join(rows)

    def optimal_len(self) -> int:
        return self.optimal

    def solve(self) -> str | None:
        room = self.room
        pushes = room.solve_pushes(frozenset(self.boxes), self.player, self.max_states)
        if pushes is None:
            return None
        boxes, player, moves = frozenset(self.boxes), self.player, []
        for b, move in pushes:
            path = room.walk(boxes, player, b - room.offsets[move])
            if path is None:
                return None
            moves += path + [move]
            boxes = (boxes - {b}) | {b + room.offsets[move]}
            player = b
        return format_moves(moves)
