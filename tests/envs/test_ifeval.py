"""IFEval env: row validation (google/IFEval's schema), prompts, scoring, and the shipped offline set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envs.base import DatasetError
from envs.datasets import load_rows
from envs.ifeval import IFEvalEnv
from envs.ifeval_checks import INSTRUCTIONS

pytest.importorskip("langdetect", reason="language checks need langdetect (a project dependency)")

ROW: dict[str, Any] = {
    "key": 7,
    "prompt": 'Write a story of at least 20 words about a fox. Include "moon", use no commas, end with "The end."',
    "instruction_id_list": [
        "length_constraints:number_words",
        "keywords:existence",
        "punctuation:no_comma",
        "startend:end_checker",
    ],
    "kwargs": [{"num_words": 20, "relation": "at least"}, {"keywords": ["moon"]}, {}, {"end_phrase": "The end."}],
}
FOX = (
    "A small fox climbed the hill under a silver moon and watched the sleeping village until the sun came up. The end."
)


def shipped() -> dict[int, dict[str, Any]]:
    env = IFEvalEnv()
    return {row["key"]: row for row in load_rows(str(env.default_dataset_path()), env)}


def test_full_score_of_a_multi_instruction_row() -> None:
    score = IFEvalEnv().score(ROW, FOX.replace("moon and", "moon, and") + "\nHope you liked it, friend!")
    assert score.info == {
        "prompt_level_strict_acc": False,
        "prompt_level_loose_acc": False,
        "inst_level_strict_acc": [True, True, False, False],
        "inst_level_loose_acc": [True, True, False, True],  # the closing line dropped, the story ends right
        "instruction_ids": ROW["instruction_id_list"],
        "failed_strict": ["punctuation:no_comma", "startend:end_checker"],
    }
    assert (score.reward, score.success) == (0.0, False)
    assert score.parsed_answer is not None and score.parsed_answer.endswith("liked it, friend!")
    json.dumps(score.info)  # stored in the rollout row


def test_a_response_following_everything_succeeds() -> None:
    score = IFEvalEnv().score(ROW, FOX)
    assert (score.reward, score.success) == (1.0, True)
    assert score.info["inst_level_strict_acc"] == score.info["inst_level_loose_acc"] == [True] * 4
    assert score.info["failed_strict"] == []


def test_a_blank_response_is_no_answer_and_follows_nothing() -> None:
    score = IFEvalEnv().score(ROW, "  \n")
    assert score.parsed_answer is None and score.info["inst_level_loose_acc"] == [False] * 4


def test_prompts_chat_and_completion() -> None:
    assert IFEvalEnv().messages(ROW) == [{"role": "user", "content": ROW["prompt"]}]
    assert IFEvalEnv(system_prompt="Be exact.").messages(ROW)[0] == {"role": "system", "content": "Be exact."}
    assert IFEvalEnv().prompt(ROW) is None
    completion = IFEvalEnv(mode="completion")
    assert completion.prompt(ROW) == ROW["prompt"]
    assert IFEvalEnv(mode="completion", system_prompt="Be exact.").prompt(ROW) == f"Be exact.\n\n{ROW['prompt']}"
    with pytest.raises(ValueError, match="completion"):
        completion.messages(ROW)
    assert IFEvalEnv().stop() is None and completion.stop() is None


def test_identity_and_options() -> None:
    env = IFEvalEnv()
    assert env.prompt_id(ROW) == "ifeval-7"
    assert env.reference(ROW).startswith("length_constraints:number_words, keywords:existence")
    assert IFEvalEnv.majority_vote is False
    fingerprints = {
        env.fingerprint(),
        IFEvalEnv(mode="completion").fingerprint(),
        IFEvalEnv(system_prompt="x").fingerprint(),
    }
    assert len(fingerprints) == 3
    with pytest.raises(ValueError, match="mode"):
        IFEvalEnv(mode="few-shot")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="system_prompt"):
        IFEvalEnv(system_prompt=3)  # type: ignore[arg-type]


def test_metrics_use_lm_eval_names() -> None:
    kinds = {m.key: (m.kind, m.headline, m.label) for m in IFEvalEnv.metrics}
    assert kinds == {
        "prompt_level_strict_acc": ("rate", True, "prompt_level_strict_acc"),
        "prompt_level_loose_acc": ("rate", True, "prompt_level_loose_acc"),
        "inst_level_strict_acc": ("items", False, "inst_level_strict_acc"),
        "inst_level_loose_acc": ("items", False, "inst_level_loose_acc"),
    }
    assert [name for name, _ in IFEvalEnv.lm_eval_metrics] == [
        "prompt_level_strict_acc,none",
        "inst_level_strict_acc,none",
        "prompt_level_loose_acc,none",
        "inst_level_loose_acc,none",
    ]
    assert all(name == f"{source},none" for name, source in IFEvalEnv.lm_eval_metrics)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"key": "7"}, r"row 3: 'key' must be an integer"),
        ({"key": True}, r"row 3: 'key' must be an integer"),
        ({"prompt": " "}, r"row 3: missing or empty 'prompt'"),
        ({"instruction_id_list": []}, r"row 3: 'instruction_id_list' must be a non-empty list"),
        ({"kwargs": [{}, {}]}, r"row 3: 'kwargs' must be a list with one object per instruction \(4\), got 2 entries"),
        (
            {"instruction_id_list": ["keywords:existance", *ROW["instruction_id_list"][1:]]},
            r"row 3: instruction 0 .*unknown instruction id 'keywords:existance'",
        ),
        (
            {"kwargs": [{"num_words": 20, "relaton": "at least"}, *ROW["kwargs"][1:]]},
            r"row 3: instruction 0 .*takes no kwarg relaton",
        ),
        ({"kwargs": [{"num_words": 20}, *ROW["kwargs"][1:]]}, r"row 3: instruction 0 .*needs kwarg 'relation'"),
        (
            {"kwargs": [{"num_words": "20", "relation": "at least"}, *ROW["kwargs"][1:]]},
            r"row 3: instruction 0 .*'num_words' must be a positive integer .*, got '20'",
        ),
        # lm-eval drops a 0 (falsy) and draws a random count: a dataset error here
        ({"kwargs": [{"num_words": 0, "relation": "at least"}, *ROW["kwargs"][1:]]}, r"needs kwarg 'num_words'"),
        ({"kwargs": [{"num_words": -5, "relation": "at least"}, *ROW["kwargs"][1:]]}, r"must be a positive"),
        (
            {"kwargs": [*ROW["kwargs"][:1], {"keywords": ["moon", "(unclosed"]}, *ROW["kwargs"][2:]]},
            r"row 3: instruction 1 .*valid regular expressions \(lm-eval fails on '\(unclosed'\)",
        ),
        (
            {"instruction_id_list": ["language:response_language"], "kwargs": [{"language": "zh"}]},
            r"'language' must be one of lm-eval's language codes",
        ),
        (
            {
                "instruction_id_list": ["length_constraints:nth_paragraph_first_word"],
                "kwargs": [{"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "so"}],
            },
            r"'nth_paragraph' must be at most num_paragraphs, got 3",
        ),
        (
            {
                "instruction_id_list": ["keywords:letter_frequency"],
                "kwargs": [{"letter": "ab", "let_frequency": 2, "let_relation": "at least"}],
            },
            r"'letter' must be a single character",
        ),
        (
            {"kwargs": [{"num_words": 20, "relation": "at most"}, *ROW["kwargs"][1:]]},
            r"row 3: instruction 0 .*'relation' must be 'less than' or 'at least'",
        ),
        (
            {"kwargs": [*ROW["kwargs"][:1], {"keywords": "moon"}, *ROW["kwargs"][2:]]},
            r"row 3: instruction 1 .*'keywords' must be a non-empty list of strings",
        ),
        (
            {"kwargs": [*ROW["kwargs"][:2], {"end_phrase": "x"}, ROW["kwargs"][3]]},
            r"row 3: instruction 2 .*punctuation:no_comma takes no kwarg end_phrase",
        ),
    ],
)
def test_validation_names_row_and_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(DatasetError, match=message) as e:
        IFEvalEnv().validate_row({**ROW, **change}, "row 3")
    assert "\n" not in str(e.value)


def test_none_valued_kwargs_validate_and_score_like_absent_ones() -> None:
    """The HF dataset gives every kwargs object every kwarg name, the unused ones None."""
    names = sorted({name for instruction in INSTRUCTIONS.values() for name in instruction.kwargs})
    padded = [{**dict.fromkeys(names), **kw} for kw in ROW["kwargs"]]
    row = {**ROW, "kwargs": padded}
    IFEvalEnv().validate_row(row, "row 1")
    assert IFEvalEnv().score(row, FOX).info == IFEvalEnv().score(ROW, FOX).info


def test_hf_dataset_path_loads_the_public_schema(tmp_path: Path) -> None:
    """Through `datasets`, with kwargs as the hub's parquet has them: one struct of every kwarg name, None-padded."""
    datasets = pytest.importorskip("datasets")
    rows = [
        ROW,
        {**ROW, "key": 8, "instruction_id_list": ["language:response_language"], "kwargs": [{"language": "fr"}]},
    ]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ifeval"))
    loaded = load_rows(f"hf-dataset:{tmp_path / 'ifeval'}?split=train", IFEvalEnv())
    assert [IFEvalEnv().prompt_id(r) for r in loaded] == ["ifeval-7", "ifeval-8"]
    assert loaded[1]["kwargs"][0]["num_words"] is None and loaded[1]["kwargs"][0]["language"] == "fr"
    assert IFEvalEnv().score(loaded[0], FOX).success


def test_shipped_set_loads_and_covers_every_instruction() -> None:
    rows = shipped()
    assert len(rows) >= 50
    covered = {i for row in rows.values() for i in row["instruction_id_list"]}
    assert covered == set(INSTRUCTIONS)
    assert sum(len(row["instruction_id_list"]) > 1 for row in rows.values()) >= 10


# Hand-written responses to rows of the shipped set: (response, strict per instruction, loose per instruction).
RESPONSES: dict[int, tuple[str, list[bool], list[bool]]] = {
    1: ("The fog was thick when the keeper lit the lantern.", [True], [True]),
    24: ('Here is the data:\n```json\n{"countries": [{"name": "Chile"}]}\n```', [False], [True]),
    34: ("Rainbows form when sunlight enters raindrops, bends and splits.", [False], [False]),
    35: (
        "Rusty the robot gardener woke at dawn and rolled between the beds. He pressed each seed into the dark "
        "soil with a careful metal finger. Rain had left a little rust on his elbows but he did not mind. He sang "
        "to the beans and counted the carrots twice. By evening the garden was quiet and every seed was tucked in "
        "for the night.",
        [True, True, True],
        [True, True, True],
    ),
    37: (
        "<<Weekend Hike Tips>>\n* Pack water\n* Wear good boots\n* Check the forecast\nHappy trails!\nAsk me for more.",
        [True, True, False],
        [True, True, True],
    ),
    38: ('{"name": "Vela", "moons": 2, "note": "no alien life"}', [True, False], [True, False]),
    39: ("Sort, save.\nRecycle, reuse.\n******\nLess waste, more future.", [True, False], [True, False]),
    42: (
        "SECTION 1\nFeed your goldfish *small amounts* once a day.\nSECTION 2\nChange **a third of the water** weekly.",
        [True, True],
        [True, True],
    ),
    43: (
        "Stars filled the sky above the observatory.\n***\nWe counted star after star until dawn.",
        [True, False],
        [True, False],
    ),
    47: ("lullaby, little one, lie still and sleep while the lilies fall asleep.", [True, True], [True, True]),
    31: ("A calm lake at dawn. The water is STILL and QUIET.", [False], [False]),  # "A" is a capital word too
    27: (
        "Sure! Here you go.\nName three uses of a paper clip.\nA bookmark, a hook and a SIM tray tool.",
        [False],
        [True],
    ),
    56: ("Thunder rolled. Rain hammered the roof. Lightning split the sky. The dog hid.", [True, True], [True, True]),
    18: ("Thank you for a wonderful year!\n\nP.S. I still have the book you lent me.", [True], [True]),
}


def test_hand_written_responses_give_the_expected_accuracies() -> None:
    env, rows = IFEvalEnv(), shipped()
    scores = {key: env.score(rows[key], response) for key, (response, _, _) in RESPONSES.items()}
    for key, (_, strict, loose) in RESPONSES.items():
        info = scores[key].info
        assert (info["inst_level_strict_acc"], info["inst_level_loose_acc"]) == (strict, loose), key
        assert scores[key].success is all(strict)
    infos = [s.info for s in scores.values()]
    prompt_strict = sum(i["prompt_level_strict_acc"] for i in infos) / len(infos)
    prompt_loose = sum(i["prompt_level_loose_acc"] for i in infos) / len(infos)
    # lm-eval's instruction level is a micro average: all instructions of all prompts pooled.
    inst_strict = [ok for i in infos for ok in i["inst_level_strict_acc"]]
    inst_loose = [ok for i in infos for ok in i["inst_level_loose_acc"]]
    assert (prompt_strict, prompt_loose) == (6 / 14, 9 / 14)
    assert (sum(inst_strict), sum(inst_loose), len(inst_strict)) == (16, 19, 24)


def test_a_public_row_whose_letter_is_no_ascii_letter_counts_that_character() -> None:
    """google/IFEval key 1122 asks for "#" at least 4 times: lm-eval counts a random letter, evalflow the "#"."""
    names = sorted({name for instruction in INSTRUCTIONS.values() for name in instruction.kwargs})
    kwargs = {**dict.fromkeys(names), "let_relation": "at least", "letter": "#", "let_frequency": 4}
    row = {"key": 1122, "prompt": "Include at least 4 hashtags.", "instruction_id_list": ["keywords:letter_frequency"]}
    row["kwargs"] = [kwargs]
    IFEvalEnv().validate_row(row, "row 1")
    assert IFEvalEnv().score(row, "#sun #sea #sand #surf").success
    assert not IFEvalEnv().score(row, "#sun #sea #sand").success
