"""The runtime keeps every session's actor to itself: an error out of one
session's runs is logged and ends that actor only."""

from __future__ import annotations

from typing import Any, cast

import pytest

from stead.runtime.actor import SessionActor
from stead.runtime.deps import LoopDeps
from stead.runtime.service import Runtime

pytestmark = pytest.mark.anyio


class FailingActor:
    session_id = "sesn_failing"

    async def run(self) -> None:
        raise RuntimeError("a bug in this session's runs")


async def test_an_actor_that_raises_does_not_end_the_runtime(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = Runtime(cast(LoopDeps, None), exclusive=True)
    actor = cast(SessionActor, FailingActor())
    actors: dict[str, Any] = runtime._actors
    actors[actor.session_id] = actor
    await runtime._run_actor(actor)  # before, the error left it: the task group ended
    assert actor.session_id not in actors
    assert "session sesn_failing: its runs stopped on an error" in caplog.text
    assert "RuntimeError: a bug in this session's runs" in caplog.text
