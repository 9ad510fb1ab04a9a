"""web_fetch fetches only URLs the conversation has shown the model, from the
sources its ``url_sources`` allows; anything else is refused when the model's
answer is recorded (``evaluated_permission: deny``, no ``evaluation``)."""

from __future__ import annotations

from typing import Any

import pytest

from stead.harness import response_events
from stead.harness.urls import normalize_url, shown_urls

Json = dict[str, Any]


def agent(system: str | None = None, **fetch: Any) -> Json:
    return {
        "model": {"id": "m"},
        "system": system,
        "tools": [
            {
                "type": "agent_toolset_20260401",
                "default_config": {"enabled": True, "permission_policy": {"type": "always_allow"}},
                "configs": [
                    {
                        "name": "web_fetch",
                        "enabled": True,
                        "permission_policy": {"type": "always_ask"},
                        **fetch,
                    }
                ],
            },
            {"type": "custom", "name": "lookup", "description": "d", "input_schema": {}},
        ],
    }


def said(text: str) -> Json:
    return {"type": "user.message", "id": "u1", "content": [{"type": "text", "text": text}]}


def used(tool_id: str, name: str, custom: bool = False) -> Json:
    kind = "agent.custom_tool_use" if custom else "agent.tool_use"
    return {"type": kind, "id": tool_id, "name": name, "input": {}}


def result(tool_id: str, text: str, *, custom: bool = False, is_error: bool = False) -> Json:
    if custom:
        key, kind = "custom_tool_use_id", "user.custom_tool_result"
    else:
        key, kind = "tool_use_id", "agent.tool_result"
    content = [{"type": "text", "text": text}]
    return {
        "type": kind,
        "id": f"r-{tool_id}",
        key: tool_id,
        "content": content,
        "is_error": is_error,
    }


def verdict(url: str, events: list[Json], owner: Json) -> Json:
    block = {"type": "tool_use", "id": "toolu_1", "name": "web_fetch", "input": {"url": url}}
    ((_, body),) = response_events([block], owner, events)
    return body


def allowed(url: str, events: list[Json], owner: Json | None = None) -> bool:
    body = verdict(url, events, owner or agent())
    return bool(body["evaluated_permission"] != "deny")


def test_a_url_from_a_user_message_may_be_fetched_after_the_policy() -> None:
    body = verdict("https://docs.example.com/a", [said("read https://docs.example.com/a")], agent())
    assert (body["evaluated_permission"], body["evaluation"]) == ("ask", {"type": "always_ask"})


def test_a_url_the_model_made_up_is_refused_before_any_policy() -> None:
    body = verdict("https://evil.example/?d=secret", [said("hello")], agent())
    assert body["evaluated_permission"] == "deny" and "evaluation" not in body
    assert "has not appeared in this conversation" in body["_internal"]["refusal"]


def test_the_system_prompt_counts_as_user_input() -> None:
    owner = agent("Our docs live at https://docs.example.com/start.")
    assert allowed("https://docs.example.com/start", [said("go")], owner)
    assert not allowed(
        "https://docs.example.com/start",
        [said("go")],
        agent(
            "Our docs live at https://docs.example.com/start.",
            url_sources={"user_input": {"type": "none"}},
        ),
    )


LOG = [
    said("see https://u.example/"),
    used("c1", "lookup", custom=True),
    result("c1", "see https://a.example/x", custom=True),
    used("w1", "web_search"),
    result("w1", "1. B\n   https://b.example/y"),
    used("w2", "web_fetch"),
    result("w2", "web_fetch: https://c.example/z answered HTTP 404", is_error=True),
    used("b1", "bash"),
    result("b1", "https://d.example/w"),
]
"""A user message, a custom tool's result, a search result, a failed fetch
(quoting its URL) and a command's output, each showing one URL."""


def test_results_of_custom_and_web_tools_count_but_not_errors_or_sandbox_output() -> None:
    assert allowed("https://a.example/x", LOG)
    assert allowed("https://b.example/y", LOG)
    assert not allowed("https://c.example/z", LOG)
    assert not allowed("https://d.example/w", LOG)


def test_url_sources_narrow_each_source() -> None:
    only_search = {
        "user_input": {"type": "none"},
        "client_tool_results": {"type": "none"},
        "server_tool_results": {
            "type": "only",
            "tools": [{"type": "tool_reference", "name": "web_search"}],
        },
    }
    assert shown_urls(LOG, agent(), only_search) == {"https://b.example/y"}
    no_lookup = {"client_tool_results": {"type": "except", "tools": [{"name": "lookup"}]}}
    assert shown_urls(LOG, agent(), no_lookup) == {"https://u.example/", "https://b.example/y"}
    assert not allowed("https://u.example/", LOG, agent(url_sources=only_search))


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("(see https://x.example/a).", "https://x.example/a"),
        ("https://en.example/wiki/Foo_(bar), next", "https://en.example/wiki/Foo_(bar)"),
        ("[label https://l.example/1](https://l.example/2)", "https://l.example/2"),
        ("<https://x.example/q?a=1&b=2>", "https://x.example/q?a=1&b=2"),
        ("HTTP://Example.COM:80", "http://example.com/"),
        ('{"url": "https://j.example/p#top"}', "https://j.example/p"),
    ],
)
def test_urls_are_found_in_text_and_compared_normalised(text: str, url: str) -> None:
    assert url in shown_urls([said(text)], agent(), None)


def test_normalize_url() -> None:
    assert normalize_url("https://Example.com:443#x") == "https://example.com/"
    assert normalize_url("http://[::1]:8080/p?q") == "http://[::1]:8080/p?q"
    assert normalize_url("ftp://example.com/") is None
    assert normalize_url("http://") is None
    assert normalize_url("http://x:99999/") is None
