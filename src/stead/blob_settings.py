"""The blob store's settings (``STEAD_BLOB_*``, ``STEAD_S3_*``), read alike by
the brain's settings (``stead.config``) and the sandbox host's
(``stead.sandbox_host.settings``): files, snapshots and mounts live in one
store, so both processes must take and refuse the same values."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings

from stead.blobs import BlobConfig, check_blob_url, check_s3_endpoint, check_s3_keys
from stead.durations import Seconds


class BlobSettings(BaseSettings):
    """A base of both settings classes, which give it ``model_config`` (the
    ``STEAD_`` prefix) and ``data_dir``."""

    data_dir: Path
    blob_url: str | None = None
    """``file:///dir`` (default ``<data_dir>/blobs``) or ``s3://bucket/prefix``."""
    s3_endpoint: str | None = None
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = Field(default=None, validate_default=True)
    """Checked even when unset: it goes with ``s3_access_key_id``."""
    blob_timeout_seconds: Seconds = 30.0
    """Longest the blob store may take over one call, or over one part of a
    streamed one (``BlobConfig.timeout_seconds``)."""

    @field_validator("blob_url")
    @classmethod
    def _blob_url(cls, url: str | None) -> str | None:
        return None if url is None else check_blob_url(url)

    @field_validator("s3_endpoint")
    @classmethod
    def _s3_endpoint(cls, endpoint: str | None) -> str | None:
        return None if endpoint is None else check_s3_endpoint(endpoint)

    @field_validator("s3_secret_access_key")
    @classmethod
    def _s3_keys(cls, secret: str | None, info: ValidationInfo) -> str | None:
        check_s3_keys(info.data.get("s3_access_key_id"), secret)
        return secret

    def blob_config(self) -> BlobConfig:
        """Where blobs live: ``blob_url``, by default ``<data_dir>/blobs``."""
        return BlobConfig(
            url=self.blob_url or f"file://{(self.data_dir / 'blobs').resolve()}",
            s3_endpoint=self.s3_endpoint,
            s3_region=self.s3_region,
            s3_access_key_id=self.s3_access_key_id,
            s3_secret_access_key=self.s3_secret_access_key,
            timeout_seconds=self.blob_timeout_seconds,
        )
