"""A judged benchmark's completions, collected before its judge runs: the same requests (so the same generation
key), scored by nobody. The judging phase then scores them from their file like any rescoring, with the judge's
server up and the policy's stopped, so one server slot is enough for both."""

from __future__ import annotations

import dataclasses
from typing import Any

from envs.base import Score, SingleTurnEnv
from tasks.collection.plan import Planned


class Unjudged(SingleTurnEnv):
    """`env`'s requests, with no verdict: what the policy's server collects for a judged benchmark."""

    name = "unjudged"
    version = "0"
    default_dataset = ""

    def __init__(self, env: SingleTurnEnv) -> None:
        super().__init__(**env.options)
        self.env = env
        self.name, self.version = env.name, env.version  # type: ignore[misc]  # the records name the benchmark's

    @classmethod
    def source_digest(cls) -> str | None:
        return None  # evalflow's own: scored in place

    def validate_row(self, row: dict[str, Any], where: str) -> None:
        self.env.validate_row(row, where)

    def prompt_id(self, row: dict[str, Any]) -> str:
        return self.env.prompt_id(row)

    def reference(self, row: dict[str, Any]) -> str:
        return self.env.reference(row)

    def prompt_templates(self) -> dict[str, Any]:
        return self.env.prompt_templates()

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        return self.env.messages(row)

    def prompt(self, row: dict[str, Any]) -> str | None:
        return self.env.prompt(row)

    def stop(self) -> list[str] | None:
        return self.env.stop()

    def score(self, row: dict[str, Any], completion: str) -> Score:
        return Score(0.0, False, None, {"judged": False})


def for_collection(work: list[Planned]) -> list[Planned]:
    """The run's batches as the policy's server collects them: a judged benchmark's batch that must be generated
    becomes its completions batch; one already judged, or whose completions are cached, waits for the judging
    phase (judging_plan)."""
    out = []
    for item in work:
        if not item.env.uses_judge:
            out.append(item)
        elif item.needs_server:
            assert isinstance(item.env, SingleTurnEnv), "a judged benchmark is single-turn (checked at preflight)"
            batch = dataclasses.replace(item.batch, key=item.batch.generation, completions=True)
            out.append(Planned(Unjudged(item.env), batch, stale=item.stale))
    return out
