"""The judge: a second model that scores answers (the `judge` scorer kind of declarative tasks, or a Python
environment's `ask_judge`). Its own model, server and sampling; greedy by default, so a verdict is repeatable."""

from __future__ import annotations

from pydantic import Field, model_validator

from core.config import ModelConfig, SamplingConfig, ServerConfig
from core.config_base import Strict


class JudgeSampling(SamplingConfig):
    """The judge's sampling: greedy and short by default (a verdict, not an essay)."""

    temperature: float = Field(default=0.0, ge=0.0, le=5.0, description="the judge's temperature; 0: greedy")
    max_tokens: int = Field(default=256, ge=1, description="most tokens of one judge answer")


class JudgeConfig(Strict):
    """A judge model evalflow serves (managed: any source it can prepare, in a server slot of its own, started
    after collection when the policy's server has stopped) or reaches (external: `server.base_url`, its key in a
    server block). Verdicts are cached by the judge's fingerprint, the rendered rubric and this sampling."""

    model: ModelConfig = Field(default_factory=ModelConfig, description="the judge's checkpoint (as model)")
    server: ServerConfig = Field(
        default_factory=ServerConfig, description="the judge server: managed (started to judge) or external"
    )
    sampling: JudgeSampling = Field(default_factory=JudgeSampling, description="how the judge samples its verdicts")
    concurrency: int = Field(default=32, ge=1, description="judge requests in flight")

    @model_validator(mode="after")
    def _no_training_run(self) -> JudgeConfig:
        if self.model.steps is not None:
            raise ValueError("judge.model.steps: a judge is one checkpoint, not a training run")
        return self
