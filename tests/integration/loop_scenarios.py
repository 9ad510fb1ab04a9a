"""The fake model's side of ``test_agent_loop``: each session plays the scenario
its first message names, step by step."""

from __future__ import annotations

from typing import Any

from stead.testing import Text, Thinking, ToolCall, Turn
from stead.testing.scripts import assistant_turns

Json = dict[str, Any]
SCENARIOS: dict[str, list[Turn]] = {
    "tools": [
        Turn(
            [
                Text("Writing a note."),
                ToolCall("write", {"file_path": "notes.txt", "content": "hello world\n"}),
            ]
        ),
        Turn([ToolCall("read", {"file_path": "notes.txt"})]),
        Turn(
            [
                ToolCall(
                    "edit", {"file_path": "notes.txt", "old_string": "world", "new_string": "stead"}
                )
            ]
        ),
        Turn([ToolCall("bash", {"command": "cat notes.txt; echo $((6 * 7))"})]),
        Turn([ToolCall("glob", {"pattern": "*.txt"})]),
        Turn([ToolCall("grep", {"pattern": "stead"})]),
        Turn([Text("All done.")]),
    ],
    "custom": [Turn([ToolCall("lookup", {"q": "weather"})]), Turn([Text("Thanks.")])],
    "cutoff": [
        Turn(
            [
                Text("Reading, then cleaning up."),
                ToolCall("read", {"file_path": "notes.txt"}),
                ToolCall("bash", {"command": "touch cut-off"}),
            ],
            stop_reason="max_tokens",
        ),
        Turn([Text("Read it.")]),
    ],
    "refused": [
        Turn(
            [Text("I can't help with that."), ToolCall("bash", {"command": "touch refused"})],
            stop_reason="refusal",
            stop_details={
                "type": "refusal",
                "category": "cyber",
                "explanation": "It could enable harm to computer systems.",
                "fallback_credit_token": "credit-token-of-the-request",
            },
        ),
        # Never played: the refused turn is not shown to the model again.
        Turn([Text("Happy to help with that.")]),
    ],
    "unnamed": [
        Turn(
            [Text("No.")],
            stop_reason="refusal",
            stop_details={"type": "refusal", "category": "a_category_newer_than_the_sdk"},
        ),
    ],
    "ask": [
        Turn([ToolCall("write", {"file_path": "asked.txt", "content": "approved\n"})]),
        Turn([Text("Finished.")]),
    ],
    "sleep": [Turn([ToolCall("bash", {"command": "sleep 30; echo woke > woke.txt"})])],
    "previews": [
        Turn(
            [
                Thinking("Which words to use."),
                Text("A first block, long enough to arrive in several fragments. "),
                Text(""),
                Text("And a second block."),
            ]
        )
    ],
}


def first_user_text(body: Json) -> str:
    for message in body.get("messages", []):
        if message["role"] == "user":
            for block in message["content"]:
                if block.get("type") == "text":
                    return str(block["text"])
    return ""


def scripted(body: Json) -> Turn:
    """Plays the scenario named by the session's first message, step by step."""
    name = first_user_text(body).split()[0] if first_user_text(body) else ""
    turns = SCENARIOS.get(name)
    if turns is None:
        return Turn([Text(f"answer {assistant_turns(body)}")])
    step = assistant_turns(body)
    return turns[step] if step < len(turns) else Turn([Text("done")])


def slow_first_answer(request: Any) -> bool:
    return first_user_text(request.body).startswith("slow") and assistant_turns(request.body) == 0
