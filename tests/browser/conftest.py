"""Fixtures of the console's browser tests: a ``stead serve`` with a real sandbox
host and the scripted fake model, an SDK client of it, Debian's Chromium, a
page of the console."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess
from tests.browser.console_pages import CHROMIUM, CHROMIUM_ARGS, WAIT_MS, scripted
from tests.conftest import loop_env, make_client


@pytest.fixture(scope="module")
def stead(tmp_path_factory: pytest.TempPathFactory, forker: ServeForker) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("console")
    host = HostProcess(root / "host").start()
    try:
        with FakeModel(scripted) as fake:
            env = loop_env(fake, **host.settings_env)
            server = ServerProcess(root / "data", env=env, forker=forker).start()
            yield server
            server.stop()
    finally:
        host.stop()


@pytest.fixture(scope="module")
def sdk(stead: ServerProcess) -> Iterator[anthropic.Anthropic]:
    assert stead.first_key
    with make_client(stead.url, stead.first_key) as client:
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail("no /usr/bin/chromium: ./scripts/setup installs it")
    with sync_playwright() as playwright:
        opened = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield opened
        opened.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("STEAD_SCREENSHOT_DIR")
    folder = Path(given) if given else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page(browser: Browser, stead: ServerProcess) -> Iterator[Page]:
    context = browser.new_context(base_url=stead.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    expect.set_options(timeout=WAIT_MS)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    yield opened
    context.close()
    assert not problems, f"the page's scripts failed: {problems}"
