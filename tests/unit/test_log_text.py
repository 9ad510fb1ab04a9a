"""The text log (``STEAD_LOG_FORMAT=text``, the default on a terminal) keeps
each line one line: what a line holds may come from outside (an upstream's
error message, an MCP server's tool names), and a newline in it would forge a
line of its own, an escape sequence would run in the operator's terminal."""

from __future__ import annotations

import io
import logging

from stead.telemetry.logs import FIELDS, TextFormatter


def _line(message: str, *args: object, **fields: object) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    record = logging.LogRecord("stead.turns", logging.WARNING, __file__, 1, message, args, None)
    setattr(record, FIELDS, fields)
    handler.handle(record)
    return stream.getvalue()


def test_control_characters_in_a_message_or_a_field_are_escaped() -> None:
    """Before, each was written as it was."""
    forged = "x\n2026-11-30 10:00:00,000 INFO stead.access: GET /v1/agents 200"
    line = _line("model call failed: %s", forged, tool="a\r\nb", session_id="\x1b[2Jc\x9b")
    assert line.count("\n") == 1 and "\r" not in line and "\x1b" not in line
    assert "\x9b" not in line
    assert "model call failed: x\\n2026-11-30" in line
    assert 'tool="a\\r\\nb"' in line and 'session_id="\\x1b[2Jc\\x9b"' in line


def test_a_field_cannot_pass_for_another() -> None:
    """A value with a space or an = is quoted: it cannot add a field."""
    line = _line("turn ended", session_id="x request_id=forged", outcome="end_turn")
    assert line.rstrip("\n").endswith('session_id="x request_id=forged" outcome=end_turn')


def test_plain_values_and_other_scripts_are_written_as_they_are() -> None:
    line = _line("tool call failed", tool="bash", name="héllo·世界", seconds=1.5)
    assert line.rstrip("\n").endswith("tool=bash name=héllo·世界 seconds=1.5")
