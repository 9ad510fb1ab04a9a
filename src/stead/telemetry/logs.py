"""The brain's log: JSON lines for a collector, readable text on a terminal.

A line's structured fields travel in ``extra={"fields": {...}}`` and become
JSON keys (or ``key=value`` in text). What must never reach the log: secrets,
bodies, query strings and command text. Terminal WebSocket URLs carry an exec's
command in their query, and uvicorn logs each WebSocket's path with its query
string: ``WebSocketUrlFilter`` cuts the query off those lines.
"""

from __future__ import annotations

import json
import logging
import sys
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

FIELDS = "fields"
"""The ``extra`` key whose dict a formatter renders as structured fields."""
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET = {"alembic": logging.WARNING, "httpx2": logging.WARNING, "httpx": logging.WARNING}
"""httpx logs every request's URL at info; web_fetch URLs are the model's to
write (query strings and all), and the brain logs no URL it was given."""


REQUEST_ID: ContextVar[str | None] = ContextVar("stead_request_id", default=None)
"""The id of the HTTP request the current task serves (``serving_request``)."""


@contextmanager
def serving_request(request_id: str) -> Iterator[None]:
    """Every line logged in the block (by the request's task and the tasks it
    starts) carries ``request_id``, the id its answer's ``request-id`` names."""
    token = REQUEST_ID.set(request_id)
    try:
        yield
    finally:
        REQUEST_ID.reset(token)


class RequestIdField(logging.Filter):
    """Adds the ``request_id`` of the request being served to a line's fields."""

    def filter(self, record: logging.LogRecord) -> bool:
        request_id = REQUEST_ID.get()
        fields = getattr(record, FIELDS, None) or {}
        if request_id is not None and "request_id" not in fields:
            setattr(record, FIELDS, {**fields, "request_id": request_id})
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(getattr(record, FIELDS, None) or {})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """One line a record (a traceback follows its line as it is): a message's
    or a field's control characters are written as escapes (``\\n``,
    ``\\x1b``), and a field's value with a space, ``=`` or ``"`` is quoted,
    so text from outside (an upstream's error, an MCP server's names) can
    neither forge a line or a field nor reach the operator's terminal as codes."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = _escaped(record.message)
        text = super().formatMessage(record)
        fields = getattr(record, FIELDS, None) or {}
        if not fields:
            return text
        return text + " " + " ".join(f"{key}={_value(value)}" for key, value in fields.items())


def _escaped(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(repr(c)[1:-1] if unicodedata.category(c) == "Cc" else c for c in text)


def _value(value: object) -> str:
    text = str(value)
    if text and text.isprintable() and not any(c in text for c in ' ="'):
        return text
    return '"' + _escaped(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


class WebSocketUrlFilter(logging.Filter):
    """Drops the query string from uvicorn's ``"WebSocket <path>"`` lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and '"WebSocket %s"' in record.msg:
            args = record.args
            if isinstance(args, tuple) and len(args) >= 2 and isinstance(args[1], str):
                record.args = (args[0], args[1].partition("?")[0], *args[2:])
        return True


def configure_logging(
    level: str, fmt: Literal["auto", "json", "text"], stream: TextIO | None = None
) -> None:
    """Sends every logger (uvicorn's too: start it with ``log_config=None``) to
    ``stream`` (stderr) in ``fmt``; ``auto`` is JSON unless ``stream`` is a terminal."""
    out = stream if stream is not None else sys.stderr
    handler = logging.StreamHandler(out)
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    handler.setFormatter(JsonFormatter() if use_json else TextFormatter())
    handler.addFilter(WebSocketUrlFilter())
    handler.addFilter(RequestIdField())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name, quiet in QUIET.items():
        logging.getLogger(name).setLevel(quiet)
