"""The served OpenAPI document, fuzzed: no 5xx, and no status the document does not list.

schemathesis generates valid and invalid requests for every operation from
``/openapi.json`` (bodies, query and path parameters) and sends them, as an
authenticated client, to a server of this module's own. Bounded for the test
suite; ``bench/fuzz.py`` runs the same with many more examples.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Flaky
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import status_code_conformance

from stead.api import create_app
from stead.config import Settings
from stead.testing import FakeModel, ServeForker, ServerProcess, client_tls
from tests.conftest import loop_env, serving

EXAMPLES = int(os.environ.get("STEAD_FUZZ_EXAMPLES", "8"))
"""Examples per operation and generation mode; ``bench/fuzz.py`` raises it. No
example database is kept, so each run of the suite draws new ones."""
STREAMS = "/v1/sessions/{session_id}/events/stream"
CHECKS = [not_a_server_error, status_code_conformance]


@pytest.fixture(scope="module")
def fuzzed_server(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModel, forker: ServeForker
) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("stead-fuzz"), loop_env(fake_model), forker)


def openapi_document() -> dict[str, Any]:
    """The document the server serves, built in-process so that schemathesis can
    parametrize the tests at collection (``test_the_served_document_is_this_one``
    checks that the running server serves the same)."""
    return create_app(Settings()).openapi()


# An event stream answers 200 and stays open: its statuses are checked by hand in
# test_bad_input, not here.
schema = schemathesis.openapi.from_dict(openapi_document()).exclude(path=STREAMS)


def test_the_served_document_is_this_one(fuzzed_server: ServerProcess) -> None:
    served = httpx2.get(f"{fuzzed_server.url}/openapi.json", timeout=30, verify=client_tls()).json()
    assert served == openapi_document()


OPERATIONS = [found.ok() for found in schema.get_all_operations()]
CASES = [
    pytest.param(op, mode, id=f"{mode.value}-{op.method.upper()} {op.path}")
    for op in OPERATIONS
    for mode in GenerationMode
    # An operation that takes nothing has no invalid request to make.
    if mode is GenerationMode.POSITIVE
    or any(map(len, (op.path_parameters, op.query, op.headers, op.body)))
]
"""Every operation and generation mode as a test of its own: ``schema.parametrize()``
runs the operations as subtests of one test, which under pytest-xdist ran only a
fraction of them."""


@pytest.mark.parametrize(("operation", "mode"), CASES)
def test_no_server_error_and_every_status_documented(
    operation: Any, mode: GenerationMode, fuzzed_server: ServerProcess
) -> None:
    key = fuzzed_server.first_key
    assert key

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    def check(case: schemathesis.Case) -> None:
        case.call_and_validate(
            base_url=fuzzed_server.url, headers={"x-api-key": key}, checks=CHECKS, timeout=30
        )

    check()


def test_stateful_sequences(fuzzed_server: ServerProcess) -> None:
    """Sequences that use what earlier answers returned (an agent made, then updated,
    archived, listed; a session on it ...), through the links schemathesis infers."""
    key = fuzzed_server.first_key
    assert key
    failures: list[BaseException] = []

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"base_url": fuzzed_server.url, "headers": {"x-api-key": key}, "timeout": 30}

        def validate_response(
            self, response: schemathesis.Response, case: schemathesis.Case, **kwargs: Any
        ) -> None:
            try:
                case.validate_response(response, checks=CHECKS)
            except FailureGroup as failed:
                failures.append(failed)
                raise

    # The server keeps what earlier examples made (a name once taken is a 409 the
    # next time), so a replay can take another path; hypothesis calls that flaky.
    # What counts is whether a check ever failed.
    with contextlib.suppress(Flaky):
        Workflow.run(
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=6,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                database=None,
            )
        )
    assert not failures, failures[0]
