"""`evalflow rescore RUN_ID`: a new run from an existing run's completions, scored by today's environments (or
a new config's), with no request to any server. The config is the source run's own (its credentials were
never recorded: they come from blocks and the environment, as for any run), or one given instead; every batch
must find its completions cached, or the command fails before anything is written."""

from __future__ import annotations

from typing import Any

from core.config import EvalConfig
from core.overrides import apply_override, config_data, validated
from core.record import RunRecord
from core.secrets import MASK
from core.store import Store
from errors import EvalflowError


class RescoreError(EvalflowError, ValueError):
    """The run to rescore is not in the store (`--store` names the right one), or a batch of it has no cached
    completions to rescore; the message says which."""

    kind = "config"


def source_record(store: Store, run_id: str) -> RunRecord:
    """The run's record (metrics.json) from the store; a run that is not there fails naming where it looked."""
    url = store.path("runs", run_id, "metrics.json")
    if not store.exists(url):
        raise RescoreError(f"rescore: no run {run_id!r} in {store.url} ({url} is missing); give --store")
    return RunRecord.model_validate_json(store.read_text(url))


def _unmasked(value: Any) -> Any:
    """The recorded config without its masked values (a credential's place): they come from blocks or the
    environment again, as in any run."""
    if isinstance(value, dict):
        return {k: _unmasked(v) for k, v in value.items() if v != MASK}
    if isinstance(value, list):
        return [_unmasked(v) for v in value]
    return value


def rescore_config(record: RunRecord, config_path: str | None, overrides: list[str]) -> EvalConfig:
    """The new run's config: `config_path`'s if given, else the source run's; overrides applied to either."""
    if config_path is not None:
        data = config_data(config_path, overrides)
    else:
        data = _unmasked(record.run_info.config)
        for override in overrides:
            apply_override(data, override)
    return validated(EvalConfig, data)
