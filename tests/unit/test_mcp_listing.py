"""``tools/list`` answers with the tools the ``mcp`` SDK refuses left out, as
JSON and as server-sent events."""

from __future__ import annotations

import json
from typing import Any

from stead.tools.mcp.listing import _filtered, _filtered_event

VERSION = "2025-11-25"
FINE = {"name": "fine", "inputSchema": {"type": "object", "properties": {}}}
ODD = {"name": "odd", "inputSchema": {"type": "string"}}


def _answer(*tools: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 3, "result": {"tools": list(tools)}}


def test_a_refused_tool_is_left_out_of_a_json_answer() -> None:
    body = json.dumps(_answer(FINE, ODD, {"name": "none"})).encode()
    assert json.loads(_filtered(body, VERSION)) == _answer(FINE)


def test_an_answer_with_no_refused_tool_is_passed_on_unchanged() -> None:
    body = json.dumps(_answer(FINE)).encode()
    assert _filtered(body, VERSION) is body
    broken = b'{"jsonrpc": "2.0", "id": 3, "result": {"tools": "none"}}'
    assert _filtered(broken, VERSION) is broken
    assert _filtered(b"not json", VERSION) == b"not json"


def test_a_refused_tool_is_left_out_of_an_event() -> None:
    event = ("event: message\ndata: " + json.dumps(_answer(ODD, FINE))).encode()
    lines = _filtered_event(event, VERSION).decode().split("\n")
    assert lines[0] == "event: message"
    assert json.loads(lines[1].removeprefix("data: ")) == _answer(FINE)
    other = b"event: message\ndata: {}"
    assert _filtered_event(other, VERSION) is other
