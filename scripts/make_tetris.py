"""Generate the shipped Tetris test set, data/tetris/test.jsonl (200 games), from one master seed.

Everything comes from `random.Random(MASTER_SEED)` (default 20250521), drawn per game in this order:
board width and height, each uniform on 4..6; `box_type` uniform on {1, 2, 3} (single cells, the two bars,
the bars plus the square: about a third each; 0 is the same piece set as 1, so it is left out); the game
seed, uniform on [0, 2**31), redrawn if an earlier game already has it. Python's Mersenne Twister with an
integer seed, `randint` and `choice` give the same numbers on every CPython since 3.2, so the file is
byte-identical on rerun. The games themselves follow from each seed (envs/tetris_game.py).

    uv run python scripts/make_tetris.py            # twice gives byte-identical output
    uv run python scripts/make_tetris.py --seed 7 --games 50 --out /tmp/tetris.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

MASTER_SEED = 20250521
N_GAMES = 200
BOARD_SIDES = (4, 6)
BOX_TYPES = (1, 2, 3)
SEED_LIMIT = 2**31
OUT = Path(__file__).resolve().parents[1] / "data" / "tetris" / "test.jsonl"


def generate(master_seed: int = MASTER_SEED, n_games: int = N_GAMES) -> list[dict[str, Any]]:
    """The rows `{"game_id", "seed", "dim_board", "box_type"}`, game ids 1..n."""
    rng = random.Random(master_seed)
    rows: list[dict[str, Any]] = []
    seen: set[int] = set()
    for game_id in range(1, n_games + 1):
        dim_board = [rng.randint(*BOARD_SIDES), rng.randint(*BOARD_SIDES)]
        box_type = rng.choice(BOX_TYPES)
        seed = rng.randrange(SEED_LIMIT)
        while seed in seen:
            seed = rng.randrange(SEED_LIMIT)
        seen.add(seed)
        rows.append({"game_id": game_id, "seed": seed, "dim_board": dim_board, "box_type": box_type})
    return rows


def write(rows: list[dict[str, Any]], out: Path) -> None:
    """Atomic write: a temporary file moved into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8", newline="\n")
    os.replace(tmp, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seed", type=int, default=MASTER_SEED, help=f"master seed (default {MASTER_SEED})")
    parser.add_argument("--games", type=int, default=N_GAMES, help=f"number of games (default {N_GAMES})")
    parser.add_argument("--out", type=Path, default=OUT, help="output JSONL path")
    args = parser.parse_args()
    rows = generate(args.seed, args.games)
    write(rows, args.out)
    boxes = Counter(r["box_type"] for r in rows)
    boards = Counter(tuple(r["dim_board"]) for r in rows)
    print(f"wrote {len(rows)} games to {args.out} (master seed {args.seed})")
    print(f"box_type counts: {dict(sorted(boxes.items()))}; {len(boards)} board sizes")


if __name__ == "__main__":
    main()
