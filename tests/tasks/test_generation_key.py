"""The generation key: what determines a batch's completions, apart from how they are scored."""

from __future__ import annotations

from typing import Any, ClassVar

from core.config import SamplingConfig
from envs.base import Score
from envs.gsm8k import GSM8KEnv
from envs.registry import get_env
from tasks.collection.plan import batch_key, generation_key

ROWS = [{"id": "a", "question": "1+1?", "answer": "2"}, {"id": "b", "question": "2+2?", "answer": "4"}]


class Rescored(GSM8KEnv):
    """The built-in's prompts with other scoring, another name and version."""

    name: ClassVar[str] = "rescored"
    version: ClassVar[str] = "7"

    def score(self, row: dict[str, Any], completion: str) -> Score:
        return Score(1.0, True, None, {})


def keys(env: Any, rows: list = ROWS, sampling: SamplingConfig | None = None, model: str = "m") -> tuple[str, str]:
    sampling = sampling or SamplingConfig()
    return batch_key(env, rows, [0, 1], model, sampling), generation_key(env, rows, [0, 1], model, sampling)


def test_scoring_changes_the_batch_key_but_not_the_generation() -> None:
    built_in, rescored = keys(GSM8KEnv()), keys(Rescored())
    assert built_in[0] != rescored[0] and built_in[1] == rescored[1]


def test_whatever_changes_a_request_changes_the_generation() -> None:
    base = keys(GSM8KEnv())[1]
    assert keys(GSM8KEnv(fewshot=1))[1] != base  # the messages
    assert keys(GSM8KEnv(system_prompt="Be brief."))[1] != base
    assert keys(GSM8KEnv(mode="completion"))[1] != base  # a plain prompt and stop sequences
    assert keys(GSM8KEnv(), rows=ROWS[:1])[1] != base
    assert keys(GSM8KEnv(), rows=[{**ROWS[0], "id": "c"}, ROWS[1]])[1] != base  # the id seeds the request
    assert keys(GSM8KEnv(), sampling=SamplingConfig(temperature=0.1))[1] != base
    assert keys(GSM8KEnv(), model="other")[1] != base  # the model and server settings (samples fingerprint)
    assert keys(GSM8KEnv(), rows=[{**ROWS[0], "answer": "3"}, ROWS[1]])[1] == base  # only the reference differs


def test_a_multi_turn_environment_generates_with_its_whole_fingerprint() -> None:
    env = get_env("tetris")
    rows = [{"id": "t", "seed": 1}]
    key, generation = (
        batch_key(env, rows, [0], "m", SamplingConfig()),
        generation_key(env, rows, [0], "m", SamplingConfig()),
    )
    assert key == generation
