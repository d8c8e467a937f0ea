"""IFEval's text measures: nltk's counts from the Punkt model shipped in data/nltk/, never a download."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from envs import ifeval_text
from envs.ifeval_text import (
    NLTK_DATA,
    PUNKT_DIR,
    PUNKT_FILES,
    MissingNltkData,
    count_capital_words,
    count_sentences,
    count_words,
    split_sentences,
    word_tokens,
)

README = NLTK_DATA / "README.md"


def test_punkt_files_match_the_hashes_in_the_readme() -> None:
    listed = dict(re.findall(r"^\| (\S+) \| ([0-9a-f]{64}) \|$", README.read_text(), flags=re.MULTILINE))
    assert sorted(listed) == sorted(PUNKT_FILES)
    for name, digest in listed.items():
        assert hashlib.sha256((PUNKT_DIR / name).read_bytes()).hexdigest() == digest, name


def test_nltk_reads_the_shipped_model(monkeypatch: pytest.MonkeyPatch) -> None:
    import nltk

    def no_download(*args: object, **kwargs: object) -> None:
        raise AssertionError("IFEval must never download nltk data")

    monkeypatch.setattr(nltk, "download", no_download)
    ifeval_text._tokenizers.cache_clear()
    assert count_sentences("One. Two.") == 2
    assert nltk.data.path[0] == str(NLTK_DATA)
    assert Path(nltk.data.find("tokenizers/punkt_tab/english/")) == PUNKT_DIR


def test_missing_model_fails_with_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "abbrev_types.txt").write_text("")
    with pytest.raises(MissingNltkData) as e:
        ifeval_text._require_punkt(tmp_path)
    message = str(e.value)
    assert "\n" not in message and "collocations.tab" in message and "data/nltk" in message


def test_sentences_are_punkts() -> None:
    assert split_sentences("Mr. Smith arrived. Was he late?! No... he was early. See e.g. the log") == [
        "Mr. Smith arrived.",
        "Was he late?!",
        "No... he was early.",
        "See e.g.",
        "the log",
    ]
    # a bold run-in heading ending in a period: Punkt ends the sentence inside the bold markers
    assert split_sentences("**Overview:** The plan has three parts. **Step 1.** Mix the flour.") == [
        "**Overview:** The plan has three parts.",
        "**Step 1.",
        "** Mix the flour.",
    ]
    assert count_sentences('He said "Stop." Then left.\nNo stop here\nand here') == 3
    assert count_sentences("Pi is 3.14 and the site is example.com today.") == 1


def test_words_are_regex_word_runs_with_combining_marks() -> None:
    assert count_words("It's a well-known fact: 3.5 kg_total!") == 9
    # `re` would see 2 words in "e\u0301te\u0301" and 4 in Hindi; the `regex` engine nltk uses sees 1
    assert count_words("e\u0301te\u0301") == 1
    assert count_words("हिन्दी") == 1


def test_capital_words_are_treebank_tokens() -> None:
    assert word_tokens("CANNOT GONNA DON’T HELLO,WORLD") == [
        "CAN",
        "NOT",
        "GON",
        "NA",
        "DON",
        "’",
        "T",
        "HELLO",
        ",",
        "WORLD",
    ]
    assert count_capital_words("CANNOT GONNA DON’T HELLO,WORLD") == 8
    assert count_capital_words("DON'T stop. I'M HERE, OK? U.S. hi A-OK") == 8
    assert count_capital_words("no capitals 123 !!") == 0
