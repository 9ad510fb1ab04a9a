"""What the harness exchanges with a model provider: a request, a response, errors.

UpstreamError          the provider failed; ``retryable`` says whether to back off
                       and try again, ``error_type`` names the ``session.error``
                       type the spec uses for it, ``too_long`` says the model
                       refused the request as longer than its context window
                       (compacting the context may make it fit), ``too_large``
                       that its API refused it as more bytes than it takes
                       (413; compacting may leave out the media that make it so).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from stead.jsonvalues import Json, canonical, canonical_object


@dataclass(frozen=True)
class ModelRequest:
    """A Messages API request, built deterministically from the session log."""

    model: str
    system: list[Json] | None
    tools: list[Json]
    messages: list[Json]
    max_tokens: int
    messages_json: str | None = field(default=None, compare=False, repr=False)
    """``messages`` in canonical form when the caller has it (``Rendering``
    keeps each finished message's), so a step encodes only what is new."""
    effort: str | None = None
    """The agent's ``model.effort`` level: the Messages API's ``output_config.effort``."""
    speed: str | None = None
    inference_geo: str | None = None

    @cached_property
    def canonical_params(self) -> str:
        """``as_params`` in ``jsonvalues.canonical`` form, made once: its op key
        hashes it and the request is sent in it, and for a long session it is the
        whole conversation."""
        params = self.as_params()
        held = self.messages_json
        if held is None:
            return canonical(params)
        return canonical_object(
            params, lambda key, value: held if key == "messages" else canonical(value)
        )

    def as_params(self) -> Json:
        params: Json = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": self.messages,
        }
        if self.system:
            params["system"] = self.system
        if self.tools:
            params["tools"] = self.tools
        # Only when the agent sets them: a request without them is what it was
        # before they were sent, and so is its op key.
        if self.effort is not None:
            params["output_config"] = {"effort": self.effort}
        if self.speed is not None:
            params["speed"] = self.speed
        if self.inference_geo is not None:
            params["inference_geo"] = self.inference_geo
        return params


CALL_BLOCKS = frozenset({"tool_use", "server_tool_use"})
"""Content blocks that call a tool (the agent's, or one the API runs itself)."""


@dataclass(frozen=True)
class ModelResponse:
    """The finished answer: content blocks in Messages API form, why it stopped, usage."""

    content: list[Json]
    stop_reason: str | None
    usage: dict[str, int] = field(default_factory=dict)
    stop_details: Json | None = None
    """What the upstream said of a ``refusal`` (``category``, ``explanation``)."""

    @property
    def cut_call(self) -> bool:
        """``max_tokens`` cut the answer off inside its last block, a tool call:
        its input reads as far as it came (``rm -rf /home/me/old-build`` may
        read ``rm -rf /home/me/``), so it must be neither logged nor run."""
        return (
            self.stop_reason == "max_tokens"
            and bool(self.content)
            and self.content[-1].get("type") in CALL_BLOCKS
        )


class UpstreamError(Exception):
    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool,
        retry_after: float | None = None,
        error_type: str = "model_request_failed_error",
        too_long: bool = False,
        counted: int | None = None,
        too_large: bool = False,
    ) -> None:
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.error_type = error_type
        self.too_long = too_long
        self.counted = counted
        """With ``too_long``: the tokens the model counted in the request, when it said."""
        self.too_large = too_large
        super().__init__(message)

    def without(self, secrets: Iterable[str]) -> UpstreamError:
        """This error with each of ``secrets`` its message holds replaced: an
        upstream that echoes the request's key in its error would otherwise put
        it in the session's events and the log."""
        message = str(self)
        for secret in secrets:
            if secret:
                message = message.replace(secret, "[redacted]")
        if message == str(self):
            return self
        return UpstreamError(
            message,
            status=self.status,
            retryable=self.retryable,
            retry_after=self.retry_after,
            error_type=self.error_type,
            too_long=self.too_long,
            counted=self.counted,
            too_large=self.too_large,
        )


class AnswerObserver(Protocol):
    """Sees an answer's content blocks while they stream (for stream previews).

    Indexes are the blocks' positions in the answer. Called from the event loop,
    between stream reads: it must not block.
    """

    def block_started(self, index: int, kind: str) -> None: ...

    def text_added(self, index: int, text: str) -> None: ...


class ModelClient(Protocol):
    """One upstream model endpoint."""

    async def complete(
        self, request: ModelRequest, *, op_key: str, observer: AnswerObserver | None = None
    ) -> ModelResponse:
        """Runs ``request`` to its end (streaming underneath) and returns the answer.

        Raises ``UpstreamError``. Cancelling the caller closes the upstream
        stream. ``op_key`` goes to upstreams that accept an idempotency key.
        ``observer`` sees the blocks as they stream, where the upstream streams.
        """
        ...

    async def aclose(self) -> None: ...
