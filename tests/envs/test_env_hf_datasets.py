"""Datasets through the Hugging Face `datasets` library (`hf-dataset:` specs), offline: local saved
datasets and data files load and validate like JSONL rows; a hub dataset that is not cached fails
with a DatasetError that says what file to provide instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envs.base import REPO_ROOT, DatasetError
from envs.datasets import is_hf_dataset, load_rows, parse_hf_dataset
from envs.gsm8k import GSM8KEnv

# Rows as in the original GSM8K (openai/gsm8k, config main): no id, a worked solution ending `#### N`.
ORIGINAL = [
    {"question": "Ann has 3 bags of 4 apples. How many apples?", "answer": "3 * 4 = <<3*4=12>>12\n#### 12"},
    {"question": "Bob had 10 pens and lost 3. How many are left?", "answer": "10 - 3 = <<10-3=7>>7\n#### 7"},
    {"question": "A box holds 1,000 nails; 2 boxes hold?", "answer": "2 * 1000 = 2000\n#### 2,000"},
]
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@pytest.fixture
def hf_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The `datasets` library offline, with its cache in a temporary folder.

    The library reads these variables when it is imported, so the module constants are patched too
    (another test may have imported it already)."""
    import datasets
    import huggingface_hub.constants

    cache = tmp_path / "hf-home"
    for name, value in {**OFFLINE_ENV, "HF_HOME": str(cache), "HF_DATASETS_CACHE": str(cache / "datasets")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache / "datasets")
    datasets.disable_progress_bars()
    return datasets


def test_spec_syntax() -> None:
    assert parse_hf_dataset("hf-dataset:openai/gsm8k?config=main&split=test") == {
        "path": "openai/gsm8k",
        "config": "main",
        "split": "test",
        "revision": None,
        "data_files": None,
    }
    assert parse_hf_dataset("hf-dataset:openai/gsm8k")["split"] == "test"  # the default split
    assert parse_hf_dataset("hf-dataset://openai/gsm8k?revision=abc")["path"] == "openai/gsm8k"
    assert parse_hf_dataset("hf-dataset:///data/saved")["path"] == "/data/saved"
    files = parse_hf_dataset("hf-dataset:json?data_files=a.jsonl&data_files=b.jsonl&split=train")
    assert files["data_files"] == ["a.jsonl", "b.jsonl"] and files["split"] == "train"


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("hf-dataset:", "no dataset named"),
        ("hf-dataset:?split=test", "no dataset named"),
        ("hf-dataset:openai/gsm8k?subset=main", r"unknown parameter\(s\) subset; known: config, split"),
        ("hf-dataset:openai/gsm8k?split=", "'split' is empty"),
        ("hf-dataset:openai/gsm8k?split=a&split=b", "'split' given 2 times"),
    ],
)
def test_bad_specs(spec: str, problem: str) -> None:
    with pytest.raises(DatasetError, match=problem):
        load_rows(spec, GSM8KEnv())


def test_files_keep_going_through_fsspec() -> None:
    # fsspec's own hf:// protocol reads a single file of a hub repository: not a `datasets` spec
    assert not is_hf_dataset("hf://datasets/openai/gsm8k/main/test-00000-of-00001.parquet")
    assert not is_hf_dataset("data/gsm8k/test.jsonl") and is_hf_dataset("hf-dataset:openai/gsm8k")


def unused_opener(url: str) -> Any:
    raise AssertionError(f"the store's opener was used for {url}")


def test_saved_dataset_loads_and_validates(hf_offline: Any, tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    hf_offline.Dataset.from_list(ORIGINAL).save_to_disk(str(folder))
    env = GSM8KEnv()
    rows = load_rows(f"hf-dataset:{folder}", env, opener=unused_opener)  # the library opens its own files
    assert rows == ORIGINAL
    ids = [env.prompt_id(r) for r in rows]
    assert all(i.startswith("gsm8k-") for i in ids) and len(set(ids)) == 3
    assert [env.reference(r) for r in rows] == ["12", "7", "2000"]
    assert load_rows(f"hf-dataset:{folder}", env, limit=2) == ORIGINAL[:2]


def test_saved_dataset_dict_picks_the_split(hf_offline: Any, tmp_path: Path) -> None:
    folder = tmp_path / "dict"
    splits = {"train": ORIGINAL[:1], "test": ORIGINAL[1:]}
    hf_offline.DatasetDict({k: hf_offline.Dataset.from_list(v) for k, v in splits.items()}).save_to_disk(str(folder))
    assert load_rows(f"hf-dataset:{folder}", GSM8KEnv()) == ORIGINAL[1:]
    assert load_rows(f"hf-dataset:{folder}?split=train", GSM8KEnv()) == ORIGINAL[:1]
    with pytest.raises(DatasetError, match=r"no split 'validation' in .*; splits: train, test"):
        load_rows(f"hf-dataset:{folder}?split=validation", GSM8KEnv())


def test_data_files_through_a_packaged_builder(hf_offline: Any, tmp_path: Path) -> None:
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ORIGINAL), encoding="utf-8")
    spec = f"hf-dataset:json?data_files={data}&split=train"
    assert load_rows(spec, GSM8KEnv()) == ORIGINAL
    with pytest.raises(DatasetError, match=r"Unknown split \"test\""):
        load_rows(f"hf-dataset:json?data_files={data}", GSM8KEnv())  # the json builder names its split train
    with pytest.raises(DatasetError, match=r"cannot load Hugging Face dataset 'json'"):
        load_rows(f"hf-dataset:json?data_files={tmp_path / 'missing.jsonl'}&split=train", GSM8KEnv())


def test_local_data_folder_with_split_files(hf_offline: Any, tmp_path: Path) -> None:
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    for split, rows in {"train": ORIGINAL[:1], "test": ORIGINAL[1:]}.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert load_rows(f"hf-dataset:{folder}", GSM8KEnv()) == ORIGINAL[1:]
    assert load_rows(f"hf-dataset:{folder}?split=train", GSM8KEnv()) == ORIGINAL[:1]


def test_invalid_rows_are_reported_with_their_row_number(hf_offline: Any, tmp_path: Path) -> None:
    bad_answer = [*ORIGINAL[:2], {"question": "How many?", "answer": "twelve"}]
    folder = tmp_path / "bad-answer"
    hf_offline.Dataset.from_list(bad_answer).save_to_disk(str(folder))
    spec = f"hf-dataset:{folder}"
    with pytest.raises(DatasetError, match=rf"^{spec} row 3: 'answer' must be a number"):
        load_rows(spec, GSM8KEnv())

    # a row without a question (the column is null there)
    folder = tmp_path / "no-question"
    hf_offline.Dataset.from_list([ORIGINAL[0], {"answer": "#### 5"}]).save_to_disk(str(folder))
    with pytest.raises(DatasetError, match=rf"^hf-dataset:{folder} row 2: missing or empty 'question'"):
        load_rows(f"hf-dataset:{folder}", GSM8KEnv())

    folder = tmp_path / "duplicate"
    hf_offline.Dataset.from_list([*ORIGINAL, ORIGINAL[1]]).save_to_disk(str(folder))
    with pytest.raises(DatasetError, match=r" row 4: duplicate prompt id 'gsm8k-[0-9a-f]+' \(first on row 2\)"):
        load_rows(f"hf-dataset:{folder}", GSM8KEnv())


def test_empty_datasets(hf_offline: Any, tmp_path: Path) -> None:
    data = tmp_path / "empty.jsonl"
    data.write_text("", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"^hf-dataset:json\?data_files=.*: "):
        load_rows(f"hf-dataset:json?data_files={data}&split=train", GSM8KEnv())
    # datasets 5.2 cannot read back a saved empty dataset (IndexError): still a DatasetError naming the spec
    folder = tmp_path / "empty"
    hf_offline.Dataset.from_dict({"question": [], "answer": []}).save_to_disk(str(folder))
    with pytest.raises(DatasetError, match=rf"^hf-dataset:{folder}: (the dataset has no rows|cannot load)"):
        load_rows(f"hf-dataset:{folder}", GSM8KEnv())


def offline_message_ok(message: str, spec: str) -> None:
    assert message.startswith(f"{spec}: cannot load Hugging Face dataset 'evalflow-tests/not-cached'")
    assert "the hub cannot be reached and the dataset is not in the local datasets cache" in message
    assert "pass benchmarks.<i>.dataset=/path/to/test.jsonl" in message
    assert "JSONL or parquet file of 'gsm8k' rows, with the fields of the shipped data/gsm8k/test.jsonl" in message


def test_hub_dataset_offline_and_not_cached(hf_offline: Any) -> None:
    spec = "hf-dataset:evalflow-tests/not-cached?config=main&split=test"
    with pytest.raises(DatasetError) as info:
        load_rows(spec, GSM8KEnv())
    offline_message_ok(str(info.value), spec)


def test_hub_dataset_offline_in_a_fresh_process(tmp_path: Path) -> None:
    """What a run sees: the variables set before the library is imported, nothing patched."""
    spec = "hf-dataset:evalflow-tests/not-cached?config=main&split=test"
    script = (
        "import sys\n"
        "from envs.base import DatasetError\n"
        "from envs.datasets import load_rows\n"
        "from envs.gsm8k import GSM8KEnv\n"
        "try:\n"
        f"    load_rows({spec!r}, GSM8KEnv())\n"
        "except DatasetError as e:\n"
        "    print(e)\n"
        "    sys.exit(3)\n"
    )
    env = {**os.environ, **OFFLINE_ENV, "HF_HOME": str(tmp_path / "hf-home")}
    env.pop("HF_DATASETS_CACHE", None)
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    offline_message_ok(proc.stdout.strip(), spec)
