"""EvalConfig validation and the command line's dotted overrides."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.config import BenchmarkConfig, EvalConfig, ModelConfig, StoreConfig
from core.overrides import OverrideError, resolve_config


def test_defaults_are_the_cpu_demo() -> None:
    cfg = EvalConfig()
    assert cfg.model.source == "smollm2-135m-instruct"
    assert cfg.server.mode == "managed"
    assert [b.name for b in cfg.benchmarks] == ["gsm8k"]


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"benchmarks": [{"name": "gsm9k"}]}, "benchmarks.0.name", "unknown environment 'gsm9k'"),
        (
            {"benchmarks": [{"name": "gsm8k", "repeats": -1}]},
            "benchmarks.0.repeats",
            "greater than or equal to 1",
        ),
        ({"benchmarks": []}, "benchmarks", "at least 1"),
        ({"store": {"url": "s4://bucket/x"}}, "store.url", "unknown protocol 's4'"),
        ({"server": {"mode": "external"}}, "server", "server.base_url is required"),
        ({"server": {"mode": "external", "base_url": "localhost:8000"}}, "server", "not an http(s) URL"),
        ({"sampling": {"temperature": -0.1}}, "sampling.temperature", "greater than or equal to 0"),
        ({"sampling": {"temprature": 0.5}}, "sampling", "unknown field 'temprature' (did you mean 'temperature'?)"),
        ({"benchmark": [{"name": "gsm8k"}]}, "", "unknown field 'benchmark' (did you mean 'benchmarks'?)"),
        ({"model": {"colour": "red"}}, "model", "unknown field 'colour'; the fields here: cache_dir, config_path"),
        (
            {"benchmarks": [{"name": "gsm8k"}, {"name": "gsm8k"}]},
            "benchmarks",
            "'gsm8k' is already benchmarks.0; give each setting of an environment its own label",
        ),
        (
            {"benchmarks": [{"name": "gsm8k"}, {"name": "gsm8k", "label": "again"}]},
            "benchmarks",
            "benchmarks.1 (again) is the same setting as benchmarks.0",
        ),
        (
            {"benchmarks": [{"name": "gsm8k", "label": "math"}]},
            "benchmarks",
            "'math' names another environment",
        ),
        (
            {"benchmarks": [{"name": "gsm8k", "label": "8 shot/x"}]},
            "benchmarks.0.label",
            "use letters, digits",
        ),
        (
            {"benchmarks": [{"name": "gsm8k", "max_tokens": 0}]},
            "benchmarks.0.max_tokens",
            "greater than or equal to 1",
        ),
        (
            {"server": {"chat_template": "configs/chat_templates/nope.jinja"}},
            "server.chat_template",
            "no such file 'configs/chat_templates/nope.jinja'",
        ),
    ],
)
def test_bad_config_names_the_field(data: dict, field: str, words: str) -> None:
    with pytest.raises(ValidationError) as info:
        EvalConfig.model_validate(data)
    text = str(info.value)
    assert field in text
    assert words in text


def test_secret_api_key_is_not_dumped() -> None:
    cfg = EvalConfig.model_validate(
        {"server": {"mode": "external", "base_url": "http://127.0.0.1:1/v1", "api_key": "sk-very-secret"}}
    )
    assert "sk-very-secret" not in cfg.model_dump_json()
    assert "sk-very-secret" not in repr(cfg)
    assert cfg.server.api_key.get_secret_value() == "sk-very-secret"


def test_dotted_overrides(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("benchmarks:\n  - name: gsm8k\n    repeats: 2\nsampling:\n  temperature: 0.7\n")
    cfg = resolve_config(str(path), ["sampling.temperature=0.6", "benchmarks.0.repeats=8", "benchmarks.0.limit=5"])
    assert cfg.sampling.temperature == 0.6
    assert cfg.benchmarks[0].repeats == 8
    assert cfg.benchmarks[0].limit == 5


def test_override_of_missing_list_index_is_an_error(tmp_path) -> None:
    with pytest.raises(OverrideError, match="not an index"):
        resolve_config(None, ["benchmarks.3.repeats=2"])


def test_local_paths_are_absolute_from_where_they_enter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A path typed relative to the caller's directory means the same file to every later step and
    subprocess (the converter, the worker), whatever their working directory."""
    (tmp_path / "model.Q4_1.gguf").write_bytes(b"GGUF")
    (tmp_path / "org").mkdir()
    monkeypatch.chdir(tmp_path)
    cfg = EvalConfig.model_validate(
        {
            "model": {"source": "model.Q4_1.gguf", "cache_dir": "ckpts", "config_path": "cfg/", "output_dir": "~/o"},
            "benchmarks": [{"name": "gsm8k", "dataset": "data/gsm8k.jsonl"}],
            "store": {"url": "runs"},
        }
    )
    assert cfg.model.source == str(tmp_path / "model.Q4_1.gguf")
    assert (cfg.model.cache_dir, cfg.model.config_path) == (str(tmp_path / "ckpts"), str(tmp_path / "cfg"))
    assert cfg.model.output_dir == str(Path.home() / "o")
    assert cfg.benchmarks[0].dataset == str(tmp_path / "data/gsm8k.jsonl")
    assert cfg.store.url == str(tmp_path / "runs")
    for kept in ("HuggingFaceTB/SmolLM2-135M-Instruct", "gpt2", "smollm2-135m-instruct", "s3://b/run/step_1"):
        assert ModelConfig(source=kept).source == kept  # hub ids, the default and URLs are not paths
    for missing in ("a/b/c", "missing.gguf"):  # preparation says what is missing, and relative to where
        assert ModelConfig(source=missing).source == missing
    for path in ("./org", "org", "org/", "./model.Q4_1.gguf"):
        assert ModelConfig(source=path).source == os.path.abspath(path)
    assert ModelConfig(source="org", kind="hub").source == "org"  # asked for as a hub id
    assert BenchmarkConfig(name="gsm8k", dataset="hf-dataset:openai/gsm8k?split=test").dataset.startswith("hf-dataset:")
    assert StoreConfig(url="s3://bucket/runs").url == "s3://bucket/runs"
