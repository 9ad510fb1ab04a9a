"""Compaction: when a request no longer fits its model's window, which older
part of the conversation the model summarises, and the request that asks it.

Pure functions of the log (rule 3): the same log plans the same compaction,
with the same summarising request, in any process, so a brain that died while
the model wrote the summary asks for it again word for word. The summary is
recorded as ``agent.thread_context_compacted`` (the summary and the ``seq`` of
the first event kept word for word in ``_internal``); the context builder
(``context.py``) starts from the latest one.

The older part ends where the model starts a new answer or the user speaks, and
never between a tool use and its result. The most recent part is kept word for
word, as much of it as fits ``keep_ratio`` of the window. An older part too
large for one summarising request is summarised in pieces, one compaction each;
in that request a text too long for it (and the summary before it) shows its
head and tail only, and a medium (an image, a PDF) that does not fit a note of
what it was (``media.py``), so one huge event never makes compaction impossible.

The summarising request is the agent's own request cut at the boundary, with
the instruction after it, so it reads its prefix from the prompt cache: at a
new answer's boundary that prefix is exactly what the request made there
cached (its last-block breakpoint).

A request the model refused as longer than its window (``prompt is too
long``; the estimate fell short of its count) is recorded on its span's end
with the model's count, and counts as more than the window: the next step
compacts by it, within the same limit of compactions in a row. Its summarising
request sizes media as the model counted that request, so the document that
made it too long is a note there; should the model refuse a summarising
request as too long all the same, the runner asks it once more with every
medium a note (``Compact.without_media``). A request the model's API refused
as more bytes than it takes (413; the runner records only one whose media are
most of its bytes) counts the same, and its summarising request shows no
medium, the part kept holding at most half the refused request's bytes of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stead.events import EventType
from stead.harness.context import (
    event_blocks,
    idle_reason,
    live_context,
    render_messages,
    request_with,
    summary_block,
    without_refused_turns,
)
from stead.harness.mcp import McpTool
from stead.harness.media import (
    MediaRoom,
    left_out,
    media_bytes,
    media_source,
    media_tokens,
    megabytes,
    origin,
)
from stead.harness.memory import MemoryPrompt
from stead.harness.model import ModelRequest, ModelResponse, UpstreamError
from stead.harness.skills import SkillPrompt
from stead.harness.steps import RESULT_KEYS, TOOL_USE_TYPES
from stead.harness.windows import (
    CHARS_PER_TOKEN,
    MediaTokens,
    estimate_tokens,
    tokens_at_most,
)
from stead.jsonvalues import Json

SUMMARY_INSTRUCTION = (
    "Context compaction: the conversation above no longer fits the context window and "
    "will be replaced by your summary of it. Write that summary so the work can go on "
    "without the conversation: what the user asked for, decisions made, what was done "
    "and found (files, commands, results, errors), and what remains to do. Reply with "
    "the summary only; do not call tools."
)
"""The closing user text of a summarising request (a scripted fake model
recognises the request by it)."""
INSTRUCTION_TOKENS = estimate_tokens(SUMMARY_INSTRUCTION)
BOUNDARY_TYPES = (EventType.USER_MESSAGE, EventType.SPAN_MODEL_REQUEST_START)
MIN_PIECE_TOKENS = 256
"""The least of an older event a summarising request shows, however little room."""


@dataclass(frozen=True)
class ContextLimits:
    """``window`` tokens; compact above ``threshold`` of it, keeping at most
    ``keep_ratio`` of it word for word; ``max_consecutive`` compactions in a row."""

    window: int
    threshold: float
    keep_ratio: float
    max_consecutive: int

    @property
    def trigger(self) -> int:
        return int(self.window * self.threshold)

    @property
    def keep(self) -> int:
        return int(self.window * self.keep_ratio)


@dataclass(frozen=True)
class Compact:
    """Ask ``request`` for a summary of the events before ``kept_from`` (a seq)."""

    request: ModelRequest
    kept_from: int
    context_tokens: int
    """How large the request it replaces was (``pre_compaction_tokens``)."""
    summary_tokens: int = MIN_PIECE_TOKENS
    """The most of the summary the request after it has room for, with the
    part kept and the agent's own prompt and tools (``compacted_body``)."""
    without_media: ModelRequest | None = None
    """``request`` with every medium it shows a note, to ask should the model
    refuse ``request`` as too long; None when it shows none."""


@dataclass(frozen=True)
class CompactionLimit:
    """Compacting cannot make the context fit: the turn ends."""

    message: str


def plan_compaction(
    agent: Json,
    events: Sequence[Json],
    builtin_definitions: Mapping[str, Json],
    *,
    max_tokens: int,
    limits: ContextLimits,
    mcp_tools: Sequence[McpTool] = (),
    skills: Sequence[SkillPrompt] = (),
    memory: Sequence[MemoryPrompt] = (),
    request: ModelRequest | None = None,
    media: MediaTokens | None = None,
) -> Compact | CompactionLimit | None:
    """What to do before the model request the log calls for: nothing (None:
    it fits), compact, or give up. ``request``: that request, when the caller
    has built it already (``build_request`` of the same log and arguments), so
    the context is not rendered a second time; ``media``: the PDFs counted so
    far (``windows.MediaTokens``), so that each is counted once."""

    def shaped(messages: list[Json]) -> ModelRequest:
        """The agent's own request (system prompt, skills, tools) with ``messages``."""
        return request_with(
            agent,
            messages,
            builtin_definitions,
            max_tokens=max_tokens,
            mcp_tools=mcp_tools,
            skills=skills,
            memory=memory,
        )

    if request is None:
        request = shaped(render_messages(*live_context(events)))
    window = limits.window
    # Nearly every step fits, and a bound of the estimate shows it: the request
    # is not walked for its size, nor the log split into summary and live part.
    # A request that holds a PDF has no such bound (its pages are ``media``'s).
    bound = tokens_at_most(request.canonical_params)
    if bound is not None and _with_model_count(bound, events, window, media) <= limits.trigger:
        return None
    estimate = estimate_tokens(request.as_params(), media)
    tokens = _with_model_count(estimate, events, window, media)
    if tokens <= limits.trigger:
        return None
    summary, live = live_context(events)
    in_a_row = consecutive_compactions(events, tokens)
    if in_a_row >= limits.max_consecutive:
        return CompactionLimit(
            f"the context was compacted {in_a_row} times in a row and still does not fit "
            f"the model's context window of {window} tokens"
        )
    overhead = estimate_tokens(shaped([]).as_params())
    # What one summarising request can hold: a summary that came back long is
    # cut to half the room, and each older event to a quarter of what is left,
    # so no single piece can make every later compaction impossible.
    room = limits.trigger - overhead - INSTRUCTION_TOKENS
    if summary is not None:
        summary = _shortened(summary, max(room // 2, 0) * CHARS_PER_TOKEN)
    summary_tokens = 0 if summary is None else estimate_tokens(summary_block(summary))
    piece = max((room - summary_tokens) // 4, MIN_PIECE_TOKENS) * CHARS_PER_TOKEN
    # Events are sized by the estimate; where the model counted more (text of
    # few characters a token), the part kept word for word is chosen to fit as
    # the model counts it, or it alone filled the window again: every step
    # compacted, and the request the model counted passed the window.
    scale = max(_undercount(estimate, events, window, media), 1.0)
    # So are an older event's media: a document the model counted far over its
    # estimate, which made the request it refused too long, is a note. After a
    # request refused as too many bytes every one is, and the part kept holds
    # at most half as many.
    byte_room = _byte_room(events)
    media_room = piece // CHARS_PER_TOKEN if byte_room is None else None
    older = [_shown(event, piece, MediaRoom(media_room, scale), media) for event in live]
    sizes = [_tokens(e, media) for e in older]
    cut = choose_cut(
        live,
        overhead,
        limits,
        summary_tokens,
        sizes,
        kept_scale=scale,
        media=media,
        byte_room=byte_room,
    )
    if cut is None and byte_room is not None:
        return CompactionLimit(
            f"the model's API refused a request of {megabytes(2 * byte_room)} as larger than "
            "it takes, and the images and PDFs of the most recent part of the context, which "
            "cannot be summarised, are more than half of that"
        )
    if cut is None:
        return CompactionLimit(
            f"the context (about {tokens} tokens) does not fit the model's context window "
            f"of {window} tokens, and no part of it can be summarised to make it fit"
        )
    asking = shaped(_summarising(summary, older[:cut]))
    # What to ask should the model refuse that request as too long: the media
    # it shows are the likely cause (their count is the estimate's weakest).
    bare = [_shown(event, piece, MediaRoom(None), media) for event in live[:cut]]
    without_media = shaped(_summarising(summary, bare)) if bare != older[:cut] else None
    # What the summary may take of the next request: the window as the model
    # counts it, less what is kept word for word (a longer one would make that
    # request too large, and every later one, however often it is compacted),
    # and at most what the next summarising request shows of it.
    kept = estimate_tokens(shaped(render_messages("", live[cut:])).as_params(), media)
    room_left = min(int(limits.trigger / scale) - kept, room // 2)
    return Compact(
        asking, int(live[cut]["_seq"]), tokens, max(room_left, MIN_PIECE_TOKENS), without_media
    )


def _summarising(summary: str | None, older: Sequence[Json]) -> list[Json]:
    """The messages of a summarising request: ``older`` (after ``summary``),
    then the instruction."""
    messages = render_messages(summary, older)
    instruction: Json = {"type": "text", "text": SUMMARY_INSTRUCTION}
    if messages and messages[-1]["role"] == "user":
        messages[-1]["content"].append(instruction)
    else:
        messages.append({"role": "user", "content": [instruction]})
    return messages


def _undercount(
    estimate: int, events: Sequence[Json], window: int, media: MediaTokens | None
) -> float:
    """How many times the estimate the model counted, by its count of the last
    request it answered (or refused as too long) since the latest compaction
    (1 with none): ``estimate`` of the request ``events`` make, less the
    estimate of what came after that request, is that request's estimate."""
    found = _last_count(events, window)
    if found is None:
        return 1.0
    index, counted = found
    if "too_large" in (events[index].get("_internal") or {}):
        return 1.0  # refused for its bytes: the model counted nothing
    before = estimate - _tail_tokens(events, index, media)
    return counted / max(before, 1)


def _with_model_count(
    estimate: int, events: Sequence[Json], window: int, media: MediaTokens | None
) -> int:
    """The size of the request ``events`` make, of which ``estimate`` is the
    estimate: the model's count of the last request it answered (or refused as
    too long) since the latest compaction, plus the estimate of what came
    after, if that is larger."""
    found = _last_count(events, window)
    if found is None:
        return estimate
    index, counted = found
    return max(estimate, counted + _tail_tokens(events, index, media))


def _tail_tokens(events: Sequence[Json], index: int, media: MediaTokens | None) -> int:
    """The estimate of what the model sees of the events from ``index`` on
    (a refused turn among them is never sent again)."""
    return estimate_tokens(render_messages(None, without_refused_turns(events[index:])), media)


def _last_count(events: Sequence[Json], window: int) -> tuple[int, int] | None:
    """The index of the last answered request's span end since the latest
    compaction, and the tokens the model counted for it (its answer's included).
    A request of a turn that ended in a refusal does not count: its count holds
    the refused turn, which later requests no longer carry (``live_context``).

    A request the model refused as longer than its ``window``, or its API as
    larger than it takes, counts as the model said, and as more than the window
    whatever it said: the request after it is the same context, so it must be
    compacted first, however the estimate counts it."""
    index = _last_end(events)
    if index is None:
        return None
    event = events[index]
    internal = event.get("_internal") or {}
    if "too_long" in internal or "too_large" in internal:
        return index, max(int(internal.get("too_long") or 0), window + 1)
    used = event.get("model_usage") or {}
    counted = sum(
        int(used.get(key, 0))
        for key in (
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        )
    )
    return index, counted


def _last_end(events: Sequence[Json]) -> int | None:
    """The index of the span end ``_last_count`` counts: an answered request's,
    or one refused as too long or too large, since the latest compaction."""
    refused = False
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event["type"] == EventType.AGENT_THREAD_CONTEXT_COMPACTED:
            break
        ended = idle_reason(event)
        if ended is not None and ended != "requires_action":
            # Walking back, a refusal's idle opens a refused turn, and the idle
            # of the turn before it closes it (``without_refused_turns``).
            refused = ended == "refusal"
            continue
        if refused or event["type"] != EventType.SPAN_MODEL_REQUEST_END:
            continue
        internal = event.get("_internal") or {}
        if "too_long" in internal or "too_large" in internal or not event.get("is_error"):
            return index
    return None


def _byte_room(events: Sequence[Json]) -> int | None:
    """The most bytes of media the part kept word for word may hold, when the
    last request (since the latest compaction) was refused as larger than the
    model's API takes: half that request's. None otherwise: no limit."""
    index = _last_end(events)
    if index is None:
        return None
    refused = (events[index].get("_internal") or {}).get("too_large")
    return None if refused is None else int(refused) // 2


def consecutive_compactions(events: Sequence[Json], tokens: int | None = None) -> int:
    """Compactions since the model last answered, in this turn, that did not
    make the context smaller: each is compared with the next one's
    ``pre_compaction_tokens``, the latest with ``tokens`` (the context now;
    none: every one counts). An older part summarised in pieces shrinks the
    context at each piece, however many it takes (after a smaller window is
    configured, say). A turn that ended (at the limit, say) passes none on to
    the next: no answer came after them, so they would count for good."""
    sizes: list[int] = []
    for event in reversed(events):
        if event["type"] == EventType.AGENT_THREAD_CONTEXT_COMPACTED:
            sizes.append(int(event.get("pre_compaction_tokens") or 0))
        elif _answered(event) or _ended_turn(event):
            break
    if tokens is None:
        return len(sizes)
    after = [tokens, *sizes][: len(sizes)]
    return sum(1 for size, then in zip(sizes, after, strict=True) if then >= size)


def _answered(event: Json) -> bool:
    return event["type"] == EventType.SPAN_MODEL_REQUEST_END and not event.get("is_error")


def _ended_turn(event: Json) -> bool:
    """An idle that ends a turn (one that waits for input does not)."""
    ended = idle_reason(event)
    return ended is not None and ended != "requires_action"


def choose_cut(
    live: Sequence[Json],
    overhead: int,
    limits: ContextLimits,
    summary_tokens: int = 0,
    summarised_sizes: Sequence[int] | None = None,
    *,
    kept_scale: float = 1.0,
    media: MediaTokens | None = None,
    byte_room: int | None = None,
) -> int | None:
    """Index in ``live`` of the first event kept word for word: the earliest
    boundary whose kept part fits ``limits.keep``, else the latest one whose kept
    part fits under the trigger. If the part before it is too large to summarise
    in one request under the trigger, an earlier boundary that is not: the next
    compaction summarises the rest. None if there is no such boundary.

    ``overhead``: the system prompt and tools; ``summary_tokens``: the summary
    the older part starts with; ``summarised_sizes``: each event's size as the
    summarising request shows it (``_shown``), if not its own; ``kept_scale``:
    how many times its estimate the model counts the part kept; ``media``: the
    PDFs counted so far; ``byte_room``: the most base64 the kept part's media
    may hold (``_byte_room``)."""
    sizes = [_tokens(event, media) for event in live]
    total = sum(sizes)
    kept = [total]
    for size in sizes:
        kept.append(kept[-1] - size)
    prefix = [0]
    for size in sizes if summarised_sizes is None else summarised_sizes:
        prefix.append(prefix[-1] + size)
    boundaries = _boundaries(live)
    counted = [(overhead + size) * kept_scale for size in kept]
    kept_parts = boundaries if byte_room is None else _within(live, boundaries, byte_room)
    preferred = next((cut for cut in kept_parts if counted[cut] <= limits.keep), None)
    if preferred is None and kept_parts and counted[kept_parts[-1]] <= limits.trigger:
        preferred = kept_parts[-1]
    if preferred is None:
        return None
    asking = overhead + summary_tokens + INSTRUCTION_TOKENS
    room = limits.trigger - asking
    fitting = [cut for cut in boundaries if cut <= preferred and prefix[cut] <= room]
    return fitting[-1] if fitting else None


def _within(live: Sequence[Json], boundaries: Sequence[int], byte_room: int) -> list[int]:
    """The ``boundaries`` whose kept part's media hold at most ``byte_room``."""
    after = [0]
    for event in reversed(live):
        found = event_blocks(event)
        after.append(after[-1] + (0 if found is None else media_bytes(found[1])))
    return [cut for cut in boundaries if after[len(live) - cut] <= byte_room]


def _boundaries(live: Sequence[Json]) -> list[int]:
    """Indexes where the older part may end: at a new answer or a user message,
    after some content, with every tool use before it answered before it."""
    found: list[int] = []
    open_uses: set[str] = set()
    content = False
    for index, event in enumerate(live):
        if index and content and not open_uses and event["type"] in BOUNDARY_TYPES:
            found.append(index)
        if event["type"] in TOOL_USE_TYPES:
            open_uses.add(event["id"])
        elif event["type"] in RESULT_KEYS:
            open_uses.discard(event.get(RESULT_KEYS[event["type"]]))
        found_blocks = event_blocks(event)
        content = content or bool(found_blocks and found_blocks[1])
    return found


def _tokens(event: Json, media: MediaTokens | None) -> int:
    found = event_blocks(event)
    return 0 if found is None else estimate_tokens(found[1], media)


def _shown(event: Json, chars: int, room: MediaRoom, media: MediaTokens | None) -> Json:
    """``event`` as a summarising request shows it (the log keeps it whole):
    every text longer than ``chars`` cut to its head and tail, and its media
    shown while they fit ``room``, each of the others replaced by a note of
    what it was (``media.py``)."""
    shown: Json = _elided(event, chars, room, origin(event), media)
    return shown


def _elided(value: Any, chars: int, room: MediaRoom, where: str, media: MediaTokens | None) -> Any:
    """``value`` (part of an event from ``where``) as ``_shown`` shows it.
    Thinking is left as it is."""
    if isinstance(value, str):
        return _shortened(value, chars)
    if isinstance(value, list):
        return [_elided(item, chars, room, where, media) for item in value]
    if isinstance(value, dict):
        source = media_source(value)
        if source is not None:
            tokens = media_tokens(source, media)
            if not room.takes(tokens):
                return left_out(value, where, tokens)
        if value.get("type") == "base64":
            return value
        # ``_internal`` holds thinking and its signature, which go back to the
        # model exactly as it wrote them or not at all; a medium shown keeps
        # its source.
        whole = ("_internal", "source") if source is not None else ("_internal",)
        return {
            key: item if key in whole else _elided(item, chars, room, where, media)
            for key, item in value.items()
        }
    return value


CUT_MARK_CHARS = 48
"""At most what ``_shortened`` adds to the head and tail it keeps."""


def _shortened(text: str, chars: int) -> str:
    if len(text) <= chars:
        return text
    half = max(chars // 2, 1)
    gone = len(text) - 2 * half
    return f"{text[:half]}\n[... {gone} characters left out ...]\n{text[-half:]}"


def compacted_body(response: ModelResponse, plan: Compact) -> Json:
    """The ``agent.thread_context_compacted`` body recording the model's summary.
    Raises ``UpstreamError`` if the answer holds no text, or is a refusal: its
    text says why the model will not summarise, and recorded as the summary it
    would stand for the whole older conversation in every later request."""
    if response.stop_reason == "refusal":
        message = "the model refused the summarising request; its answer is no summary"
        raise UpstreamError(message, retryable=False)
    summary = "\n".join(
        str(block.get("text", "")) for block in response.content if block.get("type") == "text"
    ).strip()
    if not summary:
        message = "the model answered the summarising request with no text"
        raise UpstreamError(message, retryable=False)
    # Cut as a long older event is cut for the summarising request: its head
    # and tail, saying how much was left out (which the room takes too).
    summary = _shortened(summary, plan.summary_tokens * CHARS_PER_TOKEN - CUT_MARK_CHARS)
    return {
        "pre_compaction_tokens": plan.context_tokens,
        "_internal": {"summary": summary, "kept_from": plan.kept_from},
    }
