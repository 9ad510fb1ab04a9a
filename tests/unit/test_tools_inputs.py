"""Tool definitions match the SDK's input types; bad input is the model's to fix."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import beta

from stead.sandbox.local.sandbox import UnsafeLocalSandbox
from stead.tools import (
    DEFINITIONS,
    IDEMPOTENT_TOOLS,
    TOOL_DEFINITIONS,
    TOOL_NAMES,
    run_tool,
    tool_definitions,
)

SDK_INPUTS = {
    "bash": beta.BetaManagedAgentsAgentToolset20260401BashInput,
    "read": beta.BetaManagedAgentsAgentToolset20260401ReadInput,
    "write": beta.BetaManagedAgentsAgentToolset20260401WriteInput,
    "edit": beta.BetaManagedAgentsAgentToolset20260401EditInput,
    "glob": beta.BetaManagedAgentsAgentToolset20260401GlobInput,
    "grep": beta.BetaManagedAgentsAgentToolset20260401GrepInput,
}
WEB_INPUTS = {"web_fetch": {"url"}, "web_search": {"query"}}
"""The SDK gives the web tools no input types (they are server tools there);
these are the inputs of Anthropic's server web_fetch and web_search."""


@pytest.mark.parametrize("definition", TOOL_DEFINITIONS, ids=lambda d: str(d["name"]))
def test_definitions_match_the_sdk_input_types(definition: dict[str, Any]) -> None:
    schema = definition["input_schema"]
    assert schema["type"] == "object" and definition["description"]
    if definition["name"] in WEB_INPUTS:
        fields = WEB_INPUTS[definition["name"]]
        assert set(schema["properties"]) == fields == set(schema["required"])
        return
    model = SDK_INPUTS[definition["name"]]
    assert set(schema["properties"]) == set(model.model_fields)
    required = {name for name, field in model.model_fields.items() if field.is_required()}
    assert set(schema.get("required", [])) == required


def test_names_kinds_and_copies() -> None:
    assert TOOL_NAMES == (
        "bash",
        "read",
        "write",
        "edit",
        "glob",
        "grep",
        "web_fetch",
        "web_search",
    )
    assert frozenset({"read", "glob", "grep", "web_fetch", "web_search"}) == IDEMPOTENT_TOOLS
    assert list(DEFINITIONS) == list(TOOL_NAMES)
    picked = tool_definitions(["grep", "bash"])
    assert [d["name"] for d in picked] == ["grep", "bash"]
    picked[0]["input_schema"]["properties"].clear()  # a copy: the module's stays intact
    assert tool_definitions(["grep"])[0]["input_schema"]["properties"]
    with pytest.raises(KeyError):
        tool_definitions(["computer"])


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "tool_input", "message"),
    [
        ("nope", {}, "unknown tool 'nope'"),
        ("read", "file.txt", "read: the input must be a JSON object, got a string"),
        ("read", {}, "read: file_path is required"),
        ("read", {"file_path": None}, "read: file_path is required"),
        ("read", {"file_path": ""}, "read: file_path must not be empty"),
        ("read", {"file_path": 3}, "read: file_path must be a string, got a number"),
        ("read", {"file_path": "a", "view_range": [1]}, "read: view_range must be"),
        ("read", {"file_path": "a", "view_range": "1-2"}, "read: view_range must be"),
        ("read", {"file_path": "a", "view_range": [1, True]}, "read: view_range must be"),
        ("write", {"file_path": "a"}, "write: content is required"),
        ("write", {"file_path": "a", "content": ["x"]}, "write: content must be a string"),
        ("edit", {"file_path": "a", "old_string": "x"}, "edit: new_string is required"),
        (
            "edit",
            {"file_path": "a", "old_string": "x", "new_string": "y", "replace_all": "yes"},
            "edit: replace_all must be a boolean, got a string",
        ),
        ("bash", {"command": ["ls"]}, "bash: command must be a string, got an array"),
        ("bash", {"command": "ls", "timeout_ms": "5"}, "bash: timeout_ms must be an integer"),
        ("bash", {"command": "ls", "timeout_ms": 1.5}, "bash: timeout_ms must be an integer"),
        ("bash", {"command": "ls", "timeout_ms": -1}, "bash: timeout_ms must not be negative"),
        ("bash", {"restart": 1}, "bash: restart must be a boolean, got a number"),
        ("glob", {"path": "."}, "glob: pattern is required"),
        ("grep", {"pattern": "x", "path": {}}, "grep: path must be a string, got an object"),
    ],
)
async def test_bad_input_is_a_tool_error(
    sandbox: UnsafeLocalSandbox, name: str, tool_input: object, message: str
) -> None:
    outcome = await run_tool(name, tool_input, sandbox, op_key="k")
    assert outcome.is_error
    [block] = outcome.content
    assert block["type"] == "text" and block["text"].startswith(message)


@pytest.mark.anyio
async def test_lenient_where_harmless(sandbox: UnsafeLocalSandbox) -> None:
    extra = {"command": "echo ok", "timeout_ms": 5000.0, "unknown_field": 1, "restart": None}
    outcome = await run_tool("bash", extra, sandbox, op_key="k")
    assert not outcome.is_error and outcome.content == [{"type": "text", "text": "ok"}]
