"""One web_fetch or web_search call: input checked, the tool's domain lists
built, the work done, every failure turned into an ``is_error`` outcome, and
the session's credential values scrubbed from whatever the model will see."""

from __future__ import annotations

import dataclasses
import logging

from anyio import to_thread

from stead.egress_policy import DomainPolicy, InvalidPolicy
from stead.jsonvalues import Json
from stead.tools.inputs import InputError, WebFetchInput, WebSearchInput, parse_input
from stead.tools.outcome import ToolOutcome
from stead.tools.web.errors import WebError
from stead.tools.web.fetch import Fetched, fetch
from stead.tools.web.guard import CredentialGuard
from stead.tools.web.options import WebOptions
from stead.tools.web.page import page_outcome
from stead.tools.web.search import search

log = logging.getLogger("stead.tools.web")


async def run_web_tool(
    name: str, tool_input: object, config: Json, options: WebOptions, guard: CredentialGuard
) -> ToolOutcome:
    """Runs ``name`` (``web_fetch`` or ``web_search``) with the model's input under
    ``config``, the tool's resolved agent config. Never raises for a failed call;
    cancellation propagates."""
    try:
        parsed = parse_input(name, tool_input)
        policy = DomainPolicy.from_config(config)
        if isinstance(parsed, WebFetchInput):
            fetched = await fetch(parsed.url, policy, options, guard)
            # Up to STEAD_WEB_FETCH_MAX_BYTES of HTML to read: seconds of work,
            # which on the event loop would hold up every session and request.
            made = await to_thread.run_sync(_page, fetched, config.get("max_content_tokens"))
            outcome = _counted(made, name)
        elif isinstance(parsed, WebSearchInput):
            outcome = _counted(await search(parsed.query, policy, options, guard), name)
        else:
            outcome = ToolOutcome.error(f"{name} is not a web tool")
    except InputError as exc:
        outcome = ToolOutcome.error(str(exc))
    except InvalidPolicy as exc:
        outcome = ToolOutcome.error(f"{name}: the agent's {name} config cannot be enforced: {exc}")
    except WebError as exc:
        outcome = ToolOutcome.error(f"{name}: {exc}")
    return guard.scrub(outcome)


def _page(fetched: Fetched, max_content_tokens: int | None) -> ToolOutcome:
    """``page_outcome``; a body that trips the reader in a way it did not
    foresee is the model's tool error, not a failed turn retried until its
    attempts run out (the page is the origin's, whatever it holds)."""
    try:
        return page_outcome(fetched, max_content_tokens)
    except WebError:
        raise
    except Exception:
        log.exception("web_fetch: reading %s failed", fetched.url)
        raise WebError(f"{fetched.url}: the body could not be read") from None


def _counted(outcome: ToolOutcome, name: str) -> ToolOutcome:
    """A call that got its answer is one request of its kind in the session's
    usage (``server_tool_use``, as the hosted service counts its web tools)."""
    if outcome.is_error:
        return outcome
    return dataclasses.replace(outcome, used={f"{name}_requests": 1})
