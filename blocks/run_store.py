"""The `evalflow-run-store` block: where runs are written (a folder or s3://...), with the fsspec
options and the credentials to reach it. Credentials are secret fields: masked in the UI, in logs and
in every report (the flow passes them to fsspec only)."""

from __future__ import annotations

from typing import Any

from prefect.blocks.core import Block
from pydantic import Field, SecretStr, field_validator

from core.config import StoreConfig


class RunStoreBlock(Block):
    """A run store: URL, fsspec options (endpoint_url, region, ...) and optional S3 credentials."""

    _block_type_name = "evalflow run store"
    _block_type_slug = "evalflow-run-store"
    _description = "Where evalflow writes runs and reports (a folder or s3://bucket/prefix), with credentials."

    url: str = Field(description="a folder, file:// or s3://bucket/prefix URL")
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="non-secret fsspec options, e.g. {client_kwargs: {endpoint_url: ...}}"
    )
    key: SecretStr | None = Field(default=None, description="access key id (s3fs `key`); empty: the environment's")
    secret: SecretStr | None = Field(default=None, description="secret access key (s3fs `secret`)")
    token: SecretStr | None = Field(default=None, description="session token (s3fs `token`), if any")

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str) -> str:
        return StoreConfig(url=value).url  # the same checks as a run's store.url

    def credentials(self) -> dict[str, str]:
        """The secret fsspec options, revealed: for filesystem calls only."""
        fields = {"key": self.key, "secret": self.secret, "token": self.token}
        return {name: value.get_secret_value() for name, value in fields.items() if value is not None}
