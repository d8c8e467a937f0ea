"""Text measures the IFEval checks share: words, sentences, capitalised words and the response's language.

Each is computed with the tool lm-evaluation-harness 0.4.13's IFEval uses, so that the counts are its
counts (the regex approximations used before disagreed on about 5% of the edge corpus's sentence, word
and capital-word cases, tests/fidelity/ifeval_corpus.py): nltk 3.10.4 (pinned) for words
(`RegexpTokenizer(r"\\w+")`, matched with the `regex` engine, which counts combining marks as word
characters where `re` does not), sentences (the Punkt model `english`, what lm-eval's
`nltk.data.load("nltk:tokenizers/punkt/english.pickle")` returns in nltk 3.10) and capital words
(`nltk.word_tokenize`: Punkt sentences, then the Treebank word tokenizer that splits CANNOT, GONNA and
DON'T in two); langdetect for languages. The Punkt data ships in `data/nltk/` and is never downloaded:
nltk is pointed at that folder when IFEval first scores (nltk is imported only then, as it is slow to
import). lm-eval leaves langdetect unseeded, so its verdict on a text langdetect finds ambiguous is
random; evalflow seeds it with 0, and gives the verdicts lm-eval gives when seeded so.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from envs.base import REPO_ROOT

NLTK_DATA = REPO_ROOT / "data" / "nltk"
PUNKT_DIR = NLTK_DATA / "tokenizers" / "punkt_tab" / "english"
PUNKT_FILES = ("abbrev_types.txt", "collocations.tab", "ortho_context.tab", "sent_starters.txt")
LANGDETECT_SEED = 0


class MissingNltkData(RuntimeError):
    """The Punkt model that ships with evalflow is not where it belongs."""


@dataclass(frozen=True)
class _Tokenizers:
    words: Any  # nltk.tokenize.RegexpTokenizer(r"\w+")
    sentences: Any  # nltk.tokenize.PunktTokenizer("english"), from data/nltk
    treebank: Any  # nltk.tokenize.NLTKWordTokenizer, as nltk.word_tokenize uses it


def _require_punkt(folder: Path = PUNKT_DIR) -> None:
    missing = [name for name in PUNKT_FILES if not (folder / name).is_file()]
    if missing:
        raise MissingNltkData(
            f"ifeval: nltk's Punkt model is missing from {folder} ({', '.join(missing)}); it ships with "
            "evalflow (see data/nltk/README.md) and is never downloaded: restore data/nltk/ from the repository"
        )


@cache
def _tokenizers() -> _Tokenizers:
    """nltk's tokenizers, loaded once, with nltk looking in evalflow's data/nltk/ before anywhere else."""
    _require_punkt()
    import nltk
    from nltk.tokenize import NLTKWordTokenizer, PunktTokenizer, RegexpTokenizer

    if str(NLTK_DATA) not in nltk.data.path:
        nltk.data.path.insert(0, str(NLTK_DATA))
    return _Tokenizers(RegexpTokenizer(r"\w+"), PunktTokenizer("english"), NLTKWordTokenizer())


def count_words(text: str) -> int:
    """IFEval's word count: runs of `\\w` characters, in the `regex` engine's Unicode sense."""
    return len(_tokenizers().words.tokenize(text))


def split_sentences(text: str) -> list[str]:
    """The text's sentences as Punkt (English model) finds them."""
    return list(_tokenizers().sentences.tokenize(text))


def count_sentences(text: str) -> int:
    """IFEval's sentence count (see split_sentences)."""
    return len(split_sentences(text))


def word_tokens(text: str) -> list[str]:
    """`nltk.word_tokenize(text)`: Punkt sentences, each split by the improved Treebank word tokenizer."""
    tools = _tokenizers()
    return [token for sentence in tools.sentences.tokenize(text) for token in tools.treebank.tokenize(sentence)]


def count_capital_words(text: str) -> int:
    """IFEval's capital words: word tokens for which str.isupper holds (a cased letter, none lower case)."""
    return sum(token.isupper() for token in word_tokens(text))


@cache
def _detector_factory() -> Any:
    """langdetect's profiles, loaded once, with a fixed seed so that a text always gets the same language."""
    from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory

    factory = DetectorFactory()
    factory.load_profile(PROFILES_DIRECTORY)
    factory.seed = LANGDETECT_SEED
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
