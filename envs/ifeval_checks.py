"""IFEval's verifiable instructions: the registry of all 25 ids with their kwargs, and strict/loose evaluation.

The checks follow the public definitions of IFEval (Zhou et al. 2023, google-research
instruction_following_eval, as lm-evaluation-harness runs them), re-implemented for this project. Where
the reference borrows a tool (nltk's tokenizers, its sentence splitter) envs.ifeval_text documents the
approximation. Keywords, forbidden words and section splitters are matched literally (the reference
compiles them as regular expressions; for the words it is given the two agree).
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

Check = Callable[[str, dict[str, Any]], bool]


def compare(count: int, relation: str, bound: int) -> bool:
    """IFEval's two relations: "less than" is count < bound, "at least" is count >= bound."""
    return count < bound if relation == "less than" else count >= bound


# --- keywords, language, length, case, punctuation -------------------------------------------------------


def existence(response: str, kw: dict[str, Any]) -> bool:
    """Every one of `keywords` appears (case-insensitive, also inside longer words)."""
    return all(re.search(re.escape(k), response, flags=re.IGNORECASE) for k in kw["keywords"])


def frequency(response: str, kw: dict[str, Any]) -> bool:
    """`keyword` occurs (case-insensitive, also inside longer words) less than / at least `frequency` times."""
    found = len(re.findall(re.escape(kw["keyword"]), response, flags=re.IGNORECASE))
    return compare(found, kw["relation"], kw["frequency"])


def forbidden_words(response: str, kw: dict[str, Any]) -> bool:
    """None of `forbidden_words` appears as a whole word (case-insensitive)."""
    return not any(
        re.search(r"\b" + re.escape(w) + r"\b", response, flags=re.IGNORECASE) for w in kw["forbidden_words"]
    )


def letter_frequency(response: str, kw: dict[str, Any]) -> bool:
    """The character `letter` (case-insensitive) occurs less than / at least `let_frequency` times."""
    found = Counter(response.lower())[kw["letter"].lower()]
    return compare(found, kw["let_relation"], kw["let_frequency"])


def response_language(response: str, kw: dict[str, Any]) -> bool:
    """langdetect finds the response in `language` (ISO 639-1); a text it cannot classify passes."""
    found = detect_language(response)
    return found is None or found == kw["language"]


def number_sentences(response: str, kw: dict[str, Any]) -> bool:
    """Less than / at least `num_sentences` sentences."""
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
    """Words in all capitals occur less than / at least `capital_frequency` times."""
    return compare(count_capital_words(response), kw["capital_relation"], kw["capital_frequency"])


def english_capital(response: str, kw: dict[str, Any]) -> bool:
    """All letters upper case, and in English (langdetect; a text it cannot classify passes)."""
    return response.isupper() and detect_language(response) in ("en", None)


def english_lowercase(response: str, kw: dict[str, Any]) -> bool:
    """All letters lower case, and in English (langdetect; a text it cannot classify passes)."""
    return response.islower() and detect_language(response) in ("en", None)


def no_comma(response: str, kw: dict[str, Any]) -> bool:
    """No comma anywhere."""
    return "," not in response


# --- kwargs ---------------------------------------------------------------------------------------------


def _count(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else "a non-negative integer"


def _position(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else "a positive integer"


def _relation(v: Any) -> str | None:
    return None if v in RELATIONS else " or ".join(repr(r) for r in RELATIONS)


def _text(v: Any) -> str | None:
    return None if isinstance(v, str) and v.strip() else "a non-empty string"


def _char(v: Any) -> str | None:
    return None if isinstance(v, str) and len(v) == 1 else "a single character"


def _words(v: Any) -> str | None:
    ok = isinstance(v, list) and v and all(isinstance(w, str) and w.strip() for w in v)
    return None if ok else "a non-empty list of non-empty strings"


def _language(v: Any) -> str | None:
    ok = isinstance(v, str) and re.fullmatch(r"[a-z]{2,3}(-[a-z]{2})?", v)
    return None if ok else "an ISO 639-1 language code such as 'fr'"


@dataclass(frozen=True)
class Instruction:
    """A verifiable instruction: its check and its kwargs (name -> validator returning what was expected)."""

    check: Check
    kwargs: Mapping[str, Callable[[Any], str | None]]


INSTRUCTIONS: dict[str, Instruction] = {
    "keywords:existence": Instruction(existence, {"keywords": _words}),
    "keywords:frequency": Instruction(frequency, {"keyword": _text, "frequency": _count, "relation": _relation}),
    "keywords:forbidden_words": Instruction(forbidden_words, {"forbidden_words": _words}),
    "keywords:letter_frequency": Instruction(
        letter_frequency, {"letter": _char, "let_frequency": _count, "let_relation": _relation}
    ),
    "language:response_language": Instruction(response_language, {"language": _language}),
    "length_constraints:number_sentences": Instruction(
        number_sentences, {"num_sentences": _count, "relation": _relation}
    ),
    "length_constraints:number_paragraphs": Instruction(number_paragraphs, {"num_paragraphs": _count}),
    "length_constraints:number_words": Instruction(number_words, {"num_words": _count, "relation": _relation}),
    "length_constraints:nth_paragraph_first_word": Instruction(
        nth_paragraph_first_word, {"num_paragraphs": _count, "nth_paragraph": _position, "first_word": _text}
    ),
    "detectable_content:number_placeholders": Instruction(fmt.number_placeholders, {"num_placeholders": _count}),
    "detectable_content:postscript": Instruction(fmt.postscript, {"postscript_marker": _text}),
    "detectable_format:number_bullet_lists": Instruction(fmt.number_bullet_lists, {"num_bullets": _count}),
    "detectable_format:constrained_response": Instruction(fmt.constrained_response, {}),
    "detectable_format:number_highlighted_sections": Instruction(
        fmt.number_highlighted_sections, {"num_highlights": _count}
    ),
    "detectable_format:multiple_sections": Instruction(
        fmt.multiple_sections, {"section_spliter": _text, "num_sections": _count}
    ),
    "detectable_format:json_format": Instruction(fmt.json_format, {}),
    "detectable_format:title": Instruction(fmt.title, {}),
    "combination:two_responses": Instruction(fmt.two_responses, {}),
    "combination:repeat_prompt": Instruction(fmt.repeat_prompt, {"prompt_to_repeat": _text}),
    "startend:end_checker": Instruction(fmt.end_checker, {"end_phrase": _text}),
    "startend:quotation": Instruction(fmt.quotation, {}),
    "change_case:capital_word_frequency": Instruction(
        capital_word_frequency, {"capital_frequency": _count, "capital_relation": _relation}
    ),
    "change_case:english_capital": Instruction(english_capital, {}),
    "change_case:english_lowercase": Instruction(english_lowercase, {}),
    "punctuation:no_comma": Instruction(no_comma, {}),
}


def given_kwargs(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """The kwargs actually given: the HF dataset stores every kwarg name in every row, absent ones as None."""
    return {k: v for k, v in (raw or {}).items() if v is not None}


def kwargs_problem(instruction_id: str, raw: Any) -> str | None:
    """What is wrong with an instruction's kwargs (unknown id, unknown/missing names, wrong types), or None."""
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
            return f"{instruction_id} needs kwarg {name!r}"
        expected = validator(kw[name])
        if expected:
            return f"{instruction_id} kwarg {name!r} must be {expected}, got {kw[name]!r}"
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
    """(strict, loose) per instruction: strict on the response as is, loose on any of its 8 variants."""
    variants = loose_variants(response)
    strict = [follows(i, kw, response) for i, kw in zip(instruction_ids, kwargs, strict=True)]
    loose = [any(follows(i, kw, v) for v in variants) for i, kw in zip(instruction_ids, kwargs, strict=True)]
    return strict, loose
