"""What ``stead serve`` says at start: which models, sandboxes and store it
uses, a warning when no model is configured, and never a secret."""

from __future__ import annotations

from pathlib import Path

from stead.config import Settings
from stead.startup import summary


def test_no_model_is_said_at_start(tmp_path: Path) -> None:
    models, sandboxes, store = summary(Settings(data_dir=tmp_path, sandbox="off"))
    assert models.startswith("models: none configured, so every turn fails")
    assert sandboxes.startswith("sandboxes: off")
    assert store == f"store: SQLite at {tmp_path / 'stead.db'}"


def test_models_sandboxes_and_store_are_named_without_secrets(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        anthropic_api_key="sk-ant-secret-value",
        openai_models={"llama": "http://user:pw-secret@gpu.internal:8000/v1"},
        # libpq takes a password in the query too; before, the summary printed it.
        database_url="postgresql://stead:db-secret@db.internal:5432/stead?sslpassword=ssl-secret",
    )
    lines = summary(settings)
    text = "\n".join(lines)
    for secret in ("sk-ant-secret-value", "pw-secret", "db-secret", "ssl-secret"):
        assert secret not in text
    assert lines[0] == (
        "models: Anthropic at https://api.anthropic.com; "
        "llama at http://gpu.internal:8000/v1 (OpenAI-compatible)"
    )
    assert lines[1] == (
        f"sandboxes: bwrap, by the sandbox host at {tmp_path / 'sandbox-host' / 'host.sock'}, "
        "started if none answers (it outlives this server; stop it with stead sandbox-host stop)"
    )
    assert lines[2] == (
        "store: PostgreSQL at postgresql://db.internal:5432/stead?sslpassword=REDACTED"
    )
    unsafe = summary(Settings(data_dir=tmp_path, sandbox="unsafe_local"))[1]
    assert "NOT isolated" in unsafe
