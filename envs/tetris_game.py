"""GRL-style Tetris on a tiny board, deterministic per seed: the GRL environment's rules in pure Python.

Coordinates: `x` is the column (0 = left), `y` the row (0 = top, growing downwards). A piece is a set of
cell offsets from its anchor cell; cells above the board (y < 0) are allowed while a piece falls, are not
drawn and collide with nothing, so a vertical bar or a square spawns with its upper part hidden.

Piece sequence (drawn up front by `draw_pieces`, `dim_x * dim_y + 1` pieces, from `random.Random(seed)`):
for each piece, first the shape, then the spawn column.
- Shape, balanced: with `counts[i]` the number of times shape i was drawn so far, shape i gets weight
  `BALANCE_BASE + max(counts) - counts[i]` (base 5), and `r = rng.randint(1, sum(weights))` picks the shape
  whose cumulative weight first reaches r. A shape behind the leader by k draws is (5 + k) / 5 times as
  likely as the leader, so counts stay close without becoming predictable.
- Column: uniform, `rng.randint(1, dim_x - 1)` for shapes extending left ("-", "O"), else
  `rng.randint(0, dim_x - 1)`. The piece's anchor (its bottom-right cell) starts in the top row. This always
  fits: a game that goes on has an empty top row (a lock touching it ends the game).
This is the draw order of the GRL environment, so a seed gives the same game there and here.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

ACTIONS: tuple[str, ...] = ("Left", "Right", "Down")
MOVES: dict[str, tuple[int, int]] = {"Left": (-1, 0), "Right": (1, 0), "Down": (0, 1)}

# (dx, dy) offsets from the anchor; dy = -1 is the cell above, dx = -1 the cell to the left.
SHAPES: dict[str, tuple[tuple[int, int], ...]] = {
    "dot": ((0, 0),),
    "I": ((0, 0), (0, -1)),
    "-": ((0, 0), (-1, 0)),
    "O": ((0, 0), (-1, 0), (0, -1), (-1, -1)),
}
PIECE_SETS: dict[int, tuple[str, ...]] = {0: ("dot",), 1: ("dot",), 2: ("I", "-"), 3: ("I", "-", "O")}
BALANCE_BASE = 5
# Rewards in tenths, so sums are exact: -0.1 per action, +10 per cleared row.
ACTION_TENTHS = -1
ROW_TENTHS = 100

EMPTY, SETTLED, FALLING = "_", "#", "X"


@dataclass(frozen=True)
class Piece:
    """One entry of the piece sequence: a shape name and the column its anchor spawns in."""

    shape: str
    column: int


@dataclass(frozen=True)
class StepOutcome:
    """What one action did; `reward` is this action's reward (-0.1, plus 10 per cleared row)."""

    reward: float
    moved: bool  # the action changed the piece's position
    locked: bool  # the piece locked after the action
    cleared: int  # rows cleared by that lock
    done: bool
    success: bool


def extends_left(shape: str) -> bool:
    """Shapes with a cell left of the anchor must spawn at column >= 1."""
    return any(dx < 0 for dx, _ in SHAPES[shape])


def balance_weights(counts: Sequence[int]) -> list[int]:
    """Weights of the next shape given how often each was drawn so far (less drawn: more likely)."""
    top = max(counts)
    return [BALANCE_BASE + top - c for c in counts]


def _balanced_index(rng: random.Random, counts: list[int]) -> int:
    weights = balance_weights(counts)
    r = rng.randint(1, sum(weights))
    for i, w in enumerate(weights):
        r -= w
        if r <= 0:
            return i
    raise AssertionError("unreachable: r <= sum(weights)")


def draw_pieces(seed: int, dim_x: int, dim_y: int, box_type: int, count: int | None = None) -> list[Piece]:
    """The game's piece sequence (default length: enough to fill the board once, plus one)."""
    if box_type not in PIECE_SETS:
        raise ValueError(f"box_type must be one of {sorted(PIECE_SETS)}, got {box_type!r}")
    if dim_x < 2 or dim_y < 1:
        raise ValueError(f"board must be at least 2 wide and 1 high, got {dim_x}x{dim_y}")
    names = PIECE_SETS[box_type]
    rng = random.Random(seed)
    counts = [0] * len(names)
    pieces = []
    for _ in range(dim_x * dim_y + 1 if count is None else count):
        i = _balanced_index(rng, counts)
        counts[i] += 1
        shape = names[i]
        column = rng.randint(1 if extends_left(shape) else 0, dim_x - 1)
        pieces.append(Piece(shape, column))
    return pieces


class Game:
    """One game: a board, a fixed piece sequence and the falling piece; `step` applies one action."""

    def __init__(self, dim_x: int, dim_y: int, pieces: Sequence[Piece]) -> None:
        """A game over a given piece sequence (tests script sequences; `Game.new` draws one from a seed)."""
        if dim_x < 2 or dim_y < 1:
            raise ValueError(f"board must be at least 2 wide and 1 high, got {dim_x}x{dim_y}")
        for p in pieces:
            if p.shape not in SHAPES or not (1 if extends_left(p.shape) else 0) <= p.column < dim_x:
                raise ValueError(f"piece {p} does not fit a board {dim_x} wide")
        if not pieces:
            raise ValueError("the piece sequence is empty")
        self.dim_x, self.dim_y = dim_x, dim_y
        self.pieces: tuple[Piece, ...] = tuple(pieces)
        self._settled = [[False] * dim_x for _ in range(dim_y)]
        self._next_piece = 0
        self._tenths = 0
        self.shape: str | None = None
        self.anchor: tuple[int, int] = (0, 0)
        self.done = False
        self.success = False
        self.lockout = False
        self.actions_taken = 0
        self.effective_actions = 0
        self.pieces_locked = 0
        self.cleared_rows = 0
        self._spawn()

    @classmethod
    def new(cls, seed: int, dim_x: int, dim_y: int, box_type: int) -> Game:
        """The game for a seed: identical seed and settings give an identical game."""
        return cls(dim_x, dim_y, draw_pieces(seed, dim_x, dim_y, box_type))

    @property
    def total_reward(self) -> float:
        """Sum of the step rewards so far (exact to one decimal)."""
        return self._tenths / 10

    def _cells(self, anchor: tuple[int, int]) -> list[tuple[int, int]]:
        assert self.shape is not None
        ax, ay = anchor
        return [(ax + dx, ay + dy) for dx, dy in SHAPES[self.shape]]

    def _fits(self, anchor: tuple[int, int]) -> bool:
        for x, y in self._cells(anchor):
            if not 0 <= x < self.dim_x or y >= self.dim_y:
                return False
            if y >= 0 and self._settled[y][x]:
                return False
        return True

    def _spawn(self) -> None:
        if self._next_piece >= len(self.pieces):
            raise RuntimeError(f"piece sequence exhausted after {len(self.pieces)} pieces")
        piece = self.pieces[self._next_piece]
        self._next_piece += 1
        self.shape, self.anchor = piece.shape, (piece.column, 0)
        # Cannot fail for a running game (its top row is empty); guards hand-made sequences.
        if not self._fits(self.anchor):
            raise RuntimeError(f"piece {piece} does not fit at spawn")

    def _lock(self) -> int:
        """Settle the piece and clear full rows (rows above fall); returns the number cleared."""
        for x, y in self._cells(self.anchor):
            if y >= 0:
                self._settled[y][x] = True
        self.pieces_locked += 1
        kept = [row for row in self._settled if not all(row)]
        cleared = self.dim_y - len(kept)
        self._settled = [[False] * self.dim_x for _ in range(cleared)] + kept
        return cleared

    def step(self, action: str) -> StepOutcome:
        """Apply one action (Left/Right/Down): move if possible, pay -0.1, lock if resting, then clear or spawn."""
        if action not in MOVES:
            raise ValueError(f"unknown action {action!r}; expected one of {ACTIONS}")
        if self.done:
            raise RuntimeError("the game is over")
        dx, dy = MOVES[action]
        target = (self.anchor[0] + dx, self.anchor[1] + dy)
        moved = self._fits(target)
        if moved:
            self.anchor = target
        self.actions_taken += 1
        self.effective_actions += moved
        tenths = ACTION_TENTHS
        locked = not self._fits((self.anchor[0], self.anchor[1] + 1))
        cleared = 0
        if locked:
            cleared = self._lock()
            self.cleared_rows += cleared
            tenths += ROW_TENTHS * cleared
            if cleared:
                self.done = self.success = True
            elif any(self._settled[0]):
                self.done = self.lockout = True
            if self.done:
                self.shape = None
            else:
                self._spawn()
        self._tenths += tenths
        return StepOutcome(tenths / 10, moved, locked, cleared, self.done, self.success)

    def render(self) -> str:
        """One line per row, top first: `_` empty, `#` settled, `X` the falling piece (on-board cells)."""
        grid = [[SETTLED if cell else EMPTY for cell in row] for row in self._settled]
        if self.shape is not None:
            for x, y in self._cells(self.anchor):
                if 0 <= y < self.dim_y:
                    grid[y][x] = FALLING
        return "\n".join("".join(row) for row in grid)
