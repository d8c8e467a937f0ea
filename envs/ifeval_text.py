"""Text measures the IFEval checks share: words, sentences, capitalised words and the response's language.

Words are IFEval's (`\\w+` runs, as nltk's RegexpTokenizer(r"\\w+") counts them). Sentences, capitalised
words and languages need tools the reference checks borrow (a regex sentence splitter, nltk's word
tokenizer, langdetect); the first two are approximated here as documented on each function, and the
language comes from langdetect itself, imported only when a language check runs.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

# A period after one of these does not end a sentence (titles, company suffixes, Latin abbreviations).
ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "inc", "ltd", "co", "vs", "etc", "e.g", "i.e", "capt", "lt"}
)
# A sentence ends at a run of . ! ? (closing quotes or brackets may follow) before whitespace or the end.
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|$)")
# One letter, or letters joined by periods (an initial, U.S.A): the period is part of the word.
_INITIALS = re.compile(r"(?:[A-Za-z]\.)*[A-Za-z]")
# Treebank tokenizers split contractions off a word: DON'T -> DO + N'T, I'M -> I + 'M.
_CONTRACTION = re.compile(r"(?i)(?=n't\b)|(?='(?:s|m|d|re|ve|ll)\b)")


def count_words(text: str) -> int:
    """IFEval's word count: runs of word characters (letters, digits, underscore)."""
    return len(re.findall(r"\w+", text))


def _is_abbreviation(text: str, dot: int) -> bool:
    """Whether the single period at `dot` closes an abbreviation or initial rather than a sentence."""
    word = re.search(r"[\w.]*$", text[:dot])
    token = word.group() if word else ""
    return token.lower() in ABBREVIATIONS or bool(_INITIALS.fullmatch(token))


def split_sentences(text: str) -> list[str]:
    """Sentences of a text, approximating the splitter the reference checks use.

    Line breaks are spaces (a line without a full stop does not end a sentence); a sentence ends at
    `.`, `!`, `?` or an ellipsis followed by whitespace or the end of the text, except a single period
    after an abbreviation (Mr., Dr., Inc., e.g., ...) or an initial (J., U.S.). Decimals, URLs and file
    names hold no boundary (their periods are not followed by whitespace). Text after the last stop is
    one more sentence.
    """
    flat = " ".join(text.split())
    sentences, start = [], 0
    for m in _SENTENCE_END.finditer(flat):
        stops = m.group().rstrip("\"'”’)]")
        if stops == "." and _is_abbreviation(flat, m.start()):
            continue
        sentences.append(flat[start : m.end()])
        start = m.end()
    sentences.append(flat[start:])
    return [s.strip() for s in sentences if s.strip()]


def count_sentences(text: str) -> int:
    """The number of sentences (see split_sentences)."""
    return len(split_sentences(text))


def count_capital_words(text: str) -> int:
    """Words in capitals (str.isupper: at least one cased letter, none lower case).

    Approximates nltk's word_tokenize, which the reference uses: tokens are whitespace-separated with
    contractions split off (DON'T counts twice, as DO and N'T); punctuation attached to a word does not
    change whether it is upper case, and punctuation alone never is.
    """
    return sum(part.isupper() for token in text.split() for part in _CONTRACTION.split(token))


@cache
def _detector_factory() -> Any:
    """langdetect's profiles, loaded once, with a fixed seed so that a text always gets the same language."""
    from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory

    factory = DetectorFactory()
    factory.load_profile(PROFILES_DIRECTORY)
    factory.seed = 0
    return factory


def detect_language(text: str) -> str | None:
    """The ISO 639-1 code langdetect gives the text (zh-cn / zh-tw for Chinese), or None when it cannot tell
    (no letters at all, say): the reference checks then count the instruction as followed."""
    from langdetect.lang_detect_exception import LangDetectException

    detector = _detector_factory().create()
    detector.append(text)
    try:
        return str(detector.detect())
    except LangDetectException:
        return None
