"""``Idempotency-Key`` on POST: the same key and request answer as the first time.

Pure ASGI middleware, inside the request id and telemetry ones. A request
without the header (or not a POST) passes through untouched: no store access.
With it, the caller is authenticated (keys are per workspace), the request is
fingerprinted (method, path and query, body) and the route runs with the key
to claim (``stead.store.KeyClaim``): the route's first write claims it in the
same transaction (``IdempotencyStore.claiming_key``), so a keyed request costs
one write more than a plain one (keeping its answer, after it was sent), not
two. A route that wrote nothing claims the key once it has answered, before
its answer is sent. A route that refused the caller (401, 403) answers so,
and leaves the key alone.

A second request with the key finds it held in its first write, which rolls
back: it waits for the first answer, is replayed it (``Idempotent-Replayed:
true``), or gets a 409 naming the header; if the holder gave the key up
meanwhile, it claims the key and runs the route again.

A 5xx answer, or a route that raised, is not kept: the key is released and a
retry runs again. An answer above ``idempotency_max_answer_bytes`` keeps only
its status, and later requests with the key get a 409 saying so.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

import anyio
from starlette.requests import HTTPConnection, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stead.api.deps import Caller, Services, authenticate, services
from stead.api.errors import ApiError, database_busy, error_response
from stead.store import ClaimState, DatabaseBusy, IdempotencyClaim, IdempotencyKeyHeld, KeyClaim

HEADER = b"idempotency-key"
REPLAYED = (b"idempotent-replayed", b"true")
MAX_KEY_LENGTH = 255
FIRST_POLL_SECONDS = 0.02
LAST_POLL_SECONDS = 0.5
"""Waiting for another request's answer polls the store (it may run in another
process), from the first interval doubling up to the last."""
SECRET_ANSWERS = re.compile(r"/v1/stead/webhooks|/console/|/v1/environments/[^/]+/keys(/|$)")
"""Routes whose answers carry a secret shown once (a webhook's signing secret,
an environment key) or a cookie (the console's login): never kept in the
store, and a replay would lose the cookie, so a key there is refused rather
than ignored."""
CALLER_REFUSED = (401, 403)
"""A route's answers that refuse its caller, not the request: sent as they are,
never replaced by the key's answer nor kept as it (keys are per workspace, and
one workspace's keys may differ in what they may do)."""


@dataclass
class _Answer:
    """What the route sent, kept as it passes through."""

    status: int = 0
    content_type: str | None = None
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    limit: int = 0
    messages: list[Message] = field(default_factory=list)
    """Every message, when the answer is held back until the key is settled."""

    async def hold(self, message: Message) -> None:
        self.record(message)
        self.messages.append(message)

    async def release_to(self, send: Send) -> None:
        for message in self.messages:
            await send(message)

    def record(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            for name, value in message.get("headers", []):
                if name.lower() == b"content-type":
                    self.content_type = value.decode("latin-1")
        elif message["type"] == "http.response.body":
            body = message.get("body", b"")
            self.size += len(body)
            if self.size <= self.limit:
                self.chunks.append(body)

    def body(self) -> bytes | None:
        return b"".join(self.chunks) if self.size <= self.limit else None


class IdempotencyMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        key = _header(scope)
        if key is None:
            await self.app(scope, receive, send)
            return
        if SECRET_ANSWERS.match(scope["path"]):
            refused = (
                f"Idempotency-Key: not accepted on {scope['path']} "
                "(its answers carry a secret or a cookie)"
            )
            await error_response(Request(scope), 400, refused)(scope, receive, send)
            return
        await self._keyed(scope, receive, send, key)

    async def _keyed(self, scope: Scope, receive: Receive, send: Send, key: bytes) -> None:
        request = Request(scope)
        try:
            text = _valid_key(key)
            who = await authenticate(HTTPConnection(scope))
        except ApiError as exc:
            # A bad key is refused here; a bad API key is the route's to refuse.
            if exc.status == 401 or exc.status == 403:
                await self.app(scope, receive, send)
                return
            await error_response(request, exc.status, str(exc))(scope, receive, send)
            return
        except DatabaseBusy as exc:
            await database_busy(request, exc)(scope, receive, send)
            return
        app = services(request)
        body, complete = await _read_body(receive, app.settings.max_request_bytes)
        replay = _replaying(body, complete, receive)
        limit = app.settings.max_request_bytes
        if not complete and len(body) <= limit:
            return  # the client left before its body was sent: nothing ran
        if not complete:
            # Too large to fingerprint. Run without the key, an upload could be
            # made twice by the retries the key is there to make safe.
            refused = (
                f"Idempotency-Key: a keyed request's body may be at most {limit} bytes "
                "(STEAD_MAX_REQUEST_BYTES); send a larger one without the header"
            )
            await error_response(request, 413, refused)(scope, replay, send)
            return
        pending = KeyClaim(
            who.workspace_id,
            text,
            _fingerprint(scope, body),
            ttl_seconds=app.settings.idempotency_ttl_seconds,
            abandoned_seconds=app.settings.idempotency_abandoned_seconds,
        )
        answer = _Answer(limit=app.settings.idempotency_max_answer_bytes)
        try:
            with app.store.claiming_key(pending):
                await self.app(scope, replay, answer.hold)
        except IdempotencyKeyHeld:
            await self._held(request, scope, body, receive, send, app, who, pending)
            return
        except BaseException:
            await _give_up(app, who, pending)
            raise
        if not 0 < answer.status < 500:
            await _give_up(app, who, pending)
            await answer.release_to(send)
            return
        if pending.taken:
            await answer.release_to(send)
            await _keep(app, who, pending.key, pending.token, answer)
            return
        if answer.status in CALLER_REFUSED:
            # The route refused this caller (an admin route for a plain key, say):
            # the key's answer was made for a caller it let in, so it is not this
            # one's to be replayed, and this refusal is not the key's answer.
            await answer.release_to(send)
            return
        await self._settle_unwritten(request, scope, receive, send, app, who, pending, answer)

    async def _held(
        self,
        request: Request,
        scope: Scope,
        body: bytes,
        receive: Receive,
        send: Send,
        app: Services,
        who: Caller,
        pending: KeyClaim,
    ) -> None:
        """The route's write found the key held: wait for its answer, or run
        the route again once the key is ours."""
        try:
            claim = await _claim(app, who, pending.key, pending.fingerprint)
        except DatabaseBusy as exc:
            await database_busy(request, exc)(scope, receive, send)
            return
        if claim.state is ClaimState.CLAIMED:
            assert claim.token is not None
            again = _replaying(body, True, receive)
            await self._run(scope, again, send, app, who, pending.key, claim.token)
            return
        await _answer_for(request, claim)(scope, receive, send)

    async def _settle_unwritten(
        self,
        request: Request,
        scope: Scope,
        receive: Receive,
        send: Send,
        app: Services,
        who: Caller,
        pending: KeyClaim,
        answer: _Answer,
    ) -> None:
        """A route that wrote nothing (a refusal, say): its answer is the key's
        only if the key is free, else the first request's answer is."""
        try:
            claim = await _claim(app, who, pending.key, pending.fingerprint)
        except DatabaseBusy as exc:
            await database_busy(request, exc)(scope, receive, send)
            return
        if claim.state is not ClaimState.CLAIMED:
            await _answer_for(request, claim)(scope, receive, send)
            return
        assert claim.token is not None
        await answer.release_to(send)
        await _keep(app, who, pending.key, claim.token, answer)

    async def _run(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        app: Services,
        who: Caller,
        key: str,
        token: str,
    ) -> None:
        answer = _Answer(limit=app.settings.idempotency_max_answer_bytes)

        async def recording(message: Message) -> None:
            answer.record(message)
            await send(message)

        kept = False
        try:
            await self.app(scope, receive, recording)
            if 0 < answer.status < 500:
                await _keep(app, who, key, token, answer)
                kept = True
        finally:
            if not kept:
                # Shielded: a client that hung up must not leave the key held.
                with anyio.CancelScope(shield=True):
                    await app.store.release_idempotency_key(who.workspace_id, key, token)


async def _keep(app: Services, who: Caller, key: str, token: str, answer: _Answer) -> None:
    await app.store.keep_idempotent_answer(
        who.workspace_id,
        key,
        token,
        status=answer.status,
        content_type=answer.content_type,
        body=answer.body(),
        ttl_seconds=app.settings.idempotency_ttl_seconds,
    )


async def _give_up(app: Services, who: Caller, pending: KeyClaim) -> None:
    """Releases the key a write of the route may have claimed: also when
    ``taken`` is unset, since a write whose caller was cancelled may have
    committed (releasing a key not held under this token does nothing)."""
    # Shielded: a client that hung up must not leave the key held.
    with anyio.CancelScope(shield=True):
        await app.store.release_idempotency_key(who.workspace_id, pending.key, pending.token)


def _header(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == HEADER:  # ASGI servers send header names lower-cased
            return bytes(value)
    return None


def _valid_key(key: bytes) -> str:
    text = key.decode("latin-1").strip()
    if not text or len(text) > MAX_KEY_LENGTH or not text.isascii() or not text.isprintable():
        raise ApiError(
            400, f"Idempotency-Key: give 1 to {MAX_KEY_LENGTH} printable ASCII characters"
        )
    return text


async def _read_body(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The body, and whether it is all there (False: it passed ``limit``)."""
    chunks = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return bytes(chunks), False
        chunks += message.get("body", b"")
        if len(chunks) > limit:
            return bytes(chunks), False
        if not message.get("more_body", False):
            return bytes(chunks), True


def _replaying(body: bytes, complete: bool, receive: Receive) -> Receive:
    """A ``receive`` that gives the route the body already read, then the rest."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replay


def _fingerprint(scope: Scope, body: bytes) -> str:
    digest = hashlib.sha256()
    body = _without_boundary(scope, body)
    for part in (scope["method"].encode(), scope["path"].encode(), scope["query_string"], body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def _without_boundary(scope: Scope, body: bytes) -> bytes:
    """A multipart body with its boundary replaced by a fixed one: clients draw
    a new boundary for each attempt, so the same upload sent again differs only
    there. (The boundary never occurs in the parts, by its definition.)"""
    content_type = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
    kind, _, params = content_type.decode("latin-1").partition(";")
    if kind.strip().lower() != "multipart/form-data":
        return body
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary" and value.strip('"'):
            return body.replace(b"--" + value.strip('"').encode("latin-1"), b"--stead-boundary")
    return body


async def _claim(app: Services, who: Caller, key: str, fingerprint: str) -> IdempotencyClaim:
    """Claims the key, waiting up to ``idempotency_wait_seconds`` while another
    request with the same fingerprint holds it."""
    settings = app.settings
    interval = FIRST_POLL_SECONDS
    with anyio.move_on_after(settings.idempotency_wait_seconds):
        while True:
            claim = await app.store.claim_idempotency_key(
                who.workspace_id,
                key,
                fingerprint,
                ttl_seconds=settings.idempotency_ttl_seconds,
                abandoned_seconds=settings.idempotency_abandoned_seconds,
            )
            if claim.state is not ClaimState.RUNNING:
                return claim
            await anyio.sleep(interval)
            interval = min(interval * 2, LAST_POLL_SECONDS)
    return IdempotencyClaim(ClaimState.RUNNING)


def _answer_for(request: Request, claim: IdempotencyClaim) -> ASGIApp:
    if claim.state is ClaimState.MISMATCH:
        message = "Idempotency-Key: this key was already used with a different request"
        return error_response(request, 409, message, headers={"x-should-retry": "false"})
    if claim.state is ClaimState.RUNNING:
        message = "Idempotency-Key: a request with this key is still in progress; retry later"
        return error_response(request, 409, message, headers={"x-should-retry": "true"})
    if claim.body is None:
        message = (
            "Idempotency-Key: the first answer to this key was too large to keep"
            f" (it was a {claim.status}); read the object it made instead"
        )
        return error_response(request, 409, message, headers={"x-should-retry": "false"})
    return _replayed(claim)


def _replayed(claim: IdempotencyClaim) -> ASGIApp:
    headers = [REPLAYED, (b"content-length", str(len(claim.body or b"")).encode())]
    if claim.content_type is not None:
        headers.append((b"content-type", claim.content_type.encode("latin-1")))

    async def replay(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": claim.status, "headers": headers})
        await send({"type": "http.response.body", "body": claim.body or b""})

    return replay
