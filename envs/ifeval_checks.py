"""IFEval's verifiable instructions: the registry of all 25 ids with their kwargs, and strict/loose evaluation.

Each check re-expresses lm-evaluation-harness 0.4.13's (`lm_eval/tasks/ifeval/`, MIT; the IFEval code in it
is Google's, Apache-2.0, from google-research's instruction_following_eval, Zhou et al. 2023), so that a
verdict is lm-eval's by definition, quirks included: keywords, forbidden words, section splitters and
postscript markers are regular expressions (matched with `re`, as lm-eval does); words, sentences and
capital words come from nltk (envs.ifeval_text).

Kwargs are read as lm-eval reads them: a falsy value (None, 0, "", []) is dropped, as if absent. Where
lm-eval would then draw a random value (a kwarg missing or dropped, a count below 0, `nth_paragraph` past
`num_paragraphs`) or fail (an unknown kwarg, an unknown language, a pattern that does not compile),
validation rejects the row. One case occurs in the public google/IFEval set and is pinned instead:
`keywords:letter_frequency` with a `letter` that is not an ASCII letter (keys 1122 "#" and 1129 "!"), for
which lm-eval counts a random ASCII letter, drawn anew for each check: evalflow counts the character given.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envs import ifeval_format as fmt
from envs.ifeval_text import count_capital_words, count_sentences, count_words, detect_language

RELATIONS = ("less than", "at least")
PARAGRAPH_DIVIDER = r"\s?\*\*\*\s?"
# The reference's first-word rule: the word ends at the first of these characters.
FIRST_WORD_STOPS = frozenset(".,?!'\"")
# lm-eval's language codes (instructions_util.LANGUAGE_CODES): any other code makes it fail.
LANGUAGES = frozenset({"en", "es", "pt", "ar", "hi", "fr", "ru", "de", "ja", "it", "bn", "uk", "th", "ur", "ta",
                       "te", "bg", "ko", "pl", "he", "fa", "vi", "ne", "sw", "kn", "mr", "gu", "pa", "ml",
                       "fi"})  # fmt: skip

Check = Callable[[str, dict[str, Any]], bool]


def compare(count: int, relation: str, bound: int) -> bool:
    """IFEval's two relations: "less than" is count < bound, "at least" is count >= bound."""
    return count < bound if relation == "less than" else count >= bound


# --- keywords, language, length, case, punctuation -------------------------------------------------------


def existence(response: str, kw: dict[str, Any]) -> bool:
    """Every one of `keywords` (regular expressions) matches somewhere, ignoring case (also inside words)."""
    return all(re.search(k, response, flags=re.IGNORECASE) for k in kw["keywords"])


def frequency(response: str, kw: dict[str, Any]) -> bool:
    """`keyword` (a regular expression, stripped) matches less than / at least `frequency` times, ignoring
    case (non-overlapping matches, also inside words)."""
    found = len(re.findall(kw["keyword"].strip(), response, flags=re.IGNORECASE))
    return compare(found, kw["relation"], kw["frequency"])


def forbidden_words(response: str, kw: dict[str, Any]) -> bool:
    """None of `forbidden_words` (regular expressions) matches between word boundaries, ignoring case."""
    return not any(re.search(r"\b" + w + r"\b", response, flags=re.IGNORECASE) for w in kw["forbidden_words"])


def letter_frequency(response: str, kw: dict[str, Any]) -> bool:
    """The character `letter` (case-insensitive) occurs less than / at least `let_frequency` times (a `letter`
    that is not an ASCII letter is counted as given: lm-eval counts a random ASCII letter instead)."""
    found = Counter(response.lower())[kw["letter"].lower()]
    return compare(found, kw["let_relation"], kw["let_frequency"])


def response_language(response: str, kw: dict[str, Any]) -> bool:
    """langdetect finds the response in `language` (ISO 639-1); a text it cannot classify passes."""
    found = detect_language(response)
    return found is None or found == kw["language"]


def number_sentences(response: str, kw: dict[str, Any]) -> bool:
    """Less than / at least `num_sentences` sentences (Punkt's)."""
    return compare(count_sentences(response), kw["relation"], kw["num_sentences"])


def number_paragraphs(response: str, kw: dict[str, Any]) -> bool:
    """Exactly `num_paragraphs` paragraphs divided by `***`; an empty paragraph only at either end."""
    paragraphs = re.split(PARAGRAPH_DIVIDER, response)
    found = len(paragraphs)
    for i, paragraph in enumerate(paragraphs):
        if not paragraph.strip():
            if 0 < i < len(paragraphs) - 1:
                return False
            found -= 1
    return found == kw["num_paragraphs"]


def number_words(response: str, kw: dict[str, Any]) -> bool:
    """Less than / at least `num_words` words."""
    return compare(count_words(response), kw["relation"], kw["num_words"])


def nth_paragraph_first_word(response: str, kw: dict[str, Any]) -> bool:
    """Exactly `num_paragraphs` non-empty paragraphs divided by blank lines, and paragraph `nth_paragraph`
    (counted over all parts, as the reference does) starts with `first_word` (case-insensitive, up to the
    first . , ? ! ' or ")."""
    paragraphs = re.split(r"\n\n", response)
    found = sum(1 for p in paragraphs if p.strip())
    nth = kw["nth_paragraph"]
    if nth > found or not paragraphs[nth - 1].strip():
        return False
    word = paragraphs[nth - 1].split()[0].lstrip("'").lstrip('"')
    first = ""
    for char in word:
        if char in FIRST_WORD_STOPS:
            break
        first += char.lower()
    return found == kw["num_paragraphs"] and first == kw["first_word"].lower()


def capital_word_frequency(response: str, kw: dict[str, Any]) -> bool:
    """Word tokens in all capitals occur less than / at least `capital_frequency` times."""
    return compare(count_capital_words(response), kw["capital_relation"], kw["capital_frequency"])


def english_capital(response: str, kw: dict[str, Any]) -> bool:
    """All letters upper case, and in English (langdetect; a text it cannot classify passes)."""
    return response.isupper() and detect_language(response) in ("en", None)


def english_lowercase(response: str, kw: dict[str, Any]) -> bool:
    """All letters lower case, and in English (langdetect; a text it cannot classify passes)."""
    return response.islower() and detect_language(response) in ("en", None)


def no_comma(response: str, kw: dict[str, Any]) -> bool:
    """No comma (U+002C) anywhere."""
    return "," not in response


# --- kwargs: what lm-eval accepts without drawing a random value or failing --------------------------------


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _positive(v: Any) -> str | None:
    ok = _int(v) and v >= 1
    return None if ok else "a positive integer (lm-eval replaces 0 and negative counts by a random one)"


def _integer(v: Any) -> str | None:
    return None if _int(v) else "a non-zero integer"


def _relation(v: Any) -> str | None:
    return None if v in RELATIONS else " or ".join(repr(r) for r in RELATIONS)


def _text(v: Any) -> str | None:
    return None if isinstance(v, str) else "a non-empty string"


def _letter(v: Any) -> str | None:
    ok = isinstance(v, str) and len(v) == 1 and len(v.lower()) == 1
    return None if ok else "a single character"


def _patterns(wrap: Callable[[str], str]) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if not isinstance(v, list) or not all(isinstance(w, str) for w in v):
            return "a non-empty list of strings"
        bad = [w for w in v if not _compiles(wrap(w))]
        return f"a list of valid regular expressions (lm-eval fails on {bad[0]!r})" if bad else None

    return check


def _pattern(wrap: Callable[[str], str]) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if not isinstance(v, str):
            return "a non-empty string"
        return None if _compiles(wrap(v)) else f"a valid regular expression (lm-eval fails on {v!r})"

    return check


def _language(v: Any) -> str | None:
    ok = isinstance(v, str) and v in LANGUAGES
    return None if ok else f"one of lm-eval's language codes ({', '.join(sorted(LANGUAGES))})"


@dataclass(frozen=True)
class Instruction:
    """A verifiable instruction: its check and its kwargs (name -> validator returning what was expected)."""

    check: Check
    kwargs: Mapping[str, Callable[[Any], str | None]]


INSTRUCTIONS: dict[str, Instruction] = {
    "keywords:existence": Instruction(existence, {"keywords": _patterns(lambda w: w)}),
    "keywords:frequency": Instruction(
        frequency, {"keyword": _pattern(str.strip), "frequency": _positive, "relation": _relation}
    ),
    "keywords:forbidden_words": Instruction(forbidden_words, {"forbidden_words": _patterns(lambda w: rf"\b{w}\b")}),
    "keywords:letter_frequency": Instruction(
        letter_frequency, {"letter": _letter, "let_frequency": _positive, "let_relation": _relation}
    ),
    "language:response_language": Instruction(response_language, {"language": _language}),
    "length_constraints:number_sentences": Instruction(
        number_sentences, {"num_sentences": _positive, "relation": _relation}
    ),
    "length_constraints:number_paragraphs": Instruction(number_paragraphs, {"num_paragraphs": _positive}),
    "length_constraints:number_words": Instruction(number_words, {"num_words": _positive, "relation": _relation}),
    "length_constraints:nth_paragraph_first_word": Instruction(
        nth_paragraph_first_word, {"num_paragraphs": _positive, "nth_paragraph": _positive, "first_word": _text}
    ),
    "detectable_content:number_placeholders": Instruction(fmt.number_placeholders, {"num_placeholders": _positive}),
    "detectable_content:postscript": Instruction(
        fmt.postscript, {"postscript_marker": _pattern(fmt.postscript_pattern)}
    ),
    "detectable_format:number_bullet_lists": Instruction(fmt.number_bullet_lists, {"num_bullets": _positive}),
    "detectable_format:constrained_response": Instruction(fmt.constrained_response, {}),
    "detectable_format:number_highlighted_sections": Instruction(
        fmt.number_highlighted_sections, {"num_highlights": _positive}
    ),
    "detectable_format:multiple_sections": Instruction(
        fmt.multiple_sections, {"section_spliter": _pattern(fmt.section_pattern), "num_sections": _positive}
    ),
    "detectable_format:json_format": Instruction(fmt.json_format, {}),
    "detectable_format:title": Instruction(fmt.title, {}),
    "combination:two_responses": Instruction(fmt.two_responses, {}),
    "combination:repeat_prompt": Instruction(fmt.repeat_prompt, {"prompt_to_repeat": _text}),
    "startend:end_checker": Instruction(fmt.end_checker, {"end_phrase": _text}),
    "startend:quotation": Instruction(fmt.quotation, {}),
    "change_case:capital_word_frequency": Instruction(
        capital_word_frequency, {"capital_frequency": _integer, "capital_relation": _relation}
    ),
    "change_case:english_capital": Instruction(english_capital, {}),
    "change_case:english_lowercase": Instruction(english_lowercase, {}),
    "punctuation:no_comma": Instruction(no_comma, {}),
}


def given_kwargs(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """The kwargs lm-eval passes on: it drops every falsy value (the HF dataset stores every kwarg name in
    every row, the unused ones as None; a 0, "" or [] is dropped the same way)."""
    return {k: v for k, v in (raw or {}).items() if v}


def kwargs_problem(instruction_id: str, raw: Any) -> str | None:
    """What is wrong with an instruction's kwargs (unknown id, unknown/missing names, values lm-eval would
    replace by a random one or fail on), or None."""
    instruction = INSTRUCTIONS.get(instruction_id)
    if instruction is None:
        return f"unknown instruction id {instruction_id!r}"
    if raw is not None and not isinstance(raw, Mapping):
        return f"kwargs of {instruction_id} must be an object, got {type(raw).__name__}"
    kw = given_kwargs(raw)
    unknown = sorted(set(kw) - set(instruction.kwargs))
    if unknown:
        return (
            f"{instruction_id} takes no kwarg {', '.join(unknown)} (takes: {', '.join(instruction.kwargs) or 'none'})"
        )
    for name, validator in instruction.kwargs.items():
        if name not in kw:
            return f"{instruction_id} needs kwarg {name!r} (lm-eval draws a missing, null, 0 or empty one at random)"
        expected = validator(kw[name])
        if expected:
            return f"{instruction_id} kwarg {name!r} must be {expected}, got {kw[name]!r}"
    if "nth_paragraph" in kw and kw["nth_paragraph"] > kw["num_paragraphs"]:
        return f"{instruction_id} kwarg 'nth_paragraph' must be at most num_paragraphs, got {kw['nth_paragraph']!r}"
    return None


def follows(instruction_id: str, kwargs: Mapping[str, Any] | None, response: str) -> bool:
    """Whether a (non-blank) response follows the instruction; a blank response follows none."""
    return bool(response.strip()) and INSTRUCTIONS[instruction_id].check(response, given_kwargs(kwargs))


def loose_variants(response: str) -> list[str]:
    """IFEval's 8 loose variants: as is, without its first line, its last line, both; each also without `*`."""
    lines = response.split("\n")
    trimmed = [response, "\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return trimmed + [t.replace("*", "") for t in trimmed]


def evaluate(
    instruction_ids: Sequence[str], kwargs: Sequence[Mapping[str, Any] | None], response: str
) -> tuple[list[bool], list[bool]]:
    """(strict, loose) per instruction: strict on the response as is, loose on any of its 8 variants (the
    first is the response as is, whose verdict strict already has)."""
    variants = loose_variants(response)[1:]
    strict = [follows(i, kw, response) for i, kw in zip(instruction_ids, kwargs, strict=True)]
    loose = [
        ok or any(follows(i, kw, v) for v in variants)
        for i, kw, ok in zip(instruction_ids, kwargs, strict, strict=True)
    ]
    return strict, loose
