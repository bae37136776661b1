"""Schemathesis against both services' OpenAPI documents: no generated request, valid or
hostile, gets a 5xx (issue 11). A few derandomised cases per operation and generation mode;
``python -m benchmarks.fuzz_api`` runs many."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from benchmarks.fuzz_api import TokenFor, coordinator_client, counting_client, fuzz

EXAMPLES = 5
Factory = Callable[[Path], AbstractContextManager[tuple[TestClient, TokenFor]]]


@pytest.mark.parametrize(
    ("service", "factory"),
    [("coordinator", coordinator_client), ("counting", counting_client)],
    ids=["coordinator", "counting"],
)
def test_no_generated_request_gets_a_server_error(
    tmp_path: Path, service: str, factory: Factory
) -> None:
    with factory(tmp_path) as (client, token_for):
        report = fuzz(service, client.app, client, token_for,  # type: ignore[arg-type]
                      examples=EXAMPLES)
    paths = client.app.openapi()["paths"]  # type: ignore[attr-defined]
    operations = {f"{method.upper()} {path}" for path, item in paths.items() for method in item}
    assert report.operations == operations  # every operation was exercised
    assert report.cases > len(operations) * EXAMPLES
    assert report.failures == []
