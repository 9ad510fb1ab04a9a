"""Memory under sessions of large events: where a server's RSS levels off.

The agent loop keeps each busy session's log and its rendered messages in
memory (``runtime/logcache.py``, ``runtime/renderings.py``), each cache bounded
by sessions, events and weight. Through the SDK over HTTP to a real ``stead
serve`` (``STEAD_SANDBOX=off``; the fake model, zero delay, in a process of its
own, answering every message briefly), ``SESSIONS`` sessions each take
``TURNS`` turns whose message carries ``MESSAGE_KIB`` of text, one session after
another. Printed: the RSS once started (the baseline), then after every
``STEP`` sessions, and the last over the one a step before: 1.00x when memory
has levelled off, as the weight bound makes it; caches bounded by sessions and
events alone would grow by every session's events up to 256 sessions.
"""

from __future__ import annotations

import anthropic

# isort: split
from _common import rss_mb, size, user_message
from _fake_server import served_without_sandbox

SESSIONS = size("SESSIONS", 120, 2)
STEP = size("STEP", 20, 1)
TURNS = 3
MESSAGE_KIB = size("MESSAGE_KIB", 300, 4)
MODEL = "claude-sonnet-4-6"
WAIT_S = 60.0


def session(client: anthropic.Anthropic, agent_id: str, environment_id: str, text: str) -> None:
    made = client.beta.sessions.create(agent=agent_id, environment_id=environment_id)
    with client.beta.sessions.events.stream(made.id) as stream:
        for turn in range(TURNS):
            client.beta.sessions.events.send(made.id, events=[user_message(f"{turn} {text}")])
            for event in stream:
                if event.type == "session.status_idle":
                    break
                if event.type == "session.error":
                    raise RuntimeError(f"the turn failed: {event}")


def run() -> str:
    with served_without_sandbox("brief") as server:
        assert server.first_key is not None
        client = anthropic.Anthropic(
            base_url=server.url, api_key=server.first_key, max_retries=0, timeout=WAIT_S
        )
        environment_id = client.beta.environments.create(name="bench").id
        agent_id = client.beta.agents.create(name="bench", model=MODEL).id
        started = rss_mb(server.pid)
        text = "x" * (MESSAGE_KIB * 1024)
        levels: dict[int, float] = {}
        for n in range(1, SESSIONS + 1):
            session(client, agent_id, environment_id, text)
            if n % STEP == 0 or n == SESSIONS:
                levels[n] = rss_mb(server.pid)
    checked = sorted(levels)
    before = checked[-2] if len(checked) > 1 else checked[-1]
    last = levels[SESSIONS]
    sent = SESSIONS * TURNS * MESSAGE_KIB / 1024
    steps = ", ".join(f"{n}: {mb:.0f}" for n, mb in levels.items())
    return (
        f"heavy_sessions: RSS once started {started:.0f} MB; after sessions of {TURNS} turns"
        f" of {MESSAGE_KIB} KiB messages ({sent:.0f} MB sent in all) {steps} MB;"
        f" after {SESSIONS} over after {before} = {last / levels[before]:.2f}x (1.00x:"
        f" levelled off); over once started {last / started:.2f}x"
    )


def main() -> None:
    print(run(), flush=True)


if __name__ == "__main__":
    main()
