"""IFEval instruction checks: a following and a violating response per instruction id, loose variants, text measures."""

from __future__ import annotations

from typing import Any

import pytest

from envs.ifeval_checks import INSTRUCTIONS, evaluate, follows, loose_variants

pytest.importorskip("langdetect", reason="language checks need langdetect (a project dependency)")

LOW = "all in lower case and in english, as asked by the prompt"
# langdetect, like the reference, is unreliable on capitals: a short all-caps English line may come out as "tl".
UP = "THE WEATHER TODAY IS SUNNY WITH A LIGHT BREEZE FROM THE WEST."

# (instruction id, kwargs, a response that follows it, one that does not)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("keywords:existence", {"keywords": ["fog", "lantern"]}, "FOG rolled in; the Lantern glowed.", "Fog only."),
    ("keywords:frequency", {"keyword": "cat", "frequency": 3, "relation": "at least"}, "cat Cat cats", "cat cat"),
    ("keywords:frequency", {"keyword": "chain", "frequency": 2, "relation": "less than"}, "one chain", "chain, chain"),
    ("keywords:forbidden_words", {"forbidden_words": ["sun"]}, "Sunny days and sundials.", "The Sun rose."),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 3, "let_relation": "at least"}, "Zazz", "zz top"),
    ("keywords:letter_frequency", {"letter": "!", "let_frequency": 2, "let_relation": "less than"}, "Hi!", "Hi!!"),
    (
        "language:response_language",
        {"language": "fr"},
        "Je voudrais un croissant et un café, s'il vous plaît.",
        "I would like a croissant and a coffee, please.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "less than"},
        "One. Two.",
        "One. Two! Three?",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 2, "relation": "at least"},
        "Dr. Who came. He left.",
        "Dr. Who came to the U.S. capital.",
    ),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "a\n***\nb\n***\nc\n***", "a\n***\nb"),
    # an empty paragraph between two dividers fails, even where the others make the count
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "***\na *** b *** c", "a\n***\n\n***\nb *** c"),
    (
        "length_constraints:number_words",
        {"num_words": 5, "relation": "at least"},
        "it's a well-known fact",
        "two words",
    ),
    ("length_constraints:number_words", {"num_words": 3, "relation": "less than"}, "two words", "three words here"),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "today"},
        'Long ago.\n\n"Today, bikes are everywhere.',
        "Long ago.\n\nNow bikes are everywhere.",
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "today"},
        "Long ago.\n\nToday, bikes.\n\n",
        "Long ago.\n\nToday bikes.\n\nThe end.",
    ),
    (
        "detectable_content:number_placeholders",
        {"num_placeholders": 2},
        "Dear [name], see you on [date].",
        "Dear [name], see you soon.",
    ),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Thanks!\n\nP.S. Bring a hat.", "Thanks! PS hat"),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi\nP.S. a\nP. P. S. b", "Hi\nP.S. a"),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "Intro\n* one\n- two", "* one\n* two\n* three"),
    ("detectable_format:constrained_response", {}, "My answer is no. Candles are risky.", "No, it is not."),
    (
        "detectable_format:number_highlighted_sections",
        {"num_highlights": 2},
        "*Soak* the lentils, **then boil**.",
        "*Soak* the lentils, ** ** boil.",
    ),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "Part", "num_sections": 2},
        "Part 1\nWalk\nPart 2\nJog",
        "Part one: walk. Part two: jog.",
    ),
    ("detectable_format:json_format", {}, '```json\n{"a": [1, 2]}\n```', 'Here it is: {"a": 1}'),
    ("detectable_format:title", {}, "<<Autumn Leaves>>\nRed and gold.", "<<   >>\nRed and gold."),
    ("combination:two_responses", {}, "Crumb & Co.\n******\nThe Rolling Pin", "Crumb & Co.\n******\nCrumb & Co."),
    (
        "combination:repeat_prompt",
        {"prompt_to_repeat": "Name three uses of a paper clip."},
        "name three uses of a paper clip. A hook, a pin, a reset tool.",
        "Sure! Name three uses of a paper clip.",
    ),
    (
        "startend:end_checker",
        {"end_phrase": "Enjoy your cup."},
        'Steep it.\n"Enjoy your cup."  ',
        "Enjoy your cup. Bye",
    ),
    ("startend:quotation", {}, ' "Believe in yourself." ', '"Believe in yourself."!'),
    ("startend:quotation", {}, '""', 'Believe in yourself."'),
    ("startend:quotation", {}, '"a"', ' " '),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 3, "capital_relation": "at least"},
        "GO team, DON'T stop",
        "GO team, do not stop NOW",
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "less than"},
        "A calm lake.",
        "A CALM LAKE.",
    ),
    ("change_case:english_capital", {}, UP, "ALL CAPITALS but one word"),
    ("change_case:english_capital", {}, UP, "TOUT EN MAJUSCULES, COMME LE DEMANDE LA QUESTION DU JOUR."),
    ("change_case:english_lowercase", {}, LOW, "all lower but One"),
    ("punctuation:no_comma", {}, "Light bends in drops of rain.", "Light bends, then splits."),
]


def test_every_instruction_id_has_a_case() -> None:
    assert {c[0] for c in CASES} == set(INSTRUCTIONS)
    assert len(INSTRUCTIONS) == 25


@pytest.mark.parametrize(("instruction_id", "kwargs", "good", "bad"), CASES)
def test_following_and_violating_response(instruction_id: str, kwargs: dict[str, Any], good: str, bad: str) -> None:
    assert follows(instruction_id, kwargs, good)
    assert not follows(instruction_id, kwargs, bad)


@pytest.mark.parametrize("instruction_id", sorted(INSTRUCTIONS))
def test_a_blank_response_follows_nothing(instruction_id: str) -> None:
    kwargs = next(c[1] for c in CASES if c[0] == instruction_id)
    assert not follows(instruction_id, kwargs, "  \n ")


def test_falsy_kwargs_are_absent() -> None:
    """The HF dataset stores every kwarg name in every row, the unused ones None; lm-eval drops every falsy one."""
    kwargs = {"keywords": ["fog"], "num_words": None, "relation": "", "language": None, "frequency": 0}
    assert follows("keywords:existence", kwargs, "fog") and not follows("keywords:existence", kwargs, "mist")


def test_nth_paragraph_is_counted_over_all_parts_as_in_the_reference() -> None:
    """Blank parts do not count as paragraphs, but the nth part is taken among all of them."""
    kwargs = {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "today"}
    assert not follows("length_constraints:nth_paragraph_first_word", kwargs, "Long ago.\n\n\n\nToday bikes.")


def test_keywords_markers_and_splitters_are_regular_expressions_as_in_lm_eval() -> None:
    assert follows("keywords:existence", {"keywords": ["c.t"]}, "a cat")
    assert follows("keywords:existence", {"keywords": ["colou?r"]}, "Color")
    assert not follows("keywords:existence", {"keywords": ["colou?r"]}, "colou?r")
    assert follows("keywords:frequency", {"keyword": " c.t ", "frequency": 2, "relation": "at least"}, "cat cut")
    assert not follows("keywords:forbidden_words", {"forbidden_words": ["yes|no"]}, "Yesterday, no.")
    assert follows("detectable_content:postscript", {"postscript_marker": "P.S"}, "The end.\nPxS hat")
    assert follows("detectable_format:multiple_sections", {"section_spliter": " Sect.on ", "num_sections": 2},
                   "Section 1 a Sectxon 2 b")  # fmt: skip


def test_titles_are_stripped_of_every_bracket_as_in_lm_eval() -> None:
    assert not follows("detectable_format:title", {}, "<<>>>")
    assert not follows("detectable_format:title", {}, "<<<>>")
    assert follows("detectable_format:title", {}, "<<a <<b>> c>>")
    assert not follows("detectable_format:title", {}, "<<a\nb>>")


def test_undetectable_language_passes_as_in_the_reference() -> None:
    assert follows("language:response_language", {"language": "fr"}, "12345 !!!")


def test_loose_variants_are_the_eight_of_ifeval() -> None:
    variants = loose_variants("Sure!\n*Body* text\nHope this helps")
    assert variants == [
        "Sure!\n*Body* text\nHope this helps",
        "*Body* text\nHope this helps",
        "Sure!\n*Body* text",
        "*Body* text",
        "Sure!\nBody text\nHope this helps",
        "Body text\nHope this helps",
        "Sure!\nBody text",
        "Body text",
    ]


def test_a_preamble_line_fails_strict_but_passes_loose() -> None:
    response = 'Here is your JSON:\n{"planet": "Vela"}'
    assert evaluate(["detectable_format:json_format"], [{}], response) == ([False], [True])


def test_a_closing_line_fails_strict_but_passes_loose() -> None:
    response = '"Believe in yourself."\nGood luck!'
    assert evaluate(["startend:quotation"], [{}], response) == ([False], [True])


def test_star_decorated_keyword_fails_strict_but_passes_loose() -> None:
    response = "Say *Lantern*ville three times."
    ids, kwargs = ["keywords:existence"], [{"keywords": ["lanternville"]}]
    assert evaluate(ids, kwargs, response) == ([False], [True])


def test_loose_never_rescues_what_no_variant_follows() -> None:
    ids = ["punctuation:no_comma", "startend:quotation"]
    assert evaluate(ids, [{}, {}], "Intro, line\nmiddle, line\nend, line") == ([False, False], [False, False])


def test_a_letter_that_is_no_ascii_letter_is_counted_as_given() -> None:
    """lm-eval counts a random ASCII letter instead (google/IFEval keys 1122 and 1129): evalflow's pinned choice."""
    kwargs = {"letter": "#", "let_frequency": 4, "let_relation": "at least"}
    assert follows("keywords:letter_frequency", kwargs, "#a #b #c #d") and not follows(
        "keywords:letter_frequency", kwargs, "#a #b #c"
    )
