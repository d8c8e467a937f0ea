"""The one place that decides what is a secret: store credentials, API keys, tokens.

Everything that writes a config, an option dict or a parameter anywhere a person or a file can see
it (reports, metrics.json, artifacts, logs, saved blocks) goes through `redact` or `split`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

from pydantic import SecretStr

MASK = "***"

# Option and config keys whose values are secrets. `key`/`token`/`secret` alone are s3fs's names for
# the access key id, session token and secret key; the rest catches the usual spellings elsewhere.
SECRET_KEY = re.compile(
    r"^(key|token|secret)$|secret|passw|credential|api_?key|access_?key|session_?token|auth|bearer|private", re.I
)


def is_secret(name: object) -> bool:
    return bool(SECRET_KEY.search(str(name)))


def split(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(public, secret) halves of an fsspec option dict, searched one level into nested dicts
    (s3fs's `client_kwargs` may carry `aws_secret_access_key`)."""
    public: dict[str, Any] = {}
    secret: dict[str, Any] = {}
    for name, value in options.items():
        if is_secret(name):
            secret[name] = value.get_secret_value() if isinstance(value, SecretStr) else value
        elif isinstance(value, Mapping):
            inner_public, inner_secret = split(cast(Mapping[str, Any], value))
            public[name] = inner_public
            if inner_secret:
                secret[name] = inner_secret
        else:
            public[name] = value
    return public, secret


def merge(public: Mapping[str, Any], secret: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of `split`: the options to hand to fsspec."""
    merged = dict(public)
    for name, value in secret.items():
        if isinstance(value, Mapping) and isinstance(merged.get(name), Mapping):
            merged[name] = merge(merged[name], cast(Mapping[str, Any], value))
        else:
            merged[name] = value
    return merged


def redact(value: Any) -> Any:
    """A copy with every secret-looking key's value masked (SecretStr values too), for output."""
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, Mapping):
        return {k: MASK if is_secret(k) and v else redact(v) for k, v in cast(Mapping[Any, Any], value).items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in cast(Sequence[Any], value)]
    return value
