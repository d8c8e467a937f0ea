"""IFEval's structure checks: detectable_format, detectable_content, combination and startend instructions.

Each check takes the response and the instruction's kwargs (validated beforehand by envs.ifeval_checks) and
re-expresses the check of lm-evaluation-harness 0.4.13 (MIT; its IFEval code is Google's, Apache-2.0, from
google-research's instruction_following_eval, Zhou et al. 2023) line for line, quirks included: markers and
section splitters are regular expressions, a title is what `<<[^\\n]+>>` finds with the brackets stripped.
"""

from __future__ import annotations

import json
import re
from typing import Any

CONSTRAINED_RESPONSES = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
# The markdown fence a JSON answer may come in; the reference strips these prefixes, then a closing fence.
JSON_FENCES = ("```json", "```Json", "```JSON", "```")
TWO_RESPONSES_SEPARATOR = "******"


def number_placeholders(response: str, kw: dict[str, Any]) -> bool:
    """At least `num_placeholders` square-bracketed placeholders such as [name]."""
    return len(re.findall(r"\[.*?\]", response)) >= kw["num_placeholders"]


def postscript_pattern(marker: str) -> str:
    """The regular expression lm-eval looks for: P.S. / P.P.S tolerate a space between letters; any other
    marker is itself a regular expression (lower-cased, not escaped)."""
    marker = marker.strip()
    if marker == "P.P.S":
        return r"\s*p\.\s?p\.\s?s.*$"
    if marker == "P.S.":
        return r"\s*p\.\s?s\..*$"
    return r"\s*" + marker.lower() + r".*$"


def postscript(response: str, kw: dict[str, Any]) -> bool:
    """The marker's pattern occurs anywhere (not only at a line start) in the lower-cased response."""
    return bool(re.findall(postscript_pattern(kw["postscript_marker"]), response.lower(), flags=re.MULTILINE))


def number_bullet_lists(response: str, kw: dict[str, Any]) -> bool:
    """Exactly `num_bullets` markdown bullet lines (`* item` or `- item`)."""
    stars = re.findall(r"^\s*\*[^\*].*$", response, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", response, flags=re.MULTILINE)
    return len(stars) + len(dashes) == kw["num_bullets"]


def constrained_response(response: str, kw: dict[str, Any]) -> bool:
    """Contains one of the fixed answers "My answer is yes." / "no." / "maybe."."""
    return any(option in response.strip() for option in CONSTRAINED_RESPONSES)


def number_highlighted_sections(response: str, kw: dict[str, Any]) -> bool:
    """At least `num_highlights` non-empty highlights `*text*` or `**text**` (within one line)."""
    singles = re.findall(r"\*[^\n\*]*\*", response)
    doubles = re.findall(r"\*\*[^\n\*]*\*\*", response)
    found = sum(1 for h in singles if h.strip("*").strip()) + sum(1 for h in doubles if h[2:-2].strip())
    return found >= kw["num_highlights"]


def section_pattern(spliter: str) -> str:
    """A section opener: the stripped `section_spliter` (a regular expression, case-sensitive) and a number."""
    return r"\s?" + spliter.strip() + r"\s?\d+\s?"


def multiple_sections(response: str, kw: dict[str, Any]) -> bool:
    """At least `num_sections` sections, each opened by `section_spliter` and its number (e.g. "Section 2")."""
    return len(re.split(section_pattern(kw["section_spliter"]), response)) - 1 >= kw["num_sections"]


def json_format(response: str, kw: dict[str, Any]) -> bool:
    """The whole response parses as JSON, optionally inside a ``` or ```json fence."""
    text = response.strip()
    for fence in JSON_FENCES:
        text = text.removeprefix(fence)
    text = text.removesuffix("```").strip()
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def title(response: str, kw: dict[str, Any]) -> bool:
    """A title in double angular brackets, <<like this>>, on one line, non-blank once every leading `<` and
    trailing `>` is stripped (so `<<>>>` is no title, and `<<a>> b <<c>>` is one match)."""
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", response))


def two_responses(response: str, kw: dict[str, Any]) -> bool:
    """Exactly two different non-empty responses separated by ******; empty parts only at either end."""
    parts = response.split(TWO_RESPONSES_SEPARATOR)
    kept = []
    for i, part in enumerate(parts):
        if part.strip():
            kept.append(part.strip())
        elif 0 < i < len(parts) - 1:
            return False
    return len(kept) == 2 and kept[0] != kept[1]


def repeat_prompt(response: str, kw: dict[str, Any]) -> bool:
    """Starts with `prompt_to_repeat`, word for word (case and surrounding whitespace aside)."""
    return response.strip().lower().startswith(kw["prompt_to_repeat"].strip().lower())


def end_checker(response: str, kw: dict[str, Any]) -> bool:
    """Ends with `end_phrase` (case, surrounding whitespace and enclosing double quotes aside)."""
    return response.strip().strip('"').lower().endswith(kw["end_phrase"].strip().lower())


def quotation(response: str, kw: dict[str, Any]) -> bool:
    """The whole response is wrapped in double quotation marks."""
    text = response.strip()
    return len(text) > 1 and text[0] == '"' and text[-1] == '"'
