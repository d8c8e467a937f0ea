"""What every config model shares: unknown keys fail naming the field meant, and user paths become absolute
where they enter."""

from __future__ import annotations

import difflib
import os
import re
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, model_validator

URL_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def absolute_path(value: str) -> str:
    """A local path made absolute against this process's working directory (where a path typed by the
    user enters: the command line, a config file, the UI form of a run's worker), so every later step and
    every subprocess reads the same file whatever its own working directory; URLs (s3://, hf-dataset:)
    pass unchanged, `file://` is dropped."""
    value = value.removeprefix("file://")
    if URL_RE.match(value) or value.startswith("hf-dataset:"):
        return value
    return os.path.abspath(os.path.expanduser(value))


class Strict(BaseModel):
    """A config model: extra keys are refused, with the field a typo was probably meant to be."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_keys(cls, data: Any) -> Any:
        """An unknown key fails naming the field it was probably meant to be (`benchmark` -> `benchmarks`)."""
        if not isinstance(data, dict):
            return data
        fields = cast(dict[object, object], data)
        known = set(cls.model_fields)
        unknown = [key for key in fields if isinstance(key, str) and key not in known]
        if not unknown:
            return fields
        parts: list[str] = []
        guessed = True
        for key in unknown:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            parts.append(f"unknown field {key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            guessed = guessed and bool(close)
        fields = "" if guessed else f"; the fields here: {', '.join(sorted(known))}"
        raise ValueError("; ".join(parts) + fields)
