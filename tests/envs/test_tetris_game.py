"""Tetris game rules (envs/tetris_game.py): moves, locking, clearing, lockout, spawning, balanced draws, replay."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from envs.tetris_game import ACTIONS, PIECE_SETS, Game, Piece, balance_weights, draw_pieces

# Seed 93810 on a 4x4 board with single cells spawns in columns 1, 0, 2, 2, ...: fill the bottom row.
PER_PIECE = [
    ["Left", "Down", "Down", "Down"],
    ["Right", "Down", "Down", "Down"],
    ["Down"] * 3,
    ["Right"] + ["Down"] * 3,
]
SEEDED_CLEAR = [action for piece in PER_PIECE for action in piece]


def play(game: Game, actions: list[str]) -> list:
    return [game.step(a) for a in actions]


def test_seeded_script_clears_a_row() -> None:
    game = Game.new(93810, 4, 4, 1)
    assert [p.column for p in game.pieces[:4]] == [1, 0, 2, 2]
    assert game.render() == "_X__\n____\n____\n____"
    outcomes = play(game, SEEDED_CLEAR)
    assert [o.locked for o in outcomes].count(True) == 4
    assert all(not o.done for o in outcomes[:-1])
    last = outcomes[-1]
    assert (last.locked, last.cleared, last.done, last.success) == (True, 1, True, True)
    assert last.reward == pytest.approx(9.9)
    assert game.total_reward == 15 * -0.1 + 10 == 8.5
    assert (game.success, game.lockout, game.cleared_rows, game.actions_taken) == (True, False, 1, 15)
    assert game.render() == "____\n____\n____\n____"  # cleared, no falling piece after the end


def test_hand_made_sequence_renders_each_step() -> None:
    game = Game(3, 3, [Piece("dot", 0), Piece("dot", 1), Piece("dot", 2), Piece("dot", 0)])
    assert game.render() == "X__\n___\n___"
    assert game.step("Down").locked is False
    assert game.render() == "___\nX__\n___"
    out = game.step("Down")  # reaches the floor: locks, next piece spawns in column 1
    assert out.locked and not out.done
    assert game.render() == "_X_\n___\n#__"
    play(game, ["Down", "Down", "Down", "Down"])
    assert game.done and game.success and game.total_reward == 9.4


def test_cleared_rows_let_the_rows_above_fall() -> None:
    # A vertical bar fills column 0 of the two bottom rows; a single cell completes the bottom row only.
    game = Game(2, 4, [Piece("I", 0), Piece("dot", 1)])
    assert game.render() == "X_\n__\n__\n__"  # the bar's upper cell is above the board
    play(game, ["Down", "Down", "Down"])
    assert game.render() == "_X\n__\n#_\n#_"
    out = play(game, ["Down", "Down", "Down"])[-1]
    assert (out.cleared, out.success) == (1, True)
    assert game.render() == "__\n__\n__\n#_"


def test_two_rows_at_once() -> None:
    game = Game(2, 3, [Piece("O", 1)])
    assert game.render() == "XX\n__\n__"
    out = play(game, ["Down", "Down"])[-1]
    assert (out.cleared, out.reward, game.total_reward) == (2, 19.9, 19.8)
    assert game.render() == "__\n__\n__"


def drop_at(game: Game, column: int) -> int:
    """Move the falling piece to `column` (nothing in the way), then soft-drop it until it locks; returns actions."""
    n = 0
    while True:
        x = game.anchor[0]
        action = "Down" if x == column else ("Left" if x > column else "Right")
        n += 1
        if game.step(action).locked:
            return n


def test_lockout_ends_the_game_as_a_failure() -> None:
    # Columns 1, 0, 2, 2: stacking all four in column 0 fills it; the fourth locks in the top row.
    game = Game.new(93810, 4, 4, 1)
    used = [drop_at(game, 0) for _ in range(4)]
    assert used == [4, 2, 3, 2]  # the last one locks as soon as it reaches column 0 (resting on the stack)
    assert game.done and game.lockout and not game.success and game.cleared_rows == 0
    assert game.pieces_locked == 4 and game.total_reward == -1.1
    assert game.render() == "#___\n#___\n#___\n#___"
    with pytest.raises(RuntimeError, match="over"):
        game.step("Down")


def test_blocked_move_does_nothing_but_costs() -> None:
    game = Game(3, 4, [Piece("dot", 0), Piece("dot", 1)])
    before = game.render()
    out = game.step("Left")  # into the wall
    assert (out.moved, out.locked, out.cleared, out.done, out.reward) == (False, False, 0, False, -0.1)
    assert game.render() == before and game.total_reward == -0.1
    assert (game.actions_taken, game.effective_actions) == (1, 0)


def test_move_into_a_settled_block_is_blocked() -> None:
    game = Game(3, 3, [Piece("dot", 0), Piece("dot", 1), Piece("dot", 1)])
    play(game, ["Down", "Down"])  # (0, 2) settled; piece 2 at column 1
    game.step("Down")
    assert game.render() == "___\n_X_\n#__"
    out = game.step("Left")  # (0, 1) is free: moves, and now rests on the block at (0, 2): locks
    assert out.moved and out.locked
    assert game.render() == "_X_\n#__\n#__"
    game.step("Down")
    out = game.step("Left")  # (0, 1) is settled: blocked
    assert not out.moved and out.reward == -0.1
    assert game.render() == "___\n#X_\n#__"


def test_identical_seeds_replay_identically() -> None:
    for seed in (1, 93810, 2**31 - 1):
        a, b = Game.new(seed, 5, 6, 3), Game.new(seed, 5, 6, 3)
        assert a.pieces == b.pieces and len(a.pieces) == 5 * 6 + 1
        rng = random.Random(seed)
        while not a.done:
            action = rng.choice(ACTIONS)
            assert a.step(action) == b.step(action)
            assert a.render() == b.render()
        assert b.done and a.total_reward == b.total_reward
    assert draw_pieces(1, 5, 6, 3) != draw_pieces(2, 5, 6, 3)


@pytest.mark.parametrize("box_type", [0, 1, 2, 3])
def test_spawn_columns_respect_the_rules(box_type: int) -> None:
    for width in (2, 4, 6):
        columns: dict[str, Counter] = {}
        for seed in range(60):
            for piece in draw_pieces(seed, width, 4, box_type):
                columns.setdefault(piece.shape, Counter())[piece.column] += 1
        assert set(columns) == set(PIECE_SETS[box_type])
        for shape, seen in columns.items():
            lowest = 1 if shape in ("-", "O") else 0
            # Every allowed column occurs, no other: random among the columns where the piece fits.
            assert set(seen) == set(range(lowest, width)), (shape, width, seen)


def test_spawn_is_in_the_top_row() -> None:
    game = Game(4, 4, [Piece("-", 1), Piece("O", 3)])
    assert game.render().splitlines()[0] == "XX__"
    play(game, ["Down"] * 3)
    assert game.render() == "__XX\n____\n____\n##__"  # the square's upper row is above the board


def test_balanced_weights() -> None:
    assert balance_weights([0, 0, 0]) == [5, 5, 5]
    assert balance_weights([3, 0, 1]) == [5, 8, 7]


@pytest.mark.parametrize("box_type", [2, 3])
def test_balanced_choice_over_many_draws(box_type: int) -> None:
    n = len(PIECE_SETS[box_type])
    for seed in range(20):
        counts = Counter(p.shape for p in draw_pieces(seed, 6, 6, box_type, count=3000))
        # Independent uniform draws spread by ~50 here; the balancing keeps counts within a few.
        assert max(counts.values()) - min(counts.values()) <= 12, counts
        assert sum(counts.values()) == 3000 and len(counts) == n


def test_render_format() -> None:
    game = Game.new(11, 6, 5, 3)
    lines = game.render().splitlines()
    assert len(lines) == 5 and all(len(line) == 6 for line in lines)
    assert set("".join(lines)) <= set("_#X") and "X" in lines[0]
    rng = random.Random(0)
    while not game.done:
        game.step(rng.choice(ACTIONS))
        lines = game.render().splitlines()
        assert len(lines) == 5 and all(len(line) == 6 and set(line) <= set("_#X") for line in lines)
    assert "X" not in game.render()


def test_bad_inputs() -> None:
    game = Game.new(1, 4, 4, 1)
    with pytest.raises(ValueError, match="unknown action"):
        game.step("Up")
    with pytest.raises(ValueError, match="box_type"):
        draw_pieces(1, 4, 4, 7)
    with pytest.raises(ValueError, match="does not fit"):
        Game(4, 4, [Piece("-", 0)])
