"""Which upstream answers which model: OpenAI-compatible servers by name, else Anthropic."""

from __future__ import annotations

from stead.config import Settings
from stead.harness import (
    AnswerObserver,
    AnthropicModel,
    ModelClient,
    ModelRequest,
    ModelResponse,
    OpenAICompatibleModel,
    UpstreamError,
)


class Unconfigured:
    """Stands in when no upstream is configured: every call fails, plainly, offline."""

    def __init__(self, reason: str) -> None:
        self._reason = reason

    async def complete(
        self, request: ModelRequest, *, op_key: str, observer: AnswerObserver | None = None
    ) -> ModelResponse:
        raise UpstreamError(self._reason, retryable=False)

    async def aclose(self) -> None:
        return None


class Scrubbed:
    """``client``, whose errors never hold one of ``secrets`` (``UpstreamError.without``)."""

    def __init__(self, client: ModelClient, secrets: tuple[str, ...]) -> None:
        self._client = client
        self._secrets = secrets

    async def complete(
        self, request: ModelRequest, *, op_key: str, observer: AnswerObserver | None = None
    ) -> ModelResponse:
        try:
            return await self._client.complete(request, op_key=op_key, observer=observer)
        except UpstreamError as exc:
            raise exc.without(self._secrets) from None

    async def aclose(self) -> None:
        await self._client.aclose()


class ModelRouter:
    """Owns one client per upstream; ``aclose`` releases them all."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._clients: dict[str, ModelClient] = {}

    def client_for(self, model: str) -> ModelClient:
        settings = self._settings
        base_url = settings.openai_models.get(model)
        key = f"openai:{base_url}" if base_url else "anthropic"
        if key in self._clients:
            return self._clients[key]
        client: ModelClient
        if base_url:
            client = OpenAICompatibleModel(
                base_url=base_url,
                api_key=settings.openai_api_key,
                read_timeout=settings.model_read_timeout_seconds,
                total_timeout=settings.model_total_timeout_seconds,
            )
        elif settings.anthropic_api_key:
            client = AnthropicModel(
                base_url=settings.upstream_base_url,
                api_key=settings.anthropic_api_key,
                read_timeout=settings.model_read_timeout_seconds,
                total_timeout=settings.model_total_timeout_seconds,
            )
        else:
            client = Unconfigured(
                f"no upstream for model {model!r}: set ANTHROPIC_API_KEY (and "
                "STEAD_UPSTREAM_BASE_URL for another endpoint) or map the model in "
                "STEAD_OPENAI_MODELS"
            )
        secrets = (settings.anthropic_api_key or "", settings.openai_api_key or "")
        self._clients[key] = scrubbed = Scrubbed(client, secrets)
        return scrubbed

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
