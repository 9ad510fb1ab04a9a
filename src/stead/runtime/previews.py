"""Stream previews (spec §3.7) of the answer a model is still streaming.

A ``PreviewTracker`` watches one answer stream and names its events before they
are logged, grouping blocks as ``harness.parse.response_events`` does: a run of
consecutive text blocks with some text is one ``agent.message`` (each block
with text one entry of its ``content``), and each thinking block is one
``agent.thinking``. It publishes an ``event_start`` per event and, for
messages, an ``event_delta`` per text fragment; ``named`` then gives the logged
events the same ids, so each logged event replaces its preview. An event's id
is picked when its first text arrives, so a text run that stays empty (and is
never logged) opens no preview.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from stead.events import EventType
from stead.ids import new_id
from stead.jsonvalues import Json
from stead.runtime.bus import Preview
from stead.store import NewEvent

THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})


class PreviewTracker:
    def __init__(self, publish: Callable[[Preview], None]) -> None:
        self._publish = publish
        self.restart()

    def restart(self) -> None:
        """A new attempt at the request: its answer is named afresh."""
        self._ids: dict[str, list[str]] = {
            EventType.AGENT_MESSAGE: [],
            EventType.AGENT_THINKING: [],
        }
        self._in_text = False
        self._message: str | None = None
        """The id of the message the current text run makes, once it has text."""
        self._entries: dict[int, int] = {}
        """Block index -> entry of the message's ``content``."""

    def block_started(self, index: int, kind: str) -> None:
        if kind == "text":
            if not self._in_text:
                self._in_text, self._message, self._entries = True, None, {}
            return
        self._in_text = False
        if kind in THINKING_BLOCKS:
            self._start(EventType.AGENT_THINKING)

    def text_added(self, index: int, text: str) -> None:
        if self._message is None:
            self._message = self._start(EventType.AGENT_MESSAGE)
        entry = self._entries.setdefault(index, len(self._entries))
        delta: Json = {"type": "content_delta", "index": entry}
        delta["content"] = {"type": "text", "text": text}
        body = {"event_id": self._message, "delta": delta}
        self._publish(Preview(EventType.AGENT_MESSAGE, "event_delta", body))

    def _start(self, kind: str) -> str:
        event_id = new_id("event")
        self._ids[kind].append(event_id)
        body = {"event": {"type": kind, "id": event_id}}
        self._publish(Preview(kind, "event_start", body))
        return event_id

    def named(self, answer: Sequence[tuple[str, Json]]) -> list[NewEvent]:
        """The answer's events, those that were previewed under their preview's id."""
        named = {kind: iter(ids) for kind, ids in self._ids.items()}
        events = []
        for kind, body in answer:
            previewed = named.get(kind)
            event_id = next(previewed, None) if previewed is not None else None
            events.append(NewEvent(event_id or new_id("event"), kind, body))
        return events
