"""Which URLs web_fetch may fetch: the ones the conversation has shown the model
(spec §4.6 ``url_sources``), read from the log alone, so the verdict is the
same when a crashed turn is stepped again.

Sources, each ``all`` unless the tool's ``url_sources`` narrows it (``none``,
or ``only``/``except`` a list of tool names):

* ``user_input``: the text of user messages, and the agent's system prompt
  (both written by the people who run the agent);
* ``client_tool_results``: the results of custom tools, by tool name;
* ``server_tool_results``: successful earlier ``web_search`` and ``web_fetch``
  results (an error result may quote the model's own URL, so it counts not).

A URL the model made up, or read in the sandbox (command output, a file), is
refused: that is how a page that injected instructions would carry data out
in a URL. URLs are compared normalised (scheme and host in lower case, no
default port, no fragment, an empty path as ``/``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

from stead.events import EventType
from stead.jsonvalues import Json

_URL = re.compile(r"https?://[^\s<>\"'`]+", re.IGNORECASE)
_TRAILING = ".,;:!?'\")]}>"
_PAIRS = {")": "(", "]": "[", "}": "{"}
_DEFAULT_PORTS = {"http": 80, "https": 443}
SERVER_TOOLS = ("web_search", "web_fetch")
Filter = Callable[[str | None], bool]


def fetch_refusal(url: object, events: Sequence[Json], agent: Json, config: Json) -> str | None:
    """Why web_fetch of ``url`` is refused, or None when the conversation showed
    it (or ``url`` is no URL at all: the tool itself says what is wrong)."""
    wanted = normalize_url(url) if isinstance(url, str) else None
    if wanted is None or wanted in shown_urls(events, agent, config.get("url_sources")):
        return None
    return (
        f"web_fetch: {url} has not appeared in this conversation. web_fetch fetches only "
        "URLs from a user message or the system prompt, a custom tool's result, or an "
        "earlier web_search or web_fetch result (as the agent's url_sources allows); "
        "ask the user for the URL, or search for it"
    )


def shown_urls(events: Sequence[Json], agent: Json, sources: object) -> set[str]:
    """Every normalised URL the allowed sources put in front of the model."""
    user, client, server = _filters(sources if isinstance(sources, Mapping) else {})
    names: dict[str, str] = {}
    texts: list[str] = []
    if user(None) and isinstance(agent.get("system"), str):
        texts.append(agent["system"])
    for event in events:
        kind = event["type"]
        if kind in (EventType.AGENT_TOOL_USE, EventType.AGENT_CUSTOM_TOOL_USE):
            names[event["id"]] = event.get("name", "")
        elif kind == EventType.USER_MESSAGE and user(None):
            texts += _texts(event)
        elif kind == EventType.USER_CUSTOM_TOOL_RESULT:
            if client(names.get(event.get("custom_tool_use_id", ""))):
                texts += _texts(event)
        elif kind == EventType.AGENT_TOOL_RESULT and not event.get("is_error"):
            name = names.get(event.get("tool_use_id", ""))
            if name in SERVER_TOOLS and server(name):
                texts += _texts(event)
    return {url for text in texts for url in _urls_in(text)}


def normalize_url(raw: str) -> str | None:
    """The form URLs are compared in; None if ``raw`` is no http(s) URL with a host."""
    try:
        parts = urlsplit(raw.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def _urls_in(text: str) -> list[str]:
    found = []
    for match in _URL.finditer(text):
        # "[label https://a](https://b)": a Markdown link glued to its label.
        for piece in match.group().split("]("):
            url = normalize_url(_trim(piece))
            if url is not None:
                found.append(url)
    return found


def _trim(url: str) -> str:
    """Drops punctuation that ends the sentence around a URL, keeping a closing
    bracket the URL itself opened (``.../Foo_(bar)``)."""
    while url and url[-1] in _TRAILING:
        opener = _PAIRS.get(url[-1])
        if opener is not None and url.count(opener) >= url.count(url[-1]):
            break
        url = url[:-1]
    return url


def _texts(event: Json) -> list[str]:
    content = event.get("content") or []
    return [
        b["text"] for b in content if b.get("type") == "text" and isinstance(b.get("text"), str)
    ]


def _filters(sources: Mapping[str, object]) -> tuple[Filter, Filter, Filter]:
    return tuple(  # type: ignore[return-value]
        _filter(sources.get(key))
        for key in ("user_input", "client_tool_results", "server_tool_results")
    )


def _filter(value: object) -> Filter:
    """``all`` (also when unset), ``none``, or ``only``/``except`` tool names;
    anything else allows nothing (a filter that guesses fails open)."""
    kind = value.get("type") if isinstance(value, Mapping) else value
    if kind is None or kind == "all":
        return lambda name: True
    if kind in ("only", "except") and isinstance(value, Mapping):
        listed = {t.get("name") for t in value.get("tools") or [] if isinstance(t, Mapping)}
        if kind == "only":
            return lambda name: name in listed
        return lambda name: name is not None and name not in listed
    return lambda name: False
